"""The systemic guard's audit entries as Prometheus counters."""

from __future__ import annotations

from datetime import UTC, datetime

from workers.metrics_server import audit_families
from workflows.contracts import AuditEntry, EventType


def _entry(kind: EventType, action: str, n: int) -> AuditEntry:
    return AuditEntry(idempotency_key=f"k{n}", timestamp=datetime(2026, 1, 1, tzinfo=UTC), cluster="c", job_id="1",
                      event_type=kind, action=action)


def test_systemic_alerts_releases_and_lemon_changes_are_counted() -> None:
    entries = [_entry(EventType.SYSTEMIC_EVENT, "alert", 1), _entry(EventType.SYSTEMIC_EVENT, "release", 2),
               _entry(EventType.SYSTEMIC_EVENT, "alert", 3), _entry(EventType.LEMON_NODE, "cap", 4)]
    families = {f.name: f for f in audit_families(entries)}
    systemic = {s.labels["what"]: s.value for s in families["jobmedic_systemic_events"].samples if s.name.endswith("_total")}
    assert systemic == {"alert": 2, "release": 1}
    lemons = {s.labels["what"]: s.value for s in families["jobmedic_lemon_nodes"].samples if s.name.endswith("_total")}
    assert lemons == {"cap": 1}
