"""Stragglers with a culprit on real Slurm: a real `jobmedic worker` in action mode, the demo's `slow` plan.

From `--fail-at` on, the ranks of the job's second node compute 3x slower (their
per-rank timing lines say so) and the job's throughput drops to a third. With
straggler action enabled in the opt-in the job is restarted once without that
node; with it disabled the same culprit is only advised.
"""

from __future__ import annotations

import json

import pytest

from tests.workflows.harness import Scenario, WorkerProcess, scontrol_job, slurm_state, submit_training, wait_for
from workflows.contracts import EventType

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(400)]


def _submit(sc: Scenario, *, plan: str, straggler_action: bool) -> str:
    workdir = sc.tmp / "job"
    comment = json.dumps({"jobmedic": {"environment": sc.environment, "mode": "action",
                                       "checkpoint_dir": str(workdir / "ckpt"), "straggler_action": straggler_action}})
    job_id = submit_training(workdir, environment=sc.environment, plan=plan, iterations=260, fail_at=160,
                             iteration_seconds=0.1, comment=comment)
    sc.jobs.append(job_id)
    return job_id


def _slow_node(sc: Scenario, job_id: str) -> str:
    out = (sc.tmp / "job" / f"train-{job_id}.out").read_text()
    return out.split("[demo] attempt 1 on ", 1)[1].split(" ", 1)[0].split(",")[1]


async def test_a_straggler_is_restarted_without_its_slow_node_when_enabled(
    scenario: Scenario, worker: WorkerProcess
) -> None:
    worker.start()
    job_id = _submit(scenario, plan="slow,ok", straggler_action=True)
    await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=180, what="COMPLETED after 1 restart")
    slow = _slow_node(scenario, job_id)
    final = scontrol_job(job_id)
    assert slow in final.get("ExcNodeList", "") and slow not in final.get("NodeList", ""), final
    entries = await wait_for(
        lambda: scenario.entries(job_id) if EventType.COMPLETED in scenario.kinds(job_id) else None,
        timeout=30, what="the completed entry",
    )
    detection = [e for e in entries if e.event_type is EventType.DETECTION and (e.detail or {}).get("incident") == "straggler"]
    assert len(detection) == 1 and detection[0].implicated_nodes == [slow]
    assert detection[0].detail["finding"]["culprits"] == [slow]
    advice = [e for e in entries if e.event_type is EventType.ADVICE]
    assert [(a.action, a.rule, a.implicated_nodes) for a in advice] == [("restart_exclude", "straggler_exclude", [slow])]
    kinds = [e.event_type for e in entries]
    assert kinds.index(EventType.ADVICE) < kinds.index(EventType.ACTION_REQUESTED)
    confirmed = [e.action for e in entries if e.event_type is EventType.ACTION_CONFIRMED]
    assert confirmed == ["requeue_hold", "exclude_nodes", "release"]


async def test_a_straggler_is_only_advised_when_straggler_action_is_off(
    scenario: Scenario, worker: WorkerProcess
) -> None:
    worker.start()
    job_id = _submit(scenario, plan="slow", straggler_action=False)
    advice = await wait_for(
        lambda: [e for e in scenario.entries(job_id) if e.event_type is EventType.ADVICE], timeout=120,
        what="the straggler advice",
    )
    slow = _slow_node(scenario, job_id)
    assert (advice[0].action, advice[0].rule, advice[0].implicated_nodes) == ("nothing", "straggler_action_off", [slow])
    assert f"restart excluding {slow} advised" in advice[0].outcome
    await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 0), timeout=120, what="job completed untouched")
    assert EventType.ACTION_REQUESTED not in scenario.kinds(job_id)
