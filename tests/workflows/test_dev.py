"""`jobmedic dev`: the embedded stack (its own Temporal dev server + worker + SQLite) from one command."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ports import free_port as _free_port
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from tests.workflows.harness import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(180)]
JOBMEDIC = str(Path(sys.executable).parent / "jobmedic")




def _open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


async def test_dev_starts_server_and_worker_and_stops_both(tmp_path: Path, slurm_cluster) -> None:
    port, ui = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBMEDIC_")}
    env.update(
        JOBMEDIC_DATA_DIR=str(tmp_path / "data"),
        JOBMEDIC_TEMPORAL__ADDRESS=f"127.0.0.1:{port}",
        JOBMEDIC_TEMPORAL__UI_URL=f"http://127.0.0.1:{ui}",
    )
    log = tmp_path / "dev.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([JOBMEDIC, "dev", "--ui-port", str(ui)], env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        await wait_for(lambda: "Temporal UI: http://127.0.0.1:" in log.read_text(), timeout=60, what="the UI URL")
        assert _open(port) and _open(ui)

        async def watch_running() -> bool:
            client = await Client.connect(f"127.0.0.1:{port}", data_converter=pydantic_data_converter)
            try:
                desc = await client.get_workflow_handle("jobmedic-watch-local").describe()
            except RPCError:  # not started yet: the worker compiles its patterns first
                return False
            return desc.status is not None and desc.status.name == "RUNNING"

        await wait_for(watch_running, timeout=60, what="the cluster watch of the embedded defaults")
        assert (tmp_path / "data" / "temporal.db").exists()
        assert (tmp_path / "data" / "audit.db").exists()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    assert proc.returncode == 0, log.read_text()[-2000:]
    deadline = time.monotonic() + 30
    while _open(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _open(port), "jobmedic dev left its Temporal dev server running"
