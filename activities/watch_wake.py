"""How the cluster watch's poll loop waits: the interval, or less when Slurm poked the watch.

`jobmedic notify` (EpilogSlurmctld, strigger) signals `poke` to the watch
workflow; the workflow keeps the last pokes and answers the `pokes` query. While
the activity waits for its next poll it asks that query every `CHECK_EVERY_S`
(cheap: a query is answered from the workflow's cached state and adds no
history), and a new poke ends the wait at once. A poke that names jobs (the
job-end hook) is followed by a poll of those jobs only, read in one query
(`targets`); one that names nodes (strigger), or none, by a full pass. The full
pass stays on its interval, counted from the last full pass: at 10,000 jobs a
full pass costs seconds of CPU, and a poke per ended job made the watch run full
passes back to back. A poke changes when the watch looks at a job, never what it
sees or what it signals.

Slurm runs EpilogSlurmctld while the job is still COMPLETING (22.05, observed:
`squeue --json` says COMPLETING until the epilog has exited), so a poll right
after a job-end poke may see the job before its final state. A poked job that
the poll saw RUNNING or COMPLETING is polled again every `REPOLL_EVERY_S`, for at
most `SETTLE_S`; then the interval poll takes over.

The same answer carries the workflow's request to hand over (`handover_asked`):
the activity then returns its state and the workflow continues as new with it
(workflows/cluster_watch.py), so that pokes cannot grow one run's history for
ever.

Whatever goes wrong with the channel (an older workflow without the query, the
workflow's worker away, Temporal slow), the wait falls back to the plain interval
for a while: `QUIET_FIRST_S` after one failed query, doubling with each failure in a
row up to `QUIET_AFTER_ERROR_S`; one answer ends it. A query that timed out once
because the worker was busy (a burst of failures is exactly when it is) must not
mute the channel for half a minute: the poll stays the safety net, not the rule.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Protocol

from loguru import logger
from temporalio import activity
from temporalio.client import Client

from workflows.cluster_watch import PokesSince, WatchNames, WatchPoke
from workflows.history import as_utc

CHECK_EVERY_S = 0.5  # how often a waiting watch asks for new pokes
REPOLL_EVERY_S = 0.5  # a poked job not finished yet (still in its epilog) is polled again this soon
SETTLE_S = 10.0  # ... for at most this long after its poke
QUERY_TIMEOUT_S = 2.0
QUIET_FIRST_S = 1.0  # after a failed query, the channel is left alone this long ...
QUIET_AFTER_ERROR_S = 30.0  # ... doubling with each failure in a row, up to this
FRESH_S = 60.0  # pokes older than this, found by a freshly started activity, are already covered
_NOT_SETTLED = {"RUNNING", "COMPLETING"}


class WatchedJobs(Protocol):
    """What the waiter reads of the watch state: each watched job's id and last seen state."""

    @property
    def jobs(self) -> dict: ...


