"""`jobmedic notify` -> the `poke` signal -> the watch workflow's `pokes` query, on the Temporal dev server.

A worker in this process hosts only the watch workflow; its polling activity has
no worker (the scheduler queue is nobody's), which leaves the workflow waiting,
as a real one waits on its long-running activity.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from workflows.cluster_watch import KEEP_POKES, MAX_POKE_JOBS, ClusterWatchWorkflow, PokesSince, WatchNames, WatchPoke
from workflows.cluster_watch import watch_workflow_id
from workflows.messages import WatchInput

pytestmark = pytest.mark.temporal
JOBMEDIC = str(Path(sys.executable).parent / "jobmedic")


@pytest.fixture
async def watch(temporal_server):
    client = await Client.connect(temporal_server.address, data_converter=pydantic_data_converter)
    cluster = f"n{uuid.uuid4().hex[:8]}"
    queue = f"jobmedic-{cluster}"
    async with Worker(client, task_queue=queue, workflows=[ClusterWatchWorkflow]):
        handle = await client.start_workflow(
            ClusterWatchWorkflow.run, WatchInput(cluster=cluster, scheduler_queue=f"{queue}-nobody"),
            id=watch_workflow_id(cluster), task_queue=queue,
        )
        yield cluster, handle
        await handle.terminate("test finished")


def notify(tmp_path: Path, address: str, cluster: str, *argv: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    cfg = tmp_path / "jobmedic.toml"
    cfg.write_text(f'[temporal]\naddress = "{address}"\n\n[[clusters]]\nname = "{cluster}"\n')
    return subprocess.run([JOBMEDIC, "--config", str(cfg), "notify", *argv, "--strict"], env=env,
                          capture_output=True, text=True, timeout=30)


async def test_notify_pokes_the_watch_and_the_activity_can_read_it(tmp_path, temporal_server, watch) -> None:
    cluster, handle = watch
    env = {"SLURM_JOB_ID": "123", "SLURM_JOB_EXIT_CODE2": "1:0", "SLURM_JOB_NODELIST": "node[2-3]",
           "SLURM_JOB_COMMENT": '{"jobmedic":{"environment":"prod"}}'}
    done = notify(tmp_path, temporal_server.address, cluster, "job-end", env=env)
    assert done.returncode == 0, done.stderr
    done = notify(tmp_path, temporal_server.address, cluster, "node-down", "--drained", "node4", env={})
    assert done.returncode == 0, done.stderr

    answer = await handle.query(WatchNames.POKES, 0, result_type=PokesSince)
    assert answer.seq == 2
    assert [(p.source, p.job_ids, p.nodes) for p in answer.pokes] == [
        ("job-end", ["123"], ["node2", "node3"]), ("node-drained", [], ["node4"])]
    assert answer.pokes[0].detail == "exit 1:0"
    later = await handle.query(WatchNames.POKES, 1, result_type=PokesSince)
    assert [p.source for p in later.pokes] == ["node-drained"]


async def test_the_watch_keeps_pokes_bounded(watch) -> None:
    _, handle = watch
    await handle.signal(WatchNames.POKE, WatchPoke(source="x" * 500, job_ids=[str(i) for i in range(1000)]))
    (big,) = (await handle.query(WatchNames.POKES, 0, result_type=PokesSince)).pokes
    assert (len(big.job_ids), len(big.source)) == (MAX_POKE_JOBS, 64)
    for i in range(KEEP_POKES + 5):
        await handle.signal(WatchNames.POKE, WatchPoke(source="job-end", job_ids=[str(i)]))
    answer = await handle.query(WatchNames.POKES, 0, result_type=PokesSince)
    assert answer.seq == KEEP_POKES + 6
    assert len(answer.pokes) == KEEP_POKES
    assert answer.pokes[-1].job_ids == [str(KEEP_POKES + 4)]


async def test_a_long_history_hands_the_state_over_to_a_new_run(temporal_server, monkeypatch) -> None:
    """Pokes grow the history; past HANDOVER_AFTER_EVENTS the activity returns its state (asked through the
    query, read by the real PollWaker) and the next run's activity starts from it."""
    from temporalio import activity
    from temporalio.worker import UnsandboxedWorkflowRunner

    from activities import watch_wake
    from activities.watch import WatchState
    from activities.watch_wake import PollWaker
    from workflows import cluster_watch
    from workflows.messages import ActivityNames

    monkeypatch.setattr(cluster_watch, "HANDOVER_AFTER_EVENTS", 30)
    monkeypatch.setattr(watch_wake, "CHECK_EVERY_S", 0.05)
    client = await Client.connect(temporal_server.address, data_converter=pydantic_data_converter)
    cluster = f"h{uuid.uuid4().hex[:8]}"
    started: list[dict | None] = []

    @activity.defn(name=ActivityNames.WATCH_CLUSTER)
    async def watch_cluster(inp: WatchInput) -> dict | None:  # the loop of activities/watch.py, without Slurm
        started.append(inp.resume_state)
        state = WatchState.model_validate(inp.resume_state or {})
        waker = PollWaker.for_this_activity(client)
        while True:
            state.polls += 1
            await waker.wait(state, 0.2)
            if waker.handover_asked:
                return state.model_dump(mode="json")

    queue = f"jobmedic-{cluster}"
    async with Worker(client, task_queue=queue, workflows=[ClusterWatchWorkflow], activities=[watch_cluster],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        handle = await client.start_workflow(
            ClusterWatchWorkflow.run, WatchInput(cluster=cluster, scheduler_queue=queue),
            id=watch_workflow_id(cluster), task_queue=queue,
        )
        first_run = (await handle.describe()).run_id
        try:
            for i in range(30):
                await handle.signal(WatchNames.POKE, WatchPoke(source="job-end", job_ids=[str(i)]))
                if len(started) > 1:
                    break
                await asyncio.sleep(0.1)
            assert len(started) == 2, started
            assert started[0] is None and started[1]["polls"] > 0
            now = client.get_workflow_handle(watch_workflow_id(cluster))
            assert (await now.describe()).run_id != first_run
            assert (await now.query(WatchNames.POKES, 0, result_type=PokesSince)).handover is False
        finally:
            await client.get_workflow_handle(watch_workflow_id(cluster)).terminate("test finished")
