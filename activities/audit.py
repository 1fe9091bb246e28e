"""The audit activity: every advice and action is written before (and after) it happens."""

from __future__ import annotations

import asyncio
from typing import Protocol

from temporalio import activity

from activities.errors import activity_errors
from workflows.contracts import AuditEntry
from workflows.messages import ActivityNames, AuditBatch


class AuditSink(Protocol):
    def record(self, entry: AuditEntry) -> bool: ...


class AuditActivities:
    def __init__(self, *, store: AuditSink) -> None:
        self._store = store

    @activity.defn(name=ActivityNames.RECORD_AUDIT)
    async def record_audit(self, batch: AuditBatch) -> int:
        """Write the entries exactly once (their idempotency keys make retries harmless); returns how many were new."""
        with activity_errors():
            written = 0
            for entry in batch.entries:
                if await asyncio.to_thread(self._store.record, entry):
                    written += 1
            return written
