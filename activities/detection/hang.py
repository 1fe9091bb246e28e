"""Hang detection: a running job is hung only on positive evidence, past a bound learned from the job itself.

Evidence (`hang_evidence`, first that holds wins):
1. `progress_stopped` - the job has a progress signal (a recognised format, a
   learned line template, or its opt-in's `progress_pattern`, seen at least once
   in any attempt) and no progress came for longer than the bound; a job whose
   newest progress line showed a finished bar (done == total) is not hung on
   that account: the next phase may print nothing we know;
2. `comm_hang_pattern` - a recognised communication-hang line (catalogue
   category hang or nccl_timeout) in this attempt, and the bound passed;
3. `gpus_idle` - DCGM shows every GPU of the job's nodes idle over the bound.
A job with none of them is watched for crashes only: the mere absence of a
progress format we know is never a hang.

The bound comes from the job's own rhythm: how long it normally takes between
two progress observations, and how long a checkpoint save stalls it. A job that
logs every 2 s and saves for 90 s every hour must not look hung during the
save; a job that logs every 10 minutes must not look hung after 5. A
configured floor and ceiling keep the learned bound sane, and a default covers
the start of a job, before enough intervals are known (raised to cover what
the few intervals seen already showed).

`ProgressTracker` is the small, serialisable state kept per job attempt
between polls (bounded in size, every field defaulted so old histories
decode); the cluster watch and the tests feed it the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum

from pydantic import Field

from activities.detection.progress import ProgressSample
from workflows.contracts import Contract

DEFAULT_FLOOR_S = 300.0
DEFAULT_CEILING_S = 4 * 3600.0
DEFAULT_BOUND_S = 1800.0
DEFAULT_FACTOR = 5.0
CHECKPOINT_FACTOR = 1.5
MIN_INTERVALS = 5
IDLE_UTIL_PCT = 1.0  # a GPU averaging at most this utilisation over the bound is idle
COMM_HANG_CATEGORIES = frozenset({"hang", "nccl_timeout"})


class HangEvidence(StrEnum):
    PROGRESS_STOPPED = "progress_stopped"
    COMM_HANG_PATTERN = "comm_hang_pattern"
    GPUS_IDLE = "gpus_idle"


class ProgressSignal(StrEnum):
    """Where a job's progress is read from, weakest first (a stronger one, once seen, replaces a weaker one)."""

    NONE = "none"
    LEARNED = "learned"  # a repeated line template with a growing number
    RECOGNISED = "recognised"  # a framework format the parsers know
    USER_PATTERN = "user_pattern"  # the opt-in's progress_pattern

    @property
    def rank(self) -> int:
        return list(ProgressSignal).index(self)


def hang_evidence(
    *,
    running: bool,
    seconds_since_progress: float | None,
    bound_s: float,
    progress_signal: ProgressSignal,
    progress_finished: bool = False,
    comm_hang_seen: bool = False,
    gpus_idle: bool | None = None,
) -> HangEvidence | None:
    """The evidence that makes a job hung now, or None (see the module docstring for the order)."""
    if not running or seconds_since_progress is None or seconds_since_progress <= bound_s:
        return None
    if progress_signal is not ProgressSignal.NONE and not progress_finished:
        return HangEvidence.PROGRESS_STOPPED
    if comm_hang_seen:
        return HangEvidence.COMM_HANG_PATTERN
    if gpus_idle:
        return HangEvidence.GPUS_IDLE
    return None


def hang_watch_label(signal: ProgressSignal, *, user_pattern: bool = False, gpu_metrics: bool = False) -> str:
    """What `jobmedic jobs` shows: whether and on what a job is watched for hangs."""
    if signal is not ProgressSignal.NONE:
        return f"on ({signal.value.replace('_', ' ')})"
    extra = []
    if user_pattern:
        extra.append("progress_pattern not matched yet")
    if gpu_metrics:
        extra.append("GPU idle and comm-hang lines only")
    else:
        extra.append("comm-hang lines only")
    return f"off (no progress signal; {'; '.join(extra)})"


