"""Pure conversion between `AuditEntry` and the values stored in a row.

Everything a job or a library hands us is bounded here before it reaches the
database: a log line is cut to `LINE_MAX_BYTES`, short text columns to their
declared width, JSON values to `JSON_MAX_BYTES`. Timestamps are stored as naive
UTC (a naive input is taken to be UTC already) and come back timezone-aware.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from workflows.contracts import AuditEntry

LINE_MAX_BYTES = 4096
OUTCOME_MAX_BYTES = 4096
JSON_MAX_BYTES = 64 * 1024
KEY_MAX_CHARS = 255

#: widths of the VARCHAR columns (characters), shared with the table definitions
STRING_WIDTHS: dict[str, int] = {
    "cluster": 64,
    "job_id": 64,
    "workflow_id": 255,
    "run_id": 64,
    "event_type": 32,
    "pattern_id": 128,
    "category": 32,
    "fault_domain": 32,
    "action": 64,
    "mode": 16,
    "rule": 128,
}


def to_db_time(value: datetime | None) -> datetime | None:
    """A datetime as naive UTC for storage; naive input is taken to be UTC already."""
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return value.replace(tzinfo=None)


def from_db_time(value: datetime | str | None) -> datetime | None:
    """A stored naive-UTC datetime as an aware UTC datetime."""
    if value is None:
        return None
    if isinstance(value, str):  # raw SQLite text, e.g. from a hand-written query
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC)


def clean_text(text: str) -> str:
    """`text` with anything UTF-8 cannot carry (lone surrogates) replaced by '?'."""
    return text.encode("utf-8", "replace").decode("utf-8")


def cut_bytes(text: str, max_bytes: int) -> str:
    """`text` cut to at most `max_bytes` of UTF-8, on a character boundary, marked when cut."""
    raw = clean_text(text).encode("utf-8")
    if len(raw) <= max_bytes:
        return raw.decode("utf-8")
    # the marker needs at most 40 bytes, whatever the count it names
    head = raw[: max(0, max_bytes - 40)].decode("utf-8", "ignore")
    return f"{head} …[cut {len(raw) - len(head.encode('utf-8'))} bytes]"


def cut_chars(text: str, max_chars: int) -> str:
    """`text` cut to at most `max_chars` characters, ending in '…' when cut."""
    text = clean_text(text)
    if len(text) <= max_chars:
        return text
    return text[: max_chars - 1] + "…"


def compact_key(key: str) -> str:
    """An idempotency key that fits the unique column.

    Keys longer than the column keep a prefix and gain a SHA-256 of the whole
    key, so two different long keys never collide and the same key always maps
    to the same stored value (which is what exactly-once needs).
    """
    key = clean_text(key)
    if len(key) <= KEY_MAX_CHARS:
        return key
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    return key[: KEY_MAX_CHARS - len(digest) - 1] + "#" + digest


def clean_json(value: Any) -> Any:
    """A JSON-ready value with every string (keys included) passed through `clean_text`."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_json(v) for k, v in value.items()}
    return value


