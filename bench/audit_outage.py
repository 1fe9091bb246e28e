"""The audit database stopped under a recovery for longer than every deadline involved.

On the real local stack (Slurm, Temporal, a private MariaDB of the bench's
own, so nobody else's database goes down), a real `jobmedic worker` in action
mode recovers the same job twice, one after the other:

1. baseline: the audit database stays up;
2. outage: MariaDB is stopped (SIGTERM, then waited for) the moment the
   restart's first scheduler action (the requeue-hold) is under way, kept down
   for `--outage-s` (600 s; --quick: 60 s), longer than the decision deadline,
   the action deadline, the activity timeout and the audit retry pause, then
   started again.

The job is the demo trainer: a GPU lost on one of its nodes (an Xid line
naming it), then a clean second attempt. Per run:
- failure -> running again: the trainer's own "failing now" stamp to the moment
  Slurm shows the job RUNNING with one restart (polled every 0.5 s);
- held: the longest stretch Slurm showed the job held (priority 0, sampled every
  0.5 s, so a shorter hold reads 0), and jobmedic's hold by its own trail
  (requeue-hold confirmed -> release confirmed), against the action deadline;
- entries landed / made: every entry the outage run's workflow made (its
  timeline has one note per entry) is in the store once the database is
  back; against the baseline: the (event, action) steps of the baseline's
  trail found in the outage run's (a checkpoint more or less is the trainer's
  timing, not a lost entry: the lists of differing steps say which); duplicates
  (an idempotency key twice) and order (written in the order made) are checked
  too;
- the backlog the workflow reported while the store was down, and the BEHIND
  line `jobmedic audit` printed then.

Usage: .venv/bin/python bench/audit_outage.py [--quick] [--outage-s S]
The local stack must be up (deploy/up.sh; the bench runs it). The last line is one JSON object.
Uses /tmp/jobmedic-stack-tests.lock like the tests, so it never runs beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import emit_json, print_table  # noqa: E402
from tests.workflows.fault_support import PrivateMariaDB  # noqa: E402
from tests.workflows.harness import Scenario, WorkerProcess, scontrol_job, submit_training, unique  # noqa: E402
from workflows.contracts import EventType  # noqa: E402

LOCK = Path("/tmp/jobmedic-stack-tests.lock")
FULL = {"outage_s": 600.0, "watchdog": {}}  # the defaults: decision 120 s, action 120 s, activity 60 s, pause 60 s
QUICK = {
    "outage_s": 60.0,
    "watchdog": {"decision_deadline_s": 30.0, "action_deadline_s": 20.0, "activity_timeout_s": 10.0,
                 "audit_retry_pause_s": 5.0},
}
DEFAULT_WATCHDOG = {"decision_deadline_s": 120.0, "action_deadline_s": 120.0, "activity_timeout_s": 60.0,
                    "audit_retry_pause_s": 60.0}


def stack() -> dict:
    subprocess.run(["bash", str(ROOT / "deploy" / "up.sh"), "slurm", "temporal", "mysql"], check=True,
                   capture_output=True, timeout=900)
    described = Path(os.environ.get("JOBMEDIC_STACK_DIR", "/tmp/jobmedic-stack"))
    slurm = json.loads((described / "slurm.json").read_text())
    os.environ["SLURM_CONF"] = slurm["slurm_conf"]
    return json.loads((described / "temporal.json").read_text())


def failure_stamp(out_file: Path) -> datetime | None:
    try:
        for line in out_file.read_text(errors="replace").splitlines():
            if line.startswith("[demo] failing now"):
                return datetime.fromisoformat(line.rsplit(" at ", 1)[1].strip())
    except FileNotFoundError:
        return None
    return None


async def requeue_hold_running(address: str, cluster: str, job_id: str) -> bool:
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    from workflows.messages import recovery_query

    client = await Client.connect(address, data_converter=pydantic_data_converter)
    async for wf in client.list_workflows(recovery_query(cluster=cluster, job_id=job_id)):
        desc = await client.get_workflow_handle(wf.id).describe()
        for pending in desc.raw_description.pending_activities:
            if pending.activity_type.name == "requeue_hold":
                return True
    return False


async def made_by_workflow(address: str, cluster: str, job_id: str) -> list[str] | None:
    """The event type of every audit entry the job's workflow made, from its timeline (one note per entry)."""
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    from workflows.messages import QueryNames, TimelineEvent, recovery_query

    kinds = {e.value for e in EventType}
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    async for wf in client.list_workflows(recovery_query(cluster=cluster, job_id=job_id, running=False)):
        events = await client.get_workflow_handle(wf.id).query(QueryNames.TIMELINE, result_type=list[TimelineEvent])
        return [e.event for e in events if e.event in kinds]
    return None


