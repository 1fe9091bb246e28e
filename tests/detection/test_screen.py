"""The screener flags exactly the lines `LC_ALL=C grep -E` flags, maps them to line numbers, and stays bounded."""

from __future__ import annotations

import os
import random
import subprocess
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import pytest

from activities.detection.catalogue import load_catalogue
from activities.detection.screen import (
    HITS_PER_PATTERN,
    MAX_LINE_TEXT,
    MAX_REPORTS_PER_LINE,
    Screener,
    export_grep_patterns,
    may_match_newline,
    to_grep_ere,
)


@dataclass(frozen=True)
class Pat:
    id: str
    regex: str
    caseless: bool = False


# a small catalogue-like set that exercises the awkward corners
PATTERNS = [
    Pat("nccl_watchdog", r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+)"),
    Pat("cuda_error", r"CUDA error: (an illegal memory access|unspecified launch failure|device-side assert)"),
    Pat("xid", r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)\): (?P<code>\d+)"),
    Pat("oom", r"cuda out of memory", caseless=True),
    Pat("traceback", r"^Traceback \(most recent call last\):"),
    Pat("exc_line_end", r"Error: [^\n]*failed$"),
    Pat("nccl_warn_error", r"NCCL WARN [^\n]*(error|Error)"),
    Pat("spans", r"begin[^z]*finish"),  # `[^z]` can eat a newline: chunk matches may span lines
    Pat("space_run", r"rank\s+(?P<rank>\d+)\s+failed"),  # `\s` too
    Pat("backref", r"(node[0-9]+) lost \1"),  # hyperscan refuses back-references: Python re runs it
    Pat("lazy", r"slurmstepd: error: .*?CANCELLED AT .*? DUE TO (TIME LIMIT|PREEMPTION|NODE FAILURE)"),
    Pat("brace", r"\{'loss': nan"),
]

FAILURES = [
    "[rank7]:[E ProcessGroupNCCL.cpp:616] [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4471, OpType=ALLREDUCE)",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "[12345.678] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.",
    "torch.OutOfMemoryError: CUDA OUT OF MEMORY. Tried to allocate 2.00 GiB",
    "Traceback (most recent call last):",
    "  Traceback (most recent call last):",  # not at line start: `^` must not match
    "OSError: Error: writing shard 3 failed",
    "OSError: Error: writing shard 3 failed and more",  # `$` must not match
    "node3:1:2 [1] NCCL WARN NET/IB : Got completion with error 12",
    "begin of a block that ends on this line: finish",
    "begin of a block",  # with the next line "finish" a chunk match spans them
    "finish",
    "rank\t12   failed to connect",
    "node12 lost node12",
    "node12 lost node13",
    "slurmstepd: error: *** STEP 42.0 ON node1 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***",
    "{'loss': nan, 'epoch': 1.0}",
    "\x1b[31mRuntimeError: CUDA error: device-side assert triggered\x1b[0m",
    "progress 10%\rprogress 50%\rCUDA error: unspecified launch failure",
    "NUL\x00 inside CUDA error: an illegal memory access",
]


