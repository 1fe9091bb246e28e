"""The cluster-wide view is a hint: an audit store that is down or slow never holds up a decision.

The attribution activity reads other jobs' recent advice from the audit store (the
systemic view). With the store down (a real SQLite file in a directory that is gone)
or hanging, the verdict still comes back at once, with no recent failures.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone

import pytest
from temporalio.testing import ActivityEnvironment

import activities.attribution as attribution
from activities.attribution import AttributionActivities
from adapters.audit.store import AuditStore
from workflows.contracts import AuditEntry, EventType, JobEvidence, JobInfo, JobState
from workflows.messages import AttributeInput

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def evidence() -> JobEvidence:
    job = JobInfo(job_id="7", cluster="c1", state=JobState.FAILED, exit_code=1, nodes=["node1"])
    return JobEvidence(job=job, log_lines=["RuntimeError: CUDA error: an illegal memory access was encountered"],
                       collected_at=NOW)


def run(acts: AttributionActivities):
    return ActivityEnvironment().run(acts.attribute, AttributeInput(evidence=evidence(), systemic_window_s=300.0))


async def test_recent_failures_come_from_the_store_when_it_answers(tmp_path) -> None:
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    store.migrate()
    store.record(AuditEntry(idempotency_key="k1", timestamp=NOW - timedelta(seconds=30), cluster="c1", job_id="8",
                            event_type=EventType.ADVICE, category="nccl_timeout", implicated_nodes=["node2"]))
    out = await run(AttributionActivities(audit=store))
    assert [(f.job_id, f.category) for f in out.recent_failures] == [("8", "nccl_timeout")]
    store.close()


async def test_a_store_that_is_down_gives_a_verdict_without_the_view(tmp_path) -> None:
    store = AuditStore(f"sqlite:///{tmp_path / 'gone' / 'audit.db'}")  # the directory does not exist
    out = await run(AttributionActivities(audit=store))
    assert out.verdict.category.value == "cuda_error"
    assert out.recent_failures == []


async def test_a_store_that_hangs_is_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    class Hanging:
        def query(self, **kw):
            time.sleep(3)
            return []

    monkeypatch.setattr(attribution, "RECENT_FAILURES_TIMEOUT_S", 0.2)
    started = time.monotonic()
    out = await run(AttributionActivities(audit=Hanging()))  # type: ignore[arg-type]
    assert time.monotonic() - started < 2.5
    assert out.recent_failures == [] and out.verdict.category.value == "cuda_error"
    await asyncio.sleep(0)
