"""A log store (Loki, VictoriaLogs) read the way the watch reads a job output file.

`StoreLogSource` gives the watch and the evidence collector the same `LogSource`
interface the file sources give: incremental reads behind a cursor, and the last
lines before a position. The watch keeps the cursor; nothing else remembers where
reading stands, so a restarted worker resumes from it.

One job is one "stream" of the store, named by a pseudo path
`store:<job id>:<start ns>`: `<start ns>` is where the first read begins (the
job's submit time, less a margin), so a store is never asked for all of time.
The cursor keeps, for that path:

* `offset`: the time (ns) of the newest record already returned;
* `fingerprint`: which records at exactly that time were returned, as short digests
  of host and line (lines from several ranks often share one timestamp, and a store
  orders such records differently from one query to the next: the next read starts
  at that time and skips the records it names), `inode` how many;
* `line_no`: records returned so far (line numbers of a store stream count records).

Reads stop `settle_s` short of now while the job runs: agents ship lines a little
late, and a line stamped before the cursor once the cursor has passed it is never
read. A finished job's stream is read up to now.

A store that fails (down, slow past its timeout, refusing) makes this source refuse
every read for `backoff_s` without asking the store again, so one pass over many
jobs does not wait out one timeout per job; the watch goes on with the other jobs
and, the store back, reads each job on from its cursor: late, nothing lost.
`outages` keeps the windows during which the store failed, for the audit trail.

Lines are prefixed with the record's host (`node3: ...`, the way pdsh and srun's
`--label`-like tools show them) unless the line already starts with it: in a file
the host is often implicit; from a store it is a label, and the verdict needs it
in the text to name the node.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from adapters.errors import LogSourceError
from adapters.logs.models import LogChunk, LogRecord
from adapters.logs.stores import JobLogStore, from_ns, to_ns
from workflows.contracts import JobInfo, LogCursor, Stream

PATH_PREFIX = "store:"
#: the first read of a job starts this long before its submit time (clock skew between the agents and slurmctld)
START_MARGIN = timedelta(minutes=5)
#: a job without a submit time is read from this long ago
DEFAULT_LOOKBACK = timedelta(days=1)


def store_path(job: JobInfo) -> str:
    """The pseudo path of one job's stream in the store."""
    since = job.submit_time or job.start_time
    start = (since - START_MARGIN) if since is not None else None
    return f"{PATH_PREFIX}{job.job_id}:{to_ns(start) if start is not None else 0}"


def parse_store_path(path: str) -> tuple[str, int]:
    """(job id, start ns) of a pseudo path; a clear error for anything else."""
    if not path.startswith(PATH_PREFIX):
        raise LogSourceError(f"{path!r} is not a log-store stream (expected {PATH_PREFIX}<job id>:<start ns>)")
    job_id, sep, start = path[len(PATH_PREFIX):].rpartition(":")
    if not sep or not job_id or not start.isdigit():
        raise LogSourceError(f"{path!r} is not a log-store stream (expected {PATH_PREFIX}<job id>:<start ns>)")
    return job_id, int(start)


@dataclass(frozen=True)
class Outage:
    """A window during which the store could not be read (`until` None: not over yet)."""

    since: datetime
    until: datetime | None
    error: str


#: digests of the records at the cursor's time kept in the cursor, at most (beyond: counted only)
MAX_BOUNDARY_KEYS = 64


def _key(record: LogRecord) -> str:
    return hashlib.blake2b(f"{record.host}\x00{record.line}".encode(errors="replace"), digest_size=4).hexdigest()


def _boundary(cursor: LogCursor) -> Counter[str]:
    text = cursor.fingerprint or ""
    return Counter(text[3:].split(",")) if text.startswith("at:") and len(text) > 3 else Counter()


def _with_host(record: LogRecord) -> str:
    host = record.host
    if not host or record.line.startswith(host):
        return record.line
    return f"{host}: {record.line}"


