"""The audit store's tables as the current code reads and writes them.

The schema itself is created and changed only by `migrations.py`; a test keeps
the two in step. Times are naive UTC with microseconds; lists and dicts are JSON.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlmodel import Field, SQLModel

from adapters.audit.rows import STRING_WIDTHS

TABLE_NAME = "audit_entry"

#: BIGINT on MySQL; SQLite only auto-increments an INTEGER PRIMARY KEY
ID_TYPE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
#: microseconds everywhere (MySQL's plain DATETIME drops them)
TIME_TYPE = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
#: JSON NULL and SQL NULL are the same thing for us
JSON_TYPE = sa.JSON(none_as_null=True)
TEXT_TYPE = sa.Text()

MYSQL_TABLE_OPTIONS: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def _varchar(column: str, *, nullable: bool = True) -> Any:
    return Field(default=None, sa_column=sa.Column(column, sa.String(STRING_WIDTHS[column]), nullable=nullable))


class AuditRow(SQLModel, table=True):
    """One row of `audit_entry`; see `workflows.contracts.AuditEntry` for the meaning of each field."""

    __tablename__ = TABLE_NAME
    __table_args__ = (
        sa.UniqueConstraint("idempotency_key", name="uq_audit_entry_idempotency_key"),
        sa.Index("ix_audit_entry_cluster_job", "cluster", "job_id"),
        sa.Index("ix_audit_entry_timestamp", "timestamp"),
        sa.Index("ix_audit_entry_event_type", "event_type"),
        sa.Index("ix_audit_entry_workflow", "workflow_id", "run_id"),  # migration 2
        MYSQL_TABLE_OPTIONS,
    )

    id: int | None = Field(default=None, sa_column=sa.Column("id", ID_TYPE, primary_key=True, autoincrement=True))
    idempotency_key: str = Field(sa_column=sa.Column("idempotency_key", sa.String(255), nullable=False))
    timestamp: datetime = Field(sa_column=sa.Column("timestamp", TIME_TYPE, nullable=False))
    cluster: str = _varchar("cluster", nullable=False)
    job_id: str = _varchar("job_id", nullable=False)
    submit_time: datetime | None = Field(default=None, sa_column=sa.Column("submit_time", TIME_TYPE, nullable=True))
    attempt: int = Field(default=0, sa_column=sa.Column("attempt", sa.Integer(), nullable=False))
    workflow_id: str = _varchar("workflow_id", nullable=False)
    run_id: str = _varchar("run_id", nullable=False)
    event_type: str = _varchar("event_type", nullable=False)
    pattern_id: str | None = _varchar("pattern_id")
    line: str | None = Field(default=None, sa_column=sa.Column("line", TEXT_TYPE, nullable=True))
    category: str | None = _varchar("category")
    fault_domain: str | None = _varchar("fault_domain")
    implicated_nodes: list | None = Field(
        default=None, sa_column=sa.Column("implicated_nodes", JSON_TYPE, nullable=True)
    )
    action: str | None = _varchar("action")
    mode: str | None = _varchar("mode")
    rule: str | None = _varchar("rule")
    attribution: dict | None = Field(default=None, sa_column=sa.Column("attribution", JSON_TYPE, nullable=True))
    outcome: str | None = Field(default=None, sa_column=sa.Column("outcome", TEXT_TYPE, nullable=True))
    detail: dict | None = Field(default=None, sa_column=sa.Column("detail", JSON_TYPE, nullable=True))
    # migration 2: when the store wrote the row (UTC); NULL-free after the backfill
    recorded_at: datetime | None = Field(default=None, sa_column=sa.Column("recorded_at", TIME_TYPE, nullable=True))


def audit_table() -> sa.Table:
    """The Core `Table` behind `AuditRow`."""
    return AuditRow.__table__  # type: ignore[attr-defined]


WATCH_STATE_TABLE = "watch_state"
#: a job's watch state is JSON of at most `rows.WATCH_STATE_MAX_BYTES`: MEDIUMTEXT on MySQL (TEXT holds 64 KB)
WATCH_DATA_TYPE = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


class WatchStateRow(SQLModel, table=True):
    """One row of `watch_state` (migration 3): what the cluster watch remembers of one job between passes.

    `item` is the job's workflow id, or `~shard-<n>` for a shard's own cluster-wide memory. `slot`
    is the job id's stable hash (`activities.watch_shards.slot_of`); a shard loads the slots it owns.
    """

    __tablename__ = WATCH_STATE_TABLE
    __table_args__ = (
        sa.Index("ix_watch_state_slot", "cluster", "slot"),
        sa.Index("ix_watch_state_updated", "cluster", "updated_at"),
        MYSQL_TABLE_OPTIONS,
    )

    cluster: str = Field(sa_column=sa.Column("cluster", sa.String(64), primary_key=True))
    item: str = Field(sa_column=sa.Column("item", sa.String(255), primary_key=True))
    job_id: str = Field(sa_column=sa.Column("job_id", sa.String(64), nullable=False))
    slot: int = Field(sa_column=sa.Column("slot", sa.Integer(), nullable=False))
    data: str = Field(sa_column=sa.Column("data", WATCH_DATA_TYPE, nullable=False))
    updated_at: datetime = Field(sa_column=sa.Column("updated_at", TIME_TYPE, nullable=False))


def watch_state_table() -> sa.Table:
    """The Core `Table` behind `WatchStateRow`."""
    return WatchStateRow.__table__  # type: ignore[attr-defined]
