"""One way to connect to Temporal, with the pydantic data converter every jobmedic model needs."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from adapters.errors import JobmedicError
from workers.settings import Settings


class TemporalUnreachable(JobmedicError):
    retryable = True


async def connect(settings: Settings) -> Client:
    """Connect to the configured Temporal frontend, or explain how to start one."""
    address = settings.temporal.address
    try:
        return await Client.connect(
            address, namespace=settings.temporal.namespace, data_converter=pydantic_data_converter
        )
    except (RPCError, RuntimeError, OSError) as exc:
        raise TemporalUnreachable(
            f"cannot reach Temporal at {address} ({exc}); start the dev server with "
            "`deploy/up.sh temporal` or `jobmedic dev`, or set JOBMEDIC_TEMPORAL__ADDRESS"
        ) from exc
