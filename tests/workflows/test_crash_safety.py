"""Crash safety: kill -9 the worker inside each stage, restart the Temporal server, stop MySQL.

In every case the recovery completes, the job's Slurm restart count rises by
exactly one, and the audit trail holds each step once. A configured pause at
the start of the stage's activity (`fault_delays`) gives the test the window
to kill the worker while that activity is running.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.ports import free_port as _free_port
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.workflows.conftest import terminate_cluster_workflows
from tests.workflows.fault_support import PrivateMariaDB
from tests.workflows.harness import Scenario, WorkerProcess, scontrol_job, slurm_state, submit_training, wait_for
from workers.devserver import start_dev_server
from workflows.contracts import EventType
from workflows.messages import JobStatus, QueryNames, recovery_query

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(480)]

STAGES = {
    "detect": "collect_evidence",
    "attribute": "attribute",
    "isolate": "exclude_nodes",
    "restart": "release_job",
}




async def _running_activity(address: str, cluster: str, job_id: str, activity: str) -> bool:
    try:
        client = await Client.connect(address, data_converter=pydantic_data_converter)
    except RuntimeError as exc:
        if "not healthy" in str(exc) or "Unavailable" in str(exc):
            return False  # a server just started (or back) answers 'Frontend is not healthy yet': not yet, ask again
        raise
    async for wf in client.list_workflows(recovery_query(cluster=cluster, job_id=job_id)):
        desc = await client.get_workflow_handle(wf.id).describe()
        for pending in desc.raw_description.pending_activities:
            if pending.activity_type.name == activity and pending.state == 2:  # STARTED
                return True
    return False


def _assert_each_step_once(sc: Scenario, job_id: str) -> None:
    entries = sc.entries(job_id)
    steps = Counter((e.event_type, e.action) for e in entries)
    for step in (
        (EventType.DETECTION, None), (EventType.ADVICE, "restart_exclude"),
        (EventType.ACTION_CONFIRMED, "requeue_hold"), (EventType.ACTION_CONFIRMED, "exclude_nodes"),
        (EventType.ACTION_CONFIRMED, "release"), (EventType.ALLOCATION_RESTART, None), (EventType.COMPLETED, None),
    ):
        assert steps[step] == 1, (step, steps)


@pytest.mark.parametrize("stage", list(STAGES))
async def test_worker_killed_inside_a_stage_recovers_exactly_once(
    stage: str, scenario: Scenario, worker: WorkerProcess
) -> None:
    activity = STAGES[stage]
    scenario.watchdog = {"activity_timeout_s": 6.0, "decision_deadline_s": 120.0, "action_deadline_s": 120.0}
    worker.start(fault_delays={activity: 4.0})
    job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan="xid,ok", fail_at=20)
    scenario.jobs.append(job_id)
    await wait_for(
        lambda: _running_activity(scenario.temporal_address, scenario.cluster, job_id, activity),
        timeout=120, what=f"{activity} running", every=0.3,
    )
    worker.kill9()
    replacement = WorkerProcess(scenario, name="worker2").start(fault_delays={})
    try:
        await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=180,
                       what=f"job {job_id} completed after exactly one restart")
        await wait_for(lambda: EventType.COMPLETED in scenario.kinds(job_id), timeout=30, what="completed entry")
        _assert_each_step_once(scenario, job_id)
    finally:
        replacement.stop()




async def test_temporal_server_restart_mid_recovery(tmp_path: Path, scenario: Scenario, worker: WorkerProcess) -> None:
    """A private dev server (its own SQLite file) is stopped while the attribute activity runs, then started again."""
    port, ui = _free_port(), _free_port()
    address = f"127.0.0.1:{port}"
    server = start_dev_server(data_dir=tmp_path / "temporal", address=address, ui_port=ui)
    scenario.temporal_address = address
    try:
        worker.start(fault_delays={"attribute": 5.0})
        job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan="xid,ok", fail_at=20)
        scenario.jobs.append(job_id)
        await wait_for(lambda: _running_activity(address, scenario.cluster, job_id, "attribute"), timeout=120,
                       what="attribute running", every=0.3)
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        await asyncio.sleep(5)
        server = start_dev_server(data_dir=tmp_path / "temporal", address=address, ui_port=ui)
        await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=240, what="completed after one restart")
        await wait_for(lambda: EventType.COMPLETED in scenario.kinds(job_id), timeout=60, what="completed entry")
        _assert_each_step_once(scenario, job_id)
    finally:
        worker.stop()
        await terminate_cluster_workflows(address, scenario.cluster)
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


@pytest.mark.mysql
async def test_mysql_down_for_30s_mid_recovery_loses_no_audit_event(
    tmp_path: Path, scenario: Scenario, worker: WorkerProcess, mysql_url: str
) -> None:
    db = PrivateMariaDB()
    db.install()
    db.start()
    scenario.audit_url = db.url
    try:
        worker.start()
        job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan="xid,ok", fail_at=30)
        scenario.jobs.append(job_id)
        await wait_for(lambda: EventType.CHECKPOINT_SAVED in scenario.kinds(job_id), timeout=90,
                       what="first checkpoint audited")
        db.stop()  # the failure, detection, advice and actions all happen while the audit store is down
        await asyncio.sleep(30)
        db.start()
        await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=180, what="completed after one restart")
        await wait_for(lambda: EventType.COMPLETED in scenario.kinds(job_id), timeout=90, what="completed entry")
        _assert_each_step_once(scenario, job_id)
    finally:
        worker.stop()
        db.remove()


async def test_long_recovery_continues_as_new_and_keeps_its_state(
    tmp_path: Path, scenario: Scenario, worker: WorkerProcess
) -> None:
    """With continue-as-new suggested after 40 events, a full recovery spans several runs and still completes."""
    port, ui = _free_port(), _free_port()
    address = f"127.0.0.1:{port}"
    server = start_dev_server(
        data_dir=tmp_path / "temporal", address=address, ui_port=ui,
        extra_args=["--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=40"],
    )
    scenario.temporal_address = address
    try:
        worker.start()
        job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan="xid,ok", fail_at=20)
        scenario.jobs.append(job_id)
        await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=180, what="completed after one restart")
        await wait_for(lambda: EventType.COMPLETED in scenario.kinds(job_id), timeout=60, what="completed entry")
        _assert_each_step_once(scenario, job_id)
        client = await Client.connect(address, data_converter=pydantic_data_converter)
        runs = [wf async for wf in client.list_workflows(recovery_query(job_id=job_id, running=False))]
        assert len(runs) >= 2, [r.status for r in runs]  # the history was handed over at least once
        assert len({r.run_id for r in runs}) == len(runs)
    finally:
        worker.stop()
        await terminate_cluster_workflows(address, scenario.cluster)
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


async def test_stop_while_deciding_leaves_the_failed_job_untouched(scenario: Scenario, worker: WorkerProcess) -> None:
    """`jobmedic stop` while the verdict is being made: nothing was done before the decision, nothing is done after."""
    worker.start(fault_delays={"attribute": 6.0})
    job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan="xid,ok", fail_at=20)
    scenario.jobs.append(job_id)
    await wait_for(lambda: _running_activity(scenario.temporal_address, scenario.cluster, job_id, "attribute"),
                   timeout=120, what="attribute running", every=0.3)
    assert slurm_state(job_id) == ("FAILED", 0)  # decide, then act: not held while deciding
    assert scenario.cli("stop", job_id).returncode == 0
    await wait_for(lambda: EventType.STOPPED in scenario.kinds(job_id), timeout=60, what="stopped entry")
    assert EventType.ACTION_REQUESTED not in scenario.kinds(job_id)
    await asyncio.sleep(3)
    assert slurm_state(job_id) == ("FAILED", 0)


async def test_stop_in_the_middle_of_a_restart_only_undoes_jobmedics_hold(
    scenario: Scenario, worker: WorkerProcess
) -> None:
    """`jobmedic stop` after the requeue-hold of a restart: the hold jobmedic placed is released, nothing more."""
    worker.start(fault_delays={"exclude_nodes": 6.0})
    job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan="xid,ok", fail_at=20)
    scenario.jobs.append(job_id)
    await wait_for(lambda: _running_activity(scenario.temporal_address, scenario.cluster, job_id, "exclude_nodes"),
                   timeout=120, what="exclude_nodes running", every=0.3)
    held = scontrol_job(job_id)
    assert (held["JobState"], held["Reason"], held["AdminComment"]) == (
        "PENDING", "job_requeued_in_held_state", "jobmedic:jobmedic"), held
    assert scenario.cli("stop", job_id).returncode == 0
    await wait_for(lambda: EventType.STOPPED in scenario.kinds(job_id), timeout=60, what="stopped entry")
    entries = scenario.entries(job_id)
    confirmed = [(e.action, e.outcome or "") for e in entries if e.event_type is EventType.ACTION_CONFIRMED]
    # the exclusion already under way completes; the restart's own release never comes, the halt's does
    assert [a for a, _ in confirmed] == ["requeue_hold", "exclude_nodes", "release"], confirmed
    assert "stopped" in confirmed[-1][1]
    # back to normal scheduling: Slurm runs it again, without jobmedic
    await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=120, what="completed after release")


def _failing_node(sc: Scenario, job_id: str) -> str:
    """The node the demo job's failing attempt blames (the second of its first allocation)."""
    out = (sc.tmp / "job" / f"train-{job_id}.out").read_text()
    return out.split("[demo] attempt 1 on ", 1)[1].split(" ", 1)[0].split(",")[1]


