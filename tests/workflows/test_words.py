"""The words of the workflow are enums whose values are the strings on the wire and in the audit store.

Renaming a value would orphan stored audit rows and the `detail.incident` that
`jobmedic report`, the scorecard and the metrics count by: the checked-in
histories hold what running workflows wrote, and every such word must still be
a member.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from workflows.contracts import ActionKind, AdviceAction, AuditEntry, EventType, GuardAction, IncidentKind

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def recorded_entries() -> list[AuditEntry]:
    """Every audit entry the checked-in histories sent to `record_audit`."""
    entries = []
    for path in HISTORIES:
        for event in json.loads(path.read_text())["events"]:
            scheduled = event.get("activityTaskScheduledEventAttributes")
            if not scheduled or scheduled["activityType"]["name"] != "record_audit":
                continue
            for payload in scheduled["input"]["payloads"]:
                batch = json.loads(base64.b64decode(payload["data"]))
                entries += [AuditEntry.model_validate(e) for e in batch["entries"]]
    return entries


def test_every_recorded_incident_kind_is_a_member() -> None:
    kinds = [
        (e.detail or {}).get("incident") for e in recorded_entries() if e.event_type is EventType.DETECTION
    ]
    assert kinds and all(k in set(IncidentKind) for k in kinds), kinds
    assert {IncidentKind.FAILED, IncidentKind.SLURM_REQUEUE} <= set(kinds)


def test_every_recorded_action_label_is_a_member() -> None:
    labels = {e.action for e in recorded_entries() if e.action is not None}
    known = {*ActionKind, *AdviceAction, *GuardAction}
    assert labels and labels <= known, labels - known
    assert {ActionKind.REQUEUE_HOLD, ActionKind.RELEASE, GuardAction.ALERT, AdviceAction.HOLD} <= labels


def test_the_members_compare_and_hash_as_their_strings() -> None:
    # stored rows come back as plain strings; sets and dicts keyed by members must still find them
    assert "straggler" in frozenset({IncidentKind.STRAGGLER}) and {"release": 1}[ActionKind.RELEASE] == 1
    assert f"{IncidentKind.HANG}:r2" == "hang:r2"
    assert AuditEntry(idempotency_key="k", timestamp="2024-01-01T00:00:00Z", cluster="c", job_id="1",
                      event_type=EventType.ADVICE, action=ActionKind.CANCEL).model_dump(mode="json")["action"] == "cancel"
