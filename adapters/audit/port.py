"""The audit trail as activities see it: a small async interface."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from workflows.contracts import AuditEntry


class AuditLog(Protocol):
    """Exactly-once writes and filtered reads of audit entries (`AsyncAuditStore` implements it)."""

    async def record(self, entry: AuditEntry) -> bool:
        """Write `entry` once; False when its idempotency key was already stored."""
        ...

    async def record_many(self, entries: Iterable[AuditEntry]) -> list[bool]:
        """Write several entries; per entry, True when written by this call."""
        ...

    async def query(self, **filters: Any) -> list[AuditEntry]:
        """Entries by cluster, job_id, since, until, event_types, limit, latest; oldest first."""
        ...
