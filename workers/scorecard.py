"""The monitor-mode scorecard: what jobmedic advised, against what then happened.

Pure functions: audit entries (any order) and one `Snapshot` per cluster (what
Slurm shows now: `squeue --json` jobs, `sinfo --json` nodes) in, a `Scorecard`
out; no I/O and no clock (callers pass `now`). `jobmedic scorecard` reads both
and prints the result. Every judgement is *as of the snapshot*: a job requeued
later can change it.

Definitions (times are the entries' timestamps, UTC; a job's trail is its
entries sharing (cluster, job id, submit time), as in `workers.report`):

- **Scored advice**: an `advice` entry whose mode is `observe` (in action mode
  jobmedic's own action decides what happens next, so nothing independent is
  left to compare). Straggler advice (`detail.incident == "straggler"`) is left
  out: a slow job is not interrupted. The advice's *incident* is the last
  `detection` before it in its trail; its *attempt* is the entry's `attempt`
  (Slurm's restart count when it was written); its *signature* is (category,
  pattern id). **Not scored** (listed with the reason): `hold` and
  `leave_to_slurm` advice, and advice on a `slurm_requeue` incident (someone
  requeued the job before jobmedic said anything: no prediction is left).
- **After the advice**: the trail's entries at a higher attempt than the
  advice's. *Progress* is the first `checkpoint_saved`, `progress_restored` or
  `completed` among them; a *failure again* is the first `detection` of a
  `failed` or `hang` incident among them (with the signature of the advice
  that follows it). Whichever comes first is what the retry did.
- **Resubmission**: a job in the snapshot with the advised job's name and user
  (known only while Slurm still shows the advised job), another id, submitted
  within `resubmit_window_s` after the advice. It *worked* when Slurm shows it
  COMPLETED or its own trail has a `completed` or `checkpoint_saved` entry.

Each scored check has one result: `agree`, `disagree`, `open` (nothing to
judge yet) or `untested` (nobody tried what jobmedic advised against or for).

- **restart** (restart, restart_exclude, restart_drain): *agree* when the job
  was restarted (by the user or Slurm) and progressed (after the advice:
  progress before a failure again; else Slurm shows it COMPLETED at a higher
  restart count), or a resubmission worked; *disagree* when the restart failed
  again before any progress (or Slurm shows it ended failed at a higher
  restart count, or the only resubmissions failed); *open* while the restarted
  job or a resubmission is still pending or running, or the advised job still
  runs; *untested* when it was neither restarted nor resubmitted.
- **stop**: *agree* when it was retried anyway and failed again the same way
  (same signature) before any progress, or it was not retried at all;
  *disagree* when the retry progressed or completed (or a resubmission
  worked), or failed again another way; *open* while a retry or resubmission
  runs, or failed with no advice in the trail to compare signatures.
- **healthy** (a monitored job with no scored advice other than `nothing` and
  no interruption detected): *agree* when it completed (a `completed` entry,
  or Slurm shows COMPLETED); *disagree* when it ended any other way (a
  `stopped` entry, or Slurm shows another end: a missed failure or a job its
  user gave up on); *open* while it runs or when Slurm no longer shows it and
  the trail does not say how it ended.
- **node** (one check per job and node its observe-mode advice implicated,
  unscored advice included, at the first such advice): *agree* when Slurm
  shows the node drained with a reason jobmedic did not set (not
  `jobmedic: ...`) changed at or after the blame (or at an unknown time), or
  down / failing / not responding, or the audit trail shows other jobs'
  advice implicating it (any time, any mode: the cluster-wide view);
  *disagree* when none of that holds and Slurm shows a job COMPLETED on the
  node that started after the blame (a later attempt of the same job too);
  *open* otherwise.
- **Agreement** of a group (per check kind, per rule, per category, and
  overall): agree / (agree + disagree); None while nothing is decided. Each
  group lists the job ids behind every count. The category is the advice's
  (`gpu_hardware`, `app_error`, ...; `none` for healthy jobs).
- A cluster whose scheduler could not be read has no snapshot: its checks use
  the audit trail alone, and the error is shown.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from pydantic import Field

from adapters.slurm.client import same_job
from workers.report import Figures, _ordered, utc
from workflows.contracts import (
    AdviceAction,
    AuditEntry,
    EventType,
    IncidentKind,
    JobInfo,
    JobKey,
    JobState,
    Mode,
    NodeInfo,
)

RESUBMIT_WINDOW_S = 2 * 3600.0
KINDS = ("restart", "stop", "node", "healthy")
RESULTS = ("agree", "disagree", "open", "untested")
RESTARTS = frozenset({AdviceAction.RESTART, AdviceAction.RESTART_EXCLUDE, AdviceAction.RESTART_DRAIN})
UNSCORED_ACTIONS = frozenset({AdviceAction.HOLD, AdviceAction.LEAVE_TO_SLURM})
INTERRUPTIONS = frozenset({IncidentKind.FAILED, IncidentKind.HANG})
_PROGRESS = (EventType.CHECKPOINT_SAVED, EventType.PROGRESS_RESTORED, EventType.COMPLETED)
_BAD_NODE_STATES = frozenset({"DOWN", "FAIL", "FAILING"})


class Snapshot(Figures):
    """What one cluster's scheduler shows now (empty with `error` when it could not be read)."""

    cluster: str
    taken_at: datetime | None = None
    jobs: list[JobInfo] = Field(default_factory=list)
    nodes: list[NodeInfo] = Field(default_factory=list)
    error: str | None = None


