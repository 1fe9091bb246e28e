"""VictoriaLogsSource against an HTTP server in the test that follows VictoriaLogs'
documented `/select/logsql/query` exactly (no VictoriaLogs binary exists in our
registries).

The fake checks every request the way VictoriaLogs would and answers 400
otherwise: the path, GET with URL arguments or POST with an
`application/x-www-form-urlencoded` body, only the documented arguments (`query`,
`start`, `end`, `limit`, `timeout`), `start`/`end` as RFC 3339, and the LogsQL
query parsed strictly: a quoted field name, the exact filter `:=` with a quoted
value, optional ` AND (<filter>)`, and optional `| sort by (_time) | limit N` pipes.
It answers in the documented shape: JSON lines, each an entry with `_msg`,
`_stream`, `_stream_id`, `_time` (RFC 3339 with nanoseconds, trailing zeros
trimmed) and the other fields in alphabetical order; `limit=N` gives the N most
recent matches, unsorted, and only the sort pipe orders them.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs

import pytest

from adapters.errors import LogSourceError
from adapters.logs.stores import parse_rfc3339_ns, rfc3339_ns, to_ns
from adapters.logs.victorialogs import VictoriaLogsSource

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
_QSTR = r'"(?:[^"\\\n]|\\.)*"'
_EXACT = re.compile(rf"(?P<field>{_QSTR}|[A-Za-z_][\w.]*):=(?P<value>{_QSTR})")
_PIPES = re.compile(r" \| sort by \(_time\) \| limit (?P<n>[1-9][0-9]*)")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z")


@dataclass
class Entry:
    fields: dict[str, str]  # without _msg/_time
    ns: int
    msg: str


def go_time(ns: int) -> str:
    """RFC3339Nano as Go prints it: trailing zeros of the fraction trimmed."""
    text = rfc3339_ns(ns)
    head, frac = text[:-1].split(".")
    frac = frac.rstrip("0")
    return f"{head}.{frac}Z" if frac else f"{head}Z"


@dataclass
class FakeVictoriaLogs:
    entries: list[Entry]
    unquote: Callable[[str], str]
    extra: str = ""
    account: str | None = None
    requests: list[dict[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(5))

    def reject(self, why: str) -> tuple[int, str, bytes]:
        self.problems.append(why)
        return 400, "text/plain; charset=utf-8", why.encode()

    def exact(self, text: str) -> tuple[str, str]:
        m = _EXACT.fullmatch(text)
        if not m:
            raise ValueError(f"not an exact filter: {text!r}")
        name = m["field"]
        return (self.unquote(name) if name.startswith('"') else name), self.unquote(m["value"])

    def parse(self, query: str) -> tuple[list[tuple[str, str]], int | None]:
        sort_limit = None
        pipes = _PIPES.search(query)
        if pipes:
            if pipes.end() != len(query):
                raise ValueError("pipes must end the query")
            sort_limit = int(pipes["n"])
            query = query[: pipes.start()]
        elif "|" in query.replace('\\"', "").split('"')[0::2][-1]:
            raise ValueError("this fake serves only the sort/limit pipes")
        filters = []
        head = query
        if self.extra:
            suffix = f" AND ({self.extra})"
            if not query.endswith(suffix):
                raise ValueError(f"expected the extra filter {suffix!r}")
            head = query[: -len(suffix)]
            filters.append(self.exact(self.extra))
        filters.insert(0, self.exact(head))
        return filters, sort_limit

    def __call__(self, req) -> tuple[int, str, bytes]:  # noqa: ANN001 - conftest.Request
        if req.path != "/select/logsql/query":
            return self.reject(f"unknown path {req.path}")
        if req.method == "POST":
            if not req.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
                return self.reject("POST needs an x-www-form-urlencoded body")
            args = {**req.query, **req.form}
        elif req.method == "GET":
            args = req.query
        else:
            return self.reject(f"method {req.method}")
        if any(len(v) != 1 for v in args.values()):
            return self.reject("repeated argument")
        params = {k: v[0] for k, v in args.items()}
        if not {"query"} <= set(params) or set(params) - {"query", "start", "end", "limit", "timeout"}:
            return self.reject(f"unexpected arguments {sorted(params)}")
        if self.account and req.headers.get("AccountID") != self.account:
            return self.reject("wrong tenant")
        self.requests.append(params)
        for bound in ("start", "end"):
            if bound in params and not _TIME.fullmatch(params[bound]):
                return self.reject(f"cannot parse {bound}={params[bound]!r}")
        lo = parse_rfc3339_ns(params["start"]) if "start" in params else 0
        hi = parse_rfc3339_ns(params["end"]) if "end" in params else 1 << 62
        try:
            filters, sort_limit = self.parse(params["query"])
        except ValueError as exc:
            return self.reject(f"cannot parse query: {exc}")
        matched = [
            e for e in self.entries
            if lo <= e.ns <= hi and all(e.fields.get(k) == v for k, v in filters)
        ]
        if sort_limit is not None:
            matched.sort(key=lambda e: e.ns)
            matched = matched[:sort_limit]
        if "limit" in params:
            matched.sort(key=lambda e: e.ns)
            matched = matched[-int(params["limit"]):] if sort_limit is None else matched[: int(params["limit"])]
        if sort_limit is None:
            self.rng.shuffle(matched)  # documented: unsorted unless the query sorts
        lines = []
        for e in matched:
            stream = "{" + ",".join(f'{k}={json.dumps(v)}' for k, v in sorted(e.fields.items()) if k in ("host", "slurm_job_id")) + "}"
            doc = {"_msg": e.msg, "_stream": stream, "_stream_id": "0000000000000000" + str(abs(hash(stream)) % 10**16).zfill(16), "_time": go_time(e.ns)}
            doc.update(sorted(e.fields.items()))
            lines.append(json.dumps(doc, ensure_ascii=False))
        return 200, "application/stream+json", ("\n".join(lines) + ("\n" if lines else "")).encode()


def at(seconds: float) -> int:
    return to_ns(T0) + int(seconds * 1e9)


def job_entries(job: str, n: int, *, same_ns_every: int = 0) -> list[Entry]:
    out = []
    for i in range(n):
        host = f"node{1 + i % 2}"
        ns = at(i // same_ns_every) if same_ns_every else at(i * 0.001) + 7  # odd nanoseconds survive the round trip
        out.append(Entry({"slurm_job_id": job, "host": host, "cluster": "c1", "level": "info"}, ns, f"{host} line {i}"))
    return out


async def test_query_selects_the_job_oldest_first_with_hosts(http_service, go_unquote) -> None:  # noqa: ANN001
    """Documented request and response format (JSON lines), as served by the fake described above."""
    entries = job_entries("123", 20) + job_entries("1234", 20)
    entries.append(Entry({"slurm_job_id": "123", "host": "node2", "cluster": "c1"}, at(9), "\x1b[1mCUDA error: an illegal memory access was encountered\x1b[0m"))
    fake = FakeVictoriaLogs(entries, go_unquote, extra='cluster:="c1"', account="12")
    source = VictoriaLogsSource(http_service(fake), extra_selector='cluster:="c1"', account_id=12, project_id=34)
    got = await source.query("123", start=T0, end=T0 + timedelta(minutes=1), limit=100)
    assert fake.problems == []
    sent = fake.requests[0]
    assert sent["query"] == '"slurm_job_id":="123" AND (cluster:="c1") | sort by (_time) | limit 100'
    assert sent["start"] == "2026-11-29T12:00:00.000000000Z"
    assert [r.line for r in got[:20]] == [f"node{1 + i % 2} line {i}" for i in range(20)]
    assert got[-1].line == "CUDA error: an illegal memory access was encountered"
    assert got[-1].host == "node2" and got[-1].labels["cluster"] == "c1"
    assert got[0].timestamp == T0 + timedelta(microseconds=0)
    assert "_stream" in got[0].labels and "_msg" not in got[0].labels


async def test_backward_gives_the_newest_entries_sorted(http_service, go_unquote) -> None:  # noqa: ANN001
    """Documented request and response format: `limit=N` returns the N most recent, unsorted; the client sorts."""
    entries = job_entries("9", 500)
    fake = FakeVictoriaLogs(entries, go_unquote)
    source = VictoriaLogsSource(http_service(fake), page_size=1000)
    got = await source.query("9", start=T0, end=T0 + timedelta(minutes=5), limit=50, direction="backward")
    assert fake.problems == []
    assert fake.requests[0]["limit"] == "50" and "|" not in fake.requests[0]["query"]
    assert [r.line for r in got] == [e.msg for e in entries[-50:]]


@pytest.mark.parametrize("direction", ["forward", "backward"])
async def test_pagination_loses_and_repeats_nothing(http_service, go_unquote, direction: str) -> None:  # noqa: ANN001
    """Documented request and response format, as served by the fake described above, over many pages."""
    entries = job_entries("55", 1400, same_ns_every=5)  # five lines share each timestamp
    fake = FakeVictoriaLogs(entries, go_unquote)
    source = VictoriaLogsSource(http_service(fake), page_size=128)
    got = await source.query("55", start=T0, end=T0 + timedelta(hours=1), limit=1000, direction=direction)  # type: ignore[arg-type]
    assert fake.problems == []
    assert len(fake.requests) >= 8
    expected = entries[:1000] if direction == "forward" else entries[-1000:]
    assert sorted(r.line for r in got) == sorted(e.msg for e in expected)
    assert all(a.timestamp <= b.timestamp for a, b in zip(got, got[1:]))


async def test_hostile_job_id_is_escaped_into_the_query(http_service, go_unquote) -> None:  # noqa: ANN001
    """Documented request and response format, as served by the fake described above."""
    weird = '1" OR * | delete "\\'
    entries = job_entries("1", 5) + [Entry({"slurm_job_id": weird, "host": "n"}, at(2), "weird job line")]
    fake = FakeVictoriaLogs(entries, go_unquote)
    got = await VictoriaLogsSource(http_service(fake)).query(weird, start=T0, end=T0 + timedelta(minutes=1), limit=10)
    assert fake.problems == []
    assert [r.line for r in got] == ["weird job line"]


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (400, b'cannot parse query [foo:=]: missing value', "HTTP 400: cannot parse query"),
        (502, b"bad gateway", "HTTP 502"),
        (200, b'{"_msg": "no time"}\n', "not a log entry"),
        (200, b"<html>login</html>\n", "not a log entry"),
        (200, b'{"_msg": "x", "_time": "yesterday"}\n', "not a log entry"),
    ],
)
async def test_errors_become_log_source_error(http_service, status: int, body: bytes, message: str) -> None:  # noqa: ANN001
    """VictoriaLogs answers errors as a non-2xx status with a text body (documented); junk lines are refused."""
    url = http_service(lambda req: (status, "text/plain", body))
    with pytest.raises(LogSourceError, match=re.escape(message)):
        await VictoriaLogsSource(url).query("1", start=T0, end=T0 + timedelta(minutes=1), limit=10)
    with pytest.raises(LogSourceError, match="did not answer"):
        await VictoriaLogsSource("http://127.0.0.1:9", timeout_s=2).query("1", start=T0, end=T0 + timedelta(minutes=1), limit=10)


def test_time_round_trip() -> None:
    ns = at(1.234567891)
    assert parse_rfc3339_ns(rfc3339_ns(ns)) == ns
    assert parse_rfc3339_ns(go_time(ns)) == ns
    assert parse_rfc3339_ns("2026-11-29T13:00:00+01:00") == to_ns(T0)
    assert parse_qs("a=1")  # the fake's form parsing is the standard library's
