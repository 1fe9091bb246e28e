"""jobmedic's own small error tree.

Adapters translate library errors (subprocess, asyncssh, httpx, sqlalchemy) into
these at their edge (`raise ... from exc`); activities map them to Temporal
`ApplicationError`s with a type and retryability.
"""

from __future__ import annotations


class JobmedicError(Exception):
    """Base of every error jobmedic raises on purpose."""

    #: whether retrying the same call later can succeed
    retryable: bool = False


class ConfigError(JobmedicError):
    """The configuration is invalid; the message names the key and what to do."""


class SchedulerError(JobmedicError):
    """Something went wrong talking to the scheduler."""


class SchedulerUnreachable(SchedulerError):
    """The scheduler (or the SSH host in front of it) did not answer."""

    retryable = True


class JobNotFound(SchedulerError):
    """The job is not (or no longer) known to the scheduler."""


class ActionRefused(SchedulerError):
    """The scheduler refused an action, or jobmedic refused it for safety."""


class ParseError(JobmedicError):
    """Scheduler or tool output that could not be parsed; the message quotes the line."""

    def __init__(self, message: str, *, line: str | None = None) -> None:
        self.line = line
        if line is not None:
            shown = line if len(line) <= 500 else line[:500] + "..."
            message = f"{message}: {shown!r}"
        super().__init__(message)


class LogSourceError(JobmedicError):
    """A log source could not be read."""

    retryable = True


class LogFileMissing(LogSourceError):
    """The job's log file does not exist (yet, or any more)."""

    retryable = False


class MetricsError(JobmedicError):
    """The metrics backend could not be queried."""

    retryable = True


class AuditStoreError(JobmedicError):
    """The audit store could not be written or read."""

    retryable = True


class AttributionServiceError(JobmedicError):
    """The external attribution service failed or answered nonsense."""

    retryable = True
