"""deploy/grafana/jobmedic.json: a well-formed Grafana dashboard whose every query names only series the
endpoint exports, checked by a real Prometheus scraping the real endpoint and asked over its HTTP API."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from adapters.audit import AuditStore
from workers.metrics_server import MetricsServer, WatchStats
from workflows.contracts import AuditEntry

from .conftest import REPO, start_prometheus

DASHBOARD = REPO / "deploy/grafana/jobmedic.json"
SERIES = re.compile(r"\bjobmedic_[a-z0-9_]+\b")
# Grafana's own variables, as Grafana would fill them in
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__range": "1h", "$__interval": "15s", "$cluster": ".*"}
# what an operator looks for first (issue 10); each must be a panel
TOPICS = [
    "Detections by category", "Advice by action and mode", "Actions by outcome", "Watchdog firings",
    "Detection latency", "Action latency", "Time to restore training", "Recovery success rate", "Watched jobs",
    "Watch pass duration", "Watch lag",
]


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries(board: dict) -> list[str]:
    """Every PromQL expression of the dashboard: panel targets and the template variables."""
    found = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            found.append(var["query"]["query"] if isinstance(var["query"], dict) else var["query"])
    return found


def promql(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a Grafana variable the test does not know: {expr}"
    return expr


def test_the_dashboard_is_well_formed() -> None:
    board = dashboard()
    assert board["uid"] == "jobmedic" and board["title"]
    panels = board["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        assert all(SERIES.search(t["expr"]) for t in panel["targets"]), panel["title"]
    titles = {p["title"] for p in panels}
    assert [t for t in TOPICS if t not in titles] == []
    names = {v["name"] for v in board["templating"]["list"]}
    assert names == {"datasource", "cluster"}


@pytest.fixture
def filled(tmp_path: Path, scenario: list[AuditEntry]) -> Iterator[AuditStore]:
    audit = AuditStore(f"sqlite:///{tmp_path}/a.db")
    audit.record_many(scenario)
    yield audit
    audit.close()


@pytest.fixture
async def endpoint(filled: AuditStore) -> AsyncIterator[MetricsServer]:
    watch = WatchStats()
    now = datetime.now(UTC)
    for cluster, jobs in (("lab", 3), ("other", 2)):
        watch.record_pass(cluster, started_at=now - timedelta(seconds=0.4), finished_at=now, watched_jobs=jobs)
    async with MetricsServer(filled, port=0, refresh_s=60, watch=watch) as server:
        yield server


async def test_every_query_names_only_series_the_endpoint_exports(
    endpoint: MetricsServer, private_prometheus: Path
) -> None:
    board = dashboard()
    exprs = queries(board)
    wanted = sorted({name for expr in exprs for name in SERIES.findall(expr)})
    assert len(wanted) >= 20, wanted

    url = await start_prometheus(private_prometheus, endpoint.port)
    async with httpx.AsyncClient(timeout=10) as client:
        deadline = time.monotonic() + 60
        while True:
            answer = (await client.get(f"{url}/api/v1/label/__name__/values")).json()
            assert answer["status"] == "success", answer
            stored = set(answer["data"])
            missing = [name for name in wanted if name not in stored]
            if not missing:
                break
            assert time.monotonic() < deadline, f"Prometheus never stored {missing} (stored: {sorted(stored)})"
            await asyncio.sleep(0.5)

        # and each series by name, the way a panel asks for it
        for name in wanted:
            series = (await client.get(f"{url}/api/v1/series", params={"match[]": name})).json()
            assert series["status"] == "success" and series["data"], name

        # every expression is PromQL Prometheus accepts, Grafana's variables filled in
        for expr in exprs:
            if expr.startswith("label_values("):
                continue  # Grafana's own function; its series is among `wanted`
            answer = (await client.get(f"{url}/api/v1/query", params={"query": promql(expr)})).json()
            assert answer["status"] == "success", (expr, answer)

        # the cluster variable finds both clusters
        values = (await client.get(f"{url}/api/v1/label/cluster/values", params={"match[]": "jobmedic_jobs"})).json()
        assert set(values["data"]) == {"lab", "other"}
