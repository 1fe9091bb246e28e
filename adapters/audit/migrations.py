"""A small versioned migration runner for the audit store.

`schema_version` holds one row per applied migration. Migrations are ordered
functions over a SQLAlchemy connection and are never edited once released: a
schema change is a new migration at the end of `MIGRATIONS`, and the tables in
`tables.py` are updated to match (a test checks that they agree).

Concurrency: on SQLite all pending migrations run in one `BEGIN IMMEDIATE`
transaction (SQLite's DDL is transactional), so a second process waits and then
finds nothing to do. MySQL commits DDL implicitly, so there the runner holds a
named lock (`GET_LOCK`) for the database while it migrates, and every migration
is written to be safe to rerun after a crash halfway through it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
import sqlalchemy.exc as sa_exc
from loguru import logger
from sqlalchemy.dialects import mysql

from adapters.audit.engine import SQLITE_BEGIN, family
from adapters.audit.errors import AuditStoreRejected, AuditStoreUnavailable, where
from adapters.audit.tables import MYSQL_TABLE_OPTIONS

VERSION_TABLE = "schema_version"
MYSQL_LOCK_WAIT_S = 20

_TIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    apply: Callable[[sa.Connection], None]


def _version_table() -> sa.Table:
    return sa.Table(
        VERSION_TABLE,
        sa.MetaData(),
        sa.Column("version", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("applied_at", _TIME, nullable=False),
        **MYSQL_TABLE_OPTIONS,
    )


def _key_collation(conn: sa.Connection) -> str | None:
    """A binary collation that does not ignore trailing spaces, so distinct keys stay distinct."""
    dialect = conn.dialect
    if family_of(conn) != "mysql":
        return None
    if getattr(dialect, "is_mariadb", False):
        return "utf8mb4_nopad_bin"
    if (dialect.server_version_info or (0,)) >= (8, 0, 17):
        return "utf8mb4_0900_bin"
    return "utf8mb4_bin"  # MySQL 5.7: pads; keys never end in spaces


def family_of(conn: sa.Connection) -> str:
    return "sqlite" if conn.dialect.name == "sqlite" else "mysql"


def _index_names(conn: sa.Connection, table: str) -> set[str]:
    names = {ix["name"] for ix in sa.inspect(conn).get_indexes(table)}
    names |= {uc["name"] for uc in sa.inspect(conn).get_unique_constraints(table)}
    return {n for n in names if n}


def _ensure_indexes(conn: sa.Connection, table: sa.Table) -> None:
    existing = _index_names(conn, table.name)
    for index in sorted(table.indexes, key=lambda ix: ix.name or ""):
        if index.name not in existing:
            index.create(conn)


# --------------------------------------------------------------------------- migration 1


def _v1_audit_entry(conn: sa.Connection) -> sa.Table:
    """`audit_entry` exactly as migration 1 creates it (frozen; later changes are new migrations)."""
    time = _TIME
    return sa.Table(
        "audit_entry",
        sa.MetaData(),
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("idempotency_key", sa.String(255, collation=_key_collation(conn)), nullable=False),
        sa.Column("timestamp", time, nullable=False),
        sa.Column("cluster", sa.String(64), nullable=False),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("submit_time", time, nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("workflow_id", sa.String(255), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("event_type", sa.String(32), nullable=False),
        sa.Column("pattern_id", sa.String(128), nullable=True),
        sa.Column("line", sa.Text(), nullable=True),
        sa.Column("category", sa.String(32), nullable=True),
        sa.Column("fault_domain", sa.String(32), nullable=True),
        sa.Column("implicated_nodes", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("action", sa.String(64), nullable=True),
        sa.Column("mode", sa.String(16), nullable=True),
        sa.Column("rule", sa.String(128), nullable=True),
        sa.Column("attribution", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("detail", sa.JSON(none_as_null=True), nullable=True),
        sa.UniqueConstraint("idempotency_key", name="uq_audit_entry_idempotency_key"),
        sa.Index("ix_audit_entry_cluster_job", "cluster", "job_id"),
        sa.Index("ix_audit_entry_timestamp", "timestamp"),
        sa.Index("ix_audit_entry_event_type", "event_type"),
        **MYSQL_TABLE_OPTIONS,
    )


def create_audit_entry(conn: sa.Connection) -> None:
    """Migration 1: the `audit_entry` table, its unique key and its query indexes."""
    table = _v1_audit_entry(conn)
    table.create(conn, checkfirst=True)
    _ensure_indexes(conn, table)  # MySQL: a crash may have left the table without some indexes


# --------------------------------------------------------------------------- migration 2


def add_recorded_at(conn: sa.Connection) -> None:
    """Migration 2: `recorded_at` (when the store wrote the row) and an index on the workflow.

    Rows written before it get their event timestamp as `recorded_at`.
    """
    columns = {c["name"] for c in sa.inspect(conn).get_columns("audit_entry")}
    if "recorded_at" not in columns:
        kind = "DATETIME(6)" if family_of(conn) == "mysql" else "DATETIME"
        conn.exec_driver_sql(f"ALTER TABLE audit_entry ADD COLUMN recorded_at {kind} NULL")
    conn.execute(sa.text("UPDATE audit_entry SET recorded_at = timestamp WHERE recorded_at IS NULL"))
    table = sa.Table(
        "audit_entry",
        sa.MetaData(),
        sa.Column("workflow_id", sa.String(255)),
        sa.Column("run_id", sa.String(64)),
        sa.Index("ix_audit_entry_workflow", "workflow_id", "run_id"),
    )
    _ensure_indexes(conn, table)


# --------------------------------------------------------------------------- migration 3


def _v3_watch_state(conn: sa.Connection) -> sa.Table:
    """`watch_state` exactly as migration 3 creates it (frozen; later changes are new migrations)."""
    return sa.Table(
        "watch_state",
        sa.MetaData(),
        sa.Column("cluster", sa.String(64, collation=_key_collation(conn)), primary_key=True),
        sa.Column("item", sa.String(255, collation=_key_collation(conn)), primary_key=True),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("data", sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb"), nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
        sa.Index("ix_watch_state_slot", "cluster", "slot"),
        sa.Index("ix_watch_state_updated", "cluster", "updated_at"),
        **MYSQL_TABLE_OPTIONS,
    )


def create_watch_state(conn: sa.Connection) -> None:
    """Migration 3: `watch_state`, the cluster watch's per-job memory (cursors, progress rhythm), one row a job.

    It used to travel in the watch activity's heartbeat details, whose size grew with the job count.
    """
    table = _v3_watch_state(conn)
    table.create(conn, checkfirst=True)
    _ensure_indexes(conn, table)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "create audit_entry", create_audit_entry),
    Migration(2, "audit_entry.recorded_at and workflow index", add_recorded_at),
    Migration(3, "create watch_state", create_watch_state),
)
LATEST_VERSION = MIGRATIONS[-1].version


# --------------------------------------------------------------------------- runner


def applied_versions(conn: sa.Connection) -> set[int]:
    """Versions recorded in `schema_version` (empty when the table does not exist)."""
    if not sa.inspect(conn).has_table(VERSION_TABLE):
        return set()
    table = _version_table()
    return {int(v) for v in conn.execute(sa.select(table.c.version)).scalars()}


def current_version(engine: sa.Engine) -> int:
    """The highest applied migration, 0 for an empty database."""
    with engine.connect() as conn:
        return max(applied_versions(conn), default=0)


def _check_not_newer(versions: set[int], engine: sa.Engine) -> None:
    newest = max(versions, default=0)
    if newest > LATEST_VERSION:
        raise AuditStoreRejected(
            f"audit store {where(engine.url)} has schema version {newest}, but this jobmedic knows versions up "
            f"to {LATEST_VERSION}: upgrade jobmedic on every machine that writes or reads the audit trail"
        )


def migrate(engine: sa.Engine, *, target: int | None = None) -> int:
    """Apply the migrations `engine`'s database lacks, up to `target` (default: all).

    Returns the schema version afterwards. Safe to call from several processes at once.
    """
    goal = LATEST_VERSION if target is None else target
    with engine.connect() as conn:
        versions = applied_versions(conn)
    _check_not_newer(versions, engine)
    if all(m.version in versions for m in MIGRATIONS if m.version <= goal):
        return max(versions, default=0)
    with _exclusive(engine) as conn:
        return _apply_pending(conn, engine, goal)


def _apply_pending(conn: sa.Connection, engine: sa.Engine, goal: int) -> int:
    table = _version_table()
    sqlite = family(engine.url) == "sqlite"
    # SQLite: everything runs inside the caller's BEGIN IMMEDIATE; MySQL: one transaction per step
    step = nullcontext if sqlite else conn.begin
    with step():
        table.create(conn, checkfirst=True)
        versions = applied_versions(conn)  # again: another process may have migrated meanwhile
    _check_not_newer(versions, engine)
    for migration in MIGRATIONS:
        if migration.version > goal or migration.version in versions:
            continue
        logger.info("audit store {}: applying migration {} ({})", where(engine.url), migration.version, migration.name)
        applied_at = datetime.now(UTC).replace(tzinfo=None)
        row = {"version": migration.version, "name": migration.name, "applied_at": applied_at}
        with step():
            migration.apply(conn)
        if sqlite:
            conn.execute(table.insert().values(**row))
        else:
            _insert_version_row(conn, table, row)
        versions.add(migration.version)
    return max(versions, default=0)


def _insert_version_row(conn: sa.Connection, table: sa.Table, row: dict) -> None:
    try:
        with conn.begin():
            conn.execute(table.insert().values(**row))
    except sa_exc.IntegrityError:
        # only without the named lock (e.g. a hand-run tool) can two runners get here;
        # the migration is rerunnable, so the other runner's row is as good as ours
        logger.warning("schema_version {} was recorded by another process meanwhile", row["version"])


@contextmanager
def _exclusive(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A connection that alone may migrate `engine`'s database until the block ends."""
    if family(engine.url) == "sqlite":
        with engine.connect() as conn:
            conn.execution_options(**{SQLITE_BEGIN: "BEGIN IMMEDIATE"})
            with conn.begin():
                yield conn
        return
    lock = "jobmedic-audit-" + hashlib.sha1(str(engine.url.database).encode()).hexdigest()[:24]
    with engine.connect() as conn:
        got = conn.execute(sa.text("SELECT GET_LOCK(:name, :wait)"), {"name": lock, "wait": MYSQL_LOCK_WAIT_S}).scalar()
        conn.commit()
        if got != 1:
            raise AuditStoreUnavailable(
                f"audit store {where(engine.url)}: another jobmedic process has been migrating the schema for "
                f"{MYSQL_LOCK_WAIT_S}s (lock {lock}); jobmedic retries"
            )
        try:
            yield conn
        finally:
            if not conn.invalidated:
                conn.execute(sa.text("SELECT RELEASE_LOCK(:name)"), {"name": lock})
                conn.commit()
