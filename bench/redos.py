"""Pathological lines against every catalogue pattern: no ReDoS, no blow-up.

Two engines are measured, each the way the product uses it:
- Python `re`, per pattern, on its screen expression (`regex`) and its `extract`
  expression, run on one hostile line. "raw" runs it on the whole hostile line
  (how bad the expression is); "product" goes through `PatternSpec.matches` /
  `extract_fields`, which cut a line to MAX_EXTRACT_CHARS first (what the verdict
  really pays).
- hyperscan, through the Screener over the whole hostile input (one database, all
  patterns), including a single 100 MB line (10 MB with --quick).

Each Python measurement runs in a forked child with a time limit, so a
catastrophic expression is reported as a timeout instead of hanging the run.
Times are CPU time of the measuring process (steady when other work shares the
cores). "product" ms/MB is per MB of text the product path really searches
(the first MAX_EXTRACT_CHARS characters of the line), so a per-line cost of
5 ms on a 16 KiB cut shows as ~320 ms/MB.
Anything above 100 ms per MB is flagged. Not a test: benchmarks are never timed
assertions.

    .venv/bin/python bench/redos.py [--quick]

Last line: one JSON object with worst_ms_per_mb and worst_pattern (the worst of
the product path and the screener), worst_ms_per_line_product, the raw worst and
the screener's worst.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit_json, load_patterns, print_table  # noqa: E402

from activities.detection.screen import Screener  # noqa: E402

try:
    from activities.detection.catalogue import MAX_EXTRACT_CHARS
except ImportError:  # before the catalogue exists every pattern is a bench pattern without the cut
    MAX_EXTRACT_CHARS = 1 << 62

FLAG_MS_PER_MB = 100.0
MB = 1 << 20


def _literal_runs(regex: str, *, min_len: int = 4) -> list[str]:
    """Literal fragments of an expression, to build near-matches from."""
    try:
        parsed = re._parser.parse(regex)  # type: ignore[attr-defined]
    except re.error:
        return []
    runs: list[str] = []
    current: list[str] = []

    def walk(items) -> None:
        nonlocal current
        for op, av in items:
            if op is re._constants.LITERAL:  # type: ignore[attr-defined]
                current.append(chr(av))
                continue
            if len(current) >= min_len:
                runs.append("".join(current))
            current = []
            if op is re._constants.SUBPATTERN:  # type: ignore[attr-defined]
                walk(av[-1])
            elif op is re._constants.BRANCH:  # type: ignore[attr-defined]
                for branch in av[1]:
                    walk(branch)
                    if len(current) >= min_len:
                        runs.append("".join(current))
                    current = []
            elif op in (re._constants.MAX_REPEAT, re._constants.MIN_REPEAT):  # type: ignore[attr-defined]
                walk(av[2])

    walk(parsed)
    if len(current) >= min_len:
        runs.append("".join(current))
    return runs


def hostile_inputs(size: int) -> dict[str, str]:
    """Generic hostile lines of about `size` characters (no newline)."""
    return {
        "a*N+!": "a" * size + "!",
        "NCCL WARN *N": ("NCCL WARN " * (size // 10 + 1))[:size],
        "digits": ("1234567890" * (size // 10 + 1))[:size],
        "nested digits": ("1.2:3,4 [5] (6) " * (size // 16 + 1))[:size],
        "spaces": " " * size + "x",
        "brackets": ("[" * (size // 2)) + ("]" * (size // 2)),
        "nul+binary": ("\x00\xff\ufffd" * (size // 3 + 1))[:size],
        "colons": (":" * size),
    }


def near_matches(pattern, size: int) -> dict[str, str]:
    """Repeated literal fragments of this pattern: a line full of almost-matches."""
    out: dict[str, str] = {}
    for source in (pattern.regex, getattr(pattern, "extract", None) or ""):
        for frag in _literal_runs(source)[:2]:
            unit = frag + " "
            out[f"near:{frag[:24]}"] = (unit * (size // len(unit) + 1))[:size]
    return out


def _measure_one(pattern, inputs: dict[str, str], conn) -> None:
    """In a child: ms per MB of each expression on each input, raw and through the product path."""
    flags = re.IGNORECASE if getattr(pattern, "caseless", False) else 0
    exprs = {"regex": re.compile(pattern.regex, flags)}
    if getattr(pattern, "extract", None):
        exprs["extract"] = re.compile(pattern.extract, flags)
    for name, text in {**inputs, **near_matches(pattern, len(next(iter(inputs.values()))))}.items():
        mb = max(len(text.encode("utf-8", "surrogatepass")) / MB, 1e-9)
        for label, rx in exprs.items():
            t0 = time.process_time()
            rx.search(text)
            raw = (time.process_time() - t0) * 1000 / mb
            conn.send(("raw", label, name, raw))
        # the product path cuts the line first: charge the time to the text it really searched
        searched = min(len(text), MAX_EXTRACT_CHARS) if hasattr(pattern, "matches") else len(text)
        mb = max(len(text[:searched].encode("utf-8", "surrogatepass")) / MB, 1e-9)
        best = float("inf")
        for _ in range(5):  # short runs: the least disturbed of five
            t0 = time.process_time()
            if hasattr(pattern, "matches"):
                pattern.matches(text)
            if hasattr(pattern, "extract_fields"):
                pattern.extract_fields(text)
            best = min(best, time.process_time() - t0)
        product = best * 1000 / mb
        conn.send(("product", "matches+extract", name, product))
    conn.send(("done", "", "", 0.0))


def measure_pattern(pattern, inputs: dict[str, str], *, limit_s: float) -> tuple[dict, str | None]:
    """Worst ms/MB per kind for one pattern; the input that timed out, if any."""
    parent, child = mp.Pipe(duplex=False)
    proc = mp.get_context("fork").Process(target=_measure_one, args=(pattern, inputs, child), daemon=True)
    proc.start()
    child.close()
    worst: dict[str, tuple[float, str]] = {"raw": (0.0, ""), "product": (0.0, "")}
    deadline = time.monotonic() + limit_s
    timed_out: str | None = None
    last_input = ""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not parent.poll(remaining):
            timed_out = f"after {last_input or 'start'}"
            proc.kill()
            break
        try:
            kind, label, name, value = parent.recv()
        except EOFError:
            timed_out = "child died"
            break
        if kind == "done":
            break
        last_input = name
        if value > worst[kind][0]:
            worst[kind] = (value, f"{label} on {name}")
    proc.join(5)
    return worst, timed_out


def screener_worst(patterns, inputs: dict[str, str], huge_bytes: int) -> tuple[float, str, dict[str, float]]:
    screener = Screener(patterns)
    per_input: dict[str, float] = {}
    for name, text in inputs.items():
        data = text.encode("utf-8", "surrogatepass") + b"\n"
        t0 = time.process_time()
        screener.scan_bytes(data)
        per_input[name] = (time.process_time() - t0) * 1000 / (len(data) / MB)
    # one huge single line: 100 MB of near-matches and noise, no newline
    unit = b"NCCL WARN Call to ibv_reg_mr failed 1234567890 [rank 3] " + b"a" * 40 + b" "
    huge = unit * (huge_bytes // len(unit))
    t0 = time.process_time()
    screener.scan_bytes(huge)
    per_input[f"single line {huge_bytes // MB} MB"] = (time.process_time() - t0) * 1000 / (len(huge) / MB)
    name, worst = max(per_input.items(), key=lambda kv: kv[1])
    return worst, name, per_input


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="256 KiB lines, 10 MB single line, shorter limits")
    parser.add_argument("--include-benign", action="store_true", default=True,
                        help="probe the benign look-alikes too (default: yes, the verdict runs them)")
    args = parser.parse_args(argv)
    size = (256 * 1024) if args.quick else MB
    huge = (10 if args.quick else 100) * MB
    limit_s = 20.0 if args.quick else 60.0
    patterns, source = load_patterns(include_benign=args.include_benign)
    inputs = hostile_inputs(size)

    rows = []
    flagged: list[str] = []
    worst_product = (0.0, "", "")
    worst_raw = (0.0, "", "")
    timeouts: dict[str, str] = {}
    for pattern in patterns:
        worst, timed_out = measure_pattern(pattern, inputs, limit_s=limit_s)
        raw_ms, raw_where = worst["raw"]
        prod_ms, prod_where = worst["product"]
        if timed_out:
            timeouts[pattern.id] = timed_out
            raw_ms, raw_where = float("inf"), f"timeout ({timed_out})"
        if prod_ms > worst_product[0]:
            worst_product = (prod_ms, pattern.id, prod_where)
        if raw_ms > worst_raw[0]:
            worst_raw = (raw_ms, pattern.id, raw_where)
        mark = ""
        if prod_ms > FLAG_MS_PER_MB or timed_out:
            mark = "FLAG"
            flagged.append(pattern.id)
        elif raw_ms > FLAG_MS_PER_MB:
            mark = "raw only"
        rows.append([pattern.id, raw_ms, raw_where, prod_ms, prod_where, mark])

    screen_ms, screen_where, screen_inputs = screener_worst(patterns, inputs, huge)
    rows.sort(key=lambda r: -r[1])
    print(f"patterns: {len(patterns)} from {source}; hostile lines of {size // 1024} KiB; flag above {FLAG_MS_PER_MB:.0f} ms/MB")
    print_table(["pattern", "raw re ms/MB", "raw worst on", "product ms/MB", "product worst on", ""], rows)
    print()
    print_table(["screener input (hyperscan, all patterns)", "ms/MB"], sorted(screen_inputs.items(), key=lambda kv: -kv[1]))
    figures = {
        "bench": "redos",
        "patterns": len(patterns),
        "patterns_source": source,
        "line_kib": size // 1024,
        "worst_ms_per_mb": round(max(worst_product[0], screen_ms), 3),
        "worst_pattern": worst_product[1] if worst_product[0] >= screen_ms else f"screener ({screen_where})",
        "worst_input": worst_product[2] if worst_product[0] >= screen_ms else screen_where,
        # what one flagged hostile line costs the verdict (ASCII: one character is one byte)
        "worst_ms_per_line_product": round(worst_product[0] * min(size, MAX_EXTRACT_CHARS) / MB, 3),
        "worst_pattern_product": worst_product[1],
        "raw_worst_ms_per_mb": None if worst_raw[0] == float("inf") else round(worst_raw[0], 3),
        "raw_worst_pattern": worst_raw[1],
        "raw_worst_input": worst_raw[2],
        "raw_over_limit": sorted(r[0] for r in rows if r[1] > FLAG_MS_PER_MB),
        "screener_worst_ms_per_mb": round(screen_ms, 3),
        "screener_worst_input": screen_where,
        "flagged": flagged,
        "timeouts": timeouts,
    }
    emit_json(figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
