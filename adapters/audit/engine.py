"""SQLAlchemy engines for the audit store: SQLite (embedded) or MySQL/MariaDB (pymysql)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine
from sqlalchemy.pool import StaticPool

from adapters.errors import ConfigError

#: execution option naming the statement that opens a SQLite transaction;
#: "BEGIN IMMEDIATE" takes the write lock up front (no lock upgrade that could fail)
SQLITE_BEGIN = "jobmedic_sqlite_begin"

# All well inside the audit activity's 30 s start-to-close timeout, so that a hung database
# fails the attempt (retryable) instead of leaving a blocked thread behind every retry.
SQLITE_BUSY_TIMEOUT_S = 15.0
MYSQL_CONNECT_TIMEOUT_S = 10
# longer than the migration lock wait (migrations.MYSQL_LOCK_WAIT_S)
MYSQL_READ_TIMEOUT_S = 30
MYSQL_WRITE_TIMEOUT_S = 30
# below the usual idle cut-offs of MySQL proxies and load balancers; pre-ping covers the rest
MYSQL_POOL_RECYCLE_S = 1800


def family(url: URL) -> str:
    """'sqlite' or 'mysql' (MariaDB included)."""
    backend = url.get_backend_name()
    if backend == "sqlite":
        return "sqlite"
    if backend in {"mysql", "mariadb"}:
        return "mysql"
    raise ConfigError(
        f"audit.url uses {backend!r}; the audit store supports SQLite (sqlite:///PATH) "
        "and MySQL/MariaDB (mysql+pymysql://USER:PASSWORD@HOST:PORT/DATABASE)"
    )


def parse_url(url: str) -> URL:
    """`url` parsed; a malformed one raises `ConfigError` (without echoing a password)."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise ConfigError(
            "audit.url is not a database URL; use sqlite:///PATH or mysql+pymysql://USER:PASSWORD@HOST:PORT/DATABASE"
        ) from exc
    family(parsed)
    return parsed


def sqlite_path(url: URL) -> Path | None:
    """The database file of a SQLite URL, None for an in-memory database."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def make_engine(url: URL) -> Engine:
    """An engine for `url` with the pool, timeouts and per-connection settings the store relies on."""
    if family(url) == "sqlite":
        return _sqlite_engine(url)
    return _mysql_engine(url)


def _sqlite_engine(url: URL) -> Engine:
    path = sqlite_path(url)
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    connect_args: dict[str, Any] = {"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False}
    if path is None:
        # one shared connection, or every thread would see its own empty database
        kwargs["poolclass"] = StaticPool
    engine = sa.create_engine(url, connect_args=connect_args, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # take transaction control away from the sqlite3 module, so that BEGIN is ours
        # (transactional DDL, BEGIN IMMEDIATE for read-then-write transactions)
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        if path is not None:
            _ensure_wal(cursor)
            # FULL: a committed audit entry survives a power cut, not only a process crash
            cursor.execute("PRAGMA synchronous = FULL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql(conn.get_execution_options().get(SQLITE_BEGIN, "BEGIN"))

    return engine


def _ensure_wal(cursor: Any) -> None:
    """Switch the database file to WAL (a persistent property of the file) unless it is already.

    The switch needs the file to itself and SQLite does not wait for that with the
    busy timeout, so two processes opening a new store at once retry here briefly.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    while True:
        try:
            if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _mysql_engine(url: URL) -> Engine:
    connect_args: dict[str, Any] = {}
    given = set(url.query)
    defaults = {
        "charset": "utf8mb4",
        "connect_timeout": MYSQL_CONNECT_TIMEOUT_S,
        "read_timeout": MYSQL_READ_TIMEOUT_S,
        "write_timeout": MYSQL_WRITE_TIMEOUT_S,
    }
    for key, value in defaults.items():
        if key not in given:
            connect_args[key] = value
    return sa.create_engine(
        url,
        connect_args=connect_args,
        pool_pre_ping=True,
        pool_recycle=MYSQL_POOL_RECYCLE_S,
        pool_size=5,
        max_overflow=5,
        pool_timeout=30,
    )
