"""One source for the opt-in: the policy reads the job's opt-in as the scheduler shows it at the incident.

The recovery workflow is started with the opt-in as it was then (`JobRecoveryInput.opt_in`,
kept for the search attributes); a researcher may change the job's comment afterwards
(`scontrol update job=... Comment=...`). The decision must follow the job, not the
start-time copy. Run on the Temporal dev server with a worker in this process whose
activities stand in for Slurm and attribution: observe mode, so no scheduler action.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from workflows.contracts import (
    AdviceAction,
    Category,
    JobEvidence,
    JobInfo,
    JobKey,
    JobState,
    OptIn,
    OptInResult,
    Verdict,
)
from workflows.job_recovery import JobRecoveryWorkflow, initial_search_attributes
from workflows.messages import (
    ActivityNames,
    AttributeInput,
    AttributeOutput,
    AuditBatch,
    CollectEvidenceInput,
    CollectEvidenceOutput,
    JobObservation,
    JobRecoveryInput,
    JobStatus,
    ObservationReason,
    QueryNames,
    SignalNames,
)
from workflows.policy import Rule
from workflows.systemic_guard import GuardNames, ReportFailureInput

pytestmark = pytest.mark.temporal
SUBMITTED = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def failed_job(key: JobKey, *, max_attempts: int | None) -> JobInfo:
    opt_in = OptIn(environment="prod", max_attempts=max_attempts)
    return JobInfo(
        cluster=key.cluster, job_id=key.job_id, submit_time=key.submit_time, state=JobState.FAILED, exit_code=1,
        nodes=["node1", "node2"], start_time=SUBMITTED, end_time=SUBMITTED + timedelta(minutes=5),
        opt_in=OptInResult(opted_in=True, opt_in=opt_in),
    )


class FakeCluster:
    """Activities under the real names: the job as the scheduler shows it now, a timeout verdict, a sink."""

    def __init__(self, now_max_attempts: int | None) -> None:
        self.now_max_attempts = now_max_attempts
        self.audited: list = []

    @activity.defn(name=ActivityNames.COLLECT_EVIDENCE)
    async def collect_evidence(self, inp: CollectEvidenceInput) -> CollectEvidenceOutput:
        job = failed_job(inp.key, max_attempts=self.now_max_attempts)
        return CollectEvidenceOutput(evidence=JobEvidence(job=job), job_now=job)

    @activity.defn(name=ActivityNames.ATTRIBUTE)
    async def attribute(self, inp: AttributeInput) -> AttributeOutput:
        return AttributeOutput(verdict=Verdict(category=Category.NCCL_TIMEOUT, confidence=0.9), own_hosts=[])

    @activity.defn(name=ActivityNames.RECORD_AUDIT)
    async def record_audit(self, batch: AuditBatch) -> None:
        self.audited += batch.entries

    @activity.defn(name=GuardNames.REPORT_FAILURE)
    async def report_failure(self, inp: ReportFailureInput) -> None:
        raise ApplicationError("no systemic guard in this test", non_retryable=True)


async def advice_after_one_failure(temporal_server, *, at_start: int | None, now: int | None):
    client = await Client.connect(
        temporal_server.address, namespace=temporal_server.namespace, data_converter=pydantic_data_converter
    )
    queue = f"optin-{uuid.uuid4().hex[:8]}"
    key = JobKey(cluster=queue, job_id="7", submit_time=SUBMITTED)
    fake = FakeCluster(now)
    inp = JobRecoveryInput(
        key=key, opt_in=OptIn(environment="prod", max_attempts=at_start), scheduler_queue=queue, may_act=False
    )
    activities = [fake.collect_evidence, fake.attribute, fake.record_audit, fake.report_failure]
    async with Worker(client, task_queue=queue, workflows=[JobRecoveryWorkflow], activities=activities):
        handle = await client.start_workflow(
            JobRecoveryWorkflow.run, inp, id=key.workflow_id + uuid.uuid4().hex[:6], task_queue=queue,
            search_attributes=initial_search_attributes(inp),
        )
        try:
            obs = JobObservation(seq=1, at=SUBMITTED + timedelta(minutes=6), reasons=[ObservationReason.STATE_CHANGE],
                                 job=failed_job(key, max_attempts=now))
            await handle.signal(SignalNames.OBSERVE, obs)
            for _ in range(200):
                status = await handle.query(QueryNames.STATUS, result_type=JobStatus)
                if status.last_advice is not None:
                    return status.last_advice
                await asyncio.sleep(0.1)
            raise AssertionError(f"no advice after 20 s; audited {[e.event_type for e in fake.audited]}")
        finally:
            await handle.terminate("test finished")


async def test_a_budget_set_on_the_job_after_start_is_the_one_the_policy_uses(temporal_server) -> None:
    advice = await advice_after_one_failure(temporal_server, at_start=5, now=1)
    assert (advice.action, advice.rule) == (AdviceAction.STOP, Rule.ATTEMPT_BUDGET)


async def test_a_budget_taken_off_the_job_after_start_no_longer_applies(temporal_server) -> None:
    advice = await advice_after_one_failure(temporal_server, at_start=1, now=None)
    assert advice.action is AdviceAction.RESTART, advice
