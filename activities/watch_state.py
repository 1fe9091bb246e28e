"""Where the cluster watch keeps its memory between passes: one row per job in the audit database.

The watch's per-job state (cursors, progress rhythm, what was reported) used to
travel in the watch activity's heartbeat details, ~2 KB a job: Temporal's 2 MB
payload limit ended the watch of a whole cluster at ~800-1,000 jobs. Now each
job's state is a row of `watch_state` (adapters/audit, migration 3) and the
heartbeat carries a few counters whatever the job count.

`ShardKeeper` loads the rows one watch shard owns (`rows.shard_of`: a stable
hash of the job id) when its activity starts, and after each pass writes only
the rows that changed and deletes the rows of jobs that left the scheduler. A
restarted worker (or the shard's next activity attempt) loads them again and
resumes every cursor. A job's row is written in the pass that signalled
something about it; a job that only made progress has its row rewritten on its
turn, every `SAVE_EVERY_POLLS` polls (turns are spread by a hash of the row, so
each pass writes about a quarter of the rows: at 10,000 jobs, writing every row
every pass cost more than the rest of the pass). What a restarted watch may
repeat is therefore the unremarkable reading of at most that many polls, and the
part of one pass after the last write; the job workflows drop what they have
seen already.

The shard's own cluster-wide memory (failures seen, invalid opt-ins reported)
is one more row, `~shard-<n>`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import zlib
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from loguru import logger

from adapters.audit.rows import WATCH_STATE_MAX_BYTES, shard_item, watch_slot, watch_state_row

PRUNE_AFTER = timedelta(days=2)  # rows no shard wrote for this long belong to no job any more
SAVE_EVERY_POLLS = 4  # a quiet job's row is rewritten on its turn, once in this many polls (a minute at 15 s)


class WatchStatePort(Protocol):
    """The part of the audit store the watch keeps its state in (synchronous: called in a thread)."""

    def load_watch_state(self, cluster: str, *, shard: int = 0, shards: int = 1) -> dict[str, str]: ...
    def save_watch_state(self, rows: Sequence[dict[str, Any]]) -> None: ...
    def delete_watch_state(self, cluster: str, items: Iterable[str]) -> int: ...
    def prune_watch_state(self, cluster: str, *, before: datetime) -> int: ...


class ShardKeeper:
    """Loads and saves one watch shard's state (`activities.watch.WatchState`) as rows."""

    def __init__(
        self,
        store: WatchStatePort,
        *,
        cluster: str,
        shard: int = 0,
        shards: int = 1,
        clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
    ) -> None:
        self._store = store
        self.cluster = cluster
        self.shard = shard
        self.shards = shards
        self._clock = clock
        self._written: dict[str, str] = {}  # item -> digest of the data last written (or loaded)
        self.rows_written = 0  # over this keeper's life, for the heartbeat and the benchmark

    async def load(self) -> dict[str, Any]:
        """The shard's state as data for `WatchState.model_validate` (empty when nothing is stored)."""
        await asyncio.to_thread(self._store.prune_watch_state, self.cluster, before=self._clock() - PRUNE_AFTER)
        rows = await asyncio.to_thread(self._store.load_watch_state, self.cluster, shard=self.shard, shards=self.shards)
        return await asyncio.to_thread(self._decode, rows)

    def _decode(self, rows: dict[str, str]) -> dict[str, Any]:
        jobs: dict[str, Any] = {}
        first_submit: dict[str, Any] = {}
        own: dict[str, Any] = {}
        for item, data in rows.items():
            try:
                value = json.loads(data)
            except ValueError:
                logger.warning("watch state {} of cluster {} is unreadable; the job is watched anew", item, self.cluster)
                continue
            self._written[item] = _digest(data)
            if item == shard_item(self.shard):
                own = value if isinstance(value, dict) else {}
            elif isinstance(value, dict) and isinstance(value.get("job"), dict):
                jobs[item] = value["job"]
                if value.get("first_submit") and isinstance(value["job"].get("job_id"), str):
                    first_submit[value["job"]["job_id"]] = value["first_submit"]
        return {**own, "jobs": jobs, "first_submit": first_submit}

    async def save(self, state: Any, *, urgent: Collection[str] | None = None, turn: bool = True) -> int:
        """Write the rows of `state` (a `WatchState`) that changed since the last save; returns how many.

        `urgent` None: every row is considered (a full save). Otherwise only the rows of the `urgent`
        workflow ids, of jobs never written yet, the shard's own row and, with `turn`, the rows whose
        turn it is this poll (`SAVE_EVERY_POLLS`).
        """
        rows, gone = await asyncio.to_thread(self._changes, state, urgent, turn)
        if rows:
            await asyncio.to_thread(self._store.save_watch_state, rows)
        if gone:
            await asyncio.to_thread(self._store.delete_watch_state, self.cluster, gone)
        for row in rows:
            self._written[row["item"]] = _digest(row["data"])
        for item in gone:
            self._written.pop(item, None)
        self.rows_written += len(rows)
        return len(rows)

    def _changes(
        self, state: Any, urgent: Collection[str] | None = None, turn: bool = True
    ) -> tuple[list[dict[str, Any]], list[str]]:
        now = self._clock()
        rows: list[dict[str, Any]] = []
        items: dict[str, tuple[str, str, int]] = {}  # item -> (job id, data, slot)
        this_turn = state.polls % SAVE_EVERY_POLLS
        for wid, watched in state.jobs.items():
            if not (urgent is None or wid in urgent or wid not in self._written
                    or (turn and _turn_of(wid) == this_turn)):
                continue  # unchanged as far as anyone must know before its turn (see the module's docstring)
            first = state.first_submit.get(watched.job_id)
            value = {"job": watched.model_dump(mode="json"), "first_submit": first.isoformat() if first else None}
            items[wid] = (watched.job_id, _bounded(value), watch_slot(watched.job_id))
        own = state.model_dump(mode="json", include={"failures", "failures_counted", "invalid_reported", "polls"})
        items[shard_item(self.shard)] = ("", json.dumps(own, separators=(",", ":")), self.shard)
        for item, (job_id, data, slot) in items.items():
            if self._written.get(item) == _digest(data):
                continue
            rows.append(watch_state_row(cluster=self.cluster, item=item, job_id=job_id, slot=slot, data=data,
                                        updated_at=now))
        own_item = shard_item(self.shard)
        gone = [item for item in self._written if item != own_item and item not in state.jobs]
        return rows, gone

    async def touch_all(self, state: Any) -> None:
        """Rewrite every row (so that `prune` keeps rows of quiet jobs): called about once a day."""
        self._written.clear()
        await self.save(state)


