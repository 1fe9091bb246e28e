"""Shared pieces of the fault tests (tests/workflows/test_fault_*.py): a worker with fault switches in its
environment, and the check that the audit trail of one recovery is complete, in order and exactly once."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.ports import free_port
from tests.workflows.harness import JOBMEDIC, Scenario, WorkerProcess
from workflows.contracts import EventType

# one restart of a job whose failure names its bad node: these steps, each once, in this order
RESTART_STEPS = [
    (EventType.DETECTION, None),
    (EventType.ADVICE, "restart_exclude"),
    (EventType.ACTION_REQUESTED, "requeue_hold"),
    (EventType.ACTION_CONFIRMED, "requeue_hold"),
    (EventType.ACTION_REQUESTED, "exclude_nodes"),
    (EventType.ACTION_CONFIRMED, "exclude_nodes"),
    (EventType.ACTION_REQUESTED, "release"),
    (EventType.ACTION_CONFIRMED, "release"),
    (EventType.ALLOCATION_RESTART, None),
    (EventType.COMPLETED, None),
]


class FaultyWorker(WorkerProcess):
    """`jobmedic worker` with extra environment (e.g. JOBMEDIC_FAULT_KILL_AFTER, a PATH with a refusing scontrol)."""

    def __init__(self, scenario: Scenario, *, name: str = "worker", env: dict[str, str] | None = None) -> None:
        super().__init__(scenario, name=name)
        self.extra_env = env or {}

    def start(self, *, fault_delays: dict | None = None) -> FaultyWorker:
        if fault_delays is not None:
            self.scenario.fault_delays = fault_delays
        self.scenario.write_config()
        env = {**self.scenario.env(), **self.extra_env}
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [JOBMEDIC, "worker"], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def killed_itself(self) -> bool:
        return self.proc is not None and self.proc.poll() == -9


def assert_trail_in_order_once(sc: Scenario, job_id: str, steps: list[tuple[EventType, str | None]]) -> None:
    """Each of `steps` is in the store exactly once, written in the order the workflow made the entries."""
    store = sc.store()
    try:
        records = sorted(store.query_records(cluster=sc.cluster, job_id=job_id), key=lambda r: r.id)
    finally:
        store.close()
    seen = [(r.entry.event_type, r.entry.action) for r in records]
    counts = Counter(seen)
    for step in steps:
        assert counts[step] == 1, (step, seen)
    positions = [seen.index(step) for step in steps]
    assert positions == sorted(positions), seen
    stamps = [r.entry.timestamp for r in records]
    assert stamps == sorted(stamps), "entries reached the store out of order"
    assert len({r.entry.idempotency_key for r in records}) == len(records)


class PrivateMariaDB:
    """A MariaDB server of the test's own (own datadir and port), so stopping it disturbs nobody."""

    def __init__(self) -> None:
        # mariadbd runs as the mysql user, who cannot enter pytest's private tmp_path
        self.root = Path(tempfile.mkdtemp(prefix="jobmedic-mariadb-"))
        shutil.chown(self.root, "mysql", "mysql")
        self.datadir = self.root / "data"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/jobmedic"

    def install(self) -> None:
        installer = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
        assert installer, "mariadb-install-db is missing (deploy/up.sh mysql installs mariadb-server)"
        subprocess.run(
            [installer, f"--datadir={self.datadir}", "--user=mysql", "--skip-test-db"],
            check=True, capture_output=True, timeout=120,
        )

    def start(self) -> None:
        log = open(self.root / "mariadb.log", "ab")
        self.proc = subprocess.Popen(
            ["mariadbd", f"--datadir={self.datadir}", f"--port={self.port}", "--bind-address=127.0.0.1",
             f"--socket={self.datadir}/mysqld.sock", f"--pid-file={self.datadir}/mysqld.pid", "--user=mysql",
             "--skip-grant-tables", "--skip-log-bin"],
            stdout=subprocess.DEVNULL, stderr=log,
        )
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                time.sleep(0.2)
        import pymysql

        for _ in range(50):
            try:
                pymysql.connect(host="127.0.0.1", port=self.port, user="root").cursor().execute(
                    "CREATE DATABASE IF NOT EXISTS jobmedic"
                )
                return
            except pymysql.err.OperationalError:
                time.sleep(0.2)
        raise AssertionError("private MariaDB did not come up")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
