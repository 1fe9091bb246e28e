"""The audit store: exactly-once writes and filtered reads of `AuditEntry`s.

`AuditStore` is synchronous (SQLAlchemy + sqlite3/PyMySQL block) and
thread-safe. Never call it directly on an event loop: async code runs each call
in a thread, with `asyncio.to_thread(store.record, entry)` (what the activities
do) or through `AsyncAuditStore`, which does exactly that for every method.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
import sqlalchemy.exc as sa_exc
from loguru import logger

from adapters.audit import migrations
from adapters.audit.engine import SQLITE_BEGIN, family, make_engine, parse_url, sqlite_path
from adapters.audit.errors import AuditStoreRejected, translate, where
from adapters.audit.rows import (
    SHARD_ITEM_PREFIX, compact_key, entry_to_row, from_db_time, row_to_entry, shard_item, to_db_time,
)
from adapters.audit.tables import audit_table, watch_state_table
from workflows.contracts import AuditEntry, EventType

DEFAULT_LIMIT = 10_000
# MySQL: 1213 deadlock, 1205 lock wait timeout; the statement's transaction was rolled back
_DEADLOCK_CODES = {1205, 1213}
_DEADLOCK_ATTEMPTS = 3
# bound on the number of bound parameters in one `IN (...)` (SQLite allows 32766, MySQL more)
_KEY_CHUNK = 500
# watch-state rows per executemany of the upsert (bounds one call's memory; the statement is compiled once)
_STATE_CHUNK = 500


@dataclass(frozen=True)
class AuditRecord:
    """An entry as stored: its row id and when the store wrote it (None for rows older than migration 2)."""

    id: int
    entry: AuditEntry
    recorded_at: datetime | None


def _is_deadlock(exc: sa_exc.DBAPIError) -> bool:
    args: tuple[Any, ...] = getattr(exc.orig, "args", ())
    return bool(args) and args[0] in _DEADLOCK_CODES


class AuditStore:
    """The audit trail in SQLite or MySQL/MariaDB.

    The schema is brought up to date on first use (or explicitly with
    `migrate()`). Every database error leaves as an `AuditStoreError`:
    `AuditStoreUnavailable` (retryable) or `AuditStoreRejected` (not).

    Args:
        url: SQLAlchemy URL: `sqlite:///PATH` (the parent directory is created)
            or `mysql+pymysql://USER:PASSWORD@HOST:PORT/DATABASE`.
    """

    def __init__(self, url: str) -> None:
        self._url = parse_url(url)
        path = sqlite_path(self._url)
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise AuditStoreRejected(
                    f"cannot create the directory {path.parent} for the audit store ({exc}); set data_dir "
                    "(JOBMEDIC_DATA_DIR) to a writable directory or audit.url to another database"
                ) from exc
        self._engine = make_engine(self._url)
        # SQLite: take the write lock before reading, so read-then-write never hits a stale snapshot
        self._write_engine = (
            self._engine.execution_options(**{SQLITE_BEGIN: "BEGIN IMMEDIATE"})
            if family(self._url) == "sqlite"
            else self._engine
        )
        self._table = audit_table()
        self._watch = watch_state_table()
        self._schema_ready = False
        self._schema_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle

    @property
    def where(self) -> str:
        """Where the store is (host:port/database or file), without credentials."""
        return where(self._url)

    @property
    def dialect(self) -> str:
        """'sqlite' or 'mysql'."""
        return family(self._url)

    def migrate(self, *, target: int | None = None) -> int:
        """Apply missing schema migrations (up to `target`, default all); returns the schema version."""
        with self._errors("migrating the schema"):
            version = migrations.migrate(self._engine, target=target)
        if target is None or target >= migrations.LATEST_VERSION:
            self._schema_ready = True
        return version

    def schema_version(self) -> int:
        """The schema version of the database (0 when empty)."""
        with self._errors("reading the schema version"):
            return migrations.current_version(self._engine)

    def close(self) -> None:
        """Close every pooled connection; the store can still be used afterwards (it reconnects)."""
        self._engine.dispose()
        self._schema_ready = False  # an in-memory database is gone with its connection

    def __enter__(self) -> AuditStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writes

    def record(self, entry: AuditEntry) -> bool:
        """Write `entry` unless an entry with its idempotency key is already stored.

        Returns True when this call wrote it, False when it was there already
        (an activity retried after a commit whose acknowledgement was lost).
        """
        self._ensure_schema()
        row = entry_to_row(entry, recorded_at=datetime.now(UTC))
        with self._errors("recording an audit entry"):
            attempt = 0
            while True:
                attempt += 1
                try:
                    with self._engine.begin() as conn:
                        conn.execute(self._table.insert(), row)
                    return True
                except sa_exc.IntegrityError:
                    # a plain INSERT against the unique key: the only integrity error expected is the key itself
                    if self._already_there(row):
                        return False
                    raise
                except sa_exc.OperationalError as exc:
                    # InnoDB may pick one of two inserts of the same key as a deadlock victim; the
                    # victim's transaction was rolled back whole, so trying again is safe
                    if not _is_deadlock(exc) or attempt >= _DEADLOCK_ATTEMPTS:
                        raise

    def record_many(self, entries: Iterable[AuditEntry]) -> list[bool]:
        """Write several entries in one transaction; per entry, True when written now.

        A key that appears twice in `entries` is written once (the first occurrence).
        """
        entries = list(entries)
        if not entries:
            return []
        self._ensure_schema()
        now = datetime.now(UTC)
        rows = [entry_to_row(e, recorded_at=now) for e in entries]
        with self._errors("recording audit entries"):
            try:
                with self._write_engine.begin() as conn:
                    stored = self._stored_keys(conn, [r["idempotency_key"] for r in rows])
                    written: list[bool] = []
                    fresh: list[dict[str, Any]] = []
                    for row in rows:
                        key = row["idempotency_key"]
                        new = key not in stored
                        written.append(new)
                        if new:
                            stored.add(key)
                            fresh.append(row)
                    if fresh:
                        conn.execute(self._table.insert(), fresh)
                return written
            except sa_exc.IntegrityError:
                # another writer stored some of these keys between our check and our insert
                logger.debug("audit batch raced another writer; writing its {} entries one by one", len(entries))
            except sa_exc.OperationalError as exc:
                if not _is_deadlock(exc):
                    raise
                logger.debug("audit batch was a deadlock victim; writing its {} entries one by one", len(entries))
        return [self.record(e) for e in entries]

    def _stored_keys(self, conn: sa.Connection, keys: Sequence[str]) -> set[str]:
        column = self._table.c.idempotency_key
        found: set[str] = set()
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), _KEY_CHUNK):
            chunk = unique[start : start + _KEY_CHUNK]
            found.update(conn.execute(sa.select(column).where(column.in_(chunk))).scalars())
        return found

    def _already_there(self, row: dict[str, Any]) -> bool:
        t = self._table
        with self._engine.connect() as conn:
            stored = conn.execute(
                sa.select(t.c.cluster, t.c.job_id, t.c.event_type).where(t.c.idempotency_key == row["idempotency_key"])
            ).first()
        if stored is None:
            return False
        if tuple(stored) != (row["cluster"], row["job_id"], row["event_type"]):
            # the caller built the same key for a different event: a bug upstream, worth a loud note
            logger.warning(
                "audit key {!r} already names {} {} {}; the new {} entry for job {} was not written",
                row["idempotency_key"], *stored, row["event_type"], row["job_id"],
            )
        return True

    # ------------------------------------------------------------------ reads

    def query(
        self,
        *,
        cluster: str | None = None,
        job_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        event_types: Iterable[EventType | str] | None = None,
        limit: int | None = DEFAULT_LIMIT,
        latest: bool = False,
    ) -> list[AuditEntry]:
        """Entries matching every filter given, oldest first (by timestamp, then write order).

        Args:
            since: entries at or after this time (naive means UTC).
            until: entries before this time (naive means UTC).
            limit: at most this many entries (None: all).
            latest: with a limit, the newest `limit` entries (still returned oldest first)
                instead of the oldest.
        """
        records = self.query_records(
            cluster=cluster, job_id=job_id, since=since, until=until,
            event_types=event_types, limit=limit, latest=latest,
        )
        return [r.entry for r in records]

    def query_records(
        self,
        *,
        cluster: str | None = None,
        job_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        event_types: Iterable[EventType | str] | None = None,
        limit: int | None = DEFAULT_LIMIT,
        latest: bool = False,
    ) -> list[AuditRecord]:
        """Like `query`, with each entry's row id and write time."""
        self._ensure_schema()
        t = self._table
        stmt = sa.select(t)
        if cluster is not None:
            stmt = stmt.where(t.c.cluster == cluster)
        if job_id is not None:
            stmt = stmt.where(t.c.job_id == job_id)
        if since is not None:
            stmt = stmt.where(t.c.timestamp >= to_db_time(since))
        if until is not None:
            stmt = stmt.where(t.c.timestamp < to_db_time(until))
        if event_types is not None:
            stmt = stmt.where(t.c.event_type.in_([str(e) for e in event_types]))
        if latest:
            stmt = stmt.order_by(t.c.timestamp.desc(), t.c.id.desc())
        else:
            stmt = stmt.order_by(t.c.timestamp, t.c.id)
        if limit is not None:
            stmt = stmt.limit(max(0, limit))
        with self._errors("reading the audit trail"):
            with self._engine.connect() as conn:
                rows = [r._mapping for r in conn.execute(stmt)]
        if latest:
            rows.reverse()
        return [self._to_record(r) for r in rows]

    def get(self, idempotency_key: str) -> AuditEntry | None:
        """The entry stored under `idempotency_key`, if any."""
        self._ensure_schema()
        t = self._table
        with self._errors("reading an audit entry"):
            with self._engine.connect() as conn:
                row = conn.execute(sa.select(t).where(t.c.idempotency_key == compact_key(idempotency_key))).first()
        return None if row is None else self._to_record(row._mapping).entry

    def _to_record(self, row: Any) -> AuditRecord:
        try:
            entry = row_to_entry(row)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise AuditStoreRejected(
                f"audit store {self.where}: row {row['id']} cannot be read by this jobmedic ({exc}); "
                "it was probably written by a newer version: upgrade jobmedic"
            ) from exc
        return AuditRecord(id=int(row["id"]), entry=entry, recorded_at=from_db_time(row["recorded_at"]))

    # ------------------------------------------------------------------ watch state (migration 3)

    def load_watch_state(self, cluster: str, *, shard: int = 0, shards: int = 1) -> dict[str, str]:
        """The stored state (item -> JSON) of the jobs watch shard `shard` of `shards` owns, and the shard's own.

        A job's shard follows from its slot (`rows.shard_of`), so after a change of `shards` every
        job's row is found by its new shard; rows of shards that no longer exist are left to `prune`.
        """
        if not 0 <= shard < shards:
            raise ValueError(f"shard {shard} of {shards} does not exist")
        self._ensure_schema()
        t = self._watch
        stmt = sa.select(t.c.item, t.c.data).where(t.c.cluster == cluster, (t.c.slot % shards) == shard)
        with self._errors("reading the watch state"):
            with self._engine.connect() as conn:
                rows = conn.execute(stmt).all()
        mine = shard_item(shard)
        return {item: data for item, data in rows if not item.startswith(SHARD_ITEM_PREFIX) or item == mine}

    def save_watch_state(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert or replace watch-state rows (`rows.watch_state_row` values), in one transaction."""
        if not rows:
            return
        self._ensure_schema()
        t = self._watch
        with self._errors("writing the watch state"):
            with self._engine.begin() as conn:
                # one statement executed for many rows: compiled once (cached), not a VALUES list compiled anew
                # for every chunk (at thousands of rows a pass, compiling cost more than writing)
                for start in range(0, len(rows), _STATE_CHUNK):
                    conn.execute(self._upsert(t), list(rows[start : start + _STATE_CHUNK]))

    def _upsert(self, t: sa.Table) -> Any:
        changing = ("job_id", "slot", "data", "updated_at")
        if self.dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            stmt = sqlite_insert(t)
            return stmt.on_conflict_do_update(
                index_elements=[t.c.cluster, t.c.item], set_={c: stmt.excluded[c] for c in changing}
            )
        from sqlalchemy.dialects.mysql import insert as mysql_insert

        mstmt = mysql_insert(t)
        return mstmt.on_duplicate_key_update({c: mstmt.inserted[c] for c in changing})

    def delete_watch_state(self, cluster: str, items: Iterable[str]) -> int:
        """Forget the watch state of `items` (jobs that left the scheduler); returns the rows deleted."""
        unique = list(dict.fromkeys(items))
        if not unique:
            return 0
        self._ensure_schema()
        t = self._watch
        deleted = 0
        with self._errors("deleting watch state"):
            with self._engine.begin() as conn:
                for start in range(0, len(unique), _KEY_CHUNK):
                    chunk = unique[start : start + _KEY_CHUNK]
                    deleted += conn.execute(t.delete().where(t.c.cluster == cluster, t.c.item.in_(chunk))).rowcount
        return deleted

    def prune_watch_state(self, cluster: str, *, before: datetime) -> int:
        """Delete `cluster`'s watch-state rows not written since `before` (no watch shard keeps them any more)."""
        self._ensure_schema()
        t = self._watch
        with self._errors("pruning the watch state"):
            with self._engine.begin() as conn:
                stmt = t.delete().where(t.c.cluster == cluster, t.c.updated_at < to_db_time(before))
                return int(conn.execute(stmt).rowcount)

    def watch_state_rows(self, cluster: str | None = None) -> int:
        """How many watch-state rows there are (of `cluster`, or all)."""
        self._ensure_schema()
        t = self._watch
        stmt = sa.select(sa.func.count()).select_from(t)
        if cluster is not None:
            stmt = stmt.where(t.c.cluster == cluster)
        with self._errors("counting watch state"):
            with self._engine.connect() as conn:
                return int(conn.execute(stmt).scalar() or 0)

    # ------------------------------------------------------------------ helpers

    def _ensure_schema(self) -> None:
        if self._schema_ready:
            return
        with self._schema_lock:
            if not self._schema_ready:
                self.migrate()

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except sa_exc.SQLAlchemyError as exc:
            raise translate(exc, url=self._url, doing=doing) from exc


class AsyncAuditStore:
    """`AuditStore` for async code: every call runs in a worker thread (`asyncio.to_thread`)."""

    def __init__(self, store: AuditStore) -> None:
        self.store = store

    @property
    def where(self) -> str:
        return self.store.where

    async def migrate(self, *, target: int | None = None) -> int:
        return await asyncio.to_thread(self.store.migrate, target=target)

    async def record(self, entry: AuditEntry) -> bool:
        return await asyncio.to_thread(self.store.record, entry)

    async def record_many(self, entries: Iterable[AuditEntry]) -> list[bool]:
        return await asyncio.to_thread(self.store.record_many, list(entries))

    async def query(self, **filters: Any) -> list[AuditEntry]:
        """Same keyword filters as `AuditStore.query`."""
        return await asyncio.to_thread(lambda: self.store.query(**filters))

    async def query_records(self, **filters: Any) -> list[AuditRecord]:
        return await asyncio.to_thread(lambda: self.store.query_records(**filters))

    async def get(self, idempotency_key: str) -> AuditEntry | None:
        return await asyncio.to_thread(self.store.get, idempotency_key)

    async def close(self) -> None:
        await asyncio.to_thread(self.store.close)
