"""The per-cluster systemic guard workflow: one place that sees every job's failure.

Id `jobmedic-systemic-<cluster>`, on the main task queue. Each job's recovery
workflow reports an attributed failure (activity `report_failure`, a
signal-with-start of this workflow) and waits a bounded time for the answer
(signal `systemic-verdict` back to it): hold for systemic event E, or handle
it on its own; with the lemon nodes and the shape of the job's partition
either way. No answer in time: the job is handled on its own (fail open).

Systemic events (`workflows.systemic` is the spec of what counts): the first
classification of a group opens an event, audits one alert and posts it to
the optional webhook; the jobs of the group, and later failures that match
it, are held by their own workflows. The event ends, and each of its jobs is
told to release its hold (signal `systemic-release`), when the cause has
cleared (probed every `systemic_probe_s`), when an operator releases it
(`jobmedic release --event ID`, signal `release-event`), or after
`systemic_hold_max_s`. Each job's workflow also keeps that bound itself, so a
guard that is gone never strands a job.

Lemon nodes are kept here too: every node-specific failure counts against its
nodes; healthy runtime on a suspect node (probed with the events) decays it.

The guard ends after `IDLE_EXIT` without failures, events or suspects; the
next report starts it again.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from pydantic import Field
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from workflows.contracts import ActionKind, AuditEntry, Contract, EventType, GuardAction, PolicyConfig
    from workflows.history import as_utc
    from workflows.messages import ActivityNames, AuditBatch
    from workflows.systemic import (
        ClusterContext,
        FailureReport,
        Finding,
        ProbeResult,
        SystemicKind,
        cause_cleared,
        classify,
        healthy_seconds,
        job_partition_nodes,
        lemon_caps,
        matches,
        needs_settling,
        node_suspicion,
        recent,
    )

IDLE_EXIT = timedelta(hours=1)
CONTEXT_MAX_AGE = timedelta(seconds=30)
RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10), maximum_attempts=5)
MAX_FAILURES = 2000
MAX_CLOSED_EVENTS = 50


def guard_workflow_id(cluster: str) -> str:
    return f"jobmedic-systemic-{cluster}"


class GuardNames:
    # signals the guard takes
    FAILURE = "failure"
    RELEASE_EVENT = "release-event"
    # signals the job workflows take from it
    VERDICT = "systemic-verdict"
    RELEASE = "systemic-release"
    # query
    EVENTS = "events"
    # activities
    REPORT_FAILURE = "report_failure"  # main queue: signal-with-start of the guard
    CONTEXT = "systemic_context"  # scheduler queue: nodes, domains, watched jobs
    PROBE = "systemic_probe"  # scheduler queue: jobs on some nodes since a moment
    ALERT = "systemic_alert"  # main queue: the webhook


class GuardInput(Contract):
    cluster: str
    scheduler_queue: str
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    carried: "GuardState | None" = None


class ReportFailureInput(Contract):
    """What `report_failure` sends: the guard's id and input (to start it if needed) and the report."""

    guard_id: str
    guard: GuardInput
    report: FailureReport


class GuardAnswer(Contract):
    """The guard's answer to one report (signal `systemic-verdict` to the reporting job's workflow)."""

    incident: int
    event_id: str | None = None  # held for this systemic event
    reason: str = ""
    lemons: list[str] = Field(default_factory=list)  # keep out of the restart, most suspicious first
    drain: list[str] = Field(default_factory=list)  # lemons to drain (lemon_drain), within the caps
    partition_nodes: list[str] = Field(default_factory=list)  # the job's partition (for the placement check)
    unavailable: list[str] = Field(default_factory=list)  # down or drained now


class ReleaseOrder(Contract):
    """Release jobmedic's systemic hold (signal `systemic-release`, or `release` from an operator)."""

    event_id: str | None = None  # None: whatever event holds the job
    reason: str = ""


