"""PrometheusClient.gpu_health against a real Prometheus (Debian's package, started by
deploy/prometheus/up.sh) scraping small exporters that serve the DCGM exporter's text
exposition format: its metric names, types and labels (gpu, UUID, pci_bus_id, device,
modelName, Hostname), one exporter per node as on a real cluster.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.ports import free_port

from adapters.errors import MetricsError
from adapters.metrics import PrometheusClient, decode_throttle
from tests.fake_http import Request, stop
from tests.fake_http import serve as serve_http

REPO = Path(__file__).resolve().parents[2]
PCI = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3B:00.0", "00000000:5D:00.0"]
GAUGES = [
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Throttling reasons bitmask."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink flow-control CRC errors."),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink data CRC errors."),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink retries."),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink recovery errors."),
]


@dataclass
class FakeNode:
    """One node's GPUs as its DCGM exporter would report them."""

    hostname: str
    values: dict[tuple[str, int], float] = field(default_factory=dict)
    xid_counts: dict[tuple[int, int], float] = field(default_factory=dict)  # (gpu, xid) -> count
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, metric: str, gpu: int, value: float) -> None:
        with self.lock:
            self.values[(metric, gpu)] = value

    def set_xid_count(self, gpu: int, xid: int, count: float) -> None:
        with self.lock:
            self.xid_counts[(gpu, xid)] = count

    def labels(self, gpu: int) -> str:
        return (
            f'gpu="{gpu}",UUID="GPU-{abs(hash((self.hostname, gpu))) % 10**8:08d}-1111-2222-3333-444455556666",'
            f'pci_bus_id="{PCI[gpu]}",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",'
            f'Hostname="{self.hostname}",DCGM_FI_DRIVER_VERSION="550.54.15"'
        )

    def exposition(self) -> bytes:
        out = []
        with self.lock:
            for metric, kind, help_text in GAUGES:
                out.append(f"# HELP {metric} {help_text}")
                out.append(f"# TYPE {metric} {kind}")
                for gpu in range(len(PCI)):
                    default = 87.0 if metric == "DCGM_FI_DEV_GPU_UTIL" else 0.0
                    out.append(f"{metric}{{{self.labels(gpu)}}} {self.values.get((metric, gpu), default)}")
            if self.xid_counts:
                out.append("# HELP DCGM_EXP_XID_ERRORS_COUNT Count of XID Errors within user-specified time window (see xid-count-window-size param).")
                out.append("# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge")
                for (gpu, xid), count in sorted(self.xid_counts.items()):
                    out.append(f'DCGM_EXP_XID_ERRORS_COUNT{{{self.labels(gpu)},xid="{xid}"}} {count}')
        return ("\n".join(out) + "\n").encode()




def serve(node: FakeNode) -> ThreadingHTTPServer:
    """The node's exporter: GET /metrics."""

    def handle(req: Request) -> tuple[int, str, bytes]:
        if req.path != "/metrics":
            return 404, "text/plain", b"not found"
        return 200, "text/plain; version=0.0.4; charset=utf-8", node.exposition()

    return serve_http(handle)


@dataclass
class Stack:
    url: str
    nodes: dict[str, FakeNode]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # node2's exporter reports a fully qualified name, as many sites' exporters do
    nodes = {"node1": FakeNode("node1"), "node2": FakeNode("node2.cluster.local"), "node3": FakeNode("node3")}
    servers = [serve(n) for n in nodes.values()]
    port = free_port()
    env = {
        **os.environ,
        "JOBMEDIC_PROMETHEUS_PORT": str(port),
        "JOBMEDIC_PROMETHEUS_DIR": str(tmp_path_factory.mktemp("prometheus")),
    }
    targets = [f"127.0.0.1:{s.server_address[1]}" for s in servers]
    up = subprocess.run(
        ["bash", str(REPO / "deploy/prometheus/up.sh"), *targets], env=env, capture_output=True, text=True, timeout=120
    )
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        # a second run is a no-op that says so
        again = subprocess.run(
            ["bash", str(REPO / "deploy/prometheus/up.sh"), *targets], env=env, capture_output=True, text=True, timeout=60
        )
        assert again.returncode == 0 and "already up" in again.stdout, again.stdout + again.stderr
        yield Stack(url=f"http://127.0.0.1:{port}", nodes=nodes)
    finally:
        down = subprocess.run(
            ["bash", str(REPO / "deploy/prometheus/down.sh"), "--purge"], env=env, capture_output=True, text=True, timeout=60
        )
        for s in servers:
            stop(s)
        assert down.returncode == 0, down.stdout + down.stderr


def instant(url: str, expr: str) -> list[dict]:
    response = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=5)
    response.raise_for_status()
    return response.json()["data"]["result"]


