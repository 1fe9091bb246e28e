"""Lemon nodes on real Slurm: a node named in the failures of three jobs is kept out of another job's restart."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.workflows.harness import Scenario, WorkerProcess, scontrol_job, slurm_state, wait_for
from workflows.contracts import EventType

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(240)]

SCRIPT = """#!/bin/bash
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  while [ ! -e %(flag)s ]; do sleep 0.2; done
  %(failure)s
  exit 1
fi
echo "step 1"; sleep 1; echo "[lemon] done"
"""
XID_ON_NODE2 = ('echo "$(date "+%b %d %H:%M:%S") node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, '
                'GPU has fallen off the bus."')
APP_ERROR = 'echo "Traceback (most recent call last):" >&2; echo "KeyError: \'input_ids\'" >&2'


def _submit(sc: Scenario, name: str, node: str, failure: str) -> tuple[str, object]:
    workdir = sc.tmp / name
    workdir.mkdir()
    flag = workdir / "fail"
    script = workdir / "job.sbatch"
    script.write_text(SCRIPT % {"flag": flag, "failure": failure})
    comment = json.dumps({"jobmedic": {"environment": sc.environment, "mode": "action"}})
    out = subprocess.run(
        ["sbatch", "--parsable", f"--job-name=jm-{name}", "--nodes=1", "--ntasks=1", f"--nodelist={node}", "--requeue",
         "--open-mode=append", f"--output={workdir}/out-%j.txt", f"--comment={comment}", str(script)],
        capture_output=True, text=True, timeout=30, check=True,
    )
    job_id = out.stdout.strip().split(";")[0]
    sc.jobs.append(job_id)
    return job_id, flag


async def test_a_node_three_jobs_failed_on_is_kept_out_of_another_jobs_restart(
    scenario: Scenario, worker: WorkerProcess
) -> None:
    scenario.policy = {"lemon_jobs": 3, "lemon_max_fraction": 0.25, "systemic_probe_s": 2.0}
    worker.start()
    # three jobs on node3/node4 whose logs carry node2's kernel Xid (a forwarded syslog line): node2 is implicated
    blamers = [_submit(scenario, f"blame{i}", node, XID_ON_NODE2) for i, node in enumerate(["node3", "node4", "node3"])]
    victim, victim_flag = _submit(scenario, "victim", "node1", APP_ERROR)
    await wait_for(lambda: all(slurm_state(j)[0] == "RUNNING" for j, _ in [*blamers, (victim, None)]), timeout=60,
                   what="all four RUNNING")
    for _, flag in blamers:
        flag.touch()

    def lemon_entries() -> list:
        store = scenario.store()
        try:
            return store.query(cluster=scenario.cluster, event_types=[EventType.LEMON_NODE])
        finally:
            store.close()

    lemons = await wait_for(lambda: [e for e in lemon_entries() if e.action == "lemon"], timeout=60,
                            what="node2 declared a lemon")
    assert lemons[0].implicated_nodes == ["node2"] and "3 jobs" in lemons[0].outcome, lemons[0].outcome
    victim_flag.touch()
    await wait_for(lambda: slurm_state(victim) == ("COMPLETED", 1), timeout=90, what="the victim restarted once")
    advice = [e for e in scenario.entries(victim) if e.event_type is EventType.ADVICE]
    assert len(advice) == 1 and advice[0].category == "app_error", advice
    assert advice[0].action == "restart_exclude" and advice[0].rule == "app_error_restart+lemon", advice[0].rule
    assert "node2" in scontrol_job(victim).get("ExcNodeList", "")
    for job_id, _ in blamers:
        first = [e for e in scenario.entries(job_id) if e.event_type is EventType.ADVICE][0]
        assert first.implicated_nodes == ["node2"] and first.action == "restart_exclude", first
