"""jobmedic's figures about itself, computed from the audit trail alone.

Pure functions: a list of `AuditEntry` (in any order) in, per-job and
per-cluster figures out; no I/O and no clock (callers pass `now`). The
`jobmedic report` command and the Prometheus endpoint both call `build_report`.

Definitions (all times are the entries' timestamps; a naive time means UTC):

- **Job**: the entries sharing (cluster, job id, submit time), i.e. one job
  workflow's trail. `invalid_opt_in` entries belong to no monitored job and are
  left out.
- **Incident**: one `detection` entry. Detections whose `detail.incident` is
  `straggler` are counted apart (`stragglers`): a slow job is not interrupted
  and nothing is recovered. An incident's *window* runs from its detection to the
  job's next incident (or the end of the trail).
- **Detection latency**: detection timestamp - `detail.failure_at` (Slurm's
  EndTime for a failed job, one-second resolution, so +-1 s; the last progress
  time for a hang). Skipped when `failure_at` is missing or unreadable. Clock
  skew between the Slurm controller and the worker shows up as is (it can be
  slightly negative).
- **Action latency** (detected -> action confirmed by the scheduler): the first
  `action_confirmed` entry in the window whose action is `release` or `cancel`,
  minus the detection timestamp. A hold or an exclusion alone is not the end of
  the action; a watchdog's fail-open release is not counted either (it is the
  watchdog's outcome, not a recovery action).
- **Action to running**: first `allocation_restart` after the release, minus the
  release confirmation.
- **Time to restore** productive training: the first `progress_restored` in the
  window minus the `release` confirmation (None without both).
- **Outcome** of an incident, decided in its window, first match wins:
  `restored` (a `progress_restored`), `completed` (a `completed`), `stopped`
  (a `stopped`), `watchdog` (a `watchdog`), `superseded` (another incident came
  before training resumed), else `open` (still in progress, or observe mode on
  a job that has not ended). **Recovery success** = restored + completed;
  **failed** = stopped + watchdog + superseded; the success rate is
  success / (success + failed), None while nothing is resolved.
- **Retries stopped**: `advice` entries whose action is `stop`, counted by rule
  (in observe mode this is advice to stop; the entry's mode tells them apart).
- **ETTR** (effective training time ratio) is an *estimate from audit events*:
  productive time / observed wall time. The observed span runs from the first
  entry (or an earlier `failure_at`) to the job's `completed`/`stopped` entry,
  or, for a job still running, to `now` (the last entry when `now` is not
  given). Unproductive time is the union of each incident's interval from its
  failure (`failure_at`, else the detection) to the first sign of training
  after it: `progress_restored`, `checkpoint_saved` (in observe mode the only
  sign; an upper bound, the checkpoint was written after training resumed) or
  `completed`; else the job's stop or the span's end. A job with no incident has ETTR 1.0 over its
  observed span; training before the first audit entry is not seen at all.
- **Per cluster**: counts and sums over its jobs; latencies as count, median,
  p95 (linear interpolation between closest ranks) and max; ETTR as the ratio
  of sums (sum productive / sum wall), so long jobs weigh more.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from workflows.contracts import ActionKind, AdviceAction, AuditEntry, EventType, IncidentKind

RECOVERY_ACTIONS = frozenset({ActionKind.RELEASE, ActionKind.CANCEL})
NOT_INTERRUPTIONS = frozenset({IncidentKind.STRAGGLER})
SUCCESS_OUTCOMES = ("restored", "completed")
FAILURE_OUTCOMES = ("stopped", "watchdog", "superseded")
OUTCOMES = (*SUCCESS_OUTCOMES, *FAILURE_OUTCOMES, "open")

# ties (same timestamp) are ordered as the recovery workflow writes them
_EVENT_ORDER = {
    EventType.DETECTION: 0,
    EventType.ADVICE: 1,
    EventType.ACTION_REQUESTED: 2,
    EventType.ACTION_CONFIRMED: 3,
    EventType.WATCHDOG: 4,
    EventType.ALLOCATION_RESTART: 5,
    EventType.PROGRESS_RESTORED: 6,
    EventType.CHECKPOINT_SAVED: 7,
    EventType.STOPPED: 8,
    EventType.COMPLETED: 9,
    EventType.INVALID_OPT_IN: 10,
}
_ENDS = (EventType.COMPLETED, EventType.STOPPED)
_TRAINING_SIGNS = (EventType.PROGRESS_RESTORED, EventType.CHECKPOINT_SAVED, EventType.COMPLETED, EventType.STOPPED)


class Figures(BaseModel):
    model_config = ConfigDict(frozen=True)


class Incident(Figures):
    """One detected interruption of one job and what followed it."""

    cluster: str
    job_id: str
    kind: str = ""  # detail.incident: failed, hang, preempted, slurm_requeue, ...
    detected_at: datetime
    failure_at: datetime | None = None
    detection_latency_s: float | None = None
    action: str | None = None  # release or cancel
    action_at: datetime | None = None
    action_latency_s: float | None = None
    running_at: datetime | None = None
    action_to_running_s: float | None = None
    restored_at: datetime | None = None
    restore_s: float | None = None
    outcome: str = "open"
    downtime_s: float = 0.0  # this incident's unproductive interval (overlaps merged at job level)

    @property
    def succeeded(self) -> bool:
        return self.outcome in SUCCESS_OUTCOMES

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURE_OUTCOMES


class JobFigures(Figures):
    """Figures of one job (one workflow's audit trail)."""

    cluster: str
    job_id: str
    submit_time: datetime | None = None
    first_seen: datetime
    last_seen: datetime
    span_end: datetime
    ended: str | None = None  # completed | stopped | None while the job is still followed
    incidents: list[Incident] = Field(default_factory=list)
    stragglers: int = 0
    retries_stopped: dict[str, int] = Field(default_factory=dict)  # rule -> count
    wall_s: float = 0.0
    productive_s: float = 0.0
    ettr: float = 1.0

    @property
    def outcomes(self) -> dict[str, int]:
        return _count_outcomes(self.incidents)


class LatencySummary(Figures):
    """Count, median, p95 and max of one latency, in seconds (None without samples)."""

    count: int = 0
    median_s: float | None = None
    p95_s: float | None = None
    max_s: float | None = None


class ClusterFigures(Figures):
    """Aggregates over the jobs of one cluster."""

    cluster: str
    jobs: int = 0
    incidents: int = 0
    stragglers: int = 0
    outcomes: dict[str, int] = Field(default_factory=dict)
    succeeded: int = 0
    failed: int = 0
    open: int = 0
    success_rate: float | None = None
    detection_latency: LatencySummary = Field(default_factory=LatencySummary)
    action_latency: LatencySummary = Field(default_factory=LatencySummary)
    action_to_running: LatencySummary = Field(default_factory=LatencySummary)
    time_to_restore: LatencySummary = Field(default_factory=LatencySummary)
    retries_stopped: dict[str, int] = Field(default_factory=dict)
    retries_stopped_total: int = 0
    wall_s: float = 0.0
    productive_s: float = 0.0
    ettr: float | None = None


class Report(Figures):
    generated_at: datetime | None = None
    since: datetime | None = None
    clusters: list[ClusterFigures] = Field(default_factory=list)
    jobs: list[JobFigures] = Field(default_factory=list)


# --------------------------------------------------------------------------- helpers


def utc(value: datetime) -> datetime:
    """`value` as an aware UTC time; naive means UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def parse_time(value: object) -> datetime | None:
    """An ISO time from an entry's detail as aware UTC, or None when missing or unreadable."""
    if isinstance(value, datetime):
        return utc(value)
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return utc(datetime.fromisoformat(value.strip().replace("Z", "+00:00")))
    except ValueError:
        return None


def seconds(start: datetime | None, end: datetime | None) -> float | None:
    """end - start in seconds (microsecond precision), None when either is missing."""
    if start is None or end is None:
        return None
    return (end - start).total_seconds()


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear interpolation between closest ranks; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = math.ceil(pos)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summarize(values: Iterable[float | None]) -> LatencySummary:
    samples = [v for v in values if v is not None]
    if not samples:
        return LatencySummary()
    return LatencySummary(
        count=len(samples), median_s=percentile(samples, 50), p95_s=percentile(samples, 95), max_s=max(samples)
    )


def _kind(entry: AuditEntry) -> str:
    value = (entry.detail or {}).get("incident")
    return value if isinstance(value, str) else ""


def _is_incident(entry: AuditEntry) -> bool:
    return entry.event_type is EventType.DETECTION and _kind(entry) not in NOT_INTERRUPTIONS


def _count_outcomes(incidents: Iterable[Incident]) -> dict[str, int]:
    counts = Counter(i.outcome for i in incidents)
    return {o: counts.get(o, 0) for o in OUTCOMES}


def _first(entries: Iterable[AuditEntry], *kinds: EventType, actions: frozenset[str] | None = None) -> AuditEntry | None:
    for e in entries:
        if e.event_type in kinds and (actions is None or e.action in actions):
            return e
    return None


def _ordered(entries: Iterable[AuditEntry]) -> list[AuditEntry]:
    indexed = list(enumerate(entries))
    indexed.sort(key=lambda pair: (utc(pair[1].timestamp), _EVENT_ORDER.get(pair[1].event_type, 99), pair[0]))
    return [e if _is_utc(e.timestamp) else e.model_copy(update={"timestamp": utc(e.timestamp)}) for _, e in indexed]


def _is_utc(value: datetime) -> bool:
    return value.tzinfo is not None and value.utcoffset() == timedelta(0)


def _union_length(intervals: Iterable[tuple[datetime, datetime]], lo: datetime, hi: datetime) -> float:
    """Seconds covered by the union of `intervals`, clipped to [lo, hi]."""
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in intervals)
    total = 0.0
    cur_start: datetime | None = None
    cur_end: datetime | None = None
    for a, b in clipped:
        if b <= a:
            continue
        if cur_end is None or a > cur_end:
            if cur_start is not None and cur_end is not None:
                total += (cur_end - cur_start).total_seconds()
            cur_start, cur_end = a, b
        else:
            cur_end = max(cur_end, b)
    if cur_start is not None and cur_end is not None:
        total += (cur_end - cur_start).total_seconds()
    return total