async def _recovery_status(sc: Scenario, job_id: str) -> tuple[str, JobStatus] | None:
    client = await Client.connect(sc.temporal_address, data_converter=pydantic_data_converter)
    async for wf in client.list_workflows(recovery_query(cluster=sc.cluster, job_id=job_id, running=False)):
        handle = client.get_workflow_handle(wf.id)
        status = (await handle.describe()).status
        return (status.name if status else "?"), await handle.query(QueryNames.STATUS, result_type=JobStatus)
    return None


@pytest.mark.mysql
async def test_audit_store_down_longer_than_every_deadline_does_not_hold_up_a_restart(
    tmp_path: Path, scenario: Scenario, worker: WorkerProcess, mysql_url: str
) -> None:
    """MariaDB stopped while the restart runs, for longer than the decision, action and activity deadlines:
    the job is restarted without its bad node while the store is down, and every entry lands once afterwards."""
    db = PrivateMariaDB()
    db.install()
    db.start()
    scenario.audit_url = db.url
    scenario.watchdog = {"decision_deadline_s": 30.0, "action_deadline_s": 20.0, "activity_timeout_s": 10.0}
    try:
        worker.start(fault_delays={"requeue_hold": 4.0})
        job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan="xid,ok", fail_at=30,
                                 iterations=400)
        scenario.jobs.append(job_id)
        await wait_for(lambda: _running_activity(scenario.temporal_address, scenario.cluster, job_id, "requeue_hold"),
                       timeout=120, what="requeue_hold running", every=0.3)
        db.stop()
        down_at = time.monotonic()
        await wait_for(lambda: slurm_state(job_id) == ("RUNNING", 1), timeout=60,
                       what="restarted while the audit store is down")
        assert db.proc is not None and db.proc.poll() is not None  # still down
        bad = _failing_node(scenario, job_id)
        job = scontrol_job(job_id)
        assert bad in job["ExcNodeList"] and bad not in job["NodeList"], job
        found = await _recovery_status(scenario, job_id)
        assert found is not None and found[0] == "RUNNING" and found[1].audit_backlog > 0, found
        # `jobmedic audit` says the store is down, and how far behind it is
        told = scenario.cli("audit", "--cluster", scenario.cluster, "--job", job_id, check=False)
        assert told.returncode == 1, told
        behind = re.search(r"BEHIND: (\d+) audit entries of 1 running recovery not in the store yet", told.stderr)
        assert behind and int(behind[1]) >= found[1].audit_backlog, told.stderr  # more may have come since
        assert f"{job_id} ({behind[1]})" in told.stderr, told.stderr
        await asyncio.sleep(max(0.0, 45.0 - (time.monotonic() - down_at)))  # down longer than each deadline
        db.start()
        await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=180, what="completed after one restart")
        await wait_for(lambda: EventType.COMPLETED in scenario.kinds(job_id), timeout=90, what="completed entry")
        _assert_each_step_once(scenario, job_id)
        assert EventType.WATCHDOG not in scenario.kinds(job_id)
        caught_up = scenario.cli("audit", "--cluster", scenario.cluster, "--job", job_id)
        assert "BEHIND" not in caught_up.stdout + caught_up.stderr and "completed" in caught_up.stdout, caught_up
    finally:
        worker.stop()
        db.remove()


