"""The straggler's culprit, named from a real Prometheus (Debian's package, started by
deploy/prometheus/up.sh) scraping one small DCGM-format exporter per node. One node's
GPU is degraded (lower SM clock, hotter, HW slowdown and thermal throttle bits set,
less power): it is the culprit. With every node alike, there is none.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from activities.detection.rank_timing import parse_rank_timings
from activities.detection.straggler import straggler_culprit
from adapters.metrics import PrometheusClient
from tests.fake_http import Request, stop
from tests.fake_http import serve as serve_http
from tests.metrics.test_prometheus import wait_for_samples
from tests.ports import free_port
from workflows.contracts import JobInfo, TaskLayout

REPO = Path(__file__).resolve().parents[2]
PCI = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3B:00.0", "00000000:5D:00.0"]
HEALTHY = {
    "DCGM_FI_DEV_SM_CLOCK": 1980.0,
    "DCGM_FI_DEV_POWER_USAGE": 690.0,
    "DCGM_FI_DEV_GPU_TEMP": 62.0,
    "DCGM_FI_DEV_GPU_UTIL": 97.0,
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0.0,
    "DCGM_FI_DEV_XID_ERRORS": 0.0,
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0.0,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0.0,
}
COUNTERS = {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}
DEGRADED_GPU = 2
DEGRADED = {
    "DCGM_FI_DEV_SM_CLOCK": 1410.0,
    "DCGM_FI_DEV_GPU_TEMP": 88.0,
    "DCGM_FI_DEV_POWER_USAGE": 505.0,
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": float(0x8 | 0x40),  # HW slowdown, HW thermal slowdown
}
NODES = ["node1", "node2", "node3", "node4"]


@dataclass
class DcgmNode:
    """One node's exporter: Hostname as the exporter reports it, and a `kubernetes_node` label too."""

    node: str
    hostname: str
    offset: float  # the small spread real nodes have
    values: dict[tuple[str, int], float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def degrade(self, gpu: int) -> None:
        with self.lock:
            self.values.update({(m, gpu): v for m, v in DEGRADED.items()})

    def heal(self) -> None:
        with self.lock:
            self.values = {k: v for k, v in self.values.items() if k[0] in COUNTERS}

    def exposition(self) -> bytes:
        out = []
        with self.lock:
            for metric, healthy in HEALTHY.items():
                out.append(f"# TYPE {metric} {'counter' if metric in COUNTERS else 'gauge'}")
                for gpu, pci in enumerate(PCI):
                    base = healthy + (self.offset * (10 if "CLOCK" in metric else 1) if healthy > 50 else 0)
                    value = self.values.get((metric, gpu), base)
                    labels = (f'gpu="{gpu}",UUID="GPU-{self.node}-{gpu}",pci_bus_id="{pci}",device="nvidia{gpu}",'
                              f'modelName="NVIDIA H100 80GB HBM3",Hostname="{self.hostname}",'
                              f'kubernetes_node="{self.node}"')
                    out.append(f"{metric}{{{labels}}} {value}")
        return ("\n".join(out) + "\n").encode()


def serve(node: DcgmNode) -> ThreadingHTTPServer:
    def handle(req: Request) -> tuple[int, str, bytes]:
        if req.path != "/metrics":
            return 404, "text/plain", b"not found"
        return 200, "text/plain; version=0.0.4; charset=utf-8", node.exposition()

    return serve_http(handle)


@dataclass
class Stack:
    url: str
    nodes: dict[str, DcgmNode]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # node2's exporter names its host fully qualified, as many sites' exporters do
    nodes = {
        n: DcgmNode(n, f"{n}.cluster.local" if n == "node2" else n, offset=o)
        for n, o in zip(NODES, [0.0, -1.5, 0.8, -0.6])
    }
    servers = [serve(n) for n in nodes.values()]
    port = free_port()
    env = {
        **os.environ,
        "JOBMEDIC_PROMETHEUS_PORT": str(port),
        "JOBMEDIC_PROMETHEUS_DIR": str(tmp_path_factory.mktemp("prometheus")),
        "JOBMEDIC_PROMETHEUS_INTERVAL": "1s",
    }
    targets = [f"127.0.0.1:{s.server_address[1]}" for s in servers]
    try:
        up = subprocess.run(["bash", str(REPO / "deploy/prometheus/up.sh"), *targets], env=env, capture_output=True,
                            text=True, timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        url = f"http://127.0.0.1:{port}"
        wait_for_samples(url, "count(DCGM_FI_DEV_SM_CLOCK)", 16)
        yield Stack(url=url, nodes=nodes)
    finally:
        down = subprocess.run(["bash", str(REPO / "deploy/prometheus/down.sh"), "--purge"], env=env,
                              capture_output=True, text=True, timeout=60)
        for s in servers:
            stop(s)
        assert down.returncode == 0, down.stdout + down.stderr


class CountingTransport(httpx.AsyncHTTPTransport):
    """A real transport that remembers the queries it sent."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.queries.append(request.url.params.get("query", ""))
        return await super().handle_async_request(request)


JOB = JobInfo(job_id="7001", nodes=NODES, layout=TaskLayout(nodes=NODES, tasks_per_node=[4, 4, 4, 4]))


async def _window(stack: Stack, seconds: float = 6.0) -> tuple[datetime, datetime]:
    # a scrape after the change, then enough samples for means
    await asyncio.sleep(1.5)
    start = datetime.now(UTC)
    await asyncio.sleep(seconds)
    return start, datetime.now(UTC)


@pytest.fixture
def healed(stack: Stack) -> Iterator[Stack]:
    for n in stack.nodes.values():
        n.heal()
    yield stack
    for n in stack.nodes.values():
        n.heal()


async def test_all_nodes_alike_no_culprit(healed: Stack) -> None:
    start, end = await _window(healed)
    transport = CountingTransport()
    client = PrometheusClient(healed.url, timeout_s=5, transport=transport)

    finding = await straggler_culprit(client, JOB, start=start, end=end)

    assert finding.culprits == [], finding.explanation
    assert finding.nodes_compared == 4, finding.evidence
    assert {e.host: e.pattern_id for e in finding.evidence if e.host} == {n: "straggler.peer" for n in NODES}
    # one query per metric for all four nodes, never one per node
    assert len(transport.queries) == 8, transport.queries
    assert all('Hostname=~"(?:node1|node2|node3|node4)' in q for q in transport.queries), transport.queries


async def test_the_degraded_node_is_the_culprit(healed: Stack) -> None:
    healed.nodes["node3"].degrade(DEGRADED_GPU)
    start, end = await _window(healed)
    client = PrometheusClient(healed.url, timeout_s=5)

    telemetry = await client.node_telemetry(NODES, start=start, end=end)
    finding = await straggler_culprit(client, JOB, start=start, end=end)

    gpu = telemetry["node3"].gpus[DEGRADED_GPU]
    assert gpu.pci_bus_id == PCI[DEGRADED_GPU]
    assert gpu.sm_clock_mhz == pytest.approx(1410.0) and gpu.temp_c == pytest.approx(88.0)
    assert gpu.throttle_reasons == ["HW slowdown", "HW thermal slowdown"] and gpu.throttle_share == 1.0
    assert [len(telemetry[n].gpus) for n in NODES] == [4, 4, 4, 4]  # node2 found through its FQDN label

    assert finding.culprits == ["node3"], finding.explanation
    reasons = finding.reasons["node3"]
    assert any(r.startswith("SM clock 1410 MHz vs ") and "(GPU 2 (00000000:3B:00.0))" in r for r in reasons), reasons
    assert any(r.startswith("time clock-throttled") and "100%" in r for r in reasons), reasons
    assert any(r.startswith("GPU temperature 88 C") for r in reasons), reasons
    lines = {e.host: e for e in finding.evidence if e.host}
    assert lines["node3"].pattern_id == "straggler.culprit" and lines["node3"].source == "metrics"
    assert {lines[n].pattern_id for n in ["node1", "node2", "node4"]} == {"straggler.peer"}


async def test_host_label_setting_is_respected(healed: Stack) -> None:
    healed.nodes["node2"].degrade(0)
    start, end = await _window(healed)

    by_node_label = await straggler_culprit(PrometheusClient(healed.url, host_label="kubernetes_node", timeout_s=5),
                                            JOB, start=start, end=end)
    assert by_node_label.culprits == ["node2"], by_node_label.explanation
    # a label the exporters do not carry finds nothing: no data, no culprit, and the audit says so
    wrong = await straggler_culprit(PrometheusClient(healed.url, host_label="instance_host", timeout_s=5),
                                    JOB, start=start, end=end)
    assert wrong.culprits == [] and wrong.nodes_compared == 0
    assert {e.pattern_id for e in wrong.evidence if e.host} == {"straggler.no_data"}


async def test_rank_timings_name_the_node_when_dcgm_sees_nothing(healed: Stack) -> None:
    # a node slow for reasons DCGM does not show (a CPU-bound data loader): only the job's own timings tell
    start, end = await _window(healed, seconds=3.0)
    block = ["times across ranks (ms):", "  forward-compute:"]
    block += [f"     rank {r:2d}: {700.0 if 8 <= r < 12 else 400.0 + r:.2f}" for r in range(16)]
    timings = parse_rank_timings(block * 3, first_line_no=500)

    finding = await straggler_culprit(PrometheusClient(healed.url, timeout_s=5), JOB, start=start, end=end,
                                      timings=timings)

    assert finding.culprits == ["node3"], finding.explanation
    assert any(r.startswith("step time 0.7 s") for r in finding.reasons["node3"])
    line = next(e for e in finding.evidence if e.host == "node3")
    assert line.source == "log" and 8 <= (line.rank or 0) < 12


async def test_prometheus_down_is_evidence_not_an_error() -> None:
    now = datetime.now(UTC)
    client = PrometheusClient(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    finding = await straggler_culprit(client, JOB, start=now - timedelta(minutes=5), end=now)
    assert finding.culprits == []
    assert finding.evidence[0].pattern_id == "straggler.metrics_unavailable"
    assert "did not answer" in finding.evidence[0].line
