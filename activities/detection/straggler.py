"""Straggler detection: a sustained drop of throughput, and which host is slow.

Pure functions. A job is straggling when its throughput stays below a fraction
of its own recent healthy baseline for several consecutive samples. Warm-up
samples, the step that contains a checkpoint save and a single slow step do not
count. With per-host GPU metrics (utilisation, per-node throughput), the slow
host is the one far below the others.

`straggler_culprit` is the one step that asks the outside world: given a metrics
port (`PrometheusClient.node_telemetry`) and the per-rank timings the job printed,
it names the slow node through the pure `activities.detection.culprit.find_culprits`.
A metrics failure is evidence too ("metrics unavailable"), never an exception.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from activities.detection.progress import ProgressSample
from activities.detection.rank_timing import RankTiming, node_timings
from adapters.errors import MetricsError
from workflows.contracts import Contract, EvidenceLine, JobInfo, StragglerFinding

if TYPE_CHECKING:
    from adapters.metrics.telemetry import NodeTelemetry

DEFAULT_WARMUP = 3
DEFAULT_WINDOW = 20
DEFAULT_MIN_BASELINE = 5
DEFAULT_THRESHOLD = 0.7
DEFAULT_CONSECUTIVE = 3


class Slowdown(Contract):
    """Whether throughput is in a sustained drop now, and the figures behind it."""

    sustained: bool = False
    baseline: float | None = None  # median of the recent healthy window
    current: float | None = None  # median of the current slow run
    ratio: float | None = None  # current / baseline
    slow_run: int = 0  # consecutive slow samples ending at the newest one
    since_index: int | None = None  # index of the first sample of the slow run


def detect_slowdown(
    rates: Sequence[float | None],
    *,
    skip: Collection[int] = (),
    warmup: int = DEFAULT_WARMUP,
    window: int = DEFAULT_WINDOW,
    min_baseline: int = DEFAULT_MIN_BASELINE,
    threshold: float = DEFAULT_THRESHOLD,
    consecutive: int = DEFAULT_CONSECUTIVE,
) -> Slowdown:
    """Judge the newest samples of a job's throughput (higher is better), oldest first.

    Args:
        rates: throughput per sample; None or non-finite values are ignored.
        skip: indexes to ignore (the step that contains a checkpoint save).
        warmup: the first samples, ignored (compilation, data loader start).
        window: healthy samples the baseline median is taken over.
        min_baseline: healthy samples needed before anything is judged.
        threshold: a sample below threshold * baseline is slow.
        consecutive: slow samples in a row, ending at the newest, for a sustained drop.
    """
    healthy: deque[float] = deque(maxlen=window)
    run: list[float] = []
    run_start: int | None = None
    baseline: float | None = None
    seen = 0
    for index, rate in enumerate(rates):
        if rate is None or not math.isfinite(rate) or rate < 0 or index in skip:
            continue
        seen += 1
        if seen <= warmup:
            continue
        if len(healthy) < min_baseline:
            healthy.append(rate)
            continue
        baseline = statistics.median(healthy)
        if rate < threshold * baseline:
            if not run:
                run_start = index
            run.append(rate)
        else:
            run, run_start = [], None
            healthy.append(rate)
    if len(healthy) >= min_baseline:
        baseline = statistics.median(healthy)
    current = statistics.median(run) if run else None
    return Slowdown(
        sustained=len(run) >= consecutive,
        baseline=baseline,
        current=current,
        ratio=(current / baseline) if current is not None and baseline else None,
        slow_run=len(run),
        since_index=run_start,
    )


def slowdown_from_samples(samples: Sequence[ProgressSample], **options) -> Slowdown:
    """`detect_slowdown` over progress samples in line order; checkpoint saves mark the next step.

    Uses each sample's `rate` (logged throughput, else 1 / iteration time).
    """
    rates: list[float | None] = []
    skip: set[int] = set()
    after_checkpoint = False
    for sample in samples:
        if sample.checkpoint:
            after_checkpoint = True
            continue
        if after_checkpoint:
            skip.add(len(rates))
            after_checkpoint = False
        rates.append(sample.rate)
    return detect_slowdown(rates, skip=skip, **options)


def slow_hosts(
    per_host_metric: dict[str, list[float]],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    min_hosts: int = 2,
    min_points: int = 1,
    min_reference: float = 1e-9,
    higher_is_better: bool = True,
) -> list[str]:
    """Hosts whose metric is an outlier against the other hosts of the same job.

    Each host is summarised by the median of its series; a host is slow when
    its median is below `threshold` times the median of the other hosts'
    medians (above 1 / threshold for lower-is-better metrics such as step
    time). When more than half the hosts look slow, the job as a whole changed
    and no host is singled out. Returns host names sorted.
    """
    summary: dict[str, float] = {}
    for host, series in per_host_metric.items():
        values = [v for v in series if v is not None and math.isfinite(v)]
        if len(values) >= min_points:
            summary[host] = statistics.median(values)
    if len(summary) < min_hosts:
        return []
    slow: list[str] = []
    for host, value in summary.items():
        others = [v for h, v in summary.items() if h != host]
        reference = statistics.median(others)
        if abs(reference) < min_reference:
            continue
        if higher_is_better:
            if value < threshold * reference:
                slow.append(host)
        elif value > reference / threshold:
            slow.append(host)
    if len(slow) * 2 > len(summary):
        return []
    return sorted(slow)


# --------------------------------------------------------------------------- the culprit

MIN_CULPRIT_WINDOW_S = 120.0  # enough scrapes for a mean even at a 15 s interval
MAX_CULPRIT_WINDOW_S = 1800.0


class NodeTelemetrySource(Protocol):
    async def node_telemetry(self, hosts: list[str], *, start: datetime, end: datetime) -> dict[str, NodeTelemetry]: ...


def culprit_window(slow_since: datetime | None, now: datetime) -> tuple[datetime, datetime]:
    """The window to compare nodes over: from the start of the slow run (bounded), to now."""
    span = (now - slow_since).total_seconds() if slow_since is not None else MAX_CULPRIT_WINDOW_S / 3
    span = min(MAX_CULPRIT_WINDOW_S, max(MIN_CULPRIT_WINDOW_S, span))
    return now - timedelta(seconds=span), now


async def straggler_culprit(
    metrics: NodeTelemetrySource | None,
    job: JobInfo,
    *,
    start: datetime,
    end: datetime,
    timings: Sequence[RankTiming] = (),
) -> StragglerFinding:
    """The node slowing `job`, from per-node DCGM series over [start, end] and per-rank timings.

    One query per metric covers all the job's nodes. Without metrics (none configured, or
    Prometheus failing) the per-rank timings alone decide, and the evidence says so.
    """
    from activities.detection.culprit import find_culprits

    telemetry: dict[str, NodeTelemetry] = {}
    notes: list[EvidenceLine] = []
    if metrics is not None and job.nodes:
        try:
            telemetry = await metrics.node_telemetry(list(job.nodes), start=start, end=end)
        except MetricsError as exc:
            notes.append(EvidenceLine(source="metrics", line=f"GPU metrics unavailable: {exc}",
                                      pattern_id="straggler.metrics_unavailable"))
    elif metrics is None:
        notes.append(EvidenceLine(source="metrics", line="no metrics source configured; per-rank timings only",
                                  pattern_id="straggler.metrics_unavailable"))
    finding = find_culprits(telemetry, node_timings(timings, job.layout), nodes=job.nodes)
    finding.evidence = notes + finding.evidence
    return finding
