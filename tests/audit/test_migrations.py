"""Schema migrations: upgrade from a v1 database with data, concurrent migrators, newer schemas."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from adapters.audit import LATEST_VERSION, AuditStore, AuditStoreError
from adapters.audit.migrations import MIGRATIONS
from adapters.audit.tables import audit_table
from workflows.contracts import AuditEntry, EventType

Make = Callable[..., AuditEntry]

# what a jobmedic of schema version 1 wrote (no recorded_at column yet)
V1_INSERT = sa.text(
    "INSERT INTO audit_entry (idempotency_key, timestamp, cluster, job_id, submit_time, attempt, workflow_id, "
    "run_id, event_type, pattern_id, line, category, fault_domain, implicated_nodes, action, mode, rule, "
    "attribution, outcome, detail) VALUES (:key, :ts, 'lab', :job, NULL, 1, 'wf', 'run', :event, NULL, :line, "
    "'nccl_error', 'network', :nodes, 'restart_exclude', 'observe', 'hw', NULL, NULL, :detail)"
)


def _versions(url: str) -> list[tuple[int, str]]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT version, name FROM schema_version ORDER BY version")).all()
    engine.dispose()
    return [tuple(r) for r in rows]


def test_migrations_are_numbered_one_by_one() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert LATEST_VERSION == MIGRATIONS[-1].version


def test_fresh_database_is_brought_to_the_latest_version(store_url: str) -> None:
    store = AuditStore(store_url)
    assert store.schema_version() == 0
    assert store.migrate() == LATEST_VERSION
    assert store.migrate() == LATEST_VERSION  # nothing left to do
    assert store.schema_version() == LATEST_VERSION
    assert [v for v, _ in _versions(store_url)] == list(range(1, LATEST_VERSION + 1))
    store.close()


def test_migrated_schema_matches_the_table_the_code_uses(store_url: str) -> None:
    AuditStore(store_url).migrate()
    engine = sa.create_engine(store_url)
    inspector = sa.inspect(engine)
    columns = {c["name"]: c for c in inspector.get_columns("audit_entry")}
    model = audit_table()
    assert set(columns) == {c.name for c in model.columns}
    for column in model.columns:
        assert columns[column.name]["nullable"] == column.nullable, column.name
    indexes = {ix["name"]: ix for ix in inspector.get_indexes("audit_entry")}
    uniques = {uc["name"] for uc in inspector.get_unique_constraints("audit_entry")}
    for index in model.indexes:
        assert indexes[index.name]["column_names"] == [c.name for c in index.columns], index.name
    assert "uq_audit_entry_idempotency_key" in uniques | set(indexes)
    engine.dispose()


def test_upgrade_from_v1_keeps_the_data_and_backfills(store_url: str) -> None:
    old = AuditStore(store_url)
    assert old.migrate(target=1) == 1
    old.close()
    engine = sa.create_engine(store_url)
    stamps = [datetime(2026, 3, 1, 10, 0, s, 250000 + s) for s in range(3)]
    with engine.begin() as conn:
        for n, ts in enumerate(stamps):
            conn.execute(V1_INSERT, {
                "key": f"v1-{n}", "ts": ts, "job": f"7{n}", "event": "detection", "line": f"Xid 79 on node{n} ✓",
                "nodes": f'["node{n}"]', "detail": json.dumps({"from": "v1", "n": n}),
            })
    engine.dispose()

    store = AuditStore(store_url)
    assert store.migrate() == LATEST_VERSION
    records = store.query_records()
    assert [r.entry.idempotency_key for r in records] == ["v1-0", "v1-1", "v1-2"]
    assert [r.entry.timestamp for r in records] == [ts.replace(tzinfo=UTC) for ts in stamps]
    assert [r.recorded_at for r in records] == [ts.replace(tzinfo=UTC) for ts in stamps]  # backfilled
    assert records[1].entry.implicated_nodes == ["node1"]
    assert records[1].entry.detail == {"from": "v1", "n": 1}
    assert records[1].entry.line == "Xid 79 on node1 ✓"
    # old keys still guard against duplicates; new entries go in beside the old ones
    assert store.record(records[0].entry) is False
    assert store.record(records[0].entry.model_copy(update={"idempotency_key": "v2-0"})) is True
    assert len(store.query()) == 4
    indexes = {ix["name"] for ix in sa.inspect(store._engine).get_indexes("audit_entry")}
    assert "ix_audit_entry_workflow" in indexes
    store.close()


def test_migration_two_reruns_cleanly_after_a_partial_apply(store_url: str) -> None:
    """MySQL commits DDL at once: a crash after the ALTER but before the version row must not wedge the store."""
    store = AuditStore(store_url)
    store.migrate(target=1)
    engine = sa.create_engine(store_url)
    with engine.begin() as conn:
        MIGRATIONS[1].apply(conn)  # applied, but never recorded in schema_version
    engine.dispose()
    assert store.migrate() == LATEST_VERSION
    assert [v for v, _ in _versions(store_url)] == list(range(1, LATEST_VERSION + 1))
    store.close()


def test_threads_migrating_at_once_apply_each_migration_once(store_url: str) -> None:
    stores = [AuditStore(store_url) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    versions: list[int] = []
    errors: list[BaseException] = []

    def run(store: AuditStore) -> None:
        barrier.wait()
        try:
            versions.append(store.migrate())
        except BaseException as exc:  # collected and asserted below; a thread cannot raise into the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert versions == [LATEST_VERSION] * len(stores)
    assert [v for v, _ in _versions(store_url)] == list(range(1, LATEST_VERSION + 1))
    for s in stores:
        s.close()


MIGRATE_SCRIPT = """
import sys, time
from adapters.audit import AuditStore
url, start = sys.argv[1], float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))
print(AuditStore(url).migrate())
"""


def test_processes_starting_at_once_migrate_once(store_url: str) -> None:
    start = time.time() + 3.0  # past the interpreters' start-up, so that the migrations overlap
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MIGRATE_SCRIPT, store_url, str(start)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    assert [out.strip() for out, _ in outputs] == [str(LATEST_VERSION)] * 3
    assert [v for v, _ in _versions(store_url)] == list(range(1, LATEST_VERSION + 1))
    applied = "".join(err for _, err in outputs)
    for migration in MIGRATIONS:  # each migration was applied by exactly one of them
        assert applied.count(f"applying migration {migration.version} ") == 1, applied


def test_a_schema_newer_than_the_code_is_refused(store_url: str, make_entry: Make) -> None:
    AuditStore(store_url).migrate()
    engine = sa.create_engine(store_url)
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO schema_version (version, name, applied_at) VALUES (:v, 'from the future', :at)"),
            {"v": LATEST_VERSION + 1, "at": datetime(2030, 1, 1)},
        )
    engine.dispose()
    store = AuditStore(store_url)
    with pytest.raises(AuditStoreError, match="upgrade jobmedic") as caught:
        store.record(make_entry(event_type=EventType.ADVICE))
    assert caught.value.retryable is False
    store.close()


def test_stores_opening_a_new_sqlite_file_at_once_all_succeed(tmp_path) -> None:
    """The switch to WAL ignores SQLite's busy timeout; racing openers must still all get through."""
    for round_ in range(30):
        url = f"sqlite:///{tmp_path / str(round_) / 'audit.db'}"
        stores = [AuditStore(url) for _ in range(8)]
        barrier = threading.Barrier(len(stores))
        errors: list[BaseException] = []

        def run(
            store: AuditStore, barrier: threading.Barrier = barrier, errors: list[BaseException] = errors
        ) -> None:
            barrier.wait()
            try:
                store.migrate()
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(s,)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert errors == []
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        engine.dispose()
        for s in stores:
            s.close()
