"""jobmedic's figures about itself for Prometheus: `GET /metrics` in the text exposition format.

The worker serves it on `Settings.metrics_port` (unset: not served). Every
`refresh_s` the server reads the whole audit trail in a thread, computes the
report (`workers.report`, where every figure is defined) and renders it once;
a scrape only sends the rendered text. When the audit store cannot be read the
last good figures stay up and `jobmedic_report_refresh_failures_total` counts
the failure.

Metrics (all labelled by `cluster`):

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
- about the server itself: `jobmedic_report_last_refresh_timestamp_seconds`,
  `jobmedic_report_refresh_duration_seconds`, `jobmedic_report_refresh_failures_total`.

Counters stay monotonic as long as the audit trail is not pruned.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from loguru import logger

from adapters.errors import AuditStoreError
from workers.report import OUTCOMES, ClusterFigures, Incident, Report, build_report
from workflows.contracts import AuditEntry

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# seconds; from a fast detection to a restart that waited in the queue for hours
BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
MAX_REQUEST_HEAD = 16 * 1024
REQUEST_TIMEOUT_S = 10.0


class AuditReader(Protocol):
    """What the server needs of the audit store (`AuditStore` has it); called in a thread."""

    def query(self, **filters: Any) -> list[AuditEntry]: ...


# --------------------------------------------------------------------------- rendering (pure)


def escape_label(value: str) -> str:
    """A label value for the text format: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def number(value: float) -> str:
    """A sample value as the text format spells it."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


@dataclass
class Family:
    """One metric family: its HELP and TYPE lines and its samples."""

    name: str
    kind: str  # counter | gauge | histogram
    help: str
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, suffix: str = "", **labels: str) -> None:
        self.samples.append((suffix, labels, value))

    def observe_all(self, values: Sequence[float], buckets: Sequence[float] = BUCKETS, **labels: str) -> None:
        """Histogram samples (cumulative buckets, +Inf, sum, count) for `values`."""
        for bound in buckets:
            self.add(sum(1 for v in values if v <= bound), "_bucket", **labels, le=number(float(bound)))
        self.add(len(values), "_bucket", **labels, le="+Inf")
        self.add(float(sum(values)), "_sum", **labels)
        self.add(len(values), "_count", **labels)

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {escape_help(self.help)}", f"# TYPE {self.name} {self.kind}"]
        for suffix, labels, value in self.samples:
            body = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items())
            lines.append(f"{self.name}{suffix}{{{body}}} {number(value)}" if body else f"{self.name}{suffix} {number(value)}")
        return lines


def render_families(families: Iterable[Family]) -> str:
    """The text exposition of `families`, newline-terminated."""
    return "".join(line + "\n" for f in families for line in f.render())


def report_families(
    report: Report, *, now: datetime, job_window_s: float = 86400.0, job_limit: int = 500
) -> list[Family]:
    """Metric families of one report (see the module docstring for the list)."""
    incidents_by_cluster: dict[str, list[Incident]] = {c.cluster: [] for c in report.clusters}
    for job in report.jobs:
        incidents_by_cluster.setdefault(job.cluster, []).extend(job.incidents)

    detection = Family("jobmedic_detection_latency_seconds", "histogram",
                       "Seconds from a job's failure (Slurm EndTime, or last progress for a hang) to jobmedic's detection.")
    action = Family("jobmedic_action_latency_seconds", "histogram",
                    "Seconds from detection to the scheduler's confirmation of the release or cancel.")
    restore = Family("jobmedic_time_to_restore_seconds", "histogram",
                     "Seconds from the confirmed release to the first progress line of the next attempt.")
    incidents = Family("jobmedic_incidents_total", "counter", "Incidents: detections of an interrupted job.")
    outcomes = Family("jobmedic_incidents_by_outcome", "gauge",
                      "Incidents by outcome: restored, completed (success); stopped, watchdog, superseded (failed); open.")
    stragglers = Family("jobmedic_stragglers_total", "counter", "Straggler detections (not recovered, not incidents).")
    success = Family("jobmedic_recovery_success_ratio", "gauge",
                     "Resolved incidents whose job trained again or completed, over all resolved incidents.")
    stopped = Family("jobmedic_retries_stopped_total", "counter", "Advice to stop retrying a job, by policy rule.")
    jobs = Family("jobmedic_jobs", "gauge", "Jobs with an audit trail.")
    ettr = Family("jobmedic_ettr_ratio", "gauge",
                  "Effective training time ratio (productive / observed seconds over all jobs), estimated from audit events.")
    observed = Family("jobmedic_observed_seconds", "gauge", "Observed wall seconds of all jobs (the ETTR denominator).")
    productive = Family("jobmedic_productive_seconds", "gauge", "Productive seconds of all jobs (the ETTR numerator).")
    job_ettr = Family("jobmedic_job_ettr_ratio", "gauge", "One recent job's ETTR, estimated from audit events.")
    job_incidents = Family("jobmedic_job_incidents", "gauge", "One recent job's incidents.")

    for c in report.clusters:
        mine = incidents_by_cluster.get(c.cluster, [])
        detection.observe_all([i.detection_latency_s for i in mine if i.detection_latency_s is not None], cluster=c.cluster)
        action.observe_all([i.action_latency_s for i in mine if i.action_latency_s is not None], cluster=c.cluster)
        restore.observe_all([i.restore_s for i in mine if i.restore_s is not None], cluster=c.cluster)
        incidents.add(c.incidents, cluster=c.cluster)
        for outcome in OUTCOMES:
            outcomes.add(c.outcomes.get(outcome, 0), cluster=c.cluster, outcome=outcome)
        stragglers.add(c.stragglers, cluster=c.cluster)
        if c.success_rate is not None:
            success.add(c.success_rate, cluster=c.cluster)
        for rule, count in c.retries_stopped.items():
            stopped.add(count, cluster=c.cluster, rule=rule)
        _cluster_gauges(c, jobs=jobs, ettr=ettr, observed=observed, productive=productive)

    # `job_id`, not `job`: Prometheus sets `job` on every scraped series (the scrape job's name)
    for job in recent_jobs(report, now=now, window_s=job_window_s, limit=job_limit):
        job_ettr.add(job.ettr, cluster=job.cluster, job_id=job.job_id)
        job_incidents.add(len(job.incidents), cluster=job.cluster, job_id=job.job_id)

    return [detection, action, restore, incidents, outcomes, stragglers, success, stopped, jobs, ettr, observed,
            productive, job_ettr, job_incidents]


def _cluster_gauges(c: ClusterFigures, *, jobs: Family, ettr: Family, observed: Family, productive: Family) -> None:
    jobs.add(c.jobs, cluster=c.cluster)
    if c.ettr is not None:
        ettr.add(c.ettr, cluster=c.cluster)
    observed.add(c.wall_s, cluster=c.cluster)
    productive.add(c.productive_s, cluster=c.cluster)


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


# --------------------------------------------------------------------------- the server


class MetricsServer:
    """A small asyncio HTTP server for `GET /metrics` over figures refreshed from the audit store.

    Args:
        store: the audit store (read in a worker thread).
        port: TCP port; 0 picks a free one (see `port` after `start`).
        host: address to bind; the worker binds every interface so Prometheus can scrape it.
        refresh_s: seconds between reads of the audit trail.
        job_window_s, job_limit: which jobs get per-job series (bounded cardinality).
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
    ) -> None:
        self._store = store
        self._host = host
        self._requested_port = port
        self._refresh_s = refresh_s
        self._job_window_s = job_window_s
        self._job_limit = job_limit
        self._server: asyncio.Server | None = None
        self._loop_task: asyncio.Task | None = None
        self._text = ""
        self._last_refresh: float | None = None
        self._last_duration = 0.0
        self._failures = 0

    @property
    def port(self) -> int:
        """The bound port (after `start`)."""
        if self._server is None or not self._server.sockets:
            return self._requested_port
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}/metrics"

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
                "choose a free port with metrics_port (JOBMEDIC_METRICS_PORT)"
            ) from exc
        self._loop_task = asyncio.create_task(self._refresh_forever(), name="jobmedic-metrics-refresh")
        logger.info("jobmedic metrics on http://{}:{}/metrics (refresh every {} s)", self._host, self.port, self._refresh_s)

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
            self._text = await asyncio.to_thread(self._compute)
        except AuditStoreError as exc:
            self._failures += 1
            logger.warning("metrics: the audit store cannot be read ({}); serving the last figures", exc)
            return False
        self._last_duration = time.monotonic() - started
        self._last_refresh = time.time()
        return True

    def _compute(self) -> str:
        now = datetime.now(UTC)
        report = build_report(self._store.query(limit=None), now=now)
        families = report_families(report, now=now, job_window_s=self._job_window_s, job_limit=self._job_limit)
        return render_families(families)

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            await self.refresh()

    def exposition(self) -> str:
        """What `GET /metrics` answers: the figures plus the server's own state."""
        last = Family("jobmedic_report_last_refresh_timestamp_seconds", "gauge",
                      "Unix time of the last successful read of the audit trail.")
        if self._last_refresh is not None:
            last.add(self._last_refresh)
        duration = Family("jobmedic_report_refresh_duration_seconds", "gauge",
                          "Seconds the last successful refresh took (read and compute).")
        duration.add(self._last_duration)
        failures = Family("jobmedic_report_refresh_failures_total", "counter",
                          "Refreshes that could not read the audit trail.")
        failures.add(self._failures)
        return self._text + render_families([last, duration, failures])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=REQUEST_TIMEOUT_S)
            status, body = self._answer(head)
            method = head.split(b" ", 1)[0]
            payload = body.encode()
            headers = (
                f"HTTP/1.1 {status}\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {len(payload)}\r\n"
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

    def _answer(self, head: bytes) -> tuple[str, str]:
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return "400 Bad Request", "malformed request line\n"
        method, target = parts[0], parts[1]
        if method not in {"GET", "HEAD"}:
            return "405 Method Not Allowed", "only GET and HEAD\n"
        path = target.split("?", 1)[0]
        if path == "/metrics":
            return "200 OK", self.exposition()
        if path == "/":
            return "200 OK", "jobmedic: metrics at /metrics\n"
        return "404 Not Found", "not found; metrics are at /metrics\n"


async def start_metrics_server(store: AuditReader, *, port: int, host: str = "0.0.0.0") -> MetricsServer:
    """A started `MetricsServer` (the worker's entry point)."""
    server = MetricsServer(store, port=port, host=host)
    await server.start()
    return server