class Check(Figures):
    """One piece of advice (or one healthy job, or one blamed node) against what happened."""

    kind: str  # restart | stop | node | healthy
    cluster: str
    job_id: str
    submit_time: datetime | None = None
    node: str | None = None  # node checks
    rule: str = ""
    category: str = ""
    action: str = ""
    attempt: int = 0
    advised_at: datetime | None = None
    result: str = "open"  # agree | disagree | open | untested
    what_happened: str = ""
    other_jobs: list[str] = Field(default_factory=list)  # resubmissions, other jobs blaming the node


class Tally(Figures):
    """Counts of one group of checks, with the job ids behind each count."""

    group: str
    agree: int = 0
    disagree: int = 0
    open: int = 0
    untested: int = 0
    agreement: float | None = None
    jobs: dict[str, list[str]] = Field(default_factory=dict)  # result -> job ids


class ClusterScore(Figures):
    cluster: str
    snapshot_at: datetime | None = None
    snapshot_error: str | None = None
    overall: Tally
    by_kind: list[Tally] = Field(default_factory=list)
    by_rule: list[Tally] = Field(default_factory=list)
    by_category: list[Tally] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    not_scored: dict[str, list[str]] = Field(default_factory=dict)  # why -> job ids
    action_mode_jobs: list[str] = Field(default_factory=list)


class Scorecard(Figures):
    generated_at: datetime | None = None
    since: datetime | None = None
    clusters: list[ClusterScore] = Field(default_factory=list)


# --------------------------------------------------------------------------- trails


class _Trail(Figures):
    key: JobKey
    entries: list[AuditEntry]


def trails(entries: Iterable[AuditEntry]) -> list[_Trail]:
    """Every job's trail, each in the report's order, in order of first appearance."""
    groups: dict[tuple[str, str, datetime | None], list[AuditEntry]] = {}
    for e in entries:
        if e.event_type is EventType.INVALID_OPT_IN:
            continue
        groups.setdefault((e.cluster, e.job_id, utc(e.submit_time) if e.submit_time else None), []).append(e)
    found = [
        _Trail(key=JobKey(cluster=c, job_id=j, submit_time=s), entries=_ordered(group))
        for (c, j, s), group in groups.items()
    ]
    found.sort(key=lambda t: (t.entries[0].timestamp, t.key.cluster, t.key.job_id))
    return found


def incident_of(trail: list[AuditEntry], index: int) -> str:
    """`detail.incident` of the last detection at or before `trail[index]` ('' when none)."""
    for e in reversed(trail[: index + 1]):
        if e.event_type is EventType.DETECTION:
            value = (e.detail or {}).get("incident")
            return value if isinstance(value, str) else ""
    return ""


def signature(entry: AuditEntry) -> tuple[str, str]:
    """How a failure looked: (category, pattern id)."""
    return entry.category or "", entry.pattern_id or ""


def _is_straggler(entry: AuditEntry) -> bool:
    return (entry.detail or {}).get("incident") == IncidentKind.STRAGGLER


def _observe_advice(trail: list[AuditEntry]) -> list[tuple[int, AuditEntry]]:
    return [
        (i, e) for i, e in enumerate(trail)
        if e.event_type is EventType.ADVICE and e.mode == Mode.OBSERVE and not _is_straggler(e)
    ]


