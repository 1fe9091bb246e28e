"""End-to-end recovery scenarios: a real `jobmedic worker`, real Slurm jobs, the real Temporal dev server.

Every test submits real sbatch jobs (the demo's training script with a plan per
attempt) and checks what Slurm and the audit trail show afterwards.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workflows.harness import (
    Scenario,
    WorkerProcess,
    scontrol_job,
    slurm_state,
    submit_training,
    wait_for,
)
from workflows.contracts import EventType

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(400)]

TEMPORAL = str(Path(sys.executable).parent / "temporal")




def _submit(sc: Scenario, **kw) -> str:
    job_id = submit_training(sc.tmp / "job", environment=sc.environment, **kw)
    sc.jobs.append(job_id)
    return job_id


def _second_node(job_id: str, sc: Scenario) -> str:
    out = (sc.tmp / "job" / f"train-{job_id}.out").read_text()
    first = out.split("[demo] attempt 1 on ", 1)[1].split(" ", 1)[0]
    return first.split(",")[1]


async def test_host_naming_crash_is_recovered_on_other_nodes(scenario: Scenario, worker: WorkerProcess) -> None:
    worker.start()
    job_id = _submit(scenario, plan="xid,ok")
    await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=150, what=f"job {job_id} COMPLETED after 1 restart")
    bad = _second_node(job_id, scenario)
    final = scontrol_job(job_id)
    assert bad in final.get("ExcNodeList", ""), final
    assert bad not in final.get("NodeList", ""), final
    entries = await wait_for(
        lambda: [e for e in scenario.entries(job_id)] if EventType.COMPLETED in scenario.kinds(job_id) else None,
        timeout=30, what="the completed entry",
    )
    advice = [e for e in entries if e.event_type is EventType.ADVICE]
    assert len(advice) == 1 and advice[0].category == "gpu_hardware" and advice[0].implicated_nodes == [bad]
    assert advice[0].action == "restart_exclude" and advice[0].rule == "hardware_exclude"
    confirmed = [e.action for e in entries if e.event_type is EventType.ACTION_CONFIRMED]
    assert confirmed == ["requeue_hold", "exclude_nodes", "release"]
    # requeued once, as the first step of the restart, by this deployment (its mark is on the job)
    assert final.get("AdminComment") == "jobmedic:jobmedic", final  # `jobmedic:<deployment> release <time>`
    kinds = [e.event_type for e in entries]
    for kind in (EventType.DETECTION, EventType.ALLOCATION_RESTART, EventType.PROGRESS_RESTORED,
                 EventType.CHECKPOINT_SAVED):
        assert kind in kinds
    # advice is recorded before any action is requested
    assert kinds.index(EventType.ADVICE) < kinds.index(EventType.ACTION_REQUESTED)
    # the CLI's views of the same trail
    out = json.loads(scenario.cli("audit", "--job", job_id, "--format", "json").stdout)
    assert {e["event_type"] for e in out} >= {"detection", "advice", "action_confirmed", "completed"}


async def test_observe_mode_records_advice_and_leaves_slurm_alone(scenario: Scenario, worker: WorkerProcess) -> None:
    scenario.mode = "observe"
    worker.start()
    job_id = _submit(scenario, plan="xid,ok", mode="action")  # the cluster's observe mode wins over the job's wish
    advice = await wait_for(
        lambda: [e for e in scenario.entries(job_id) if e.event_type is EventType.ADVICE], timeout=120, what="advice"
    )
    assert advice[0].action == "restart_exclude" and advice[0].mode == "observe"
    await wait_for(lambda: slurm_state(job_id)[0] == "FAILED", timeout=30, what="FAILED")
    assert slurm_state(job_id) == ("FAILED", 0)
    kinds = scenario.kinds(job_id)
    assert EventType.ACTION_REQUESTED not in kinds and EventType.ACTION_CONFIRMED not in kinds


async def test_jobs_that_did_not_opt_in_are_never_touched(scenario: Scenario, worker: WorkerProcess) -> None:
    worker.start()
    plain = _submit(scenario, plan="xid,ok", comment="no opt-in here")
    foreign = _submit(scenario, plan="xid,ok", comment=json.dumps({"jobmedic": {"environment": "someone-else", "mode": "action"}}))
    witness = _submit(scenario, plan="xid,ok")  # proves the watch was looking while the others failed
    await wait_for(lambda: slurm_state(witness) == ("COMPLETED", 1), timeout=150, what="the opted-in witness recovered")
    for job_id in (plain, foreign):
        assert slurm_state(job_id) == ("FAILED", 0)
        assert scenario.entries(job_id) == []


async def test_same_application_error_twice_stops_the_job(scenario: Scenario, worker: WorkerProcess) -> None:
    worker.start()
    job_id = _submit(scenario, plan="app", fail_at=15)
    stopped = await wait_for(
        lambda: [e for e in scenario.entries(job_id) if e.event_type is EventType.STOPPED], timeout=150, what="stopped"
    )
    advice = [e for e in scenario.entries(job_id) if e.event_type is EventType.ADVICE]
    assert [a.rule for a in advice] == ["app_error_restart", "same_app_error_twice"]
    assert all(a.category == "app_error" for a in advice)
    assert stopped[0].action == "stop" and "left FAILED as Slurm ended it" in stopped[0].outcome
    confirmed = [e.action for e in scenario.entries(job_id) if e.event_type is EventType.ACTION_CONFIRMED]
    assert confirmed == ["requeue_hold", "release"]  # the restart after the first failure, nothing after the second
    # the stop is not a requeue-then-cancel: Slurm's own end of the second attempt stands
    job = scontrol_job(job_id)
    assert (job["JobState"], job["Restarts"], job["ExitCode"]) == ("FAILED", "1", "1:0"), job


async def test_no_new_checkpoint_across_attempts_stops_the_job(scenario: Scenario, worker: WorkerProcess) -> None:
    scenario.policy = {"no_checkpoint_attempts": 2, "transient_restart_limit": 5}
    worker.start()
    job_id = _submit(scenario, plan="early", fail_at=15)
    await wait_for(
        lambda: EventType.STOPPED in scenario.kinds(job_id), timeout=150, what="the job stopped"
    )
    advice = [e for e in scenario.entries(job_id) if e.event_type is EventType.ADVICE]
    assert advice[-1].rule == "no_checkpoint_progress", [a.rule for a in advice]
    assert len(advice) == 2
    assert slurm_state(job_id) == ("FAILED", 1)  # one restart; the stop left the second failure as it was


async def test_exit_code_93_is_left_failed_with_nothing_touched(scenario: Scenario, worker: WorkerProcess) -> None:
    """The job asks not to be restarted (exit 93): no scheduler command at all, its end stays Slurm's."""
    worker.start()
    workdir = scenario.tmp / "job93"
    workdir.mkdir()
    script = workdir / "exit93.sbatch"
    script.write_text("#!/bin/bash\necho 'iteration 1/10 | lm loss: 1.0'\nsleep 3\necho 'giving up: do not restart'\nexit 93\n")
    comment = json.dumps({"jobmedic": {"environment": scenario.environment, "mode": "action"}})
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--requeue", "--nodes=1", f"--output={workdir}/out-%j.txt", f"--comment={comment}",
         str(script)], capture_output=True, text=True, timeout=30, check=True,
    )
    job_id = submitted.stdout.strip().split(";")[0]
    scenario.jobs.append(job_id)
    stopped = await wait_for(
        lambda: [e for e in scenario.entries(job_id) if e.event_type is EventType.STOPPED], timeout=120, what="stopped"
    )
    advice = [e for e in scenario.entries(job_id) if e.event_type is EventType.ADVICE]
    assert [(a.action, a.rule) for a in advice] == [("stop", "do_not_restart_exit_code")]
    assert "left FAILED" in stopped[0].outcome
    kinds = scenario.kinds(job_id)
    assert EventType.ACTION_REQUESTED not in kinds and EventType.ACTION_CONFIRMED not in kinds
    job = scontrol_job(job_id)
    assert (job["JobState"], job["Restarts"], job["ExitCode"]) == ("FAILED", "0", "93:0"), job
    assert job.get("AdminComment", "") in {"", "(null)"}  # not even marked: jobmedic did nothing to it


