"""Job arrays: each task is a job of its own (`ARRAYJOBID_TASKID`), and every action touches that task only."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from adapters.errors import JobNotFound
from adapters.slurm.client import SlurmClient
from adapters.slurm.parse import array_of, array_task_count, is_array_remainder, job_identity, parse_squeue_json
from workflows.contracts import JobInfo, JobState

from .conftest import Jobs, running, scontrol, wait_job


async def wait_task(client: SlurmClient, task: str, *, timeout: float = 60) -> JobInfo:
    """Until array task `task` runs: right after sbatch it is still part of the array's one pending record."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await wait_job(client, task, running, what="RUNNING", timeout=max(1.0, deadline - time.monotonic()))
        except JobNotFound:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)

# the array fields of `squeue --json` as Slurm 22.05 printed them here for `sbatch --array=0-5 --exclusive -N1`
# on 4 nodes: tasks 0 and 1 running (own job ids), the rest one pending record without a task id
_SQUEUE = {
    "jobs": [
        {"job_id": 289, "array_job_id": 288, "array_task_id": 0, "array_task_string": "", "job_state": "RUNNING",
         "nodes": "node3", "restart_cnt": 0, "priority": 4294901563, "submit_time": 1796158293,
         "standard_output": "/tmp/arr/o-%A_%a.out"},
        {"job_id": 290, "array_job_id": 288, "array_task_id": 1, "array_task_string": "", "job_state": "FAILED",
         "nodes": "node4", "restart_cnt": 0, "priority": 4294901563, "submit_time": 1796158293, "exit_code": 256,
         "standard_output": "/tmp/arr/o-%A_%a.out"},
        {"job_id": 288, "array_job_id": 288, "array_task_id": None, "array_task_string": "2-5",
         "job_state": "PENDING", "nodes": "", "restart_cnt": 0, "priority": 4294901563, "submit_time": 1796158293,
         "state_reason": "Resources"},
        {"job_id": 291, "array_job_id": 0, "array_task_id": None, "array_task_string": "", "job_state": "RUNNING",
         "nodes": "node1", "restart_cnt": 0, "priority": 4294901562, "submit_time": 1796158299},
    ]
}


def test_array_tasks_are_known_by_arrayjobid_taskid() -> None:
    jobs = {j.job_id: j for j in parse_squeue_json(json.dumps(_SQUEUE))}
    assert list(jobs) == ["288_0", "288_1", "288_[2-5]", "291"]
    assert jobs["288_1"].state is JobState.FAILED and jobs["288_1"].exit_code == 1
    # %A and %a are the array's id and the task's; %j stays the task's own job id
    assert jobs["288_1"].stdout_path == "/tmp/arr/o-288_1.out"
    assert is_array_remainder("288_[2-5]") and not is_array_remainder("288_1") and not is_array_remainder("291")
    assert [array_of(j) for j in jobs] == ["288", "288", "288", None]


@pytest.mark.parametrize(("spec", "count"), [("2-5", 4), ("1,3,7-9", 5), ("0-9:2", 5), ("0-99%4", 100), ("x", 0)])
def test_array_task_count(spec: str, count: int) -> None:
    assert array_task_count(spec) == count


def test_job_identity_of_a_plain_job_is_its_id() -> None:
    assert job_identity(17, 0, None) == "17"
    assert job_identity(18, 17, 4294967294) == "17_[]"




@pytest.mark.slurm
async def test_every_action_on_one_task_leaves_its_siblings_alone(local_client: SlurmClient, jobs: Jobs) -> None:
    client = local_client
    array = jobs.submit("--array=0-3", "-N1", "--requeue", label="arr")
    tasks = [f"{array}_{i}" for i in range(4)]
    for task in tasks:
        await wait_task(client, task)
    one = await client.get_job(tasks[1])
    assert one.job_id == tasks[1] and one.key.workflow_id.startswith(f"jobmedic-lab-{array}_1-")
    assert {t.job_id for t in await client.array_tasks(tasks[1])} == set(tasks)

    held = await client.requeue_hold(one.key, expected_restarts=0)
    assert held.changed and held.job is not None and held.job.job_id == tasks[1]
    assert (held.job.state, held.job.held, held.job.restarts) == (JobState.PENDING, True, 1)
    bad = one.nodes[0]
    excluded = await client.set_excluded_nodes(one.key, [bad])
    assert excluded.job is not None and excluded.job.excluded_nodes == [bad]
    for sibling in (tasks[0], tasks[2], tasks[3]):
        job = await client.get_job(sibling)
        assert (job.state, job.restarts, job.excluded_nodes, job.held) == (JobState.RUNNING, 0, [], False), sibling
        assert client.owner_of(job) is None  # jobmedic's mark is on the task it acted on only
    assert client.holds(await client.get_job(tasks[1]))

    released = await client.release(one.key)
    assert released.changed
    again = await wait_job(client, tasks[1], running, what="RUNNING again", timeout=60)
    assert again.restarts == 1 and bad not in again.nodes
    assert "jobmedic:" in scontrol("show", "job", tasks[1]).stdout


@pytest.mark.slurm
async def test_tasks_not_started_yet_are_no_job_to_watch(local_client: SlurmClient, jobs: Jobs, slurm_cluster) -> None:
    n = len(slurm_cluster.nodes)
    array = jobs.submit(f"--array=0-{n + 1}", "-N1", "--exclusive", label="rest")
    await wait_task(local_client, f"{array}_0")
    for _ in range(20):  # Slurm may start another task between the two reads: read both again until it did not
        everything = [j.job_id for j in await local_client.list_jobs(opted_in_only=False) if array_of(j.job_id) == array]
        watched = [j.job_id for j in await local_client.list_jobs() if array_of(j.job_id) == array]
        again = [j.job_id for j in await local_client.list_jobs(opted_in_only=False) if array_of(j.job_id) == array]
        if again == everything:
            break
        await asyncio.sleep(0.5)
    rest = [j for j in everything if is_array_remainder(j)]
    assert len(rest) == 1 and rest[0].startswith(f"{array}_[")
    assert rest[0] not in watched and set(watched) == set(everything) - set(rest)
