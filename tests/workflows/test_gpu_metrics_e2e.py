"""GPU metrics reach the verdict of a real recovery.

A job's first attempt dies of a transient NCCL error that names no host. The
only thing that says which node is sick is DCGM: its exporter reports Xid 79 on
one of the job's nodes, a private Prometheus scrapes it, and the worker, with
`[clusters.metrics] prometheus_url` set, reads it while collecting evidence. The
job must come back without that node. The control runs the same failure with no
metrics configured: a plain restart, nobody excluded.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path

import httpx
import pytest

from tests.metrics.test_prometheus import FakeNode
from tests.metrics.test_prometheus import serve as serve_exporter
from tests.fake_http import stop
from tests.ports import free_port
from tests.workflows.harness import REPO, Scenario, WorkerProcess, scontrol_job, submit_training, wait_for
from workflows.contracts import AuditEntry, EventType

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(180)]

XID_GPU = 2  # PCI 00000000:3B:00.0 in the fake exporter
# `early` fails at iteration 3 of the first attempt; slow iterations leave time to plant the Xid first
TRAINING = {"plan": "early,ok", "iterations": 5, "iteration_seconds": 4.0}


@dataclass
class MetricsScenario(Scenario):
    """The harness's deployment plus a `[clusters.metrics]` section when `prometheus_url` is set."""

    prometheus_url: str | None = None

    def write_config(self) -> Path:
        path = super().write_config()
        if self.prometheus_url:
            with path.open("a") as out:  # the last table was the cluster's: this one belongs to it
                out.write(f'[clusters.metrics]\nprometheus_url = "{self.prometheus_url}"\ntimeout_s = 5\n')
        return path


@dataclass
class GpuStack:
    url: str
    nodes: dict[str, FakeNode]


@pytest.fixture
def gpu_stack(slurm_cluster, tmp_path) -> Iterator[GpuStack]:
    """One fake DCGM exporter per Slurm node (all healthy) and a private Prometheus scraping them every second."""
    nodes = {name: FakeNode(name) for name in slurm_cluster.nodes}
    servers = [serve_exporter(node) for node in nodes.values()]
    port = free_port()
    env = {
        **os.environ,
        "JOBMEDIC_PROMETHEUS_PORT": str(port),
        "JOBMEDIC_PROMETHEUS_DIR": str(tmp_path / "prometheus"),
        "JOBMEDIC_PROMETHEUS_INTERVAL": "1s",
    }
    targets = [f"127.0.0.1:{s.server_address[1]}" for s in servers]
    try:
        up = subprocess.run(
            ["bash", str(REPO / "deploy/prometheus/up.sh"), *targets], env=env, capture_output=True, text=True,
            timeout=120,
        )
        assert up.returncode == 0, up.stdout + up.stderr
        yield GpuStack(url=f"http://127.0.0.1:{port}", nodes=nodes)
    finally:
        down = subprocess.run(
            ["bash", str(REPO / "deploy/prometheus/down.sh"), "--purge"], env=env, capture_output=True, text=True,
            timeout=60,
        )
        for s in servers:
            stop(s)
        assert down.returncode == 0, down.stdout + down.stderr


def _metrics_scenario(scenario: Scenario, prometheus_url: str | None) -> MetricsScenario:
    # same cluster, environment and job list: the `scenario` fixture's teardown still cleans up
    return MetricsScenario(**{f.name: getattr(scenario, f.name) for f in fields(Scenario)}, prometheus_url=prometheus_url)


@pytest.fixture
def workers(request) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for proc in started:
        proc.stop()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(f"--- worker log ({proc.log}) ---\n{proc.tail(150)}")


def _query(url: str, expr: str) -> list[dict]:
    response = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=5)
    response.raise_for_status()
    return response.json()["data"]["result"]


def _xid_hosts(url: str) -> set[str]:
    return {s["metric"].get("Hostname", "") for s in _query(url, "DCGM_FI_DEV_XID_ERRORS == 79")}


