"""One way to connect to Temporal, with the pydantic data converter every jobmedic model needs."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from loguru import logger
from temporalio.service import RPCError

from adapters.errors import JobmedicError
from workers.settings import Settings


class TemporalUnreachable(JobmedicError):
    retryable = True


async def end_cluster_workflows(client: Client, cluster: str, *, job_id: str | None = None, reason: str) -> None:
    """Terminate a cluster's watch and its running job workflows (only `job_id`'s, when given)."""
    from workflows.cluster_watch import watch_workflow_id
    from workflows.messages import recovery_query

    ids = [watch_workflow_id(cluster)]
    ids += [wf.id async for wf in client.list_workflows(recovery_query(cluster=cluster, job_id=job_id))]
    for wid in ids:
        try:
            await client.get_workflow_handle(wid).terminate(reason)
        except RPCError as exc:  # already closed
            logger.debug("workflow {} not terminated: {}", wid, exc)


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
