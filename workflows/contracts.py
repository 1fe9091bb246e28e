"""Data contracts shared by workflows, activities and adapters.

Every model here may cross a Temporal activity or workflow boundary, so every
field added later must have a default: old histories must still decode.
Only the standard library and pydantic are imported (the workflow sandbox
re-imports this module).
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Contract(BaseModel):
    model_config = ConfigDict(frozen=False, extra="ignore")


# --------------------------------------------------------------------------- opt-in


class Mode(StrEnum):
    """Monitor (advice only) or action (scheduler commands allowed)."""

    OBSERVE = "observe"
    ACTION = "action"


class OptIn(Contract):
    """A job's opt-in, parsed from its Slurm comment."""

    key: str = "jobmedic"  # "jobmedic" or "nvidia-recovery"
    environment: str = ""
    mode: Mode = Mode.OBSERVE
    max_attempts: int | None = None
    checkpoint_dir: str | None = None
    # a straggler's culprit may be excluded by a restart (None: as the cluster's policy says)
    straggler_action: bool | None = None
    progress_pattern: str | None = None  # the job's own progress line (checked in adapters/slurm/optin.py)


class OptInResult(Contract):
    """Outcome of reading a comment: opted in, not opted in, or invalid with a reason."""

    opted_in: bool = False
    opt_in: OptIn | None = None
    invalid_reason: str | None = None

    @property
    def invalid(self) -> bool:
        return self.invalid_reason is not None


# --------------------------------------------------------------------------- scheduler view


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REQUEUED = "REQUEUED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    REQUEUE_FED = "REQUEUE_FED"
    RESIZING = "RESIZING"
    REVOKED = "REVOKED"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    STOPPED = "STOPPED"
    SIGNALING = "SIGNALING"
    STAGE_OUT = "STAGE_OUT"
    CONFIGURING = "CONFIGURING"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def parse(cls, text: str) -> "JobState":
        """Map a scheduler state word (any case, possibly with a `+` suffix) to a state."""
        word = text.strip().upper().split("+", 1)[0].split(" ", 1)[0]
        try:
            return cls(word)
        except ValueError:
            return cls.UNKNOWN

    @property
    def finished(self) -> bool:
        return self in _FINISHED

    @property
    def failed(self) -> bool:
        return self in _FAILED


_FINISHED = {
    JobState.COMPLETED, JobState.CANCELLED, JobState.FAILED, JobState.TIMEOUT,
    JobState.NODE_FAIL, JobState.PREEMPTED, JobState.BOOT_FAIL, JobState.DEADLINE,
    JobState.OUT_OF_MEMORY, JobState.REVOKED, JobState.SPECIAL_EXIT,
}
_FAILED = {
    JobState.FAILED, JobState.TIMEOUT, JobState.NODE_FAIL, JobState.PREEMPTED,
    JobState.BOOT_FAIL, JobState.DEADLINE, JobState.OUT_OF_MEMORY,
}


class JobKey(Contract):
    """Identity of one job: a recycled job id never matches the old job's key."""

    cluster: str
    job_id: str
    submit_time: datetime | None = None

    @property
    def workflow_id(self) -> str:
        moment = self.submit_time
        if moment is not None and moment.tzinfo is not None:
            moment = moment.astimezone(timezone.utc)  # a naive time is taken to be UTC already
        stamp = moment.strftime("%Y%m%dT%H%M%S") if moment else "unknown"
        return f"jobmedic-{self.cluster}-{self.job_id}-{stamp}"

    def matches(self, job: "JobInfo") -> bool:
        """True when `job` is this job and not a later job that reuses its id.

        Slurm stamps a new submit time on every requeue (and counts it in
        `Restarts`), so a later submit time is the same job only when the job
        has been restarted since.
        """
        if job.job_id != self.job_id:
            return False
        if self.submit_time is None or job.submit_time is None:
            return True
        mine, theirs = _as_utc(self.submit_time), _as_utc(job.submit_time)
        if mine == theirs:
            return True
        return job.restarts > 0 and theirs > mine


