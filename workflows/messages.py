"""Inputs, outputs, signals and queries of jobmedic's workflows and activities.

These models are the advice contract: a site that serves the per-cluster
scheduler task queue with its own worker implements the activities named in
`ActivityNames` over exactly these types. Every new field gets a default.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from workflows.contracts import (
    ActionResult,
    Advice,
    AuditEntry,
    Contract,
    EvidenceLine,
    JobEvidence,
    JobInfo,
    JobKey,
    LogCursor,
    Mode,
    OptIn,
    PolicyConfig,
    Progress,
    StragglerFinding,
    Verdict,
)


class ActivityNames:
    """Activity names, so workflows need not import activity code."""

    # per-cluster scheduler queue
    WATCH_CLUSTER = "watch_cluster"
    COLLECT_EVIDENCE = "collect_evidence"
    REQUEUE_HOLD = "requeue_hold"
    EXCLUDE_NODES = "exclude_nodes"
    RELEASE = "release_job"
    CANCEL = "cancel_job"
    DRAIN_NODES = "drain_nodes"
    READ_JOB = "read_job"
    # main queue
    ATTRIBUTE = "attribute"
    RECORD_AUDIT = "record_audit"


# ApplicationError type of a scheduler action refused because the worker's current settings or the job's
# current opt-in forbid action (benign, not retryable): the recovery workflow stops acting on the job
ACTION_NOT_ALLOWED = "ActionNotAllowed"


class SignalNames:
    OBSERVE = "observe"
    PAUSE = "pause"
    RESUME = "resume"
    STOP = "stop"
    SET_MODE = "set-mode"
    RELEASE = "release"  # an operator releases jobmedic's systemic hold of the job (`jobmedic release JOB`)


class QueryNames:
    STATUS = "status"
    TIMELINE = "timeline"


def recovery_query(*, cluster: str | None = None, job_id: str | None = None, running: bool = True) -> str:
    """A Temporal visibility query for job recovery workflows (values quoted, so job data stays data)."""
    parts = ["WorkflowType = 'JobRecovery'"]
    if cluster is not None:
        parts.append(f"Cluster = {_literal(cluster)}")
    if job_id is not None:
        parts.append(f"JobId = {_literal(job_id)}")
    if running:
        parts.append("ExecutionStatus = 'Running'")
    return " AND ".join(parts)


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class Phase(StrEnum):
    WATCHING = "watching"
    DETECTING = "detecting"
    ATTRIBUTING = "attributing"
    DECIDING = "deciding"
    ISOLATING = "isolating"
    RESTARTING = "restarting"
    STOPPING = "stopping"
    WAITING_RESTART = "waiting_restart"
    PAUSED = "paused"
    DONE = "done"


class ObservationReason(StrEnum):
    FIRST_SEEN = "first_seen"
    STATE_CHANGE = "state_change"
    RESTART_CHANGE = "restart_change"
    FAILURE_PATTERN = "failure_pattern"
    PROGRESS = "progress"
    CHECKPOINT = "checkpoint"
    HANG = "hang"
    STRAGGLER = "straggler"
    FATAL_STALLED = "fatal_stalled"  # a fatal line while running, and no progress since: ranks wait on a dead one
    GONE = "gone"


class JobObservation(Contract):
    """What the cluster watch saw change about one job (signal `observe`)."""

    seq: int = 0
    at: datetime
    job: JobInfo
    reasons: list[ObservationReason] = Field(default_factory=list)
    hits: list[EvidenceLine] = Field(default_factory=list)
    progress: Progress | None = None
    progress_at: datetime | None = None
    hang_suspected: bool = False
    seconds_since_progress: float | None = None
    straggler_hosts: list[str] = Field(default_factory=list)  # = straggler.culprits (read by older workflow code)
    node_failure_counts: dict[str, int] = Field(default_factory=dict)
    straggler: StragglerFinding | None = None  # with reason STRAGGLER: the slow node(s) and the evidence either way
    # where the watch's reading of each output file stands (the evidence window is numbered from them)
    log_cursors: list[LogCursor] = Field(default_factory=list)
    fatal_at: datetime | None = None  # with reason FATAL_STALLED: when the fatal line was seen


class WatchdogConfig(Contract):
    mode: Mode = Mode.ACTION
    decision_deadline_s: float = 120.0
    action_deadline_s: float = 120.0
    activity_timeout_s: float = 60.0
    # after the audit store refused entries for good (not retryable), wait this long and send them again
    audit_retry_pause_s: float = 60.0


class JobRecoveryInput(Contract):
    key: JobKey
    # the opt-in as it was at start, for the search attributes; decisions read the job's own (`JobInfo.opt_in`)
    opt_in: OptIn
    environment: str = ""
    cluster_mode: Mode = Mode.OBSERVE
    may_act: bool = False
    scheduler_queue: str
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    watchdog: WatchdogConfig = Field(default_factory=WatchdogConfig)
    log_window_lines: int = 400
    # carried over continue-as-new
    carried_state: "JobRecoveryState | None" = None


class TimelineEvent(Contract):
    at: datetime
    event: str
    detail: str = ""


class JobRecoveryState(Contract):
    """Everything the job workflow remembers (carried over continue-as-new)."""

    phase: str = Phase.WATCHING
    paused: bool = False
    stopped: bool = False
    mode: Mode = Mode.OBSERVE
    may_act: bool = False
    incidents: int = 0
    last_seq: int = 0
    last_job: JobInfo | None = None
    slurm_restarts_seen: int = 0
    expected_restarts: int | None = None  # restarts once jobmedic's own requeue has happened
    own_restarts_upto: int = 0  # restart counts up to this one were caused by jobmedic
    awaiting_restart: bool = False
    awaiting_progress: bool = False
    last_checkpoint_iteration: int | None = None
    last_category: str = ""
    implicated_nodes: list[str] = Field(default_factory=list)
    history: dict = Field(default_factory=dict)  # workflows.history.JobHistory, as data
    timeline: list[TimelineEvent] = Field(default_factory=list)
    pending_hits: list[EvidenceLine] = Field(default_factory=list)
    last_advice: Advice | None = None
    holding: bool = False  # the job is held by jobmedic right now (released or cancelled since: False)
    # audit entries not yet confirmed by the store, oldest first (sent in the background, in order, exactly once)
    audit_backlog: list[AuditEntry] = Field(default_factory=list)
    audit_refusals: int = 0  # times the store refused a batch for good (it is sent again later)
    handled: list[str] = Field(default_factory=list)  # incidents already handled, "<kind>:r<restarts>"
    straggler_restarts: int = 0  # restarts jobmedic made for stragglers (workflows/straggler_policy.py)
    # the systemic event jobmedic holds the job for (workflows/systemic_guard.py), since when, and a release
    # that was ordered (by the guard, an operator, or the hold's own bound) and not yet carried out
    systemic_event: str | None = None
    held_since: datetime | None = None
    release_order: str | None = None


JobRecoveryInput.model_rebuild()


class JobStatus(Contract):
    """Answer of the `status` query."""

    workflow_id: str
    job_id: str
    cluster: str
    phase: str
    paused: bool
    stopped: bool
    mode: Mode
    may_act: bool
    attempts: int
    incidents: int
    last_category: str
    implicated_nodes: list[str]
    excluded_nodes: list[str] = Field(default_factory=list)
    last_advice: Advice | None = None
    job_state: str = ""
    restarts: int = 0
    audit_backlog: int = 0  # audit entries waiting for the store (it is down or refusing them)
    audit_batched: int = 0  # routine milestones waiting for the next batch (by design, not a store problem)
    systemic_event: str | None = None  # the systemic event jobmedic holds the job for


class CollectEvidenceInput(Contract):
    key: JobKey
    observed_job: JobInfo | None = None  # the job as the watch saw it fail
    hold_first: bool = False
    expected_restarts: int | None = None
    log_window_lines: int = 400
    hits: list[EvidenceLine] = Field(default_factory=list)
    progress: Progress | None = None
    hang_suspected: bool = False
    seconds_since_progress: float | None = None
    straggler_hosts: list[str] = Field(default_factory=list)  # unused (recorded inputs have it)
    node_failure_counts: dict[str, int] = Field(default_factory=dict)
    straggler: StragglerFinding | None = None
    log_cursors: list[LogCursor] = Field(default_factory=list)  # the watch's read positions (JobObservation)


class ArrayTaskState(Contract):
    """One task of a job array as Slurm shows it now (the array guard's view, workflows/array_guard.py)."""

    job_id: str  # ARRAYJOBID_TASKID
    state: str = ""
    exit_code: int | None = None
    exit_signal: int | None = None
    restarts: int = 0


class ArrayView(Contract):
    """The job array a task belongs to, read with the task's evidence (one squeue)."""

    array_job_id: str
    tasks: list[ArrayTaskState] = Field(default_factory=list)  # the tasks Slurm has a record of, at most MAX_TASKS
    total: int = 0  # tasks of the array Slurm still knows: started ones and the ones waiting to start


class CollectEvidenceOutput(Contract):
    evidence: JobEvidence  # evidence.job is the job as it failed (nodes and layout intact)
    hold: ActionResult | None = None
    hold_error: str | None = None
    held_by_us: bool = False  # the job is held now because jobmedic held it (this attempt or a lost one)
    job_now: JobInfo | None = None  # the job as the scheduler shows it after any hold
    may_act: bool | None = None  # None: the worker has no opinion (older worker)
    not_acting_reason: str | None = None  # why `may_act` is False (settings, opt-in, another deployment's job)
    array: ArrayView | None = None  # the job is a task of a job array: its siblings as Slurm shows them


class AttributeInput(Contract):
    evidence: JobEvidence
    use_external: bool = True
    systemic_window_s: float = 300.0


class RecentFailure(Contract):
    """Another job's attributed failure on the same cluster (from the audit trail)."""

    job_id: str
    at: datetime
    category: str
    hosts: list[str] = Field(default_factory=list)


class AttributeOutput(Contract):
    verdict: Verdict
    recent_failures: list[RecentFailure] = Field(default_factory=list)
    # hosts the job's own evidence implicates, without the cluster-wide view (other jobs' failures on its
    # nodes): the systemic guard's "node-specific evidence". None: not computed (older worker)
    own_hosts: list[str] | None = None


class JobActionInput(Contract):
    key: JobKey
    nodes: list[str] = Field(default_factory=list)
    reason: str = ""
    expected_restarts: int | None = None
    # release: skip Slurm's post-requeue wait. Only when the last allocation's nodes are all excluded:
    # they hold the revoked credential, and a start there inside cred_expire fails ("credential revoked").
    start_now: bool = True
    # exclude_nodes: jobmedic's own earlier exclusions to take off the job's ExcNodeList (Advice.readmit_nodes)
    readmit: list[str] = Field(default_factory=list)


class AuditBatch(Contract):
    entries: list[AuditEntry] = Field(default_factory=list)


class WatchInput(Contract):
    cluster: str
    poll_interval_s: float = 15.0
    scheduler_queue: str | None = None  # None: the default name for the cluster
    # the watch state (activities.watch.WatchState, as data) the previous run handed over when it continued as new
    resume_state: dict | None = None
    # the watch runs `shards` activities, each over the jobs whose stable job-id hash names it (`shard`);
    # runs started before the `watch-shards` patch run one
    shards: int = 1
    shard: int = 0  # set by the workflow on each shard activity's input


