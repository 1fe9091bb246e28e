"""On the real Temporal dev server: the sharded watch workflow and its activities in a worker that is stopped
mid-watch and replaced; the replacement resumes every cursor from the watch_state table (no line sent twice,
none lost). And with >1,000 jobs the watch activity's heartbeat stays a few counters.

The scheduler listing is a stand-in (real output files, real file log source, real SQLite audit store); the
job workflows are started by the watch's signal-with-start but nobody runs them: what the watch sent is read
back from their histories.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from activities.screening import LogScreen
from activities.watch import WatchActivities, WatchContext
from adapters.audit import AuditStore
from adapters.logs.files import LocalFileLogSource
from workflows.cluster_watch import ClusterWatchWorkflow, watch_workflow_id
from workflows.contracts import JobInfo, JobKey
from workflows.messages import JobObservation, JobRecoveryInput, WatchInput

from tests.watch.test_watch_sharded import CRASH, Listing, job, write

pytestmark = [pytest.mark.temporal]


async def _watch_worker(client: Client, queue: str, listing: Listing, store: AuditStore, screen: LogScreen) -> Worker:
    def recovery_input(j: JobInfo, key: JobKey) -> JobRecoveryInput:
        return JobRecoveryInput(key=key, opt_in=j.opt_in.opt_in, scheduler_queue=queue)

    ctx = WatchContext(cluster=queue, environment="prod", main_queue=f"{queue}-jobs-nobody-runs",
                       scheduler_queue=queue, recovery_input=recovery_input, hang_bound_s=lambda i, c: 3600.0)
    watch = WatchActivities(context=ctx, slurm=listing, logs=LocalFileLogSource(), screen=screen, client=client,
                            audit=store, state_store=store)
    return Worker(client, task_queue=queue, workflows=[ClusterWatchWorkflow], activities=[watch.watch_cluster])


async def _sent_lines(client: Client, workflow_id: str) -> list[int]:
    """File line numbers of the flagged lines in every observation signalled to one job workflow."""
    lines: list[int] = []
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        attrs = None
        if event.event_type == HistoryEventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            attrs = event.workflow_execution_signaled_event_attributes
        if attrs is None:
            continue
        (obs,) = await client.data_converter.decode(attrs.input.payloads, [JobObservation])
        lines.extend(sorted({h.line_no for h in obs.hits if h.line_no is not None}))
    return lines


async def _until(check, *, timeout: float, what: str):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)


async def test_a_replaced_worker_resumes_every_cursor(temporal_server, tmp_path: Path) -> None:
    client = await Client.connect(temporal_server.address, namespace=temporal_server.namespace,
                                  data_converter=pydantic_data_converter)
    queue = f"watch-restart-{uuid.uuid4().hex[:8]}"
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    screen = await asyncio.to_thread(LogScreen)
    outs = [tmp_path / f"out-{i}.txt" for i in range(6)]
    for out in outs:
        write(out, ["iteration 1/100 | loss 2.0", CRASH])  # line 2
    listing = Listing([job(str(700 + i), out) for i, out in enumerate(outs)])
    handle = None
    try:
        worker = await _watch_worker(client, queue, listing, store, screen)
        async with worker:
            handle = await client.start_workflow(
                ClusterWatchWorkflow.run, WatchInput(cluster=queue, poll_interval_s=1.0, scheduler_queue=queue, shards=2),
                id=watch_workflow_id(queue), task_queue=queue,
            )
            workflows = await _until(lambda: _started(client, queue, 6), timeout=60, what="six job workflows")
        # the worker is gone mid-watch; lines keep coming
        for out in outs:
            write(out, ["iteration 2/100 | loss 1.9", CRASH])  # line 4
        await asyncio.sleep(2.0)
        replacement = await _watch_worker(client, queue, listing, store, screen)
        async with replacement:
            async def all_sent() -> bool:
                for wid in workflows:
                    if 4 not in await _sent_lines(client, wid):
                        return False
                return True

            await _until(all_sent, timeout=90, what="the new crash lines after the restart")
            await asyncio.sleep(3.0)  # a few more passes: nothing may be sent again
            for wid in workflows:
                assert await _sent_lines(client, wid) == [2, 4], wid  # each line once: none again, none lost
            desc = await handle.describe()
            beats = [p.heartbeat_details for p in desc.raw_description.pending_activities]
            assert len(beats) == 2 and all(p.attempt >= 2 for p in desc.raw_description.pending_activities)
    finally:
        if handle is not None:
            await handle.terminate("test over")
        store.close()


async def _started(client: Client, queue: str, count: int) -> list[str] | None:
    ids = [wf.id async for wf in client.list_workflows(f"TaskQueue = '{queue}-jobs-nobody-runs'")]
    return ids if len(ids) >= count else None


async def test_the_heartbeat_stays_small_with_1200_jobs(temporal_server, tmp_path: Path) -> None:
    client = await Client.connect(temporal_server.address, namespace=temporal_server.namespace,
                                  data_converter=pydantic_data_converter)
    queue = f"watch-big-{uuid.uuid4().hex[:8]}"
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    screen = await asyncio.to_thread(LogScreen)
    jobs = []
    for i in range(1200):
        out = tmp_path / f"o{i}"
        write(out, [f"{'x' * 40} iteration {n}/100 | loss 3.0" for n in range(1, 4)])
        jobs.append(job(str(20_000 + i), out))
    handle = None
    try:
        async with await _watch_worker(client, queue, Listing(jobs), store, screen):
            handle = await client.start_workflow(
                ClusterWatchWorkflow.run, WatchInput(cluster=queue, poll_interval_s=2.0, scheduler_queue=queue, shards=2),
                id=watch_workflow_id(queue), task_queue=queue,
            )

            async def beats() -> list[dict] | None:
                desc = await handle.describe()
                found = []
                for p in desc.raw_description.pending_activities:
                    if p.heartbeat_details.payloads:
                        (detail,) = await client.data_converter.decode(p.heartbeat_details.payloads)
                        found.append(detail)
                return found if len(found) == 2 and sum(d["watched"] for d in found) == 1200 else None

            details = await _until(beats, timeout=240, what="both shards to heartbeat after a full pass")
            assert all(len(json.dumps(d)) < 200 for d in details)
            assert store.watch_state_rows(queue) == 1200 + 2  # the state is in the table instead
    finally:
        if handle is not None:
            await handle.terminate("test over")
        store.close()