async def test_hang_without_error_text_is_restarted(scenario: Scenario, worker: WorkerProcess) -> None:
    scenario.hang = {"floor_s": 4.0, "default_s": 4.0, "ceiling_s": 8.0}
    worker.start()
    job_id = _submit(scenario, plan="hang,ok", fail_at=15)
    await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=150, what="hung job restarted and completed")
    entries = scenario.entries(job_id)
    detection = [e for e in entries if e.event_type is EventType.DETECTION]
    assert len(detection) == 1 and detection[0].detail["incident"] == "hang", [e.outcome for e in detection]
    assert [e.action for e in entries if e.event_type is EventType.ACTION_CONFIRMED] == ["requeue_hold", "release"]
    advice = [e for e in entries if e.event_type is EventType.ADVICE][0]
    assert advice.category == "hang" and advice.action in {"restart", "restart_exclude"}


async def test_pause_resume_and_stop_signals(scenario: Scenario, worker: WorkerProcess) -> None:
    worker.start()
    job_id = _submit(scenario, plan="xid,ok", fail_at=150, iterations=200)  # fails ~15 s in: time to pause first
    await wait_for(lambda: slurm_state(job_id)[0] == "RUNNING", timeout=60, what="RUNNING")
    tries: list[str] = []

    def pause() -> bool:
        done = scenario.cli("pause", job_id, check=False)
        tries.append(done.stderr.strip()[-300:])
        return done.returncode == 0

    await wait_for(pause, timeout=30, what=f"the job's workflow to accept pause ({tries[-1:]})")
    advice = await wait_for(
        lambda: [e for e in scenario.entries(job_id) if e.event_type is EventType.ADVICE], timeout=120, what="advice"
    )
    assert advice[0].mode == "observe"  # paused: advice only
    assert slurm_state(job_id) == ("FAILED", 0)
    assert EventType.ACTION_REQUESTED not in scenario.kinds(job_id)
    status = json.loads(scenario.cli("jobs", "--json").stdout)["jobs"]
    mine = [j for j in status if j["job_id"] == job_id]
    assert mine and mine[0]["phase"] == "paused"
    # the same signals through the Temporal CLI; a typo in set-mode must not break the workflow
    wid = mine[0]["workflow_id"]
    subprocess.run([TEMPORAL, "workflow", "signal", "--address", scenario.temporal_address, "--workflow-id", wid,
                    "--name", "set-mode", "--input", '"actoin"'], check=True, capture_output=True, timeout=30)
    query = subprocess.run([TEMPORAL, "workflow", "query", "--address", scenario.temporal_address, "--workflow-id",
                            wid, "--name", "timeline", "-o", "json"], capture_output=True, text=True, timeout=30)
    assert query.returncode == 0 and "ignored set-mode" in query.stdout, query.stderr
    subprocess.run([TEMPORAL, "workflow", "signal", "--address", scenario.temporal_address, "--workflow-id", wid,
                    "--name", "resume"], check=True, capture_output=True, timeout=30)
    assert scenario.cli("stop", job_id).returncode == 0
    await wait_for(lambda: EventType.STOPPED in scenario.kinds(job_id), timeout=30, what="stopped entry")
    assert slurm_state(job_id) == ("FAILED", 0)


