"""`jobmedic check` on the log store and Prometheus: a real Prometheus (deploy/prometheus/up.sh) first with no
DCGM series, then scraping a DCGM exporter; a Loki test server (tests/logs/test_loki.py's, which follows the
documented query_range API, plus the documented label-names and label-values endpoints) whose labels are
`job_id` and `hostname` instead of jobmedic's defaults."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from adapters.logs.stores import to_ns
from tests.check.conftest import PrivateSlurm, finding, run_check, write_config
from tests.fake_http import Request, base_url, serve, stop
from tests.logs.conftest import _go_unquote
from tests.logs.test_loki import Entry, FakeLoki
from tests.metrics.test_prometheus import FakeNode
from tests.metrics.test_prometheus import serve as serve_exporter
from tests.ports import free_port

REPO = Path(__file__).resolve().parents[2]


class LokiWithLabels(FakeLoki):
    """Adds `GET /loki/api/v1/labels` and `/loki/api/v1/label/<name>/values` (start, end in ns), answering
    `{"status": "success", "data": [...]}` as Loki documents them."""

    def __call__(self, req: Request) -> tuple[int, str, bytes]:
        if req.path == "/loki/api/v1/labels" or req.path.startswith("/loki/api/v1/label/"):
            if req.method != "GET" or not {"start", "end"} <= set(req.query):
                return self.reject(f"bad label request {req.method} {req.path} {sorted(req.query)}")
            if req.path == "/loki/api/v1/labels":
                data = sorted({name for e in self.entries for name in e.labels})
            else:
                name = req.path.removeprefix("/loki/api/v1/label/").removesuffix("/values")
                data = sorted({e.labels[name] for e in self.entries if name in e.labels})
            return 200, "application/json", json.dumps({"status": "success", "data": data}).encode()
        return super().__call__(req)


def test_loki_with_other_label_names_gets_the_mapping(good_slurm: PrivateSlurm, temporal_server: object,
                                                      tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = good_slurm.slurm("squeue", "-h", "-t", "all", "-o", "%i").stdout.split()[0]
    now = to_ns(datetime.now(UTC))
    entries = [Entry({"job_id": job, "hostname": "node1", "job": "slurm"}, now - 20_000_000_000 + i, f"step {i}")
               for i in range(3)]
    fake = LokiWithLabels(entries, _go_unquote)
    server = serve(fake)
    try:
        logs = f'kind = "loki"\nurl = "{base_url(server)}"'
        code, found = run_check(write_config(tmp_path, slurm_conf=good_slurm.conf, logs=logs), capsys)
        assert code == 1
        label = finding(found, "logs.job_label")
        assert label["status"] == "FAIL" and "set logs.job_label = 'job_id'" in label["message"]
        host = finding(found, "logs.host_label")
        assert host["status"] == "WARN" and "set logs.host_label = 'hostname'" in host["message"]
        # the suggested label already finds the job's lines
        assert finding(found, "logs.recent_job")["status"] == "OK"
        # with the mapping in the config, every log finding is OK
        logs += '\njob_label = "job_id"\nhost_label = "hostname"'
        code, found = run_check(write_config(tmp_path, slurm_conf=good_slurm.conf, logs=logs), capsys)
        assert code == 0, found
        assert {f["status"] for f in found if f["check"].startswith("logs.")} == {"OK"}
        assert fake.problems == []
    finally:
        stop(server)
    code, found = run_check(write_config(tmp_path, slurm_conf=good_slurm.conf,
                                         logs='kind = "loki"\nurl = "http://127.0.0.1:9"\ntimeout_s = 2'), capsys)
    assert code == 1 and finding(found, "logs.reachable")["status"] == "FAIL"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    port = free_port()
    env = {**os.environ, "JOBMEDIC_PROMETHEUS_PORT": str(port),
           "JOBMEDIC_PROMETHEUS_DIR": str(tmp_path_factory.mktemp("prometheus"))}
    up = subprocess.run(["bash", str(REPO / "deploy/prometheus/up.sh")], env=env, capture_output=True, text=True,
                        timeout=120)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield f"http://127.0.0.1:{port}", env
    finally:
        subprocess.run(["bash", str(REPO / "deploy/prometheus/down.sh"), "--purge"], env=env, capture_output=True,
                       timeout=60)


def test_prometheus_without_dcgm_then_with_the_wrong_host_label(
    good_slurm: PrivateSlurm, temporal_server: object, prometheus: tuple[str, dict[str, str]], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, env = prometheus
    metrics = f'prometheus_url = "{url}"'
    code, found = run_check(write_config(tmp_path, slurm_conf=good_slurm.conf, metrics=metrics), capsys)
    assert code == 1
    assert finding(found, "metrics.reachable")["status"] == "OK"
    none = finding(found, "metrics.dcgm_series")
    assert none["status"] == "FAIL" and "dcgm-exporter" in none["message"]

    exporter = serve_exporter(FakeNode("node1.cluster.local"))
    try:
        target = f"127.0.0.1:{exporter.server_address[1]}"
        up = subprocess.run(["bash", str(REPO / "deploy/prometheus/up.sh"), target], env=env, capture_output=True,
                            text=True, timeout=60)
        assert up.returncode == 0, up.stdout + up.stderr
        deadline = time.monotonic() + 30
        while not httpx.get(f"{url}/api/v1/query", params={"query": "DCGM_FI_DEV_GPU_UTIL"}).json()["data"]["result"]:
            assert time.monotonic() < deadline, "Prometheus never scraped the DCGM exporter"
            time.sleep(0.3)
        code, found = run_check(write_config(tmp_path, slurm_conf=good_slurm.conf,
                                             metrics=metrics + '\nhost_label = "host"'), capsys)
        assert code == 1
        label = finding(found, "metrics.host_label")
        assert label["status"] == "FAIL" and "set metrics.host_label = 'Hostname'" in label["message"]
        code, found = run_check(write_config(tmp_path, slurm_conf=good_slurm.conf, metrics=metrics), capsys)
        assert code == 0, found
        assert {f["status"] for f in found if f["check"].startswith("metrics.")} == {"OK"}
    finally:
        stop(exporter)
    code, found = run_check(write_config(tmp_path, slurm_conf=good_slurm.conf,
                                         metrics='prometheus_url = "http://127.0.0.1:9"\ntimeout_s = 2'), capsys)
    assert code == 1 and finding(found, "metrics.reachable")["status"] == "FAIL"
