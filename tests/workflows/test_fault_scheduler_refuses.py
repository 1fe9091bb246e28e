"""A scheduler command that fails for good: scontrol refuses it (as it does a user without the right, or a
job in a state the command does not apply to).

The worker's PATH starts with an `scontrol` that refuses one kind of command
(exit 1, "Access/permission denied", what slurmctld answers a user without
the right) and runs the real one otherwise. jobmedic must not retry a refusal
for ever nor leave the job held: the recovery ends at once (watchdog), a hold
it placed is released to normal scheduling, and that is audited.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.workflows.fault_support import FaultyWorker, assert_trail_in_order_once
from tests.workflows.harness import Scenario, scontrol_job, slurm_state, submit_training, wait_for
from workflows.contracts import EventType

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(240)]


def refusing_scontrol(bin_dir: Path, refused: str) -> dict[str, str]:
    """A PATH whose `scontrol` refuses every command with an argument starting with `refused`."""
    real = shutil.which("scontrol")
    assert real, "scontrol is not on PATH"
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "scontrol"
    shim.write_text(
        "#!/bin/bash\n"
        'for arg in "$@"; do\n'
        f'  case "$arg" in {refused}*) echo "slurm_update error: Access/permission denied" >&2; exit 1;; esac\n'
        "done\n"
        f'exec {real} "$@"\n'
    )
    shim.chmod(0o755)
    return {"PATH": f"{bin_dir}:{Path(real).parent}:/usr/bin:/bin"}


async def test_a_refused_exclusion_releases_jobmedics_hold_and_is_audited(scenario: Scenario) -> None:
    """requeue-hold works, the exclusion is refused: the job is released to Slurm (no exclusion) and runs again."""
    scenario.watchdog = {"activity_timeout_s": 10.0, "action_deadline_s": 60.0}
    worker = FaultyWorker(scenario, env=refusing_scontrol(scenario.tmp / "bin", "ExcNodeList=")).start()
    try:
        job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan="xid,ok", fail_at=20)
        scenario.jobs.append(job_id)
        dog = await wait_for(
            lambda: [e for e in scenario.entries(job_id) if e.event_type is EventType.WATCHDOG],
            timeout=120, what="the refusal audited",
        )
        assert "exclude_nodes" in dog[0].outcome and "refused" in dog[0].outcome, dog[0].outcome
        assert "released to normal scheduling" in dog[0].outcome, dog[0].outcome
        await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=120,
                       what="the released job ran again under Slurm and completed")
        job = scontrol_job(job_id)
        assert job["ExcNodeList"] == "(null)", job
        assert "holding" not in job.get("AdminComment", ""), job
        steps = [
            (EventType.DETECTION, None), (EventType.ADVICE, "restart_exclude"),
            (EventType.ACTION_CONFIRMED, "requeue_hold"), (EventType.ACTION_REQUESTED, "exclude_nodes"),
            (EventType.WATCHDOG, "release"),
        ]
        await wait_for(lambda: EventType.COMPLETED in scenario.kinds(job_id), timeout=60, what="completed entry")
        assert_trail_in_order_once(scenario, job_id, steps + [(EventType.COMPLETED, None)])
        confirmed = [e.action for e in scenario.entries(job_id) if e.event_type is EventType.ACTION_CONFIRMED]
        assert confirmed == ["requeue_hold"], confirmed
    finally:
        worker.stop()


async def test_a_refused_requeue_leaves_the_job_as_slurm_ended_it(scenario: Scenario) -> None:
    """The first command of the restart is refused: nothing was done, the job stays FAILED with 0 restarts."""
    worker = FaultyWorker(scenario, env=refusing_scontrol(scenario.tmp / "bin", "requeuehold")).start()
    try:
        job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan="xid,ok", fail_at=20)
        scenario.jobs.append(job_id)
        dog = await wait_for(
            lambda: [e for e in scenario.entries(job_id) if e.event_type is EventType.WATCHDOG],
            timeout=120, what="the refusal audited",
        )
        assert "requeue_hold" in dog[0].outcome and "stays as Slurm has it" in dog[0].outcome, dog[0].outcome
        assert slurm_state(job_id) == ("FAILED", 0)
        assert scontrol_job(job_id).get("AdminComment", "") in ("", "(null)")
        assert_trail_in_order_once(scenario, job_id, [
            (EventType.DETECTION, None), (EventType.ADVICE, "restart_exclude"),
            (EventType.ACTION_REQUESTED, "requeue_hold"), (EventType.WATCHDOG, None),
        ])
        assert EventType.ACTION_CONFIRMED not in scenario.kinds(job_id)
    finally:
        worker.stop()