# --------------------------------------------------------------------------- per job


def job_figures(entries: Iterable[AuditEntry], *, now: datetime | None = None) -> list[JobFigures]:
    """Figures of every job in `entries` (any order), in order of first appearance in the trail."""
    groups: dict[tuple[str, str, datetime | None], list[AuditEntry]] = {}
    for e in entries:
        if e.event_type is EventType.INVALID_OPT_IN:
            continue
        key = (e.cluster, e.job_id, utc(e.submit_time) if e.submit_time else None)
        groups.setdefault(key, []).append(e)
    jobs = [_one_job(key, _ordered(group), now=utc(now) if now else None) for key, group in groups.items()]
    jobs.sort(key=lambda j: (j.first_seen, j.cluster, j.job_id))
    return jobs


def _one_job(
    key: tuple[str, str, datetime | None], trail: list[AuditEntry], *, now: datetime | None
) -> JobFigures:
    cluster, job_id, submit_time = key
    starts = [i for i, e in enumerate(trail) if _is_incident(e)]
    end_entry = next((e for e in reversed(trail) if e.event_type in _ENDS), None)
    first_seen, last_seen = trail[0].timestamp, trail[-1].timestamp
    if end_entry is not None or now is None:
        span_end = last_seen
    else:
        span_end = max(last_seen, now)

    incidents: list[Incident] = []
    down: list[tuple[datetime, datetime]] = []
    for n, start in enumerate(starts):
        stop = starts[n + 1] if n + 1 < len(starts) else len(trail)
        incident, interval = _one_incident(trail, start, stop, span_end=span_end, superseded=stop < len(trail))
        incidents.append(incident)
        down.append(interval)

    span_start = min([first_seen, *(i.failure_at for i in incidents if i.failure_at)])
    wall = (span_end - span_start).total_seconds()
    downtime = _union_length(down, span_start, span_end)
    productive = max(0.0, wall - downtime)
    stops = Counter(
        (e.rule or "unknown") for e in trail if e.event_type is EventType.ADVICE and e.action == AdviceAction.STOP
    )
    return JobFigures(
        cluster=cluster,
        job_id=job_id,
        submit_time=submit_time,
        first_seen=span_start,
        last_seen=last_seen,
        span_end=span_end,
        ended=end_entry.event_type.value if end_entry else None,
        incidents=incidents,
        stragglers=sum(1 for e in trail if e.event_type is EventType.DETECTION and not _is_incident(e)),
        retries_stopped=dict(sorted(stops.items())),
        wall_s=wall,
        productive_s=productive,
        ettr=productive / wall if wall > 0 else 1.0,
    )


