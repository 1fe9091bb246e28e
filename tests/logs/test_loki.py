"""LokiLogSource against an HTTP server in the test that follows Loki's documented
`GET /loki/api/v1/query_range` exactly (no Loki binary exists in our registries).

The fake checks every request the way Loki would and answers 400 otherwise: the
path and method, only the documented parameters (`query`, `start`, `end`, `limit`,
`direction`), `start`/`end` as nanosecond epochs, `limit` within Loki's default
`max_entries_limit_per_query` (5000), `direction` forward or backward, and the
LogQL stream selector parsed strictly (Go-quoted label values). It answers in the
documented shape: `{"status": "success", "data": {"resultType": "streams",
"result": [{"stream": {...}, "values": [["<ns>", "<line>"], ...]}]}}`, selecting
entries with `start <= ts < end`, ordered by `direction`, at most `limit`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from adapters.errors import LogSourceError
from adapters.logs.loki import LokiLogSource
from adapters.logs.stores import to_ns

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\\n]|\\.)*")\s*')


@dataclass
class Entry:
    labels: dict[str, str]
    ns: int
    line: str


@dataclass
class FakeLoki:
    entries: list[Entry]
    unquote: Callable[[str], str]
    token: str | None = None
    tenant: str | None = None
    requests: list[dict[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def reject(self, why: str) -> tuple[int, str, bytes]:
        self.problems.append(why)
        return 400, "text/plain; charset=utf-8", why.encode()

    def parse_selector(self, text: str) -> dict[str, str]:
        text = text.strip()
        if not (text.startswith("{") and text.endswith("}")):
            raise ValueError("not a stream selector")
        inner, pos, matchers = text[1:-1], 0, {}
        while True:
            m = _MATCHER.match(inner, pos)
            if not m:
                raise ValueError(f"bad matcher at {inner[pos:]!r}")
            name, op, value = m.groups()
            if op != "=":
                raise ValueError(f"this fake only serves '=' matchers, got {op}")
            matchers[name] = self.unquote(value)
            pos = m.end()
            if pos == len(inner):
                return matchers
            if inner[pos] != ",":
                raise ValueError(f"expected ',' at {inner[pos:]!r}")
            pos += 1

    def __call__(self, req) -> tuple[int, str, bytes]:  # noqa: ANN001 - conftest.Request
        if req.method != "GET" or req.path != "/loki/api/v1/query_range":
            return self.reject(f"unexpected {req.method} {req.path}")
        if self.token and req.headers.get("Authorization") != f"Bearer {self.token}":
            return 401, "text/plain", b"no org id / unauthorized"
        if self.tenant and req.headers.get("X-Scope-OrgID") != self.tenant:
            return self.reject("missing X-Scope-OrgID")
        params = {k: v[-1] for k, v in req.query.items()}
        if any(len(v) != 1 for v in req.query.values()):
            return self.reject("repeated parameter")
        if set(params) - {"query", "start", "end", "limit", "direction"} or not {"query", "start", "end", "limit", "direction"} <= set(params):
            return self.reject(f"unexpected parameter set {sorted(params)}")
        self.requests.append(params)
        if not (params["start"].isdigit() and params["end"].isdigit()):
            return self.reject("start/end must be nanosecond epochs here")
        start, end = int(params["start"]), int(params["end"])
        if start >= end:
            return self.reject("end must be after start")
        if not params["limit"].isdigit() or not 1 <= int(params["limit"]) <= 5000:
            return self.reject("limit out of range (max_entries_limit_per_query is 5000)")
        if params["direction"] not in ("forward", "backward"):
            return self.reject("direction must be forward or backward")
        try:
            matchers = self.parse_selector(params["query"])
        except ValueError as exc:
            return self.reject(f"parse error: {exc}")
        chosen = [
            e for e in self.entries
            if start <= e.ns < end and all(e.labels.get(k) == v for k, v in matchers.items())
        ]
        chosen.sort(key=lambda e: e.ns, reverse=params["direction"] == "backward")
        chosen = chosen[: int(params["limit"])]
        streams: dict[str, dict] = {}
        for e in chosen:
            key = json.dumps(e.labels, sort_keys=True)
            streams.setdefault(key, {"stream": e.labels, "values": []})["values"].append([str(e.ns), e.line])
        body = {"status": "success", "data": {"resultType": "streams", "result": list(streams.values()), "stats": {}}}
        return 200, "application/json", json.dumps(body).encode()


def at(seconds: float) -> int:
    return to_ns(T0) + int(seconds * 1e9)


def job_entries(job: str, n: int, *, hosts: tuple[str, ...] = ("node1", "node2"), same_ns_every: int = 0) -> list[Entry]:
    out = []
    for i in range(n):
        host = hosts[i % len(hosts)]
        # some entries share a nanosecond timestamp, as lines from several ranks do
        ns = at(i // same_ns_every) if same_ns_every else at(i * 0.001)
        out.append(Entry({"slurm_job_id": job, "host": host, "cluster": "c1"}, ns, f"{host} line {i}"))
    return out


async def test_query_selects_the_job_in_time_order_with_hosts(http_service, go_unquote) -> None:  # noqa: ANN001
    """Documented request and response format, as served by the fake described above."""
    entries = job_entries("123", 10) + job_entries("124", 10)
    entries.append(Entry({"slurm_job_id": "123", "host": "node2", "cluster": "c1"}, at(5), "\x1b[31mNCCL error\x1b[0m: unhandled system error"))
    entries.append(Entry({"slurm_job_id": "123", "host": "node1", "cluster": "c1"}, at(6), "Traceback (most recent call last):\n  File x\nRuntimeError: boom"))
    fake = FakeLoki(entries, go_unquote, token="t0k", tenant="team-a")
    source = LokiLogSource(http_service(fake), bearer_token="t0k", tenant="team-a", extra_selector='cluster="c1"')
    got = await source.query("123", start=T0, end=T0 + timedelta(minutes=1), limit=100)
    assert fake.problems == []
    assert fake.requests[0]["query"] == '{slurm_job_id="123", cluster="c1"}'
    assert fake.requests[0]["direction"] == "forward"
    assert fake.requests[0]["start"] == str(to_ns(T0))
    assert [r.line for r in got[:10]] == [f"{('node1', 'node2')[i % 2]} line {i}" for i in range(10)]
    assert [r.host for r in got[:2]] == ["node1", "node2"]
    assert got[10].line == "NCCL error: unhandled system error"  # ANSI cleaned
    assert [r.line for r in got[11:]] == ["Traceback (most recent call last):", "  File x", "RuntimeError: boom"]
    assert got[10].labels == {"slurm_job_id": "123", "host": "node2", "cluster": "c1"}
    assert got[10].timestamp == T0 + timedelta(seconds=5)
    assert all(a.timestamp <= b.timestamp for a, b in zip(got, got[1:]))


async def test_pagination_loses_and_repeats_nothing_across_shared_timestamps(http_service, go_unquote) -> None:  # noqa: ANN001
    """Documented request and response format, as served by the fake described above (pages of at most `limit`)."""
    entries = job_entries("77", 2500, same_ns_every=7)
    fake = FakeLoki(entries, go_unquote)
    source = LokiLogSource(http_service(fake), page_size=300)
    got = await source.query("77", start=T0, end=T0 + timedelta(hours=1), limit=2002)
    assert fake.problems == []
    assert len(fake.requests) >= 7
    # Loki orders by time; within one nanosecond the order across streams is its own, so
    # the limits (2002, 1002) end on a timestamp boundary (7 entries share each one)
    assert sorted(r.line for r in got) == sorted(e.line for e in entries[:2002])
    assert all(a.timestamp <= b.timestamp for a, b in zip(got, got[1:]))

    newest = await source.query("77", start=T0, end=T0 + timedelta(hours=1), limit=1002, direction="backward")
    assert fake.problems == []
    assert sorted(r.line for r in newest) == sorted(e.line for e in entries[-1002:])
    assert all(a.timestamp <= b.timestamp for a, b in zip(newest, newest[1:]))


async def test_hostile_job_id_is_escaped_into_the_selector(http_service, go_unquote) -> None:  # noqa: ANN001
    """Documented request and response format, as served by the fake described above."""
    weird = '123"} |= "x" or {a=~".+\\'
    entries = job_entries("123", 5) + [Entry({"slurm_job_id": weird, "host": "n"}, at(1), "the weird job's line")]
    fake = FakeLoki(entries, go_unquote)
    got = await LokiLogSource(http_service(fake)).query(weird, start=T0, end=T0 + timedelta(minutes=1), limit=10)
    assert fake.problems == []
    assert [r.line for r in got] == ["the weird job's line"]  # exactly that value, nothing injected


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (400, b"parse error at line 1, col 2: syntax error", "HTTP 400: parse error"),
        (500, b"internal server error", "HTTP 500"),
        (200, b"<html>proxy login</html>", "not a streams result"),
        (200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode(), "resultType 'matrix'"),
        (200, json.dumps({"status": "success", "data": {"resultType": "streams", "result": [{"stream": {}, "values": [["x", "y"]]}]}}).encode(), "not a streams result"),
    ],
)
async def test_errors_become_log_source_error(http_service, status: int, body: bytes, message: str) -> None:  # noqa: ANN001
    """Loki answers errors as a non-2xx status with a plain-text body (documented); junk is refused too."""
    url = http_service(lambda req: (status, "text/plain", body))
    with pytest.raises(LogSourceError, match=re.escape(message)):
        await LokiLogSource(url).query("1", start=T0, end=T0 + timedelta(minutes=1), limit=10)


async def test_wrong_token_and_unreachable_server(http_service, go_unquote) -> None:  # noqa: ANN001
    """Documented request format; the fake answers 401 without the right bearer token."""
    fake = FakeLoki(job_entries("1", 3), go_unquote, token="right")
    with pytest.raises(LogSourceError, match="HTTP 401"):
        await LokiLogSource(http_service(fake), bearer_token="wrong").query("1", start=T0, end=T0 + timedelta(minutes=1), limit=10)
    with pytest.raises(LogSourceError, match="did not answer"):
        await LokiLogSource("http://127.0.0.1:9", timeout_s=2).query("1", start=T0, end=T0 + timedelta(minutes=1), limit=10)


def test_label_names_are_checked() -> None:
    with pytest.raises(LogSourceError, match="logs.job_label"):
        LokiLogSource("http://x", job_label='job"} or {a="')
