"""The simulator's figures as a table, one JSON object, and a self-contained HTML page with inline SVG charts.

Ratios put jobmedic beside each baseline: `ETTR x` is jobmedic's ETTR over the
baseline's (above 1: jobmedic keeps more training time), `LOST x` is jobmedic's
GPU-hours lost over the baseline's (below 1: jobmedic loses less).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from workers.simulation.engine import BASELINES, STRATEGIES, SimConfig, Summary, expected_mttf_h, with_changes

Results = Mapping[int, Mapping[str, Summary]]


def ratio(a: float, b: float) -> float | None:
    """a / b, None when b is 0 (nothing to compare with)."""
    return a / b if b else None


def _r(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table_lines(results: Results) -> list[str]:
    """One row per job size: each strategy's ETTR and GPU-hours lost per week, jobmedic's ratios to both baselines."""
    head = ["GPUS", "FAIL/wk", "ETTR jobmedic", "manual", "x", "requeue", "x",
            "GPU-h LOST/wk jobmedic", "manual", "x", "requeue", "x", "STOPS/wk", "REPEATS/wk jm/requeue"]
    rows = [head]
    for gpus, by in sorted(results.items()):
        jm = by["jobmedic"]
        row = [f"{gpus:,}", f"{jm.failures_per_week:.1f}", f"{jm.ettr:.4f}"]
        for base in BASELINES:
            b = by[base]
            row += [f"{b.ettr:.4f}", _r(ratio(jm.ettr, b.ettr), 3)]
        row.append(f"{jm.gpu_hours_lost_per_week:,.0f}")
        for base in BASELINES:
            b = by[base]
            row += [f"{b.gpu_hours_lost_per_week:,.0f}", _r(ratio(jm.gpu_hours_lost_per_week, b.gpu_hours_lost_per_week))]
        row += [f"{jm.stops_per_week:.1f}", f"{jm.bad_node_repeats_per_week:.1f}/{by['requeue'].bad_node_repeats_per_week:.1f}"]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("(x: jobmedic / that baseline; ETTR x above 1 and GPU-h x below 1 favour jobmedic. "
                 "STOPS: the policy advised no restart and a person took over. "
                 "REPEATS: failures on a bad node that had failed the job before)")
    return lines


def rules_lines(results: Results) -> list[str]:
    """The policy rules that decided jobmedic's recoveries, per job size."""
    out = []
    for gpus, by in sorted(results.items()):
        rules = by["jobmedic"].rules
        if rules:
            out.append(f"{gpus:>6,} GPUs: " + ", ".join(f"{k} {v}" for k, v in sorted(rules.items(), key=lambda kv: -kv[1])))
    return out


def config_json(cfg: SimConfig) -> dict[str, Any]:
    values = {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name not in ("gpus", "policy")}
    values["checkpoint_interval_s"] = cfg.checkpoint_interval_s  # None: Young's, per size (see sizes)
    values["policy"] = cfg.policy.model_dump(mode="json")
    return values