def bounded_json(value: Any, max_bytes: int = JSON_MAX_BYTES) -> Any:
    """A JSON-ready value whose encoding fits `max_bytes`.

    A list too large keeps its leading items and ends with a note of how many
    were dropped; any other value too large becomes
    `{"_truncated": true, "_bytes": N, "_preview": "<start of the JSON>"}`.
    """
    if value is None:
        return None
    value = clean_json(value)
    encoded = json.dumps(value, ensure_ascii=False)
    size = len(encoded.encode("utf-8"))
    if size <= max_bytes:
        return value
    if isinstance(value, list):
        kept: list[Any] = []
        used = 64  # room for the brackets and the closing note
        for item in value:
            item_size = len(json.dumps(item, ensure_ascii=False).encode("utf-8")) + 2
            if used + item_size > max_bytes:
                break
            kept.append(item)
            used += item_size
        kept.append(f"…(+{len(value) - len(kept)} more)")
        return kept
    preview = cut_bytes(encoded, min(4096, max_bytes // 2))
    return {"_truncated": True, "_bytes": size, "_preview": preview}


def _short(entry_value: str | None, column: str) -> str | None:
    if entry_value is None:
        return None
    return cut_chars(str(entry_value), STRING_WIDTHS[column])


def entry_to_row(entry: AuditEntry, *, recorded_at: datetime) -> dict[str, Any]:
    """The column values for `entry`, bounded, with times as naive UTC."""
    data = entry.model_dump(mode="json")  # JSON-safe dicts (datetimes in `detail` become strings)
    return {
        "idempotency_key": compact_key(entry.idempotency_key),
        "timestamp": to_db_time(entry.timestamp),
        "cluster": _short(entry.cluster, "cluster"),
        "job_id": _short(entry.job_id, "job_id"),
        "submit_time": to_db_time(entry.submit_time),
        "attempt": entry.attempt,
        "workflow_id": _short(entry.workflow_id, "workflow_id"),
        "run_id": _short(entry.run_id, "run_id"),
        "event_type": str(entry.event_type),
        "pattern_id": _short(entry.pattern_id, "pattern_id"),
        "line": None if entry.line is None else cut_bytes(entry.line, LINE_MAX_BYTES),
        "category": _short(entry.category, "category"),
        "fault_domain": _short(entry.fault_domain, "fault_domain"),
        "implicated_nodes": bounded_json([clean_text(n) for n in entry.implicated_nodes]),
        "action": _short(entry.action, "action"),
        "mode": _short(entry.mode, "mode"),
        "rule": _short(entry.rule, "rule"),
        "attribution": bounded_json(data["attribution"]),
        "outcome": None if entry.outcome is None else cut_bytes(entry.outcome, OUTCOME_MAX_BYTES),
        "detail": bounded_json(data["detail"]),
        "recorded_at": to_db_time(recorded_at),
    }


def row_to_entry(row: Any) -> AuditEntry:
    """The `AuditEntry` stored in `row` (a mapping of column values)."""
    return AuditEntry(
        idempotency_key=row["idempotency_key"],
        timestamp=from_db_time(row["timestamp"]),
        cluster=row["cluster"],
        job_id=row["job_id"],
        submit_time=from_db_time(row["submit_time"]),
        attempt=row["attempt"],
        workflow_id=row["workflow_id"],
        run_id=row["run_id"],
        event_type=row["event_type"],
        pattern_id=row["pattern_id"],
        line=row["line"],
        category=row["category"],
        fault_domain=row["fault_domain"],
        implicated_nodes=list(row["implicated_nodes"] or []),
        action=row["action"],
        mode=row["mode"],
        rule=row["rule"],
        attribution=row["attribution"],
        outcome=row["outcome"],
        detail=row["detail"],
    )


# --------------------------------------------------------------------------- watch state (migration 3)

#: one job's watch state as JSON; the watch trims its own bounded lists to stay under it
WATCH_STATE_MAX_BYTES = 256 * 1024
WATCH_SLOTS = 4096  # job ids hash into this many slots; a watch shard owns the slots `slot % shards == shard`
SHARD_ITEM_PREFIX = "~shard-"  # the item of a shard's own row (its cluster-wide memory); no workflow id starts so


def shard_item(shard: int) -> str:
    """The item under which shard `shard` keeps its own memory; its slot is `shard`, so it loads with its jobs."""
    return f"{SHARD_ITEM_PREFIX}{shard}"


def watch_slot(job_id: str) -> int:
    """A job id's slot: a hash that is the same in every process and release (not Python's `hash`)."""
    digest = hashlib.blake2b(job_id.encode("utf-8", "replace"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % WATCH_SLOTS


def shard_of(job_id: str, shards: int) -> int:
    """Which of `shards` watch shards watches `job_id` (stable; a job moves only when `shards` changes)."""
    return watch_slot(job_id) % max(1, shards)


def watch_state_row(
    *, cluster: str, item: str, job_id: str, slot: int, data: str, updated_at: datetime
) -> dict[str, Any]:
    """The column values of one watch-state row.

    Raises:
        ValueError: `data` is larger than `WATCH_STATE_MAX_BYTES` or an identifier does not fit its column
            (a caller bug: the watch bounds what it keeps).
    """
    size = len(data.encode("utf-8"))
    if size > WATCH_STATE_MAX_BYTES:
        raise ValueError(f"watch state of {item!r} is {size} bytes, more than {WATCH_STATE_MAX_BYTES}")
    if len(item) > 255 or len(cluster) > STRING_WIDTHS["cluster"]:
        raise ValueError(f"watch state key {cluster!r}/{item!r} does not fit its columns")
    return {
        "cluster": cluster,
        "item": item,
        "job_id": cut_chars(job_id, STRING_WIDTHS["job_id"]),
        "slot": slot,
        "data": clean_text(data),
        "updated_at": to_db_time(updated_at),
    }
