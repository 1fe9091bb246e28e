"""Audit store fixtures: a fresh SQLite file or a fresh MariaDB database per test."""

from __future__ import annotations

import itertools
import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from adapters.audit import AuditStore
from workflows.contracts import AuditEntry, EventType

# one tag per test session, so that sessions running side by side never share a database
SESSION_TAG = secrets.token_hex(4)
_numbers = itertools.count(1)


@pytest.fixture
def mysql_db_url(mysql_url: str) -> Iterator[str]:
    """URL of a database `jm_audit_<session>_<n>` created for this test on the shared server, dropped after it."""
    server = sa.make_url(mysql_url)
    name = f"jm_audit_{SESSION_TAG}_{next(_numbers)}"
    admin = sa.create_engine(server, poolclass=NullPool)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield server.set(database=name).render_as_string(hide_password=False)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
    admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """A URL for an empty audit store: a SQLite file (in a directory not yet created) or a MariaDB database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'data' / 'audit.db'}"
    return request.getfixturevalue("mysql_db_url")


@pytest.fixture
def store(store_url: str) -> Iterator[AuditStore]:
    audit = AuditStore(store_url)
    yield audit
    audit.close()


@pytest.fixture
def make_entry() -> Callable[..., AuditEntry]:
    """Builds entries with sensible defaults; every call gets a fresh idempotency key unless one is given."""
    counter = itertools.count(1)

    def build(**fields: Any) -> AuditEntry:
        n = next(counter)
        values: dict[str, Any] = {
            "idempotency_key": f"test-{SESSION_TAG}-{n}",
            "timestamp": datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC),
            "cluster": "lab",
            "job_id": "1000",
            "event_type": EventType.DETECTION,
        }
        values.update(fields)
        return AuditEntry(**values)

    return build


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound for a moment, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TcpProxy:
    """A loopback TCP forwarder that can be switched off and on, to cut the store off from MariaDB.

    Stopping it closes the listening socket and every forwarded connection, which
    is what a database host that goes away looks like to the client.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._spawn(self._accept, listener)

    def stop(self) -> None:
        with self._lock:
            doomed = [s for s in [self._listener, *self._sockets] if s is not None]
            self._listener = None
            self._sockets = []
        for sock in doomed:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # the peer may be gone already
            sock.close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = [t for t in self._threads if t.is_alive()]

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._sockets += [client, upstream]
            self._spawn(self._pump, client, upstream)
            self._spawn(self._pump, upstream, client)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
            except OSError:
                break
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # already closed by stop()


@pytest.fixture
def tcp_proxy(mysql_url: str) -> Iterator[TcpProxy]:
    server = sa.make_url(mysql_url)
    proxy = TcpProxy((server.host or "127.0.0.1", server.port or 3306))
    proxy.start()
    yield proxy
    proxy.stop()