def all_gpus_idle(health: Iterable, *, max_util_pct: float = IDLE_UTIL_PCT) -> bool:
    """True when every host has DCGM data, at least one GPU, and every GPU averaged <= `max_util_pct`.

    `health` holds `GpuHealth`-like objects (`has_data`, `gpus[].util_mean`);
    a host without data or a GPU without a utilisation series makes it False:
    unknown is not idle.
    """
    hosts = list(health)
    if not hosts:
        return False
    for host in hosts:
        if not host.has_data or not host.gpus:
            return False
        for gpu in host.gpus:
            if gpu.util_mean is None or gpu.util_mean > max_util_pct:
                return False
    return True


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of an empty list")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def hang_bound(
    iteration_intervals_s: list[float],
    checkpoint_intervals_s: list[float],
    *,
    floor_s: float = DEFAULT_FLOOR_S,
    ceiling_s: float = DEFAULT_CEILING_S,
    default_s: float = DEFAULT_BOUND_S,
    factor: float = DEFAULT_FACTOR,
    min_intervals: int = MIN_INTERVALS,
) -> float:
    """Seconds without progress after which a running job counts as hung.

    `factor` times the 95th percentile of the normal intervals between progress
    observations, but at least 1.5 times the longest stall that contained a
    checkpoint save; clamped to [floor_s, ceiling_s]. With fewer than
    `min_intervals` normal intervals the job's rhythm is unknown and `default_s`
    (clamped too) applies, raised to cover any checkpoint stall already seen and
    `factor` times the longest interval already seen (a job that showed two
    20-minute epochs is not hung after the default 30 minutes).
    """
    if floor_s > ceiling_s:
        raise ValueError(f"hang floor {floor_s}s is above the ceiling {ceiling_s}s; fix the configuration")
    normal = [v for v in iteration_intervals_s if math.isfinite(v) and v >= 0]
    stalls = [v for v in checkpoint_intervals_s if math.isfinite(v) and v >= 0]
    checkpoint_bound = CHECKPOINT_FACTOR * max(stalls) if stalls else 0.0
    if len(normal) < min_intervals:
        bound = max(default_s, checkpoint_bound, factor * max(normal, default=0.0))
    else:
        bound = max(factor * percentile(normal, 95), checkpoint_bound)
    return min(max(bound, floor_s), ceiling_s)


def is_hang(last_progress_at: datetime | None, now: datetime, bound: float, job_running: bool) -> bool:
    """True when a RUNNING job has shown no progress for longer than `bound` seconds.

    Pass the job's start time as `last_progress_at` when it has never shown
    progress, so a job that hangs before its first step is caught too. None
    means nothing is known, and nothing is concluded from that.
    """
    if not job_running or last_progress_at is None:
        return False
    return (now - last_progress_at).total_seconds() > bound