# --------------------------------------------------------------------------- after the advice


class _After(Figures):
    """What the job's own trail shows at higher attempts than the advice's."""

    progress: AuditEntry | None = None
    failure: AuditEntry | None = None  # detection of the first failure again
    failure_advice: AuditEntry | None = None  # the advice on that failure, if any

    @property
    def progressed(self) -> bool:
        return self.progress is not None

    @property
    def failed_again(self) -> bool:
        return self.progress is None and self.failure is not None


def after_advice(trail: list[AuditEntry], index: int) -> _After:
    """Progress or a failure again, whichever came first after `trail[index]` at a higher attempt."""
    attempt = trail[index].attempt
    later = [(i, e) for i, e in enumerate(trail) if i > index and e.attempt > attempt]
    for i, e in later:
        if e.event_type in _PROGRESS:
            return _After(progress=e)
        if e.event_type is EventType.DETECTION and (e.detail or {}).get("incident") in INTERRUPTIONS:
            advice = next((x for x in trail[i + 1:] if x.event_type is EventType.ADVICE), None)
            return _After(failure=e, failure_advice=advice)
    return _After()


def _progress_words(entry: AuditEntry | None) -> str:
    if entry is None:  # `progressed` without the entry: said plainly
        return "progressed again"
    if entry.event_type is EventType.COMPLETED:
        return f"completed (attempt {entry.attempt + 1})"
    return f"progressed again ({entry.outcome or entry.event_type.value}, attempt {entry.attempt + 1})"


def find_job(snapshot: Snapshot | None, key: JobKey) -> JobInfo | None:
    """The job `key` names as Slurm shows it now (a recycled id is another job), or None."""
    if snapshot is None:
        return None
    return next((j for j in snapshot.jobs if same_job(key, j)), None)


def resubmissions(
    snapshot: Snapshot | None, advised: JobInfo | None, *, after: datetime, window_s: float
) -> list[JobInfo]:
    """Jobs with the advised job's name and user, another id, submitted within `window_s` after `after`."""
    if snapshot is None or advised is None or not advised.name or not advised.user:
        return []
    end = after + timedelta(seconds=window_s)
    return [
        j for j in snapshot.jobs
        if j.job_id != advised.job_id and j.name == advised.name and j.user == advised.user
        and j.submit_time is not None and utc(after).replace(microsecond=0) <= utc(j.submit_time) <= end
    ]


def _worked(job: JobInfo, by_id: Mapping[str, list[AuditEntry]]) -> bool | None:
    """True when a resubmission worked, False when it ended otherwise, None while it runs."""
    own = by_id.get(job.job_id, [])
    if job.state is JobState.COMPLETED or any(e.event_type in _PROGRESS for e in own):
        return True
    if job.state.finished:
        return False
    return None


def _judge_resubmissions(resubs: list[JobInfo], by_id: Mapping[str, list[AuditEntry]]) -> tuple[str, list[str]] | None:
    """('worked' | 'failed' | 'running', job ids) of the resubmissions; None when there are none."""
    if not resubs:
        return None
    outcomes = {j.job_id: _worked(j, by_id) for j in resubs}
    for label, value in (("worked", True), ("running", None), ("failed", False)):
        ids = sorted(i for i, v in outcomes.items() if v is value)
        if ids:
            return label, ids
    return None


# --------------------------------------------------------------------------- the four checks


def _base(kind: str, trail: _Trail, advice: AuditEntry | None) -> dict:
    return dict(
        kind=kind, cluster=trail.key.cluster, job_id=trail.key.job_id, submit_time=trail.key.submit_time,
        rule=(advice.rule or "") if advice else "no_advice", category=(advice.category or "") if advice else "none",
        action=(advice.action or "") if advice else "", attempt=advice.attempt if advice else 0,
        advised_at=advice.timestamp if advice else None,
    )


