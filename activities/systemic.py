"""Activities of the systemic guard (`workflows.systemic_guard`).

Main queue: `report_failure` (a job workflow's report, as a signal-with-start
of the cluster's guard) and `systemic_alert` (the optional JSON webhook).
Scheduler queue: `systemic_context` (nodes, failure domains, watched jobs) and
`systemic_probe` (jobs that ran on some nodes since a moment).

Failure domains, read where they are used: `scontrol show topology` lists
`SwitchName=s Level=l ... Nodes=<hostlist>` per switch (22.05; without a
topology plugin it prints "No topology information available" on stderr and
exits 0), `scontrol show partition -o` one partition per line with
`PartitionName=` and `Nodes=`; the settings' `topology` adds racks or
switches by name.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

import httpx
from loguru import logger
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.errors import activity_errors
from adapters.slurm.hostlist import expand
from adapters.slurm.runner import CommandRunner
from workflows.contracts import JobInfo, NodeInfo, PolicyConfig
from workflows.systemic import PARTITION_PREFIX, ClusterContext, JobRun, ProbeResult
from workflows.systemic_guard import (
    AlertInput,
    GuardNames,
    ProbeInput,
    ReportFailureInput,
    SystemicGuardWorkflow,
)

_TOKEN = re.compile(r"(\w+)=(\S*)")
MAX_RUNS = 500


def _domains(text: str, *, name_field: str, prefix: str) -> dict[str, list[str]]:
    """`scontrol show ... -o`-style lines -> {prefix + name: nodes}, for entries that have nodes."""
    domains: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = dict(_TOKEN.findall(line))
        name, nodes = fields.get(name_field), fields.get("Nodes")
        if name and nodes and nodes != "(null)":
            domains[f"{prefix}{name}"] = expand(nodes)
    return domains


def parse_topology(text: str) -> dict[str, list[str]]:
    """`scontrol show topology` -> {"switch:<name>": nodes} (switches with nodes only)."""
    return _domains(text, name_field="SwitchName", prefix="switch:")


def parse_partitions(text: str) -> dict[str, list[str]]:
    """`scontrol show partition -o` -> {"partition:<name>": nodes}."""
    return _domains(text, name_field="PartitionName", prefix=PARTITION_PREFIX)


class SlurmForGuard(Protocol):
    runner: CommandRunner
    timeout: float

    async def list_jobs(self, *, opted_in_only: bool = True) -> list[JobInfo]: ...
    async def list_nodes(self) -> list[NodeInfo]: ...


class SystemicSchedulerActivities:
    """Scheduler-side reads of the systemic guard, on the cluster's scheduler queue."""

    def __init__(self, *, slurm: SlurmForGuard, watches: Callable[[JobInfo], bool] | None = None) -> None:
        """`watches` says whether this deployment watches a job (its opt-in's environment)."""
        self._slurm = slurm
        self._watches = watches

    @activity.defn(name=GuardNames.CONTEXT)
    async def context(self, policy: PolicyConfig) -> ClusterContext:
        with activity_errors():
            nodes, jobs = await asyncio.gather(self._slurm.list_nodes(), self._slurm.list_jobs(opted_in_only=True))
            domains = parse_partitions(await self._scontrol("show", "partition", "-o"))
            domains.update(parse_topology(await self._scontrol("show", "topology")))
            names = {n.name for n in nodes}
            for name, members in policy.topology.items():
                domains[name] = sorted(m for m in members if m in names) or list(members)
            watched = [
                j for j in jobs
                if j.opt_in.opted_in and (self._watches is None or self._watches(j)) and not j.state.finished
            ]
            return ClusterContext(
                nodes=sorted(names),
                domains=domains,
                unavailable=sorted(n.name for n in nodes if n.unhealthy),
                watched_jobs=len(watched),
            )

    async def _scontrol(self, *args: str) -> str:
        """stdout of a read-only scontrol command; "" when it fails (the domains are then what else is known)."""
        result = await self._slurm.runner.run(["scontrol", *args], timeout=self._slurm.timeout)
        if result.returncode != 0:
            logger.warning("scontrol {} failed: {}", " ".join(args), " ".join(result.stderr.split())[:300])
            return ""
        return result.stdout

    @activity.defn(name=GuardNames.PROBE)
    async def probe(self, inp: ProbeInput) -> ProbeResult:
        with activity_errors():
            wanted = set(inp.nodes)
            jobs, nodes = await asyncio.gather(self._slurm.list_jobs(opted_in_only=False), self._slurm.list_nodes())
            since = inp.since if inp.since.tzinfo else inp.since.replace(tzinfo=UTC)
            runs = []
            for job in jobs:
                start = job.start_time.replace(tzinfo=UTC) if job.start_time and job.start_time.tzinfo is None else job.start_time
                end = job.end_time.replace(tzinfo=UTC) if job.end_time and job.end_time.tzinfo is None else job.end_time
                if not wanted & set(job.nodes) or start is None or (end is not None and end < since):
                    continue
                runs.append(JobRun(job_id=job.job_id, state=job.state.value, nodes=job.nodes,
                                   start_time=start, end_time=end))
            return ProbeResult(
                runs=runs[-MAX_RUNS:],
                unavailable=sorted(n.name for n in nodes if n.unhealthy and n.name in wanted),
                at=datetime.now(UTC),
            )


class SystemicActivities:
    """Main-queue activities of the systemic guard: reporting to it and alerting for it."""

    def __init__(self, *, client: Client, http: httpx.AsyncClient | None = None) -> None:
        self._client = client
        self._http = http

    @activity.defn(name=GuardNames.REPORT_FAILURE)
    async def report_failure(self, inp: ReportFailureInput) -> None:
        """Signal the cluster's guard, starting it when it is not running."""
        await self._client.start_workflow(
            SystemicGuardWorkflow.run,
            inp.guard,
            id=inp.guard_id,
            task_queue=activity.info().task_queue,
            start_signal=GuardNames.FAILURE,
            start_signal_args=[inp.report],
        )

    @activity.defn(name=GuardNames.ALERT)
    async def alert(self, inp: AlertInput) -> None:
        """POST the alert as JSON; the timeout bounds each try, the workflow bounds the retries."""
        headers = {"Idempotency-Key": inp.idempotency_key} if inp.idempotency_key else {}
        try:
            if self._http is not None:
                response = await self._http.post(inp.url, json=inp.body, headers=headers, timeout=inp.timeout_s)
            else:
                async with httpx.AsyncClient() as http:
                    response = await http.post(inp.url, json=inp.body, headers=headers, timeout=inp.timeout_s)
        except httpx.HTTPError as exc:
            raise ApplicationError(f"webhook {_safe(inp.url)}: {type(exc).__name__}: {exc}", type="WebhookFailed") from exc
        if response.status_code >= 400:
            raise ApplicationError(
                f"webhook {_safe(inp.url)} answered {response.status_code}: {response.text[:200]}",
                type="WebhookRefused", non_retryable=400 <= response.status_code < 500 and response.status_code != 429,
            )


def _safe(url: str) -> str:
    """The URL without its path and query (webhook URLs often carry a token)."""
    parts = httpx.URL(url)
    return f"{parts.scheme}://{parts.host}{':' + str(parts.port) if parts.port else ''}/…"
