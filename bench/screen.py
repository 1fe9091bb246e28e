"""Screening throughput: jobmedic's Screener against `LC_ALL=C grep -E -c -f` on the same file.

Generates a realistic training log (Megatron-style progress, NCCL INFO chatter,
warnings, srun-labelled lines, about one failure line per 100,000 lines, ~150
bytes a line) in a temporary directory (reused when it exists with the same
parameters), exports the pattern set to ERE for grep, then measures in the same
run, in turns (median of 3, file in page cache): grep, the Screener as
production builds it (its chunks on worker threads, one per usable core), and
the Screener on one thread. Every figure is also given as a ratio to grep's
figure of the same run; all three must flag the same number of lines.

    .venv/bin/python bench/screen.py            # 1 GiB
    .venv/bin/python bench/screen.py --quick    # 100 MiB, well under a minute

Last line: one JSON object with mb_per_s, grep_mb_per_s, ratio_vs_grep (wall
time, the figure issue 7 asks for), one_thread_mb_per_s, ...
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit_json, load_patterns, print_table, time_interleaved  # noqa: E402

from activities.detection.screen import CHUNK_BYTES, PREFILTERS, Screener, export_grep_patterns  # noqa: E402

GENERATOR_VERSION = 2
MB = 1 << 20

# failure lines, roughly one per 100,000 lines (a fault the catalogue should flag)
FAILURES = (
    "[rank{r}]:[E ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum={s}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600123 milliseconds before timing out.",
    "{h}:{p}:{p} [{g}] NCCL WARN NET/IB : Got completion from peer 10.0.0.{g}<{p}> with error 12, opcode 0, len 0, vendor err 129",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "[{t}] {h} kernel: NVRM: Xid (PCI:0000:{g}b:00): 79, pid={p}, name=python, GPU has fallen off the bus.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {g} has a total capacity of 79.15 GiB",
    "slurmstepd: error: *** STEP 4242.0 ON {h} CANCELLED AT 2024-05-01T12:00:00 DUE TO TIME LIMIT ***",
    "srun: error: {h}: task {r}: Exited with exit code 1",
    "OSError: [Errno 28] No space left on device",
    "Traceback (most recent call last):",
)


def _progress(it: int, rng: random.Random) -> str:
    return (
        f" [2024-05-01 12:{it // 60 % 60:02d}:{it % 60:02d}] iteration {it:>8}/  500000 | consumed samples: {it * 512:>12} | "
        f"elapsed time per iteration (ms): {rng.uniform(480, 530):.1f} | learning rate: 2.999E-04 | global batch size:   512 | "
        f"lm loss: {rng.uniform(2, 3):.6E} | loss scale: 1.0 | grad norm: {rng.uniform(0.1, 2):.3f} | "
        f"number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def _chatter(rng: random.Random, host: str, pid: int) -> str:
    g = rng.randrange(8)
    kind = rng.randrange(10)
    if kind < 5:
        return f"{host}:{pid}:{pid + 7} [{g}] NCCL INFO Channel {rng.randrange(32):02d}/0 : {g}[{g}] -> {(g + 1) % 8}[{(g + 1) % 8}] via P2P/IPC/read"
    if kind < 7:
        return f"{host}:{pid}:{pid + 7} [{g}] NCCL INFO comm 0x{rng.getrandbits(40):x} rank {g} nranks 64 cudaDev {g} busId {g}b000 - Init COMPLETE"
    if kind < 8:
        return (
            "/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py:557: UserWarning: "
            "This DataLoader will create 16 worker processes in total."
        )
    if kind < 9:
        return f"{g}: [2024-05-01 12:00:01,123] [INFO] [logging.py:96:log_dist] [Rank {g}] step={rng.randrange(10**5)}, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]"
    return f"{g}: {host}: data loader shard {rng.randrange(1024)} opened /lustre/datasets/pile/train_{rng.randrange(30):02d}.jsonl (throughput ok)"


def generate(path: Path, size: int, *, seed: int = 7) -> None:
    """Write about `size` bytes of log to `path` (atomically)."""
    rng = random.Random(seed)
    tmp = path.with_suffix(".part")
    written = 0
    it = 0
    line_count = 0
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        while written < size:
            lines = []
            for _ in range(20000):
                line_count += 1
                host = f"gpu-node{rng.randrange(64):03d}"
                if line_count % 100_000 == 50_000:
                    tpl = FAILURES[(line_count // 100_000) % len(FAILURES)]
                    lines.append(tpl.format(r=rng.randrange(64), s=rng.randrange(10**6), h=host,
                                            p=rng.randrange(10**6), g=rng.randrange(8), t=rng.randrange(10**6)))
                elif line_count % 4 == 0:
                    it += 1
                    lines.append(_progress(it, rng))
                else:
                    lines.append(_chatter(rng, host, rng.randrange(10**6)))
            block = "\n".join(lines) + "\n"
            f.write(block)
            written += len(block)
    os.replace(tmp, path)


def log_file(size: int, seed: int) -> Path:
    folder = Path(tempfile.gettempdir()) / "jobmedic-bench"
    folder.mkdir(exist_ok=True)
    path = folder / f"screen-v{GENERATOR_VERSION}-{size}-{seed}.log"
    if not path.exists():
        print(f"generating {size / MB:.0f} MiB of log at {path} ...", file=sys.stderr, flush=True)
        generate(path, size, seed=seed)
    return path


def grep_count(patterns_file: Path, log: Path) -> int:
    proc = subprocess.run(
        ["grep", "-E", "-c", "-f", str(patterns_file), str(log)],
        env={**os.environ, "LC_ALL": "C"},
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode not in (0, 1):
        raise SystemExit(f"grep failed ({proc.returncode}): {proc.stderr.strip()}")
    return int(proc.stdout.strip() or 0)


def pattern_costs(patterns: list, log: Path, *, top: int, sample: int = 32 * MB) -> list[tuple[str, float]]:
    """The patterns whose removal speeds the chunk scan most, with the share of its CPU time each costs.

    Leave-one-out over the first `sample` bytes of the log, best of 3, the chunk
    database as the Screener builds it (prefilters in place).
    """
    import hyperscan

    with open(log, "rb") as f:
        data = f.read(sample)
    exprs = [PREFILTERS.get(p.regex.encode(), p.regex.encode()) for p in patterns]
    flags = [hyperscan.HS_FLAG_MULTILINE | (hyperscan.HS_FLAG_CASELESS if getattr(p, "caseless", False) else 0)
             for p in patterns]

    def cpu_seconds(skip: int | None) -> float:
        keep = [i for i in range(len(exprs)) if i != skip]
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        db.compile(expressions=[exprs[i] for i in keep], ids=list(range(len(keep))), elements=len(keep),
                   flags=[flags[i] for i in keep])
        best = float("inf")
        with memoryview(data) as view:
            for _ in range(3):
                t0 = time.process_time()
                for at in range(0, len(data), CHUNK_BYTES):
                    db.scan(view[at:at + CHUNK_BYTES])
                best = min(best, time.process_time() - t0)
        return best

    whole = cpu_seconds(None)
    shares = [(p.id, max(0.0, 1 - cpu_seconds(i) / whole)) for i, p in enumerate(patterns)]
    return sorted(shares, key=lambda x: -x[1])[:top]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100 MiB instead of 1 GiB")
    parser.add_argument("--size-mb", type=int, default=None, help="log size in MiB (default 1024, 100 with --quick)")
    parser.add_argument("--chunk-mb", type=float, default=CHUNK_BYTES / MB, help="screening chunk size in MiB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--include-benign", action="store_true",
                        help="screen the benign look-alikes too (production checks them on flagged lines only)")
    parser.add_argument("--costs", type=int, default=0, metavar="N",
                        help="also list the N patterns that cost the chunk scan most (candidates for a prefilter)")
    args = parser.parse_args(argv)
    size = (args.size_mb or (100 if args.quick else 1024)) * MB
    log = log_file(size, args.seed)
    nbytes = log.stat().st_size

    patterns, source = load_patterns(include_benign=args.include_benign)
    ere, skipped = export_grep_patterns(patterns)
    keep = [p for p in patterns if p.id not in set(skipped)]
    patterns_file = log.parent / "patterns.txt"
    patterns_file.write_text("\n".join(ere) + "\n", encoding="utf-8")
    screener = Screener(keep)
    one_thread = Screener(keep, workers=1)
    chunk = int(args.chunk_mb * MB)

    # warm the page cache, then measure
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)
    timed = time_interleaved(
        {
            "grep": lambda: grep_count(patterns_file, log),
            "ours": lambda: screener.scan_file(log, chunk_bytes=chunk),
            "one": lambda: one_thread.scan_file(log, chunk_bytes=chunk),
        },
        repeat=args.repeat,
    )
    grep, ours, one = timed["grep"], timed["ours"], timed["one"]
    result = ours.value
    flagged = result.flagged_lines
    prefiltered = [screener.pattern_ids[i] for i in sorted(screener._main.prefiltered) if i < len(keep)]
    mb = nbytes / MB
    figures = {
        "bench": "screen",
        "bytes": nbytes,
        "lines": result.lines,
        "patterns": len(keep),
        "patterns_source": source,
        "patterns_without_ere": skipped,
        "patterns_on_python_re": screener.fallback_pattern_ids,
        "engine": screener.engine,
        "workers": screener.workers,
        "patterns_prefiltered": prefiltered,
        "chunk_mb": args.chunk_mb,
        "mb_per_s": round(mb / ours.seconds, 1),
        "grep_mb_per_s": round(mb / grep.seconds, 1),
        "ratio_vs_grep": round(grep.seconds / ours.seconds, 2),
        "one_thread_mb_per_s": round(mb / one.seconds, 1),
        "one_thread_ratio_vs_grep": round(grep.seconds / one.seconds, 2),
        # CPU time (user + system) is steadier than wall time when other work shares the cores
        "cpu_mb_per_s": round(mb / ours.cpu_seconds, 1) if ours.cpu_seconds else None,
        "grep_cpu_mb_per_s": round(mb / grep.cpu_seconds, 1) if grep.cpu_seconds else None,
        "cpu_ratio_vs_grep": round(grep.cpu_seconds / ours.cpu_seconds, 2) if ours.cpu_seconds else None,
        "lines_flagged": flagged,
        "grep_lines_flagged": grep.value,
        "progress_samples": len(result.progress),
        "newest_iteration": result.newest_progress.iteration if result.newest_progress else None,
        "checkpoints": len(result.checkpoints),
        "screen_runs_s": [round(s, 3) for s in ours.runs],
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "grep_runs_s": [round(s, 3) for s in grep.runs],
        "one_thread_runs_s": [round(s, 3) for s in one.runs],
    }
    print(f"log: {log} ({mb:,.0f} MiB, {result.lines:,} lines); patterns: {len(keep)} from {source}")
    print_table(
        ["method", "median s", "MB/s", "CPU s", "MB/CPU s", "lines flagged", "vs grep (wall)", "vs grep (CPU)"],
        [
            ["LC_ALL=C grep -E -c -f", grep.seconds, mb / grep.seconds, grep.cpu_seconds,
             mb / max(grep.cpu_seconds, 1e-9), grep.value, 1.0, 1.0],
            [f"jobmedic Screener ({screener.engine}, {screener.workers} threads, {args.chunk_mb:g} MiB chunks)",
             ours.seconds, mb / ours.seconds, ours.cpu_seconds, mb / max(ours.cpu_seconds, 1e-9), flagged,
             grep.seconds / ours.seconds, grep.cpu_seconds / max(ours.cpu_seconds, 1e-9)],
            ["jobmedic Screener, one thread",
             one.seconds, mb / one.seconds, one.cpu_seconds, mb / max(one.cpu_seconds, 1e-9),
             one.value.flagged_lines, grep.seconds / one.seconds, grep.cpu_seconds / max(one.cpu_seconds, 1e-9)],
        ],
    )
    print(f"grep: {mb / grep.seconds:,.1f} MB/s; the Screener {grep.seconds / ours.seconds:.2f}x that (wall time), "
          f"{grep.seconds / one.seconds:.2f}x on one thread; load average {os.getloadavg()[0]:.2f}; "
          f"prefiltered: {', '.join(prefiltered) or 'none'}")
    if args.costs:
        costs = pattern_costs(keep, log, top=args.costs)
        print_table(["pattern", "share of the chunk scan"], [[pid, f"{share:.0%}"] for pid, share in costs])
        figures["pattern_costs"] = {pid: round(share, 3) for pid, share in costs}
    if flagged != grep.value or one.value.flagged_lines != grep.value:
        print(f"MISMATCH: the screener flagged {flagged} lines ({one.value.flagged_lines} on one thread), "
              f"grep {grep.value}", file=sys.stderr)
        figures["error"] = "flagged line counts differ"
        emit_json(figures)
        return 1
    emit_json(figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
