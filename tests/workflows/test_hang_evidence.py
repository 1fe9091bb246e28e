"""No hang verdict without evidence, on real Slurm with a real `jobmedic worker` in action mode.

A job that prints progress in a format nothing knows runs far past the hang
bound and completes untouched; a job whose progress format is only learned
from its own output (a repeated line template with a growing number) and then
stops printing is detected as hung and restarted.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.workflows.harness import Scenario, WorkerProcess, scontrol_job, slurm_state, wait_for
from workflows.contracts import EventType

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(300)]

BOUND = {"floor_s": 4.0, "default_s": 4.0, "ceiling_s": 8.0}

# nothing in this line is a progress format: no progress word, no N/M, no bar (a growing hex id only)
UNKNOWN_FORMAT = """#!/bin/bash
for i in $(seq 1 30); do
  printf '[worker] chunk %x written, all good\\n' $((i * 37))
  sleep 1
done
echo 'finished'
"""

# first attempt: a template nothing parses, printed 8 times, then silence while still running
LEARNED_THEN_SILENT = """#!/bin/bash
for i in $(seq 1 8); do
  echo "[trainer] shard batch $i of 9000 done (attempt ${SLURM_RESTART_COUNT:-0})"
  sleep 1
done
if [ "${SLURM_RESTART_COUNT:-0}" = "0" ]; then sleep 600; fi
echo 'finished'
"""


def _sbatch(sc: Scenario, name: str, script_text: str) -> str:
    workdir = sc.tmp / name
    workdir.mkdir()
    script = workdir / "job.sbatch"
    script.write_text(script_text)
    comment = json.dumps({"jobmedic": {"environment": sc.environment, "mode": "action"}})
    done = subprocess.run(
        ["sbatch", "--parsable", "--requeue", "--open-mode=append", "--nodes=1", f"--job-name=jm-{name}",
         f"--output={workdir}/out-%j.txt", f"--comment={comment}", str(script)],
        capture_output=True, text=True, timeout=30, check=True,
    )
    job_id = done.stdout.strip().split(";")[0]
    sc.jobs.append(job_id)
    return job_id


def _hang_watch(sc: Scenario, job_id: str) -> str:
    rows = json.loads(sc.cli("jobs", "--json", "--cluster", sc.cluster).stdout)["jobs"]
    return next((r["hang_watch"] for r in rows if r["job_id"] == job_id), "")


async def test_an_unknown_progress_format_runs_past_the_bound_untouched(
    scenario: Scenario, worker: WorkerProcess
) -> None:
    scenario.hang = BOUND
    worker.start()
    job_id = _sbatch(scenario, "unknown", UNKNOWN_FORMAT)
    await wait_for(lambda: slurm_state(job_id)[0] == "RUNNING", timeout=60, what="RUNNING")
    label = await wait_for(lambda: _hang_watch(scenario, job_id), timeout=60, what="the hang watch column")
    assert label.startswith("off (no progress signal"), label
    await wait_for(lambda: slurm_state(job_id)[0] == "COMPLETED", timeout=120, what=f"job {job_id} COMPLETED")
    job = scontrol_job(job_id)
    assert (job["JobState"], job["Restarts"], job["ExitCode"]) == ("COMPLETED", "0", "0:0"), job
    assert job.get("AdminComment", "") in {"", "(null)"}, job  # jobmedic never marked (touched) it
    out = Path(scenario.tmp / "unknown" / f"out-{job_id}.txt").read_text()
    assert out.count("[worker] chunk") == 30  # ran 30 s, far past the 4-8 s bound, in one attempt
    kinds = await wait_for(
        lambda: scenario.kinds(job_id) if EventType.COMPLETED in scenario.kinds(job_id) else None,
        timeout=30, what="the completed entry",
    )
    for kind in (EventType.DETECTION, EventType.ADVICE, EventType.ACTION_REQUESTED, EventType.ACTION_CONFIRMED):
        assert kind not in kinds, kinds


async def test_a_learned_progress_format_that_stops_is_a_hang(scenario: Scenario, worker: WorkerProcess) -> None:
    scenario.hang = BOUND
    worker.start()
    job_id = _sbatch(scenario, "learned", LEARNED_THEN_SILENT)
    await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=180, what="hung job restarted and completed")
    entries = scenario.entries(job_id)
    detection = [e for e in entries if e.event_type is EventType.DETECTION]
    assert len(detection) == 1 and detection[0].detail["incident"] == "hang", [e.outcome for e in detection]
    assert [e.action for e in entries if e.event_type is EventType.ACTION_CONFIRMED] == ["requeue_hold", "release"]
    advice = [e for e in entries if e.event_type is EventType.ADVICE][0]
    assert advice.category == "hang"