class PollWaker:
    """Waits for the watch's next poll; one per running watch activity (its memory is not durable:
    a restarted activity polls at once anyway)."""

    def __init__(
        self,
        client: Client,
        workflow_id: str,
        *,
        check_every_s: float = CHECK_EVERY_S,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
    ) -> None:
        self._handle = client.get_workflow_handle(workflow_id)
        self._check_every_s = check_every_s
        self._monotonic = monotonic
        self._now = now
        self._seen: int | None = None  # number of the newest poke taken (None: not asked yet)
        self._settling: dict[str, float] = {}  # poked job id -> until when it is polled again early
        self._quiet_until = 0.0
        self._failures_in_row = 0
        self._full_due: float | None = None  # when the next full pass is due
        self._next_look = 0.0  # when a pass in progress may ask for pokes again
        self._look: asyncio.Future[list[WatchPoke]] | None = None  # that question, while it runs beside the pass
        self._full_again = False  # a poke taken during a full pass named nodes: one more full pass at once
        self.handover_asked = False  # the workflow wants the state back, to continue as new with it
        # after `wait`: the job ids the next poll is for, or None for a full pass over every job
        self.targets: set[str] | None = None

    @classmethod
    def for_this_activity(cls, client: Client) -> PollWaker:
        workflow_id = activity.info().workflow_id
        if workflow_id is None:  # a standalone activity: no watch workflow to be poked through
            raise RuntimeError("the poll waker needs an activity that a workflow started")
        return cls(client, workflow_id)

    async def wait(self, state: WatchedJobs, interval_s: float) -> list[WatchPoke]:
        """Sleep until the next poll is due: the next full pass `interval_s` after the last one, or sooner for
        poked jobs; returns the pokes that woke it, and sets `targets` to what the next poll is for."""
        self._settle(state)
        now = self._monotonic()
        if self.targets is None or self._full_due is None:  # the poll just made was a full pass
            self._full_due = now + interval_s
        self.targets = None
        if self._look is not None:  # the pass ended while its last look was out: its answer is the first here
            pokes, self._look = await self._look, None
            named = self._taken(pokes)
            if named and not self._full_again:
                self.targets = named
                return pokes
        if self._full_again:
            self._full_again = False
            return []
        repoll = now + REPOLL_EVERY_S if self._settling else None
        while (left := self._full_due - self._monotonic()) > 0:
            pokes = await self._new_pokes()
            if self.handover_asked:
                return pokes
            if pokes:
                self.targets = _named_jobs(pokes)
                return pokes
            if repoll is not None and self._monotonic() >= repoll:
                self.targets = set(self._settling)
                return []
            nap = min(self._check_every_s, left)
            if repoll is not None:
                nap = min(nap, max(0.0, repoll - self._monotonic()))
            await asyncio.sleep(nap)
        return []

    async def poked(self) -> set[str]:
        """During a full pass: the jobs pokes named since the last look, to be read at once. The look itself (a
        query of the watch workflow, slow when its worker is busy) runs beside the pass, started at most every
        `CHECK_EVERY_S`; its answer is taken on a later call. A poke naming nodes asks for another full pass right
        after this one (its listing may predate the node's fall)."""
        if self._look is not None and self._look.done():
            pokes, self._look = self._look.result(), None
            return self._taken(pokes)
        now = self._monotonic()
        if self._look is None and now >= self._next_look:
            self._next_look = now + self._check_every_s
            self._look = asyncio.ensure_future(self._new_pokes())
        return set()

    def _taken(self, pokes: list[WatchPoke]) -> set[str]:
        named = _named_jobs(pokes) if pokes else set()
        if named is None:
            self._full_again = True
            return {job_id for p in pokes for job_id in p.job_ids}
        return named

    def _settle(self, state: WatchedJobs) -> None:
        """After a poll: keep re-polling early only for poked jobs the poll saw still running or completing."""
        if not self._settling:
            return
        now = self._monotonic()
        states = {w.job_id: w.state for w in state.jobs.values()}
        self._settling = {
            job_id: until for job_id, until in self._settling.items()
            if until > now and states.get(job_id) in _NOT_SETTLED
        }

    async def _new_pokes(self) -> list[WatchPoke]:
        if self._monotonic() < self._quiet_until:
            return []
        try:
            answer: PokesSince = await self._handle.query(
                WatchNames.POKES, self._seen or 0, result_type=PokesSince,
                rpc_timeout=timedelta(seconds=QUERY_TIMEOUT_S),
            )
        except Exception as exc:  # noqa: BLE001 - the channel only makes the watch faster; the poll goes on
            quiet = min(QUIET_AFTER_ERROR_S, QUIET_FIRST_S * 2 ** self._failures_in_row)
            self._failures_in_row += 1
            self._quiet_until = self._monotonic() + quiet
            logger.info("the watch's wake-up channel did not answer ({}, {} in a row); asking again in {:.0f} s",
                        exc, self._failures_in_row, quiet)
            return []
        self._failures_in_row = 0
        if answer.handover and not self.handover_asked:
            logger.info("the watch workflow asks for a handover (its history is long): returning the state to it")
            self.handover_asked = True
        pokes = answer.pokes
        if self._seen is None:  # a fresh activity: its first poll already covered older pokes
            horizon = self._now() - timedelta(seconds=FRESH_S)
            pokes = [p for p in pokes if p.sent_at is not None and as_utc(p.sent_at) >= horizon]
        self._seen = answer.seq
        until = self._monotonic() + SETTLE_S
        for poke in pokes:
            logger.info("watch poked by {} (jobs {}, nodes {}{}): polling now", poke.source or "?",
                        ",".join(poke.job_ids) or "-", ",".join(poke.nodes) or "-",
                        f"; {poke.detail}" if poke.detail else "")
            self._settling.update({job_id: until for job_id in poke.job_ids})
        return pokes


def _named_jobs(pokes: list[WatchPoke]) -> set[str] | None:
    """The jobs a targeted poll reads, or None when some poke names nodes or no job (a full pass)."""
    if any(p.nodes or not p.job_ids for p in pokes):
        return None
    return {job_id for p in pokes for job_id in p.job_ids}
