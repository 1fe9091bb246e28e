"""Small stand-ins the watch tests share (the watch itself is always the real one)."""

from __future__ import annotations

from workflows.contracts import AuditEntry


class RecordingAudit:
    """The audit sink, keeping what the watch recorded so a test can read it back."""

    def __init__(self) -> None:
        self.entries: list[AuditEntry] = []

    def record(self, entry: AuditEntry) -> bool:
        self.entries.append(entry)
        return True
