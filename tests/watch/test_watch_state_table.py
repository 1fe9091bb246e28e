"""The watch-state table (migration 3): per-job rows, loaded by shard, upserted, deleted, pruned."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

from pathlib import Path

import pytest
import sqlalchemy as sa

from adapters.audit import AuditStore
from adapters.audit.rows import WATCH_STATE_MAX_BYTES, shard_item, shard_of, watch_slot, watch_state_row
from adapters.audit.tables import watch_state_table

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def row(job_id: str, data: str = "{}", *, cluster: str = "lab", at: datetime = T0) -> dict:
    return watch_state_row(cluster=cluster, item=f"wf-{job_id}", job_id=job_id, slot=watch_slot(job_id),
                           data=data, updated_at=at)


def test_migrated_table_matches_the_table_the_code_uses(state_url: str) -> None:
    AuditStore(state_url).migrate()
    engine = sa.create_engine(state_url)
    inspector = sa.inspect(engine)
    columns = {c["name"]: c for c in inspector.get_columns("watch_state")}
    model = watch_state_table()
    assert set(columns) == {c.name for c in model.columns}
    for column in model.columns:
        assert columns[column.name]["nullable"] == column.nullable, column.name
    indexes = {ix["name"]: ix["column_names"] for ix in inspector.get_indexes("watch_state")}
    for index in model.indexes:
        assert indexes[index.name] == [c.name for c in index.columns]
    assert inspector.get_pk_constraint("watch_state")["constrained_columns"] == ["cluster", "item"]
    engine.dispose()


def test_each_shard_loads_exactly_its_own_jobs_and_a_resharded_watch_finds_every_row(state_url: str) -> None:
    store = AuditStore(state_url)
    jobs = [str(1000 + i) for i in range(200)]
    store.save_watch_state([row(j, f'{{"job": "{j}"}}') for j in jobs])
    for shards in (1, 3, 4):
        seen: list[str] = []
        for shard in range(shards):
            loaded = store.load_watch_state("lab", shard=shard, shards=shards)
            assert all(shard_of(item.removeprefix("wf-"), shards) == shard for item in loaded)
            seen.extend(loaded)
        assert sorted(seen) == sorted(f"wf-{j}" for j in jobs)  # each job once, whatever the shard count
    assert store.load_watch_state("other", shard=0, shards=1) == {}
    store.close()


def test_a_save_replaces_the_row_and_delete_and_prune_remove_them(state_url: str) -> None:
    store = AuditStore(state_url)
    store.save_watch_state([row("1", '{"v": 1}'), row("2", '{"v": 1}', at=T0 - timedelta(days=3))])
    store.save_watch_state([row("1", '{"v": 2}')])
    assert store.load_watch_state("lab")["wf-1"] == '{"v": 2}'
    assert store.watch_state_rows("lab") == 2
    assert store.prune_watch_state("lab", before=T0 - timedelta(days=1)) == 1
    assert set(store.load_watch_state("lab")) == {"wf-1"}
    assert store.delete_watch_state("lab", ["wf-1", "wf-1", "wf-nope"]) == 1
    assert store.watch_state_rows() == 0
    store.close()


def test_a_shard_row_is_loaded_by_its_own_shard_only(state_url: str) -> None:
    store = AuditStore(state_url)
    store.save_watch_state([
        watch_state_row(cluster="lab", item=shard_item(s), job_id="", slot=s, data=f'{{"s": {s}}}', updated_at=T0)
        for s in range(6)
    ])
    # shard 1 of 4 owns slots 1, 5, 9, ...: of the shard rows only its own (5 is a shard that no longer exists)
    assert store.load_watch_state("lab", shard=1, shards=4) == {shard_item(1): '{"s": 1}'}
    store.close()


def test_rows_are_bounded() -> None:
    with pytest.raises(ValueError, match="more than"):
        watch_state_row(cluster="lab", item="wf-1", job_id="1", slot=1, data="x" * (WATCH_STATE_MAX_BYTES + 1),
                        updated_at=T0)


def test_the_slot_is_a_stable_hash() -> None:
    # the same in every process (Python's own str hash is salted per process): rows must not move shards
    ids = ["1", "282_7", "4000000"]
    code = f"from adapters.audit.rows import watch_slot; print([watch_slot(j) for j in {ids!r}])"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": "12345"}, cwd=Path(__file__).resolve().parents[2])
    assert other.stdout.strip() == str([watch_slot(j) for j in ids])
    counts = [0] * 4
    for i in range(4000):
        counts[shard_of(str(i), 4)] += 1
    assert min(counts) > 850  # roughly even over shards