def _one_incident(
    trail: list[AuditEntry], start: int, stop: int, *, span_end: datetime, superseded: bool
) -> tuple[Incident, tuple[datetime, datetime]]:
    detection = trail[start]
    window = trail[start + 1 : stop]
    detected_at = detection.timestamp
    failure_at = parse_time((detection.detail or {}).get("failure_at"))

    action = _first(window, EventType.ACTION_CONFIRMED, actions=RECOVERY_ACTIONS)
    release = action if action is not None and action.action == ActionKind.RELEASE else None
    after_release = window[next(k for k, e in enumerate(window) if e is release) + 1 :] if release else []
    running = _first(after_release, EventType.ALLOCATION_RESTART)
    restored = _first(window, EventType.PROGRESS_RESTORED)

    kinds = {e.event_type for e in window}
    if restored is not None:
        outcome = "restored"
    elif EventType.COMPLETED in kinds:
        outcome = "completed"
    elif EventType.STOPPED in kinds:
        outcome = "stopped"
    elif EventType.WATCHDOG in kinds:
        outcome = "watchdog"
    elif superseded:
        outcome = "superseded"
    else:
        outcome = "open"

    # unproductive from the failure until training shows again, looking past this window:
    # a superseded incident's downtime runs on into the next one (the union merges them)
    down_start = min(failure_at, detected_at) if failure_at else detected_at
    sign = _first(trail[start + 1 :], *_TRAINING_SIGNS)
    down_end = max(down_start, sign.timestamp if sign is not None else span_end)

    incident = Incident(
        cluster=detection.cluster,
        job_id=detection.job_id,
        kind=_kind(detection),
        detected_at=detected_at,
        failure_at=failure_at,
        detection_latency_s=seconds(failure_at, detected_at),
        action=action.action if action else None,
        action_at=action.timestamp if action else None,
        action_latency_s=seconds(detected_at, action.timestamp if action else None),
        running_at=running.timestamp if running else None,
        action_to_running_s=seconds(release.timestamp if release else None, running.timestamp if running else None),
        restored_at=restored.timestamp if restored else None,
        restore_s=seconds(release.timestamp if release else None, restored.timestamp if restored else None),
        outcome=outcome,
        downtime_s=(down_end - down_start).total_seconds(),
    )
    return incident, (down_start, down_end)


