"""`jobmedic scorecard`: monitor-mode advice against what then happened, per check, rule and category.

The figures and their definitions are in `workers.scorecard`; this module reads
the audit trail and what each cluster's scheduler shows now (one `squeue
--json` and one `sinfo --json` per cluster), and prints the result as a table,
JSON, or one self-contained HTML page with an inline SVG chart.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
from datetime import UTC, datetime

from adapters.errors import ConfigError, JobmedicError
from workers.commands.audit import fit, parse_since
from workers.factories.audit import build_audit_store
from workers.factories.slurm import build_slurm_client
from workers.scorecard import RESULTS, Check, ClusterScore, Scorecard, Snapshot, Tally, build_scorecard
from workers.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "scorecard",
        help="monitor-mode advice against what happened: agreement per check, rule and category, with the jobs",
        description=(
            "For jobs watched in monitor mode, compare what jobmedic advised (restart, stop, a node to blame, "
            "nothing) with what the audit trail and the scheduler show happened since. How each figure is "
            "defined: the docstring of workers/scorecard.py (.venv/bin/python -m pydoc workers.scorecard)."
        ),
    )
    parser.add_argument("--cluster", metavar="NAME", help="only this cluster")
    parser.add_argument(
        "--since", metavar="WHEN", type=parse_since,
        help="only audit entries at or after WHEN: a span back from now (30m, 2h, 7d) "
        "or an ISO time (UTC unless it has an offset)",
    )
    parser.add_argument(
        "--format", choices=["table", "json", "html"], default="table",
        help="output format (default: table); html is one self-contained page",
    )
    parser.set_defaults(handler=run_scorecard)


def run_scorecard(args: argparse.Namespace, settings: Settings) -> int:
    if args.cluster is not None:
        settings.cluster(args.cluster)  # an unknown name is a ConfigError naming the known ones
    store = build_audit_store(settings)
    try:
        entries = store.query(cluster=args.cluster, since=args.since, limit=None)
    finally:
        store.close()
    names = sorted({e.cluster for e in entries})
    snapshots = asyncio.run(read_snapshots(settings, names))
    card = build_scorecard(entries, snapshots, now=datetime.now(UTC), since=args.since)
    print({"json": format_json, "html": format_html}.get(args.format, format_table)(card))
    return 0


async def read_snapshots(settings: Settings, names: list[str]) -> list[Snapshot]:
    """What each named cluster's scheduler shows now; a cluster that cannot be read gets its error."""
    return list(await asyncio.gather(*(_snapshot(settings, n) for n in names)))


async def _snapshot(settings: Settings, name: str) -> Snapshot:
    try:
        cluster = settings.cluster(name)
    except ConfigError:
        return Snapshot(cluster=name, error="not a configured cluster: its scheduler was not read")
    try:
        async with build_slurm_client(cluster, deployment=settings.deployment) as client:
            jobs = await client.list_jobs(opted_in_only=False)
            nodes = await client.list_nodes()
    except JobmedicError as exc:
        return Snapshot(cluster=name, error=f"scheduler not read: {exc}")
    return Snapshot(cluster=name, taken_at=datetime.now(UTC), jobs=jobs, nodes=nodes)


# --------------------------------------------------------------------------- JSON and table


def format_json(card: Scorecard) -> str:
    """The whole scorecard as JSON: per cluster the tallies and every check."""
    return json.dumps(card.model_dump(mode="json"), indent=2, ensure_ascii=False)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _jobs(t: Tally, width: int = 60) -> str:
    return fit("; ".join(f"{r}: {','.join(t.jobs[r])}" for r in RESULTS if r in t.jobs) or "-", width)


def format_table(card: Scorecard) -> str:
    """Per cluster: tallies per check kind, rule and category, then every check."""
    if not card.clusters:
        return "no audit entries match: nothing to score"
    out: list[str] = []
    for c in card.clusters:
        out += _cluster_table(c) + [""]
    out.append("(AGREE% = agree / (agree + disagree); definitions: python -m pydoc workers.scorecard)")
    return "\n".join(out)


def _cluster_table(c: ClusterScore) -> list[str]:
    seen = f"Slurm read {c.snapshot_at:%Y-%m-%d %H:%M:%S} UTC" if c.snapshot_at else f"trail only ({c.snapshot_error})"
    lines = [f"CLUSTER {c.cluster}: {len(c.checks)} checks, agreement {_ratio(c.overall.agreement)} ({seen})"]
    for title, tallies in (("CHECK", c.by_kind), ("RULE", c.by_rule), ("CATEGORY", c.by_category)):
        head = [title, "AGREE", "DISAGREE", "OPEN", "UNTESTED", "AGREE%", "JOBS"]
        rows = [[fit(t.group, 32), str(t.agree), str(t.disagree), str(t.open), str(t.untested),
                 _ratio(t.agreement), _jobs(t)] for t in tallies]
        lines += ["", *_align([head, *rows])]
    head = ["JOB", "ATT", "CHECK", "RULE", "CATEGORY", "NODE", "RESULT", "WHAT HAPPENED"]
    rows = [[fit(k.job_id, 14), str(k.attempt), k.kind, fit(k.rule, 28), fit(k.category, 14), k.node or "-",
             k.result, fit(k.what_happened, 70)] for k in c.checks]
    lines += ["", *_align([head, *rows])]
    for why, ids in c.not_scored.items():
        lines.append(f"not scored, {why}: job {', '.join(ids)}")
    if c.action_mode_jobs:
        lines.append(f"not scored, action mode: job {', '.join(c.action_mode_jobs)}")
    return lines


