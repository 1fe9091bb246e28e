"""The per-job recovery workflow: detect -> attribute -> decide -> record -> isolate -> restart or stop.

One workflow per opted-in job, id `JobKey.workflow_id`. The cluster watch
signals it (`observe`) only when something about the job changed. Activities do
every side effect; the decision is the pure `workflows.policy.decide`. Activity
and decision deadlines are the watchdog: when a decision or an action does not
finish in time, or fails for good, the job is released to normal scheduling
(fail open) and that is audited.

Decide, then act: no scheduler command is issued before the advice is
decided and recorded. A failed job stays as Slurm ended it (state, exit code,
restart count) while jobmedic decides; only a restart touches it, and its
first step is the requeue-hold (for a running job, a hang, that is also what
stops it). A job jobmedic does not restart keeps what Slurm gave it. Slurm
forgets an ended job `MinJobAge` after its end, so the decision deadline must
sit well inside that (`workers.checks.decision_timing` warns when it does not).

Audit entries are durable in the workflow's state the moment they are made
and reach the audit store in the background, in order, exactly once (their
idempotency keys): recovery never waits for the store. A batch the store
refuses for good is sent again after `audit_retry_pause_s`; the workflow ends
only once its entries are in.

Systemic guard (`systemic-guard` patch): each attributed failure is reported
to the cluster's guard (`workflows.systemic_guard`), which answers within
`systemic_settle_s` whether it is part of a systemic event (hold: no retry
spent) and which nodes are lemons; no answer in time, the job is handled on
its own. A systemic hold ends when the guard says the cause cleared, when an
operator releases it (`jobmedic release`), at the latest after
`systemic_hold_max_s` (kept here, so a guard that is gone strands nothing), or
with pause or stop; each release is audited and the job's next start is
watched like a restart.

Versions (`workflow.patched`): histories without `decide-before-act` held a
failed job before the decision and cancelled it on a stop; histories without
`release-own-hold-on-halt` kept jobmedic's hold when recovery was stopped or
paused while idle; histories without `audit-in-background` waited for each
audit write; histories without `straggler-culprit` only audited a straggler,
with no culprit, advice or action; histories without `systemic-guard` counted recent failures from
the audit trail for the systemic rule and had no node limits; histories without `opt-in-from-job`
also gave the policy the attempt budget of the opt-in frozen at workflow start (and the straggler
policy that opt-in when the observed job had none), where now the only source is the job's own
opt-in as the scheduler shows it at the incident; `array-guard`
(only ever asked for a task of a job array) stops the recovery of an array
whose tasks fail the same way (`workflows.array_guard`).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.contracts import (
        ActionKind,
        ActionResult,
        Advice,
        AdviceAction,
        AuditEntry,
        Category,
        EventType,
        IncidentKind,
        JobInfo,
        JobState,
        Mode,
        StragglerFinding,
        Verdict,
    )
    from workflows.array_guard import array_guard
    from workflows.history import JobHistory
    from workflows.straggler_policy import decide_straggler
    from workflows.messages import (
        ACTION_NOT_ALLOWED,
        ActivityNames,
        AttributeInput,
        AttributeOutput,
        AuditBatch,
        CollectEvidenceInput,
        CollectEvidenceOutput,
        JobActionInput,
        JobObservation,
        JobRecoveryInput,
        JobRecoveryState,
        JobStatus,
        ObservationReason,
        Phase,
        QueryNames,
        SignalNames,
        TimelineEvent,
    )
    from workflows.policy import NodeLimits, Rule, SystemicHold, decide, systemic_view
    from workflows.systemic import FailureReport, cause_signature
    from workflows.systemic_guard import (
        GuardAnswer,
        GuardInput,
        GuardNames,
        ReleaseOrder,
        ReportFailureInput,
        guard_workflow_id,
    )

SA_JOB_ID = SearchAttributeKey.for_keyword("JobId")
SA_CLUSTER = SearchAttributeKey.for_keyword("Cluster")
SA_ENVIRONMENT = SearchAttributeKey.for_keyword("Environment")
SA_MODE = SearchAttributeKey.for_keyword("Mode")
SA_PHASE = SearchAttributeKey.for_keyword("Phase")
SA_LAST_CATEGORY = SearchAttributeKey.for_keyword("LastCategory")
SA_ATTEMPTS = SearchAttributeKey.for_int("Attempts")
SA_IMPLICATED = SearchAttributeKey.for_keyword_list("ImplicatedNodes")

SCHEDULER_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10))
AUDIT_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=5))
DECIDE_BEFORE_ACT = "decide-before-act"
RELEASE_OWN_HOLD_ON_HALT = "release-own-hold-on-halt"
AUDIT_IN_BACKGROUND = "audit-in-background"
STRAGGLER_CULPRIT = "straggler-culprit"
FATAL_RUNNING = "fatal-running"  # a fatal line in a running job that stopped progressing is an incident
ARRAY_GUARD = "array-guard"
SYSTEMIC_GUARD = "systemic-guard"
BATCH_MILESTONES = "batch-milestones"  # routine checkpoints wait for the next batch: the incident is what the timeline shows
READMIT_OLDEST = "readmit-oldest"  # a partition too small for every exclusion gives back jobmedic's oldest one
PROGRESS_EARNS_RETRIES = "progress-earns-retries"  # the attempt budget counts attempts that saved no checkpoint
OPT_IN_FROM_JOB = "opt-in-from-job"  # the policies read the opt-in from the job as the scheduler shows it, only
GUARD_ANSWER_MARGIN_S = 10.0  # beyond the guard's settle time, for its reads and the signals
AUDIT_BATCH = 50
MILESTONE_BATCH = 20  # routine milestones sent together, at most
MILESTONE_FLUSH = timedelta(minutes=5)  # a routine milestone waits for its batch this long, at most
TIMELINE_LIMIT = 200
MAX_SA_TEXT = 256  # search attribute values: the server refuses more than 2 KB
MAX_SA_NODES = 50


def initial_search_attributes(inp: JobRecoveryInput) -> TypedSearchAttributes:
    """Search attributes set at start, so the Temporal UI finds a job by id, cluster and phase at once."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(SA_JOB_ID, inp.key.job_id),
            SearchAttributePair(SA_CLUSTER, inp.key.cluster),
            SearchAttributePair(SA_ENVIRONMENT, (inp.environment or inp.opt_in.environment)[:MAX_SA_TEXT]),
            SearchAttributePair(SA_MODE, Mode.ACTION.value if inp.may_act else Mode.OBSERVE.value),
            SearchAttributePair(SA_PHASE, Phase.WATCHING.value),
            SearchAttributePair(SA_ATTEMPTS, 0),
        ]
    )


class _Watchdog(Exception):
    """A decision or an action overran its deadline or failed for good."""

    def __init__(self, stage: str, cause: str) -> None:
        super().__init__(f"{stage}: {cause}")
        self.stage = stage
        self.cause = cause


