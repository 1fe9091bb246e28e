"""The attribute activity: the detection engine's verdict, merged with an optional external service."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Protocol

from loguru import logger
from temporalio import activity

from activities.errors import activity_errors
from activities.faults import injected_delay
from adapters.errors import AttributionServiceError, JobmedicError
from workflows.contracts import AuditEntry, EventType, JobEvidence, Verdict
from workflows.messages import ActivityNames, AttributeInput, AttributeOutput, RecentFailure

RECENT_FAILURES_TIMEOUT_S = 5.0  # the audit store's answer for the cluster-wide view, at most


class ExternalAttribution(Protocol):
    async def attribute(self, evidence: JobEvidence, local: Verdict) -> Verdict | None: ...


class AuditReader(Protocol):
    def query(
        self, *, cluster: str | None = None, job_id: str | None = None, since: datetime | None = None,
        event_types: list[EventType] | None = None, limit: int = 10000,
    ) -> list[AuditEntry]: ...


class AttributionActivities:
    def __init__(
        self,
        *,
        external: ExternalAttribution | None = None,
        audit: AuditReader | None = None,
        delays: dict[str, float] | None = None,
    ) -> None:
        self._external = external
        self._audit = audit
        self._delays = delays or {}

    @activity.defn(name=ActivityNames.ATTRIBUTE)
    async def attribute(self, inp: AttributeInput) -> AttributeOutput:
        """The verdict, and the cluster's other recent attributed failures (for the systemic rule)."""
        await injected_delay(self._delays, ActivityNames.ATTRIBUTE)
        verdict = await self._verdict(inp)
        recent = await self._recent_failures(inp)
        return AttributeOutput(verdict=verdict, recent_failures=recent, own_hosts=self._own_hosts(inp, verdict))

    @staticmethod
    def _own_hosts(inp: AttributeInput, verdict: Verdict) -> list[str]:
        """The hosts the job's own evidence names: the verdict again without the cluster-wide failure counts.

        The local verdict blames a job's node for an unattributed NCCL or hang failure when that node failed
        other jobs recently; in an outage every node has, so that is no evidence of a node-specific cause.
        """
        if not inp.evidence.node_failure_counts or not verdict.implicated.hosts:
            return sorted(set(verdict.implicated.hosts))
        from activities.detection.verdict import attribute as local_attribute

        alone = local_attribute(inp.evidence.model_copy(update={"node_failure_counts": {}}))
        return sorted(set(verdict.implicated.hosts) & set(alone.implicated.hosts))

    async def _recent_failures(self, inp: AttributeInput) -> list[RecentFailure]:
        job = inp.evidence.job
        if self._audit is None or job is None or inp.evidence.collected_at is None:
            return []
        since = inp.evidence.collected_at - timedelta(seconds=inp.systemic_window_s)
        try:
            # the cluster-wide view is a hint: a store that is down or slow must not hold up the decision
            entries = await asyncio.wait_for(asyncio.to_thread(
                self._audit.query, cluster=job.cluster, since=since, event_types=[EventType.ADVICE], limit=2000
            ), timeout=RECENT_FAILURES_TIMEOUT_S)
        except (JobmedicError, TimeoutError) as exc:
            logger.warning("recent failures unavailable ({}); deciding job {} without the cluster-wide view",
                           type(exc).__name__, job.job_id)
            return []
        return [
            RecentFailure(job_id=e.job_id, at=e.timestamp, category=e.category or "", hosts=e.implicated_nodes)
            for e in entries
            if e.job_id != job.job_id and e.category
        ]

    async def _verdict(self, inp: AttributeInput) -> Verdict:
        """Local verdict first; the external one is merged in when it answers.

        The activity's schedule-to-close timeout is the watchdog: a service
        that never answers makes the workflow fail open, never wait forever.
        """
        from activities.detection.verdict import attribute as local_attribute

        with activity_errors():
            local = local_attribute(inp.evidence)
            if self._external is None or not inp.use_external:
                return local
            from adapters.attribution import merge_verdicts

            try:
                external = await self._external.attribute(inp.evidence, local)
            except AttributionServiceError as exc:
                logger.warning("external attribution failed, local verdict stands: {}", exc)
                return local
            return merge_verdicts(local, external) if external is not None else local
