"""`jobmedic timeline JOB`: one job's audit entries with the time between steps."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from adapters.audit import AuditRecord
from workers.commands.audit import TABLE_WIDTH, fit, record_dict, summary
from workers.factories.audit import build_audit_store
from workers.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "timeline",
        help="one job's audit entries as a timeline, with the time between steps",
        description="Print one job's audit entries in order with the time since the previous and the first entry.",
    )
    parser.add_argument("job", metavar="JOB", help="Slurm job id")
    parser.add_argument("--cluster", metavar="NAME", help="only this cluster (job ids repeat across clusters)")
    parser.add_argument("--format", choices=["table", "json"], default="table", help="output format (default: table)")
    parser.set_defaults(handler=run_timeline)


def run_timeline(args: argparse.Namespace, settings: Settings) -> int:
    store = build_audit_store(settings)
    try:
        records = store.query_records(cluster=args.cluster, job_id=args.job, limit=None)
    finally:
        store.close()
    if args.format == "json":
        print(json.dumps(timeline_dicts(records), indent=2, ensure_ascii=False))
    elif records:
        print(format_timeline(records))
    if not records:
        where = f" on cluster {args.cluster}" if args.cluster else ""
        print(
            f"jobmedic: no audit entries for job {args.job}{where}; `jobmedic audit` lists what there is",
            file=sys.stderr,
        )
        return 1
    return 0


def format_duration(seconds: float) -> str:
    """A span as 4.2s, 3m05.0s, 2h03m10s or 1d02h03m."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        minutes, rest = divmod(seconds, 60)
        return f"{int(minutes)}m{rest:04.1f}s"
    whole = int(seconds)
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m{whole % 60:02d}s"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h{whole % 3600 // 60:02d}m"


def _groups(records: Sequence[AuditRecord]) -> list[list[AuditRecord]]:
    """Records split by job incarnation (cluster, submit time), in order of first appearance.

    A job id can be reused by a later job, and the same id can exist on two clusters.
    """
    groups: dict[tuple[str, datetime | None], list[AuditRecord]] = {}
    for record in records:
        groups.setdefault((record.entry.cluster, record.entry.submit_time), []).append(record)
    return list(groups.values())


def timeline_dicts(records: Sequence[AuditRecord]) -> list[dict[str, Any]]:
    """Every entry as `record_dict`, plus `since_previous_s` and `since_start_s` within its job incarnation."""
    out: list[dict[str, Any]] = []
    for group in _groups(records):
        start = previous = group[0].entry.timestamp
        for record in group:
            moment = record.entry.timestamp
            data = record_dict(record)
            data["since_previous_s"] = round((moment - previous).total_seconds(), 6)
            data["since_start_s"] = round((moment - start).total_seconds(), 6)
            out.append(data)
            previous = moment
    return out


def format_timeline(records: Sequence[AuditRecord], *, width: int = TABLE_WIDTH) -> str:
    """A readable timeline, one section per job incarnation, within `width` columns."""
    sections: list[str] = []
    for group in _groups(records):
        first = group[0].entry
        submitted = f"{first.submit_time.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if first.submit_time else "unknown"
        lines = [fit(f"job {first.job_id} on {first.cluster}, submitted {submitted}", width)]
        workflows = sorted({r.entry.workflow_id for r in group if r.entry.workflow_id})
        if workflows:
            lines.append(fit("workflow " + ", ".join(workflows), width))
        head = f"  {'TIME (UTC)':<18} {'+PREV':>9} {'+START':>9} {'ATT':>3} {'EVENT':<18} "
        detail_w = max(10, width - len(head))
        lines.append(head + "DETAILS")
        start = previous = first.timestamp
        for record in group:
            e = record.entry
            stamp = e.timestamp.astimezone(UTC).strftime("%m-%d %H:%M:%S.%f")[:-3]
            lines.append(
                f"  {stamp:<18} {'+' + format_duration((e.timestamp - previous).total_seconds()):>9} "
                f"{format_duration((e.timestamp - start).total_seconds()):>9} {e.attempt:>3} "
                f"{e.event_type.value:<18} {fit(summary(e), detail_w)}"
            )
            previous = e.timestamp
        total = format_duration((group[-1].entry.timestamp - start).total_seconds())
        lines.append(f"  {len(group)} entries over {total}")
        sections.append("\n".join(line.rstrip() for line in lines))
    return "\n\n".join(sections)
