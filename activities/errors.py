"""The activity edge: jobmedic errors become Temporal `ApplicationError`s with a type and retryability."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from temporalio.exceptions import ApplicationError

from adapters.errors import JobmedicError


def to_application_error(exc: JobmedicError) -> ApplicationError:
    """Map one of our errors to an ApplicationError named after its class."""
    return ApplicationError(str(exc), type=type(exc).__name__, non_retryable=not exc.retryable)


@contextmanager
def activity_errors() -> Iterator[None]:
    """Wrap an activity body: our errors leave it as typed ApplicationErrors."""
    try:
        yield
    except JobmedicError as exc:
        raise to_application_error(exc) from exc
