"""`jobmedic demo`: the whole loop on the real local Slurm cluster, checked end to end.

A small training job opts in and dies on its first attempt with a GPU that
fell off the bus on one node (Xid 79 + NCCL watchdog timeouts). jobmedic, in
action mode for the demo, holds it, blames that node, excludes it and releases
it; the job resumes from its checkpoint on other nodes and completes. With
`--observe` the same failure gets advice only, and Slurm is left untouched.
The demo succeeds only when Slurm and the audit trail say the scenario ended
as it should.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path


from adapters.errors import JobmedicError
from workers.settings import ClusterSettings, Settings
from workers.temporal_client import workflow_page
from workflows.contracts import ActionKind, AdviceAction, AuditEntry, EventType, JobInfo, JobState, Mode

DEMO_CLUSTER = "demo"
DEMO_QUEUE = "jobmedic-demo"
DEMO_ENVIRONMENT = "demo"


class DemoFailed(JobmedicError):
    """The scenario did not end as it should; the message says what differed."""


@dataclass
class DemoOutcome:
    job_id: str
    workflow_id: str
    observe: bool
    blamed_node: str
    first_nodes: list[str]
    final_job: JobInfo
    entries: list[AuditEntry]
    figures: dict[str, float | None] = field(default_factory=dict)


def demo_settings(settings: Settings, *, observe: bool, environment: str = DEMO_ENVIRONMENT) -> Settings:
    """The user's settings with one demo cluster: action mode (unless observing), fast polling.

    The demo watches only jobs that opted in with its own `environment`, so it
    never touches anything else on the cluster.
    """
    base = settings.cluster()
    cluster = base.model_copy(
        update={
            "name": DEMO_CLUSTER,
            "environment": environment,
            "environment_pattern": environment,
            "job_environments": environment,
            "mode": Mode.OBSERVE if observe else Mode.ACTION,
            "acknowledge_scheduler_actions": not observe,
            "poll_interval_s": 1.0,
        }
    )
    temporal = settings.temporal.model_copy(update={"task_queue": DEMO_QUEUE})
    return settings.model_copy(update={"clusters": [ClusterSettings.model_validate(cluster.model_dump())], "temporal": temporal})


def _say(text: str) -> None:
    print(text, flush=True)


async def run_demo(settings: Settings, *, observe: bool, timeout_s: float = 300.0) -> DemoOutcome:
    from workers.factories.audit import build_audit_store
    from workers.factories.slurm import build_slurm_client
    from workers.temporal_client import connect, end_cluster_workflows
    from workers.worker import run_worker

    environment = f"{DEMO_ENVIRONMENT}-{datetime.now():%H%M%S%f}"
    settings = demo_settings(settings, observe=observe, environment=environment)
    cluster = settings.cluster()
    slurm = build_slurm_client(cluster, deployment=settings.deployment)
    nodes = await slurm.list_nodes()
    if len(nodes) < 3:
        raise DemoFailed(f"the demo needs a Slurm cluster with at least 3 nodes, found {len(nodes)}: run deploy/up.sh slurm")
    client = await connect(settings)
    audit = build_audit_store(settings)
    await asyncio.to_thread(audit.migrate)

    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(settings, client, stop=stop))
    job_id: str | None = None
    try:
        workdir = settings.data_dir / "demo" / datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        workdir.mkdir(parents=True, exist_ok=True)
        job_id = await _submit(slurm, workdir, observe=observe, environment=environment)
        _say(f"submitted training job {job_id} (opted in: environment={environment}, "
             f"mode={'observe' if observe else 'action'}); log: {workdir / f'train-{job_id}.out'}")
        return await _follow(settings, slurm, audit, job_id, observe=observe, timeout_s=timeout_s, worker=worker)
    finally:
        stop.set()
        await asyncio.gather(worker, return_exceptions=True)
        # leave nothing of this demo on its task queues (a later demo may run other code)
        await end_cluster_workflows(client, DEMO_CLUSTER, job_id=job_id, reason="demo finished")


async def _submit(slurm, workdir: Path, *, observe: bool, environment: str) -> str:
    script = workdir / "train.sbatch"
    comment = json.dumps({"jobmedic": {"environment": environment, "mode": "observe" if observe else "action",
                                       "checkpoint_dir": str(workdir / "ckpt")}})
    script.write_text(
        "#!/bin/bash\n"
        f"exec {shlex.quote(sys.executable)} -u -m workers.demo_train --checkpoint-dir {shlex.quote(str(workdir / 'ckpt'))}\n"
    )
    argv = [
        "sbatch", "--parsable", "--job-name=jobmedic-demo-train", "--nodes=2", "--ntasks-per-node=2",
        "--requeue", "--open-mode=append", f"--chdir={Path(__file__).resolve().parents[1]}",
        f"--output={workdir}/train-%j.out", f"--comment={comment}", str(script),
    ]
    result = await slurm.runner.run(argv, timeout=30)
    if result.returncode != 0:
        raise DemoFailed(f"sbatch failed: {result.stderr.strip()}")
    return result.stdout.strip().split(";")[0]


async def _follow(settings, slurm, audit, job_id: str, *, observe: bool, timeout_s: float, worker) -> DemoOutcome:
    deadline = time.monotonic() + timeout_s
    shown: set[str] = set()
    first_nodes: list[str] = []
    job: JobInfo | None = None
    entries: list[AuditEntry] = []
    while time.monotonic() < deadline:
        if worker.done():
            exc = worker.exception()
            raise DemoFailed(f"the jobmedic worker stopped: {exc!r}")
        job = await slurm.get_job(job_id)
        if job.state is JobState.RUNNING and not first_nodes:
            first_nodes = list(job.nodes)
            _say(f"job {job_id} running on {','.join(first_nodes)}")
        entries = await asyncio.to_thread(audit.query, cluster=DEMO_CLUSTER, job_id=job_id)
        for e in entries:
            if e.idempotency_key not in shown:
                shown.add(e.idempotency_key)
                _say(f"  audit {e.timestamp:%H:%M:%S.%f}"[:-3] + f"  {e.event_type.value:<19} {_describe(e)}")
        if _finished(job, entries, observe=observe):
            break
        await asyncio.sleep(0.5)
    else:
        raise DemoFailed(f"the scenario did not finish within {timeout_s:.0f}s (job {job_id} is {job.state.value if job else '?'})")
    assert job is not None
    outcome = DemoOutcome(
        job_id=job_id,
        workflow_id=entries[0].workflow_id if entries else "",
        observe=observe,
        blamed_node=first_nodes[1] if len(first_nodes) > 1 else (first_nodes[0] if first_nodes else ""),
        first_nodes=first_nodes,
        final_job=job,
        entries=entries,
    )
    check_outcome(outcome)
    outcome.figures = figures(outcome)
    return outcome


def _finished(job: JobInfo, entries: list[AuditEntry], *, observe: bool) -> bool:
    kinds = {e.event_type for e in entries}
    if observe:
        return EventType.ADVICE in kinds and job.state.finished
    return EventType.COMPLETED in kinds or EventType.STOPPED in kinds


def _describe(e: AuditEntry) -> str:
    bits = [e.action or "", e.category or "", ",".join(e.implicated_nodes), f"rule={e.rule}" if e.rule else "", e.outcome or ""]
    return "  ".join(b for b in bits if b)[:160]


def check_outcome(o: DemoOutcome) -> None:
    """Raise DemoFailed unless Slurm and the audit trail show the expected scenario."""
    kinds = [e.event_type for e in o.entries]
    keys = [e.idempotency_key for e in o.entries]
    problems: list[str] = []
    if len(keys) != len(set(keys)):
        problems.append("the audit trail has duplicate entries")
    advice = [e for e in o.entries if e.event_type is EventType.ADVICE]
    if not advice:
        problems.append("no advice was recorded")
    elif o.blamed_node not in advice[0].implicated_nodes:
        problems.append(f"the advice blamed {advice[0].implicated_nodes}, not {o.blamed_node}")
    elif advice[0].action not in {AdviceAction.RESTART_EXCLUDE, AdviceAction.RESTART_DRAIN}:
        problems.append(f"the advice was {advice[0].action} ({advice[0].rule}), not a restart excluding the node")
    if EventType.DETECTION not in kinds:
        problems.append("the failure was not detected")
    if o.observe:
        if any(k in kinds for k in (EventType.ACTION_REQUESTED, EventType.ACTION_CONFIRMED)):
            problems.append("observe mode issued scheduler actions")
        if o.final_job.restarts != 0 or o.final_job.state is not JobState.FAILED:
            problems.append(f"observe mode changed the job: {o.final_job.state.value}, restarts {o.final_job.restarts}")
    else:
        confirmed = {e.action for e in o.entries if e.event_type is EventType.ACTION_CONFIRMED}
        for action in (ActionKind.REQUEUE_HOLD, ActionKind.EXCLUDE_NODES, ActionKind.RELEASE):
            if action not in confirmed:
                problems.append(f"no confirmed {action}")
        for kind in (EventType.ALLOCATION_RESTART, EventType.PROGRESS_RESTORED, EventType.COMPLETED):
            if kind not in kinds:
                problems.append(f"no {kind.value} entry")
        if o.final_job.state is not JobState.COMPLETED:
            problems.append(f"the job ended {o.final_job.state.value}, not COMPLETED")
        if o.final_job.restarts != 1:
            problems.append(f"the job was restarted {o.final_job.restarts} times, not exactly once")
        if o.blamed_node in o.final_job.nodes:
            problems.append(f"the restarted job ran on the blamed node {o.blamed_node} again")
    if problems:
        raise DemoFailed("the demo scenario did not end as it should:\n  - " + "\n  - ".join(problems))


def figures(o: DemoOutcome) -> dict[str, float | None]:
    """Latencies from the audit trail: failure -> detection -> confirmed action -> running -> progress.

    Computed by `workers.report` (the same figures `jobmedic report` shows), for the first incident.
    Slurm's EndTime has one-second resolution: the first figure is +-1 s.
    """
    from workers.report import first_recovery_figures

    return first_recovery_figures(o.entries)


def print_report(o: DemoOutcome, settings: Settings) -> None:
    ui = workflow_page(settings, o.workflow_id)
    _say("")
    if o.observe:
        _say(f"observe mode: jobmedic advised and recorded, Slurm untouched (job {o.job_id} is "
             f"{o.final_job.state.value}, restarts {o.final_job.restarts}).")
    else:
        _say(f"recovered: job {o.job_id} failed on {','.join(o.first_nodes)} (blamed {o.blamed_node}), "
             f"was restarted once excluding it, and completed on {','.join(o.final_job.nodes)}.")
    _say("figures:")
    for name, value in o.figures.items():
        _say(f"  {name:<34} {'-' if value is None else f'{value:.2f} s'}")
    _say(f"timeline: jobmedic timeline {o.job_id} --cluster {DEMO_CLUSTER}")
    _say(f"audit:    jobmedic audit --cluster {DEMO_CLUSTER} --job {o.job_id} --format json")
    _say(f"Temporal UI: {ui}")
    print(json.dumps({"job_id": o.job_id, "observe": o.observe, **o.figures}), flush=True)