def _as_utc(moment: datetime) -> datetime:
    """Aware UTC; a naive time is taken to be UTC already (comparing naive and aware raises)."""
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


class TaskLayout(Contract):
    """How a job's tasks (global ranks) are spread over its nodes.

    `tasks_per_node[i]` tasks run on `nodes[i]`; ranks are numbered in block
    order (Slurm's default distribution) unless the job says otherwise.
    """

    nodes: list[str] = Field(default_factory=list)
    tasks_per_node: list[int] = Field(default_factory=list)
    distribution: str = "block"

    def global_rank(self, node: str, local_rank: int) -> int | None:
        """The global rank of `node`'s `local_rank`-th task (block order only), or None when unknown."""
        counts = self.tasks_per_node or []
        if self.distribution.startswith("cyclic") or len(counts) != len(self.nodes) or node not in self.nodes:
            return None
        i = self.nodes.index(node)
        if not 0 <= local_rank < counts[i]:
            return None
        return sum(counts[:i]) + local_rank

    def node_of_rank(self, rank: int) -> str | None:
        """The node that runs global rank `rank`, or None when unknown."""
        if rank < 0 or not self.nodes:
            return None
        counts = self.tasks_per_node or []
        if len(counts) != len(self.nodes):
            return None
        if self.distribution.startswith("cyclic"):
            # round-robin across nodes that still have free task slots
            remaining = list(counts)
            r = 0
            while any(remaining):
                for i, left in enumerate(remaining):
                    if left:
                        if r == rank:
                            return self.nodes[i]
                        remaining[i] -= 1
                        r += 1
            return None
        start = 0
        for node, count in zip(self.nodes, counts):
            if start <= rank < start + count:
                return node
            start += count
        return None


class JobInfo(Contract):
    """One job as the scheduler shows it in a single batched query."""

    cluster: str = ""
    job_id: str
    name: str = ""
    user: str = ""
    state: JobState = JobState.UNKNOWN
    reason: str = ""
    exit_code: int | None = None
    exit_signal: int | None = None
    nodes: list[str] = Field(default_factory=list)  # expanded host names
    node_list: str = ""  # as Slurm prints it, e.g. node[1-2]
    batch_host: str = ""
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    restarts: int = 0
    time_limit: str = ""
    stdout_path: str = ""
    stderr_path: str = ""
    work_dir: str = ""
    comment: str = ""
    admin_comment: str = ""  # operators' field; jobmedic's ownership mark lives here (adapters/slurm/ownership.py)
    num_tasks: int | None = None
    num_nodes: int | None = None
    layout: TaskLayout = Field(default_factory=TaskLayout)
    excluded_nodes: list[str] = Field(default_factory=list)
    held: bool = False
    requeue_allowed: bool | None = None
    opt_in: OptInResult = Field(default_factory=OptInResult)

    @property
    def key(self) -> JobKey:
        return JobKey(cluster=self.cluster, job_id=self.job_id, submit_time=self.submit_time)


class NodeInfo(Contract):
    """One node's state; `state` is the base state, `flags` the rest (DRAIN, NOT_RESPONDING, ...)."""

    name: str
    state: str = "UNKNOWN"
    flags: list[str] = Field(default_factory=list)
    reason: str = ""
    addr: str = ""  # NodeAddr: logs often name a node by its address only
    hostname: str = ""  # NodeHostName (often the FQDN); the short and long forms both map to `name`
    reason_user: str = ""
    reason_time: datetime | None = None

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags or self.state in {"DRAIN", "DRAINED", "DRAINING"}

    @property
    def drained_by_jobmedic(self) -> bool:
        return self.drained and self.reason.startswith("jobmedic:")

    @property
    def unhealthy(self) -> bool:
        return (
            self.state in {"DOWN", "FAIL", "FAILING", "UNKNOWN"}
            or self.drained
            or "NOT_RESPONDING" in self.flags
        )


