"""Helpers shared by the benchmarks in bench/: timing, tables, the JSON last line, patterns.

Every benchmark prints a human-readable table and then exactly one JSON object
on its last line, so scripts can read the figures with `tail -n 1`.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Timed:
    seconds: float  # median wall time of the runs
    runs: list[float]
    value: Any  # what the last run returned
    cpu_seconds: float = 0.0  # median CPU time (user + system, this process and its children)
    cpu_runs: tuple[float, ...] = ()


def _cpu_now() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def time_median(fn: Callable[[], T], *, repeat: int = 3) -> Timed:
    """Run `fn` `repeat` times; the median wall time and the last result."""
    runs: list[float] = []
    value: Any = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        runs.append(time.perf_counter() - t0)
    return Timed(seconds=statistics.median(runs), runs=runs, value=value)


def time_interleaved(fns: dict[str, Callable[[], Any]], *, repeat: int = 3) -> dict[str, Timed]:
    """Time several functions in turns (a, b, a, b, ...), so a change of machine load hits all alike."""
    runs: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    values: dict[str, Any] = {}
    for _ in range(repeat):
        for name, fn in fns.items():
            c0, t0 = _cpu_now(), time.perf_counter()
            values[name] = fn()
            runs[name].append(time.perf_counter() - t0)
            cpu[name].append(_cpu_now() - c0)
    return {
        name: Timed(
            seconds=statistics.median(r), runs=r, value=values[name],
            cpu_seconds=statistics.median(cpu[name]), cpu_runs=tuple(cpu[name]),
        )
        for name, r in runs.items()
    }


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, file=sys.stdout) -> None:
    """A plain aligned text table."""
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in cells)) if cells else len(str(h)) for i, h in enumerate(headers)]
    line = "  ".join(str(h).ljust(w) for h, w in zip(headers, widths))
    print(line, file=file)
    print("  ".join("-" * w for w in widths), file=file)
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)), file=file)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.1f}"
    return str(value)


def emit_json(figures: dict[str, Any]) -> None:
    """The benchmark's figures as one JSON object on the last line of stdout."""
    sys.stdout.flush()
    print(json.dumps(figures, sort_keys=True, default=str), flush=True)


@dataclass(frozen=True)
class BenchPattern:
    id: str
    regex: str
    extract: tuple[str, ...] = ()


def load_patterns(*, include_benign: bool = False) -> tuple[list[Any], str]:
    """The catalogue's screen patterns when the catalogue exists, else the benchmark's own set.

    Benign look-alikes are not screened in production (they are checked only on
    flagged lines); `include_benign` adds them anyway. Returns (patterns, source).
    """
    try:
        from activities.detection.catalogue import load_catalogue
    except ImportError:
        return [BenchPattern(f"bench_{i:02d}", rx) for i, rx in enumerate(FALLBACK_PATTERNS)], "bench/_common.py"
    catalogue = load_catalogue()
    chosen = catalogue.patterns if include_benign else catalogue.screen_patterns
    label = "catalogue, all patterns" if include_benign else "catalogue screen_patterns (benign excluded)"
    return list(chosen), label


# A failure-pattern set in the style of the catalogue, used until the catalogue
# lands; every expression is valid for both Python/hyperscan and `grep -E` after
# screen.to_grep_ere().
FALLBACK_PATTERNS: tuple[str, ...] = (
    r"Watchdog caught collective operation timeout",
    r"ProcessGroupNCCL.*(Timeout|timed out)",
    r"NCCL (error|Error).*(ncclRemoteError|ncclSystemError|ncclInternalError|ncclInvalidUsage)",
    r"NCCL WARN .*(Error|error|failed|Failed)",
    r"unhandled cuda error",
    r"NET/IB ?: .*(Got completion|completion) .*error",
    r"ibv_poll_cq.*(error|failed)",
    r"CUDA error: (an illegal memory access|unspecified launch failure|device-side assert|misaligned address|unknown error|uncorrectable ECC)",
    r"CUDA out of memory",
    r"torch\.(cuda\.)?OutOfMemoryError",
    r"RuntimeError: CUDA error",
    r"NVRM: Xid \(PCI:[0-9a-fA-F:.]+\): [0-9]+",
    r"GPU has fallen off the bus",
    r"GPU is lost",
    r"[Rr]ow[- ]remap(ping)? (failure|failed)",
    r"c10d.*(TCPStore|store).*(timed out|Connection reset|Broken pipe)",
    r"DistNetworkError",
    r"Gloo.*(Connection closed|timed out|failed)",
    r"UCX +ERROR",
    r"torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError",
    r"exitcode *: *-?[0-9]+ \(pid: [0-9]+\)",
    r"slurmstepd: error: \*\*\* (JOB|STEP) [0-9.]+ ON \S+ CANCELLED AT \S+ DUE TO (TIME LIMIT|PREEMPTION|NODE FAILURE)",
    r"slurmstepd: error: Detected [0-9]+ oom[-_]kill event",
    r"Out of memory: Killed process [0-9]+",
    r"oom-kill:constraint=",
    r"DataLoader worker \(pid\(?s?\)? ?[0-9, ]+\) (is killed|exited unexpectedly)",
    r"No space left on device",
    r"Stale file handle",
    r"(Failed|failed|Error|error) (to )?(sav|load)(e|ing) checkpoint",
    r"^Traceback \(most recent call last\):",
    r"^[A-Za-z_.]*(Error|Exception): ",
    r"Segmentation fault",
    r"Bus error",
    r"srun: error: [a-z0-9-]+: task [0-9]+: (Exited with exit code|Killed|Segmentation)",
    r"NCCL INFO .*NET/IB : No device found",
    r"P2P is disabled between",
    r"Some NCCL operations have failed or timed out",
    r"Gradient overflow\. Skipping step",
    r"huggingface/tokenizers: The current process just got forked",
    r"ProcessGroupNCCL is being destroyed",
)
