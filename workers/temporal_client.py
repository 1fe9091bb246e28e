"""One way to connect to Temporal, with the pydantic data converter every jobmedic model needs."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from loguru import logger
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

from adapters.errors import ConfigError, JobmedicError
from workers.settings import Settings, TemporalSettings


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
    """Connect to the configured Temporal frontend and check its namespace, or say what to change."""
    t = settings.temporal
    try:
        client = await Client.connect(
            t.address,
            namespace=t.namespace,
            data_converter=pydantic_data_converter,
            tls=tls_config(t),
            api_key=t.api_key.get_secret_value() if t.api_key is not None else None,
        )
        # the frontend accepts any namespace until the first call: a typo would surface as a worker
        # that polls nothing, so ask for it now
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=t.namespace), timeout=timedelta(seconds=10)
        )
    except RPCError as exc:
        raise _explain(exc, t) from exc
    except (RuntimeError, OSError) as exc:
        raise TemporalUnreachable(_unreachable(t, exc)) from exc
    return client


def tls_config(t: TemporalSettings) -> bool | TLSConfig:
    """What `Client.connect(tls=...)` takes for these settings; files are read here, each named when unreadable."""
    if not t.use_tls():
        return False
    tls = t.tls
    if not tls.files_set():
        return True  # the system's roots, the address's host name
    return TLSConfig(
        server_root_ca_cert=_read(tls.ca_file, "temporal.tls.ca_file"),
        client_cert=_read(tls.cert_file, "temporal.tls.cert_file"),
        client_private_key=_read(tls.key_file, "temporal.tls.key_file"),
        domain=tls.server_name,
    )


def _read(path: Path | None, key: str) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{key} = {str(path)!r}: cannot be read ({exc.strerror or exc}); check the path and its permissions") from exc


def _explain(exc: RPCError, t: TemporalSettings) -> JobmedicError:
    if exc.status == RPCStatusCode.NOT_FOUND:
        return ConfigError(
            f"temporal.namespace = {t.namespace!r}: Temporal at {t.address} has no such namespace; set "
            f"temporal.namespace (JOBMEDIC_TEMPORAL__NAMESPACE) to an existing one, or create it with "
            f"`temporal operator namespace create --namespace {t.namespace}`"
        )
    if exc.status in (RPCStatusCode.UNAUTHENTICATED, RPCStatusCode.PERMISSION_DENIED):
        return ConfigError(
            f"Temporal at {t.address} refused jobmedic for namespace {t.namespace!r} ({exc.message}); check "
            "temporal.api_key (JOBMEDIC_TEMPORAL__API_KEY) or temporal.tls.cert_file / key_file"
        )
    return TemporalUnreachable(_unreachable(t, exc))


def _unreachable(t: TemporalSettings, exc: Exception) -> str:
    if t.use_tls():
        hint = "check temporal.tls (ca_file, server_name, cert_file / key_file) and that the server speaks TLS"
    else:
        hint = (
            "start the dev server with `deploy/up.sh temporal` or `jobmedic dev`, or set JOBMEDIC_TEMPORAL__ADDRESS; "
            "a server that requires TLS needs temporal.tls.enabled = true"
        )
    return f"cannot reach Temporal at {t.address} ({exc}); {hint}"


def workflow_page(settings: Settings, workflow_id: str) -> str:
    """The Temporal UI page of one recovery workflow (what an on-call engineer opens first)."""
    base = settings.temporal.ui_url.rstrip("/")
    return f"{base}/namespaces/{quote(settings.temporal.namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"