class _NotAllowed(Exception):
    """The worker's current settings or the job's current opt-in no longer allow acting on the job."""

    def __init__(self, stage: str, cause: str) -> None:
        super().__init__(f"{stage}: {cause}")
        self.stage = stage
        self.cause = cause


class _Halted(Exception):
    """Recovery was paused or stopped by a signal in the middle of an incident."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@workflow.defn(name="JobRecovery")
class JobRecoveryWorkflow:
    @workflow.init
    def __init__(self, inp: JobRecoveryInput) -> None:
        self._inp = inp
        self._queue: list[JobObservation] = []
        if inp.carried_state is not None:
            self._state = inp.carried_state
        else:
            self._state = JobRecoveryState(mode=inp.cluster_mode, may_act=inp.may_act)
        self._history = JobHistory.model_validate(self._state.history or {})
        self._keep_hold_while_paused = False
        self._audit_drainer: asyncio.Task | None = None
        self._checkpointed_attempts: set[int] = set()  # attempts (restart counts) whose first checkpoint was audited
        self._guard_answers: dict[int, GuardAnswer] = {}
        self._guard_event: str | None = None  # the event of the guard's answer to the incident being decided
        self._events_ended: dict[str, str] = {}  # systemic events the guard ended -> why (a release may beat the hold)

    def _paused_while_holding(self) -> bool:
        return self._state.paused and self._state.holding and not self._keep_hold_while_paused

    # ------------------------------------------------------------------ signals and queries

    @workflow.signal(name=SignalNames.OBSERVE)
    def observe(self, obs: JobObservation) -> None:
        # Re-deliveries (a watch resumed from older heartbeat details) are harmless: an observation
        # older than what was seen is dropped in `_handle`, and each incident is handled once.
        self._queue.append(obs)

    @workflow.signal(name=SignalNames.PAUSE)
    def pause(self) -> None:
        self._state.paused = True
        self._note("paused", "recovery paused by signal")

    @workflow.signal(name=SignalNames.RESUME)
    def resume(self) -> None:
        self._state.paused = False
        self._keep_hold_while_paused = False
        self._note("resumed", "recovery resumed by signal")

    @workflow.signal(name=SignalNames.STOP)
    def stop(self) -> None:
        self._state.stopped = True
        self._note("stop_requested", "stop recovering this job (signal)")

    @workflow.signal(name=SignalNames.SET_MODE)
    def set_mode(self, mode: str) -> None:
        try:
            new = Mode(str(mode).strip().lower())
        except ValueError:
            # a typo must not break the workflow (a failing handler fails every replay)
            self._note("mode", f"ignored set-mode {str(mode)[:40]!r}: use 'observe' or 'action'")
            return
        self._state.mode = new
        # action needs the cluster's consent too: it was given at start (`may_act`)
        self._state.may_act = new is Mode.ACTION and self._inp.may_act
        self._note("mode", f"mode set to {new.value} (acting: {self._state.may_act})")

    @workflow.signal(name=GuardNames.VERDICT)
    def systemic_verdict(self, answer: GuardAnswer) -> None:
        self._guard_answers[answer.incident] = answer

    @workflow.signal(name=GuardNames.RELEASE)
    def systemic_release(self, order: ReleaseOrder) -> None:
        if order.event_id:
            self._events_ended[order.event_id] = order.reason or f"systemic event {order.event_id} ended"
        if self._state.systemic_event and order.event_id in {None, self._state.systemic_event}:
            self._state.release_order = order.reason or f"systemic event {self._state.systemic_event} ended"

    @workflow.signal(name=SignalNames.RELEASE)
    def release(self, who: str = "") -> None:
        if self._state.systemic_event:
            self._state.release_order = f"released by an operator{f' ({who[:80]})' if who else ''}"
        else:
            self._note("release", "release asked, but jobmedic holds no systemic hold of this job")

    @workflow.query(name=QueryNames.STATUS)
    def status(self) -> JobStatus:
        job = self._state.last_job
        return JobStatus(
            workflow_id=workflow.info().workflow_id,
            job_id=self._inp.key.job_id,
            cluster=self._inp.key.cluster,
            phase=self._phase_label(),
            paused=self._state.paused,
            stopped=self._state.stopped,
            mode=self._state.mode,
            may_act=self._state.may_act,
            attempts=len(self._history.attempts),
            incidents=self._state.incidents,
            last_category=self._state.last_category,
            implicated_nodes=list(self._state.implicated_nodes),
            excluded_nodes=list(self._history.excluded_nodes),
            last_advice=self._state.last_advice,
            job_state=job.state.value if job else "",
            restarts=job.restarts if job else 0,
            # entries the store has not taken yet: behind (being sent: the store is slow, down or refusing),
            # or batched (routine milestones waiting, by design, for the next batch)
            audit_backlog=len(self._state.audit_backlog) if self._draining() else 0,
            audit_batched=0 if self._draining() else len(self._state.audit_backlog),
            systemic_event=self._state.systemic_event,
        )

    @workflow.query(name=QueryNames.TIMELINE)
    def timeline(self) -> list[TimelineEvent]:
        return list(self._state.timeline)

    # ------------------------------------------------------------------ main loop

    @workflow.run
    async def run(self, inp: JobRecoveryInput) -> JobStatus:
        if self._state.audit_backlog:  # carried over continue-as-new
            self._start_audit_drainer()
        while True:
            await self._wait_for_work()
            if self._state.stopped:
                if self._state.holding and workflow.patched(RELEASE_OWN_HOLD_ON_HALT):
                    await self._give_back(self._state.last_job, "recovery stopped by signal", deadline=workflow.now())
                await self._audit(EventType.STOPPED, outcome="recovery stopped by signal", key_suffix="signal")
                return await self._finish()
            if self._paused_while_holding():
                if workflow.patched(RELEASE_OWN_HOLD_ON_HALT):
                    await self._give_back(self._state.last_job, "recovery paused by signal", deadline=workflow.now())
                # one try per pause (a history from before the patch kept its hold); resume clears it
                self._keep_hold_while_paused = self._state.holding
                continue
            if self._state.release_order is not None and not self._queue:
                await self._end_systemic_hold()
                continue
            obs = self._queue.pop(0)
            self._state.last_seq = max(self._state.last_seq, obs.seq)
            finished = await self._handle(obs)
            if finished:
                return await self._finish()
            if workflow.info().is_continue_as_new_suggested() and not self._queue:
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self._queue:  # an observation that came in meanwhile is handled here first
                    self._state.history = self._history.model_dump(mode="json")
                    workflow.continue_as_new(inp.model_copy(update={"carried_state": self._state}))

    async def _wait_for_work(self) -> None:
        """Until an observation, a stop, a pause while holding, or (systemic hold) a release or its bound."""
        def ready() -> bool:
            return (
                bool(self._queue) or self._state.stopped or self._paused_while_holding()
                or self._state.release_order is not None
            )

        if self._state.systemic_event is None or self._state.held_since is None:
            await workflow.wait_condition(ready)
            return
        bound = self._state.held_since + timedelta(seconds=self._inp.policy.systemic_hold_max_s)
        try:
            await workflow.wait_condition(ready, timeout=max(timedelta(seconds=1), bound - workflow.now()))
        except asyncio.TimeoutError:
            self._state.release_order = (
                f"held for systemic_hold_max_s ({self._inp.policy.systemic_hold_max_s:g} s): released to normal "
                "scheduling"
            )

    async def _end_systemic_hold(self) -> None:
        """Release jobmedic's systemic hold (the cause cleared, an operator, or the bound), audited."""
        why, event = self._state.release_order or "", self._state.systemic_event
        self._state.release_order = None
        self._state.systemic_event = None
        job = self._state.last_job
        if not self._state.holding or job is None:
            self._note("release", f"systemic event {event}: {why}; jobmedic no longer held the job")
            return
        deadline = workflow.now() + timedelta(seconds=self._inp.watchdog.action_deadline_s)
        try:
            # held far longer than the credential's lifetime (cred_expire): Slurm's own wait is already over
            result = await self._scheduler_activity(
                ActivityNames.RELEASE, JobActionInput(key=self._inp.key, start_now=False), ActionResult,
                deadline=deadline, stage=ActionKind.RELEASE,
            )
        except (_Watchdog, _NotAllowed) as failed:
            await self._audit(EventType.WATCHDOG, job=job, outcome=f"systemic event {event}: {why}; releasing the "
                              f"hold failed: {failed}", key_suffix=f"systemic-release-{event}")
            return
        self._state.holding = False
        self._state.awaiting_restart = True
        self._state.expected_restarts = job.restarts
        self._set_phase(Phase.WAITING_RESTART)
        await self._audit(
            EventType.ACTION_CONFIRMED, job=result.job or job, action=ActionKind.RELEASE,
            key_suffix=f"systemic-release-{event}",
            outcome=f"systemic event {event}: {why}; jobmedic's hold released",
            detail={"event_id": event, "changed": result.changed},
        )

    async def _finish(self) -> JobStatus:
        self._set_phase(Phase.DONE)
        if self._state.audit_backlog:  # the trail is complete before the workflow ends
            self._start_audit_drainer()
            await workflow.wait_condition(lambda: not self._state.audit_backlog)
        return self.status()

    async def _handle(self, obs: JobObservation) -> bool:
        """Apply one observation; True when the workflow is done with this job."""
        job = obs.job
        previous = self._state.last_job
        if ObservationReason.GONE in obs.reasons:
            await self._audit(EventType.STOPPED, job=previous, outcome="job left the scheduler", key_suffix="gone")
            return True
        if previous is not None and job.restarts < previous.restarts:
            return False  # older than what this workflow already saw (a re-delivery)
        self._state.last_job = job
        if obs.hits:
            self._state.pending_hits = (self._state.pending_hits + obs.hits)[-100:]
        await self._milestones(obs, previous)

        if job.state is JobState.COMPLETED:
            await self._audit(EventType.COMPLETED, job=job, outcome="training completed", key_suffix=f"r{job.restarts}")
            return True
        if job.state is JobState.CANCELLED and not self._state.awaiting_restart:
            await self._audit(EventType.STOPPED, job=job, outcome="job cancelled", key_suffix=f"r{job.restarts}")
            return True

        incident = self._incident_kind(obs, previous)
        if incident is not None:
            once = f"{incident}:r{job.restarts}"
            if once in self._state.handled:
                return False  # the same incident, observed again
            self._state.handled = (self._state.handled + [once])[-50:]
            stop = await self._recover(obs, incident)
            if stop:
                return True
        elif ObservationReason.STRAGGLER in obs.reasons:
            if workflow.patched(STRAGGLER_CULPRIT):
                return await self._straggler(obs)
            # histories from before the patch: recorded for the operator, never acted on
            await self._audit(
                EventType.DETECTION,
                job=job,
                outcome="straggler: sustained throughput drop against the job's own baseline",
                implicated=obs.straggler_hosts,
                key_suffix=f"straggler-{obs.seq}",
                detail={"incident": IncidentKind.STRAGGLER, "observed_at": _iso(obs.at)},
            )
        return False

    async def _straggler(self, obs: JobObservation) -> bool:
        """A sustained slowdown: audit the finding and the advice; restart without the culprit only when allowed.

        The advice is `workflows.straggler_policy.decide_straggler` (advice only unless the opt-in or the
        cluster's policy enables straggler action); acting needs action mode besides, as every action does.
        """
        job = obs.job
        once = f"straggler:r{job.restarts}:{obs.seq}"
        if once in self._state.handled:
            return False  # the same episode, observed again
        self._state.handled = (self._state.handled + [once])[-50:]
        self._state.incidents += 1
        finding = obs.straggler or StragglerFinding(explanation="no culprit finding came with the observation")
        decision = decide_straggler(
            finding,
            job=job,
            opt_in=job.opt_in.opt_in if workflow.patched(OPT_IN_FROM_JOB) else (job.opt_in.opt_in or self._inp.opt_in),
            config=self._inp.policy,
            straggler_restarts=self._state.straggler_restarts,
            checkpoint_seen=self._state.last_checkpoint_iteration is not None,
        )
        advice = decision.advice
        await self._audit(
            EventType.DETECTION,
            job=job,
            outcome=f"straggler: sustained throughput drop against the job's own baseline; {finding.explanation}",
            implicated=list(finding.culprits),
            key_suffix=IncidentKind.STRAGGLER,
            detail={
                "incident": IncidentKind.STRAGGLER,
                "observed_at": _iso(obs.at),
                "finding": finding.model_dump(mode="json"),
            },
        )
        self._state.last_advice = advice
        await self._audit(
            EventType.ADVICE,
            job=job,
            advice=advice,
            outcome=advice.reason,
            implicated=decision.recommended_exclude,
            key_suffix=IncidentKind.STRAGGLER,
            detail={
                "incident": IncidentKind.STRAGGLER,
                "recommended_exclude": decision.recommended_exclude,
                "action_enabled": decision.action_enabled,
            },
        )
        if advice.action is not AdviceAction.RESTART_EXCLUDE:
            return False
        if not (self._state.may_act and not self._state.paused):
            self._note("advice", f"{advice.action.value} ({advice.rule}) — observe mode, no scheduler action")
            return False
        stop = await self._act_failing_open(job, advice, IncidentKind.STRAGGLER, False, failed_nodes=list(job.nodes))
        if stop is None:
            return False
        self._state.straggler_restarts += 1
        return stop

    # ------------------------------------------------------------------ milestones (verify)

    async def _milestones(self, obs: JobObservation, previous: JobInfo | None) -> None:
        job = obs.job
        slurm_requeued = job.restarts > self._state.slurm_restarts_seen and not self._state.awaiting_restart
        if slurm_requeued and previous is not None:
            self._note("slurm_requeue", f"Slurm requeued the job itself (restarts {job.restarts})")
        self._state.slurm_restarts_seen = max(self._state.slurm_restarts_seen, job.restarts)
        self._history = self._history.note_restart_count(job.restarts)
        if job.state is JobState.RUNNING and (
            previous is None or previous.state is not JobState.RUNNING or previous.restarts != job.restarts
        ):
            self._history = self._history.start_attempt(at=job.start_time or workflow.now())

        restarted = job.state is not JobState.PENDING and job.start_time is not None
        if (
            self._state.awaiting_restart
            and restarted
            and (self._state.expected_restarts is None or job.restarts >= self._state.expected_restarts)
        ):
            self._state.awaiting_restart = False
            self._state.awaiting_progress = True
            self._set_phase(Phase.WATCHING)
            await self._audit(
                EventType.ALLOCATION_RESTART,
                job=job,
                outcome=f"running again on {job.node_list or ','.join(job.nodes)}",
                key_suffix=f"r{job.restarts}",
                detail={"start_time": job.start_time.isoformat() if job.start_time else None, "nodes": job.nodes},
            )
        progressed = obs.progress if ObservationReason.PROGRESS in obs.reasons else None
        if self._state.awaiting_progress and progressed is not None and job.state is JobState.RUNNING:
            self._state.awaiting_progress = False
            await self._audit(
                EventType.PROGRESS_RESTORED,
                job=job,
                outcome=f"training progressing again (iteration {progressed.iteration})",
                key_suffix=f"r{job.restarts}",
                detail={"iteration": progressed.iteration, "seen_at": _iso(obs.progress_at)},
            )
        ckpt = obs.progress.checkpoint_iteration if obs.progress else None
        if ckpt is not None and (self._state.last_checkpoint_iteration is None or ckpt > self._state.last_checkpoint_iteration):
            self._state.last_checkpoint_iteration = ckpt
            self._history = self._history.note_checkpoint(ckpt)
            # the first checkpoint of an attempt is news (training saves again); the later ones are routine
            first_of_attempt = job.restarts not in self._checkpointed_attempts
            self._checkpointed_attempts.add(job.restarts)
            await self._audit(
                EventType.CHECKPOINT_SAVED,
                job=job,
                outcome=f"checkpoint at iteration {ckpt}",
                key_suffix=f"ckpt{ckpt}",
                detail={"iteration": ckpt},
                routine=not first_of_attempt,
            )

    def _incident_kind(self, obs: JobObservation, previous: JobInfo | None) -> IncidentKind | None:
        job = obs.job
        state_changed = previous is None or previous.state is not job.state or previous.restarts != job.restarts
        if job.state.failed and state_changed and job.state is not JobState.PREEMPTED:
            return IncidentKind.FAILED
        if job.state is JobState.PREEMPTED and state_changed:
            return IncidentKind.PREEMPTED
        if (
            previous is not None
            and job.restarts > max(previous.restarts, self._state.own_restarts_upto)
            and not self._state.awaiting_restart
        ):
            return IncidentKind.SLURM_REQUEUE
        if (
            ObservationReason.FATAL_STALLED in obs.reasons
            and job.state is JobState.RUNNING
            and workflow.patched(FATAL_RUNNING)
        ):
            return IncidentKind.FATAL_RUNNING
        if ObservationReason.HANG in obs.reasons and job.state is JobState.RUNNING:
            return IncidentKind.HANG
        return None

    # ------------------------------------------------------------------ recovery

    async def _recover(self, obs: JobObservation, incident: IncidentKind) -> bool:
        """One incident, start to end. True when the job will not be recovered any more."""
        self._state.incidents += 1
        job = obs.job
        acting = self._state.may_act and not self._state.paused
        started = workflow.now()
        decision_deadline = started + timedelta(seconds=self._inp.watchdog.decision_deadline_s)
        held_by_us = False
        self._set_phase(Phase.DETECTING)
        try:
            # histories from before decide-before-act held a failed job here, ahead of the decision
            hold_first = acting and incident is IncidentKind.FAILED and not workflow.patched(DECIDE_BEFORE_ACT)
            collected = await self._collect(obs, hold_first=hold_first, deadline=decision_deadline)
            # (an activity result recorded before `held_by_us` existed has only `hold.changed`)
            held_by_us = collected.held_by_us or bool(collected.hold and collected.hold.changed)
            evidence = collected.evidence
            failed = evidence.job or job  # the job as it failed: exit code, nodes, layout
            current = collected.job_now or failed  # the job as it is now (held, if we held it)
            self._state.last_job = current
            if collected.may_act is False and acting:
                acting = False
                self._note(
                    "mode", collected.not_acting_reason or "the cluster's settings or the job's opt-in no longer allow action"
                )
            if held_by_us:
                self._state.holding = True
                self._state.own_restarts_upto = max(self._state.own_restarts_upto, current.restarts)
            await self._audit(
                EventType.DETECTION,
                job=current,
                outcome=f"{incident}: {current.state.value} {current.reason}".strip(),
                line=(obs.hits[-1].line if obs.hits else None),
                pattern_id=(obs.hits[-1].pattern_id if obs.hits else None),
                detail={
                    "incident": incident,
                    "failure_at": _iso(_failure_at(incident, obs, current)),
                    "observed_at": _iso(obs.at),
                    "exit_code": current.exit_code,
                    "held": held_by_us,
                    "hold_error": collected.hold_error,
                },
            )
            if held_by_us and collected.hold is not None:
                await self._audit(
                    EventType.ACTION_CONFIRMED,
                    job=current,
                    action=ActionKind.REQUEUE_HOLD,
                    outcome=f"held before the decision: {collected.hold.detail}",
                    key_suffix=ActionKind.REQUEUE_HOLD,
                    detail={"changed": True, "state": current.state.value, "restarts": current.restarts},
                )
            self._set_phase(Phase.ATTRIBUTING)
            attributed = await self._attribute(evidence, deadline=decision_deadline)
            verdict = attributed.verdict
            self._set_phase(Phase.DECIDING)
            guard: GuardAnswer | None = None
            if workflow.patched(SYSTEMIC_GUARD):
                guard = await self._ask_guard(verdict, failed, attributed.own_hosts, deadline=decision_deadline)
            advice = self._decide(
                verdict, failed.model_copy(update={"requeue_allowed": current.requeue_allowed}), attributed, incident,
                guard=guard,
            )
            if collected.array is not None and workflow.patched(ARRAY_GUARD):
                advice = array_guard(advice, verdict, failed, collected.array, attributed.recent_failures)
        except _Watchdog as dog:
            await self._watchdog(job, dog, held_by_us)
            return False

        self._state.last_advice = advice
        self._state.last_category = verdict.category.value
        for host in verdict.implicated.hosts:
            if host not in self._state.implicated_nodes:
                self._state.implicated_nodes.append(host)
        self._history = self._history.record_outcome(
            verdict, advice, ended_at=workflow.now(), exit_code=failed.exit_code
        )
        self._state.pending_hits = []
        self._upsert_search_attributes()
        await self._audit(
            EventType.ADVICE,
            job=current,
            verdict=verdict,
            advice=advice,
            outcome=advice.reason,
            detail={"explanation": verdict.explanation[:2000], "confidence": verdict.confidence},
        )
        if not acting:
            self._note("advice", f"{advice.action.value} ({advice.rule}) — observe mode, no scheduler action")
            self._set_phase(Phase.WATCHING)
            return False

        return bool(await self._act_failing_open(current, advice, incident, held_by_us, failed_nodes=failed.nodes))

    async def _act_failing_open(
        self, job: JobInfo, advice: Advice, incident: IncidentKind, held_by_us: bool, *, failed_nodes: list[str]
    ) -> bool | None:
        """`_act` within the action deadline; None when the watchdog, a refused action or a pause/stop ended it
        (the job is then given back to normal scheduling, audited)."""
        deadline = workflow.now() + timedelta(seconds=self._inp.watchdog.action_deadline_s)
        try:
            return await self._act(job, advice, incident, held_by_us, failed_nodes=failed_nodes, deadline=deadline)
        except _Watchdog as dog:
            await self._watchdog(job, dog, self._state.holding)
        except _NotAllowed as refused:
            await self._audit(
                EventType.WATCHDOG,
                job=job,
                outcome=f"{refused.stage} not done: {refused.cause}; no further action",
                key_suffix=f"not-allowed-{refused.stage}",
            )
            await self._give_back(job, f"action no longer allowed ({refused.stage})", deadline=deadline)
        except _Halted as halt:
            await self._give_back(job, halt.why, deadline=deadline)
        return None

    async def _collect(self, obs: JobObservation, *, hold_first: bool, deadline: datetime) -> CollectEvidenceOutput:
        inp = CollectEvidenceInput(
            key=self._inp.key,
            observed_job=obs.job,
            hold_first=hold_first,
            expected_restarts=obs.job.restarts,
            log_window_lines=self._inp.log_window_lines,
            hits=(self._state.pending_hits or obs.hits)[-50:],
            progress=obs.progress,
            hang_suspected=obs.hang_suspected,
            seconds_since_progress=obs.seconds_since_progress,
            straggler=obs.straggler,
            node_failure_counts=obs.node_failure_counts,
            log_cursors=obs.log_cursors,
        )
        what = f"collect evidence: job {self._inp.key.job_id} {obs.job.state.value.lower()}"
        return await self._scheduler_activity(
            ActivityNames.COLLECT_EVIDENCE, inp, CollectEvidenceOutput, deadline=deadline, stage="detect",
            summary=what + (", held first" if hold_first else ""),
        )

    async def _attribute(self, evidence, *, deadline: datetime) -> AttributeOutput:
        remaining = self._remaining(deadline, "attribute")
        try:
            return await workflow.execute_activity(
                ActivityNames.ATTRIBUTE,
                AttributeInput(evidence=evidence, systemic_window_s=self._inp.policy.systemic_window_s),
                result_type=AttributeOutput,
                schedule_to_close_timeout=remaining,
                start_to_close_timeout=min(remaining, timedelta(seconds=self._inp.watchdog.activity_timeout_s)),
                retry_policy=SCHEDULER_RETRY,
                summary=f"attribute: the cause and the nodes to blame for job {self._inp.key.job_id}",
            )
        except ActivityError as exc:
            raise _Watchdog("attribute", _cause(exc)) from exc

    def _decide(
        self,
        verdict: Verdict,
        job: JobInfo,
        attributed: AttributeOutput,
        incident: IncidentKind,
        *,
        guard: GuardAnswer | None,
    ) -> Advice:
        now = workflow.now()
        systemic = None
        if not workflow.patched(SYSTEMIC_GUARD):  # before the guard: a count of recent failures
            failures = [(f.job_id, f.at, f.category, f.hosts) for f in attributed.recent_failures]
            failures.append((job.job_id, now, verdict.category.value, verdict.implicated.hosts))
            systemic = systemic_view(failures, now=now, config=self._inp.policy)
        hold = SystemicHold(event_id=guard.event_id, reason=guard.reason) if guard and guard.event_id else None
        nodes = None
        if workflow.patched(SYSTEMIC_GUARD):
            # without an answer: no lemons, no placement check, but dead nodes still kept out
            nodes = NodeLimits(
                lemons=guard.lemons if guard else [],
                drain=guard.drain if guard else [],
                partition_nodes=guard.partition_nodes if guard else [],
                unavailable=guard.unavailable if guard else [],
            )
        advice = decide(
            verdict,
            job,
            self._history,
            self._inp.policy,
            now=now,
            systemic=systemic,
            systemic_hold=hold,
            nodes=nodes,
            # the job's opt-in (in `job`) is the one source; older histories also passed the start-time budget
            max_attempts_override=None if workflow.patched(OPT_IN_FROM_JOB) else self._inp.opt_in.max_attempts,
            slurm_requeued=incident is IncidentKind.SLURM_REQUEUE,
            progress_earns_retries=workflow.patched(PROGRESS_EARNS_RETRIES),
            readmit_oldest=workflow.patched(READMIT_OLDEST),
        )
        return advice

    async def _ask_guard(
        self, verdict: Verdict, failed: JobInfo, own_hosts: list[str] | None, *, deadline: datetime
    ) -> GuardAnswer | None:
        """Report the failure to the cluster's systemic guard and wait, bounded, for its answer (None: none came)."""
        n = self._state.incidents
        self._guard_event = None
        policy = self._inp.policy
        first = verdict.evidence[0].pattern_id if verdict.evidence else None
        report = FailureReport(
            workflow_id=workflow.info().workflow_id,
            job_id=self._inp.key.job_id,
            incident=n,
            category=verdict.category,
            signature=cause_signature(verdict.deterministic_signature, first),
            hosts=sorted(set(verdict.implicated.hosts if own_hosts is None else own_hosts)),
            gpus=sorted(set(verdict.implicated.gpus)),
            nodes=list(failed.nodes),
            num_nodes=failed.num_nodes or max(1, len(failed.nodes)),
            excluded_nodes=list(failed.excluded_nodes),
        )
        guard = GuardInput(cluster=self._inp.key.cluster, scheduler_queue=self._inp.scheduler_queue, policy=policy)
        left = deadline - workflow.now()
        wait = min(left - timedelta(seconds=2), timedelta(seconds=policy.systemic_settle_s + GUARD_ANSWER_MARGIN_S))
        if wait <= timedelta(seconds=1):
            return None
        try:
            await workflow.execute_activity(
                GuardNames.REPORT_FAILURE,
                ReportFailureInput(guard_id=guard_workflow_id(self._inp.key.cluster), guard=guard, report=report),
                start_to_close_timeout=timedelta(seconds=10),
                schedule_to_close_timeout=wait,
                retry_policy=SCHEDULER_RETRY,
                summary=f"ask the systemic guard about job {self._inp.key.job_id}'s failure",
            )
            await workflow.wait_condition(lambda: n in self._guard_answers, timeout=max(timedelta(seconds=1), wait))
        except (ActivityError, asyncio.TimeoutError) as exc:
            self._note("systemic", f"no answer from the systemic guard ({type(exc).__name__}): handled on its own")
            return None
        answer = self._guard_answers.pop(n)
        self._guard_answers = {k: v for k, v in self._guard_answers.items() if k > n}
        self._guard_event = answer.event_id
        return answer

    async def _act(
        self,
        job: JobInfo,
        advice: Advice,
        incident: IncidentKind,
        held_by_us: bool,
        *,
        failed_nodes: list[str],
        deadline: datetime,
    ) -> bool:
        key = self._inp.key
        restart = advice.action in {AdviceAction.RESTART, AdviceAction.RESTART_EXCLUDE, AdviceAction.RESTART_DRAIN}
        if advice.action is AdviceAction.STOP:
            self._set_phase(Phase.STOPPING)
            if job.state.finished and not held_by_us and workflow.patched(DECIDE_BEFORE_ACT):
                # not restarting means not requeueing: the job keeps the end Slurm gave it
                outcome = (
                    f"not restarted; left {job.state.value} as Slurm ended it (exit code {job.exit_code}, "
                    f"restarts {job.restarts}): {advice.reason}"
                )
            else:  # a running job (a hang, a Slurm requeue) is stopped by cancelling it
                await self._action(
                    ActivityNames.CANCEL, JobActionInput(key=key, reason=advice.reason), ActionKind.CANCEL, deadline
                )
                outcome = f"job cancelled: {advice.reason}"
            await self._audit(EventType.STOPPED, job=job, advice=advice, outcome=outcome)
            return True
        if advice.action is AdviceAction.HOLD:
            if not held_by_us and not job.held:
                held = await self._action(
                    ActivityNames.REQUEUE_HOLD,
                    JobActionInput(key=key, expected_restarts=job.restarts),
                    ActionKind.REQUEUE_HOLD,
                    deadline,
                )
                if held.job is not None:
                    self._state.own_restarts_upto = max(self._state.own_restarts_upto, held.job.restarts)
            self._note("hold", f"job held: {advice.reason}")
            if advice.rule == Rule.SYSTEMIC_HOLD and workflow.patched(SYSTEMIC_GUARD) and self._state.holding:
                self._state.systemic_event = self._guard_event
                self._state.held_since = workflow.now()
                if self._guard_event in self._events_ended:  # the event ended while the hold was being placed
                    self._state.release_order = self._events_ended[self._guard_event]
            self._set_phase(Phase.WATCHING)
            return False

        readmit = list(advice.readmit_nodes)
        excluded_target = sorted((set(self._history.excluded_nodes) - set(readmit)) | set(advice.exclude_nodes))
        if advice.action is AdviceAction.LEAVE_TO_SLURM or not restart:
            if advice.exclude_nodes and job.state is JobState.PENDING:
                await self._exclude(job, excluded_target, deadline, readmit=readmit)
            if held_by_us:
                await self._action(ActivityNames.RELEASE, JobActionInput(key=key), ActionKind.RELEASE, deadline)
            self._set_phase(Phase.WATCHING)
            return False

        self._set_phase(Phase.ISOLATING)
        expected = job.restarts
        if not held_by_us and not (job.state is JobState.PENDING and job.held):
            result = await self._action(
                ActivityNames.REQUEUE_HOLD,
                JobActionInput(key=key, expected_restarts=job.restarts),
                ActionKind.REQUEUE_HOLD,
                deadline,
            )
            if result.job is not None:
                expected = result.job.restarts
                self._state.own_restarts_upto = max(self._state.own_restarts_upto, expected)
        elif held_by_us:
            expected = job.restarts  # collect_evidence returned the job as held (restarts already +1)
        if excluded_target or readmit:
            await self._exclude(job, excluded_target, deadline, readmit=readmit)
        if advice.action is AdviceAction.RESTART_DRAIN and advice.drain_nodes:
            await self._action(
                ActivityNames.DRAIN_NODES,
                JobActionInput(key=key, nodes=advice.drain_nodes, reason=f"{advice.rule}: {advice.reason}"[:200]),
                ActionKind.DRAIN,
                deadline,
            )
        self._set_phase(Phase.RESTARTING)
        self._state.awaiting_restart = True
        self._state.expected_restarts = expected
        await self._action(
            ActivityNames.RELEASE,
            JobActionInput(key=key, start_now=_may_start_now(failed_nodes, excluded_target)),
            ActionKind.RELEASE,
            deadline,
        )
        self._history = self._history.note_jobmedic_restart()
        self._set_phase(Phase.WAITING_RESTART)
        return False

    async def _exclude(self, job: JobInfo, nodes: list[str], deadline: datetime, *, readmit: list[str]) -> None:
        await self._action(
            ActivityNames.EXCLUDE_NODES, JobActionInput(key=self._inp.key, nodes=nodes, readmit=readmit),
            ActionKind.EXCLUDE_NODES, deadline,
        )
        self._history = self._history.note_readmitted(readmit).note_excluded(nodes)

    async def _action(self, name: str, inp: JobActionInput, label: ActionKind, deadline: datetime) -> ActionResult:
        if self._state.paused or self._state.stopped:
            raise _Halted("recovery " + ("stopped" if self._state.stopped else "paused") + f" before {label}")
        n = self._state.incidents
        await self._audit(
            EventType.ACTION_REQUESTED,
            action=label,
            outcome=", ".join(inp.nodes) if inp.nodes else None,
            key_suffix=label,
            implicated=inp.nodes,
        )
        result = await self._scheduler_activity(
            name, inp, ActionResult, deadline=deadline, stage=label, summary=self._action_summary(label, inp)
        )
        if label is ActionKind.REQUEUE_HOLD:
            self._state.holding = True
        elif label in {ActionKind.RELEASE, ActionKind.CANCEL}:
            self._state.holding = False
        job = result.job
        await self._audit(
            EventType.ACTION_CONFIRMED,
            job=job,
            action=label,
            outcome=(result.detail or ("changed" if result.changed else "already in effect")),
            key_suffix=label,
            implicated=inp.nodes,
            detail={
                "changed": result.changed,
                "state": job.state.value if job else None,
                "restarts": job.restarts if job else None,
                "incident": n,
            },
        )
        self._note(label, result.detail or ("done" if result.changed else "already in effect"))
        return result

    def _action_summary(self, label: ActionKind, inp: JobActionInput) -> str:
        """`hold job 12 - gpu_hardware on node2`, `exclude node2 from job 12`, `release job 12`."""
        job = self._inp.key.job_id
        if label is ActionKind.REQUEUE_HOLD:
            cause = self._state.last_category or "failure"
            nodes = sorted(self._state.implicated_nodes)
            return f"hold job {job} - {cause}" + (f" on {','.join(nodes[:8])}" if nodes else "")
        if label is ActionKind.EXCLUDE_NODES:
            return f"exclude {','.join(inp.nodes[:8])} from job {job}"
        return f"{label.value.replace('_', ' ')} job {job}"

    async def _scheduler_activity(
        self, name: str, arg, result_type, *, deadline: datetime, stage: str, summary: str | None = None
    ):
        remaining = self._remaining(deadline, stage)
        try:
            return await workflow.execute_activity(
                name,
                arg,
                result_type=result_type,
                task_queue=self._inp.scheduler_queue,
                schedule_to_close_timeout=remaining,
                start_to_close_timeout=min(remaining, timedelta(seconds=self._inp.watchdog.activity_timeout_s)),
                retry_policy=SCHEDULER_RETRY,
                summary=summary,  # the one line the Temporal UI shows on the timeline (no effect on replay)
            )
        except ActivityError as exc:
            inner = exc.cause
            if isinstance(inner, ApplicationError) and inner.type == ACTION_NOT_ALLOWED:
                raise _NotAllowed(stage, inner.message) from exc
            raise _Watchdog(stage, _cause(exc)) from exc

    def _remaining(self, deadline: datetime, stage: str) -> timedelta:
        left = deadline - workflow.now()
        if left <= timedelta(seconds=1):
            raise _Watchdog(stage, "deadline reached before the step could start")
        return left

    async def _give_back(self, job: JobInfo | None, why: str, *, deadline: datetime) -> None:
        """A pause or stop mid-incident: no further action, except undoing jobmedic's own hold."""
        self._note("halted", why)
        if self._state.holding:
            try:
                await self._scheduler_activity(
                    # Slurm's own post-requeue wait applies: no StartTime=now on nodes that may hold a revoked credential
                    ActivityNames.RELEASE, JobActionInput(key=self._inp.key, start_now=False), ActionResult,
                    deadline=max(deadline, workflow.now() + timedelta(seconds=60)), stage=ActionKind.RELEASE,
                )
                self._state.holding = False
                await self._audit(
                    EventType.ACTION_CONFIRMED, job=job, action=ActionKind.RELEASE, key_suffix="halt-release",
                    outcome=f"{why}: released jobmedic's hold to normal scheduling",
                )
            except _Watchdog as dog:
                await self._audit(EventType.WATCHDOG, job=job, outcome=f"{why}; releasing the hold failed: {dog.cause}",
                                  key_suffix="halt")
        self._state.awaiting_restart = False
        self._state.systemic_event = None
        self._state.release_order = None
        self._set_phase(Phase.WATCHING)

    async def _watchdog(self, job: JobInfo, dog: _Watchdog, held_by_us: bool) -> None:
        """Fail open: release the job to normal scheduling and audit it."""
        workflow.logger.warning("watchdog fired at %s: %s", dog.stage, dog.cause)
        acts = self._inp.watchdog.mode is Mode.ACTION and self._state.may_act and not self._state.paused
        outcome = f"{dog.stage} did not finish: {dog.cause}"
        released = None
        if acts and held_by_us:  # only a hold jobmedic placed; someone else's hold stays
            try:
                released = await workflow.execute_activity(
                    ActivityNames.RELEASE,
                    # Slurm's post-requeue wait applies: the failed nodes may not be excluded (see _may_start_now)
                    JobActionInput(key=self._inp.key, start_now=False),
                    result_type=ActionResult,
                    task_queue=self._inp.scheduler_queue,
                    start_to_close_timeout=timedelta(seconds=self._inp.watchdog.activity_timeout_s),
                    schedule_to_close_timeout=timedelta(seconds=self._inp.watchdog.action_deadline_s),
                    retry_policy=SCHEDULER_RETRY,
                    summary=f"release job {self._inp.key.job_id}: given back to Slurm",
                )
                outcome += "; job released to normal scheduling"
                self._state.holding = False
            except ActivityError as exc:
                outcome += f"; release failed too: {_cause(exc)}"
        elif not acts:
            outcome += "; watchdog in observe mode or job not acted on: would release the job"
        else:
            outcome += "; jobmedic did not hold the job: it stays as Slurm has it"
        self._state.awaiting_restart = False
        await self._audit(
            EventType.WATCHDOG,
            job=released.job if released and released.job else job,
            action=ActionKind.RELEASE if released else None,
            outcome=outcome,
            key_suffix=dog.stage,
        )
        self._set_phase(Phase.WATCHING)

    # ------------------------------------------------------------------ audit, notes, search attributes

    async def _audit(
        self,
        event: EventType,
        *,
        job: JobInfo | None = None,
        verdict: Verdict | None = None,
        advice: Advice | None = None,
        action: str | None = None,
        outcome: str | None = None,
        line: str | None = None,
        pattern_id: str | None = None,
        implicated: list[str] | None = None,
        key_suffix: str = "",
        detail: dict | None = None,
        routine: bool = False,
    ) -> None:
        """One entry of the trail, sent to the store in the background (in order, each once).

        `routine` (a milestone nothing acts on): it waits in the backlog for the next entry that
        is not, for MILESTONE_BATCH of its kind, or MILESTONE_FLUSH, whichever comes first, so a
        long healthy run does not put one activity per checkpoint on the job's timeline.
        """
        info = workflow.info()
        job = job or self._state.last_job
        key = f"{self._inp.key.workflow_id}:{self._state.incidents}:{event.value}:{key_suffix}"
        if verdict is not None and line is None and verdict.evidence:
            line = verdict.evidence[0].line
            pattern_id = verdict.evidence[0].pattern_id
        entry = AuditEntry(
            idempotency_key=key,
            timestamp=workflow.now(),
            cluster=self._inp.key.cluster,
            job_id=self._inp.key.job_id,
            submit_time=self._inp.key.submit_time,
            attempt=(job.restarts if job else 0),
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            event_type=event,
            pattern_id=pattern_id,
            line=line,
            category=verdict.category.value if verdict else None,
            fault_domain=verdict.fault_domain.value if verdict else None,
            implicated_nodes=implicated if implicated is not None else (verdict.implicated.hosts if verdict else []),
            action=action or (advice.action.value if advice else None),
            mode=Mode.ACTION.value if (self._state.may_act and not self._state.paused) else Mode.OBSERVE.value,
            rule=advice.rule if advice else None,
            attribution=verdict.external if verdict else None,
            outcome=outcome,
            detail=detail,
        )
        self._note(event.value, outcome or action or "")
        if workflow.patched(AUDIT_IN_BACKGROUND):
            self._state.audit_backlog.append(entry)
            if routine and not self._draining() and workflow.patched(BATCH_MILESTONES) and not self._batch_due():
                return
            self._start_audit_drainer()
            return
        await workflow.execute_activity(
            ActivityNames.RECORD_AUDIT,
            AuditBatch(entries=[entry]),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=AUDIT_RETRY,
        )

    def _draining(self) -> bool:
        return self._audit_drainer is not None and not self._audit_drainer.done()

    def _batch_due(self) -> bool:
        backlog = self._state.audit_backlog
        return len(backlog) >= MILESTONE_BATCH or workflow.now() - backlog[0].timestamp >= MILESTONE_FLUSH

    def _start_audit_drainer(self) -> None:
        if self._audit_drainer is None or self._audit_drainer.done():
            self._audit_drainer = asyncio.create_task(self._drain_audit())

    async def _drain_audit(self) -> None:
        """Send the backlog to the store, oldest first, until it is empty; never fail the workflow."""
        while self._state.audit_backlog:
            batch = self._state.audit_backlog[:AUDIT_BATCH]
            try:
                # retryable store errors (database down) are retried by Temporal for as long as it takes
                await workflow.execute_activity(
                    ActivityNames.RECORD_AUDIT,
                    AuditBatch(entries=batch),
                    start_to_close_timeout=timedelta(seconds=30),
                    retry_policy=AUDIT_RETRY,
                    summary=_audit_summary(batch),
                )
            except ActivityError as exc:
                # refused for good (e.g. a schema or grant problem a person fixes): keep the entries, in order
                self._state.audit_refusals += 1
                pause = self._inp.watchdog.audit_retry_pause_s
                workflow.logger.warning("audit store refused %d entries (%s); again in %g s", len(batch), _cause(exc), pause)
                await workflow.sleep(pause)
                continue
            del self._state.audit_backlog[: len(batch)]

    def _note(self, event: str, detail: str) -> None:
        self._state.timeline.append(TimelineEvent(at=workflow.now(), event=event, detail=detail[:500]))
        if len(self._state.timeline) > TIMELINE_LIMIT:
            del self._state.timeline[: len(self._state.timeline) - TIMELINE_LIMIT]
        self._refresh_details()

    def _refresh_details(self) -> None:
        """The workflow's current details in the Temporal UI: where the job stands and what jobmedic waits for.

        Read through the built-in metadata query; setting them issues no command, so histories replay.
        """
        job = self._state.last_job
        who = " ".join(x for x in (f"job {self._inp.key.job_id}", job.name if job else "",
                                   f"({job.user})" if job and job.user else "") if x)
        lines = [
            f"**{who}** on {job.node_list or ','.join(job.nodes) or '-'}" if job else f"**{who}**",
            f"phase **{self._phase_label()}**: {WAITING_FOR.get(self._phase_label(), '')}",
            f"attempts {len(self._history.attempts)} · incidents {self._state.incidents} · mode "
            f"{self._state.mode}{'' if self._state.may_act else ' (advice only)'}",
        ]
        if self._state.last_category:
            nodes = ",".join(sorted(self._state.implicated_nodes)[:MAX_SA_NODES]) or "no node named"
            lines.append(f"last anomaly: **{self._state.last_category}** ({nodes})")
        if self._history.excluded_nodes:
            lines.append(f"excluded: {','.join(self._history.excluded_nodes[:MAX_SA_NODES])}")
        advice = self._state.last_advice
        if advice is not None:
            lines.append(f"last advice: {advice.action.value}" + (f" ({advice.rule})" if advice.rule else ""))
        if self._state.timeline:
            last = self._state.timeline[-1]
            lines.append(f"latest: {last.event} - {last.detail[:200]}")
        workflow.set_current_details("\n\n".join(lines))

    def _phase_label(self) -> str:
        if self._state.paused and self._state.phase != Phase.DONE:
            return Phase.PAUSED.value
        return str(self._state.phase)

    def _set_phase(self, phase: Phase) -> None:
        if self._state.phase == phase:
            return
        self._state.phase = phase
        self._upsert_search_attributes()

    def _upsert_search_attributes(self) -> None:
        self._refresh_details()
        workflow.upsert_search_attributes(
            [
                SA_PHASE.value_set(self._phase_label()),
                SA_MODE.value_set(Mode.ACTION.value if self._state.may_act else Mode.OBSERVE.value),
                SA_ATTEMPTS.value_set(len(self._history.attempts)),
                SA_LAST_CATEGORY.value_set(self._state.last_category or Category.NONE.value),
                # the server refuses values over 2 KB: a bounded, sorted view
                SA_IMPLICATED.value_set(sorted(self._state.implicated_nodes)[:MAX_SA_NODES]),
            ]
        )


