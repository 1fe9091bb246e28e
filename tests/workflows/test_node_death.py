"""A node dies under a job: Slurm requeues it itself; the dead node stays out of this and every later restart."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from tests.workflows.harness import Scenario, WorkerProcess, scontrol_job, slurm_state, wait_for
from workflows.contracts import EventType

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(300)]

# attempt 1 runs until its node dies; attempt 2 (Slurm's requeue) fails with an application error; attempt 3 finishes
SCRIPT = """#!/bin/bash
restart=${SLURM_RESTART_COUNT:-0}
echo "[death] attempt $((restart + 1))"
if [ "$restart" = 0 ]; then for i in $(seq 1 600); do echo "step $i"; sleep 0.2; done; fi
if [ "$restart" = 1 ]; then sleep 2; echo "Traceback (most recent call last):" >&2; echo "KeyError: 'x'" >&2; exit 1; fi
sleep 2; echo "[death] done"
"""


async def test_a_dead_node_stays_out_across_slurms_requeue_and_a_later_failure(
    scenario: Scenario, worker: WorkerProcess, slurm_cluster
) -> None:
    worker.start()
    workdir = scenario.tmp / "death"
    workdir.mkdir()
    script = workdir / "job.sbatch"
    script.write_text(SCRIPT)
    comment = json.dumps({"jobmedic": {"environment": scenario.environment, "mode": "action"}})
    out = subprocess.run(
        ["sbatch", "--parsable", "--job-name=jm-death", "--nodes=1", "--ntasks=1", "--requeue", "--open-mode=append",
         f"--output={workdir}/out-%j.txt", f"--comment={comment}", str(script)],
        capture_output=True, text=True, timeout=30, check=True,
    )
    job_id = out.stdout.strip().split(";")[0]
    scenario.jobs.append(job_id)
    await wait_for(lambda: slurm_state(job_id)[0] == "RUNNING", timeout=60, what="RUNNING")
    await asyncio.sleep(3)  # the watch has seen it running
    victim = scontrol_job(job_id)["BatchHost"]
    subprocess.run([str(slurm_cluster.node_ctl), "kill", victim], check=True, capture_output=True, timeout=30)
    try:
        await wait_for(lambda: slurm_state(job_id)[1] >= 1, timeout=90, what="Slurm's own requeue")
        await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 2), timeout=150,
                       what="COMPLETED after Slurm's requeue and one jobmedic restart")
    finally:
        subprocess.run([str(slurm_cluster.node_ctl), "start", victim], capture_output=True, timeout=30)
    advice = [e for e in scenario.entries(job_id) if e.event_type is EventType.ADVICE]
    assert advice[0].category == "node_failure" and advice[0].implicated_nodes == [victim], advice[0]
    assert advice[0].action == "leave_to_slurm" and advice[0].rule.endswith("slurm_requeued"), advice[0].rule
    # the later failure's restart keeps the dead node out (already excluded since Slurm's requeue: no +dead_node)
    assert advice[1].category == "app_error" and advice[1].action in {"restart", "restart_exclude"}, advice[1]
    excludes = [e for e in scenario.entries(job_id) if e.event_type is EventType.ACTION_REQUESTED
                and e.action == "exclude_nodes"]
    assert len(excludes) == 2 and all(victim in e.implicated_nodes for e in excludes), excludes
    assert victim in scontrol_job(job_id).get("ExcNodeList", ""), scontrol_job(job_id)
    attempts = [line for line in (workdir / f"out-{job_id}.txt").read_text().splitlines() if "[death] attempt" in line]
    assert len(attempts) == 3, attempts
    starts = [e for e in scenario.entries(job_id) if e.event_type is EventType.ALLOCATION_RESTART]
    assert starts and all(victim not in (e.detail or {}).get("nodes", []) for e in starts), starts
