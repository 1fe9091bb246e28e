"""The audit trail store: SQLite (embedded default) or MySQL/MariaDB through PyMySQL.

Built from settings by `workers.factories.build_audit_store(settings)`; async code uses
`AsyncAuditStore` (every call runs in a thread).
"""

from adapters.audit.errors import AuditStoreRejected, AuditStoreUnavailable
from adapters.audit.migrations import LATEST_VERSION
from adapters.audit.port import AuditLog
from adapters.audit.store import DEFAULT_LIMIT, AsyncAuditStore, AuditRecord, AuditStore
from adapters.errors import AuditStoreError

__all__ = [
    "DEFAULT_LIMIT",
    "LATEST_VERSION",
    "AsyncAuditStore",
    "AuditLog",
    "AuditRecord",
    "AuditStore",
    "AuditStoreError",
    "AuditStoreRejected",
    "AuditStoreUnavailable",
]