# --------------------------------------------------------------------------- per cluster


def cluster_figures(jobs: Iterable[JobFigures]) -> list[ClusterFigures]:
    """Aggregates per cluster, sorted by cluster name."""
    by_cluster: dict[str, list[JobFigures]] = {}
    for job in jobs:
        by_cluster.setdefault(job.cluster, []).append(job)
    return [_one_cluster(name, by_cluster[name]) for name in sorted(by_cluster)]


def _one_cluster(name: str, jobs: list[JobFigures]) -> ClusterFigures:
    incidents = [i for j in jobs for i in j.incidents]
    outcomes = _count_outcomes(incidents)
    succeeded = sum(outcomes[o] for o in SUCCESS_OUTCOMES)
    failed = sum(outcomes[o] for o in FAILURE_OUTCOMES)
    stops: Counter[str] = Counter()
    for j in jobs:
        stops.update(j.retries_stopped)
    wall = sum(j.wall_s for j in jobs)
    productive = sum(j.productive_s for j in jobs)
    return ClusterFigures(
        cluster=name,
        jobs=len(jobs),
        incidents=len(incidents),
        stragglers=sum(j.stragglers for j in jobs),
        outcomes=outcomes,
        succeeded=succeeded,
        failed=failed,
        open=outcomes["open"],
        success_rate=succeeded / (succeeded + failed) if succeeded + failed else None,
        detection_latency=summarize(i.detection_latency_s for i in incidents),
        action_latency=summarize(i.action_latency_s for i in incidents),
        action_to_running=summarize(i.action_to_running_s for i in incidents),
        time_to_restore=summarize(i.restore_s for i in incidents),
        retries_stopped=dict(sorted(stops.items())),
        retries_stopped_total=sum(stops.values()),
        wall_s=wall,
        productive_s=productive,
        ettr=(productive / wall if wall > 0 else 1.0) if jobs else None,
    )


def build_report(
    entries: Iterable[AuditEntry], *, now: datetime | None = None, since: datetime | None = None
) -> Report:
    """Per-job and per-cluster figures of `entries`; `now` ends the span of jobs still running."""
    jobs = job_figures(entries, now=now)
    return Report(
        generated_at=utc(now) if now else None,
        since=utc(since) if since else None,
        clusters=cluster_figures(jobs),
        jobs=jobs,
    )


# --------------------------------------------------------------------------- the demo's figures


def first_recovery_figures(entries: Iterable[AuditEntry]) -> dict[str, float | None]:
    """The demo's four figures for the first incident in `entries` (one job), rounded to 0.01 s."""
    incidents = [i for j in job_figures(entries) for i in j.incidents]
    first = min(incidents, key=lambda i: i.detected_at) if incidents else None

    def r(value: float | None) -> float | None:
        return round(value, 2) if value is not None else None

    return {
        "failure_to_detection_s": r(first.detection_latency_s) if first else None,
        "detection_to_action_confirmed_s": r(first.action_latency_s) if first else None,
        # as the watch saw it (it polls once a second in the demo)
        "action_to_running_s": r(first.action_to_running_s) if first else None,
        "action_to_progress_s": r(first.restore_s) if first else None,
    }
