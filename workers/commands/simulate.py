"""`jobmedic simulate`: ETTR and GPU-hours lost per week under jobmedic, manual recovery and Slurm's plain requeue.

The model, its sources and every figure are in `workers.simulation.engine`
(docs/goodput.md); this module turns options into a `SimConfig`, runs it and
prints the table, optionally an HTML page, and one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any, NoReturn

from workers.settings import Settings
from workers.simulation.engine import (
    DEFAULT_SIZES,
    PRESETS,
    SimConfig,
    SimulationError,
    option,
    simulate,
)
from workers.simulation.output import format_html, results_json, rules_lines, table_lines
from workflows.contracts import PolicyConfig

_D = SimConfig.__dataclass_fields__

# help of every SimConfig field that is an option (gpus comes from --sizes, policy from the settings)
HELP: dict[str, str] = {
    "gpus_per_node": "GPUs per node (the job uses GPUS / this many nodes)",
    "days": "length of each simulated run in days (the figures are per week whatever this is)",
    "failures_per_1000_node_days": "unexpected interruptions per 1000 node-days, all classes (default: --preset)",
    "bad_node_fraction": "probability that a node of the partition is bad (fails again and again until excluded)",
    "bad_node_mtbf_h": "mean running hours between the failures a bad node causes",
    "forced_bad_nodes": "this many nodes of the first allocation are bad, whatever the draw (what-ifs, tests)",
    "checkpoint_interval_s": "training seconds between checkpoints (default: Young's interval for the job's MTTF, "
                             "at most 4 h)",
    "checkpoint_write_s": "seconds the job stalls while writing a checkpoint",
    "restart_overhead_s": "seconds from a new allocation to training again (initialisation, checkpoint load)",
    "queue_wait_s": "seconds a requeued or resubmitted job waits for its allocation",
    "detect_crash_s": "jobmedic: failure -> detection for a crash (bench/latency.py p50)",
    "detect_dead_node_s": "jobmedic: failure -> detection for a dead node (bench/latency.py p50)",
    "detect_hang_s": "jobmedic: failure -> detection for a hang, the hang bound included (bench/latency.py p50)",
    "detect_to_action_s": "jobmedic: detection -> scheduler action confirmed",
    "action_to_running_s": "scheduler: requeue or resubmission -> job running, before --queue-wait-s "
                           "(bench/latency.py p50)",
    "triage_min_s": "manual: shortest triage, from the job's end to its resubmission, by day",
    "triage_max_s": "manual: longest triage by day (uniform between the two)",
    "night_start_h": "manual: hour the night starts; a failure at night is triaged from --night-end-h on",
    "night_end_h": "manual: hour the night ends",
    "start_hour": "hour of day (Monday) at which each run starts",
    "nccl_timeout_s": "without jobmedic a hang ends when the NCCL watchdog fires after this many seconds",
    "slurmd_timeout_s": "without jobmedic a dead node's job ends when Slurm gives up on the node (SlurmdTimeout)",
    "spare_fraction": "the partition has this fraction more nodes than the job (at least --min-spares)",
    "min_spares": "at least this many spare nodes",
    "repair_h": "hours until a dead node is back",
    "max_attempts": "the job's opt-in max_attempts (default: the cluster policy's max_attempts)",
}


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "simulate",
        help="goodput simulation: ETTR and GPU-hours lost per week, jobmedic against manual recovery and plain requeue",
        description=(
            "Simulate one long training job per job size for a week, seeded, with failures calibrated to public "
            "figures (Meta RSC-1, Llama 3), under jobmedic (every failure decided by the real policy of the "
            "configured cluster), manual recovery and Slurm's plain requeue. Prints a table with jobmedic's "
            "ratios to both baselines, optionally an HTML chart, and one JSON object as the last line. "
            "The model and its sources: docs/goodput.md."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.error = _one_line_error
    parser.add_argument("--sizes", type=_sizes, default=list(DEFAULT_SIZES), metavar="N,N,...",
                        help="job sizes in GPUs, comma-separated")
    parser.add_argument("--runs", type=_count(1), metavar="N",
                        help="seeded runs per job size and strategy, at least (default: 20, --quick 4)")
    parser.add_argument("--min-failures", type=_count(0), metavar="N",
                        help="more runs for small jobs until this many failures are expected over all runs "
                             "(default: 400, --quick 40)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed: the same seed gives the same figures")
    parser.add_argument("--quick", action="store_true", help="fewer runs (--runs 4 --min-failures 40): seconds")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="rsc1",
                        help="failure rate: rsc1 6.5 per 1000 node-days (Meta RSC-1), llama3 3.79 "
                             "(419 interruptions in 54 days on 16,384 GPUs)")
    parser.add_argument("--cluster", metavar="NAME", help="use this configured cluster's policy (default: the first)")
    for f in fields(SimConfig):
        if f.name in ("gpus", "policy"):
            continue
        kind = float if f.type in ("float", "float | None") else int
        default = _D[f.name].default
        metavar = "N" if kind is int else "H" if f.name.endswith("_h") else "S" if f.name.endswith("_s") else "X"
        parser.add_argument(option(f.name), dest=f.name, type=kind, default=default, metavar=metavar, help=HELP[f.name])
    parser.add_argument("--html", metavar="FILE", type=Path, help="also write a self-contained HTML page with charts")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.set_defaults(handler=run_simulate, failures_per_1000_node_days=None)


def _one_line_error(message: str) -> NoReturn:
    print(f"jobmedic simulate: {message} (see jobmedic simulate --help)", file=sys.stderr)
    raise SystemExit(2)


def _count(least: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"a whole number is needed, not {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, not {value}")
        return value

    return parse


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"job sizes are whole numbers of GPUs, comma-separated, not {text!r}") from None
    if not sizes or any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"job sizes must be at least 1 GPU, not {text!r}")
    return sorted(set(sizes))


def config_from(args: argparse.Namespace, policy: PolicyConfig) -> SimConfig:
    values: dict[str, Any] = {f.name: getattr(args, f.name) for f in fields(SimConfig) if f.name not in ("gpus", "policy")}
    if values["failures_per_1000_node_days"] is None:
        values["failures_per_1000_node_days"] = PRESETS[args.preset]
    return SimConfig(gpus=args.sizes[0], policy=policy, **values)


def run_simulate(args: argparse.Namespace, settings: Settings) -> int:
    policy = PolicyConfig.model_validate(settings.cluster(args.cluster).policy.model_dump())
    runs = args.runs if args.runs is not None else 4 if args.quick else 20
    min_failures = args.min_failures if args.min_failures is not None else 40 if args.quick else 400
    try:
        cfg = config_from(args, policy)
        started = time.perf_counter()
        results = simulate(cfg, sizes=args.sizes, runs=runs, seed=args.seed, min_failures=min_failures)
    except SimulationError as exc:
        _one_line_error(str(exc))
    elapsed = time.perf_counter() - started
    figures = results_json(results, cfg)
    figures.update(seed=args.seed, runs=runs, min_failures=min_failures, preset=args.preset, elapsed_s=round(elapsed, 2))
    if args.html is not None:
        args.html.write_text(format_html(results, cfg), encoding="utf-8")
    if not args.json:
        print(f"one training job per size for {cfg.days:g} days x at least {runs} runs, seed {args.seed}, "
              f"{cfg.failures_per_1000_node_days:.2f} failures / 1000 node-days ({args.preset if cfg.failures_per_1000_node_days == PRESETS[args.preset] else 'custom'})")
        print("\n".join(table_lines(results)))
        print("jobmedic's decisions by policy rule:")
        print("\n".join(rules_lines(results)) or "(no failures)")
        if args.html is not None:
            print(f"chart: {args.html}")
    print(json.dumps(figures, sort_keys=True, default=str))
    return 0