def _realistic_lines(n: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    lines: list[str] = []
    for i in range(n):
        k = rng.randrange(100)
        if k < 30:
            lines.append(
                f" iteration {i:>8}/ 100000 | consumed samples: {i * 64} | elapsed time per iteration (ms): "
                f"{rng.uniform(400, 500):.1f} | lm loss: {rng.uniform(2, 3):.4E} |"
            )
        elif k < 60:
            lines.append(f"node{k}:{i}:{i + 1} [{k % 8}] NCCL INFO Channel {k:02d}/0 : 0[0] -> 1[1] via P2P/IPC")
        elif k < 65:
            lines.append(f"{k % 8}: UserWarning: something deprecated at step {i}")
        elif k < 67:
            lines.append(rng.choice(FAILURES))
        else:
            lines.append(f"{k % 8}: rank {k} data shard {i} ok")
    return lines


def _grep_flagged(patterns: list, path: Path, tmp_path: Path) -> set[int]:
    ere, skipped = export_grep_patterns(patterns)
    assert skipped == []
    pfile = tmp_path / "patterns.txt"
    pfile.write_text("\n".join(ere) + "\n", encoding="utf-8")
    proc = subprocess.run(
        ["grep", "-a", "-E", "-n", "-f", str(pfile), str(path)],
        env={**os.environ, "LC_ALL": "C"},
        capture_output=True,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return {int(line.split(b":", 1)[0]) for line in proc.stdout.split(b"\n") if line}


def _write(tmp_path: Path, lines: list[str], name: str = "job.log") -> Path:
    path = tmp_path / name
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    return path


@pytest.mark.parametrize("engine", ["hyperscan", "re"])
def test_flagged_lines_equal_grep(engine: str, tmp_path: Path) -> None:
    lines = _realistic_lines(20000)
    path = _write(tmp_path, lines)
    expected = _grep_flagged(PATTERNS, path, tmp_path)
    screener = Screener(PATTERNS, engine=engine, hits_per_pattern=None)
    result = screener.scan_file(path, chunk_bytes=64 * 1024)
    assert {h.line_no for h in result.hits} == expected
    assert result.flagged_lines == len(expected)
    assert result.lines == len(lines)
    # every hit names a pattern that matches that line on its own
    by_id = {p.id: p for p in PATTERNS}
    import re

    for hit in result.hits:
        flags = re.IGNORECASE if by_id[hit.pattern_id].caseless else 0
        assert re.search(by_id[hit.pattern_id].regex, lines[hit.line_no - 1], flags), hit


def test_whole_catalogue_equals_grep(tmp_path: Path) -> None:
    catalogue = load_catalogue()
    patterns = list(catalogue.patterns)  # benign look-alikes included: more patterns, more corners
    ere, skipped = export_grep_patterns(patterns)
    screenable = [p for p in patterns if p.id not in set(skipped)]
    assert len(screenable) >= len(patterns) - 2, f"no ERE translation for {skipped}"
    lines = _realistic_lines(20000, seed=11)
    path = _write(tmp_path, lines)
    expected = _grep_flagged(screenable, path, tmp_path)
    result = Screener(screenable, hits_per_pattern=None).scan_file(path, chunk_bytes=128 * 1024)
    assert expected, "the sample log should trip some catalogue patterns"
    assert {h.line_no for h in result.hits} == expected
    assert result.flagged_lines == len(expected)


def test_catalogue_compiles_in_hyperscan() -> None:
    screener = Screener(load_catalogue().patterns)
    assert screener.engine == "hyperscan"
    assert screener.fallback_pattern_ids == []


def test_line_spanning_match_is_not_a_hit() -> None:
    screener = Screener([Pat("spans", r"begin[^z]*finish")])
    result = screener.scan_bytes(b"begin here\nand finish there\nbegin and finish\n")
    assert [(h.line_no, h.line) for h in result.hits] == [(3, "begin and finish")]
    assert may_match_newline(r"begin[^z]*finish")
    assert not may_match_newline(r"CUDA error: .*failed")


def test_line_numbers_offsets_and_chunk_boundaries() -> None:
    lines = _realistic_lines(5000, seed=5)
    data = ("\n".join(lines)).encode()  # no final newline: the last line still counts
    screener = Screener(PATTERNS, hits_per_pattern=None)
    whole = screener.scan_bytes(data, first_line_no=101)
    tiny = screener.scan_bytes(data, first_line_no=101, chunk_bytes=1000)
    assert whole.lines == tiny.lines == len(lines)
    assert [(h.pattern_id, h.line_no) for h in whole.hits] == [(h.pattern_id, h.line_no) for h in tiny.hits]
    for hit in whole.hits:
        assert data[hit.offset:].split(b"\n", 1)[0].decode("utf-8", "replace").startswith(
            lines[hit.line_no - 101][:5].replace("\x1b", "")[:0]
        )
        assert hit.line_no - 101 == data.count(b"\n", 0, hit.offset)


def test_scan_lines_keeps_original_text() -> None:
    screener = Screener(PATTERNS)
    lines = ["ok", "RuntimeError: CUDA error: an illegal memory access was encountered", "ok", "node1 lost node1"]
    hits = screener.scan_lines(lines, first_line_no=10)
    assert [(h.pattern_id, h.line_no) for h in hits] == [("cuda_error", 11), ("backref", 13)]
    assert hits[0].line == lines[1]


def test_hostile_bytes_do_not_crash() -> None:
    screener = Screener(PATTERNS)
    data = (
        b"\xff\xfe\x00\x00garbage \xc3\x28 CUDA error: an illegal memory access\n"
        b"\x00\x00\x00\n"
        b"\x1b[1;31mTraceback (most recent call last):\x1b[0m\n"
        b"Traceback (most recent call last):\r\n"
        + bytes(range(256)) + b"\n"
    )
    result = screener.scan_bytes(data)
    assert result.lines == 6  # bytes(range(256)) holds a newline too
    cuda = [h for h in result.hits if h.pattern_id == "cuda_error"]
    assert cuda and "\ufffd" in cuda[0].line and "\x00" not in cuda[0].line
    assert [h.line_no for h in result.hits if h.pattern_id == "traceback"] == [4]


def test_memory_stays_bounded_on_a_100_mb_line(tmp_path: Path) -> None:
    size = 100 * 1024 * 1024
    path = tmp_path / "one-line.log"
    with path.open("wb") as f:
        block = b"NCCL INFO " * 104858  # just over 1 MiB, no newline
        for i in range(100):
            f.write(block)
            if i == 50:
                f.write(b" RuntimeError: CUDA error: an illegal memory access ")
        f.write(b"\nTraceback (most recent call last):\n")
    assert path.stat().st_size > size
    screener = Screener(PATTERNS)
    tracemalloc.start()
    result = screener.scan_file(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 40 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB while screening a 100 MiB line"
    assert result.lines == 2
    assert [(h.pattern_id, h.line_no) for h in result.hits] == [("cuda_error", 1), ("traceback", 2)]
    assert len(result.hits[0].line) <= MAX_LINE_TEXT
    assert "CUDA error" in result.hits[0].line


def test_in_memory_100_mb_line_keeps_a_window() -> None:
    data = b"a" * (50 * 1024 * 1024) + b" CUDA error: device-side assert " + b"a" * (50 * 1024 * 1024)
    screener = Screener(PATTERNS)
    tracemalloc.start()
    result = screener.scan_bytes(data)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 16 * 1024 * 1024
    assert [h.pattern_id for h in result.hits] == ["cuda_error"]
    assert "device-side assert" in result.hits[0].line and len(result.hits[0].line) <= MAX_LINE_TEXT


def test_pathological_line_does_not_hide_later_lines() -> None:
    screener = Screener([Pat("warn", r"NCCL WARN [a-z]+"), Pat("xid", r"NVRM: Xid")])
    data = (b"NCCL WARN abc " * (MAX_REPORTS_PER_LINE * 50)) + b"NVRM: Xid\nquiet\nNCCL WARN x\nNVRM: Xid 79\n"
    result = screener.scan_bytes(data)
    assert [(h.pattern_id, h.line_no) for h in result.hits] == [("warn", 1), ("xid", 1), ("warn", 3), ("xid", 4)]


def test_hits_are_bounded_per_pattern_but_counted_exactly() -> None:
    screener = Screener([Pat("warn", r"UserWarning"), Pat("fatal", r"CUDA error")], hits_per_pattern=64)
    lines = [f"UserWarning number {i}" for i in range(10000)] + ["CUDA error: boom"]
    result = screener.scan_bytes(("\n".join(lines) + "\n").encode(), chunk_bytes=20000)
    warn = [h for h in result.hits if h.pattern_id == "warn"]
    assert len(warn) == 64
    assert result.pattern_counts == {"warn": 10000, "fatal": 1}
    assert result.flagged_lines == 10001
    assert result.hits_dropped == 10000 - 64
    assert warn[0].line_no == 1 and warn[-1].line_no == 10000  # the first few and the newest are kept
    assert result.hits[-1].pattern_id == "fatal"
    assert HITS_PER_PATTERN >= 64


def test_newest_progress_and_checkpoints() -> None:
    lines = []
    for it in range(1, 2001):
        lines.append(f" iteration {it:>8}/   10000 | elapsed time per iteration (ms): 500.0 | lm loss: 2.5E+00 |")
        lines.append(f"node1:1:1 [0] NCCL INFO chatter {it}")
        if it % 500 == 0:
            lines.append(f"  successfully saved checkpoint from iteration {it:>7} to /ckpt")
    data = ("\n".join(lines) + "\n").encode()
    screener = Screener(PATTERNS)
    result = screener.scan_bytes(data, chunk_bytes=32 * 1024)
    newest = result.newest_progress
    assert newest is not None and newest.iteration == 2000 and newest.iter_time_s == pytest.approx(0.5)
    assert lines[newest.line_no - 1].startswith(" iteration     2000/")
    iterations = [s.iteration for s in result.progress]
    assert iterations == sorted(iterations) and len(iterations) > 5
    assert [c.checkpoint_iteration for c in result.checkpoints] == [500, 1000, 1500, 2000]
    assert [lines[c.line_no - 1].strip().startswith("successfully saved") for c in result.checkpoints] == [True] * 4
    every = screener.scan_bytes(data, progress="all")
    assert [s.iteration for s in every.progress] == list(range(1, 2001))
    assert all(lines[s.line_no - 1].startswith(" iteration") for s in every.progress)


def test_no_progress_lines_means_no_progress() -> None:
    result = Screener(PATTERNS).scan_bytes(b"nothing to see\n" * 50000)
    assert result.progress == [] and result.hits == [] and result.lines == 50000


@pytest.mark.parametrize(
    ("python", "ere"),
    [
        (r"(?i)nccl\s+warn", "[nN][cC][cC][lL][[:space:]]+[wW][aA][rR][nN]"),
        (r"[\w.-]+:\d+", "[_[:alnum:].-]+:[0-9]+"),
        (r"a{2,3}?b(?:c|d)", "a{2,3}b(c|d)"),
        (r"{'loss'", r"\{'loss'"),
        (r"[^\]]+\]", r"[^]]+\]"),
        (r"x(?P<n>[^\n]+)", "x(.+)"),
        (r"foo(?=bar)", None),
    ],
)
def test_to_grep_ere(python: str, ere: str | None) -> None:
    assert to_grep_ere(python) == ere


def test_unknown_engine_says_what_to_use() -> None:
    with pytest.raises(ValueError, match="hyperscan' or 're'"):
        Screener(PATTERNS, engine="pcre")


def test_without_hyperscan_falls_back_to_re_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    from loguru import logger

    import activities.detection.screen as screen

    monkeypatch.setattr(screen, "_hs", None)
    messages: list[str] = []
    sink = logger.add(messages.append, level="WARNING", format="{message}")
    try:
        fallback = screen.Screener(PATTERNS, hits_per_pattern=None)
    finally:
        logger.remove(sink)
    assert fallback.engine == "re"
    assert any("not hyperscan" in m for m in messages)
    with pytest.raises(RuntimeError, match="pip install hyperscan"):
        screen.Screener(PATTERNS, engine="hyperscan")
    data = ("\n".join(_realistic_lines(3000, seed=9)) + "\n").encode()
    monkeypatch.undo()
    fast = Screener(PATTERNS, hits_per_pattern=None)
    assert [(h.pattern_id, h.line_no) for h in fallback.scan_bytes(data).hits] == [
        (h.pattern_id, h.line_no) for h in fast.scan_bytes(data).hits
    ]


def test_tailing_leaves_an_unfinished_line_for_the_next_read(tmp_path: Path) -> None:
    path = tmp_path / "growing.log"
    path.write_bytes(b"ok\nRuntimeError: CUDA error: an illegal memory access\nCUDA error: device-si")
    screener = Screener(PATTERNS)
    first = screener.scan_file(path, complete_lines_only=True)
    assert (first.lines, [h.line_no for h in first.hits]) == (2, [2])
    with path.open("ab") as f:
        f.write(b"de assert triggered\nok\n")
    second = screener.scan_file(path, offset=first.bytes, first_line_no=first.lines + 1, complete_lines_only=True)
    assert [(h.pattern_id, h.line_no, h.line) for h in second.hits] == [
        ("cuda_error", 3, "CUDA error: device-side assert triggered")
    ]
    assert first.bytes + second.bytes == path.stat().st_size and second.lines == 2
