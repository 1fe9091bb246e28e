"""The audit store, built from settings."""

from __future__ import annotations

from adapters.audit.store import AsyncAuditStore, AuditStore
from workers.settings import Settings


def build_audit_store(settings: Settings) -> AuditStore:
    """The store named by `settings.audit_url` (SQLite under `data_dir` unless audit.url is set).

    The schema is migrated on first use; call `migrate()` to do it up front.
    """
    return AuditStore(settings.audit_url)


def build_async_audit_store(settings: Settings) -> AsyncAuditStore:
    """`build_audit_store` for async callers (activities, the worker)."""
    return AsyncAuditStore(build_audit_store(settings))