@pytest.mark.parametrize("command", ["pause", "stop"])
async def test_pause_or_stop_on_a_job_jobmedic_holds_releases_its_hold(
    command: str, scenario: Scenario, worker: WorkerProcess
) -> None:
    """A hold decided by the policy (a systemic hold: two jobs fail with one shared cause and no node named) is
    undone for one job by `jobmedic pause|stop`; the other stays held until its own hold ends."""
    scenario.policy = {"systemic_jobs": 2, "systemic_hold_max_s": 60.0}
    worker.start()
    job_id, other = (submit_training(scenario.tmp / name, environment=scenario.environment, plan="early,ok", nodes=1)
                     for name in ("job-a", "job-b"))
    scenario.jobs += [job_id, other]
    await wait_for(lambda: slurm_state(job_id) == ("PENDING", 1), timeout=120, what="held after the decision")
    advice = [e for e in scenario.entries(job_id) if e.event_type is EventType.ADVICE]
    assert [(a.action, a.rule) for a in advice] == [("hold", "systemic_hold")]
    await wait_for(lambda: slurm_state(other) == ("PENDING", 1), timeout=60, what="the other job held too")
    assert scontrol_job(job_id)["Reason"] == "job_requeued_in_held_state"
    assert scenario.cli(command, job_id).returncode == 0
    await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=120, what=f"released by {command}, then ran")
    releases = [e for e in scenario.entries(job_id) if e.event_type is EventType.ACTION_CONFIRMED and e.action == "release"]
    said = "paused" if command == "pause" else "stopped"
    assert len(releases) == 1 and said in releases[0].outcome, [r.outcome for r in releases]