class ProgressTracker(Contract):
    """Progress timestamps of one job attempt, kept by the cluster watch across polls.

    Feed it the samples a screen returns (progress and checkpoints, in line
    order) with the time they were observed. Samples observed at one time (one
    poll) may come in any order: feed checkpoints first, then progress. An
    interval counts as a checkpoint stall when a save was seen inside it or at
    its start (a save logged when it begins, at the poll of the step before it).
    Lists are bounded by `max_samples`.
    """

    max_samples: int = 64
    last_iteration: int | None = None
    last_line_no: int | None = None
    last_progress_at: datetime | None = None
    last_checkpoint_iteration: int | None = None
    last_checkpoint_line_no: int | None = None
    last_checkpoint_at: datetime | None = None
    checkpoint_pending: bool = False  # a save was seen since the last progress advance
    iteration_intervals_s: list[float] = Field(default_factory=list)
    checkpoint_intervals_s: list[float] = Field(default_factory=list)
    rates: list[float] = Field(default_factory=list)  # throughput of each advance, oldest first
    rate_after_checkpoint: list[bool] = Field(default_factory=list)  # parallel to rates
    restarts_seen: int = 0
    source: str = ""  # what the progress is read from (see `switch_source`)
    last_finished: bool = False  # the newest progress line showed done == total

    def switch_source(self, source: str) -> None:
        """Read progress from another source from now on: its numbers are not comparable with the old ones."""
        if source == self.source:
            return
        self.source = source
        self.last_iteration = None
        self.last_line_no = None

    def observe(self, sample: ProgressSample, at: datetime) -> bool:
        """Take in one sample observed at `at`; True when it is new progress."""
        if sample.checkpoint:
            self._observe_checkpoint(sample, at)
            return False
        if sample.iteration is None:
            # a line without a step number (an HF loss dict): new when it is a newer line
            if sample.line_no is None or (self.last_line_no is not None and sample.line_no <= self.last_line_no):
                return False
            self._advance(sample, at)
            return True
        if self.last_iteration is None or sample.iteration > self.last_iteration:
            self._advance(sample, at)
            return True
        if sample.iteration < self.last_iteration and (
            sample.line_no is None or self.last_line_no is None or sample.line_no != self.last_line_no
        ):
            # the iteration went back: the job restarted from a checkpoint; a new rhythm starts
            self.restarts_seen += 1
            self.last_iteration = sample.iteration
            self.last_line_no = sample.line_no
            self.last_progress_at = at
            self.last_finished = sample.finished
            self.checkpoint_pending = False
            self.rates.clear()
            self.rate_after_checkpoint.clear()
            return True
        return False

    def bound(
        self,
        *,
        floor_s: float = DEFAULT_FLOOR_S,
        ceiling_s: float = DEFAULT_CEILING_S,
        default_s: float = DEFAULT_BOUND_S,
        factor: float = DEFAULT_FACTOR,
    ) -> float:
        """The hang bound learned so far (see `hang_bound`)."""
        return hang_bound(
            self.iteration_intervals_s,
            self.checkpoint_intervals_s,
            floor_s=floor_s,
            ceiling_s=ceiling_s,
            default_s=default_s,
            factor=factor,
        )

    def seconds_since_progress(self, now: datetime) -> float | None:
        if self.last_progress_at is None:
            return None
        return (now - self.last_progress_at).total_seconds()

    # ----------------------------------------------------------------- internals

    def _observe_checkpoint(self, sample: ProgressSample, at: datetime) -> None:
        if sample.line_no is not None and sample.line_no == self.last_checkpoint_line_no:
            return
        self.last_checkpoint_iteration = sample.checkpoint_iteration
        self.last_checkpoint_line_no = sample.line_no
        self.last_checkpoint_at = at
        self.checkpoint_pending = True

    def _advance(self, sample: ProgressSample, at: datetime) -> None:
        saved_inside = self.checkpoint_pending or (
            self.last_checkpoint_at is not None and self.last_checkpoint_at == self.last_progress_at
        )
        if self.last_progress_at is not None:
            interval = (at - self.last_progress_at).total_seconds()
            target = self.checkpoint_intervals_s if saved_inside else self.iteration_intervals_s
            target.append(interval)
            del target[: -self.max_samples]
        rate = sample.rate
        if rate is not None:
            self.rates.append(rate)
            self.rate_after_checkpoint.append(saved_inside)
            del self.rates[: -self.max_samples]
            del self.rate_after_checkpoint[: -self.max_samples]
        self.checkpoint_pending = False
        self.last_finished = sample.finished
        self.last_iteration = sample.iteration if sample.iteration is not None else self.last_iteration
        self.last_line_no = sample.line_no if sample.line_no is not None else self.last_line_no
        self.last_progress_at = at