class ActionKind(StrEnum):
    """A scheduler action: what an `ActionResult` confirms, and the `action` of its audit entries."""

    REQUEUE_HOLD = "requeue_hold"
    EXCLUDE_NODES = "exclude_nodes"
    RELEASE = "release"
    CANCEL = "cancel"
    DRAIN = "drain"
    RESUME_NODE = "resume_node"


class ActionResult(Contract):
    """What the scheduler confirms after an action: `changed` is False when the effect was already there."""

    action: ActionKind
    changed: bool
    job: JobInfo | None = None
    node: NodeInfo | None = None
    detail: str = ""


# --------------------------------------------------------------------------- detection


class Category(StrEnum):
    NCCL_TIMEOUT = "nccl_timeout"
    NCCL_ERROR = "nccl_error"
    CUDA_ERROR = "cuda_error"
    GPU_OOM = "gpu_oom"
    GPU_HARDWARE = "gpu_hardware"
    INTERCONNECT = "interconnect"
    HANG = "hang"
    NODE_FAILURE = "node_failure"
    TIME_LIMIT = "time_limit"
    PREEMPTED = "preempted"
    APP_ERROR = "app_error"
    DATA_IO = "data_io"
    HOST_OOM = "host_oom"
    UNKNOWN = "unknown"  # the job failed and nothing says why (exit code and last lines as evidence)
    NONE = "none"


class FaultDomain(StrEnum):
    HARDWARE = "hardware"
    NETWORK = "network"
    NODE = "node"
    SYSTEM_SOFTWARE = "system_software"
    APPLICATION = "application"
    RESOURCE = "resource"
    SCHEDULER = "scheduler"
    UNKNOWN = "unknown"


class IncidentKind(StrEnum):
    """What the recovery workflow handles as one incident (`detail.incident` of its detection entries)."""

    FAILED = "failed"  # the job ended in a failed state (not preempted)
    PREEMPTED = "preempted"
    SLURM_REQUEUE = "slurm_requeue"  # Slurm (or someone else) requeued the job, jobmedic did not
    FATAL_RUNNING = "fatal_running"  # a fatal line in a running job that then stopped progressing
    HANG = "hang"
    STRAGGLER = "straggler"  # a sustained slowdown: handled apart (workflows/straggler_policy.py), not an interruption


class Implicated(Contract):
    hosts: list[str] = Field(default_factory=list)
    ranks: list[int] = Field(default_factory=list)
    gpus: list[str] = Field(default_factory=list)  # "host:pci" or "host:index"


class Stream(StrEnum):
    """Which of a job's output streams a log line is from."""

    STDOUT = "stdout"
    STDERR = "stderr"
    OUTPUT = "stdout+stderr"  # both streams go to one file (Slurm's default without --error)


class EvidenceLine(Contract):
    """A flagged log line, or a scheduler, node or metric fact a verdict rests on.

    The one type for a flagged line: the screener returns it, the cluster watch
    sends it in an observation, the evidence carries it and the verdict cites it.
    For a log line, `line_no` is its number in its file (1-based, never counted
    from a window) and `stream` says which output it is from.
    """

    source: str = "log"  # log | scheduler | node | metrics | progress | external
    line: str = ""
    line_no: int | None = None
    pattern_id: str | None = None
    host: str | None = None
    rank: int | None = None
    stream: Stream | None = None
    offset: int | None = None  # screener: byte offset of the line's start from where its scan started


def job_streams(job: "JobInfo") -> list[tuple[Stream, str]]:
    """The job's output files, each with the stream(s) it holds (one file when stderr goes to stdout)."""
    out, err = job.stdout_path, job.stderr_path
    if out and err and out != err:
        return [(Stream.STDOUT, out), (Stream.STDERR, err)]
    if out or err:
        return [(Stream.OUTPUT, out or err)]
    return []


class Verdict(Contract):
    category: Category = Category.NONE
    fault_domain: FaultDomain = FaultDomain.UNKNOWN
    implicated: Implicated = Field(default_factory=Implicated)
    confidence: float = 0.0
    evidence: list[EvidenceLine] = Field(default_factory=list)
    explanation: str = ""
    deterministic_signature: str | None = None  # same app error twice -> same signature
    external: dict | None = None  # verdict of an external attribution service, if any