@pytest.mark.mysql
async def test_a_store_that_refuses_entries_for_good_does_not_fail_the_workflow(
    tmp_path: Path, scenario: Scenario, worker: WorkerProcess, mysql_url: str
) -> None:
    """The audit table disappears (a non-retryable store error): the workflow keeps running, decides without
    the store's cluster-wide view, restarts the job without its bad node, keeps its entries, and writes them,
    in order and once, when the table is back."""
    import pymysql

    db = PrivateMariaDB()
    db.install()
    db.start()
    scenario.audit_url = db.url
    scenario.watchdog = {"audit_retry_pause_s": 2.0, "decision_deadline_s": 20.0}

    def sql(statement: str) -> None:
        pymysql.connect(host="127.0.0.1", port=db.port, user="root", database="jobmedic").cursor().execute(statement)

    try:
        worker.start()
        job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan="xid,ok",
                                 fail_at=150, iterations=200)  # fails ~15 s in: time to take the table away first
        scenario.jobs.append(job_id)
        await wait_for(lambda: EventType.CHECKPOINT_SAVED in scenario.kinds(job_id), timeout=90,
                       what="first checkpoint audited")
        assert slurm_state(job_id) == ("RUNNING", 0)
        sql("RENAME TABLE audit_entry TO audit_entry_away")
        await wait_for(lambda: slurm_state(job_id)[0] == "FAILED", timeout=60, what="the job failed")
        # the store refusing is no reason to leave the job down: restarted, without its bad node
        await wait_for(lambda: slurm_state(job_id) == ("RUNNING", 1), timeout=90,
                       what="restarted while the store refuses entries")
        bad = _failing_node(scenario, job_id)
        job = scontrol_job(job_id)
        assert bad in job["ExcNodeList"] and bad not in job["NodeList"], job

        async def behind() -> tuple[str, JobStatus] | None:
            found = await _recovery_status(scenario, job_id)
            return found if found and found[1].incidents >= 1 and found[1].audit_backlog >= 2 else None

        await wait_for(behind, timeout=60, what="entries waiting for the store")
        await asyncio.sleep(6)  # several refusals (one every 2 s)
        found = await _recovery_status(scenario, job_id)
        assert found is not None and found[0] == "RUNNING", found  # not FAILED: a refusing store is not fatal
        sql("RENAME TABLE audit_entry_away TO audit_entry")
        await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=180, what="completed after one restart")
        await wait_for(lambda: EventType.COMPLETED in scenario.kinds(job_id), timeout=90, what="the backlog written")
        _assert_each_step_once(scenario, job_id)
        kinds = [e.event_type for e in scenario.entries(job_id)]
        assert EventType.WATCHDOG not in kinds
        assert kinds.index(EventType.DETECTION) < kinds.index(EventType.ADVICE) < kinds.index(EventType.COMPLETED)
        await wait_for(lambda: _backlog_empty(scenario, job_id), timeout=30, what="nothing left behind")
    finally:
        worker.stop()
        db.remove()


