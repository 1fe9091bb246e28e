"""Job arrays on real Slurm: each task is recovered on its own; an array whose tasks fail alike is not restarted.

A 4-task array (`sbatch --array=0-3`) of the demo trainer, one node per task,
each task with its own checkpoint directory and plan (by SLURM_ARRAY_TASK_ID).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workflows.harness import REPO, Scenario, WorkerProcess, scontrol_job, slurm_state, wait_for
from workflows.contracts import EventType

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(300)]

TASKS = 4


def submit_array(workdir: Path, *, environment: str, plans: dict[int, str], default: str = "ok") -> str:
    """sbatch a 4-task array of the demo trainer, plan per task; returns the array job id."""
    workdir.mkdir(parents=True, exist_ok=True)
    cases = "".join(f"  {i}) plan={plan} ;;\n" for i, plan in plans.items())
    script = workdir / "sweep.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        f'case "$SLURM_ARRAY_TASK_ID" in\n{cases}  *) plan={default} ;;\nesac\n'
        f"exec {sys.executable} -u -m workers.demo_train --checkpoint-dir {workdir}/ckpt-$SLURM_ARRAY_TASK_ID "
        "--plan $plan --iterations 60 --iteration-seconds 0.1 --fail-at 20\n"
    )
    comment = json.dumps({"jobmedic": {"environment": environment, "mode": "action",
                                       "checkpoint_dir": str(workdir / "ckpt")}})
    argv = [
        "sbatch", "--parsable", "--job-name=jm-sweep", f"--array=0-{TASKS - 1}", "--nodes=1", "--ntasks-per-node=2",
        "--requeue", "--open-mode=append", f"--chdir={REPO}", f"--output={workdir}/train-%A_%a.out",
        f"--comment={comment}", str(script),
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(";")[0]


def _task_node(workdir: Path, task: str) -> str:
    out = (workdir / f"train-{task}.out").read_text()
    return out.split("[demo] attempt 1 on ", 1)[1].split(" ", 1)[0].split(",")[-1]


async def test_each_task_of_an_array_is_recovered_on_its_own(scenario: Scenario, worker: WorkerProcess) -> None:
    worker.start()
    array = submit_array(scenario.tmp / "sweep", environment=scenario.environment, plans={1: "xid,ok"})
    scenario.jobs.append(array)
    tasks = [f"{array}_{i}" for i in range(TASKS)]
    await wait_for(lambda: all(slurm_state(t)[0] == "COMPLETED" for t in tasks), timeout=180,
                   what="every task completed")
    assert [slurm_state(t)[1] for t in tasks] == [0, 1, 0, 0]  # only the failed task was restarted, once
    bad = _task_node(scenario.tmp / "sweep", tasks[1])
    assert bad in scontrol_job(tasks[1])["ExcNodeList"]
    assert all(scontrol_job(t)["ExcNodeList"] == "(null)" for t in (tasks[0], tasks[2], tasks[3]))
    await wait_for(lambda: all(EventType.COMPLETED in scenario.kinds(t) for t in tasks), timeout=60,
                   what="a completed entry per task")
    restarted = scenario.entries(tasks[1])
    assert [e.action for e in restarted if e.event_type is EventType.ADVICE] == ["restart_exclude"]
    assert {e.workflow_id for e in restarted} == {e.workflow_id for e in restarted if f"-{tasks[1]}-" in e.workflow_id}
    for quiet in (tasks[0], tasks[2], tasks[3]):
        assert EventType.ADVICE not in scenario.kinds(quiet), quiet
    assert len({scenario.entries(t)[0].workflow_id for t in tasks}) == TASKS  # one workflow per task


async def test_an_array_whose_tasks_fail_alike_is_not_restarted(scenario: Scenario, worker: WorkerProcess) -> None:
    worker.start()
    array = submit_array(scenario.tmp / "sweep", environment=scenario.environment, plans={}, default="app")
    scenario.jobs.append(array)
    tasks = [f"{array}_{i}" for i in range(TASKS)]

    def advised() -> list:
        found = [a for t in tasks for a in scenario.entries(t) if a.event_type is EventType.ADVICE]
        return found if len({a.job_id for a in found}) == TASKS else []

    advice = await wait_for(advised, timeout=180, what="an advice for every task")
    systemic = [a for a in advice if a.rule == "array_systemic"]
    assert len(systemic) >= TASKS - 1, [(a.job_id, a.rule, a.outcome) for a in advice]
    assert f"tasks of job array {array} failed the same way" in systemic[0].outcome
    await wait_for(lambda: all(slurm_state(t)[0] == "FAILED" for t in tasks), timeout=120, what="every task FAILED")
    restarts = [slurm_state(t)[1] for t in tasks]
    assert sum(restarts) <= 1 and max(restarts) <= 1, restarts  # at most the first to fail, before the others
    for a in systemic:  # left as Slurm ended it: nothing requested after the advice, restart count as it was
        assert slurm_state(a.job_id) == ("FAILED", a.attempt)
        after = [e for e in scenario.entries(a.job_id) if e.timestamp >= a.timestamp]
        assert EventType.ACTION_REQUESTED not in [e.event_type for e in after]