class Progress(Contract):
    """Latest training progress seen in a job's log."""

    iteration: int | None = None
    loss: float | None = None
    throughput: float | None = None  # samples or tokens per second, as logged
    iter_time_s: float | None = None
    checkpoint_iteration: int | None = None
    seen_at: datetime | None = None
    finished: bool = False  # the newest progress line showed done == total (a finished bar)


# --------------------------------------------------------------------------- decision


class AdviceAction(StrEnum):
    NOTHING = "nothing"
    RESTART = "restart"
    RESTART_EXCLUDE = "restart_exclude"
    RESTART_DRAIN = "restart_drain"
    STOP = "stop"
    HOLD = "hold"
    LEAVE_TO_SLURM = "leave_to_slurm"


class Advice(Contract):
    action: AdviceAction = AdviceAction.NOTHING
    rule: str = ""
    reason: str = ""
    exclude_nodes: list[str] = Field(default_factory=list)
    drain_nodes: list[str] = Field(default_factory=list)
    # jobmedic's own earlier exclusions given back, oldest first, so that this failure's node can be kept out
    # of a partition that cannot spare both (policy: node limits, `+readmit`)
    readmit_nodes: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------- logs and evidence


class LogCursor(Contract):
    """Where incremental reading of one log file stands; kept across polls and restarts."""

    path: str
    offset: int = 0
    inode: int | None = None
    line_no: int = 0  # lines consumed before `offset`
    # "<n>:<digest>" of the file's first n bytes: tells a rewritten file from the old one
    # where inodes are unavailable (SFTP) or reused (delete and recreate)
    fingerprint: str | None = None


class StragglerFinding(Contract):
    """Which node slows a straggling job (activities/detection/culprit.py), with the evidence either way."""

    culprits: list[str] = Field(default_factory=list)
    reasons: dict[str, list[str]] = Field(default_factory=dict)  # culprit -> why
    evidence: list[EvidenceLine] = Field(default_factory=list)  # every compared node's figures
    explanation: str = ""
    nodes_compared: int = 0


class JobEvidence(Contract):
    """Everything known about one job at one moment, gathered for attribution.

    Log lines come in one of two shapes. `window` + `hits`: the last lines of each
    output file (flagged or not) with their file line numbers and stream, screened
    once where they were read, their flagged lines in `hits` together with lines the
    cluster watch flagged earlier; the verdict screens none of them again. Or
    `log_lines` (older callers, `jobmedic analyze` of a text): raw lines numbered from
    `log_first_line_no`, screened by the verdict, once.
    """

    job: JobInfo | None = None
    log_lines: list[str] = Field(default_factory=list)  # raw lines, oldest first (screened by the verdict)
    log_first_line_no: int = 1
    window: list[EvidenceLine] = Field(default_factory=list)  # last lines of each stream, oldest first per stream
    hits: list[EvidenceLine] = Field(default_factory=list)  # flagged log lines, one per line and pattern
    nodes: list[NodeInfo] = Field(default_factory=list)  # states of the job's nodes (and others of interest)
    metric_facts: list[EvidenceLine] = Field(default_factory=list)  # GPU metric findings, source="metrics"
    progress: Progress | None = None
    hang_suspected: bool = False
    seconds_since_progress: float | None = None
    straggler: StragglerFinding | None = None  # the slow node(s) of a straggling job, with the evidence
    # cluster-wide view: node -> number of other jobs that failed there recently
    node_failure_counts: dict[str, int] = Field(default_factory=dict)
    collected_at: datetime | None = None

    @model_validator(mode="before")
    @classmethod
    def _legacy_straggler_hosts(cls, data: object) -> object:
        # recorded evidence and corpus sidecars name slow hosts in `straggler_hosts` (now `straggler`)
        if isinstance(data, dict) and data.get("straggler_hosts") and not data.get("straggler"):
            data = {**data, "straggler": {"culprits": list(data["straggler_hosts"])}}
        return data

    @property
    def straggler_hosts(self) -> list[str]:
        return sorted(set(self.straggler.culprits)) if self.straggler is not None else []


