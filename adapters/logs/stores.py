"""What the log-store sources (Loki, VictoriaLogs) share: their port and small helpers."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from loguru import logger
from pydantic import SecretStr

from adapters.errors import LogSourceError
from adapters.logs.decode import clean_line
from adapters.logs.models import LogRecord

Direction = Literal["forward", "backward"]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class JobLogStore(Protocol):
    """Finds a job's log lines in a log store by the job's id."""

    async def query(
        self, job_id: str, *, start: datetime, end: datetime, limit: int, direction: Direction = "forward"
    ) -> list[LogRecord]:
        """At most `limit` records of the job in [start, end), oldest first.

        `direction="forward"` gives the oldest `limit` records of the window,
        `"backward"` the newest (the lines just before a failure).
        """
        ...


def quoted(value: str) -> str:
    """`value` as a double-quoted string for LogQL or LogsQL (both take Go's escapes; JSON's are a subset)."""
    return json.dumps(value, ensure_ascii=False)


def check_label_name(name: str, *, setting: str) -> str:
    if not _LABEL_NAME.fullmatch(name):
        raise LogSourceError(f"{setting} = {name!r} is not a valid label name (letters, digits and '_')")
    return name


def to_ns(moment: datetime) -> int:
    """Nanoseconds since the Unix epoch (naive datetimes are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def from_ns(ns: int) -> datetime:
    return _EPOCH + timedelta(microseconds=ns // 1_000)


def rfc3339_ns(ns: int) -> str:
    """RFC 3339 UTC time with nanoseconds, e.g. 2026-11-29T17:00:00.123456789Z."""
    seconds, frac = divmod(ns, 1_000_000_000)
    return (_EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)")


def parse_rfc3339_ns(text: str) -> int:
    """Nanoseconds since the epoch of an RFC 3339 time with up to 9 fractional digits."""
    m = _RFC3339.fullmatch(text.strip())
    if not m:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    day, clock, frac, zone = m.groups()
    base = datetime.fromisoformat(f"{day}T{clock}{'+00:00' if zone == 'Z' else zone}")
    return to_ns(base) + int((frac or "0").ljust(9, "0"))


def bearer_headers(token: str | SecretStr | None) -> dict[str, str]:
    value = token.get_secret_value() if isinstance(token, SecretStr) else token
    return {"Authorization": f"Bearer {value}"} if value else {}


def records(ns: int, entry: str, labels: dict[str, str], *, host_label: str, max_line_bytes: int) -> list[LogRecord]:
    """One store entry as clean records: a multi-line entry (a stack trace) gives one record per line."""
    moment = from_ns(ns)
    host = labels.get(host_label)
    raw = entry.encode("utf-8", errors="replace").rstrip(b"\n").split(b"\n")
    return [
        LogRecord(timestamp=moment, line=clean_line(part, max_line_bytes=max_line_bytes)[0], host=host, labels=labels)
        for part in raw
    ]


#: One store entry as fetched: a dedupe key whose first item is its time in ns, and its records.
Entry = tuple[tuple[Any, ...], list[LogRecord]]


class FetchPage(Protocol):
    async def __call__(self, lo: int, hi: int, page: int) -> list[Entry]:
        """At most `page` entries in [lo, hi) ns, in the order of the paging direction."""
        ...


async def page_through(
    fetch: FetchPage, *, lo: int, hi: int, limit: int, page_size: int, direction: Direction, store: str
) -> list[LogRecord]:
    """At most `limit` records in [lo, hi) ns, oldest first, fetched a page at a time (as logcli does).

    A full page moves `lo` (forward) or `hi` (backward) to the last time seen; entries
    already returned at that time are dropped from the next page. A page holding only
    such entries means more than a page shares one timestamp: it is skipped, with a warning.
    """
    found: list[tuple[int, LogRecord]] = []
    seen: set[tuple[Any, ...]] = set()  # entries at the current page boundary
    while len(found) < limit and lo < hi:
        page = min(page_size, limit - len(found) + len(seen))
        entries = await fetch(lo, hi, page)
        fresh = [e for e in entries if e[0] not in seen]
        for key, recs in fresh:
            found += [(key[0], rec) for rec in recs]
        if len(entries) < page:
            break  # the window holds no more
        boundary = entries[-1][0][0]
        seen = {key for key, _ in entries if key[0] == boundary}
        stuck = not fresh  # every entry of the page sits at the previous boundary
        if stuck:
            logger.warning("{}: more than {} entries share one timestamp; skipping past it", store, page)
            seen = set()
        if direction == "forward":
            lo = boundary + 1 if stuck else boundary
        else:
            hi = boundary if stuck else boundary + 1  # hi is exclusive: keep the boundary in the next page
    found.sort(key=lambda item: item[0])  # stable: the order within one timestamp is kept
    chosen = found[:limit] if direction == "forward" else found[-limit:] if limit > 0 else []
    return [rec for _, rec in chosen]
