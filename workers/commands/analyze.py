"""`jobmedic analyze PATH... [--json] [--layout ...] [--nodes FILE | --cluster NAME] [--state ... --exit-code N]`.

Offline verdicts for log files. The node map (`--nodes` from a file, `--cluster` from the
configured cluster's Slurm) lets a verdict name a node the log gives only by address or FQDN;
`--state`/`--exit-code` say how the scheduler saw the job end, as the worker would know.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TextIO

from activities.detection.analyze import analyze_file, parse_layout
from activities.detection.catalogue import load_catalogue
from adapters.errors import ConfigError, ParseError, SchedulerError
from workers.factories.slurm import build_slurm_client
from adapters.slurm.nodefile import parse_node_file
from workers.settings import Settings
from workflows.contracts import JobInfo, JobState, NodeInfo

_BOLD, _RESET = "\x1b[1m", "\x1b[0m"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "analyze",
        help="attribute the failure in log files offline (no cluster needed)",
        description=(
            "Screen each log file with jobmedic's pattern catalogue and print a verdict: root-cause "
            "category, fault domain, implicated hosts/ranks/GPUs, confidence, evidence and explanation."
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="log files to analyse (- reads standard input)")
    parser.add_argument("--json", action="store_true", help="one JSON object per file per line")
    parser.add_argument(
        "--layout",
        metavar="NODELIST:TASKS_PER_NODE",
        help="how ranks map to hosts, e.g. node[1-4]:8 (block distribution, as srun does by default)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--nodes", metavar="FILE",
        help="node map: `jobmedic slurm nodes --json`, `sinfo --json` or `scontrol show node` output, "
             "or lines of NAME [ADDRESS [HOSTNAME]]; maps addresses and FQDNs in the log to node names",
    )
    where.add_argument("--cluster", metavar="NAME", help="read the node map from this configured cluster's Slurm")
    parser.add_argument("--state", metavar="STATE", type=str.upper,
                        help="the job's final Slurm state (FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, COMPLETED, ...)")
    parser.add_argument("--exit-code", metavar="N", type=int, help="the job's exit code as Slurm reports it")
    parser.set_defaults(handler=run_analyze)


def run_analyze(args: argparse.Namespace, settings: Settings, *, out: TextIO | None = None,
                err: TextIO | None = None) -> int:
    try:
        return _run(args, settings, out or sys.stdout, err or sys.stderr)
    except BrokenPipeError:  # `jobmedic analyze ... | head`: the reader left, not an error of ours
        return 0


def _run(args: argparse.Namespace, settings: Settings, out: TextIO, err: TextIO) -> int:
    layout = None
    if args.layout:
        try:
            layout = parse_layout(args.layout)
        except ParseError as exc:
            print(f"jobmedic analyze: --layout: {exc}", file=err)
            return 2
    try:
        job = _job(args)
        nodes = _nodes(args, settings)
    except (ParseError, OSError, SchedulerError, ConfigError, ValueError) as exc:
        print(f"jobmedic analyze: {exc}", file=err)
        return 2
    catalogue = load_catalogue()
    failed = 0
    color = out.isatty() and not args.json
    for path in args.paths:
        try:
            verdict, scan = analyze_file(path, layout=layout, job=job, nodes=nodes, catalogue=catalogue)
        except OSError as exc:
            failed += 1
            reason = exc.strerror or str(exc)
            print(f"jobmedic analyze: {path}: cannot read ({reason}); check the path and permissions", file=err)
            if args.json:
                print(json.dumps({"path": path, "error": reason}), file=out)
            continue
        if args.json:
            record = {"path": path, **verdict.model_dump(mode="json", exclude={"external"}),
                      "lines": scan.line_count, "bytes": scan.byte_count, "catalogue_version": catalogue.version}
            print(json.dumps(record, ensure_ascii=False), file=out)
        else:
            _report(out, path, verdict, scan.line_count, color=color)
        out.flush()
    return 1 if failed else 0


def _job(args: argparse.Namespace) -> JobInfo | None:
    if args.state is None and args.exit_code is None:
        return None
    state = JobState.UNKNOWN
    if args.state is not None:
        state = JobState.parse(args.state)
        if state == JobState.UNKNOWN and args.state != "UNKNOWN":
            known = ", ".join(s.value for s in JobState if s != JobState.UNKNOWN)
            raise ValueError(f"--state {args.state}: not a Slurm job state (one of {known})")
    return JobInfo(job_id="offline", state=state, exit_code=args.exit_code)


def _nodes(args: argparse.Namespace, settings: Settings) -> list[NodeInfo]:
    if args.nodes:
        try:
            with open(args.nodes, encoding="utf-8", errors="replace") as f:
                return parse_node_file(f.read())
        except ParseError as exc:
            raise ParseError(f"--nodes {args.nodes}: {exc}") from exc
        except OSError as exc:
            raise OSError(f"--nodes {args.nodes}: cannot read ({exc.strerror or exc})") from exc
    if args.cluster:
        cluster = settings.cluster(args.cluster)

        async def fetch() -> list[NodeInfo]:
            async with build_slurm_client(cluster, deployment=settings.deployment) as client:
                return await client.list_nodes()

        return asyncio.run(fetch())
    return []


def _report(out: TextIO, path: str, verdict, lines: int, *, color: bool) -> None:
    bold = (lambda s: f"{_BOLD}{s}{_RESET}") if color else (lambda s: s)
    imp = verdict.implicated
    print(bold(f"== {path}") + f"  ({lines} lines)", file=out)
    print(f"category:     {bold(verdict.category.value)}   fault domain: {verdict.fault_domain.value}"
          f"   confidence: {verdict.confidence:.2f}", file=out)
    print(f"implicated:   hosts={','.join(imp.hosts) or '-'}  ranks={','.join(map(str, imp.ranks)) or '-'}"
          f"  gpus={','.join(imp.gpus) or '-'}", file=out)
    if verdict.deterministic_signature:
        print(f"signature:    {verdict.deterministic_signature}", file=out)
    print(f"explanation:  {verdict.explanation}", file=out)
    if verdict.evidence:
        print("evidence:", file=out)
        for ev in verdict.evidence:
            where = f"{ev.line_no:>8}" if ev.line_no is not None else f"{ev.source:>8}"
            tag = f"[{ev.pattern_id}]" if ev.pattern_id else ""
            text = ev.line if len(ev.line) <= 300 else ev.line[:297] + "..."
            print(f"  {where} {tag} {bold(_printable(text))}", file=out)
    print(file=out)


def _printable(text: str) -> str:
    # log text is data: never let it drive the terminal
    return "".join(ch if ch.isprintable() or ch == "\t" else "?" for ch in text)