# --------------------------------------------------------------------------- policy and audit


class PolicyConfig(Contract):
    """Knobs of the decision policy; a cluster can override any of them."""

    max_attempts: int = 5
    attempts_window_s: float = 24 * 3600
    no_checkpoint_attempts: int = 3
    same_error_stop_after: int = 2
    oom_stop_after: int = 2
    transient_restart_limit: int = 3
    systemic_jobs: int = 5
    systemic_window_s: float = 300.0
    drain_nodes: bool = False
    do_not_restart_exit_code: int = 93
    # stragglers: advice only unless enabled here or by the job's opt-in (workflows/straggler_policy.py)
    straggler_action: bool = False
    straggler_restart_limit: int = 2
    # systemic guard (workflows/systemic.py is the spec of each knob)
    systemic_settle_s: float = 5.0
    systemic_fraction: float = 0.5
    systemic_domain_share: float = 0.8
    systemic_hold_max_s: float = 3600.0
    systemic_probe_s: float = 15.0
    systemic_clear_runtime_s: float = 60.0
    # optional generic JSON webhook for systemic alerts (chat, Alertmanager-style receivers)
    systemic_webhook_url: str | None = None
    systemic_webhook_timeout_s: float = 5.0
    # failure domains beyond Slurm's own: name ("rack:a", "switch:s1") -> its nodes
    topology: dict[str, list[str]] = Field(default_factory=dict)
    # lemon nodes: implicated in failures of several jobs, kept out of every restart
    lemon_jobs: int = 3
    lemon_window_s: float = 3600.0
    lemon_healthy_s: float = 1800.0
    lemon_max_fraction: float = 0.1
    lemon_max_per_window: int = 2
    lemon_drain: bool = False


class EventType(StrEnum):
    DETECTION = "detection"
    ADVICE = "advice"
    ACTION_REQUESTED = "action_requested"
    ACTION_CONFIRMED = "action_confirmed"
    WATCHDOG = "watchdog"
    ALLOCATION_RESTART = "allocation_restart"
    PROGRESS_RESTORED = "progress_restored"
    CHECKPOINT_SAVED = "checkpoint_saved"
    COMPLETED = "completed"
    STOPPED = "stopped"
    INVALID_OPT_IN = "invalid_opt_in"
    MALFORMED_RECORD = "malformed_record"  # the cluster watch skipped a scheduler record it could not read
    LOG_SOURCE_GAP = "log_source_gap"  # the log store could not be read for a while; lines of that time read late
    SYSTEMIC_EVENT = "systemic_event"  # the systemic guard: an event opened (the alert), released, or a cap bit
    LEMON_NODE = "lemon_node"  # the systemic guard: a node became, or stopped being, a lemon


class GuardAction(StrEnum):
    """The `action` of the systemic guard's own audit entries (besides `ActionKind.RELEASE` of an event)."""

    ALERT = "alert"  # a systemic event opened
    LEMON = "lemon"  # a node became a lemon
    CLEARED = "cleared"  # a node stopped being one
    CAP = "cap"  # a node would be a lemon, but a cap bit


class AuditEntry(Contract):
    """One line of the audit trail. `idempotency_key` makes the write exactly-once."""

    idempotency_key: str
    timestamp: datetime
    cluster: str
    job_id: str
    submit_time: datetime | None = None
    attempt: int = 0
    workflow_id: str = ""
    run_id: str = ""
    event_type: EventType
    pattern_id: str | None = None
    line: str | None = None
    category: str | None = None
    fault_domain: str | None = None
    implicated_nodes: list[str] = Field(default_factory=list)
    # an AdviceAction (advice), ActionKind (scheduler actions) or GuardAction value; stored rows keep any string
    action: str | None = None
    mode: str | None = None
    rule: str | None = None
    attribution: dict | None = None
    outcome: str | None = None
    detail: dict | None = None