def restart_check(
    trail: _Trail, index: int, *, snapshot: Snapshot | None, by_id: Mapping[str, list[AuditEntry]], window_s: float
) -> Check:
    advice = trail.entries[index]
    base = _base("restart", trail, advice)
    after = after_advice(trail.entries, index)
    if after.progressed:
        return Check(**base, result="agree", what_happened=f"restarted and {_progress_words(after.progress)}")
    if after.failed_again:
        how = after.failure_advice.category if after.failure_advice else "?"
        return Check(**base, result="disagree", what_happened=f"restarted and failed again before any progress ({how})")
    now = find_job(snapshot, trail.key)
    if now is not None and now.restarts > advice.attempt:
        if now.state is JobState.COMPLETED:
            return Check(**base, result="agree", what_happened=f"restarted; Slurm shows it COMPLETED (restarts {now.restarts})")
        if now.state.finished:
            return Check(**base, result="disagree", what_happened=f"restarted; Slurm shows it {now.state.value} again")
        return Check(**base, result="open", what_happened=f"restarted, {now.state.value}, no progress seen yet")
    resub = _judge_resubmissions(resubmissions(snapshot, now, after=advice.timestamp, window_s=window_s), by_id)
    if resub is not None:
        label, ids = resub
        result = {"worked": "agree", "failed": "disagree", "running": "open"}[label]
        return Check(**base, result=result, other_jobs=ids,
                     what_happened=f"resubmitted as job {', '.join(ids)}, which {_resub_words(label)}")
    if now is not None and not now.state.finished:
        return Check(**base, result="open", what_happened=f"not restarted yet; Slurm shows it {now.state.value}")
    return Check(**base, result="untested", what_happened=_not_retried(now, snapshot, "restarted or resubmitted"))


def stop_check(
    trail: _Trail, index: int, *, snapshot: Snapshot | None, by_id: Mapping[str, list[AuditEntry]], window_s: float
) -> Check:
    advice = trail.entries[index]
    base = _base("stop", trail, advice)
    after = after_advice(trail.entries, index)
    if after.progressed:
        return Check(**base, result="disagree", what_happened=f"retried anyway and {_progress_words(after.progress)}")
    if after.failed_again:
        if after.failure_advice is None:
            return Check(**base, result="open", what_happened="retried and failed again; no advice to compare with")
        if signature(after.failure_advice) == signature(advice):
            return Check(**base, result="agree", what_happened=(
                f"retried anyway and failed again the same way ({_sig_words(advice)})"))
        return Check(**base, result="disagree", what_happened=(
            f"retried and failed another way ({_sig_words(after.failure_advice)}, not {_sig_words(advice)})"))
    now = find_job(snapshot, trail.key)
    if now is not None and now.restarts > advice.attempt:
        if now.state is JobState.COMPLETED:
            return Check(**base, result="disagree", what_happened="retried anyway; Slurm shows it COMPLETED")
        return Check(**base, result="open", what_happened=f"retried anyway, {now.state.value}; nothing to compare yet")
    resub = _judge_resubmissions(resubmissions(snapshot, now, after=advice.timestamp, window_s=window_s), by_id)
    if resub is not None:
        label, ids = resub
        if label == "worked":
            return Check(**base, result="disagree", other_jobs=ids,
                         what_happened=f"resubmitted as job {', '.join(ids)}, which worked")
        same = _resubmission_failed_same_way(ids, advice, by_id) if label == "failed" else False
        if same:
            return Check(**base, result="agree", other_jobs=ids,
                         what_happened=f"resubmitted as job {', '.join(ids)}, which failed the same way")
        return Check(**base, result="open", other_jobs=ids,
                     what_happened=f"resubmitted as job {', '.join(ids)}, which {_resub_words(label)}")
    return Check(**base, result="agree", what_happened=_not_retried(now, snapshot, "retried"))


def _resubmission_failed_same_way(ids: list[str], advice: AuditEntry, by_id: Mapping[str, list[AuditEntry]]) -> bool:
    return any(
        e.event_type is EventType.ADVICE and not _is_straggler(e) and signature(e) == signature(advice)
        for i in ids for e in by_id.get(i, [])
    )


def healthy_check(trail: _Trail, *, snapshot: Snapshot | None, advice: AuditEntry | None) -> Check:
    base = _base("healthy", trail, advice)
    kinds = {e.event_type for e in trail.entries}
    if EventType.COMPLETED in kinds:
        return Check(**base, result="agree", what_happened="completed")
    stopped = next((e for e in trail.entries if e.event_type is EventType.STOPPED), None)
    now = find_job(snapshot, trail.key)
    if now is not None and now.state is JobState.COMPLETED:
        return Check(**base, result="agree", what_happened="Slurm shows it COMPLETED")
    if now is not None and now.state.finished:
        return Check(**base, result="disagree", what_happened=f"ended {now.state.value} (exit code {now.exit_code})")
    if stopped is not None:
        return Check(**base, result="disagree", what_happened=f"ended without completing: {stopped.outcome or 'stopped'}")
    if now is not None:
        return Check(**base, result="open", what_happened=f"still {now.state.value}")
    return Check(**base, result="open", what_happened=(
        "Slurm was not read" if snapshot is None else "Slurm no longer shows it; the trail does not say how it ended"))