def wait_for_samples(url: str, expr: str, at_least: float, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = instant(url, expr)
        if result and float(result[0]["value"][1]) >= at_least:
            return
        time.sleep(0.3)
    pytest.fail(f"Prometheus never had {expr} >= {at_least}")


async def test_gpu_health_names_the_sick_gpus_and_passes_the_healthy_host(stack: Stack) -> None:
    # a clean baseline of a few scrapes for every GPU
    wait_for_samples(stack.url, "count(DCGM_FI_DEV_GPU_UTIL)", 12)
    wait_for_samples(stack.url, 'min(count_over_time(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[1m]))', 3)
    start = datetime.now(UTC) - timedelta(seconds=2)
    node1, node2, node3 = stack.nodes["node1"], stack.nodes["node2"], stack.nodes["node3"]
    # node3 GPU 2: Xid 79 (fallen off the bus), then double-bit ECC errors and a failed row remap
    node3.set("DCGM_FI_DEV_XID_ERRORS", 2, 79)
    node3.set("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2, 3)
    node3.set("DCGM_FI_DEV_ROW_REMAP_FAILURE", 2, 1)
    node3.set_xid_count(2, 94, 1)  # a newer exporter's per-code count adds Xid 94
    # node2 GPU 3: a flapping NVLink; GPU 0: a short thermal HW slowdown (gone before the query)
    node2.set("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 3, 120)
    node2.set("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", 3, 6)
    node2.set("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 0, 0x8 | 0x40)
    # node1 GPU 1 is only power capped under load: normal, not a fault
    node1.set("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 1, 0x4)
    await asyncio.sleep(3)
    node2.set("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 0, 0x4)
    await asyncio.sleep(3)
    end = datetime.now(UTC)

    client = PrometheusClient(stack.url, timeout_s=5)
    report = await client.gpu_health(["node1", "node2", "node3", "node9"], start=start, end=end)

    assert set(report) == {"node1", "node2", "node3", "node9"}
    assert report["node1"].status == "healthy"
    assert report["node1"].gpu(1).throttle_reasons == ["SW power cap"]
    assert [f.pattern_id for f in report["node1"].facts()] == ["metrics.healthy"]
    assert report["node9"].status == "unknown"
    assert report["node9"].facts()[0].pattern_id == "metrics.no_data"

    sick = report["node3"]
    assert sick.status == "unhealthy"
    assert [g.gpu for g in sick.gpus] == ["0", "1", "2", "3"]
    assert [g.gpu for g in sick.gpus if not g.healthy] == ["2"]
    gpu2 = sick.gpu(2)
    assert gpu2.pci_bus_id == "00000000:3B:00.0"
    assert gpu2.uuid.startswith("GPU-") and gpu2.model == "NVIDIA H100 80GB HBM3"
    assert gpu2.xid_codes == [79, 94]
    assert gpu2.dbe_increase >= 2.5 and gpu2.dbe_total == 3
    assert gpu2.row_remap_failure
    assert gpu2.ref("node3") == "node3:00000000:3B:00.0"
    facts = [f.line for f in sick.facts()]
    assert "node3 GPU 2 (00000000:3B:00.0): Xid 79 reported by DCGM" in facts
    assert any("double-bit" in f and f.startswith("node3 GPU 2 ") for f in facts)
    assert any("row remapping failed" in f for f in facts)
    assert all(f.source == "metrics" and f.host == "node3" for f in sick.facts())

    links = report["node2"]  # found through its FQDN label
    assert links.status == "unhealthy"
    assert links.gpu(3).nvlink_errors["CRC flit"] >= 100
    assert links.gpu(3).nvlink_errors["replay"] >= 5
    assert links.gpu(3).nvlink_errors["recovery"] == 0
    assert links.gpu(0).harmful_throttle == ["HW slowdown", "HW thermal slowdown"]
    node2_facts = [f.line for f in links.facts()]
    assert any(f.startswith("node2 GPU 3 (00000000:5D:00.0): NVLink errors") and "CRC flit" in f for f in node2_facts)
    assert "node2 GPU 0 (00000000:18:00.0): clocks throttled by HW slowdown, HW thermal slowdown" in node2_facts

    util = await client.utilization_by_host(["node1", "node2", "node9"], start=start, end=end)
    assert util == {"node1": pytest.approx(87.0), "node2": pytest.approx(87.0)}


async def test_hostile_host_names_are_escaped_not_injected(stack: Stack) -> None:
    client = PrometheusClient(stack.url, timeout_s=5)
    now = datetime.now(UTC)
    weird = ['node1"} or vector(1) #', "node.*", "node1|node3", "a\\b"]
    report = await client.gpu_health(weird, start=now - timedelta(seconds=30), end=now)
    # none of them names a real node: no regex, quote or alternation leaked into the query
    assert {h: r.status for h, r in report.items()} == {h: "unknown" for h in weird}


async def test_errors_become_metrics_error(stack: Stack) -> None:
    now = datetime.now(UTC)
    with pytest.raises(MetricsError, match="rejected the query"):
        await PrometheusClient(stack.url).query("sum(", at=now)
    nobody = PrometheusClient(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    with pytest.raises(MetricsError, match="did not answer"):
        await nobody.gpu_health(["node1"], start=now - timedelta(seconds=10), end=now)


def test_decode_throttle_bits() -> None:
    assert decode_throttle(0) == []
    assert decode_throttle(0x1) == ["GPU idle"]
    assert decode_throttle(0x8 | 0x40 | 0x80) == ["HW slowdown", "HW thermal slowdown", "HW power brake slowdown"]
