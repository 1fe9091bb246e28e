"""`jobmedic demo [--observe] [--down]`: the whole recovery loop on the local Slurm cluster."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
from pathlib import Path

from workers.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="show the whole loop on the local Slurm cluster (exit 0 only if it ended as it should)",
        description=(
            "Submits a small training job that dies on its first attempt with a GPU lost on one node. "
            "jobmedic (action mode for the demo) holds it, blames the node, excludes it and releases it; "
            "the job resumes from its checkpoint and completes. Needs the local stack: deploy/up.sh."
        ),
    )
    p.add_argument("--observe", action="store_true", help="monitor mode: advice only, Slurm untouched")
    p.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds (default 300)")
    p.add_argument("--down", action="store_true", help="tear the local stack down afterwards (deploy/down.sh)")
    p.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from workers.demo import print_report, run_demo

    try:
        outcome = asyncio.run(run_demo(settings, observe=args.observe, timeout_s=args.timeout))
        print_report(outcome, settings)
    finally:
        if args.down:
            down = Path(__file__).resolve().parents[2] / "deploy" / "down.sh"
            if down.exists():
                subprocess.run(["bash", str(down)], check=False)
    return 0