#: what jobmedic waits for in each phase (the first look at a job's page answers "what now")
WAITING_FOR: dict[str, str] = {
    Phase.WATCHING.value: "watching the job's log and state; nothing to do while it runs",
    Phase.DETECTING.value: "collecting the evidence of an incident",
    Phase.ATTRIBUTING.value: "naming the cause and the nodes to blame",
    Phase.DECIDING.value: "deciding: restart, exclude or stop",
    Phase.ISOLATING.value: "excluding the blamed nodes from the job",
    Phase.RESTARTING.value: "releasing the job back to Slurm",
    Phase.STOPPING.value: "stopping recovery; the job keeps the state Slurm gave it",
    Phase.WAITING_RESTART.value: "waiting for Slurm to start the job again",
    Phase.PAUSED.value: "paused by an operator: advice only until `resume`",
    Phase.DONE.value: "nothing: the job has ended",
}


def _may_start_now(failed_nodes: list[str], excluded: list[str]) -> bool:
    """Whether to skip Slurm's post-requeue wait (`StartTime=now`).

    A requeue revokes the job's credential on the nodes of its last allocation
    for `AuthInfo=cred_expire` seconds; a start there inside that time is
    killed at once ("Job credential revoked", seen here). Skipping the wait is
    safe only when none of those nodes can be chosen again.
    """
    return bool(failed_nodes) and set(failed_nodes) <= set(excluded)


def _failure_at(incident: IncidentKind, obs: JobObservation, current: JobInfo) -> datetime | None:
    """When the job stopped doing useful work: its last progress (hang), the fatal line, or its end."""
    if incident is IncidentKind.HANG:
        return obs.progress_at
    if incident is IncidentKind.FATAL_RUNNING:
        return obs.fatal_at
    return obs.job.end_time or current.end_time


def _audit_summary(batch: list[AuditEntry]) -> str:
    """`audit: detection, advice restart_exclude` - what a batch of the trail says, in a line."""
    words = [e.event_type.value + (f" {e.action}" if e.action else "") for e in batch]
    text = "audit: " + ", ".join(dict.fromkeys(words))
    return text if len(text) <= 200 else text[:197] + "..."


def _cause(exc: BaseException) -> str:
    inner = exc.cause if isinstance(exc, ActivityError) and exc.cause else exc
    if isinstance(inner, ApplicationError) and inner.type:
        return f"{inner.type}: {inner.message}"
    return str(inner) or type(inner).__name__


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
