"""The Prometheus endpoint: served over real HTTP from a filled SQLite store, checked by a strict
parser, by `promtool check metrics`, and scraped by a private Debian Prometheus."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import HistogramMetricFamily

from adapters.audit import AuditStore, AuditStoreUnavailable
from workers.metrics_server import MetricsServer, audit_families, observe_all, recent_jobs, start_metrics_server
from workers.report import build_report
from workflows.contracts import AuditEntry, EventType

from .conftest import NOW, Make, at, start_prometheus

WEIRD_RULE = 'odd "rule" \\ with\nnewline'
LONG_AGO = 10 * 365 * 86400.0  # per-job series for every job of the fixed 2026 trail, whatever today is

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


# --------------------------------------------------------------------------- a strict reader of the text format

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse_exposition(text: str) -> tuple[dict[str, str], Samples]:
    """(family -> type, samples); fails on anything the 0.0.4 text format does not allow."""
    assert text.endswith("\n")
    types: dict[str, str] = {}
    helped: set[str] = set()
    samples: Samples = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert name not in helped, f"second HELP for {name}"
            helped.add(name)
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in {"counter", "gauge", "histogram", "summary", "untyped"}
            assert name not in types, f"second TYPE for {name}"
            types[name] = kind
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, body, value = match.groups()
        family = next((f for f in (name, re.sub(r"_(bucket|sum|count)$", "", name)) if f in types), None)
        assert family is not None, f"{name} has no TYPE line before it"
        labels: dict[str, str] = {}
        rest = body or ""
        while rest:
            lm = _LABEL.match(rest)
            assert lm, f"bad labels in {line!r}"
            labels[lm.group(1)] = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], lm.group(2))
            rest = rest[lm.end():]
        key = (name, frozenset(labels.items()))
        assert key not in samples, f"duplicate series {line!r}"
        samples[key] = float(value)
    return types, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[name, frozenset(labels.items())]


# --------------------------------------------------------------------------- fixtures


class SwitchableStore:
    """The real store, behind a switch that makes reads fail as an unreachable database does."""

    def __init__(self, store: AuditStore) -> None:
        self.store = store
        self.broken = False

    def query(self, **filters: Any) -> list[AuditEntry]:
        if self.broken:
            raise AuditStoreUnavailable("audit store switched off by the test")
        return self.store.query(**filters)


@pytest.fixture
def store(tmp_path: Path, scenario: list[AuditEntry], make: Make) -> Iterator[AuditStore]:
    audit = AuditStore(f"sqlite:///{tmp_path}/a.db")
    weird = make("weird", "600", EventType.ADVICE, 30, action="stop", rule=WEIRD_RULE)
    audit.record_many([*scenario, weird])
    yield audit
    audit.close()


@pytest.fixture
async def server(store: AuditStore) -> AsyncIterator[MetricsServer]:
    switchable = SwitchableStore(store)
    async with MetricsServer(switchable, port=0, refresh_s=0.3, job_window_s=LONG_AGO) as srv:
        srv.switch = switchable  # type: ignore[attr-defined]
        yield srv


async def scrape(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.get(url)


# --------------------------------------------------------------------------- tests


async def test_metrics_parse_and_carry_the_figures(server: MetricsServer) -> None:
    response = await scrape(server.url)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    types, samples = parse_exposition(response.text)
    assert all(name.startswith("jobmedic_") for name in types)
    assert types["jobmedic_detection_latency_seconds"] == "histogram"
    assert types["jobmedic_incidents_total"] == "counter"

    assert value(samples, "jobmedic_incidents_total", cluster="lab") == 4
    assert value(samples, "jobmedic_incidents_total", cluster="other") == 2
    assert value(samples, "jobmedic_incidents_by_outcome", cluster="lab", outcome="watchdog") == 1
    assert value(samples, "jobmedic_recovery_success_ratio", cluster="lab") == 0.5
    assert value(samples, "jobmedic_recovery_success_ratio", cluster="other") == 0.0
    assert ("jobmedic_recovery_success_ratio", frozenset({("cluster", "weird")})) not in samples  # nothing resolved
    assert value(samples, "jobmedic_stragglers_total", cluster="other") == 1
    assert value(samples, "jobmedic_retries_stopped_total", cluster="lab", rule="same_error_twice") == 1
    assert value(samples, "jobmedic_retries_stopped_total", cluster="weird", rule=WEIRD_RULE) == 1

    # detection latencies of lab: 3, 30 and 10 s
    bucket = "jobmedic_detection_latency_seconds_bucket"
    assert [value(samples, bucket, cluster="lab", le=le) for le in ("2.0", "5.0", "10.0", "20.0", "30.0", "+Inf")] == [
        0, 1, 2, 2, 3, 3
    ]
    assert value(samples, "jobmedic_detection_latency_seconds_sum", cluster="lab") == 43.0
    assert value(samples, "jobmedic_detection_latency_seconds_count", cluster="lab") == 3
    assert value(samples, "jobmedic_time_to_restore_seconds_count", cluster="lab") == 2
    assert value(samples, "jobmedic_action_latency_seconds_count", cluster="other") == 1

    assert value(samples, "jobmedic_jobs", cluster="lab") == 3
    assert value(samples, "jobmedic_job_ettr_ratio", cluster="lab", job_id="100") == 197.0 / 300.0
    assert value(samples, "jobmedic_job_incidents", cluster="other", job_id="400") == 2
    # ratio of the two sums, for jobs that ended and jobs that run on to "now"
    ratio = value(samples, "jobmedic_productive_seconds", cluster="lab") / value(samples, "jobmedic_observed_seconds", cluster="lab")
    assert value(samples, "jobmedic_ettr_ratio", cluster="lab") == pytest.approx(ratio)
    assert value(samples, "jobmedic_report_refresh_failures_total") == 0
    assert value(samples, "jobmedic_report_last_refresh_timestamp_seconds") == pytest.approx(time.time(), abs=30)


async def test_promtool_accepts_the_exposition(server: MetricsServer) -> None:
    response = await scrape(server.url)
    promtool = shutil.which("promtool")
    assert promtool, "promtool comes with Debian's prometheus package: apt-get install prometheus"
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=response.text, capture_output=True, text=True, timeout=60, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def test_refresh_picks_up_new_entries_and_survives_a_lost_store(
    server: MetricsServer, store: AuditStore, make: Make
) -> None:
    store.record(make("lab", "700", EventType.DETECTION, 390, detail={"incident": "failed", "failure_at": at(388).isoformat()}))
    deadline = time.monotonic() + 10
    while True:
        _, samples = parse_exposition((await scrape(server.url)).text)
        if value(samples, "jobmedic_incidents_total", cluster="lab") == 5:
            break
        assert time.monotonic() < deadline, "the new incident never showed up"
        await asyncio.sleep(0.1)

    server.switch.broken = True  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while True:
        _, samples = parse_exposition((await scrape(server.url)).text)
        if value(samples, "jobmedic_report_refresh_failures_total") >= 1:
            break
        assert time.monotonic() < deadline, "the failed refresh was never counted"
        await asyncio.sleep(0.1)
    assert value(samples, "jobmedic_incidents_total", cluster="lab") == 5  # the last good figures stay


async def test_other_paths_and_methods(server: MetricsServer) -> None:
    base = server.url.removesuffix("/metrics")
    async with httpx.AsyncClient(timeout=10) as client:
        assert (await client.get(base + "/")).status_code == 200
        assert (await client.get(base + "/nope")).status_code == 404
        assert (await client.post(server.url, content=b"x")).status_code == 405
        head = await client.head(server.url)
        assert head.status_code == 200 and head.content == b""
        assert int(head.headers["content-length"]) > 1000


class _Families:
    def __init__(self, *families: object) -> None:
        self.families = families

    def collect(self):
        return iter(self.families)


def rendered(*families: object) -> list[str]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(*families))
    return generate_latest(registry).decode().splitlines()


def test_histogram_series_from_values() -> None:
    family = HistogramMetricFamily("jobmedic_x_seconds", "help with \\ and\nnewline", labels=["cluster"])
    observe_all(family, ["c"], [0.5, 3.0, 3.0, -1.0], buckets=(1, 5))
    assert rendered(family) == [
        "# HELP jobmedic_x_seconds help with \\\\ and\\nnewline",
        "# TYPE jobmedic_x_seconds histogram",
        'jobmedic_x_seconds_bucket{cluster="c",le="1.0"} 2.0',
        'jobmedic_x_seconds_bucket{cluster="c",le="5.0"} 4.0',
        'jobmedic_x_seconds_bucket{cluster="c",le="+Inf"} 4.0',
        'jobmedic_x_seconds_count{cluster="c"} 4.0',
        'jobmedic_x_seconds_sum{cluster="c"} 5.5',
    ]


def test_audit_counts(scenario: list[AuditEntry], make: Make) -> None:
    extra = [
        make("lab", "800", EventType.ADVICE, 5, action="restart_exclude", category="gpu_hardware"),
        make("lab", "800", EventType.ACTION_CONFIRMED, 6, action="release", detail={"changed": False}),
    ]
    text = "\n".join(rendered(*audit_families([*scenario, *extra]))) + "\n"
    _, samples = parse_exposition(text)
    assert value(samples, "jobmedic_detections_total", cluster="lab", incident="failed") == 3
    assert value(samples, "jobmedic_detections_total", cluster="lab", incident="hang") == 1
    assert value(samples, "jobmedic_detections_total", cluster="other", incident="straggler") == 1
    advice = "jobmedic_advice_total"
    assert value(samples, advice, cluster="lab", category="gpu_hardware", action="restart_exclude", mode="action") == 1
    assert value(samples, advice, cluster="lab", category="unattributed", action="stop", mode="action") == 1
    assert value(samples, advice, cluster="other", category="unattributed", action="stop", mode="observe") == 1
    assert value(samples, "jobmedic_actions_requested_total", cluster="lab", action="release") == 1
    assert value(samples, "jobmedic_actions_total", cluster="lab", action="requeue_hold", outcome="changed") == 2
    assert value(samples, "jobmedic_actions_total", cluster="lab", action="release", outcome="changed") == 2
    assert value(samples, "jobmedic_actions_total", cluster="lab", action="release", outcome="already_in_effect") == 1
    assert value(samples, "jobmedic_actions_total", cluster="lab", action="cancel", outcome="changed") == 1
    assert value(samples, "jobmedic_watchdog_firings_total", cluster="lab", released="true") == 1


async def test_openmetrics_when_the_scraper_asks_for_it(server: MetricsServer) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(server.url, headers={"Accept": "application/openmetrics-text;version=1.0.0"})
    assert response.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert response.text.endswith("# EOF\n")
    assert 'jobmedic_incidents_total{cluster="lab"} 4.0' in response.text.splitlines()


async def test_the_endpoint_binds_loopback_unless_told(store: AuditStore) -> None:
    served = await start_metrics_server(store, port=0)
    try:
        assert served._server is not None
        assert {sock.getsockname()[0] for sock in served._server.sockets} == {"127.0.0.1"}
    finally:
        await served.stop()
    async with MetricsServer(store, port=0, host="0.0.0.0") as everywhere:
        assert everywhere._server is not None
        assert {sock.getsockname()[0] for sock in everywhere._server.sockets} == {"0.0.0.0"}
        assert (await scrape(f"http://127.0.0.1:{everywhere.port}/metrics")).status_code == 200


def test_per_job_series_are_bounded(scenario: list[AuditEntry], make: Make) -> None:
    recycled = make("lab", "100", EventType.CHECKPOINT_SAVED, 10, submit_time=at(0))
    report = build_report([*scenario, recycled], now=NOW)
    recent = recent_jobs(report, now=NOW, window_s=60, limit=10)
    # followed jobs end at NOW; ended jobs (100 ended at 300, 200 at 55) are older than 60 s
    assert sorted((j.cluster, j.job_id) for j in recent) == [("lab", "100"), ("lab", "300"), ("other", "400"), ("other", "500")]
    assert next(j for j in recent if j.job_id == "100").submit_time == at(0)  # the newer job under a recycled id
    assert len(recent_jobs(report, now=NOW, window_s=LONG_AGO, limit=2)) == 2
    all_jobs = recent_jobs(report, now=NOW, window_s=LONG_AGO, limit=100)
    assert len(all_jobs) == len({(j.cluster, j.job_id) for j in report.jobs}) == 5


# --------------------------------------------------------------------------- a real Prometheus scrapes it


async def test_prometheus_scrapes_the_endpoint(server: MetricsServer, private_prometheus: Path) -> None:
    url = await start_prometheus(private_prometheus, server.port)
    query = 'jobmedic_incidents_total{cluster="lab"}'
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(timeout=10) as client:
        while True:
            answer = (await client.get(f"{url}/api/v1/query", params={"query": query})).json()
            assert answer["status"] == "success", answer
            if answer["data"]["result"]:
                break
            assert time.monotonic() < deadline, f"Prometheus never stored {query}"
            await asyncio.sleep(0.5)
        (series,) = answer["data"]["result"]
        assert float(series["value"][1]) == 4
        weird = await client.get(f"{url}/api/v1/series", params={"match[]": "jobmedic_retries_stopped_total"})
        rules = {s["rule"] for s in weird.json()["data"]}
    assert rules == {"same_error_twice", "retry_budget", WEIRD_RULE}