async def _run_to_completion(sc: MetricsScenario, workers: list[WorkerProcess], *, on_running=None) -> tuple[str, dict]:
    """Start the worker, submit the job, (optionally act on its first allocation), wait for COMPLETED."""
    worker = WorkerProcess(sc)
    workers.append(worker)
    worker.start()
    job_id = submit_training(sc.tmp / "job", environment=sc.environment, name="jm-gpu-e2e", **TRAINING)
    sc.jobs.append(job_id)
    first = await wait_for(
        lambda: (f := scontrol_job(job_id)).get("JobState") == "RUNNING" and f, timeout=60, what=f"job {job_id} RUNNING"
    )
    if on_running is not None:
        await on_running(job_id, first)
    final = await wait_for(
        # a failed attempt shows FAILED until jobmedic requeues it: only COMPLETED ends the wait
        lambda: (f := scontrol_job(job_id)).get("JobState") == "COMPLETED" and f,
        timeout=120, what=f"job {job_id} COMPLETED",
    )
    assert worker.alive(), worker.tail()
    return job_id, final


def _advice(sc: Scenario, job_id: str) -> list[AuditEntry]:
    return [e for e in sc.entries(job_id) if e.event_type is EventType.ADVICE]


async def test_dcgm_xid_on_a_job_node_gets_that_node_excluded(
    scenario: Scenario, gpu_stack: GpuStack, workers: list[WorkerProcess]
) -> None:
    await wait_for(
        lambda: len(_query(gpu_stack.url, "DCGM_FI_DEV_XID_ERRORS == 0")) == 4 * len(gpu_stack.nodes),
        timeout=30, what="every GPU's healthy Xid series in Prometheus",
    )
    sc = _metrics_scenario(scenario, gpu_stack.url)
    picked: dict[str, str] = {}

    async def plant_xid(job_id: str, first: dict) -> None:
        hosts = subprocess.run(
            ["scontrol", "show", "hostnames", first["NodeList"]], capture_output=True, text=True, timeout=30, check=True
        ).stdout.split()
        assert len(hosts) == 2, first
        picked["bad"] = bad = hosts[1]
        gpu_stack.nodes[bad].set("DCGM_FI_DEV_XID_ERRORS", XID_GPU, 79)
        await wait_for(lambda: _xid_hosts(gpu_stack.url) == {bad}, timeout=15, what=f"Xid 79 on {bad} in Prometheus")
        # otherwise the failure could have been judged before the metric existed
        assert scontrol_job(job_id).get("Restarts") == "0" and not _advice(sc, job_id), "the first attempt ended too soon"

    job_id, final = await _run_to_completion(sc, workers, on_running=plant_xid)
    bad = picked["bad"]

    assert final["JobState"] == "COMPLETED" and final["Restarts"] == "1", final
    assert bad in final.get("ExcNodeList", ""), final
    assert bad not in final.get("NodeList", ""), final
    advice = _advice(sc, job_id)
    assert len(advice) == 1, advice
    entry = advice[0]
    assert entry.implicated_nodes == [bad]
    assert entry.category == "gpu_hardware" and entry.action == "restart_exclude", entry
    # the metric is the evidence the verdict cites, not a log line
    cited = f"{entry.line}\n{(entry.detail or {}).get('explanation', '')}"
    assert f"{bad} GPU {XID_GPU} (00000000:3B:00.0): Xid 79 reported by DCGM" in cited, cited
    assert entry.pattern_id == "metrics.xid", entry
    confirmed = [e.action for e in sc.entries(job_id) if e.event_type is EventType.ACTION_CONFIRMED]
    assert confirmed == ["requeue_hold", "exclude_nodes", "release"]


async def test_without_metrics_the_same_failure_is_restarted_with_nobody_excluded(
    scenario: Scenario, workers: list[WorkerProcess]
) -> None:
    sc = _metrics_scenario(scenario, None)
    job_id, final = await _run_to_completion(sc, workers)

    assert final["JobState"] == "COMPLETED" and final["Restarts"] == "1", final
    assert final.get("ExcNodeList", "(null)") == "(null)", final
    advice = _advice(sc, job_id)
    assert len(advice) == 1, advice
    assert advice[0].implicated_nodes == [] and advice[0].action == "restart", advice[0]
    assert advice[0].category != "gpu_hardware", advice[0]
    confirmed = [e.action for e in sc.entries(job_id) if e.event_type is EventType.ACTION_CONFIRMED]
    assert confirmed == ["requeue_hold", "release"]