def _align(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]


# --------------------------------------------------------------------------- HTML

_COLOURS = {"agree": "#2e7d32", "disagree": "#c62828", "open": "#9e9e9e", "untested": "#e0e0e0"}
_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}th{background:#f4f4f4}"
    ".agree{color:#2e7d32}.disagree{color:#c62828}.note{color:#666}"
)


def format_html(card: Scorecard) -> str:
    """One page, no external assets: per cluster a stacked-bar chart (inline SVG) per rule, then the tables."""
    e = html.escape
    when = f"{card.generated_at:%Y-%m-%d %H:%M:%S} UTC" if card.generated_at else ""
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>jobmedic monitor-mode scorecard</title>", f"<style>{_STYLE}</style></head><body>",
        f"<h1>jobmedic monitor-mode scorecard</h1><p class=\"note\">{e(when)}"
        + (f"; audit entries since {card.since:%Y-%m-%d %H:%M:%S} UTC" if card.since else "") + "</p>",
    ]
    if not card.clusters:
        parts.append("<p>No audit entries match: nothing to score.</p>")
    for c in card.clusters:
        parts += _cluster_html(c)
    parts.append("</body></html>")
    return "\n".join(parts)


def _cluster_html(c: ClusterScore) -> list[str]:
    e = html.escape
    seen = (f"Slurm read {c.snapshot_at:%Y-%m-%d %H:%M:%S} UTC" if c.snapshot_at
            else f"audit trail only ({c.snapshot_error})")
    parts = [
        f"<h2>Cluster {e(c.cluster)}</h2>",
        f"<p>{len(c.checks)} checks, agreement <b>{_ratio(c.overall.agreement)}</b> "
        f"<span class=\"note\">({e(seen)})</span></p>",
        chart_svg([*c.by_kind, *c.by_rule], title=f"{c.cluster}: results per check kind and per rule"),
    ]
    for title, tallies in (("Check", c.by_kind), ("Rule", c.by_rule), ("Category", c.by_category)):
        parts.append(f"<table><tr><th>{title}</th>" + "".join(f"<th>{r}</th>" for r in RESULTS)
                     + "<th>agreement</th></tr>")
        for t in tallies:
            cells = "".join(f"<td>{getattr(t, r)}<br><span class=\"note\">{e(', '.join(t.jobs.get(r, [])))}</span></td>"
                            for r in RESULTS)
            parts.append(f"<tr><td>{e(t.group)}</td>{cells}<td>{_ratio(t.agreement)}</td></tr>")
        parts.append("</table>")
    parts.append("<table><tr><th>job</th><th>attempt</th><th>check</th><th>rule</th><th>category</th><th>node</th>"
                 "<th>result</th><th>what happened</th></tr>")
    parts += [_check_row(k) for k in c.checks]
    parts.append("</table>")
    for why, ids in c.not_scored.items():
        parts.append(f"<p class=\"note\">Not scored, {e(why)}: job {e(', '.join(ids))}</p>")
    if c.action_mode_jobs:
        parts.append(f"<p class=\"note\">Not scored, action mode: job {e(', '.join(c.action_mode_jobs))}</p>")
    return parts


def _check_row(k: Check) -> str:
    e = html.escape
    cells = [k.job_id, str(k.attempt), k.kind, k.rule, k.category, k.node or "", k.result, k.what_happened]
    row = "".join(f"<td>{e(v)}</td>" for v in cells[:6])
    return f"<tr>{row}<td class=\"{e(k.result)}\">{e(k.result)}</td><td>{e(cells[7])}</td></tr>"


def chart_svg(tallies: list[Tally], *, title: str, width: int = 640, bar: int = 18) -> str:
    """Horizontal stacked bars (agree, disagree, open, untested), one per tally, scaled to the largest."""
    e = html.escape
    label_w, gap, top = 220, 6, 28
    most = max((sum(getattr(t, r) for r in RESULTS) for t in tallies), default=0) or 1
    scale = (width - label_w - 60) / most
    height = top + len(tallies) * (bar + gap) + 24
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="{e(title)}">', f"<title>{e(title)}</title>"]
    x: float = label_w
    for r in RESULTS:  # legend
        out.append(f'<rect x="{x}" y="6" width="12" height="12" fill="{_COLOURS[r]}"/>'
                   f'<text x="{x + 16}" y="16" font-size="12">{r}</text>')
        x += 90
    for n, t in enumerate(tallies):
        y = top + n * (bar + gap)
        out.append(f'<text x="{label_w - 6}" y="{y + bar - 5}" font-size="12" text-anchor="end">'
                   f"{e(fit(t.group, 32))}</text>")
        x = float(label_w)
        for r in RESULTS:
            count = getattr(t, r)
            if count:
                w = count * scale
                jobs = ", ".join(t.jobs.get(r, []))
                out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar}" fill="{_COLOURS[r]}">'
                           f"<title>{e(f'{t.group}: {count} {r} (job {jobs})')}</title></rect>")
                x += w
        out.append(f'<text x="{x + 4:.1f}" y="{y + bar - 5}" font-size="12">{_ratio(t.agreement)}</text>')
    out.append("</svg>")
    return "\n".join(out)
