"""Decoding whole `squeue --json` listings in a child process, so the watch's event loop keeps running meanwhile.

At 10,000 jobs a listing is ~39 MB of JSON: `json.loads` takes ~0.6 s and comparing its records with the previous
listing's (`ListingMemo`) as long again, all of it holding the GIL. In the worker's own process that stalled every
other task of the event loop (the watch's reads, pokes, heartbeats) for over a second per listing; profiled at
10,000 jobs it was 40 % of the cluster worker's time. Here one child process (spawned, so no thread of the parent
is forked) keeps the memo and decodes each listing; the parent gets back the listing's order of jobs and only the
jobs that changed since the previous listing, and keeps the rest from its own copy.

Fails open: if the child cannot be started or dies, the listing is decoded in a thread of this process as before
(and the child is started afresh for the next listing); the parse errors of a broken document are raised the same
either way.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from loguru import logger

from adapters.slurm.parse import ListingMemo, SkippedRecord, SqueueListing, parse_squeue_listing
from workflows.contracts import JobInfo

# ----------------------------------------------------------------------------- the child's side

_CHILD_MEMO = ListingMemo()


@dataclass
class Delta:
    """A listing as the child sends it: each job by its identity where the parent has its conversion, else whole."""

    order: list[str | JobInfo]
    changed: dict[str, JobInfo]  # conversions the parent lacks (new or changed records), by identity
    skipped: list[SkippedRecord] = field(default_factory=list)
    fresh: bool = False  # the parent must drop what it kept: this child has not sent it anything before


def _decode_in_child(text: str, cluster: str, opt_in_max_bytes: int, first: bool) -> Delta:
    """Decode one listing against the child's memo; `first`: the parent holds nothing of this child's yet, so
    every job is sent; after that only those the memo converted anew (the parent holds the others already)."""
    listing = parse_squeue_listing(text, cluster=cluster, opt_in_max_bytes=opt_in_max_bytes, memo=_CHILD_MEMO)
    delta = Delta(order=[], changed={}, skipped=listing.skipped, fresh=first)
    named: set[str] = set()
    for job in listing.jobs:
        ident = job.job_id  # the record's identity: job_from_json names an array task ARRAYJOBID_TASKID
        if ident not in _CHILD_MEMO.records or ident in named:
            delta.order.append(job)  # a record the memo does not keep, or a second one of that id: sent whole
            continue
        named.add(ident)
        delta.order.append(ident)
        if first or ident in _CHILD_MEMO.converted:
            delta.changed[ident] = job
    return delta


def _child_pid() -> int:
    return os.getpid()


# ----------------------------------------------------------------------------- the parent's side


class ListingDecoder:
    """Decodes whole listings in one child process; `decode` returns what `parse_squeue_listing` would."""

    def __init__(self, *, in_child: bool = True) -> None:
        self._in_child = in_child
        self._pool: ProcessPoolExecutor | None = None
        self._jobs: dict[str, JobInfo] = {}  # job identity -> conversion, as the child sent it
        self._first = True
        self._local_memo = ListingMemo()  # for decoding here when the child cannot
        self._lock = asyncio.Lock()
        self.child_decodes = 0
        self.local_decodes = 0

    async def decode(self, text: str, *, cluster: str, opt_in_max_bytes: int) -> SqueueListing:
        """Every readable job of the listing `text` (see `parse_squeue_listing`).

        Raises:
            ParseError: the document itself is broken. SchedulerUnreachable: Slurm reported errors instead.
        """
        async with self._lock:  # one listing at a time: the child's memo follows the listings in order
            if self._in_child:
                delta = await self._ask_child(text, cluster, opt_in_max_bytes)
                if delta is not None:
                    self.child_decodes += 1
                    return self._apply(delta)
            self.local_decodes += 1
            return await asyncio.to_thread(parse_squeue_listing, text, cluster=cluster,
                                           opt_in_max_bytes=opt_in_max_bytes, memo=self._local_memo)

    async def _ask_child(self, text: str, cluster: str, opt_in_max_bytes: int) -> Delta | None:
        loop = asyncio.get_running_loop()
        try:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
                self._first = True
            return await loop.run_in_executor(self._pool, _decode_in_child, text, cluster, opt_in_max_bytes,
                                              self._first)
        except asyncio.CancelledError:
            self._first = True  # the child may have moved its memo on without this process seeing it: resend all
            raise
        except (BrokenProcessPool, OSError, RuntimeError) as exc:
            # the child died (killed, out of memory) or could not start: this listing is decoded here, and the
            # next one asks a new child
            logger.warning("the squeue listing decoder's child process failed ({}: {}); decoding in this "
                           "process, a new child next time", type(exc).__name__, exc)
            self._drop_pool()
            return None

    def _apply(self, delta: Delta) -> SqueueListing:
        kept = {} if delta.fresh else self._jobs
        kept.update(delta.changed)
        self._first = False
        jobs = [x if isinstance(x, JobInfo) else kept[x].model_copy() for x in delta.order]
        self._jobs = {x: kept[x] for x in delta.order if isinstance(x, str)}  # jobs that left the listing leave
        return SqueueListing(jobs=jobs, skipped=delta.skipped)

    async def child_pid(self) -> int | None:
        """The child's pid (tests kill it to show the decoder recovers), None before the first listing."""
        if self._pool is None:
            return None
        return await asyncio.get_running_loop().run_in_executor(self._pool, _child_pid)

    def _drop_pool(self, *, wait: bool = False) -> None:
        pool, self._pool = self._pool, None
        self._jobs = {}
        self._first = True
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=True)

    def close(self) -> None:
        """Stop the child and wait for it (a child left running leaks its queues' semaphores at exit)."""
        self._drop_pool(wait=True)


__all__ = ["Delta", "ListingDecoder"]
