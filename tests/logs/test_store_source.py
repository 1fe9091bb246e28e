"""StoreLogSource: Loki and VictoriaLogs read behind the watch's cursors, like a file.

The stores are the HTTP servers of tests/logs/test_loki.py and
tests/logs/test_victorialogs.py, which follow each API's documented request and
response format exactly (Loki's `GET /loki/api/v1/query_range`, VictoriaLogs'
`/select/logsql/query`); no Loki or VictoriaLogs binary exists in our registries.
They check every request as the store would and answer 400 otherwise, so a
source that asks wrongly fails here.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from adapters.errors import LogSourceError
from adapters.logs.loki import LokiLogSource
from adapters.logs.store_source import StoreLogSource, parse_store_path, store_path
from adapters.logs.stores import to_ns
from adapters.logs.victorialogs import VictoriaLogsSource
from tests.logs.test_loki import T0, Entry, FakeLoki
from tests.logs.test_victorialogs import Entry as VlEntry
from tests.logs.test_victorialogs import FakeVictoriaLogs
from workflows.contracts import JobInfo, JobState, LogCursor, Stream


class Clock:
    def __init__(self, at: float) -> None:
        self.now = at

    def __call__(self) -> float:
        return self.now


def job(job_id: str = "42") -> JobInfo:
    return JobInfo(job_id=job_id, state=JobState.RUNNING, nodes=["node1", "node2"], submit_time=T0, start_time=T0)


def ns(seconds: float) -> int:
    return to_ns(T0) + int(seconds * 1e9)


def loki_entries(job_id: str, n: int, *, start_s: float = 1.0, every_s: float = 0.01, shared: int = 1) -> list[Entry]:
    """`n` lines of one job from two hosts; `shared` lines in a row share one timestamp (several ranks)."""
    out = []
    for i in range(n):
        host = ("node1", "node2")[i % 2]
        t = start_s + (i // shared) * every_s
        out.append(Entry({"slurm_job_id": job_id, "host": host}, ns(t), f"[rank{i % 4}] iteration {i}"))
    return out


def in_time_order(got: list[str], entries: list[Entry]) -> bool:
    """`got` holds exactly the entries' lines, once each, oldest first (lines that share a timestamp come
    from different streams, in an order the store does not define)."""
    when = {f"{e.labels['host']}: {e.line}": e.ns for e in entries}
    times = [when.get(line, -1) for line in got]
    return sorted(got) == sorted(when) and len(got) == len(entries) and times == sorted(times)


async def read_all(source: StoreLogSource, cursor: LogCursor, *, final: bool = False) -> tuple[list[str], LogCursor]:
    lines: list[str] = []
    for _ in range(100):
        chunk = await source.read(cursor, final=final)
        assert chunk.first_line_no == cursor.line_no + 1
        lines += chunk.lines
        cursor = chunk.cursor
        if not chunk.more:
            break
    return lines, cursor


def test_a_job_is_one_stream_with_its_start_in_the_path() -> None:
    source = StoreLogSource(LokiLogSource("http://127.0.0.1:1"), scheme="loki")
    [(stream, path)] = source.streams(job("7_3"))
    assert stream is Stream.OUTPUT
    job_id, start = parse_store_path(path)
    assert job_id == "7_3" and start == to_ns(T0 - timedelta(minutes=5))
    for bad in ("/logs/job.out", "store:", "store:42", "store:42:x"):
        with pytest.raises(LogSourceError, match="not a log-store stream"):
            parse_store_path(bad)


async def test_loki_lines_arrive_once_in_order_across_reads_and_a_restart(http_service, go_unquote) -> None:  # noqa: ANN001
    fake = FakeLoki(loki_entries("42", 1200, shared=3) + loki_entries("43", 50), go_unquote)
    clock = Clock(T0.timestamp() + 60)
    source = StoreLogSource(LokiLogSource(http_service(fake), page_size=500), scheme="loki", page_lines=400, clock=clock)
    cursor = LogCursor(path=store_path(job("42")))
    first, cursor = await read_all(source, cursor)
    assert in_time_order(first, fake.entries[:1200])  # hosts put in the text
    assert cursor.line_no == 1200 and not fake.problems
    # more lines come; the cursor survives a worker restart as the watch state keeps it (JSON)
    fake.entries += loki_entries("42", 30, start_s=30.0, shared=2)
    resumed = LogCursor.model_validate(json.loads(cursor.model_dump_json()))
    again = StoreLogSource(LokiLogSource(http_service(fake)), scheme="loki", clock=clock)
    more, cursor = await read_all(again, resumed)
    assert in_time_order(more, fake.entries[1250:])
    assert cursor.line_no == 1230 and not fake.problems
    nothing, _ = await read_all(again, cursor)
    assert nothing == []


async def test_a_line_already_prefixed_with_its_host_is_kept_as_is(http_service, go_unquote) -> None:  # noqa: ANN001
    fake = FakeLoki([Entry({"slurm_job_id": "42", "host": "node2"}, ns(1), "node2: NCCL WARN NET/IB : Got completion")],
                    go_unquote)
    source = StoreLogSource(LokiLogSource(http_service(fake)), scheme="loki", clock=Clock(T0.timestamp() + 60))
    lines, _ = await read_all(source, LogCursor(path=store_path(job())))
    assert lines == ["node2: NCCL WARN NET/IB : Got completion"]


async def test_a_running_job_is_read_up_to_the_settle_time_and_a_finished_one_to_now(http_service, go_unquote) -> None:  # noqa: ANN001
    fake = FakeLoki(loki_entries("42", 10, start_s=58.5, every_s=0.1), go_unquote)  # 58.5 s .. 59.4 s
    clock = Clock(T0.timestamp() + 60)
    source = StoreLogSource(LokiLogSource(http_service(fake)), scheme="loki", settle_s=1.0, clock=clock)
    cursor = LogCursor(path=store_path(job()))
    early, cursor = await read_all(source, cursor)
    assert len(early) == 5  # up to 59.0 s: the last second may still be shipping
    late, cursor = await read_all(source, cursor, final=True)
    assert len(early + late) == 10 and cursor.line_no == 10


async def test_a_store_that_is_down_is_left_alone_then_read_on_from_the_cursor(http_service, go_unquote) -> None:  # noqa: ANN001
    fake = FakeLoki(loki_entries("42", 20), go_unquote)
    down = {"on": False}

    def serve(req):  # noqa: ANN001, ANN202
        return (503, "text/plain", b"too many outstanding requests") if down["on"] else fake(req)

    clock = Clock(T0.timestamp() + 60)
    source = StoreLogSource(LokiLogSource(http_service(serve)), scheme="loki", backoff_s=30, clock=clock)
    lines, cursor = await read_all(source, LogCursor(path=store_path(job())))
    assert len(lines) == 20
    fake.entries += loki_entries("42", 5, start_s=40.0)
    down["on"] = True
    asked = len(fake.requests)
    with pytest.raises(LogSourceError, match="HTTP 503"):
        await source.read(cursor)
    for other in ("43", "44", "45"):  # the rest of the pass: refused at once, the store not asked
        with pytest.raises(LogSourceError, match="not read until it answers again"):
            await source.read(LogCursor(path=store_path(job(other))))
    assert len(fake.requests) == asked and source.down
    assert len(source.outages) == 1 and source.outages[0].until is None and "503" in source.outages[0].error
    clock.now += 31
    down["on"] = False
    late, cursor = await read_all(source, cursor)
    assert in_time_order(late, fake.entries[20:])  # late, nothing lost
    assert source.outages[0].until is not None and not source.down


async def test_tail_window_ends_at_the_cursor(http_service, go_unquote) -> None:  # noqa: ANN001
    fake = FakeLoki(loki_entries("42", 40, shared=4), go_unquote)
    clock = Clock(T0.timestamp() + 60)
    source = StoreLogSource(LokiLogSource(http_service(fake)), scheme="loki", page_lines=22, clock=clock)
    chunk = await source.read(LogCursor(path=store_path(job())))  # 22 records: stops inside a shared timestamp
    assert chunk.more and chunk.cursor.line_no == 22
    rest = await source.read(chunk.cursor)
    assert in_time_order(chunk.lines + rest.lines, fake.entries)
    assert await source.tail_window(chunk.cursor, max_lines=10, max_bytes=1 << 20) == chunk.lines[12:22]
    newest = await source.tail_window(chunk.cursor.path, max_lines=8, max_bytes=1 << 20)  # two whole timestamps
    assert in_time_order(newest, fake.entries[-8:])
    assert await source.tail_window(chunk.cursor, max_lines=10, max_bytes=60) == chunk.lines[20:22]  # the byte bound


async def test_victorialogs_lines_arrive_once_in_order(http_service, go_unquote) -> None:  # noqa: ANN001
    entries = [
        VlEntry(ns=ns(1 + i // 2 * 0.01), msg=f"[rank{i % 4}] iteration {i}",
                fields={"slurm_job_id": "42", "host": ("node1", "node2")[i % 2]})
        for i in range(300)
    ]
    fake = FakeVictoriaLogs(entries, go_unquote)
    clock = Clock(T0.timestamp() + 60)
    store = VictoriaLogsSource(http_service(fake), page_size=70)
    source = StoreLogSource(store, scheme="victorialogs", page_lines=100, clock=clock)
    lines, cursor = await read_all(source, LogCursor(path=store_path(job())))
    assert lines == [f"{e.fields['host']}: {e.msg}" for e in entries]
    assert cursor.line_no == 300 and not fake.problems