class SystemicEvent(Contract):
    event_id: str
    kind: SystemicKind
    key: str
    reason: str = ""
    opened_at: datetime
    nodes: list[str] = Field(default_factory=list)
    down_at_open: list[str] = Field(default_factory=list)
    members: dict[str, str] = Field(default_factory=dict)  # workflow id -> job id
    closed_at: datetime | None = None
    close_reason: str = ""
    next_probe_at: datetime | None = None


class PendingReport(Contract):
    report: FailureReport
    answer_by: datetime


class GuardState(Contract):
    failures: list[FailureReport] = Field(default_factory=list)
    pending: list[PendingReport] = Field(default_factory=list)
    events: list[SystemicEvent] = Field(default_factory=list)
    answered: dict[str, str] = Field(default_factory=dict)  # "<workflow id>:<incident>" -> event id or ""
    lemons: list[str] = Field(default_factory=list)
    lemon_declared: list[datetime] = Field(default_factory=list)
    lemon_refused: dict[str, str] = Field(default_factory=dict)  # node -> cap, audited once while it lasts
    healthy_s: dict[str, float] = Field(default_factory=dict)
    next_lemon_probe_at: datetime | None = None
    context: ClusterContext | None = None
    events_opened: int = 0
    last_activity: datetime | None = None


GuardInput.model_rebuild()


