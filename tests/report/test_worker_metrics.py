"""`jobmedic worker` with `metrics_port` set serves the figures of its audit store on /metrics."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.ports import free_port as _free_port

from adapters.audit import AuditStore
from tests.workflows.conftest import terminate_cluster_workflows
from workflows.contracts import AuditEntry

JOBMEDIC = str(Path(sys.executable).with_name("jobmedic"))




@pytest.fixture
def worker_config(tmp_path: Path, temporal_server, slurm_cluster, scenario: list[AuditEntry]) -> tuple[Path, int, str]:
    """A config for a worker of its own (unique cluster and environment, observe mode) and a filled store."""
    cluster = f"rep{uuid.uuid4().hex[:8]}"
    port = _free_port()
    audit_url = f"sqlite:///{tmp_path}/a.db"
    store = AuditStore(audit_url)
    store.record_many(scenario)
    store.close()
    config = tmp_path / "jobmedic.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\n'
        f"metrics_port = {port}\n"
        f'[temporal]\naddress = "{temporal_server.address}"\ntask_queue = "jobmedic-{cluster}"\n'
        f'[audit]\nurl = "{audit_url}"\n'
        f'[[clusters]]\nname = "{cluster}"\nenvironment = "{cluster}"\njob_environments = "{cluster}"\n'
        'mode = "observe"\npoll_interval_s = 5.0\n'
    )
    return config, port, cluster


async def test_worker_serves_metrics(worker_config: tuple[Path, int, str], temporal_server) -> None:
    config, port, cluster = worker_config
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBMEDIC_")}
    env["JOBMEDIC_CONFIG"] = str(config)
    log = config.with_name("worker.log")
    with open(log, "wb") as out:
        proc = subprocess.Popen([JOBMEDIC, "worker"], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        async with httpx.AsyncClient(timeout=5) as client:
            while True:
                assert proc.poll() is None, "the worker exited:\n" + log.read_text(errors="replace")[-3000:]
                try:
                    response = await client.get(f"http://127.0.0.1:{port}/metrics")
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "no metrics endpoint:\n" + log.read_text(errors="replace")[-3000:]
                    await asyncio.sleep(0.5)
        assert response.status_code == 200
        lines = response.text.splitlines()
        assert 'jobmedic_incidents_total{cluster="lab"} 4.0' in lines
        assert 'jobmedic_retries_stopped_total{cluster="other",rule="retry_budget"} 1.0' in lines
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        await terminate_cluster_workflows(temporal_server.address, cluster)
    assert proc.returncode == 0, log.read_text(errors="replace")[-3000:]