async def _backlog_empty(sc: Scenario, job_id: str) -> bool:
    found = await _recovery_status(sc, job_id)
    return found is not None and found[1].audit_backlog == 0


async def test_switching_a_cluster_to_observe_stops_an_incident_in_flight(
    scenario: Scenario, worker: WorkerProcess
) -> None:
    """The worker restarts with the cluster in observe mode while the verdict is being made: the advice is
    recorded, the restart it advises is not done, and the job stays as Slurm ended it."""
    scenario.watchdog = {"activity_timeout_s": 6.0}
    worker.start(fault_delays={"attribute": 8.0})
    job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan="xid,ok", fail_at=20)
    scenario.jobs.append(job_id)
    await wait_for(lambda: _running_activity(scenario.temporal_address, scenario.cluster, job_id, "attribute"),
                   timeout=120, what="attribute running", every=0.3)
    worker.kill9()
    scenario.mode = "observe"  # and acknowledge_scheduler_actions = false (the harness writes both)
    replacement = WorkerProcess(scenario, name="worker2").start(fault_delays={})
    try:
        refused = await wait_for(
            lambda: [e for e in scenario.entries(job_id) if e.event_type is EventType.WATCHDOG], timeout=120,
            what="the refused action audited",
        )
        assert "no longer allow" in refused[0].outcome, refused[0].outcome
        advice = [e for e in scenario.entries(job_id) if e.event_type is EventType.ADVICE]
        assert [a.action for a in advice] == ["restart_exclude"]
        assert EventType.ACTION_CONFIRMED not in scenario.kinds(job_id)
        await asyncio.sleep(3)
        assert slurm_state(job_id) == ("FAILED", 0)
    finally:
        replacement.stop()
