"""Every scheduler action against the real cluster, through the local and the SSH runner."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from adapters.errors import ActionRefused, JobNotFound
from adapters.slurm.client import SlurmClient
from workflows.contracts import ActionKind, JobKey, JobState

from .conftest import Jobs, running, wait_job

pytestmark = pytest.mark.slurm


async def test_requeue_hold_of_a_running_job(client: SlurmClient, jobs: Jobs) -> None:
    job_id = jobs.submit(label="rqh")
    job = await wait_job(client, job_id, running, what="RUNNING")
    assert job.restarts == 0

    result = await client.requeue_hold(job.key, expected_restarts=0)
    assert result.action is ActionKind.REQUEUE_HOLD and result.changed
    assert result.job is not None and result.job.job_id == job_id
    assert (result.job.state, result.job.held, result.job.restarts) == (JobState.PENDING, True, 1)

    again = await client.requeue_hold(job.key, expected_restarts=0)
    assert not again.changed and again.job is not None and again.job.restarts == 1
    once_more = await client.requeue_hold(job.key)
    assert not once_more.changed and "held" in once_more.detail
    now = await client.get_job(job_id)
    assert (now.state, now.held, now.restarts) == (JobState.PENDING, True, 1)


async def test_exclude_release_and_the_exclusion_survives_requeue(client: SlurmClient, jobs: Jobs) -> None:
    job_id = jobs.submit(label="excl")
    job = await wait_job(client, job_id, running, what="RUNNING")
    bad = job.nodes[0]
    await client.requeue_hold(job.key, expected_restarts=0)

    excluded = await client.set_excluded_nodes(job.key, [bad])
    assert excluded.changed and excluded.job is not None and bad in excluded.job.excluded_nodes
    assert not (await client.set_excluded_nodes(job.key, [bad])).changed

    released = await client.release(job.key)
    assert released.changed and released.job is not None and not released.job.held
    restarted = await wait_job(client, job_id, running, what="RUNNING again", timeout=60)
    assert restarted.nodes and bad not in restarted.nodes and restarted.restarts == 1

    requeued = await client.requeue_hold(job.key, expected_restarts=1)
    assert requeued.changed and requeued.job is not None and requeued.job.restarts == 2
    assert bad in requeued.job.excluded_nodes

    cancelled = await client.cancel(job.key)
    assert cancelled.changed and cancelled.job is not None and cancelled.job.state is JobState.CANCELLED
    assert not (await client.cancel(job.key)).changed


async def test_an_earlier_exclusion_is_given_back_while_a_new_one_is_added(client: SlurmClient, jobs: Jobs) -> None:
    """readmit: jobmedic's oldest exclusion comes off ExcNodeList in the same update that adds the new bad node,
    and taking the last one off leaves the list empty."""
    job_id = jobs.submit(label="readm")
    job = await wait_job(client, job_id, running, what="RUNNING")
    await client.requeue_hold(job.key, expected_restarts=0)
    first = await client.set_excluded_nodes(job.key, ["node3", "node4"])
    assert first.job is not None and {"node3", "node4"} <= set(first.job.excluded_nodes)

    swapped = await client.set_excluded_nodes(job.key, ["node1"], readmit=["node3"])
    assert swapped.changed and swapped.job is not None, swapped
    assert set(swapped.job.excluded_nodes) == {"node1", "node4"} and "let node3 back in" in swapped.detail, swapped
    assert set((await client.get_job(job_id)).excluded_nodes) == {"node1", "node4"}  # what Slurm shows

    cleared = await client.set_excluded_nodes(job.key, [], readmit=["node1", "node4"])
    assert cleared.changed and (await client.get_job(job_id)).excluded_nodes == []
    assert not (await client.set_excluded_nodes(job.key, [], readmit=["node2"])).changed  # never excluded
    await client.cancel(job.key)


async def test_release_without_a_hold_changes_nothing(client: SlurmClient, jobs: Jobs) -> None:
    job_id = jobs.submit(label="rel")
    job = await wait_job(client, job_id, running, what="RUNNING")
    result = await client.release(job.key)
    assert not result.changed and result.job is not None and result.job.state is JobState.RUNNING


async def test_excluding_nodes_of_a_running_job_is_refused(client: SlurmClient, jobs: Jobs) -> None:
    job_id = jobs.submit(label="exrun")
    job = await wait_job(client, job_id, running, what="RUNNING")
    other = next(n for n in ("node1", "node2", "node3", "node4") if n not in job.nodes)
    with pytest.raises(ActionRefused, match="requeue-hold it first"):
        await client.set_excluded_nodes(job.key, [other])
    assert not (await client.set_excluded_nodes(job.key, [])).changed
    with pytest.raises(ActionRefused, match="not a node name"):
        await client.set_excluded_nodes(job.key, ["node1,node2"])
    assert (await client.get_job(job_id)).state is JobState.RUNNING


async def test_requeue_hold_of_a_failed_job(client: SlurmClient, jobs: Jobs) -> None:
    job_id = jobs.submit(script="fail", label="failed")
    job = await wait_job(client, job_id, lambda j: j.state.finished, what="finished")
    assert (job.state, job.exit_code) == (JobState.FAILED, 3)
    result = await client.requeue_hold(job.key, expected_restarts=0)
    assert result.changed and result.job is not None
    assert (result.job.job_id, result.job.state, result.job.held, result.job.restarts) == (job_id, JobState.PENDING, True, 1)


async def test_requeue_hold_of_a_pending_job_holds_it(client: SlurmClient, jobs: Jobs) -> None:
    job_id = jobs.submit("--begin=now+1hour", label="pend")
    job = await client.get_job(job_id)
    assert job.state is JobState.PENDING and not job.held
    held = await client.requeue_hold(job.key, expected_restarts=0)
    assert held.changed and held.job is not None and held.job.held and held.job.restarts == 0
    released = await client.release(held.job.key)
    assert released.changed and released.job is not None and not released.job.held
    # never requeued: the begin time is the user's, start_now leaves it alone
    await asyncio.sleep(3)  # the scheduler passes every second here: long enough to start it if allowed
    later = await client.get_job(job_id)
    assert later.state is JobState.PENDING and not later.held and later.reason == "BeginTime"


async def test_a_completed_job_is_not_requeued(client: SlurmClient, jobs: Jobs) -> None:
    job_id = jobs.submit(script="ok", label="done")
    job = await wait_job(client, job_id, lambda j: j.state.finished, what="finished")
    assert job.state is JobState.COMPLETED
    with pytest.raises(ActionRefused, match="COMPLETED"):
        await client.requeue_hold(job.key)


async def test_a_recycled_job_id_is_not_the_job(client: SlurmClient, jobs: Jobs) -> None:
    job_id = jobs.submit(label="recyc")
    job = await wait_job(client, job_id, running, what="RUNNING")
    assert job.submit_time is not None
    older = JobKey(cluster="lab", job_id=job_id, submit_time=job.submit_time - timedelta(days=1))
    newer = JobKey(cluster="lab", job_id=job_id, submit_time=job.submit_time + timedelta(days=1))
    for key in (older, newer):
        with pytest.raises(JobNotFound, match="another job"):
            await client.requeue_hold(key)
        with pytest.raises(JobNotFound):
            await client.cancel(key)
    assert (await client.get_job(job_id)).state is JobState.RUNNING


async def test_unknown_job_id(client: SlurmClient, slurm_cluster: object) -> None:
    with pytest.raises(JobNotFound):
        await client.get_job("987654321")
    with pytest.raises(JobNotFound):
        await client.cancel(JobKey(cluster="lab", job_id="987654321"))
    with pytest.raises(JobNotFound, match="not a Slurm job id"):
        await client.get_job("1;rm -rf /")
