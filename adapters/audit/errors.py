"""Translation of SQLAlchemy / PyMySQL / sqlite3 errors into jobmedic's error tree.

Two kinds matter to callers: `AuditStoreUnavailable` (retryable: the database
is down, unreachable, locked or busy; the activity retries) and
`AuditStoreRejected` (not retryable: wrong credentials, missing database, a
schema from a newer jobmedic; a person has to act).
"""

from __future__ import annotations

import sqlite3

import sqlalchemy.exc as sa_exc
from sqlalchemy.engine import URL

from adapters.errors import AuditStoreError


class AuditStoreUnavailable(AuditStoreError):
    """The audit database cannot be reached or is busy right now; retrying later can succeed."""

    retryable = True


class AuditStoreRejected(AuditStoreError):
    """The audit database refused the request for a reason retrying will not fix."""

    retryable = False


# MySQL / MariaDB error numbers (client 2xxx, server 1xxx) that mean "try again later"
_MYSQL_TRANSIENT = {
    1040,  # too many connections
    1053,  # server shutdown in progress
    1205,  # lock wait timeout
    1213,  # deadlock
    1927,  # MariaDB: connection was killed
    2002,  # can't connect through socket
    2003,  # can't connect to server (refused, timed out)
    2005,  # unknown host (DNS can recover)
    2006,  # server has gone away
    2013,  # lost connection during query
    2014,  # commands out of sync (a broken connection)
    2055,  # lost connection (system error)
    4031,  # MySQL 8: disconnected for inactivity
}
_MYSQL_ACCESS = {1044, 1045, 1142, 1227, 1698}
_MYSQL_UNKNOWN_DB = 1049


def where(url: URL) -> str:
    """`host:port/database` (or the SQLite path) of `url`, without credentials."""
    if url.get_backend_name() == "sqlite":
        return url.database or ":memory:"
    return f"{url.host or 'localhost'}:{url.port or 3306}/{url.database or ''}"


def _mysql_code(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None


def translate(exc: BaseException, *, url: URL, doing: str) -> AuditStoreError:
    """The jobmedic error for a database error raised while `doing` something on `url`.

    The caller raises the result `from exc`.
    """
    if isinstance(exc, AuditStoreError):
        return exc
    place = where(url)
    orig = getattr(exc, "orig", None) or exc
    detail = f"{type(orig).__name__}: {orig}"
    backend = url.get_backend_name()

    if isinstance(exc, sa_exc.TimeoutError):
        return AuditStoreUnavailable(
            f"audit store {place}: no free database connection while {doing} ({detail}); jobmedic retries"
        )

    if backend in {"mysql", "mariadb"}:
        code = _mysql_code(orig)
        if code in _MYSQL_ACCESS:
            return AuditStoreRejected(
                f"audit store {place} refused access while {doing} ({detail}): check the user, password "
                "and grants in audit.url (JOBMEDIC_AUDIT__URL)"
            )
        if code == _MYSQL_UNKNOWN_DB:
            return AuditStoreRejected(
                f"audit store {place}: the database {url.database!r} does not exist ({detail}); create it with "
                f"`CREATE DATABASE {url.database} CHARACTER SET utf8mb4` or fix audit.url"
            )
        if code in _MYSQL_TRANSIENT or getattr(exc, "connection_invalidated", False):
            return AuditStoreUnavailable(
                f"audit store unreachable while {doing}: is MySQL running at {url.host or 'localhost'}:"
                f"{url.port or 3306}? jobmedic retries ({detail})"
            )
    if backend == "sqlite" and isinstance(orig, sqlite3.Error):
        text = str(orig).lower()
        if "locked" in text or "busy" in text:
            return AuditStoreUnavailable(
                f"audit store {place} is locked by another process while {doing} ({detail}); jobmedic retries"
            )
        if "unable to open" in text or "readonly" in text or "read-only" in text:
            return AuditStoreRejected(
                f"audit store {place} cannot be opened for writing while {doing} ({detail}): check that "
                "data_dir (JOBMEDIC_DATA_DIR) is a writable directory, or set audit.url"
            )
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.DisconnectionError):
        return AuditStoreUnavailable(f"audit store {place} failed while {doing} ({detail}); jobmedic retries")
    return AuditStoreRejected(f"audit store {place} failed while {doing} ({detail})")