async def backlog_of(address: str, cluster: str, job_id: str) -> int | None:
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    from workflows.messages import JobStatus, QueryNames, recovery_query

    client = await Client.connect(address, data_converter=pydantic_data_converter)
    async for wf in client.list_workflows(recovery_query(cluster=cluster, job_id=job_id)):
        status = await client.get_workflow_handle(wf.id).query(QueryNames.STATUS, result_type=JobStatus)
        return status.audit_backlog
    return None


class Sampler:
    """Slurm's view of the job every 0.5 s: when it runs again, and how long it stays held at a stretch."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.running_again: datetime | None = None
        self.held_since: float | None = None
        self.held_max_s = 0.0
        self.state = ("?", 0)

    def sample(self) -> None:
        job = scontrol_job(self.job_id)
        state, restarts = job.get("JobState", "?"), int(job.get("Restarts", "0") or 0)
        self.state = (state, restarts)
        held = state == "PENDING" and job.get("Priority") == "0"
        now = time.monotonic()
        if held:
            self.held_since = self.held_since or now
            self.held_max_s = max(self.held_max_s, now - self.held_since)
        else:
            self.held_since = None
        if self.running_again is None and state == "RUNNING" and restarts == 1:
            self.running_again = datetime.now(UTC)

    async def until(self, check, *, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sample()
            if check():
                return
            await asyncio.sleep(0.5)
        raise SystemExit(f"audit_outage: timed out after {timeout:.0f} s waiting for {what} (Slurm: {self.state})")


def trail(sc: Scenario, job_id: str) -> list:
    store = sc.store()
    try:
        return sorted(store.query_records(cluster=sc.cluster, job_id=job_id), key=lambda r: r.id)
    finally:
        store.close()


async def one_run(sc: Scenario, db: PrivateMariaDB, *, outage_s: float | None, label: str) -> dict:
    """One recovery; with `outage_s`, the database is down that long from the requeue-hold on."""
    job_id = submit_training(sc.tmp / label, environment=sc.environment, plan="xid,ok", fail_at=30, iterations=120)
    sc.jobs.append(job_id)
    sampler = Sampler(job_id)
    figures: dict = {"job_id": job_id}
    if outage_s is not None:
        deadline = time.monotonic() + 180
        while not await requeue_hold_running(sc.temporal_address, sc.cluster, job_id):
            sampler.sample()
            if time.monotonic() > deadline:
                raise SystemExit("audit_outage: the requeue-hold never started")
            await asyncio.sleep(0.3)
        db.stop()
        down_at = time.monotonic()
        print(f"[{label}] job {job_id}: requeue-hold under way, audit database stopped for {outage_s:.0f} s", flush=True)
        await sampler.until(lambda: sampler.running_again is not None, timeout=outage_s, what="running again")
        figures["running_again_while_db_down"] = True
        backlog_max, behind = 0, ""
        while time.monotonic() - down_at < outage_s:
            sampler.sample()
            backlog_max = max(backlog_max, await backlog_of(sc.temporal_address, sc.cluster, job_id) or 0)
            if not behind:
                told = sc.cli("audit", "--cluster", sc.cluster, "--job", job_id, check=False)
                behind = next((line for line in told.stderr.splitlines() if line.startswith("BEHIND")), "")
            await asyncio.sleep(min(5.0, max(0.1, outage_s - (time.monotonic() - down_at))))
        figures["db_down_s"] = round(time.monotonic() - down_at, 1)
        figures["backlog_max"] = backlog_max
        figures["audit_cli_while_down"] = behind
        db.start()
        print(f"[{label}] audit database back after {figures['db_down_s']:.0f} s", flush=True)
    await sampler.until(lambda: sampler.state == ("COMPLETED", 1), timeout=600, what="COMPLETED after one restart")
    deadline = time.monotonic() + 180
    while EventType.COMPLETED not in [r.entry.event_type for r in trail(sc, job_id)]:
        if time.monotonic() > deadline:
            raise SystemExit("audit_outage: the completed entry never reached the store")
        await asyncio.sleep(1)
    failed_at = failure_stamp(sc.tmp / label / f"train-{job_id}.out")
    figures["failure_to_running_s"] = (
        round((sampler.running_again - failed_at).total_seconds(), 1) if failed_at and sampler.running_again else None
    )
    figures["held_max_s"] = round(sampler.held_max_s, 1)
    records = trail(sc, job_id)
    figures["steps"] = [(r.entry.event_type.value, r.entry.action) for r in records]
    figures["keys_twice"] = len(records) - len({r.entry.idempotency_key for r in records})
    made = await made_by_workflow(sc.temporal_address, sc.cluster, job_id)
    figures["made"] = len(made) if made is not None else None
    figures["made_and_landed"] = (
        sum(min(n, Counter(r.entry.event_type.value for r in records)[k]) for k, n in Counter(made).items())
        if made is not None else None
    )
    # jobmedic's hold by its own trail: the requeue-hold confirmed -> the release confirmed (times the workflow made them)
    confirmed = {r.entry.action: r.entry.timestamp for r in records if r.entry.event_type is EventType.ACTION_CONFIRMED}
    held = confirmed.get("release") and confirmed.get("requeue_hold")
    figures["held_by_trail_s"] = round((confirmed["release"] - confirmed["requeue_hold"]).total_seconds(), 2) if held else None
    figures["in_order"] = [r.entry.timestamp for r in records] == sorted(r.entry.timestamp for r in records)
    return figures


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a 60 s outage and short deadlines (~4 minutes)")
    parser.add_argument("--outage-s", type=float, help="how long the database stays down (default 600, quick 60)")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    outage_s = args.outage_s or plan["outage_s"]
    watchdog = {**DEFAULT_WATCHDOG, **plan["watchdog"]}
    longest = max(watchdog.values())
    if outage_s <= longest:
        parser.error(f"--outage-s {outage_s:g} must exceed every deadline involved (the longest is {longest:g} s)")
    temporal = stack()
    LOCK.touch(exist_ok=True)
    with open(LOCK) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tmp = Path(tempfile.mkdtemp(prefix="jobmedic-audit-outage-"))
        db = PrivateMariaDB()
        db.install()
        db.start()
        sc = Scenario(tmp=tmp, cluster=unique("bo"), environment=unique("env"), audit_url=db.url,
                      temporal_address=temporal["address"], watchdog=dict(plan["watchdog"]),
                      fault_delays={"requeue_hold": 4.0})
        worker = WorkerProcess(sc).start()
        try:
            baseline = await one_run(sc, db, outage_s=None, label="baseline")
            outage = await one_run(sc, db, outage_s=outage_s, label="outage")
        finally:
            worker.stop()
            for job_id in sc.jobs:
                subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
            from tests.workflows.conftest import terminate_cluster_workflows

            await terminate_cluster_workflows(sc.temporal_address, sc.cluster)
            db.remove()
    expected = Counter(map(tuple, baseline["steps"]))
    landed = Counter(map(tuple, outage["steps"]))
    matched = sum(min(n, landed[step]) for step, n in expected.items())
    extra = sum(max(0, n - expected[step]) for step, n in landed.items())
    duplicates = outage["keys_twice"]  # an entry written twice (its idempotency key twice)
    rows = [
        ["baseline (db up)", baseline["failure_to_running_s"], baseline["held_max_s"], baseline["held_by_trail_s"],
         "-", f"{baseline['made_and_landed']}/{baseline['made']}", sum(expected.values()), "-"],
        [f"outage ({outage['db_down_s']:.0f} s down)", outage["failure_to_running_s"], outage["held_max_s"],
         outage["held_by_trail_s"], outage["backlog_max"], f"{outage['made_and_landed']}/{outage['made']}",
         f"{matched}/{sum(expected.values())}", duplicates],
    ]
    print_table(["run", "failure->running s", "held max s (Slurm)", "held s (trail)", "backlog max",
                 "landed/made", "steps as baseline", "dupes"], rows)
    print(f"watchdog: {watchdog}; jobmedic audit while down: {outage['audit_cli_while_down'] or '(no BEHIND line)'}")
    emit_json({
        "bench": "audit_outage",
        "quick": args.quick,
        "outage_s": outage.get("db_down_s"),
        "deadlines_s": watchdog,
        "baseline_failure_to_running_s": baseline["failure_to_running_s"],
        "outage_failure_to_running_s": outage["failure_to_running_s"],
        "running_again_while_db_down": outage.get("running_again_while_db_down", False),
        "baseline_held_max_s": baseline["held_max_s"],
        "outage_held_max_s": outage["held_max_s"],
        "baseline_held_by_trail_s": baseline["held_by_trail_s"],
        "outage_held_by_trail_s": outage["held_by_trail_s"],
        "held_past_action_deadline": max(outage["held_max_s"], outage["held_by_trail_s"] or 0.0)
        > watchdog["action_deadline_s"],
        "entries_expected": sum(expected.values()),
        "entries_landed": matched,
        "entries_extra": extra,
        "steps_missing_vs_baseline": sorted(map(list, (expected - landed).elements())),
        "steps_extra_vs_baseline": sorted(map(list, (landed - expected).elements())),
        "entries_made_by_workflow": outage["made"],
        "entries_made_and_landed": outage["made_and_landed"],
        "duplicates": duplicates,
        "in_order": outage["in_order"],
        "backlog_max": outage.get("backlog_max"),
        "audit_cli_while_down": outage.get("audit_cli_while_down"),
    })
    lost = outage["made"] is None or outage["made_and_landed"] != outage["made"]
    return 0 if not lost and not duplicates and outage["in_order"] else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