def _turn_of(item: str) -> int:
    """Which poll (modulo `SAVE_EVERY_POLLS`) rewrites the row `item` when nothing urgent did."""
    return zlib.crc32(item.encode("utf-8", "replace")) % SAVE_EVERY_POLLS


def _digest(data: str) -> str:
    return hashlib.blake2b(data.encode("utf-8", "replace"), digest_size=16).hexdigest()


def _bounded(value: dict[str, Any]) -> str:
    """The JSON of one job's state, within `WATCH_STATE_MAX_BYTES`: its bounded lists give way first."""
    data = json.dumps(value, separators=(",", ":"))
    if len(data) <= WATCH_STATE_MAX_BYTES:
        return data
    job = value["job"]
    job["rank_timings"] = []  # the slow run's per-rank timings: a straggler verdict waits for new ones
    data = json.dumps(value, separators=(",", ":"))
    if len(data) <= WATCH_STATE_MAX_BYTES:
        return data
    job["learned"] = {}  # templates learned from the job's lines: learned again
    job["tracker"] = {}
    return json.dumps(value, separators=(",", ":"))[:WATCH_STATE_MAX_BYTES]


def watched_jobs_from_rows(rows: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Workflow id -> the watch's fields of that job, from `watch_state` rows (what `jobmedic jobs` shows)."""
    out: dict[str, dict[str, Any]] = {}
    for item, data in rows.items():
        try:
            value = json.loads(data)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("job"), dict):
            out[item] = value["job"]
    return out