@workflow.defn(name="SystemicGuard")
class SystemicGuardWorkflow:
    @workflow.init
    def __init__(self, inp: GuardInput) -> None:
        self._inp = inp
        self._config = inp.policy
        self._state = inp.carried or GuardState()
        self._inbox: list[FailureReport] = []
        self._release_requests: list[ReleaseOrder] = []

    @workflow.signal(name=GuardNames.FAILURE)
    def failure(self, report: FailureReport) -> None:
        self._inbox.append(report)

    @workflow.signal(name=GuardNames.RELEASE_EVENT)
    def release_event(self, order: ReleaseOrder) -> None:
        self._release_requests.append(order)

    @workflow.query(name=GuardNames.EVENTS)
    def events(self) -> list[SystemicEvent]:
        return list(self._state.events)

    @workflow.run
    async def run(self, inp: GuardInput) -> None:
        st = self._state
        st.last_activity = st.last_activity or workflow.now()
        while True:
            wake = self._next_wake()
            try:
                await workflow.wait_condition(
                    lambda: bool(self._inbox or self._release_requests), timeout=max(timedelta(seconds=0.1), wake)
                )
            except asyncio.TimeoutError:
                pass
            now = workflow.now()
            if self._inbox:
                st.last_activity = now
                await self._take_reports(now)
            await self._answer_pending(workflow.now())
            await self._operator_releases()
            await self._probe_events(workflow.now())
            await self._probe_lemons(workflow.now())
            self._prune(workflow.now())
            if self._idle(workflow.now()):
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self._inbox and not self._release_requests:
                    return
            if workflow.info().is_continue_as_new_suggested() and not self._inbox and not self._release_requests:
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(inp.model_copy(update={"carried": st}))

    # ------------------------------------------------------------------ reports and answers

    async def _take_reports(self, now: datetime) -> None:
        st = self._state
        reports, self._inbox = self._inbox, []
        await self._refresh_context(now)
        ctx = st.context or ClusterContext()
        for report in reports:
            once = f"{report.workflow_id}:{report.incident}"
            if once in st.answered:  # a retried report_failure: answer the same again
                await self._answer(report, st.answered[once] or None, "")
                continue
            report = report.model_copy(update={"at": now})
            st.failures.append(report)
            self._note_lemon_failure(report)
            event = self._open_event_matching(report, ctx)
            if event is not None:
                await self._join(event, report)
                continue
            others = recent(st.failures, now=now, window_s=self._config.systemic_window_s)
            if needs_settling(report, [o for o in others if o.workflow_id != report.workflow_id], ctx):
                st.pending.append(
                    PendingReport(report=report, answer_by=now + timedelta(seconds=self._config.systemic_settle_s))
                )
            else:
                await self._answer(report, None, "")
        await self._classify(now)

    async def _answer_pending(self, now: datetime) -> None:
        await self._classify(now)
        due = [p for p in self._state.pending if as_utc(p.answer_by) <= as_utc(now)]
        for p in due:
            self._state.pending.remove(p)
            await self._answer(p.report, None, "")

    async def _classify(self, now: datetime) -> None:
        """Open an event for each new systemic group; hold its pending jobs."""
        st = self._state
        if not st.pending:
            return
        window = recent(st.failures, now=now, window_s=self._config.systemic_window_s)
        ctx = st.context or ClusterContext()
        for finding in classify(window, ctx, self._config):
            pending_ids = {p.report.workflow_id for p in st.pending}
            if not pending_ids & set(finding.workflow_ids):
                continue  # the group was answered already (its jobs were handled on their own)
            event = self._open_event(finding) or await self._new_event(finding, now)
            for p in [p for p in st.pending if p.report.workflow_id in finding.workflow_ids]:
                st.pending.remove(p)
                await self._join(event, p.report)

    def _open_event(self, finding: Finding) -> SystemicEvent | None:
        return next(
            (e for e in self._state.events if e.closed_at is None and e.kind is finding.kind and e.key == finding.key),
            None,
        )

    def _open_event_matching(self, report: FailureReport, ctx: ClusterContext) -> SystemicEvent | None:
        return next(
            (e for e in self._state.events if e.closed_at is None and matches(e.kind, e.key, report, ctx)), None
        )

    async def _new_event(self, finding: Finding, now: datetime) -> SystemicEvent:
        st = self._state
        st.events_opened += 1
        ctx = st.context or ClusterContext()
        event = SystemicEvent(
            event_id=f"{self._inp.cluster}-{now:%Y%m%dT%H%M%S}-{st.events_opened}",
            kind=finding.kind,
            key=finding.key,
            reason=finding.reason,
            opened_at=now,
            nodes=finding.nodes,
            down_at_open=sorted(set(finding.nodes) & set(ctx.unavailable)),
            next_probe_at=now + timedelta(seconds=self._config.systemic_probe_s),
        )
        st.events.append(event)
        workflow.logger.warning("systemic event %s: %s", event.event_id, event.reason)
        await self._audit(
            EventType.SYSTEMIC_EVENT,
            job_id=self._first_job(finding.workflow_ids),
            key=f"{event.event_id}:opened",
            action=GuardAction.ALERT,
            outcome=f"systemic event {event.event_id} ({event.kind.value}): {event.reason}; holding the affected "
            f"jobs, released when the cause clears, by `jobmedic release --event {event.event_id}`, or after "
            f"{self._config.systemic_hold_max_s:g} s",
            nodes=event.nodes,
            detail={"event_id": event.event_id, "kind": event.kind.value, "key": event.key,
                    "jobs": finding.workflow_ids, "nodes": event.nodes},
        )
        if self._config.systemic_webhook_url:
            await self._alert(event, "opened", finding.workflow_ids)
        return event

    async def _join(self, event: SystemicEvent, report: FailureReport) -> None:
        event.members[report.workflow_id] = report.job_id
        await self._answer(report, event.event_id, event.reason)

    async def _answer(self, report: FailureReport, event_id: str | None, reason: str) -> None:
        st = self._state
        st.answered[f"{report.workflow_id}:{report.incident}"] = event_id or ""
        ctx = st.context or ClusterContext()
        drain = [n for n in st.lemons if self._config.lemon_drain]
        answer = GuardAnswer(
            incident=report.incident,
            event_id=event_id,
            reason=reason,
            lemons=list(st.lemons),
            drain=drain,
            partition_nodes=job_partition_nodes(report.nodes, ctx),
            unavailable=list(ctx.unavailable),
        )
        await self._signal(report.workflow_id, GuardNames.VERDICT, answer)

    # ------------------------------------------------------------------ releasing

    async def _operator_releases(self) -> None:
        orders, self._release_requests = self._release_requests, []
        for order in orders:
            for event in self._state.events:
                if event.closed_at is None and event.event_id == order.event_id:
                    await self._close(event, order.reason or "released by an operator")

    async def _probe_events(self, now: datetime) -> None:
        for event in [e for e in self._state.events if e.closed_at is None]:
            held_for = (as_utc(now) - as_utc(event.opened_at)).total_seconds()
            if held_for >= self._config.systemic_hold_max_s:
                await self._close(
                    event, f"held for systemic_hold_max_s ({self._config.systemic_hold_max_s:g} s); released to "
                    "normal scheduling although the cause was not seen to clear"
                )
                continue
            if event.next_probe_at is not None and as_utc(now) < as_utc(event.next_probe_at):
                continue
            event.next_probe_at = now + timedelta(seconds=self._config.systemic_probe_s)
            probe = await self._probe(event.nodes, since=event.opened_at)
            if probe is None:
                continue
            why = cause_cleared(
                nodes=event.nodes, opened_at=event.opened_at, down_at_open=event.down_at_open,
                held_job_ids=event.members.values(), probe=probe, now=workflow.now(),
                clear_runtime_s=self._config.systemic_clear_runtime_s,
            )
            if why is not None:
                await self._close(event, f"the cause cleared: {why}")

    async def _close(self, event: SystemicEvent, why: str) -> None:
        event.closed_at = workflow.now()
        event.close_reason = why
        await self._audit(
            EventType.SYSTEMIC_EVENT,
            job_id=self._first_job(sorted(event.members)),
            key=f"{event.event_id}:released",
            action=ActionKind.RELEASE,
            outcome=f"systemic event {event.event_id} ended: {why}; releasing {len(event.members)} held job(s)",
            nodes=event.nodes,
            detail={"event_id": event.event_id, "jobs": sorted(event.members.values())},
        )
        for wid in sorted(event.members):
            await self._signal(wid, GuardNames.RELEASE, ReleaseOrder(event_id=event.event_id, reason=why))
        if self._config.systemic_webhook_url:
            await self._alert(event, "released", sorted(event.members))

    # ------------------------------------------------------------------ lemon nodes

    def _note_lemon_failure(self, report: FailureReport) -> None:
        for host in report.hosts:
            self._state.healthy_s[host] = 0.0  # a new failure: healthy runtime counts from here

    async def _probe_lemons(self, now: datetime) -> None:
        st = self._state
        window = recent(st.failures, now=now, window_s=self._config.lemon_window_s)
        suspects = sorted({h for f in window for h in f.hosts})
        if suspects and (st.next_lemon_probe_at is None or as_utc(now) >= as_utc(st.next_lemon_probe_at)):
            st.next_lemon_probe_at = now + timedelta(seconds=self._config.systemic_probe_s)
            last: dict[str, datetime] = {}
            for f in window:
                for h in f.hosts:
                    last[h] = max(last.get(h, f.at), f.at) if f.at else last.get(h, now)
            since = min(last.values())
            probe = await self._probe(suspects, since=since)
            if probe is not None:
                failed = {f.job_id for f in window}
                for node in suspects:
                    st.healthy_s[node] = healthy_seconds(node, since=last[node], runs=probe.runs, now=workflow.now(),
                                                         failed_job_ids=failed)
        suspicion = node_suspicion(window, now=now, config=self._config, healthy_s=st.healthy_s)
        declared = [d for d in st.lemon_declared
                    if (as_utc(now) - as_utc(d)).total_seconds() <= self._config.lemon_window_s]
        ctx = st.context or ClusterContext()
        caps = lemon_caps(suspicion, current=st.lemons, declared_in_window=len(declared),
                          cluster_size=len(ctx.nodes), config=self._config)
        for node in caps.lemons:
            if node not in st.lemons:
                declared.append(now)
                await self._lemon_audit(node, GuardAction.LEMON, f"node {node} implicated in failures of "
                                        f"{suspicion[node]:g} jobs within {self._config.lemon_window_s:g} s: kept out "
                                        "of every jobmedic restart" + (" and drained" if self._config.lemon_drain else ""))
        for node in st.lemons:
            if node not in caps.lemons:
                await self._lemon_audit(node, GuardAction.CLEARED, f"node {node} is no longer a lemon "
                                        f"(suspicion {suspicion.get(node, 0):g}, healthy runtime "
                                        f"{st.healthy_s.get(node, 0):g} s)")
        for node, cap in caps.refused.items():
            if st.lemon_refused.get(node) != cap:
                await self._lemon_audit(node, GuardAction.CAP, f"node {node} would be a lemon, but {cap}; not excluded")
        st.lemon_refused = dict(caps.refused)
        st.lemons = caps.lemons
        st.lemon_declared = declared

    async def _lemon_audit(self, node: str, action: GuardAction, outcome: str) -> None:
        await self._audit(
            EventType.LEMON_NODE, job_id=self._lemon_job(node), key=f"lemon:{node}:{action}:{workflow.now():%Y%m%dT%H%M%S}",
            action=action, outcome=outcome, nodes=[node], detail={"node": node},
        )

    def _lemon_job(self, node: str) -> str:
        for f in reversed(self._state.failures):
            if node in f.hosts:
                return f.job_id
        return ""

    # ------------------------------------------------------------------ activities and signals

    async def _refresh_context(self, now: datetime) -> None:
        st = self._state
        if st.context is not None and st.context.read_at is not None and (
            as_utc(now) - as_utc(st.context.read_at) < CONTEXT_MAX_AGE
        ):
            return
        try:
            ctx = await workflow.execute_activity(
                GuardNames.CONTEXT, self._config, result_type=ClusterContext, task_queue=self._inp.scheduler_queue,
                start_to_close_timeout=timedelta(seconds=15), schedule_to_close_timeout=timedelta(seconds=20),
                retry_policy=RETRY,
            )
        except ActivityError as exc:
            workflow.logger.warning("cluster context unavailable, keeping the last one: %s", exc)
            return
        ctx.read_at = now
        st.context = ctx

    async def _probe(self, nodes: list[str], *, since: datetime) -> ProbeResult | None:
        try:
            return await workflow.execute_activity(
                GuardNames.PROBE, ProbeInput(nodes=nodes, since=since), result_type=ProbeResult,
                task_queue=self._inp.scheduler_queue, start_to_close_timeout=timedelta(seconds=15),
                schedule_to_close_timeout=timedelta(seconds=30), retry_policy=RETRY,
            )
        except ActivityError as exc:
            workflow.logger.warning("probe failed: %s", exc)
            return None

    async def _alert(self, event: SystemicEvent, what: str, jobs: list[str]) -> None:
        payload = AlertInput(
            url=self._config.systemic_webhook_url or "",
            timeout_s=self._config.systemic_webhook_timeout_s,
            body={
                "source": "jobmedic", "cluster": self._inp.cluster, "status": "firing" if what == "opened" else "resolved",
                "event_id": event.event_id, "kind": event.kind.value, "key": event.key, "reason": event.reason,
                "nodes": event.nodes, "jobs": jobs, "opened_at": event.opened_at.isoformat(),
                "closed_at": event.closed_at.isoformat() if event.closed_at else None,
                "close_reason": event.close_reason or None,
                "text": f"jobmedic: systemic event {event.event_id} {what} on {self._inp.cluster}: "
                        f"{event.close_reason or event.reason}",
            },
            idempotency_key=f"{event.event_id}:{what}",
        )
        try:
            await workflow.execute_activity(
                GuardNames.ALERT, payload, start_to_close_timeout=timedelta(seconds=payload.timeout_s + 5),
                schedule_to_close_timeout=timedelta(seconds=payload.timeout_s * 3 + 15), retry_policy=RETRY,
            )
        except ActivityError as exc:  # the alert is best effort: the audit entry stands
            workflow.logger.warning("systemic webhook failed: %s", exc)

    async def _signal(self, workflow_id: str, name: str, arg: Contract) -> None:
        try:
            await workflow.get_external_workflow_handle(workflow_id).signal(name, arg)
        except Exception as exc:  # noqa: BLE001 - a job workflow that ended has nothing left to hold
            workflow.logger.info("signal %s to %s not delivered: %s", name, workflow_id, exc)

    async def _audit(self, event: EventType, *, job_id: str, key: str, action: GuardAction | ActionKind,
                     outcome: str, nodes: list[str], detail: dict) -> None:
        entry = AuditEntry(
            idempotency_key=f"{workflow.info().workflow_id}:{key}", timestamp=workflow.now(),
            cluster=self._inp.cluster, job_id=job_id, workflow_id=workflow.info().workflow_id,
            run_id=workflow.info().run_id, event_type=event, action=action, outcome=outcome[:2000],
            implicated_nodes=nodes[:50], detail=detail,
        )
        try:
            await workflow.execute_activity(
                ActivityNames.RECORD_AUDIT, AuditBatch(entries=[entry]), start_to_close_timeout=timedelta(seconds=30),
                schedule_to_close_timeout=timedelta(seconds=120), retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=5)),
            )
        except ActivityError as exc:  # never hold up the guard for the store
            workflow.logger.warning("audit of %s failed: %s", key, exc)

    # ------------------------------------------------------------------ bookkeeping

    def _first_job(self, workflow_ids: list[str]) -> str:
        for f in self._state.failures:
            if f.workflow_id in workflow_ids:
                return f.job_id
        return ""

    def _next_wake(self) -> timedelta:
        now = as_utc(workflow.now())
        moments = [as_utc(p.answer_by) for p in self._state.pending]
        for e in self._state.events:
            if e.closed_at is None:
                moments.append(as_utc(e.next_probe_at) if e.next_probe_at else now)
                moments.append(as_utc(e.opened_at) + timedelta(seconds=self._config.systemic_hold_max_s))
        if self._state.next_lemon_probe_at is not None and any(f.hosts for f in self._state.failures):
            moments.append(as_utc(self._state.next_lemon_probe_at))
        if not moments:
            return IDLE_EXIT
        return max(timedelta(seconds=0.1), min(moments) - now)

    def _prune(self, now: datetime) -> None:
        st = self._state
        keep_s = max(self._config.systemic_window_s, self._config.lemon_window_s)
        st.failures = recent(st.failures, now=now, window_s=keep_s)[-MAX_FAILURES:]
        closed = [e for e in st.events if e.closed_at is not None]
        if len(closed) > MAX_CLOSED_EVENTS:
            drop = {e.event_id for e in closed[: len(closed) - MAX_CLOSED_EVENTS]}
            st.events = [e for e in st.events if e.event_id not in drop]
        live = {f"{f.workflow_id}:{f.incident}" for f in st.failures}
        st.answered = {k: v for k, v in st.answered.items() if k in live}

    def _idle(self, now: datetime) -> bool:
        st = self._state
        if st.pending or st.failures or st.lemons or any(e.closed_at is None for e in st.events):
            return False
        return as_utc(now) - as_utc(st.last_activity or now) >= IDLE_EXIT


class ProbeInput(Contract):
    nodes: list[str] = Field(default_factory=list)
    since: datetime


class AlertInput(Contract):
    url: str
    timeout_s: float = 5.0
    body: dict = Field(default_factory=dict)
    idempotency_key: str = ""
