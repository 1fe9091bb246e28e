"""Pure helpers: bounding values for storage, time handling, parsing --since, formatting."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from adapters.audit.rows import bounded_json, compact_key, cut_bytes, cut_chars, from_db_time, to_db_time
from workers.commands.audit import fit, parse_since
from workers.commands.timeline import format_duration

NOW = datetime(2026, 11, 29, 18, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", NOW - timedelta(seconds=30)),
        ("30m", NOW - timedelta(minutes=30)),
        ("2h", NOW - timedelta(hours=2)),
        ("7d", NOW - timedelta(days=7)),
        ("2w", NOW - timedelta(weeks=2)),
        ("1h30m", NOW - timedelta(minutes=90)),
        ("1.5h", NOW - timedelta(minutes=90)),
        (" 2H ", NOW - timedelta(hours=2)),
        ("2026-11-29", datetime(2026, 11, 29, tzinfo=UTC)),
        ("2026-11-29T17:40:00", datetime(2026, 11, 29, 17, 40, tzinfo=UTC)),
        ("2026-11-29 17:40:00.5", datetime(2026, 11, 29, 17, 40, 0, 500000, tzinfo=UTC)),
        ("2026-11-29T17:40:00Z", datetime(2026, 11, 29, 17, 40, tzinfo=UTC)),
        ("2026-11-29T19:40:00+02:00", datetime(2026, 11, 29, 17, 40, tzinfo=UTC)),
    ],
)
def test_parse_since(text: str, expected: datetime) -> None:
    got = parse_since(text, now=NOW)
    assert got == expected
    assert got.tzinfo is UTC


@pytest.mark.parametrize("text", ["", "yesterday", "2x", "h2", "2h junk", "-2h", "2026-13-01"])
def test_parse_since_refuses_nonsense(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="time span"):
        parse_since(text, now=NOW)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0.0s"), (4.24, "4.2s"), (59.94, "59.9s"), (65, "1m05.0s"), (3599, "59m59.0s"),
     (3600, "1h00m00s"), (7384, "2h03m04s"), (90061, "1d01h01m"), (-3, "0.0s")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_times_are_stored_as_naive_utc_and_read_back_aware() -> None:
    aware = datetime(2026, 7, 1, 14, 0, 0, 7, tzinfo=timezone(timedelta(hours=2)))
    stored = to_db_time(aware)
    assert stored == datetime(2026, 7, 1, 12, 0, 0, 7) and stored.tzinfo is None
    assert from_db_time(stored) == aware
    assert to_db_time(datetime(2026, 1, 1, 1)) == datetime(2026, 1, 1, 1)
    assert from_db_time("2026-01-01 01:00:00.000005") == datetime(2026, 1, 1, 1, 0, 0, 5, tzinfo=UTC)
    assert to_db_time(None) is None and from_db_time(None) is None


def test_cut_bytes_keeps_whole_characters_and_says_how_much_was_cut() -> None:
    assert cut_bytes("short", 4096) == "short"
    text = "€" * 3000  # 9000 bytes
    cut = cut_bytes(text, 4096)
    assert len(cut.encode()) <= 4096
    assert cut.startswith("€€€")
    kept = cut.split(" …[cut ")[0]
    assert cut.endswith(f" …[cut {9000 - len(kept.encode())} bytes]")
    assert cut_bytes("bad \udcff", 100) == "bad ?"


def test_cut_chars() -> None:
    assert cut_chars("abc", 3) == "abc"
    assert cut_chars("abcd", 3) == "ab…"


def test_compact_key_is_deterministic_and_collision_free() -> None:
    short = "wf/run/1"
    assert compact_key(short) == short
    a, b = "x" * 300 + "a", "x" * 300 + "b"
    assert len(compact_key(a)) == 255
    assert compact_key(a) == compact_key(a)
    assert compact_key(a) != compact_key(b)


def test_bounded_json() -> None:
    small = {"a": [1, 2], "b": "ü"}
    assert bounded_json(small) == small
    assert bounded_json(None) is None
    nodes = [f"node{n}" for n in range(1000)]
    kept = bounded_json(nodes, 1000)
    assert len(json.dumps(kept).encode()) <= 1000
    assert kept[0] == "node0" and kept[-1] == f"…(+{1000 - (len(kept) - 1)} more)"
    big = bounded_json({"blob": "x" * 5000}, 1000)
    assert big["_truncated"] is True and big["_bytes"] > 5000
    assert len(json.dumps(big).encode()) <= 1000
    assert bounded_json({"k\udcff": ["v\udcff"]}) == {"k?": ["v?"]}


def test_fit() -> None:
    assert fit("a  b\nc", 10) == "a b c"
    assert fit("abcdef", 4) == "abc…"
