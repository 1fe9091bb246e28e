"""The per-cluster watch workflow.

It runs long-lived, heartbeating activities (`watch_cluster`) on the cluster's
scheduler task queue: `WatchInput.shards` of them, shard i watching the jobs
whose stable job-id hash names i, so several workers share a large cluster.
Each polls Slurm once per interval, reads its jobs' logs incrementally, and
signals (or signal-with-starts) a job's recovery workflow only when something
changed. The cursors are kept per job in the audit database (`watch_state`),
so a worker that dies is replaced by one that resumes from the last saved
cursors (the job workflows drop re-delivered observations), and the heartbeat
stays a few counters at any job count; the workflow's own history stays a
handful of events per shard however long it runs. (Versioned: runs started
before the `watch-shards` patch keep their one activity.)

Slurm's own hooks make it faster: `jobmedic notify` (wired into EpilogSlurmctld
and strigger, docs/operations.md) sends the `poke` signal, the workflow keeps
the last few pokes, and the activity reads them through the `pokes` query every
half second (activities/watch_wake.py): a poke makes the next poll happen now,
through the same batched query, so the interval poll stays the safety net. A
query is read-only and leaves no history, so waking costs no event; each poke
costs its signal's events. So that pokes cannot grow the history without bound,
a run whose history reaches HANDOVER_AFTER_EVENTS asks the activity (through the
same query) to hand over: the activity returns its state after its current
poll and the workflow continues as new with it, and the next activity starts
from that state. (Versioned: runs started before the patch keep their old path
and are never asked.)
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from pydantic import Field
from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from workflows.contracts import Contract
    from workflows.messages import ActivityNames, WatchInput

HANDOVER = "watch-poke-handover"  # workflow.patched: the run may continue as new with the watch's state
SHARDS = "watch-shards"  # workflow.patched: the run starts WatchInput.shards activities, one per shard
MAX_SHARDS = 64
HANDOVER_AFTER_EVENTS = 10_000  # Temporal warns at 10,240 events and ends a workflow at 51,200
KEEP_POKES = 64  # the watch remembers this many pokes (the activity reads them within a second)
MAX_POKE_JOBS = 256  # a poke names at most this many jobs and nodes (the rest: the next interval poll)
MAX_POKE_NODES = 1024


class WatchNames:
    POKE = "poke"  # signal: WatchPoke
    POKES = "pokes"  # query(after: int) -> PokesSince


class WatchPoke(Contract):
    """Signal `poke`: Slurm says something happened; poll now instead of at the next interval."""

    source: str = ""  # "job-end" (EpilogSlurmctld), "node-down" / "node-drained" (strigger), ...
    job_ids: list[str] = Field(default_factory=list)  # as the watch names them (array tasks ARRAYID_TASKID)
    nodes: list[str] = Field(default_factory=list)
    sent_at: datetime | None = None  # the notifier's clock
    detail: str = ""  # what Slurm said, for the log ("exit 3:0, derived 0:0")


class PokesSince(Contract):
    """Answer of the `pokes` query: the pokes numbered after the one asked for, oldest first."""

    seq: int = 0  # number of the newest poke (0: none yet)
    pokes: list[WatchPoke] = Field(default_factory=list)
    handover: bool = False  # the activity should return its state: the workflow continues as new with it


def watch_workflow_id(cluster: str) -> str:
    return f"jobmedic-watch-{cluster}"


@workflow.defn(name="ClusterWatch")
class ClusterWatchWorkflow:
    def __init__(self) -> None:
        self._poke_seq = 0
        self._pokes: list[tuple[int, WatchPoke]] = []
        self._may_hand_over = False
        self._handover = False

    @workflow.signal(name=WatchNames.POKE)
    def poke(self, poke: WatchPoke) -> None:
        # job data from outside: bounded here, whatever the sender did
        poke.job_ids, poke.nodes = poke.job_ids[:MAX_POKE_JOBS], poke.nodes[:MAX_POKE_NODES]
        poke.source, poke.detail = poke.source[:64], poke.detail[:256]
        self._poke_seq += 1
        self._pokes = [*self._pokes, (self._poke_seq, poke)][-KEEP_POKES:]
        if self._may_hand_over and workflow.info().get_current_history_length() >= HANDOVER_AFTER_EVENTS:
            self._handover = True

    @workflow.query(name=WatchNames.POKES)
    def pokes_since(self, after: int) -> PokesSince:
        return PokesSince(
            seq=self._poke_seq, pokes=[p for seq, p in self._pokes if seq > after], handover=self._handover
        )

    @workflow.run
    async def run(self, inp: WatchInput) -> None:
        heartbeat = timedelta(seconds=max(5.0, inp.poll_interval_s * 5))
        self._may_hand_over = workflow.patched(HANDOVER)
        shards = max(1, min(MAX_SHARDS, inp.shards)) if workflow.patched(SHARDS) else 1

        # Each activity only returns when it is cancelled or asked to hand over; a failure (worker lost,
        # scheduler unreachable for long) is retried for ever with back-off.
        def shard_run(shard: int):  # noqa: ANN202 - the activity handle
            shard_input = inp if shards == 1 else inp.model_copy(update={"shard": shard, "shards": shards})
            return workflow.execute_activity(
                ActivityNames.WATCH_CLUSTER,
                shard_input,
                task_queue=inp.scheduler_queue or f"jobmedic-slurm-{inp.cluster}",
                start_to_close_timeout=timedelta(days=3650),
                heartbeat_timeout=heartbeat,
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=1),
                    maximum_interval=timedelta(seconds=30),
                    backoff_coefficient=2.0,
                ),
            )

        if shards == 1:
            state = await shard_run(0)
        else:
            await asyncio.gather(*(shard_run(i) for i in range(shards)))
            state = None  # sharded watches keep their state in the watch-state table, not in a handover
        if self._may_hand_over and self._handover:
            await workflow.wait_condition(workflow.all_handlers_finished)
            workflow.continue_as_new(inp.model_copy(update={"resume_state": state}))