def node_checks(
    trail: _Trail, *, snapshot: Snapshot | None, blames: Mapping[str, list[tuple[str, datetime]]]
) -> list[Check]:
    """One check per node this job's observe-mode advice implicated (at its first blame)."""
    checks: list[Check] = []
    seen: set[str] = set()
    for _, advice in _observe_advice(trail.entries):
        for node in advice.implicated_nodes:
            if node in seen:
                continue
            seen.add(node)
            base = _base("node", trail, advice)
            result, words, others = _judge_node(node, advice.timestamp, trail.key.job_id, snapshot, blames)
            checks.append(Check(**base, node=node, result=result, what_happened=words, other_jobs=others))
    return checks


def _judge_node(
    node: str, blamed_at: datetime, job_id: str, snapshot: Snapshot | None,
    blames: Mapping[str, list[tuple[str, datetime]]],
) -> tuple[str, str, list[str]]:
    info = next((n for n in snapshot.nodes if n.name == node), None) if snapshot else None
    since = utc(blamed_at).replace(microsecond=0)  # Slurm's reason time has one-second resolution
    if info is not None and info.drained and not info.drained_by_jobmedic:
        if info.reason_time is None or utc(info.reason_time) >= since:
            who = f" by {info.reason_user}" if info.reason_user else ""
            return "agree", f"drained{who}: {info.reason or '(no reason)'}", []
    if info is not None and not info.drained_by_jobmedic and (
        info.state in _BAD_NODE_STATES or "NOT_RESPONDING" in info.flags
    ):
        return "agree", f"{'+'.join([info.state, *info.flags])}: {info.reason or '(no reason)'}", []
    others = sorted({j for j, _ in blames.get(node, []) if j != job_id})
    if others:
        return "agree", f"also implicated in the failures of job {', '.join(others)}", others
    completed = sorted(
        j.job_id for j in (snapshot.jobs if snapshot else [])
        if j.state is JobState.COMPLETED and node in j.nodes and j.start_time is not None
        and utc(j.start_time) >= since
    )
    if completed:
        return "disagree", f"job {', '.join(completed)} completed on it since", completed
    if snapshot is None:
        return "open", "Slurm was not read; no other job implicated it", []
    return "open", "not drained, no other job implicated it, no job completed on it since", []


def _not_retried(now: JobInfo | None, snapshot: Snapshot | None, what: str) -> str:
    if snapshot is None:
        return f"not {what} as far as the trail shows (Slurm was not read)"
    if now is None:
        return f"not {what}; Slurm no longer shows the job"
    return f"not {what}; Slurm shows it {now.state.value}"


def _resub_words(label: str) -> str:
    return {"worked": "worked", "failed": "failed", "running": "is still pending or running"}[label]


def _sig_words(entry: AuditEntry) -> str:
    category, pattern = signature(entry)
    return f"{category or '?'}/{pattern}" if pattern else (category or "?")


# --------------------------------------------------------------------------- per cluster


def job_checks(
    trail: _Trail, *, snapshot: Snapshot | None, by_id: Mapping[str, list[AuditEntry]],
    blames: Mapping[str, list[tuple[str, datetime]]], window_s: float,
) -> tuple[list[Check], list[str]]:
    """The checks of one monitored job, and why its other advice was not scored."""
    entries = trail.entries
    checks: list[Check] = []
    unscored: list[str] = []
    nothing: AuditEntry | None = None
    for index, advice in _observe_advice(entries):
        action = advice.action or ""
        if incident_of(entries, index) == IncidentKind.SLURM_REQUEUE:
            unscored.append("advice after someone else's requeue (slurm_requeue)")
        elif action in UNSCORED_ACTIONS:
            unscored.append(f"{action} advice")
        elif action in RESTARTS:
            checks.append(restart_check(trail, index, snapshot=snapshot, by_id=by_id, window_s=window_s))
        elif action == AdviceAction.STOP:
            checks.append(stop_check(trail, index, snapshot=snapshot, by_id=by_id, window_s=window_s))
        elif action == AdviceAction.NOTHING:
            nothing = nothing or advice
        else:
            unscored.append(f"{action or 'unnamed'} advice")
    interrupted = any(
        e.event_type is EventType.DETECTION and (e.detail or {}).get("incident") not in (None, IncidentKind.STRAGGLER)
        for e in entries
    )
    if not checks and not unscored and (nothing is not None or not interrupted):
        checks.append(healthy_check(trail, snapshot=snapshot, advice=nothing))
    elif not checks and not unscored and interrupted:
        unscored.append("interruption detected, no advice (watchdog)")
    checks += node_checks(trail, snapshot=snapshot, blames=blames)
    return checks, unscored


