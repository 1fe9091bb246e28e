"""The jobmedic worker process: workflows and activities for every configured cluster.

One worker on the main task queue runs the workflows, the attribution and the
audit activities; one worker per cluster serves that cluster's scheduler task
queue (`jobmedic-slurm-<cluster>`): evidence collection, actions and the watch,
and the cluster's watch workflow itself.

The watch workflow runs on the scheduler queue, not the main one: its shards ask
it for pokes twice a second (a query, which waits for a workflow task slot like
any task), and on the main queue those queries and the poke signals waited behind
the job workflows' tasks. At 10,000 jobs a burst of them (the watch's routine
observations, audit batches) made the queries time out for seconds at a time, so
a failure's poke was taken 5-15 s late. Watches started before this keep running
on the main queue (the main worker still has the workflow) until they are
restarted.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loguru import logger
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import Worker

from activities.attribution import AttributionActivities
from activities.audit import AuditActivities
from activities.scheduler import SchedulerActivities
from activities.screening import LogScreen
from activities.systemic import SystemicActivities, SystemicSchedulerActivities
from activities.watch import WatchActivities, WatchContext
from workers.checks import warn_about_decision_timing
from workers.settings import WORKER_ROLES, ClusterSettings, Settings
from workflows.cluster_watch import ClusterWatchWorkflow, watch_workflow_id
from workflows.contracts import JobInfo, JobKey, OptIn
from workflows.job_recovery import JobRecoveryWorkflow
from workflows.systemic_guard import SystemicGuardWorkflow
from workflows.messages import JobRecoveryInput, WatchdogConfig, WatchInput

if TYPE_CHECKING:  # the adapters are imported where they are built (a cluster may not use them all)
    from adapters.attribution import AttributionClient
    from adapters.logs.files import LogSource
    from adapters.metrics.prometheus import PrometheusClient
    from adapters.slurm.client import SlurmClient

WORKFLOWS = [JobRecoveryWorkflow, ClusterWatchWorkflow, SystemicGuardWorkflow]
# Workflows kept in memory between their tasks: more than the job workflows of the largest cluster at once, with
# room for the ones that start while ended ones wait for their goodbye. The cache is LRU and the watch touches the
# job workflows in the same order every pass, so with even a few more running workflows than this every task was a
# miss: a replay of the whole history (fetched from the server) and a fresh sandbox import of job_recovery.py
# (~20 ms). At 10,000 jobs that was half the workflow worker's time and delayed each failure's detection by seconds.
# A cached workflow costs ~100 KB; only running ones are kept.
MAX_CACHED_WORKFLOWS = 40_000


def recovery_input_factory(cluster: ClusterSettings):
    """How the watch builds a job workflow's input from the job and the cluster's settings."""

    def build(job: JobInfo, key: JobKey) -> JobRecoveryInput:
        opt = job.opt_in.opt_in or OptIn()
        return JobRecoveryInput(
            key=key,
            opt_in=opt,
            environment=opt.environment,
            cluster_mode=cluster.mode,
            may_act=cluster.may_act(opt.environment, opt.mode),
            scheduler_queue=cluster.task_queue,
            policy=cluster.policy,
            watchdog=WatchdogConfig.model_validate(cluster.watchdog.model_dump()),
        )

    return build


def may_act_now(cluster: ClusterSettings):
    """Whether jobmedic may act on a job now: the cluster's settings and the job's current opt-in."""

    def check(job: JobInfo) -> bool:
        opt = job.opt_in.opt_in
        return opt is not None and not job.opt_in.invalid and cluster.may_act(opt.environment, opt.mode)

    return check


def fault_kill_after() -> list[str]:
    """Crash tests only: `JOBMEDIC_FAULT_KILL_AFTER=requeue_hold[,exclude_nodes,...]` makes the worker SIGKILL
    itself right after that scheduler activity's Slurm command returned, before Temporal records its result
    (`activities.scheduler`). Unset in every real deployment, so nothing is killed."""
    raw = os.environ.get("JOBMEDIC_FAULT_KILL_AFTER", "")
    return [name.strip() for name in raw.split(",") if name.strip()]


def hang_bound_factory(cluster: ClusterSettings):
    from activities.detection.hang import hang_bound

    h = cluster.hang

    def bound(iteration_intervals: list[float], checkpoint_intervals: list[float]) -> float:
        return hang_bound(
            iteration_intervals,
            checkpoint_intervals,
            floor_s=h.floor_s,
            ceiling_s=h.ceiling_s,
            default_s=h.default_s,
            factor=h.factor,
        )

    return bound


@dataclass
class ClusterParts:
    """The adapters of one cluster, built once from settings."""

    settings: ClusterSettings
    slurm: SlurmClient
    logs: LogSource
    metrics: PrometheusClient | None
    external: AttributionClient | None


def build_cluster_parts(cluster: ClusterSettings, *, deployment: str = "jobmedic") -> ClusterParts:
    from adapters.slurm.runner import SshRunner
    from workers.factories.logs import watch_log_source
    from workers.factories.slurm import build_slurm_client

    # the watch's whole listings are decoded in a child process: at 10,000 jobs that is a second of GIL a listing
    slurm = build_slurm_client(cluster, deployment=deployment, decode_in_child=True)
    # over SSH the job logs are read by SFTP through the Slurm adapter's own connection
    connection = slurm.runner.connection if isinstance(slurm.runner, SshRunner) else None  # access "ssh"
    logs = watch_log_source(cluster.logs, connection_provider=connection)
    metrics = None
    m = cluster.metrics
    if m.prometheus_url:
        from adapters.metrics.prometheus import PrometheusClient

        metrics = PrometheusClient(
            m.prometheus_url,
            host_label=m.host_label,
            timeout_s=m.timeout_s,
            bearer_token=m.bearer_token.get_secret_value() if m.bearer_token else None,
        )
    external = None
    a = cluster.attribution
    if a.url:
        from adapters.attribution import AttributionClient

        external = AttributionClient(
            a.url, timeout_s=a.timeout_s, bearer_token=a.bearer_token.get_secret_value() if a.bearer_token else None
        )
    return ClusterParts(settings=cluster, slurm=slurm, logs=logs, metrics=metrics, external=external)


def precompile_workflows() -> bool:
    """Byte-compile the workflow modules (their `__pycache__`), once, before the worker takes tasks.

    The workflow sandbox imports the file a workflow is defined in afresh for every workflow it runs (a
    start, or a replay after the cache let it go). Without bytecode on disk, as under
    PYTHONDONTWRITEBYTECODE or from a fresh checkout, each of those imports compiles job_recovery.py
    from source: ~17 ms, against ~0.3 ms to load it compiled; at 10,000 jobs that was most of a
    first pass's CPU. Python reads the bytecode even where it does not write it. False (and a warning)
    when the folder cannot be written: it still works, only slower.
    """
    import compileall
    import io
    from contextlib import redirect_stdout
    from pathlib import Path

    import workflows

    folder = Path(workflows.__file__).parent
    try:
        with redirect_stdout(io.StringIO()):  # compileall names what it could not write on stdout
            ok = compileall.compile_dir(str(folder), quiet=1, maxlevels=0)
    except OSError as exc:
        ok, why = False, str(exc)
    else:
        why = "see the permissions of its __pycache__"
    if not ok:
        logger.warning("could not byte-compile the workflow modules in {} ({}): every workflow start compiles "
                       "them from source (slower at thousands of jobs)", folder, why)
    return bool(ok)


async def build_workers(
    settings: Settings, client: Client, *, clusters: list[ClusterSettings] | None = None, stats: object | None = None,
    role: str = "all", opened: list[SlurmClient] | None = None,
) -> list[Worker]:
    """The Temporal workers of this process. `role`: "all" (one process does everything), or one half of a
    deployment that runs two kinds of process (on one machine, two cores instead of one; or on several):
    "workflows" (the job workflows and their attribution and audit activities, on the main task queue) and
    "clusters" (each cluster's watch and scheduler activities, on its own queue). Both must run somewhere.
    `opened`: the Slurm clients built here are appended to it, for the caller to close when the workers stop."""
    from workers.factories.audit import build_audit_store

    if role not in WORKER_ROLES:
        raise ValueError(f"unknown worker role {role!r}; use one of {', '.join(WORKER_ROLES)}")
    if role != "clusters":
        await asyncio.to_thread(precompile_workflows)
    audit = build_audit_store(settings)
    await asyncio.to_thread(audit.migrate)
    screen = await asyncio.to_thread(LogScreen)  # compiles the pattern catalogue once, up front
    clusters = clusters or settings.clusters
    parts = [build_cluster_parts(c, deployment=settings.deployment) for c in clusters]
    if opened is not None:
        opened.extend(p.slurm for p in parts)
    served = parts if role != "workflows" else []  # the clusters whose queues this process serves
    for part in served:
        await warn_about_decision_timing(part.settings, part.slurm)
    # one external attribution service per deployment: the first cluster's wins for the main queue
    external = next((p.external for p in parts if p.external is not None), None)
    attribution = AttributionActivities(external=external, audit=audit, delays=settings.fault_delays)
    audit_acts = AuditActivities(store=audit)
    systemic = SystemicActivities(client=client)
    workers = [
        Worker(
            client,
            task_queue=settings.temporal.task_queue,
            workflows=WORKFLOWS,
            activities=[attribution.attribute, audit_acts.record_audit, systemic.report_failure, systemic.alert],
            max_cached_workflows=MAX_CACHED_WORKFLOWS,
        )
    ] if role != "clusters" else []
    for part in served:
        c = part.settings
        sched = SchedulerActivities(
            slurm=part.slurm,
            logs=part.logs,
            metrics=part.metrics,
            delays=settings.fault_delays,
            may_act=may_act_now(c),
            kill_after=fault_kill_after(),
        )
        watch = WatchActivities(
            context=WatchContext(
                cluster=c.name,
                environment=c.environment,
                main_queue=settings.temporal.task_queue,
                scheduler_queue=c.task_queue,
                recovery_input=recovery_input_factory(c),
                hang_bound_s=hang_bound_factory(c),
                watches=c.watches,
                systemic_window_s=c.policy.systemic_window_s,
            ),
            slurm=part.slurm,
            logs=part.logs,
            screen=screen,
            client=client,
            audit=audit,
            metrics=part.metrics,
            stats=stats,
            state_store=audit,  # the watch's per-job state lives beside the audit trail (watch_state)
        )
        workers.append(
            Worker(
                client,
                task_queue=c.task_queue,
                workflows=[ClusterWatchWorkflow],  # the cluster's watch (see the module's docstring)
                activities=[
                    sched.read_job,
                    sched.collect_evidence,
                    sched.requeue_hold,
                    sched.exclude_nodes,
                    sched.release_job,
                    sched.cancel_job,
                    sched.drain_nodes,
                    watch.watch_cluster,
                    *_guard_reads(part.slurm, c),
                ],
            )
        )
    return workers


def _guard_reads(slurm, cluster: ClusterSettings) -> list:
    """The systemic guard's scheduler reads for one cluster (activities.systemic)."""

    def watches(job: JobInfo) -> bool:
        return cluster.watches((job.opt_in.opt_in or OptIn()).environment)

    reads = SystemicSchedulerActivities(slurm=slurm, watches=watches)
    return [reads.context, reads.probe]


async def start_watches(settings: Settings, client: Client, *, clusters: list[ClusterSettings] | None = None) -> None:
    """Start each cluster's watch workflow, or leave the running one alone."""
    for c in clusters or settings.clusters:
        await client.start_workflow(
            ClusterWatchWorkflow.run,
            WatchInput(cluster=c.name, poll_interval_s=c.poll_interval_s, scheduler_queue=c.task_queue,
                       shards=c.watch_shards),
            id=watch_workflow_id(c.name),
            task_queue=c.task_queue,  # beside its activities, away from the job workflows' tasks
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )


async def run_worker(
    settings: Settings, client: Client, *, stop: asyncio.Event | None = None, role: str = "all"
) -> None:
    """Run until `stop` is set (or for ever); `role`: see `build_workers`."""
    from workers.metrics_server import WatchStats

    stats = WatchStats()  # the watches' passes, served by the metrics endpoint
    opened: list[SlurmClient] = []
    workers = await build_workers(settings, client, stats=stats, role=role, opened=opened)
    if role != "workflows":
        await start_watches(settings, client)
    logger.info(
        "jobmedic worker up: task queues {} ; clusters {}",
        ", ".join(w.task_queue for w in workers),
        ", ".join(f"{c.name} ({c.mode.value})" for c in settings.clusters),
    )
    stop = stop or asyncio.Event()
    metrics = None
    if settings.metrics_port is not None:
        from workers.factories.audit import build_audit_store
        from workers.metrics_server import start_metrics_server

        metrics = await start_metrics_server(build_audit_store(settings), port=settings.metrics_port,
                                             host=settings.metrics_bind, watch=stats)
    try:
        async with _running(workers):
            await stop.wait()
    finally:
        if metrics is not None:
            await metrics.stop()
        for slurm in opened:  # their SSH connections and listing decoders' child processes
            try:
                await slurm.close()
            except Exception as exc:  # noqa: BLE001 - shutting down: say so and close the rest
                logger.warning("closing cluster {}'s Slurm client failed: {}", slurm.cluster, exc)


class _running:
    def __init__(self, workers: list[Worker]) -> None:
        self._workers = workers
        self._tasks: list[asyncio.Task] = []

    async def __aenter__(self) -> None:
        self._tasks = [asyncio.create_task(w.run()) for w in self._workers]

    async def __aexit__(self, *exc) -> None:
        await asyncio.gather(*(w.shutdown() for w in self._workers), return_exceptions=True)
        await asyncio.gather(*self._tasks, return_exceptions=True)
