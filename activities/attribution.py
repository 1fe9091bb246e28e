"""The attribute activity: the detection engine's verdict, merged with an optional external service."""

from __future__ import annotations

from typing import Protocol

from loguru import logger
from temporalio import activity

from activities.errors import activity_errors
from adapters.errors import AttributionServiceError
from workflows.contracts import JobEvidence, Verdict
from workflows.messages import ActivityNames, AttributeInput


class ExternalAttribution(Protocol):
    async def attribute(self, evidence: JobEvidence, local: Verdict) -> Verdict | None: ...


class AttributionActivities:
    def __init__(self, *, external: ExternalAttribution | None = None) -> None:
        self._external = external

    @activity.defn(name=ActivityNames.ATTRIBUTE)
    async def attribute(self, inp: AttributeInput) -> Verdict:
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
