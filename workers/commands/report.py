"""`jobmedic report`: jobmedic's own figures (latencies, recovery success, retries stopped, ETTR).

The figures and their definitions are in `workers.report`; this module reads
the audit trail and prints them.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from workers.commands.audit import fit, parse_since
from workers.factories.audit import build_audit_store
from workers.report import ClusterFigures, JobFigures, LatencySummary, Report, build_report
from workers.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "report",
        help="jobmedic's own figures: detection/action/restore latencies, recovery success, ETTR",
        description=(
            "Figures computed from the audit trail, per cluster and per job. How each one is defined: "
            "the docstring of workers/report.py (.venv/bin/python -m pydoc workers.report). Times are UTC."
        ),
    )
    parser.add_argument("--cluster", metavar="NAME", help="only this cluster")
    parser.add_argument("--job", metavar="ID", help="only this Slurm job id")
    parser.add_argument(
        "--since", metavar="WHEN", type=parse_since,
        help="only audit entries at or after WHEN: a span back from now (30m, 2h, 7d) "
        "or an ISO time (UTC unless it has an offset)",
    )
    parser.add_argument("--format", choices=["table", "json"], default="table", help="output format (default: table)")
    parser.set_defaults(handler=run_report)


def run_report(args: argparse.Namespace, settings: Settings) -> int:
    store = build_audit_store(settings)
    try:
        entries = store.query(cluster=args.cluster, job_id=args.job, since=args.since, limit=None)
    finally:
        store.close()
    report = build_report(entries, now=datetime.now(UTC), since=args.since)
    print(format_json(report) if args.format == "json" else format_table(report))
    return 0


# --------------------------------------------------------------------------- output


def format_json(report: Report) -> str:
    """The whole report as JSON: `clusters` and `jobs` (each with its `incidents`)."""
    return json.dumps(report.model_dump(mode="json"), indent=2, ensure_ascii=False)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _latency(summary: LatencySummary) -> str:
    if not summary.count:
        return "-"
    return f"{_s(summary.median_s)}/{_s(summary.p95_s)} (n={summary.count})"


def _rules(counts: dict[str, int]) -> str:
    return ", ".join(f"{rule}={n}" for rule, n in counts.items()) or "-"


def format_table(report: Report) -> str:
    """Two tables: clusters (latencies as median/p95 seconds) and jobs."""
    if not report.jobs:
        return "no audit entries match: nothing to report"
    return "\n".join([*_cluster_table(report.clusters), "", *_job_table(report.jobs)])


def _cluster_table(clusters: list[ClusterFigures]) -> list[str]:
    head = ["CLUSTER", "JOBS", "INCIDENTS", "OK/FAIL/OPEN", "SUCCESS", "DETECT s", "ACTION s", "RESTORE s", "ETTR",
            "STOPPED"]
    rows = [
        [
            c.cluster, str(c.jobs), str(c.incidents), f"{c.succeeded}/{c.failed}/{c.open}", _ratio(c.success_rate),
            _latency(c.detection_latency), _latency(c.action_latency), _latency(c.time_to_restore), _ratio(c.ettr),
            _rules(c.retries_stopped),
        ]
        for c in clusters
    ]
    return [*_align([head, *rows]), "(latencies: median/p95 seconds; SUCCESS = ok / (ok + failed))"]


def _job_table(jobs: list[JobFigures]) -> list[str]:
    head = ["CLUSTER", "JOB", "FIRST SEEN (UTC)", "STATE", "INCIDENTS", "OUTCOMES", "DETECT s", "ACTION s",
            "RESTORE s", "ETTR"]
    rows = []
    for j in jobs:
        last = j.incidents[-1] if j.incidents else None
        outcomes = ",".join(i.outcome for i in j.incidents) or "-"
        rows.append([
            fit(j.cluster, 16), fit(j.job_id, 14), f"{j.first_seen:%Y-%m-%d %H:%M:%S}", j.ended or "followed",
            str(len(j.incidents)), fit(outcomes, 30),
            _s(last.detection_latency_s) if last else "-", _s(last.action_latency_s) if last else "-",
            _s(last.restore_s) if last else "-", _ratio(j.ettr),
        ])
    return [*_align([head, *rows]), "(per job: latencies of its latest incident; ETTR is an estimate from audit events)"]


def _align(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
