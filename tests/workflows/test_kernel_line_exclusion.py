"""On real Slurm: a GPU failure whose node is named only in a kernel-style line or in prose is restarted without it.

The job's own output names the bad node once, the way real logs do when the node's
syslog or a health agent is forwarded into it (an FQDN before `kernel:`, or "on instance
HOST"); no launcher line names it, and the other ranks print NCCL watchdog timeouts first.
Judged by what Slurm shows afterwards: one restart, the node in ExcNodeList, not in NodeList.
"""

from __future__ import annotations

import pytest

from tests.workflows.harness import Scenario, WorkerProcess, scontrol_job, slurm_state, submit_training, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(400)]


def _first_nodes(sc: Scenario, job_id: str) -> list[str]:
    out = (sc.tmp / "job" / f"train-{job_id}.out").read_text()
    return out.split("[demo] attempt 1 on ", 1)[1].split(" ", 1)[0].split(",")


@pytest.mark.parametrize("plan", ["xid-fqdn,ok", "gpu-prose,ok"])
async def test_gpu_failure_named_only_in_a_kernel_or_prose_line(scenario: Scenario, worker: WorkerProcess, plan: str):
    worker.start()
    job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan=plan)
    scenario.jobs.append(job_id)
    await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=150,
                   what=f"job {job_id} COMPLETED after 1 restart")
    bad = _first_nodes(scenario, job_id)[1]
    final = scontrol_job(job_id)
    assert bad in final.get("ExcNodeList", ""), final
    assert bad not in final.get("NodeList", ""), final
    advice = [e for e in scenario.entries(job_id) if e.event_type.value == "advice"]
    assert len(advice) == 1 and advice[0].category == "gpu_hardware" and advice[0].implicated_nodes == [bad]
