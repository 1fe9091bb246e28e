"""On real Slurm: a rank's fatal error while the other ranks keep the job RUNNING is recovered.

The demo trainer's `fatal-running` plan prints a CUDA illegal-memory-access traceback
for one rank and then blocks (the other ranks would wait in their collective until
NCCL's watchdog fires, 10-30 minutes later). Slurm shows RUNNING throughout. jobmedic
sees the fatal line, then no progress, and restarts the job: the requeue-hold is what
stops the stuck attempt. Judged by Slurm afterwards: COMPLETED after exactly one restart.
"""

from __future__ import annotations

import pytest

from tests.workflows.harness import Scenario, WorkerProcess, slurm_state, submit_training, wait_for
from workflows.contracts import EventType

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(400)]


async def test_a_fatal_error_while_ranks_still_run_is_restarted(scenario: Scenario, worker: WorkerProcess) -> None:
    scenario.hang = {"floor_s": 10.0, "default_s": 20.0, "ceiling_s": 60.0}
    worker.start()
    job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan="fatal-running,ok")
    scenario.jobs.append(job_id)
    await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=240,
                   what=f"job {job_id} COMPLETED after 1 restart")
    entries = scenario.entries(job_id)
    detections = [e for e in entries if e.event_type is EventType.DETECTION]
    assert len(detections) == 1 and (detections[0].detail or {}).get("incident") == "fatal_running"
    advice = [e for e in entries if e.event_type is EventType.ADVICE]
    assert advice and advice[0].category == "cuda_error" and advice[0].action.startswith("restart")
    confirmed = [e.action for e in entries if e.event_type is EventType.ACTION_CONFIRMED]
    assert confirmed[:1] == ["requeue_hold"] and "release" in confirmed
