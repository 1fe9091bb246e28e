"""Session fixtures for the real local stack: Slurm, Temporal, MySQL and sshd.

Each fixture runs `deploy/up.sh <service>` (idempotent, a fast no-op when the
service is already up) and reads what the script wrote to
`${JOBMEDIC_STACK_DIR:-/tmp/jobmedic-stack}/<service>.json`. When a service cannot
be brought up, the tests that need it fail with the script's output: they are
never skipped, because a skipped test cannot fail.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
UP_SCRIPT = REPO_ROOT / "deploy" / "up.sh"
# a cold start may install Debian packages; that is the slowest path
UP_TIMEOUT_S = 900


@dataclass(frozen=True)
class SlurmCluster:
    """The local Slurm cluster started by deploy/slurm/up.sh."""

    conf: Path  # slurm.conf; the fixture also exports SLURM_CONF for the session
    nodes: list[str]  # ["node1", ..., "node4"]
    node_ctl: Path  # `node_ctl kill nodeN` / `node_ctl start nodeN`
    lab_dir: Path  # state, spool and logs of the cluster


@dataclass(frozen=True)
class TemporalServer:
    """The Temporal dev server started by deploy/temporal/up.sh."""

    address: str  # "127.0.0.1:7233"
    namespace: str
    ui_url: str
    db: Path | None  # the SQLite file that keeps history; None for a reused server without one


@dataclass(frozen=True)
class Sshd:
    """The key-only loopback sshd started by deploy/ssh/up.sh."""

    host: str
    port: int
    user: str
    key_file: Path  # private client key
    known_hosts: Path  # lists the real host key for [host]:port
    wrong_known_hosts: Path  # lists a different key for the same [host]:port

    def connect(self, *, known_hosts: Path | None = None, **options: Any) -> Any:
        """`asyncssh.connect` to this sshd with its client key, checking `known_hosts` (default: the real
        key); no agent and no ~/.ssh/config, so the machine's own settings cannot change a test."""
        import asyncssh  # only the tests that talk SSH pay for the import

        return asyncssh.connect(
            self.host,
            port=self.port,
            username=self.user,
            client_keys=[str(self.key_file)],
            known_hosts=str(known_hosts or self.known_hosts),
            agent_path=None,
            config=[],
            **options,
        )


def stack_dir() -> Path:
    """Where deploy/ keeps its state and the `<service>.json` descriptions."""
    return Path(os.environ.get("JOBMEDIC_STACK_DIR", "/tmp/jobmedic-stack"))


def bring_up(service: str) -> dict[str, Any]:
    """Run `deploy/up.sh <service>` and return the service's JSON description.

    Fails the requesting tests (never skips them) with the script's output when
    the service cannot be brought up.
    """
    proc = subprocess.run(
        ["bash", str(UP_SCRIPT), service],
        capture_output=True,
        text=True,
        timeout=UP_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"`deploy/up.sh {service}` failed with exit code {proc.returncode}; "
            f"run it by hand to see why, fix the cause and rerun the tests.\n"
            f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}",
            pytrace=False,
        )
    described = stack_dir() / f"{service}.json"
    if not described.is_file():
        pytest.fail(f"`deploy/up.sh {service}` succeeded but wrote no {described}", pytrace=False)
    return json.loads(described.read_text())


@pytest.fixture(scope="session")
def session_monkeypatch() -> Iterator[pytest.MonkeyPatch]:
    """A MonkeyPatch for environment changes that last the whole session."""
    patcher = pytest.MonkeyPatch()
    yield patcher
    patcher.undo()


@pytest.fixture(scope="session")
def slurm_cluster(session_monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    """The local >= 4-node Slurm cluster; SLURM_CONF points at it for the session."""
    info = bring_up("slurm")
    cluster = SlurmCluster(
        conf=Path(info["slurm_conf"]),
        nodes=list(info["nodes"]),
        node_ctl=Path(info["node_ctl"]),
        lab_dir=Path(info["lab_dir"]),
    )
    session_monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    return cluster


@pytest.fixture(scope="session")
def temporal_server() -> TemporalServer:
    """The Temporal dev server with jobmedic's search attributes registered."""
    info = bring_up("temporal")
    return TemporalServer(
        address=info["address"],
        namespace=info["namespace"],
        ui_url=info["ui_url"],
        db=Path(info["db"]) if info.get("db") else None,
    )


@pytest.fixture(scope="session")
def mysql_url() -> str:
    """SQLAlchemy URL of the MySQL/MariaDB database `test` on 127.0.0.1:3306."""
    return str(bring_up("mysql")["url"])


@pytest.fixture(scope="session")
def sshd(slurm_cluster: SlurmCluster) -> Sshd:
    """Key-only sshd on loopback; its sessions get SLURM_CONF of the local cluster."""
    info = bring_up("ssh")
    return Sshd(
        host=info["host"],
        port=int(info["port"]),
        user=info["user"],
        key_file=Path(info["key_file"]),
        known_hosts=Path(info["known_hosts"]),
        wrong_known_hosts=Path(info["wrong_known_hosts"]),
    )
