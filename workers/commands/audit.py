"""`jobmedic audit`: the audit trail, filtered, as a table, JSON or CSV.

The store can be behind: recovery never waits for it, so while it is down (or
refusing entries) the entries wait, in order, in each recovery workflow
(`JobStatus.audit_backlog`) and are written once it accepts them. `jobmedic
audit` asks the running recovery workflows of the filter (cluster, job) how
many entries they still hold and says so after the entries (on stderr for
JSON and CSV, so the document stays clean); `--no-backlog` skips the check.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from adapters.audit import DEFAULT_LIMIT, AuditRecord
from adapters.errors import AuditStoreError, JobmedicError
from workers.factories.audit import build_audit_store
from workers.settings import Settings
from workflows.contracts import AuditEntry, EventType

TABLE_WIDTH = 100
BACKLOG_WORKFLOWS = 500  # running recoveries asked at most (the rest are counted as not asked)
BACKLOG_QUERY_S = 5.0  # per status query; a recovery whose worker is down does not answer
BACKLOG_TOTAL_S = 20.0
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")


# --------------------------------------------------------------------------- arguments


def parse_since(text: str, *, now: datetime | None = None) -> datetime:
    """An aware UTC time from an ISO timestamp (naive means UTC) or a span back from now (2h, 30m, 7d, 1h30m)."""
    value = text.strip()
    compact = value.replace(" ", "").lower()
    if compact and _RELATIVE.sub("", compact) == "" and _RELATIVE.match(compact):
        seconds = sum(float(n) * _UNITS[u] for n, u in _RELATIVE.findall(compact))
        return (now or datetime.now(UTC)) - timedelta(seconds=seconds)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a time span (30s, 30m, 2h, 7d, 2w, 1h30m) nor an ISO time "
            "(2026-11-29, 2026-11-29T17:40:00, 2026-11-29T17:40:00+01:00; without an offset it is UTC)"
        ) from None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _positive_int(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "audit",
        help="print the audit trail (what jobmedic saw, advised and did)",
        description="Print audit entries, oldest first; times are UTC. With --limit N, the newest N entries.",
    )
    parser.add_argument("--cluster", metavar="NAME", help="only this cluster")
    parser.add_argument("--job", metavar="ID", help="only this Slurm job id")
    parser.add_argument(
        "--since", metavar="WHEN", type=parse_since,
        help="only entries at or after WHEN: a span back from now (30m, 2h, 7d) "
        "or an ISO time (UTC unless it has an offset)",
    )
    parser.add_argument(
        "--type", dest="types", metavar="EVENT", action="append", choices=[e.value for e in EventType],
        help="only this event type (repeat for several): " + ", ".join(e.value for e in EventType),
    )
    parser.add_argument(
        "--format", choices=["table", "json", "csv"], default="table", help="output format (default: table)"
    )
    parser.add_argument(
        "--limit", type=_positive_int, default=DEFAULT_LIMIT, metavar="N",
        help=f"at most the newest N entries (default: {DEFAULT_LIMIT})",
    )
    parser.add_argument(
        "--no-backlog", action="store_true",
        help="do not ask the running recoveries (Temporal) for entries not yet in the store",
    )
    parser.set_defaults(handler=run_audit)


def run_audit(args: argparse.Namespace, settings: Settings) -> int:
    store = build_audit_store(settings)
    store_error: AuditStoreError | None = None
    records: list[AuditRecord] = []
    try:
        records = store.query_records(
            cluster=args.cluster, job_id=args.job, since=args.since,
            event_types=args.types, limit=args.limit, latest=True,
        )
    except AuditStoreError as exc:
        store_error = exc  # the entries the workflows still hold are worth telling even then
    finally:
        store.close()
    if store_error is None:
        if args.format == "json":
            print(format_json(records))
        elif args.format == "csv":
            sys.stdout.write(format_csv(records))
        else:
            print(format_table(records))
    if not args.no_backlog:
        backlog = asyncio.run(read_backlog(settings, cluster=args.cluster, job_id=args.job))
        behind = format_behind(backlog)
        if behind:
            print(behind, file=sys.stdout if args.format == "table" and store_error is None else sys.stderr)
        doubt = format_doubt(backlog)
        if doubt:
            print(doubt, file=sys.stderr)
    if store_error is not None:
        print(f"jobmedic: {store_error}", file=sys.stderr)
        return 1
    return 0


# --------------------------------------------------------------------------- backlog


@dataclass
class Backlog:
    """Audit entries the running recovery workflows hold that the store does not have yet."""

    entries: int = 0
    jobs: list[tuple[str, str, int]] = field(default_factory=list)  # (cluster, job id, entries), most first
    asked: int = 0  # running recoveries asked
    unanswered: int = 0  # recoveries that did not answer (no worker up) or were not asked (too many)
    error: str | None = None  # Temporal could not be asked at all


async def read_backlog(settings: Settings, *, cluster: str | None, job_id: str | None) -> Backlog:
    """Ask every running recovery workflow of the filter for its `audit_backlog`."""
    from workers.temporal_client import connect

    try:
        client = await connect(settings)
        return await asyncio.wait_for(_ask(client, cluster=cluster, job_id=job_id), BACKLOG_TOTAL_S)
    except (JobmedicError, RuntimeError, OSError) as exc:
        return Backlog(error=str(exc))
    except TimeoutError:
        return Backlog(error=f"the running recoveries did not all answer within {BACKLOG_TOTAL_S:g} s")


async def _ask(client, *, cluster: str | None, job_id: str | None) -> Backlog:
    from temporalio.service import RPCError

    from workflows.messages import JobStatus, QueryNames, recovery_query

    ids: list[str] = []
    more = 0
    async for wf in client.list_workflows(recovery_query(cluster=cluster, job_id=job_id)):
        if len(ids) < BACKLOG_WORKFLOWS:
            ids.append(wf.id)
        else:
            more += 1
    gate = asyncio.Semaphore(20)

    async def status(wid: str) -> JobStatus | None:
        async with gate:
            try:
                return await client.get_workflow_handle(wid).query(
                    QueryNames.STATUS, result_type=JobStatus, rpc_timeout=timedelta(seconds=BACKLOG_QUERY_S)
                )
            except (RPCError, RuntimeError) as exc:  # no worker to answer, or the workflow just ended
                logger.debug("recovery {} did not answer the status query: {}", wid, exc)
                return None

    answers = await asyncio.gather(*(status(w) for w in ids))
    found = [a for a in answers if a is not None]
    behind = sorted(((a.cluster, a.job_id, a.audit_backlog) for a in found if a.audit_backlog), key=lambda j: -j[2])
    return Backlog(
        entries=sum(n for _, _, n in behind), jobs=behind, asked=len(ids), unanswered=len(ids) - len(found) + more
    )


def format_behind(backlog: Backlog, *, shown: int = 10) -> str | None:
    """The line that says the store is behind, and by what; None when it is not (as far as Temporal knows)."""
    if not backlog.entries:
        return None
    jobs = ", ".join(f"{job} ({n})" for _, job, n in backlog.jobs[:shown])
    if len(backlog.jobs) > shown:
        jobs += f", … {len(backlog.jobs) - shown} more"
    return (
        f"BEHIND: {backlog.entries} audit entr{'y' if backlog.entries == 1 else 'ies'} of "
        f"{len(backlog.jobs)} running recover{'y' if len(backlog.jobs) == 1 else 'ies'} not in the store yet "
        f"(it is down or refusing them; they are kept in the workflows and written in order once it accepts "
        f"them): {jobs}"
    )


def format_doubt(backlog: Backlog) -> str | None:
    """Why the answer may be incomplete (Temporal not reachable, recoveries that did not answer); None if complete."""
    if backlog.error:
        return f"jobmedic: could not ask Temporal for audit entries not yet in the store: {backlog.error}"
    if backlog.unanswered:
        return (
            f"jobmedic: {backlog.unanswered} running recover{'y' if backlog.unanswered == 1 else 'ies'} did not "
            "answer (is a jobmedic worker up?); they may hold audit entries not yet in the store"
        )
    return None

# --------------------------------------------------------------------------- output


def record_dict(record: AuditRecord) -> dict[str, Any]:
    """One record as JSON-ready data: every `AuditEntry` field plus `id` and `recorded_at`."""
    data: dict[str, Any] = {"id": record.id}
    data.update(record.entry.model_dump(mode="json"))
    # the same spelling pydantic gives the entry's own times
    data["recorded_at"] = record.recorded_at.isoformat().replace("+00:00", "Z") if record.recorded_at else None
    return data


def format_json(records: Sequence[AuditRecord]) -> str:
    """One JSON list of entries."""
    return json.dumps([record_dict(r) for r in records], indent=2, ensure_ascii=False)


CSV_FIELDS = ["id", *AuditEntry.model_fields, "recorded_at"]


def format_csv(records: Sequence[AuditRecord]) -> str:
    """CSV with a header; lists and dicts are JSON in their cell."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for record in records:
        row = record_dict(record)
        writer.writerow({
            key: json.dumps(value, ensure_ascii=False) if isinstance(value, list | dict) else value
            for key, value in row.items()
        })
    return out.getvalue()