async def test_watchdog_leaves_the_failed_job_to_slurm_when_attribution_never_answers(
    scenario: Scenario, worker: WorkerProcess
) -> None:
    """An attribution service that accepts the request and never answers: the decision deadline passes, and as
    nothing was done before the decision, the job simply stays as Slurm ended it (fail open)."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # connections are accepted by the kernel and never served
    try:
        scenario.attribution_url = f"http://127.0.0.1:{listener.getsockname()[1]}/verdict"
        scenario.watchdog = {"decision_deadline_s": 8.0}
        worker.start()
        job_id = _submit(scenario, plan="xid,ok")
        dog = await wait_for(
            lambda: [e for e in scenario.entries(job_id) if e.event_type is EventType.WATCHDOG], timeout=120,
            what="a watchdog entry",
        )
        detection = [e for e in scenario.entries(job_id) if e.event_type is EventType.DETECTION][0]
        assert "did not hold the job" in dog[0].outcome and dog[0].action is None, dog[0].outcome
        assert (dog[0].timestamp - detection.timestamp).total_seconds() < 8.0 + 5.0
        kinds = scenario.kinds(job_id)
        assert EventType.ADVICE not in kinds and EventType.ACTION_REQUESTED not in kinds
        assert slurm_state(job_id) == ("FAILED", 0)
    finally:
        listener.close()


async def test_dead_node_under_a_requeue_job_is_left_to_slurm(scenario: Scenario, worker: WorkerProcess, slurm_cluster) -> None:
    worker.start()
    job_id = _submit(scenario, plan="ok", iterations=400, requeue=True)
    await wait_for(lambda: slurm_state(job_id)[0] == "RUNNING", timeout=60, what="RUNNING")
    await wait_for(lambda: EventType.CHECKPOINT_SAVED in scenario.kinds(job_id), timeout=60, what="first checkpoint")
    victim = scontrol_job(job_id)["BatchHost"]
    subprocess.run([str(slurm_cluster.node_ctl), "kill", victim], check=True, capture_output=True, timeout=30)
    try:
        # Slurm notices the dead node, requeues the job itself (restart 1) and runs it elsewhere
        await wait_for(lambda: slurm_state(job_id) == ("RUNNING", 1), timeout=120, what="Slurm's own requeue")
        advice = await wait_for(
            lambda: [e for e in scenario.entries(job_id) if e.event_type is EventType.ADVICE], timeout=60,
            what="advice on the Slurm requeue",
        )
        assert advice[0].action == "leave_to_slurm" and advice[0].rule.endswith("slurm_requeued"), advice[0]
        await asyncio.sleep(5)
        assert slurm_state(job_id)[1] == 1  # jobmedic never requeued it a second time
        assert EventType.ACTION_REQUESTED not in scenario.kinds(job_id) or all(
            e.action != "requeue_hold" for e in scenario.entries(job_id) if e.event_type is EventType.ACTION_REQUESTED
        )
    finally:
        subprocess.run([str(slurm_cluster.node_ctl), "start", victim], capture_output=True, timeout=30)


async def test_dead_node_under_a_no_requeue_job_is_blamed_and_not_requeued(
    scenario: Scenario, worker: WorkerProcess, slurm_cluster
) -> None:
    """Slurm refuses to requeue a `--no-requeue` job: jobmedic blames the node and stops, it does not fight Slurm."""
    worker.start()
    job_id = _submit(scenario, plan="ok", iterations=300, requeue=False)
    await wait_for(lambda: EventType.CHECKPOINT_SAVED in scenario.kinds(job_id), timeout=60, what="first checkpoint")
    victim = scontrol_job(job_id)["BatchHost"]
    subprocess.run([str(slurm_cluster.node_ctl), "kill", victim], check=True, capture_output=True, timeout=30)
    try:
        advice = await wait_for(
            lambda: [e for e in scenario.entries(job_id) if e.event_type is EventType.ADVICE], timeout=120,
            what="advice on NODE_FAIL",
        )
        assert advice[0].category == "node_failure" and victim in advice[0].implicated_nodes, advice[0]
        assert advice[0].action == "stop" and advice[0].rule.endswith("requeue_not_allowed")
        assert f"--exclude={victim}" in advice[0].outcome
        await wait_for(lambda: EventType.STOPPED in scenario.kinds(job_id), timeout=60, what="stopped entry")
        assert EventType.WATCHDOG not in scenario.kinds(job_id)
        assert slurm_state(job_id) == ("NODE_FAIL", 0)
    finally:
        subprocess.run([str(slurm_cluster.node_ctl), "start", victim], capture_output=True, timeout=30)


async def test_sustained_slowdown_is_reported_as_a_straggler(scenario: Scenario, worker: WorkerProcess) -> None:
    worker.start()
    job_id = _submit(scenario, plan="slow", iterations=230, fail_at=160, iteration_seconds=0.1)
    found = await wait_for(
        lambda: [e for e in scenario.entries(job_id)
                 if e.event_type is EventType.DETECTION and (e.detail or {}).get("incident") == "straggler"],
        timeout=120, what="a straggler detection",
    )
    assert found[0].timestamp is not None
    # a slow job is reported, not restarted
    assert EventType.ACTION_REQUESTED not in scenario.kinds(job_id)
    await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 0), timeout=120, what="job completed untouched")
