"""jobmedic's figures about itself for Prometheus: `GET /metrics`, rendered by `prometheus-client`.

The worker serves it on `Settings.metrics_port` (unset: not served), bound to
`Settings.metrics_bind` (loopback unless configured). Every `refresh_s` the
server reads the whole audit trail in a thread, computes the report
(`workers.report`, where every figure is defined) and the audit counts below,
and keeps the metric families; a scrape renders them in the text format (0.0.4)
or in OpenMetrics when the scraper asks for it. When the audit store cannot be
read the last good figures stay up and `jobmedic_report_refresh_failures_total`
counts the failure.

From the audit trail (all labelled by `cluster`):

- histograms `jobmedic_detection_latency_seconds`, `jobmedic_action_latency_seconds`,
  `jobmedic_time_to_restore_seconds`, one observation per incident that has the figure;
- counters `jobmedic_incidents_total`, `jobmedic_stragglers_total`,
  `jobmedic_retries_stopped_total{rule}`;
- gauges `jobmedic_incidents_by_outcome{outcome}` (an open incident later moves to
  another outcome, so this is not a counter), `jobmedic_recovery_success_ratio`
  (absent while no incident is resolved), `jobmedic_jobs`, `jobmedic_ettr_ratio`,
  `jobmedic_observed_seconds`, `jobmedic_productive_seconds` (the two sums the
  cluster ETTR is the ratio of, so several clusters can be aggregated in PromQL);
- per job, bounded: `jobmedic_job_ettr_ratio{job_id}` and `jobmedic_job_incidents{job_id}`
  for at most `job_limit` jobs seen within the last `job_window_s` (most recent first);
- counters of audit entries: `jobmedic_detections_total{incident}` (every `detection`,
  stragglers included, by `detail.incident`), `jobmedic_advice_total{category,action,mode}`
  (every `advice`: the verdict's category, so this is also detections by category once
  attributed; `unattributed` when the entry has none), `jobmedic_actions_requested_total{action}`,
  `jobmedic_actions_total{action,outcome}` (every `action_confirmed`; outcome `changed` or
  `already_in_effect`, as the scheduler answered), `jobmedic_systemic_events_total{what}` (the
  systemic guard's `systemic_event` entries: `alert`, `release`), `jobmedic_lemon_nodes_total{what}`
  (`lemon`, `cleared`, `cap`), `jobmedic_watchdog_firings_total{released}`
  (`true` when the watchdog released a hold).

From the cluster watch, when the worker hands the server a `WatchStats` (labelled by `cluster`):
`jobmedic_watched_jobs`, `jobmedic_watch_passes_total`, the histogram
`jobmedic_watch_pass_duration_seconds` and `jobmedic_watch_last_pass_timestamp_seconds`
(the watch's lag is `time() - jobmedic_watch_last_pass_timestamp_seconds`: it grows when a
pass is slow and when the watch stopped).

About the server itself: `jobmedic_report_last_refresh_timestamp_seconds`,
`jobmedic_report_refresh_duration_seconds`, `jobmedic_report_refresh_failures_total`.

Counters stay monotonic as long as the audit trail is not pruned.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from loguru import logger
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder
from prometheus_client.utils import floatToGoString

from adapters.errors import AuditStoreError
from workers.report import OUTCOMES, ClusterFigures, Incident, Report, build_report
from workflows.contracts import ActionKind, AuditEntry, EventType

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # what a scraper that asks for nothing in particular gets
# seconds; from a fast detection to a restart that waited in the queue for hours
BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
# seconds one watch pass takes: one scheduler query plus incremental log reads of every job
PASS_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
MAX_REQUEST_HEAD = 16 * 1024
REQUEST_TIMEOUT_S = 10.0
UNATTRIBUTED = "unattributed"


class AuditReader(Protocol):
    """What the server needs of the audit store (`AuditStore` has it); called in a thread."""

    def query(self, *, limit: int | None = ...) -> list[AuditEntry]: ...


# --------------------------------------------------------------------------- figures as metric families (pure)


def histogram(name: str, help_text: str, labels: Sequence[str]) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, help_text, labels=list(labels))


def observe_all(
    family: HistogramMetricFamily, label_values: Sequence[str], values: Sequence[float], buckets: Sequence[float] = BUCKETS
) -> None:
    """One histogram series (cumulative buckets, +Inf, sum) of `values`."""
    counts = [(floatToGoString(float(b)), float(sum(1 for v in values if v <= b))) for b in buckets]
    family.add_metric(list(label_values), [*counts, ("+Inf", float(len(values)))], float(sum(values)))


def report_families(
    report: Report, *, now: datetime, job_window_s: float = 86400.0, job_limit: int = 500
) -> list[Metric]:
    """Metric families of one report (see the module docstring for the list)."""
    incidents_by_cluster: dict[str, list[Incident]] = {c.cluster: [] for c in report.clusters}
    for job in report.jobs:
        incidents_by_cluster.setdefault(job.cluster, []).extend(job.incidents)

    c_ = ["cluster"]
    detection = histogram("jobmedic_detection_latency_seconds",
                          "Seconds from a job's failure (Slurm EndTime, or last progress for a hang) to jobmedic's detection.", c_)
    action = histogram("jobmedic_action_latency_seconds",
                       "Seconds from detection to the scheduler's confirmation of the release or cancel.", c_)
    restore = histogram("jobmedic_time_to_restore_seconds",
                        "Seconds from the confirmed release to the first progress line of the next attempt.", c_)
    incidents = CounterMetricFamily("jobmedic_incidents_total", "Incidents: detections of an interrupted job.", labels=c_)
    outcomes = GaugeMetricFamily("jobmedic_incidents_by_outcome",
                                 "Incidents by outcome: restored, completed (success); stopped, watchdog, superseded (failed); open.",
                                 labels=[*c_, "outcome"])
    stragglers = CounterMetricFamily("jobmedic_stragglers_total", "Straggler detections (not recovered, not incidents).", labels=c_)
    success = GaugeMetricFamily("jobmedic_recovery_success_ratio",
                                "Resolved incidents whose job trained again or completed, over all resolved incidents.", labels=c_)
    stopped = CounterMetricFamily("jobmedic_retries_stopped_total", "Advice to stop retrying a job, by policy rule.",
                                  labels=[*c_, "rule"])
    jobs = GaugeMetricFamily("jobmedic_jobs", "Jobs with an audit trail.", labels=c_)
    ettr = GaugeMetricFamily("jobmedic_ettr_ratio",
                             "Effective training time ratio (productive / observed seconds over all jobs), estimated from audit events.",
                             labels=c_)
    observed = GaugeMetricFamily("jobmedic_observed_seconds", "Observed wall seconds of all jobs (the ETTR denominator).", labels=c_)
    productive = GaugeMetricFamily("jobmedic_productive_seconds", "Productive seconds of all jobs (the ETTR numerator).", labels=c_)
    # `job_id`, not `job`: Prometheus sets `job` on every scraped series (the scrape job's name)
    job_ettr = GaugeMetricFamily("jobmedic_job_ettr_ratio", "One recent job's ETTR, estimated from audit events.",
                                 labels=[*c_, "job_id"])
    job_incidents = GaugeMetricFamily("jobmedic_job_incidents", "One recent job's incidents.", labels=[*c_, "job_id"])

    for c in report.clusters:
        mine = incidents_by_cluster.get(c.cluster, [])
        observe_all(detection, [c.cluster], [i.detection_latency_s for i in mine if i.detection_latency_s is not None])
        observe_all(action, [c.cluster], [i.action_latency_s for i in mine if i.action_latency_s is not None])
        observe_all(restore, [c.cluster], [i.restore_s for i in mine if i.restore_s is not None])
        incidents.add_metric([c.cluster], c.incidents)
        for outcome in OUTCOMES:
            outcomes.add_metric([c.cluster, outcome], c.outcomes.get(outcome, 0))
        stragglers.add_metric([c.cluster], c.stragglers)
        if c.success_rate is not None:
            success.add_metric([c.cluster], c.success_rate)
        for rule, count in c.retries_stopped.items():
            stopped.add_metric([c.cluster, rule], count)
        _cluster_gauges(c, jobs=jobs, ettr=ettr, observed=observed, productive=productive)

    for job in recent_jobs(report, now=now, window_s=job_window_s, limit=job_limit):
        job_ettr.add_metric([job.cluster, job.job_id], job.ettr)
        job_incidents.add_metric([job.cluster, job.job_id], len(job.incidents))

    return [detection, action, restore, incidents, outcomes, stragglers, success, stopped, jobs, ettr, observed,
            productive, job_ettr, job_incidents]


def _cluster_gauges(
    c: ClusterFigures, *, jobs: GaugeMetricFamily, ettr: GaugeMetricFamily, observed: GaugeMetricFamily,
    productive: GaugeMetricFamily,
) -> None:
    jobs.add_metric([c.cluster], c.jobs)
    if c.ettr is not None:
        ettr.add_metric([c.cluster], c.ettr)
    observed.add_metric([c.cluster], c.wall_s)
    productive.add_metric([c.cluster], c.productive_s)


def audit_families(entries: Iterable[AuditEntry]) -> list[Metric]:
    """Counts of audit entries by kind (see the module docstring): what jobmedic detected, advised and did."""
    detections: Tally[tuple[str, ...]] = Tally()
    advice: Tally[tuple[str, ...]] = Tally()
    requested: Tally[tuple[str, ...]] = Tally()
    confirmed: Tally[tuple[str, ...]] = Tally()
    watchdog: Tally[tuple[str, ...]] = Tally()
    systemic: Tally[tuple[str, ...]] = Tally()
    lemons: Tally[tuple[str, ...]] = Tally()
    for e in entries:
        if e.event_type is EventType.DETECTION:
            kind = (e.detail or {}).get("incident")
            detections[e.cluster, kind if isinstance(kind, str) and kind else "unknown"] += 1
        elif e.event_type is EventType.ADVICE:
            advice[e.cluster, e.category or UNATTRIBUTED, e.action or "unknown", e.mode or "unknown"] += 1
        elif e.event_type is EventType.ACTION_REQUESTED:
            requested[e.cluster, e.action or "unknown"] += 1
        elif e.event_type is EventType.ACTION_CONFIRMED:
            changed = (e.detail or {}).get("changed", True)  # a hold before the decision is a change
            confirmed[e.cluster, e.action or "unknown", "changed" if changed else "already_in_effect"] += 1
        elif e.event_type is EventType.WATCHDOG:
            watchdog[e.cluster, "true" if e.action == ActionKind.RELEASE else "false"] += 1
        elif e.event_type is EventType.SYSTEMIC_EVENT:
            systemic[e.cluster, e.action or "unknown"] += 1
        elif e.event_type is EventType.LEMON_NODE:
            lemons[e.cluster, e.action or "unknown"] += 1

    def counter(name: str, help_text: str, labels: list[str], tally: Tally[tuple[str, ...]]) -> CounterMetricFamily:
        family = CounterMetricFamily(name, help_text, labels=["cluster", *labels])
        for key in sorted(tally):
            family.add_metric(list(key), tally[key])
        return family

    return [
        counter("jobmedic_detections_total", "Detections (audit entries), stragglers included, by incident kind.",
                ["incident"], detections),
        counter("jobmedic_advice_total", "Advice recorded, by the verdict's category, the advised action and the mode.",
                ["category", "action", "mode"], advice),
        counter("jobmedic_actions_requested_total", "Scheduler actions jobmedic requested, by action.", ["action"], requested),
        counter("jobmedic_actions_total",
                "Scheduler actions confirmed, by action and outcome (changed, or already in effect: a retried action).",
                ["action", "outcome"], confirmed),
        counter("jobmedic_watchdog_firings_total", "Watchdog firings; released: whether it released a hold (fail open).",
                ["released"], watchdog),
        counter("jobmedic_systemic_events_total",
                "Systemic events of the guard, by what happened: alert (an event opened, its jobs held), release.",
                ["what"], systemic),
        counter("jobmedic_lemon_nodes_total",
                "Lemon-node changes of the guard: lemon (declared), cleared, cap (a cap kept a node from being one).",
                ["what"], lemons),
    ]


def recent_jobs(report: Report, *, now: datetime, window_s: float, limit: int):
    """Jobs seen within `window_s` of `now`, newest first, at most `limit`, one per (cluster, job id).

    A recycled job id keeps only its newest job, so that no two series share labels.
    """
    cutoff = now - timedelta(seconds=window_s)
    chosen: dict[tuple[str, str], Any] = {}
    for job in sorted(report.jobs, key=lambda j: j.span_end, reverse=True):
        if job.span_end < cutoff:
            break
        key = (job.cluster, job.job_id)
        if key not in chosen:
            chosen[key] = job
        if len(chosen) >= limit:
            break
    return list(chosen.values())


# --------------------------------------------------------------------------- the watch's own figures


class WatchStats:
    """What the cluster watches report about their passes; the metrics server serves it.

    The worker makes one, hands it to every cluster's watch and to the server; a
    watch calls `record_pass` at the end of each pass. No global registry: each
    instance owns its series (tests make as many as they like).
    """

    def __init__(self) -> None:
        self._watched = Gauge("jobmedic_watched_jobs", "Opted-in jobs the cluster watch follows, after its last pass.",
                              ["cluster"], registry=None)
        self._passes = Counter("jobmedic_watch_passes", "Passes of the cluster watch over every opted-in job.",
                               ["cluster"], registry=None)
        self._duration = Histogram("jobmedic_watch_pass_duration_seconds",
                                   "Seconds one watch pass took (scheduler query, log reads, signals).",
                                   ["cluster"], buckets=PASS_BUCKETS, registry=None)
        self._last = Gauge("jobmedic_watch_last_pass_timestamp_seconds",
                           "Unix time the last watch pass ended; time() minus this is the watch's lag.",
                           ["cluster"], registry=None)

    def record_pass(self, cluster: str, *, started_at: datetime, finished_at: datetime, watched_jobs: int) -> None:
        """One finished pass of `cluster`'s watch (times from the watch's own clock)."""
        self._watched.labels(cluster).set(watched_jobs)
        self._passes.labels(cluster).inc()
        self._duration.labels(cluster).observe(max(0.0, (finished_at - started_at).total_seconds()))
        self._last.labels(cluster).set(finished_at.timestamp())

    def collect(self) -> Iterator[Metric]:
        for metric in (self._watched, self._passes, self._duration, self._last):
            yield from metric.collect()


# --------------------------------------------------------------------------- the server


class MetricsServer:
    """A small asyncio HTTP server for `GET /metrics` over figures refreshed from the audit store.

    Args:
        store: the audit store (read in a worker thread).
        port: TCP port; 0 picks a free one (see `port` after `start`).
        host: address to bind (`Settings.metrics_bind`); loopback unless opened on purpose.
        refresh_s: seconds between reads of the audit trail.
        job_window_s, job_limit: which jobs get per-job series (bounded cardinality).
        watch: the cluster watches' figures, served with the others.
    """

    def __init__(
        self,
        store: AuditReader,
        *,
        port: int,
        host: str = "127.0.0.1",
        refresh_s: float = 30.0,
        job_window_s: float = 86400.0,
        job_limit: int = 500,
        watch: WatchStats | None = None,
    ) -> None:
        self._store = store
        self._host = host
        self._requested_port = port
        self._refresh_s = refresh_s
        self._job_window_s = job_window_s
        self._job_limit = job_limit
        self._server: asyncio.Server | None = None
        self._loop_task: asyncio.Task | None = None
        self._families: list[Metric] = []
        self._last_refresh: float | None = None
        self._last_duration = 0.0
        self._failures = 0
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        if watch is not None:
            self.registry.register(watch)

    @property
    def port(self) -> int:
        """The bound port (after `start`)."""
        if self._server is None or not self._server.sockets:
            return self._requested_port
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}/metrics"

    async def start(self) -> None:
        """Read the audit trail once, then serve and refresh in the background."""
        await self.refresh()
        try:
            self._server = await asyncio.start_server(
                self._handle, self._host, self._requested_port, limit=MAX_REQUEST_HEAD
            )
        except OSError as exc:
            raise OSError(
                f"cannot serve metrics on {self._host}:{self._requested_port} ({exc}); "
                "choose a free port with metrics_port (JOBMEDIC_METRICS_PORT) or another address with metrics_bind"
            ) from exc
        self._loop_task = asyncio.create_task(self._refresh_forever(), name="jobmedic-metrics-refresh")
        logger.info("jobmedic metrics on {} (refresh every {} s)", self.url, self._refresh_s)

    async def stop(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> MetricsServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def refresh(self) -> bool:
        """Recompute the figures now; False (and the old figures kept) when the store cannot be read."""
        started = time.monotonic()
        try:
            self._families = await asyncio.to_thread(self._compute)
        except AuditStoreError as exc:
            self._failures += 1
            logger.warning("metrics: the audit store cannot be read ({}); serving the last figures", exc)
            return False
        self._last_duration = time.monotonic() - started
        self._last_refresh = time.time()
        return True

    def _compute(self) -> list[Metric]:
        now = datetime.now(UTC)
        entries = self._store.query(limit=None)
        report = build_report(entries, now=now)
        return [
            *report_families(report, now=now, job_window_s=self._job_window_s, job_limit=self._job_limit),
            *audit_families(entries),
        ]

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            await self.refresh()

    def collect(self) -> Iterator[Metric]:
        """The figures of the last refresh plus the server's own state (the registry calls this)."""
        yield from self._families
        last = GaugeMetricFamily("jobmedic_report_last_refresh_timestamp_seconds",
                                 "Unix time of the last successful read of the audit trail.", labels=[])
        if self._last_refresh is not None:
            last.add_metric([], self._last_refresh)
        yield last
        yield GaugeMetricFamily("jobmedic_report_refresh_duration_seconds",
                                "Seconds the last successful refresh took (read and compute).", value=self._last_duration)
        yield CounterMetricFamily("jobmedic_report_refresh_failures_total",
                                  "Refreshes that could not read the audit trail.", value=self._failures)

    def exposition(self, accept: str = "") -> tuple[str, bytes]:
        """(content type, body) of `GET /metrics` for a scraper sending `Accept: accept`."""
        encode, content_type = choose_encoder(accept)
        return content_type, encode(self.registry)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=REQUEST_TIMEOUT_S)
            status, content_type, payload = self._answer(head)
            method = head.split(b" ", 1)[0]
            headers = (
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(payload)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
            writer.write(headers if method == b"HEAD" else headers + payload)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError) as exc:
            logger.debug("metrics: dropped a request: {!r}", exc)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _answer(self, head: bytes) -> tuple[str, str, bytes]:
        request_line, _, rest = head.decode("latin-1").partition("\r\n")
        parts = request_line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return "400 Bad Request", CONTENT_TYPE, b"malformed request line\n"
        method, target = parts[0], parts[1]
        if method not in {"GET", "HEAD"}:
            return "405 Method Not Allowed", CONTENT_TYPE, b"only GET and HEAD\n"
        path = target.split("?", 1)[0]
        if path == "/metrics":
            return ("200 OK", *self.exposition(_header(rest, "accept")))
        if path == "/":
            return "200 OK", CONTENT_TYPE, b"jobmedic: metrics at /metrics\n"
        return "404 Not Found", CONTENT_TYPE, b"not found; metrics are at /metrics\n"


def _header(lines: str, name: str) -> str:
    for line in lines.split("\r\n"):
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == name:
            return value.strip()
    return ""


async def start_metrics_server(
    store: AuditReader, *, port: int, host: str = "127.0.0.1", watch: WatchStats | None = None
) -> MetricsServer:
    """A started `MetricsServer` (the worker's entry point); `host` is `Settings.metrics_bind`."""
    server = MetricsServer(store, port=port, host=host, watch=watch)
    await server.start()
    return server