def results_json(results: Results, cfg: SimConfig) -> dict[str, Any]:
    """Per size: each strategy's summary, jobmedic's ratios, the calibration's MTTF and the checkpoint interval used."""
    sizes: dict[str, Any] = {}
    for gpus, by in sorted(results.items()):
        sized = with_changes(cfg, gpus=gpus, forced_bad_nodes=0)
        jm = by["jobmedic"]
        entry: dict[str, Any] = {s: by[s].as_json() for s in STRATEGIES if s in by}
        for base in BASELINES:
            if base in by:
                entry[f"ettr_ratio_vs_{base}"] = _round(ratio(jm.ettr, by[base].ettr))
                entry[f"lost_ratio_vs_{base}"] = _round(ratio(jm.gpu_hours_lost_per_week, by[base].gpu_hours_lost_per_week))
        entry["expected_mttf_h"] = _round(expected_mttf_h(sized))
        entry["checkpoint_interval_s"] = round(sized.checkpoint_interval, 1)
        sizes[str(gpus)] = entry
    return {"sizes": sizes, "config": config_json(cfg)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


# --------------------------------------------------------------------------- HTML

_COLOURS = {"jobmedic": "#1b7837", "manual": "#b2182b", "requeue": "#2166ac"}


def format_html(results: Results, cfg: SimConfig, *, title: str = "jobmedic goodput simulation",
                notes: Sequence[str] = ()) -> str:
    """One self-contained page: ETTR and GPU-hours lost per week against job size, the table, the settings."""
    ettr = _chart(results, lambda s: s.ettr, title="ETTR (effective training time ratio)", log_y=False)
    lost = _chart(results, lambda s: max(s.gpu_hours_lost_per_week, 0.01), title="GPU-hours lost per week",
                  log_y=True)
    table = "\n".join(table_lines(results))
    settings = "\n".join(f"{k} = {v}" for k, v in config_json(cfg).items() if k != "policy")
    policy = ", ".join(f"{k}={v:g}" for k, v in _policy_view(cfg).items())
    extra = "".join(f"<p>{html.escape(n)}</p>" for n in notes)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}}pre{{background:#f6f6f6;padding:1em;
overflow-x:auto}}svg{{margin:0 1em 1em 0}}</style></head><body>
<h1>{html.escape(title)}</h1>
<p>One training job for {cfg.days:g} days per run; jobmedic's recoveries decided by the real policy
(workflows/policy.py). Baselines: manual recovery and Slurm's plain requeue. Definitions and sources:
docs/goodput.md.</p>
{extra}
<div>{ettr}{lost}</div>
<pre>{html.escape(table)}</pre>
<h2>Settings</h2><pre>{html.escape(settings)}</pre>
<p>Policy knobs that bound restarts: {html.escape(policy)}</p>
</body></html>
"""


def _policy_view(cfg: SimConfig) -> dict[str, Any]:
    """The policy knobs that bound restarts (the JSON has them all)."""
    p = cfg.policy
    return {
        "max_attempts": cfg.max_attempts if cfg.max_attempts is not None else p.max_attempts,
        "attempts_window_s": p.attempts_window_s,
        "no_checkpoint_attempts": p.no_checkpoint_attempts,
    }


def _chart(results: Results, value, *, title: str, log_y: bool, width: int = 520, height: int = 320) -> str:
    """A line chart of `value(summary)` per strategy against job size (log2 axis), as inline SVG."""
    left, right, top, bottom = 64, 110, 30, 44
    sizes = sorted(results)
    xs = [math.log2(g) for g in sizes]
    points = {s: [value(results[g][s]) for g in sizes] for s in STRATEGIES if s in results[sizes[0]]}
    values = [v for vs in points.values() for v in vs]
    lo, hi = min(values), max(values)
    if log_y:
        lo, hi = math.log10(lo), math.log10(hi)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    pad = (hi - lo) * 0.08
    lo, hi = lo - pad, hi + pad
    x0, x1 = (min(xs), max(xs)) if len(xs) > 1 else (xs[0] - 1, xs[0] + 1)

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (width - left - right)

    def py(v: float) -> float:
        y = math.log10(v) if log_y else v
        return top + (hi - y) / (hi - lo) * (height - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{html.escape(title)}">',
             f'<text x="{left}" y="18" font-size="14" font-weight="bold">{html.escape(title)}</text>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#444"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#444"/>']
    for g, x in zip(sizes, xs):
        parts.append(f'<text x="{px(x):.1f}" y="{height - bottom + 16}" font-size="11" text-anchor="middle">{g:,}</text>')
    parts.append(f'<text x="{(left + width - right) / 2:.1f}" y="{height - 8}" font-size="11" '
                 'text-anchor="middle">GPUs in the job</text>')
    for i in range(5):
        y = lo + (hi - lo) * i / 4
        label = f"{10 ** y:,.0f}" if log_y else f"{y:.3f}"
        yy = top + (hi - y) / (hi - lo) * (height - top - bottom)
        parts.append(f'<line x1="{left - 4}" y1="{yy:.1f}" x2="{width - right}" y2="{yy:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" font-size="11" text-anchor="end">{label}</text>')
    for n, (strategy, vs) in enumerate(points.items()):
        colour = _COLOURS[strategy]
        path = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in zip(xs, vs))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        for x, v in zip(xs, vs):
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(v):.1f}" r="3" fill="{colour}"/>')
        ly = top + 16 * n + 8
        parts.append(f'<line x1="{width - right + 10}" y1="{ly}" x2="{width - right + 30}" y2="{ly}" '
                     f'stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<text x="{width - right + 34}" y="{ly + 4}" font-size="11">{strategy}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