def fit(text: str, width: int) -> str:
    """`text` on one line, cut to `width` characters with '…'."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + "…"


def summary(entry: AuditEntry) -> str:
    """The interesting fields of one entry, in a few words, most telling first."""
    parts: list[str] = []
    if entry.category:
        parts.append(entry.category + (f"/{entry.fault_domain}" if entry.fault_domain else ""))
    if entry.action:
        parts.append(entry.action)
    if entry.implicated_nodes:
        parts.append("nodes=" + ",".join(entry.implicated_nodes))
    if entry.outcome:
        parts.append(f"-> {entry.outcome}")
    if entry.rule:
        parts.append(f"rule={entry.rule}")
    if entry.mode:
        parts.append(f"[{entry.mode}]")
    if entry.pattern_id:
        parts.append(f"pattern={entry.pattern_id}")
    if not parts and entry.line:
        parts.append(entry.line)
    return " ".join(parts)


def format_table(records: Sequence[AuditRecord], *, width: int = TABLE_WIDTH) -> str:
    """A table that fits in `width` columns; details are cut with '…'."""
    if not records:
        return "no audit entries match"
    cluster_w = min(12, max(7, *(len(r.entry.cluster) for r in records)))
    job_w = min(12, max(3, *(len(r.entry.job_id) for r in records)))
    event_w = max(len(e.value) for e in EventType)
    head = f"{'TIME (UTC)':<19} {'CLUSTER':<{cluster_w}} {'JOB':<{job_w}} {'ATT':>3} {'EVENT':<{event_w}} "
    detail_w = max(10, width - len(head))
    lines = [head + "DETAILS"]
    for record in records:
        e = record.entry
        lines.append(
            f"{e.timestamp.astimezone(UTC):%Y-%m-%d %H:%M:%S} {fit(e.cluster, cluster_w):<{cluster_w}} "
            f"{fit(e.job_id, job_w):<{job_w}} {e.attempt:>3} {e.event_type.value:<{event_w}} "
            f"{fit(summary(e), detail_w)}"
        )
    return "\n".join(line.rstrip() for line in lines)
