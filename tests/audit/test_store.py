"""The audit store against SQLite and the real MariaDB: exactly-once writes, filters, ordering, round trips."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest

from adapters.audit import AsyncAuditStore, AuditStore
from adapters.audit.rows import LINE_MAX_BYTES
from workflows.contracts import AuditEntry, EventType

Make = Callable[..., AuditEntry]
T0 = datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC)


def test_record_writes_an_entry_exactly_once(store: AuditStore, make_entry: Make) -> None:
    entry = make_entry()
    assert store.record(entry) is True
    assert store.record(entry) is False
    assert store.record(entry.model_copy()) is False
    assert store.query() == [entry]


def test_four_threads_recording_the_same_keys_write_each_once(store_url: str, make_entry: Make) -> None:
    entries = [make_entry(job_id=str(n)) for n in range(25)]
    stores = [AuditStore(store_url) for _ in range(4)]  # four workers, four pools
    stores[0].migrate()
    barrier = threading.Barrier(4)
    outcomes: list[list[bool]] = [[] for _ in stores]

    def worker(i: int) -> None:
        barrier.wait()
        for entry in entries:
            outcomes[i].append(stores[i].record(entry))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for s in stores:
        s.close()

    per_key = [sum(outcome[k] for outcome in outcomes) for k in range(len(entries))]
    assert all(len(o) == len(entries) for o in outcomes)
    assert per_key == [1] * len(entries)
    stored = AuditStore(store_url).query()
    assert sorted(e.idempotency_key for e in stored) == sorted(e.idempotency_key for e in entries)


def test_record_many_skips_stored_and_repeated_keys(store: AuditStore, make_entry: Make) -> None:
    first, second, third = make_entry(), make_entry(), make_entry()
    assert store.record(first) is True
    assert store.record_many([first, second, second, third]) == [False, True, False, True]
    assert store.record_many([first, second, third]) == [False, False, False]
    assert store.record_many([]) == []
    assert store.query() == [first, second, third]


def test_record_many_racing_batches_write_each_key_once(store_url: str, make_entry: Make) -> None:
    """Overlapping batches from four workers; on InnoDB some rounds end in a deadlock the store must absorb."""
    stores = [AuditStore(store_url) for _ in range(4)]
    stores[0].migrate()
    total = 0
    for _ in range(10):
        entries = [make_entry(job_id=str(n)) for n in range(60)]
        batches = [entries[0:40], entries[20:60], entries[10:50], entries[5:55]]
        barrier = threading.Barrier(len(batches))
        results: list[list[bool]] = [[] for _ in batches]

        def worker(
            i: int,
            batches: list[list[AuditEntry]] = batches,
            results: list[list[bool]] = results,
            barrier: threading.Barrier = barrier,
        ) -> None:
            barrier.wait()
            results[i] = stores[i].record_many(batches[i])

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(batches))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        written: dict[str, int] = {}
        for batch, flags in zip(batches, results, strict=True):
            for entry, flag in zip(batch, flags, strict=True):
                written[entry.idempotency_key] = written.get(entry.idempotency_key, 0) + int(flag)
        assert written == {e.idempotency_key: 1 for e in entries}
        total += len(entries)
    assert len(stores[0].query()) == total
    for s in stores:
        s.close()


def test_query_filters(store: AuditStore, make_entry: Make) -> None:
    rows = [
        make_entry(cluster="a", job_id="1", event_type=EventType.DETECTION, timestamp=T0),
        make_entry(cluster="a", job_id="1", event_type=EventType.ADVICE, timestamp=T0 + timedelta(seconds=1)),
        make_entry(cluster="a", job_id="2", event_type=EventType.ADVICE, timestamp=T0 + timedelta(seconds=2)),
        make_entry(cluster="b", job_id="1", event_type=EventType.COMPLETED, timestamp=T0 + timedelta(hours=1)),
    ]
    store.record_many(rows)

    def keys(entries: list[AuditEntry]) -> list[str]:
        return [rows.index(e) for e in entries]  # type: ignore[misc]

    assert keys(store.query(cluster="a")) == [0, 1, 2]
    assert keys(store.query(job_id="1")) == [0, 1, 3]
    assert keys(store.query(cluster="b", job_id="1")) == [3]
    assert keys(store.query(cluster="A")) == []  # exact match, not case-folded
    assert keys(store.query(event_types=[EventType.ADVICE])) == [1, 2]
    assert keys(store.query(event_types=["advice", "completed"])) == [1, 2, 3]
    assert keys(store.query(since=T0 + timedelta(seconds=1))) == [1, 2, 3]
    assert keys(store.query(since=T0 + timedelta(seconds=1, microseconds=1))) == [2, 3]
    assert keys(store.query(until=T0 + timedelta(seconds=2))) == [0, 1]
    # a naive `since` is UTC; an aware one in another zone means the same instant
    assert keys(store.query(since=(T0 + timedelta(seconds=2)).replace(tzinfo=None))) == [2, 3]
    assert keys(store.query(since=(T0 + timedelta(seconds=2)).astimezone(timezone(timedelta(hours=-7))))) == [2, 3]
    assert keys(store.query(limit=2)) == [0, 1]
    assert keys(store.query(limit=2, latest=True)) == [2, 3]
    assert keys(store.query(limit=0)) == []
    assert keys(store.query(cluster="a", job_id="1", event_types=[EventType.ADVICE], since=T0)) == [1]


def test_entries_come_back_by_timestamp_then_write_order(store: AuditStore, make_entry: Make) -> None:
    late = make_entry(timestamp=T0 + timedelta(minutes=5))
    early = make_entry(timestamp=T0 - timedelta(minutes=5))
    same = [make_entry(timestamp=T0, outcome=str(n)) for n in range(5)]
    store.record(late)
    for entry in same:
        store.record(entry)
    store.record(early)
    assert store.query() == [early, *same, late]
    records = store.query_records()
    assert [r.id for r in records[1:6]] == sorted(r.id for r in records[1:6])


def test_round_trip_of_lists_dicts_unicode_and_times(store: AuditStore, make_entry: Make) -> None:
    cest = timezone(timedelta(hours=2))
    entry = make_entry(
        timestamp=datetime(2026, 7, 1, 14, 30, 5, 999999, tzinfo=cest),
        submit_time=datetime(2026, 7, 1, 9, 0, 0, 1, tzinfo=UTC),
        attempt=3,
        workflow_id="jobmedic-lab-1000-20260701T090000",
        run_id="3f2c1d9e-0000-4c4c-8d8d-123456789abc",
        event_type=EventType.ADVICE,
        pattern_id="nccl.remote_error",
        line="NCCL WARN 🚨 Rang 3 auf Knoten „gpu-ä1“ — 连接失败\ttab",
        category="nccl_error",
        fault_domain="network",
        implicated_nodes=["gpu-ä1", "node[2]", "n-3"],
        action="restart_exclude",
        mode="action",
        rule="hardware_exclude",
        attribution={"service": "ext", "confidence": 0.93, "hosts": ["gpu-ä1"], "nested": {"ok": True, "n": None}},
        outcome="held → excluded 1 node",
        detail={"evidence": [{"line_no": 17, "text": "Xid 79 ✗"}], "empty": {}, "list": []},
    )
    assert store.record(entry)
    (back,) = store.query()
    assert back == entry.model_copy(update={"timestamp": entry.timestamp.astimezone(UTC)})
    assert back.timestamp.tzinfo is UTC and back.timestamp.microsecond == 999999
    assert back.timestamp == entry.timestamp
    assert back.submit_time == entry.submit_time


def test_naive_times_are_taken_as_utc(store: AuditStore, make_entry: Make) -> None:
    store.record(make_entry(timestamp=datetime(2026, 1, 2, 3, 4, 5, 6)))
    (back,) = store.query()
    assert back.timestamp == datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)


def test_long_and_odd_text_is_bounded_not_refused(store: AuditStore, make_entry: Make) -> None:
    line = "ë" * 10_000 + "TAIL"  # 20 KB of UTF-8
    entry = make_entry(
        line=line,
        pattern_id="p" * 500,
        rule="r" * 500,
        outcome="o" * 50_000,
        implicated_nodes=[f"node{n:05d}" for n in range(20_000)],
        detail={"blob": "x" * 200_000, "broken": "surrogate \udcff here"},
    )
    assert store.record(entry)
    (back,) = store.query()
    assert len(back.line.encode()) <= LINE_MAX_BYTES
    assert back.line.startswith("ëëë") and "cut" in back.line and "TAIL" not in back.line
    assert len(back.pattern_id) == 128 and back.pattern_id.endswith("…")
    assert len(back.rule) == 128
    assert len(back.outcome.encode()) <= 4096
    assert back.implicated_nodes[0] == "node00000"
    assert back.implicated_nodes[-1].startswith("…(+") and len(back.implicated_nodes) < 20_000
    assert back.detail["_truncated"] is True and back.detail["_bytes"] > 200_000


def test_long_idempotency_keys_stay_distinct_and_exactly_once(store: AuditStore, make_entry: Make) -> None:
    prefix = "k" * 400
    one, two = make_entry(idempotency_key=prefix + "-one"), make_entry(idempotency_key=prefix + "-two")
    assert store.record(one) and store.record(two)
    assert store.record(one) is False
    assert store.get(prefix + "-one") is not None
    assert store.get(prefix + "-one").job_id == one.job_id
    assert len(store.query()) == 2


def test_keys_differing_in_case_or_trailing_space_are_different_keys(store: AuditStore, make_entry: Make) -> None:
    assert store.record(make_entry(idempotency_key="wf/run/act-1"))
    assert store.record(make_entry(idempotency_key="WF/run/act-1"))
    assert store.record(make_entry(idempotency_key="wf/run/act-1 "))
    assert store.record(make_entry(idempotency_key="wf/run/act-1")) is False
    assert len(store.query()) == 3


def test_get_returns_none_for_an_unknown_key(store: AuditStore) -> None:
    assert store.get("never-written") is None


def test_recorded_at_is_the_write_time(store: AuditStore, make_entry: Make) -> None:
    before = datetime.now(UTC)
    store.record(make_entry(timestamp=T0))
    (record,) = store.query_records()
    assert before - timedelta(seconds=1) <= record.recorded_at <= datetime.now(UTC) + timedelta(seconds=1)


def test_store_reconnects_after_close(store: AuditStore, make_entry: Make) -> None:
    store.record(make_entry())
    store.close()
    assert store.record(make_entry()) is True
    assert len(store.query()) == 2


async def test_async_store_writes_once_under_concurrent_calls(store: AuditStore, make_entry: Make) -> None:
    import asyncio

    audit = AsyncAuditStore(store)
    entry = make_entry()
    results = await asyncio.gather(*(audit.record(entry) for _ in range(8)))
    assert sorted(results) == [False] * 7 + [True]
    assert await audit.record_many([entry, make_entry()]) == [False, True]
    assert len(await audit.query(job_id=entry.job_id)) == 2
    assert await audit.get(entry.idempotency_key) == entry
    await audit.close()


def test_a_key_reused_for_another_event_keeps_the_first_and_warns(store: AuditStore, make_entry: Make) -> None:
    from loguru import logger

    warnings: list[str] = []
    sink = logger.add(warnings.append, level="WARNING", format="{message}")
    first = make_entry(idempotency_key="same-key", job_id="1", event_type=EventType.ADVICE)
    other = make_entry(idempotency_key="same-key", job_id="2", event_type=EventType.STOPPED)
    assert store.record(first) is True
    assert store.record(other) is False
    logger.remove(sink)
    assert store.query() == [first]
    assert len(warnings) == 1 and "same-key" in warnings[0]


def test_a_row_this_version_cannot_read_is_reported_not_hidden(store: AuditStore, make_entry: Make) -> None:
    import sqlalchemy as sa

    from adapters.audit import AuditStoreRejected

    store.record(make_entry())
    with store._engine.begin() as conn:
        conn.execute(sa.text("UPDATE audit_entry SET event_type = 'from_the_future'"))
    with pytest.raises(AuditStoreRejected, match="upgrade jobmedic") as caught:
        store.query()
    assert caught.value.retryable is False


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_in_memory_sqlite_works_across_threads(url: str, make_entry: Make) -> None:
    import asyncio

    store = AuditStore(url)
    entry = make_entry()
    assert asyncio.run(AsyncAuditStore(store).record(entry)) is True  # written from a worker thread
    assert store.query() == [entry]  # read from this one: the same database
    store.close()