def tally(group: str, checks: Iterable[Check]) -> Tally:
    """Counts, agreement and the job ids behind each count."""
    jobs: dict[str, set[str]] = defaultdict(set)
    counts = dict.fromkeys(RESULTS, 0)
    for c in checks:
        counts[c.result] += 1
        jobs[c.result].add(c.job_id)
    decided = counts["agree"] + counts["disagree"]
    return Tally(
        group=group, **counts, agreement=counts["agree"] / decided if decided else None,
        jobs={r: sorted(jobs[r], key=_job_order) for r in RESULTS if jobs[r]},
    )


def _job_order(job_id: str) -> tuple[int, str]:
    head = job_id.split("_", 1)[0]
    return (int(head), job_id) if head.isdigit() else (1 << 62, job_id)


def _grouped(checks: list[Check], by: str) -> list[Tally]:
    groups: dict[str, list[Check]] = defaultdict(list)
    for c in checks:
        groups[getattr(c, by) or "-"].append(c)
    order = sorted(groups, key=lambda g: (KINDS.index(g) if by == "kind" and g in KINDS else 99, g))
    return [tally(g, groups[g]) for g in order]


def cluster_score(
    cluster: str, cluster_trails: list[_Trail], *, snapshot: Snapshot | None, window_s: float
) -> ClusterScore:
    by_id: dict[str, list[AuditEntry]] = defaultdict(list)
    blames: dict[str, list[tuple[str, datetime]]] = defaultdict(list)
    for t in cluster_trails:
        by_id[t.key.job_id] += t.entries
        for e in t.entries:
            if e.event_type is EventType.ADVICE and not _is_straggler(e):
                for node in e.implicated_nodes:
                    blames[node].append((t.key.job_id, e.timestamp))
    usable = snapshot if snapshot is not None and snapshot.error is None else None
    checks: list[Check] = []
    not_scored: dict[str, set[str]] = defaultdict(set)
    action_jobs: list[str] = []
    for t in cluster_trails:
        if any(e.mode == Mode.ACTION for e in t.entries):
            action_jobs.append(t.key.job_id)
            continue
        found, unscored = job_checks(t, snapshot=usable, by_id=by_id, blames=blames, window_s=window_s)
        checks += found
        for why in unscored:
            not_scored[why].add(t.key.job_id)
    return ClusterScore(
        cluster=cluster,
        snapshot_at=usable.taken_at if usable else None,
        snapshot_error=(snapshot.error or None) if snapshot is not None else "Slurm was not read",
        overall=tally("all", checks),
        by_kind=_grouped(checks, "kind"),
        by_rule=_grouped(checks, "rule"),
        by_category=_grouped(checks, "category"),
        checks=checks,
        not_scored={why: sorted(ids, key=_job_order) for why, ids in sorted(not_scored.items())},
        action_mode_jobs=sorted(set(action_jobs), key=_job_order),
    )


def build_scorecard(
    entries: Iterable[AuditEntry],
    snapshots: Iterable[Snapshot] = (),
    *,
    now: datetime | None = None,
    since: datetime | None = None,
    resubmit_window_s: float = RESUBMIT_WINDOW_S,
) -> Scorecard:
    """The scorecard of every cluster in `entries`, judged against its snapshot (if any)."""
    by_cluster: dict[str, list[_Trail]] = defaultdict(list)
    for t in trails(entries):
        by_cluster[t.key.cluster].append(t)
    shots = {s.cluster: s for s in snapshots}
    clusters = [
        cluster_score(name, by_cluster[name], snapshot=shots.get(name), window_s=resubmit_window_s)
        for name in sorted(by_cluster)
    ]
    return Scorecard(generated_at=utc(now) if now else None, since=utc(since) if since else None, clusters=clusters)
