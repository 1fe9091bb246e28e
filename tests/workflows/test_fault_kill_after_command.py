"""kill -9 of the worker after a scheduler command took effect and before Temporal recorded its result.

The worker runs with `JOBMEDIC_FAULT_KILL_AFTER=<activity>` and SIGKILLs itself
right after that activity's Slurm command returned (`activities.scheduler`):
Slurm has done it, nobody knows. A fresh worker (no fault) takes over; the
activity times out and is retried there, finds the effect already in place
(`changed` False) and the recovery goes on: the job is restarted exactly once,
is not left held past the action deadline, and every audit entry lands once,
in order.
"""

from __future__ import annotations

import time

import pytest

from tests.workflows.fault_support import RESTART_STEPS, FaultyWorker, assert_trail_in_order_once
from tests.workflows.harness import Scenario, WorkerProcess, scontrol_job, slurm_state, submit_training, wait_for
from tests.workflows.test_crash_safety import _failing_node
from workflows.contracts import EventType

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(300)]

ACTION_DEADLINE_S = 60.0


def _held(job_id: str) -> bool:
    job = scontrol_job(job_id)
    return job.get("JobState") == "PENDING" and job.get("Priority") == "0"


@pytest.mark.parametrize("activity", ["requeue_hold", "exclude_nodes", "release_job"])
async def test_worker_killed_after_the_command_took_effect_resumes_without_repeating_it(
    activity: str, scenario: Scenario, worker: WorkerProcess
) -> None:
    scenario.watchdog = {"activity_timeout_s": 6.0, "decision_deadline_s": 60.0, "action_deadline_s": ACTION_DEADLINE_S}
    doomed = FaultyWorker(scenario, name="doomed", env={"JOBMEDIC_FAULT_KILL_AFTER": activity}).start()
    replacement: FaultyWorker | None = None
    try:
        job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan="xid,ok", fail_at=20)
        scenario.jobs.append(job_id)
        await wait_for(doomed.killed_itself, timeout=120, what=f"the worker to kill itself after {activity}")
        killed_at = time.monotonic()
        job = scontrol_job(job_id)
        bad = _failing_node(scenario, job_id)
        # the command's effect is there, in Slurm, with nobody having recorded it
        if activity == "requeue_hold":
            assert (job["JobState"], job["Reason"], job["Restarts"]) == ("PENDING", "job_requeued_in_held_state", "1"), job
        elif activity == "exclude_nodes":
            assert bad in job["ExcNodeList"] and _held(job_id), job
        else:
            assert not _held(job_id), job
        assert EventType.ACTION_CONFIRMED not in [e.event_type for e in scenario.entries(job_id) if e.action == (
            "release" if activity == "release_job" else activity)]
        replacement = FaultyWorker(scenario, name="replacement").start(fault_delays={})
        await wait_for(lambda: not _held(job_id), timeout=ACTION_DEADLINE_S, what="the job not held by jobmedic")
        assert time.monotonic() - killed_at < ACTION_DEADLINE_S
        await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=180,
                       what=f"job {job_id} completed after exactly one restart")
        await wait_for(lambda: EventType.COMPLETED in scenario.kinds(job_id), timeout=60, what="completed entry")
        assert_trail_in_order_once(scenario, job_id, RESTART_STEPS)
        assert EventType.WATCHDOG not in scenario.kinds(job_id)
        final = scontrol_job(job_id)
        assert bad in final["ExcNodeList"] and bad not in final["NodeList"], final
        confirmed = {e.action: e for e in scenario.entries(job_id) if e.event_type is EventType.ACTION_CONFIRMED}
        retried = "release" if activity == "release_job" else activity
        assert confirmed[retried].detail["changed"] is False, confirmed[retried]  # found done, not done again
    finally:
        doomed.stop()
        if replacement is not None:
            replacement.stop()