class StoreLogSource:
    """The `LogSource` of a log store: one pseudo path per job, cursors by record time.

    Args:
        store: the Loki or VictoriaLogs client.
        scheme: the store's name for messages ("loki", "victorialogs").
        settle_s: how far short of now reads of a running job stop.
        backoff_s: after a failure, reads are refused this long without asking the store.
        page_lines: records asked for per read (the watch reads again while `more`).
        clock: seconds since the epoch (tests move it).
    """

    def __init__(
        self,
        store: JobLogStore,
        *,
        scheme: str,
        settle_s: float = 2.0,
        backoff_s: float = 30.0,
        page_lines: int = 5000,
        max_bytes: int = 4 * 1024 * 1024,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.scheme = scheme
        self.settle_s = settle_s
        self.backoff_s = backoff_s
        self.page_lines = max(1, page_lines)
        self.max_bytes = max_bytes
        self._clock = clock
        self._down_until = 0.0
        self._last_error = ""
        self.outages: list[Outage] = []

    # -- the LogSource interface

    def streams(self, job: JobInfo) -> list[tuple[Stream, str]]:
        """A job's lines in the store: one stream holding stdout and stderr."""
        return [(Stream.OUTPUT, store_path(job))]

    async def read(self, cursor: LogCursor, *, max_bytes: int | None = None, final: bool = False) -> LogChunk:
        job_id, start_ns = parse_store_path(cursor.path)
        now = self._clock()
        lo_ns = cursor.offset or start_ns or to_ns(datetime.fromtimestamp(now, UTC) - DEFAULT_LOOKBACK)
        hi = datetime.fromtimestamp(now if final else now - self.settle_s, UTC)
        if to_ns(hi) <= lo_ns:
            return LogChunk(cursor=cursor.model_copy(), first_line_no=cursor.line_no + 1)
        skip = (cursor.inode or 0) if cursor.offset else 0
        records = await self._query(job_id, start=from_ns(lo_ns), end=hi, limit=self.page_lines + skip,
                                    direction="forward")
        full = len(records) >= self.page_lines + skip
        fresh = self._after(records, cursor) if cursor.offset else records
        budget = max_bytes or self.max_bytes
        lines: list[str] = []
        offset, same, used = cursor.offset, skip, 0
        keys = list(_boundary(cursor).elements()) if cursor.offset else []
        for record in fresh:
            line = _with_host(record)
            used += len(line.encode("utf-8", errors="replace")) + 1
            if lines and used > budget:
                full = True
                break
            lines.append(line)
            ns = to_ns(record.timestamp)
            if ns != offset:
                offset, same, keys = ns, 0, []
            same += 1
            keys.append(_key(record))
        fingerprint = ("at:" + ",".join(keys)) if keys and len(keys) <= MAX_BOUNDARY_KEYS else None
        chunk_cursor = cursor.model_copy(update={
            "offset": offset, "inode": same, "line_no": cursor.line_no + len(lines), "fingerprint": fingerprint,
        })
        return LogChunk(
            lines=lines, cursor=chunk_cursor, first_line_no=cursor.line_no + 1,
            bytes_read=used, more=full and bool(lines),
        )

    async def tail_window(self, cursor_or_path: LogCursor | str, *, max_lines: int, max_bytes: int) -> list[str]:
        """The last `max_lines` records up to the cursor (inclusive), or up to now without one."""
        cursor = cursor_or_path if isinstance(cursor_or_path, LogCursor) else LogCursor(path=str(cursor_or_path))
        job_id, start_ns = parse_store_path(cursor.path)
        now = self._clock()
        lo = from_ns(start_ns) if start_ns else datetime.fromtimestamp(now, UTC) - DEFAULT_LOOKBACK
        if cursor.offset:
            hi_ns = cursor.offset + 1_000  # records keep microseconds: the cursor's own microsecond is inside
            records = await self._query(job_id, start=lo, end=from_ns(hi_ns), limit=max_lines + 1_000,
                                        direction="backward")
            # the records at the cursor's time that were not returned yet are after the cursor
            later = {id(r) for r in self._after(records, cursor)}
            records = [r for r in records if id(r) not in later]
        else:
            records = await self._query(job_id, start=lo, end=datetime.fromtimestamp(now, UTC), limit=max_lines,
                                        direction="backward")
        lines = [_with_host(r) for r in records][-max_lines:] if max_lines > 0 else []
        kept: list[str] = []
        used = 0
        for line in reversed(lines):
            used += len(line.encode("utf-8", errors="replace")) + 1
            if kept and used > max_bytes:
                break
            kept.append(line)
        return kept[::-1]

    async def aclose(self) -> None:
        close = getattr(self.store, "aclose", None)
        if close is not None:
            await close()

    # -- the store, behind a breaker

    @property
    def down(self) -> bool:
        return self._clock() < self._down_until

    async def _query(self, job_id: str, **window: object) -> list[LogRecord]:
        if self.down:
            raise LogSourceError(
                f"{self.scheme} is not read until it answers again (last error: {self._last_error}); "
                f"next try in {self._down_until - self._clock():.0f} s"
            )
        try:
            records = await self.store.query(job_id, **window)  # type: ignore[arg-type]
        except LogSourceError as exc:
            self._fail(str(exc))
            raise
        if self.outages and self.outages[-1].until is None:
            last = self.outages[-1]
            self.outages[-1] = Outage(since=last.since, until=datetime.fromtimestamp(self._clock(), UTC),
                                      error=last.error)
        return records

    def _fail(self, error: str) -> None:
        now = self._clock()
        self._down_until = now + self.backoff_s
        self._last_error = error[:300]
        if not self.outages or self.outages[-1].until is not None:
            self.outages.append(Outage(since=datetime.fromtimestamp(now, UTC), until=None, error=self._last_error))
            del self.outages[:-50]

    @staticmethod
    def _after(records: list[LogRecord], cursor: LogCursor) -> list[LogRecord]:
        """The records after the cursor: later than its time, or at its time and not among those returned.

        Without digests (more records at one time than the cursor keeps), the first `inode` are skipped.
        """
        named = _boundary(cursor)
        left = 0 if named else (cursor.inode or 0)
        out: list[LogRecord] = []
        for record in records:
            ns = to_ns(record.timestamp)
            if ns < cursor.offset:
                continue
            if ns == cursor.offset:
                key = _key(record)
                if named[key] > 0:
                    named[key] -= 1
                    continue
                if left > 0:
                    left -= 1
                    continue
            out.append(record)
        return out
