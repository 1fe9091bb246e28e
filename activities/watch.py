"""The cluster watch activity: one batched scheduler query per interval for every opted-in job.

It reads each running job's logs incrementally, screens the new lines, tracks
progress for hang detection, and signals a job's recovery workflow only when
something changed (signal-with-start, so the first signal starts it). Its state
(cursors, last states) is kept per job in the audit database's `watch_state`
table (activities/watch_state.py), written after every pass: a replacement
worker resumes from there, and job workflows ignore what they have already
seen. The heartbeat carries a few counters, whatever the number of jobs.

Sharding: a cluster's watch runs `shards` activities (workflows/cluster_watch.py);
shard i watches the jobs whose stable job-id hash says i (`rows.shard_of`), so
more workers share one cluster and each pass covers 1/shards of the jobs. Every
shard still sees the whole listing (the cluster-wide failure view needs it);
shards in one worker share one `squeue` per moment (`_SharedListing`), so the
scheduler is asked about once per interval per worker, not once per shard.
A listing record that cannot be read is skipped and audited once
(`EventType.MALFORMED_RECORD`); the other jobs are watched as usual.

Hangs need evidence (`activities/detection/hang.py`): a job's progress is read
from the strongest source it has shown - its opt-in's `progress_pattern`, a
recognised framework format, or a line template learned from its own output -
and a job with none of them is watched for crashes only, unless a
communication-hang line or DCGM (every GPU idle over the bound) says otherwise.
What each job is watched on (`WatchedJob.hang_watch`) is kept in its state row,
where `jobmedic jobs` reads it.

Stragglers: a sustained drop of the job's logged throughput against its own
baseline (`activities/detection/straggler.py`). A rate logged right after a
checkpoint save holds the save and is not judged; which rates those are is read
from line positions (the save's lines right before the progress line), never
from the poll: a poll that sees a save and a later progress line says nothing
about that line's own timing. While a slow run lasts the watch keeps the per-rank
timings the job prints (`rank_timing.py`) and when it started (`slow_since`);
once it is sustained it names the slow node (`straggler_culprit`: per-node DCGM
series over the slow window and those timings) and sends the finding with the
observation, once per episode.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any, Protocol, cast

from loguru import logger
from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.client import Client
from temporalio.common import Priority, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from adapters.audit.rows import shard_of
from adapters.errors import JobmedicError, LogSourceError
from adapters.logs.files import source_streams
from workflows.console import recovery_details, recovery_summary
from adapters.slurm.parse import SkippedRecord, SqueueListing
from activities.detection.hang import (
    COMM_HANG_CATEGORIES,
    ProgressSignal,
    ProgressTracker,
    all_gpus_idle,
    hang_evidence,
    hang_watch_label,
)
from activities.detection.progress import (
    MIN_TEMPLATE_GROWTHS,
    LearnedProgress,
    ProgressSample,
    learn_progress,
    user_progress,
)
from activities.detection.rank_timing import RankTiming, keep_recent, parse_rank_timings
from activities.detection.straggler import NodeTelemetrySource, culprit_window, detect_slowdown, straggler_culprit
from activities.screening import LogScreen, ScreenOutcome
from activities.watch_state import ShardKeeper, WatchStatePort
from activities.watch_wake import PollWaker
from workflows.contracts import (
    AuditEntry,
    EventType,
    EvidenceLine,
    JobInfo,
    JobKey,
    JobState,
    LogCursor,
    Progress,
    StragglerFinding,
)
from workflows.messages import (
    ActivityNames,
    JobObservation,
    JobRecoveryInput,
    ObservationReason,
    SignalNames,
    WatchInput,
    recovery_query,
)

MAX_READS_PER_POLL = 8  # bounded catch-up per job per poll; the rest waits for the next poll
HEARTBEAT_EVERY_S = 2.0  # during a long poll (many jobs), record progress this often
GONE_AFTER_POLLS = 3  # a job missing from this many listings in a row has left the scheduler
KEEP_SAMPLES = 32  # progress times and rates kept per job (in its state row)
IDLE_CHECK_EVERY_S = 60.0  # DCGM is asked about a job's GPUs at most this often
KEEP_TIMINGS = 256  # per-rank timings kept per job during a slow run (in its state row)
JOBS_AT_ONCE = 32  # jobs of one pass handled concurrently
LISTING_REUSE_S = 1.0  # shards of one worker polling within this long of each other share one scheduler query
LISTING_SHARE = 0.5  # ... or within this share of the poll interval, for a full pass (pokes read their jobs anew)
READ_ALONE_KEEP_S = 120.0  # a poke's read of a job outranks listings taken before it; remembered this long
# routine observations (a job first seen running, progress, a checkpoint) are sent only while the pass has used
# less than this share of its interval; later ones wait for the next pass (see poll_once)
ROUTINE_SHARE = 0.5
ROUTINE_REASONS = frozenset({ObservationReason.FIRST_SEEN, ObservationReason.PROGRESS, ObservationReason.CHECKPOINT})
# Temporal's task priority (1 highest, 3 the default): a job whose workflow starts with news that is not routine
# (it failed, hangs, printed a fatal error before the watch first saw it) goes ahead of the routine starts that
# onboarding a large cluster queues by the thousand; its activities and later tasks inherit it
URGENT_START = Priority(priority_key=1)
TOUCH_EVERY_POLLS = 5000  # every row is rewritten this often, so pruning keeps only rows of jobs gone for good
# per rank and timer, the newest timings the culprit is judged on: the read in which a slow run is first
# seen holds steps from before it too
CULPRIT_TIMINGS = 5
SAVE_GAP_LINES = 3  # a progress line at most this many lines after a checkpoint-save line holds the save
_RANK_WORD = re.compile(r"rank", re.IGNORECASE)  # per-rank timings are looked for only in reads that say "rank"


class GpuHealthPort(Protocol):
    async def gpu_health(self, hosts: list[str], *, start: datetime, end: datetime) -> dict: ...


class JobListing(Protocol):
    async def list_jobs(self, *, opted_in_only: bool = True) -> list[JobInfo]: ...


class LogReader(Protocol):
    async def read(self, cursor: LogCursor, *, max_bytes: int | None = None, final: bool = False): ...


class AuditSink(Protocol):
    def record(self, entry: AuditEntry) -> bool: ...


class _SharedListing:
    """One scheduler listing for every shard of this worker that asks within `reuse_s` of another.

    A shard never gets the same listing twice: its next poll always asks the scheduler anew. A full pass may take
    a listing up to `max_age_s` old (half the poll interval): each shard's pass drifts from the others' (pokes
    and passes longer than the interval), and at 10,000 jobs decoding the 39 MB listing once per shard was a
    third of the watch's time. Jobs that end meanwhile are poked and read on their own.
    """

    def __init__(self, slurm: JobListing, *, reuse_s: float) -> None:
        self._slurm = slurm
        self._reuse_s = reuse_s
        self._lock = asyncio.Lock()
        self._last: tuple[float, SqueueListing] | None = None
        self._taken: set[int] = set()  # shards that had the last listing
        self.queries = 0

    async def get(self, shard: int = 0, *, max_age_s: float = 0.0) -> tuple[SqueueListing, float]:
        """A listing for `shard`, and when it was taken (time.monotonic())."""
        async with self._lock:
            if (
                self._last is not None
                and shard not in self._taken
                and time.monotonic() - self._last[0] < max(self._reuse_s, max_age_s)
            ):
                self._taken.add(shard)
                return self._last[1], self._last[0]
            listing = getattr(self._slurm, "listing", None)  # the Slurm client also says what it skipped
            if listing is not None:
                result = await listing(opted_in_only=True)
            else:
                result = SqueueListing(jobs=await self._slurm.list_jobs(opted_in_only=True), skipped=[])
            self.queries += 1
            taken_at = time.monotonic()
            self._last, self._taken = (taken_at, result), {shard}
            return result, taken_at


class WatchedJob(BaseModel):
    """What the watch remembers of one job between polls."""

    workflow_id: str
    job_id: str
    state: str = ""
    restarts: int = 0
    cursors: dict[str, LogCursor] = Field(default_factory=dict)
    progress: Progress | None = None
    # this attempt's progress rhythm (hang bound, throughput); a new attempt starts a new one
    tracker: ProgressTracker = Field(default_factory=lambda: ProgressTracker(max_samples=KEEP_SAMPLES))
    # the strongest progress source the job has shown, in any attempt, and the templates learned from it
    signal: ProgressSignal = ProgressSignal.NONE
    learned: LearnedProgress = Field(default_factory=LearnedProgress)
    # a recognised format becomes the job's signal once its iteration grew MIN_TEMPLATE_GROWTHS times in a row
    # (a single line that mentions "step 5" is no progress signal)
    recognised_last: int | None = None
    recognised_growths: int = 0
    comm_hang_restarts: int | None = None  # the attempt (restart count) that printed a communication-hang line
    idle_checked_at: datetime | None = None
    gpus_idle: bool | None = None
    hang_watch: str = ""  # what the job is watched on for hangs, as `jobmedic jobs` shows it
    progress_reported_restarts: int = -1
    checkpoint_reported: int | None = None
    hang_reported: bool = False
    straggler_reported: bool = False
    # a fatal line seen while the job ran (this attempt), and whether it was reported as stalling the job
    fatal_at: datetime | None = None
    fatal_reported: bool = False
    # parallel to `tracker.rates`: the rate's progress line came right after a checkpoint save (not judged)
    rate_skip: list[bool] = Field(default_factory=list)
    save_lines: dict[str, int] = Field(default_factory=dict)  # log path -> file line of its newest save line
    # the current slow run (None while the job keeps its pace) and the per-rank timings printed since
    slow_since: datetime | None = None
    rank_timings: list[RankTiming] = Field(default_factory=list)
    # an observation Temporal could not take (unreachable): sent again, merged into the next one, until it is
    unsent: JobObservation | None = None

    @property
    def progress_at(self) -> datetime | None:
        return self.tracker.last_progress_at
    missing_polls: int = 0
    closed: bool = False
    last_seen: datetime | None = None


class WatchState(BaseModel):
    jobs: dict[str, WatchedJob] = Field(default_factory=dict)
    # job id -> submit time it was first seen with (a requeue stamps a new one)
    first_submit: dict[str, datetime] = Field(default_factory=dict)
    invalid_reported: list[str] = Field(default_factory=list)
    failures: list[tuple[str, float, list[str]]] = Field(default_factory=list)  # (job id, epoch s, nodes)
    failures_counted: list[str] = Field(default_factory=list)  # "<job id>:r<restarts>" already counted
    polls: int = 0
    malformed_reported: list[str] = Field(default_factory=list)  # audit keys of skipped listing records


class WatchContext(BaseModel):
    """Per-cluster facts the watch needs to start a job workflow."""

    model_config = {"arbitrary_types_allowed": True}

    cluster: str
    environment: str
    main_queue: str
    scheduler_queue: str
    recovery_input: Callable[[JobInfo, JobKey], JobRecoveryInput]
    # (normal intervals between progress, intervals that held a checkpoint save) -> seconds
    hang_bound_s: Callable[[list[float], list[float]], float]
    watches: Callable[[str], bool] = lambda environment: True
    systemic_window_s: float = 300.0


class WatchActivities:
    def __init__(
        self,
        *,
        context: WatchContext,
        slurm: JobListing,
        logs: LogReader,
        screen: LogScreen,
        client: Client,
        audit: AuditSink,
        metrics: GpuHealthPort | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
        stats: object | None = None,  # workers.metrics_server.WatchStats: pass duration, watched jobs
        state_store: WatchStatePort | None = None,
        listing_reuse_s: float = LISTING_REUSE_S,
    ) -> None:
        """`state_store`: where the per-job state lives between passes (the audit store); without one
        (unit tests) the whole state travels in the heartbeat as it used to."""
        from activities.detection.catalogue import load_catalogue

        self._ctx = context
        self._slurm = slurm
        self._logs = logs
        self._gaps_reported: set[datetime] = set()  # log-store outages already audited (by their start)
        self._screen = screen
        self._client = client
        self._audit = audit
        self._metrics = metrics
        self._clock = clock
        self._stats = stats
        self._state_store = state_store
        self._listing = _SharedListing(slurm, reuse_s=listing_reuse_s)
        self._read_alone: dict[str, float] = {}  # job id -> when a poke's poll last read it (time.monotonic())
        self._comm_hang_ids = frozenset(
            p.id for p in load_catalogue().patterns if p.category.value in COMM_HANG_CATEGORIES and not p.benign
        )
        # lines that say a process died of something (not a hang, not noise): a running job that printed one
        # and stopped making progress is stuck behind its dead rank
        self._fatal_ids = frozenset(
            p.id for p in load_catalogue().patterns
            if p.severity in ("fatal", "error") and p.role == "cause" and not p.benign
            and p.category.value not in COMM_HANG_CATEGORIES
        )

    @activity.defn(name=ActivityNames.WATCH_CLUSTER)
    async def watch_cluster(self, inp: WatchInput) -> dict | None:
        """Poll until cancelled or asked to hand over; the state is saved after every poll."""
        shard, shards = inp.shard, max(1, inp.shards)
        details = activity.info().heartbeat_details
        legacy = details[0] if details and isinstance(details[0], dict) and "jobs" in details[0] else None
        keeper = None
        if self._state_store is not None:
            keeper = ShardKeeper(self._state_store, cluster=inp.cluster, shard=shard, shards=shards, clock=self._clock)
            stored = await keeper.load()
            # a watch from before the state table handed its state over in heartbeat details or its input
            seed = legacy or (inp.resume_state if inp.resume_state and "jobs" in inp.resume_state else None)
            state = WatchState.model_validate(stored if stored["jobs"] or not seed else seed)
        else:
            # a retry's details are newer than the state the previous run handed over (workflows/cluster_watch.py)
            state = WatchState.model_validate(legacy or inp.resume_state or {})
        if state.jobs:
            logger.info("watch of {} (shard {}/{}) resumes with {} known jobs", inp.cluster, shard, shards,
                        len(state.jobs))
        waker = PollWaker.for_this_activity(self._client)  # Slurm's hooks can bring the next poll forward
        while True:
            try:
                if waker.targets is not None:  # a poke named jobs: those, each read on its own
                    await self.poll_jobs(state, waker.targets, shard=shard, shards=shards, keeper=keeper)
                else:
                    await self.poll_once(state, shard=shard, shards=shards, keeper=keeper,
                                         routine_s=inp.poll_interval_s * ROUTINE_SHARE, poked=waker.poked,
                                         listing_age_s=inp.poll_interval_s * LISTING_SHARE)
            except JobmedicError as exc:
                logger.warning("poll of cluster {} failed: {} (retrying next interval)", inp.cluster, exc)
            activity.heartbeat(self._beat(state, keeper, shard, shards))
            await waker.wait(state, inp.poll_interval_s)
            if waker.handover_asked:  # the watch workflow continues as new (with this state, without a table)
                if keeper is not None:
                    await self._save(keeper, state)  # every row, not only those whose turn it was
                return {"shard": shard, "polls": state.polls} if keeper else state.model_dump(mode="json")

    @staticmethod
    def _beat(state: WatchState, keeper: ShardKeeper | None, shard: int, shards: int) -> dict:
        """Heartbeat details: counters only when the state lives in the table (its size is the same at any scale)."""
        if keeper is None:
            return state.model_dump(mode="json")
        return {"shard": shard, "shards": shards, "polls": state.polls, "watched": len(state.jobs),
                "rows_written": keeper.rows_written}

    async def poll_once(
        self, state: WatchState, *, shard: int = 0, shards: int = 1, keeper: ShardKeeper | None = None,
        routine_s: float | None = None, poked: Callable[[], Awaitable[set[str]]] | None = None,
        listing_age_s: float = 0.0,
    ) -> list[JobObservation]:
        """One pass over every opted-in job of this shard; returns the observations it signalled.

        `routine_s`: after this many seconds of the pass, routine observations (`ROUTINE_REASONS` of a job that
        has not ended) are kept for the next pass instead of sent. Each one is a workflow start or a workflow
        task (at 10,000 jobs a first pass of starts took minutes on two cores); a failure never waits.

        `poked`: asked between batches for jobs a poke named meanwhile (the waker's `poked`). Those are read at once
        (`poll_jobs`) and left out of the rest of the pass, whose listing is older than that read: at 10,000 jobs a
        pass takes longer than the interval, and a job ending at its start waited for its end (detection 22 s).
        """
        now = self._clock()
        listing, listed_at = await self._listing.get(shard, max_age_s=listing_age_s)
        jobs = listing.jobs
        state.polls += 1
        await self._report_malformed(state, listing.skipped, now, shard=shard)
        listed: set[str] = set()
        signalled: set[str] = set()  # workflow ids signalled since the last save: their rows are written at once
        started = time.monotonic()

        def routine_allowed() -> bool:
            return routine_s is None or time.monotonic() - started < routine_s

        mine = [j for j in jobs if shards == 1 or shard_of(j.job_id, shards) == shard]
        beat = started
        # a poke's read newer than this listing (mid-pass, or before the pass on a shared listing) outranks the
        # listing's record of that job (_poll_jobs); reads older than READ_ALONE_KEEP_S are forgotten
        self._read_alone = {j: t for j, t in self._read_alone.items() if time.monotonic() - t < READ_ALONE_KEEP_S}

        async def between_batches() -> None:
            nonlocal beat
            targets = await poked() if poked is not None else set()
            if targets:
                await self.poll_jobs(state, targets, shard=shard, shards=shards, keeper=keeper)
            if time.monotonic() - beat > HEARTBEAT_EVERY_S and activity.in_activity():
                # a long poll must not look like a dead worker; what it signalled so far is saved
                if keeper is not None:
                    await self._save(keeper, state, urgent=signalled, turn=False)
                    signalled.clear()  # saved: a job is seen once a pass, so these rows are done for this pass
                activity.heartbeat(self._beat(state, keeper, shard, shards))
                beat = time.monotonic()

        sent = await self._poll_jobs(state, mine, jobs, now, listed=listed, signalled=signalled,
                                     routine_allowed=routine_allowed, between_batches=between_batches,
                                     listed_at=listed_at)
        for wid in [w for w in state.jobs if w not in listed]:
            watched = state.jobs[wid]
            watched.missing_polls += 1
            if watched.missing_polls < GONE_AFTER_POLLS:
                continue  # a job can drop out of one listing (a comment being edited); wait before saying goodbye
            state.jobs.pop(wid)
            state.first_submit.pop(watched.job_id, None)
            if not watched.closed and watched.last_seen is not None:
                gone = JobObservation(
                    seq=_seq(now), at=now, reasons=[ObservationReason.GONE],
                    job=JobInfo(job_id=watched.job_id, cluster=self._ctx.cluster, state=JobState.UNKNOWN),
                )
                await self._signal_existing(watched, gone)
        await self._report_log_gaps(now)
        if keeper is not None:
            if state.polls % TOUCH_EVERY_POLLS == 0:
                await keeper.touch_all(state)
            await self._save(keeper, state, urgent=signalled)
        if self._stats is not None:
            self._stats.record_pass(  # type: ignore[attr-defined]
                self._ctx.cluster, started_at=now, finished_at=self._clock(), watched_jobs=len(state.jobs)
            )
        return sent

    async def poll_jobs(
        self, state: WatchState, job_ids: set[str], *, shard: int = 0, shards: int = 1,
        keeper: ShardKeeper | None = None,
    ) -> list[JobObservation]:
        """A poke's poll: only the named jobs of this shard, each read on its own (`squeue --jobs ID`), and
        their rows written; returns the observations it signalled. Jobs gone, and every other job, are the
        next full pass's (which stays on its interval)."""
        now = self._clock()
        mine = {j for j in job_ids if shards == 1 or shard_of(j, shards) == shard}
        read_at = time.monotonic()
        jobs = await self._read_named(mine)
        self._read_alone.update((j.job_id, read_at) for j in jobs)
        signalled: set[str] = set()
        sent = await self._poll_jobs(state, jobs, jobs, now, listed=set(), signalled=signalled)
        if keeper is not None:
            await self._save(keeper, state, urgent=signalled, turn=False)
        return sent

    async def _poll_jobs(
        self, state: WatchState, jobs: list[JobInfo], seen: list[JobInfo], now: datetime, *, listed: set[str],
        signalled: set[str], routine_allowed: Callable[[], bool] | None = None,
        between_batches: Callable[[], Awaitable[None]] | None = None, listed_at: float | None = None,
    ) -> list[JobObservation]:
        """Observe `jobs` (a shard's share of `seen`, which the cluster-wide failure view counts) and signal what
        changed; returns the observations signalled. A job a poke's poll read after `listed_at` (when `jobs` was
        listed, time.monotonic()) is only marked as listed: that read is newer."""
        # the cluster-wide view covers the jobs this deployment watches (other deployments keep their own),
        # in every shard: a node that failed jobs of two shards is one node
        self._remember_failures(state, [j for j in seen if self._watched_environment(j)], now)
        failures = _FailureIndex(state.failures)

        async def one(job: JobInfo) -> JobObservation | None:
            job.cluster = self._ctx.cluster
            if listed_at is not None and self._read_alone.get(job.job_id, listed_at) > listed_at:
                listed.update(w for w, watched in state.jobs.items() if watched.job_id == job.job_id)
                return None
            try:
                return await self._poll_job(state, job, now, listed, failures, signalled, routine_allowed)
            except Exception as exc:  # noqa: BLE001 - one job's trouble must not blind the watch to the others
                logger.opt(exception=exc).warning("watch of job {} failed this poll: {}", job.job_id, exc)
                return None

        # a few jobs at a time: their log reads and Temporal calls overlap (a first pass over 10,000 jobs is
        # 10,000 signal-with-starts; one after the other they took minutes); each job's own state is its own
        sent: list[JobObservation] = []
        for start in range(0, len(jobs), JOBS_AT_ONCE):
            sent.extend(o for o in await asyncio.gather(*(one(j) for j in jobs[start : start + JOBS_AT_ONCE])) if o)
            if between_batches is not None:
                await between_batches()
        return sent

    async def _read_named(self, job_ids: set[str]) -> list[JobInfo]:
        """The named jobs as the scheduler shows them now, in one query; [] when it cannot be read (the full
        pass will look at them)."""
        if not job_ids:
            return []
        get_jobs = getattr(self._slurm, "get_jobs", None)
        try:
            if get_jobs is not None:
                return list(await get_jobs(job_ids))
            return [j for j in await self._slurm.list_jobs(opted_in_only=True) if j.job_id in job_ids]
        except JobmedicError as exc:  # the scheduler unreachable, or a malformed id
            logger.info("poked jobs {} not read ({}); the next full pass looks at them", ",".join(sorted(job_ids)), exc)
            return []

    async def _save(
        self, keeper: ShardKeeper, state: WatchState, *, urgent: set[str] | None = None, turn: bool = True
    ) -> None:
        """`urgent` None: every changed row; else the rows of those jobs, of new jobs and (`turn`) of this turn."""
        try:
            await keeper.save(state, urgent=urgent, turn=turn)
        except JobmedicError as exc:
            # the next save writes every row that changed since the last good one; detection goes on meanwhile
            logger.warning("could not save the watch state of {} (shard {}): {}", keeper.cluster, keeper.shard, exc)

    async def _report_log_gaps(self, now: datetime) -> None:
        """Each window in which the log store could not be read, audited once it is over (cluster-wide, job `*`).

        The watch went on for the other jobs meanwhile; each job's lines of that window are read late, from its
        cursor, so nothing is lost unless the store dropped them. A source without outages (files) has none.
        """
        for gap in list(getattr(self._logs, "outages", None) or []):
            if gap.until is None or gap.since in self._gaps_reported:
                continue
            seconds = (gap.until - gap.since).total_seconds()
            entry = AuditEntry(
                idempotency_key=f"log_source_gap:{self._ctx.cluster}:{gap.since.isoformat()}",
                timestamp=now, cluster=self._ctx.cluster, job_id="*", event_type=EventType.LOG_SOURCE_GAP,
                outcome=f"log store unreadable from {gap.since.isoformat()} to {gap.until.isoformat()} ({seconds:.0f} s): "
                        f"{gap.error}; each job's lines of that time were read late from its cursor",
                detail={"since": gap.since.isoformat(), "until": gap.until.isoformat(), "seconds": round(seconds, 1)},
                mode="observe",
            )
            try:
                await asyncio.to_thread(self._audit.record, entry)
            except JobmedicError as exc:
                logger.warning("could not audit a log store gap (again next pass): {}", exc)
                return
            self._gaps_reported.add(gap.since)

    async def _report_malformed(
        self, state: WatchState, skipped: list[SkippedRecord], now: datetime, *, shard: int
    ) -> None:
        """Each listing record the parser could not read: logged, audited once (by shard 0), never fatal."""
        if not skipped or shard != 0:
            return
        for record in skipped:
            digest = hashlib.sha256(record.excerpt.encode("utf-8", "replace")).hexdigest()[:24]
            key = f"malformed_record:{self._ctx.cluster}:{digest}"
            if key in state.malformed_reported:
                continue
            logger.warning("cluster {}: a scheduler record was skipped ({}): {}", self._ctx.cluster, record.reason,
                           record.excerpt[:200])
            entry = AuditEntry(
                idempotency_key=key, timestamp=now, cluster=self._ctx.cluster, job_id=record.job_id or "?",
                event_type=EventType.MALFORMED_RECORD, outcome=f"{record.reason}: {record.excerpt}", mode="observe",
            )
            try:
                await asyncio.to_thread(self._audit.record, entry)
            except JobmedicError as exc:
                logger.warning("could not audit a skipped scheduler record: {}", exc)
                return
            state.malformed_reported = (state.malformed_reported + [key])[-1000:]

    def _watched_environment(self, job: JobInfo) -> bool:
        opt = job.opt_in.opt_in
        return opt is not None and not job.opt_in.invalid and self._ctx.watches(opt.environment)

    # ------------------------------------------------------------------ one job

    async def _poll_job(
        self, state: WatchState, job: JobInfo, now: datetime, listed: set[str], failures: _FailureIndex | None = None,
        signalled: set[str] | None = None, routine_allowed: Callable[[], bool] | None = None,
    ) -> JobObservation | None:
        if job.opt_in.invalid:
            await self._report_invalid(state, job, now)
            return None
        if not self._watched_environment(job):
            return None
        key = await self._identity(state, job)
        wid = key.workflow_id
        listed.add(wid)
        watched = state.jobs.get(wid)
        first = watched is None
        if watched is None:
            watched = WatchedJob(workflow_id=wid, job_id=job.job_id)
            state.jobs[wid] = watched
        watched.missing_polls = 0
        if watched.closed:
            return None
        obs = _with_unsent(watched.unsent, await self._observe(state, watched, job, now, first=first, failures=failures))
        if obs is None:
            return None
        if routine_allowed is not None and _routine(obs) and not routine_allowed():
            watched.unsent = obs  # sent with the next pass's news (its row is written on its turn)
            return None
        if signalled is not None:
            signalled.add(wid)  # signalled, or kept to be sent again: the row is written this pass either way
        # until Temporal took it (unreachable, or any error): the state change or failure line it reports is not
        # seen again, so it must not be lost with the signal
        watched.unsent = obs
        if await self._signal(watched, job, key, obs):
            watched.unsent = None
            return obs
        if watched.closed:
            watched.unsent = None
        return None

    async def _identity(self, state: WatchState, job: JobInfo) -> JobKey:
        """The job's key: the submit time it was first seen with survives Slurm's requeues."""
        first = state.first_submit.get(job.job_id)
        if first is None and job.restarts > 0:
            first = await self._running_workflow_submit_time(job)
        if first is not None:
            key = JobKey(cluster=self._ctx.cluster, job_id=job.job_id, submit_time=first)
            if key.matches(job):
                state.first_submit[job.job_id] = first
                return key
        if job.submit_time is not None:
            state.first_submit[job.job_id] = job.submit_time
        return JobKey(cluster=self._ctx.cluster, job_id=job.job_id, submit_time=job.submit_time)

    async def _running_workflow_submit_time(self, job: JobInfo) -> datetime | None:
        """After a restart of the watch without state: the key of the job's running workflow."""
        query = recovery_query(cluster=self._ctx.cluster, job_id=job.job_id)
        try:
            async for wf in self._client.list_workflows(query, limit=1):
                stamp = wf.id.rsplit("-", 1)[-1]  # JobKey.workflow_id writes the submit time in UTC
                return datetime.strptime(stamp, "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc)
        except Exception as exc:  # noqa: BLE001 - visibility is a hint here; the job is still watched
            logger.warning("could not look up the workflow of requeued job {}: {}", job.job_id, exc)
        return None

    async def _observe(
        self, state: WatchState, watched: WatchedJob, job: JobInfo, now: datetime, *, first: bool,
        failures: _FailureIndex | None = None,
    ) -> JobObservation | None:
        reasons: list[ObservationReason] = []
        if first:
            reasons.append(ObservationReason.FIRST_SEEN)
        elif watched.state != job.state.value:
            reasons.append(ObservationReason.STATE_CHANGE)
        if not first and job.restarts != watched.restarts:
            reasons.append(ObservationReason.RESTART_CHANGE)
            watched.hang_reported = False
            # the new attempt's hang clock starts at its own start time, its rhythm is learned anew
            watched.tracker = ProgressTracker(max_samples=KEEP_SAMPLES, source=watched.tracker.source)
            watched.idle_checked_at = None
            watched.gpus_idle = None
            watched.straggler_reported = False
            watched.rate_skip, watched.slow_since, watched.rank_timings = [], None, []
            watched.fatal_at, watched.fatal_reported = None, False
        watched.state = job.state.value
        watched.restarts = job.restarts
        watched.last_seen = now

        hits: list[EvidenceLine] = []
        timings: list[RankTiming] = []
        if job.state in {JobState.RUNNING, JobState.COMPLETING} or reasons:
            hits, timings = await self._read_logs(watched, job, now)
        if hits:
            reasons.append(ObservationReason.FAILURE_PATTERN)
            if job.state is JobState.RUNNING and any(h.pattern_id in self._comm_hang_ids for h in hits):
                watched.comm_hang_restarts = job.restarts
        if (
            watched.progress is not None
            and job.state is JobState.RUNNING
            and watched.progress_reported_restarts != job.restarts
            and watched.progress_at is not None
            and job.start_time is not None
            and watched.progress_at >= _utc(job.start_time)
        ):
            watched.progress_reported_restarts = job.restarts
            reasons.append(ObservationReason.PROGRESS)
        ckpt = watched.progress.checkpoint_iteration if watched.progress else None
        if ckpt is not None and ckpt != watched.checkpoint_reported:
            watched.checkpoint_reported = ckpt
            reasons.append(ObservationReason.CHECKPOINT)

        seconds_since = None
        hang = False
        opt = job.opt_in.opt_in
        watched.hang_watch = hang_watch_label(
            watched.signal, user_pattern=bool(opt and opt.progress_pattern), gpu_metrics=self._metrics is not None
        )
        if job.state is JobState.RUNNING:
            tracker = watched.tracker
            since_ref = tracker.last_progress_at or (_utc(job.start_time) if job.start_time else None)
            if since_ref is not None:
                seconds_since = (now - since_ref).total_seconds()
                bound = self._ctx.hang_bound_s(tracker.iteration_intervals_s, tracker.checkpoint_intervals_s)
                facts: dict[str, Any] = {
                    "running": True,
                    "seconds_since_progress": seconds_since,
                    "bound_s": bound,
                    "progress_signal": watched.signal,
                    "progress_finished": tracker.last_finished,
                    "comm_hang_seen": watched.comm_hang_restarts == job.restarts,
                }
                evidence = hang_evidence(**facts)
                if evidence is None and seconds_since > bound:
                    evidence = hang_evidence(**facts, gpus_idle=await self._gpus_idle(watched, job, now, bound))
                hang = evidence is not None
                if evidence is not None and not watched.hang_reported:
                    watched.hang_reported = True
                    reasons.append(ObservationReason.HANG)
                    logger.info(
                        "job {} looks hung: {} ({:.0f}s without progress, bound {:.0f}s)",
                        job.job_id, evidence.value, seconds_since, bound,
                    )
                elif not hang:
                    watched.hang_reported = False
        if job.state is JobState.RUNNING:
            if watched.fatal_at is None and any(h.pattern_id in self._fatal_ids for h in hits):
                watched.fatal_at = now
            bound = self._ctx.hang_bound_s(watched.tracker.iteration_intervals_s, watched.tracker.checkpoint_intervals_s)
            if _fatal_stalled(watched, now, bound_s=bound):
                watched.fatal_reported = True
                reasons.append(ObservationReason.FATAL_STALLED)
                logger.info("job {} printed a fatal error at {} and has made no progress since",
                            job.job_id, watched.fatal_at.isoformat() if watched.fatal_at else "?")
        straggler = await self._straggler(watched, job, now, timings) if job.state is JobState.RUNNING else None
        if straggler is not None:
            reasons.append(ObservationReason.STRAGGLER)
        if not reasons:
            return None
        return JobObservation(
            seq=_seq(now),
            at=now,
            job=job,
            reasons=reasons,
            hits=hits,
            progress=watched.progress,
            progress_at=watched.progress_at,
            hang_suspected=hang,
            seconds_since_progress=seconds_since,
            node_failure_counts=(failures or _FailureIndex(state.failures)).counts_for(job),
            straggler=straggler,
            straggler_hosts=list(straggler.culprits) if straggler is not None else [],
            log_cursors=list(watched.cursors.values()),
            fatal_at=watched.fatal_at,
        )

    async def _read_logs(
        self, watched: WatchedJob, job: JobInfo, now: datetime
    ) -> tuple[list[EvidenceLine], list[RankTiming]]:
        """The new lines' flagged lines worth a signal, and the per-rank timings they hold."""
        hits: list[EvidenceLine] = []
        timings: list[RankTiming] = []
        for stream, path in source_streams(self._logs, job):
            cursor = watched.cursors.get(path) or LogCursor(path=path)
            for _ in range(MAX_READS_PER_POLL):
                try:
                    chunk = await self._logs.read(cursor, final=job.state.finished)
                except LogSourceError as exc:
                    logger.debug("log {} of job {} not readable yet: {}", path, job.job_id, exc)
                    break
                if chunk.missing:
                    break
                cursor = chunk.cursor
                if chunk.lines:
                    outcome = self._screen.screen(chunk.lines, first_line_no=chunk.first_line_no, stream=stream)
                    hits.extend(outcome.hits)
                    after_save = _after_save(watched, path, outcome)
                    self._track_progress(
                        watched, job, chunk.lines, chunk.first_line_no, outcome.progress, now, after_save=after_save
                    )
                    if any(_RANK_WORD.search(line) for line in chunk.lines):
                        timings.extend(parse_rank_timings(chunk.lines, first_line_no=chunk.first_line_no))
                if not chunk.more:
                    break
            watched.cursors[path] = cursor
        return hits[-50:], timings[-KEEP_TIMINGS:]

    def _track_progress(
        self,
        watched: WatchedJob,
        job: JobInfo,
        lines: list[str],
        first_line_no: int,
        recognised: Progress | None,
        now: datetime,
        *,
        after_save: bool = False,
    ) -> None:
        """Feed one chunk's progress to the job's tracker, from the strongest source the job has shown.

        `after_save`: the chunk's newest progress line came right after a checkpoint save.
        """
        tracker = watched.tracker
        if recognised is not None:
            watched.progress = _merge_progress(watched.progress, recognised)
            ckpt = recognised.checkpoint_iteration
            if ckpt is not None and ckpt != tracker.last_checkpoint_iteration:
                tracker.observe(ProgressSample(checkpoint=True, checkpoint_iteration=ckpt), now)
        candidates: dict[ProgressSignal, ProgressSample] = {}
        opt = job.opt_in.opt_in
        pattern = _compiled(opt.progress_pattern) if opt is not None and opt.progress_pattern else None
        if pattern is not None:
            mine = user_progress(pattern, lines, first_line_no=first_line_no)
            if mine is not None:
                candidates[ProgressSignal.USER_PATTERN] = mine
        if recognised is not None and recognised.iteration is not None and _established(watched, recognised.iteration):
            candidates[ProgressSignal.RECOGNISED] = ProgressSample(
                iteration=recognised.iteration, throughput=recognised.throughput, iter_time_s=recognised.iter_time_s,
                finished=recognised.finished, source=ProgressSignal.RECOGNISED.value,
            )
        if watched.signal.rank < ProgressSignal.RECOGNISED.rank:
            watched.learned, learned = learn_progress(watched.learned, lines, first_line_no=first_line_no)
            if learned is not None:
                candidates[ProgressSignal.LEARNED] = learned
        if not candidates:
            return
        source = max(candidates, key=lambda s: s.rank)
        if source.rank < watched.signal.rank:
            return  # a weaker source than the job has shown: its numbers would only confuse the rhythm
        if source is not watched.signal:
            logger.info("job {} progress is read from {} now (was {})", job.job_id, source.value, watched.signal.value)
            watched.signal = source
        tracker.switch_source(source.value)
        sample = candidates[source]
        if sample.iteration is None:
            # a learned template or a group-less pattern: each sample is one new progress line
            sample.iteration = (tracker.last_iteration or 0) + 1
        restarts = tracker.restarts_seen
        new = tracker.observe(sample, now)
        if tracker.restarts_seen != restarts:
            watched.rate_skip = []  # the iteration went back: the tracker starts its rates anew
        elif new and sample.rate is not None:
            watched.rate_skip.append(after_save and source is ProgressSignal.RECOGNISED)
        del watched.rate_skip[: max(0, len(watched.rate_skip) - len(tracker.rates))]
        if source is not ProgressSignal.RECOGNISED:
            shown = Progress(iteration=sample.shown_iteration, finished=sample.finished)
            watched.progress = _merge_progress(watched.progress, shown)

    async def _gpus_idle(self, watched: WatchedJob, job: JobInfo, now: datetime, bound_s: float) -> bool | None:
        """Whether DCGM shows every GPU of the job's nodes idle over the last `bound_s` (None: unknown)."""
        if self._metrics is None or not job.nodes:
            return None
        if watched.idle_checked_at is not None and (now - watched.idle_checked_at).total_seconds() < IDLE_CHECK_EVERY_S:
            return watched.gpus_idle
        watched.idle_checked_at = now
        try:
            health = await self._metrics.gpu_health(list(job.nodes), start=now - timedelta(seconds=bound_s), end=now)
        except Exception as exc:  # noqa: BLE001 - metrics are optional evidence; unknown is not idle
            logger.warning("GPU metrics for job {} unavailable: {}", job.job_id, exc)
            watched.gpus_idle = None
            return None
        watched.gpus_idle = all_gpus_idle(health.values())
        return watched.gpus_idle

    async def _straggler(
        self, watched: WatchedJob, job: JobInfo, now: datetime, timings: list[RankTiming]
    ) -> StragglerFinding | None:
        """The culprit finding, once per episode of sustained throughput drop against the job's own baseline."""
        rates = watched.tracker.rates
        offset = len(rates) - len(watched.rate_skip)  # the flags are the newest rates' (older details had none)
        skip = [offset + i for i, after in enumerate(watched.rate_skip) if after]
        slow = detect_slowdown(rates, skip=skip)
        if slow.slow_run == 0:
            watched.slow_since, watched.rank_timings, watched.straggler_reported = None, [], False
            return None
        if watched.slow_since is None:
            watched.slow_since, watched.rank_timings = now, []  # timings from before the slow run would blur it
        watched.rank_timings = keep_recent(watched.rank_timings, timings, limit=KEEP_TIMINGS)
        if not slow.sustained or watched.straggler_reported:
            return None
        watched.straggler_reported = True
        start, end = culprit_window(watched.slow_since, now)
        # a metrics source that also reads per-node telemetry (PrometheusClient does)
        has_telemetry = hasattr(self._metrics, "node_telemetry")
        telemetry = cast("NodeTelemetrySource | None", self._metrics if has_telemetry else None)
        timings = _newest_per_rank(watched.rank_timings)
        finding = await straggler_culprit(telemetry, job, start=start, end=end, timings=timings)
        logger.info(
            "job {} is straggling (throughput {:.0%} of its baseline since {}): {}",
            job.job_id, slow.ratio or 0.0, watched.slow_since.isoformat(), finding.explanation,
        )
        return finding

    # ------------------------------------------------------------------ cluster-wide view

    def _remember_failures(self, state: WatchState, jobs: list[JobInfo], now: datetime) -> None:
        """Each failure (job and attempt) counted once, when first seen, for the window after it."""
        horizon = now.timestamp() - self._ctx.systemic_window_s
        counted = set(state.failures_counted)
        for job in jobs:
            mark = f"{job.job_id}:r{job.restarts}"
            ended = _utc(job.end_time).timestamp() if job.end_time else now.timestamp()
            if job.state.failed and mark not in counted and ended >= horizon:
                state.failures.append((job.job_id, now.timestamp(), list(job.nodes)))
                state.failures_counted.append(mark)
        state.failures = [f for f in state.failures if f[1] >= horizon][-1000:]
        state.failures_counted = state.failures_counted[-5000:]

    # ------------------------------------------------------------------ Temporal and audit

    async def _signal(self, watched: WatchedJob, job: JobInfo, key: JobKey, obs: JobObservation) -> bool:
        from workflows.job_recovery import JobRecoveryWorkflow, initial_search_attributes

        inp = self._ctx.recovery_input(job, key)
        try:
            await self._client.start_workflow(
                JobRecoveryWorkflow.run,
                inp,
                id=watched.workflow_id,
                task_queue=self._ctx.main_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                search_attributes=initial_search_attributes(inp),
                start_signal=SignalNames.OBSERVE,
                start_signal_args=[obs],
                priority=Priority.default if _routine(obs) else URGENT_START,
                static_summary=recovery_summary(job),  # the line the Temporal UI shows for the job
                static_details=recovery_details(job, inp.cluster_mode.value),
            )
        except WorkflowAlreadyStartedError:
            # the job's workflow finished (job done, stopped by policy or by an operator): leave it be
            watched.closed = True
            return False
        except RPCError as exc:
            logger.warning("could not signal the workflow of job {}: {} (retried next poll)", job.job_id, exc)
            return False
        return True

    async def _signal_existing(self, watched: WatchedJob, obs: JobObservation) -> None:
        try:
            await self._client.get_workflow_handle(watched.workflow_id).signal(SignalNames.OBSERVE, obs)
        except Exception as exc:  # noqa: BLE001 - a closed or unknown workflow needs no goodbye
            logger.debug("no running workflow {} to tell the job is gone: {}", watched.workflow_id, exc)

    async def _report_invalid(self, state: WatchState, job: JobInfo, now: datetime) -> None:
        key = f"invalid_opt_in:{self._ctx.cluster}:{job.job_id}:{job.submit_time}"
        if key in state.invalid_reported:
            return
        entry = AuditEntry(
            idempotency_key=key,
            timestamp=now,
            cluster=self._ctx.cluster,
            job_id=job.job_id,
            submit_time=job.submit_time,
            event_type=EventType.INVALID_OPT_IN,
            outcome=job.opt_in.invalid_reason,
            mode="observe",
        )
        try:
            await asyncio.to_thread(self._audit.record, entry)
        except JobmedicError as exc:
            logger.warning("could not audit the invalid opt-in of job {}: {}", job.job_id, exc)
            return
        logger.info("job {} has an invalid opt-in, audited and ignored: {}", job.job_id, job.opt_in.invalid_reason)
        state.invalid_reported = (state.invalid_reported + [key])[-5000:]


class _FailureIndex:
    """Recent failures by node, built once per pass, so one job's counts cost its own nodes, not every failure.

    (Counting by scanning every failure for every observed job was quadratic: ~0.26 s per observed job at
    1,000 failures on 64-node jobs, on the event loop.)
    """

    def __init__(self, failures: list[tuple[str, float, list[str]]]) -> None:
        self._total: dict[str, int] = {}
        self._by_job: dict[tuple[str, str], int] = {}  # (node, job id) -> that job's failures on the node
        for job_id, _, nodes in failures:
            for node in set(nodes):
                self._total[node] = self._total.get(node, 0) + 1
                self._by_job[(node, job_id)] = self._by_job.get((node, job_id), 0) + 1

    def counts_for(self, job: JobInfo) -> dict[str, int]:
        """Per node of `job`: how many recent failures of other jobs it was part of (nodes with none left out)."""
        counts: dict[str, int] = {}
        for node in dict.fromkeys(job.nodes):
            n = self._total.get(node, 0) - self._by_job.get((node, job.job_id), 0)
            if n > 0:
                counts[node] = n
        return counts


FATAL_GRACE_S = 60.0  # a fatal line, then no progress for this long (or 3 iterations, if longer): stalled


def _routine(obs: JobObservation) -> bool:
    """Whether an observation may wait a pass: only routine reasons, about a job that has not ended."""
    return set(obs.reasons) <= ROUTINE_REASONS and not obs.job.state.finished


def _with_unsent(unsent: JobObservation | None, new: JobObservation | None) -> JobObservation | None:
    """The observation to send: `new` with what an unsent earlier one reported, or the earlier one again."""
    if unsent is None or new is None:
        return new or unsent
    reasons = list(dict.fromkeys([*unsent.reasons, *new.reasons]))
    kept = {name: getattr(unsent, name) for name in ("straggler", "fatal_at", "progress", "progress_at")
            if getattr(new, name) is None}
    return new.model_copy(update={"reasons": reasons, "hits": (unsent.hits + new.hits)[-50:], **kept})


def _fatal_stalled(watched: WatchedJob, now: datetime, *, bound_s: float) -> bool:
    """A fatal line was printed and training has not moved since, past the grace: its ranks wait on a dead one.
    Progress after the line means the job survived it (a rank's handled error): forget it. The grace is never
    longer than the job's hang bound (a fatal line is more evidence than silence alone)."""
    if watched.fatal_at is None or watched.fatal_reported:
        return False
    if watched.progress_at is not None and watched.progress_at > watched.fatal_at:
        watched.fatal_at = None  # training went on: whatever it was, the job survived it
        return False
    intervals = watched.tracker.iteration_intervals_s
    grace = max(FATAL_GRACE_S, 3 * max(intervals[-8:])) if intervals else FATAL_GRACE_S
    return (now - watched.fatal_at).total_seconds() >= min(grace, bound_s)


def _seq(now: datetime) -> int:
    # time-based, so a watch that resumes from older heartbeat details still numbers upwards
    return int(now.timestamp() * 1_000_000)


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def _newest_per_rank(timings: list[RankTiming], keep: int = CULPRIT_TIMINGS) -> list[RankTiming]:
    """The newest `keep` timings of each rank and timer, in their order."""
    seen: dict[tuple[int, int | None, str], int] = {}
    out: list[RankTiming] = []
    for t in reversed(timings):
        key = (t.rank, t.task, t.timer)
        if seen.get(key, 0) < keep:
            seen[key] = seen.get(key, 0) + 1
            out.append(t)
    return out[::-1]


def _after_save(watched: WatchedJob, path: str, outcome: ScreenOutcome) -> bool:
    """Whether the chunk's newest progress line came right after a checkpoint save (its timing holds the save)."""
    saves = [watched.save_lines[path]] if path in watched.save_lines else []
    saves += outcome.checkpoint_line_nos
    progress = outcome.progress_line_no
    if progress is None:
        if saves:
            watched.save_lines[path] = max(saves)
        return False
    # a save before this progress line is spent on it; one after it waits for the next progress line
    later = [n for n in saves if n > progress]
    if later:
        watched.save_lines[path] = max(later)
    else:
        watched.save_lines.pop(path, None)
    before = [n for n in saves if n < progress]
    return bool(before) and progress - max(before) <= SAVE_GAP_LINES


def _established(watched: WatchedJob, iteration: int) -> bool:
    """Whether a recognised format counts as the job's progress signal (see `WatchedJob.recognised_growths`)."""
    if watched.signal.rank >= ProgressSignal.RECOGNISED.rank:
        return True
    last = watched.recognised_last
    if last is not None and iteration != last:
        watched.recognised_growths = watched.recognised_growths + 1 if iteration > last else 0
    watched.recognised_last = iteration
    return watched.recognised_growths >= MIN_TEMPLATE_GROWTHS


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    """A job's progress pattern, compiled once (it was checked when the opt-in was read)."""
    try:
        return re.compile(pattern)
    except re.error:
        return None


def _merge_progress(old: Progress | None, new: Progress) -> Progress:
    if old is None:
        return new
    data = old.model_dump()
    data.update({k: v for k, v in new.model_dump().items() if v is not None})
    return Progress.model_validate(data)
