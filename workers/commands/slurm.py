"""`jobmedic slurm jobs|nodes`: what jobmedic sees of a cluster's scheduler."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from adapters.slurm.client import SlurmClient
from workers.factories.slurm import build_slurm_client
from workers.settings import Settings
from workflows.contracts import JobInfo, NodeInfo

T = TypeVar("T")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("slurm", help="show the jobs and nodes jobmedic sees on a Slurm cluster")
    inner = parser.add_subparsers(dest="slurm_command", required=True, metavar="COMMAND")
    jobs = inner.add_parser(
        "jobs", help="opted-in jobs (state, nodes, restarts, opt-in) and jobs whose opt-in is invalid"
    )
    nodes = inner.add_parser("nodes", help="node states and reasons")
    for command, handler in ((jobs, show_jobs), (nodes, show_nodes)):
        command.add_argument("--cluster", metavar="NAME", help="configured cluster (default: the first)")
        command.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
        command.set_defaults(handler=handler)


def show_jobs(args: argparse.Namespace, settings: Settings) -> int:
    jobs = _with_client(settings, args.cluster, lambda client: client.list_jobs(opted_in_only=True))
    if args.json:
        print(json.dumps({"jobs": [job_document(job) for job in jobs]}, indent=2))
        return 0
    rows = [["JOBID", "STATE", "RESTARTS", "NODES", "NAME", "OPT-IN"]]
    for job in jobs:
        rows.append([job.job_id, job.state.value, str(job.restarts), job.node_list or "-", job.name, _opt_in_cell(job)])
    _print_table(rows)
    if len(rows) == 1:
        print("(no opted-in jobs; a job opts in with "
              """#SBATCH --comment='{"jobmedic":{"environment":"prod","mode":"observe"}}')""")
    return 0


def show_nodes(args: argparse.Namespace, settings: Settings) -> int:
    nodes = _with_client(settings, args.cluster, lambda client: client.list_nodes())
    if args.json:
        print(json.dumps({"nodes": [node_document(node) for node in nodes]}, indent=2))
        return 0
    rows = [["NODE", "STATE", "REASON", "BY", "SINCE"]]
    for node in nodes:
        since = node.reason_time.strftime("%Y-%m-%dT%H:%M:%S") if node.reason_time else ""
        rows.append([node.name, "+".join([node.state, *node.flags]), node.reason or "-", node.reason_user, since])
    _print_table(rows)
    return 0


def job_document(job: JobInfo) -> dict[str, Any]:
    """A job as `--json` prints it: every JobInfo field, the opt-in flattened to `opt_in` / `invalid_reason`."""
    document = job.model_dump(mode="json")
    document["opt_in"] = job.opt_in.opt_in.model_dump(mode="json") if job.opt_in.opt_in else None
    document["invalid_reason"] = job.opt_in.invalid_reason
    return document


def node_document(node: NodeInfo) -> dict[str, Any]:
    document = node.model_dump(mode="json")
    document["drained_by_jobmedic"] = node.drained_by_jobmedic
    return document


def _with_client(settings: Settings, cluster: str | None, call: Callable[[SlurmClient], Awaitable[T]]) -> T:
    async def run() -> T:
        async with build_slurm_client(settings.cluster(cluster), deployment=settings.deployment) as client:
            return await call(client)

    return asyncio.run(run())


def _opt_in_cell(job: JobInfo) -> str:
    if job.opt_in.invalid_reason:
        return f"INVALID: {job.opt_in.invalid_reason}"
    opt_in = job.opt_in.opt_in
    if opt_in is None:
        return "-"
    parts = [f"{opt_in.mode.value}", f"env={opt_in.environment or '-'}"]
    if opt_in.max_attempts is not None:
        parts.append(f"max_attempts={opt_in.max_attempts}")
    if opt_in.key != "jobmedic":
        parts.append(f"key={opt_in.key}")
    return " ".join(parts)


def _safe(text: str, limit: int = 60) -> str:
    # job names and reasons are user data: no terminal escapes, no line breaks in a table
    shown = "".join(ch if ch.isprintable() else "?" for ch in text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def _print_table(rows: list[list[str]]) -> None:
    cells = [[_safe(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    for row in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
