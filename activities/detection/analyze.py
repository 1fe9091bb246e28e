"""Offline analysis of log files: one bounded streaming pass per file, then a verdict.

The file is read in chunks and screened with the catalogue; only flagged lines
are kept (the first `HEAD_LINES` and the last `TAIL_LINES` of them, so a log
with millions of matches still fits in memory), with the newest progress seen.
Lines longer than `MAX_LINE_BYTES` are screened in pieces and never held whole.
"""

from __future__ import annotations

import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from activities.detection import fallback
from activities.detection.catalogue import Catalogue, load_catalogue
from activities.detection.screen import Screener
from activities.detection.verdict import attribute_lines, screener_for
from adapters.errors import ParseError
from adapters.slurm.hostlist import expand
from workflows.contracts import EvidenceLine, JobEvidence, JobInfo, NodeInfo, Progress, TaskLayout, Verdict

CHUNK_BYTES = 4 << 20
MAX_LINE_BYTES = 16 << 20  # a longer line is screened piecewise
HEAD_LINES = 2000
TAIL_BYTES = 256 << 10  # the end of the file kept for the fallbacks (the last lines, flagged or not)
TAIL_LINES_KEPT = fallback.TAIL_LINES
MAX_TAIL_LINE = 16384
TAIL_LINES = 8000


@dataclass
class FileScan:
    """What the streaming pass kept of one file."""

    lines: dict[int, str] = field(default_factory=dict)  # flagged line number -> text
    hits: list[EvidenceLine] = field(default_factory=list)
    line_count: int = 0
    byte_count: int = 0
    progress: Progress | None = None
    tail: list[tuple[int, str]] = field(default_factory=list)  # the last lines, flagged or not


def parse_layout(text: str) -> TaskLayout:
    """`NODELIST:TASKS_PER_NODE` -> a block layout, e.g. `node[1-4]:8` or `a1,a2:4,8`.

    Raises:
        ParseError: the text is not NODELIST:COUNT[,COUNT...].
    """
    nodelist, sep, counts = text.rpartition(":")
    if not sep or not nodelist:
        raise ParseError("layout must look like NODELIST:TASKS_PER_NODE, e.g. node[1-4]:8", line=text)
    nodes = expand(nodelist)
    try:
        numbers = [int(c) for c in counts.split(",") if c.strip()]
    except ValueError as exc:
        raise ParseError("tasks per node must be a number or a comma list of numbers", line=text) from exc
    if len(numbers) == 1:
        numbers = numbers * len(nodes)
    if len(numbers) != len(nodes) or any(n < 1 for n in numbers):
        raise ParseError(f"{len(nodes)} node(s) but {len(numbers)} positive task count(s)", line=text)
    return TaskLayout(nodes=nodes, tasks_per_node=numbers)


def scan_stream(stream: BinaryIO, *, catalogue: Catalogue | None = None) -> FileScan:
    """Screen a byte stream with bounded memory; keep flagged lines and the newest progress."""
    catalogue = catalogue or load_catalogue()
    screener = screener_for(catalogue)
    out = FileScan()
    head: list[int] = []
    tail: deque[int] = deque()
    line_no = 1
    pending = b""
    in_long_line = False  # inside a line longer than MAX_LINE_BYTES, already counted
    last = b""  # the stream's last bytes, for the lines the fallbacks read
    while True:
        block = stream.read(CHUNK_BYTES)
        out.byte_count += len(block)
        last = (last + block)[-TAIL_BYTES:]
        data = pending + block if pending else block
        if not block:
            if data:
                _screen(screener, data, line_no, out, head, tail)
                if not in_long_line:
                    line_no += 1
            break
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            if len(data) < MAX_LINE_BYTES:
                pending = data
                continue
            # a giant line: screen this piece, remember only that we are inside it
            _screen(screener, data, line_no, out, head, tail)
            in_long_line = True
            pending = b""
            continue
        piece, pending = data[:cut], data[cut:]
        newlines = _screen(screener, piece, line_no, out, head, tail)
        line_no += newlines
        in_long_line = False
    out.line_count = line_no - 1
    out.tail = _tail_lines(last, out.line_count)
    keep = set(head) | set(tail)
    out.lines = {n: t for n, t in out.lines.items() if n in keep}
    out.hits = [h for h in out.hits if h.line_no in keep]
    return out


def _tail_lines(last: bytes, line_count: int) -> list[tuple[int, str]]:
    """The last `fallback.TAIL_LINES` lines of the stream, numbered (a partial first line is dropped)."""
    if not last:
        return []
    text = last.decode("utf-8", "replace").replace("\x00", "")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(last) >= TAIL_BYTES and len(lines) > 1:
        lines = lines[1:]  # cut at the window's start
    lines = [line[:MAX_TAIL_LINE] for line in lines[-TAIL_LINES_KEPT:]]
    first = line_count - len(lines) + 1
    return [(first + i, line.rstrip("\r")) for i, line in enumerate(lines)]


def _screen(screener: Screener, data: bytes, first_line_no: int, out: FileScan, head: list[int], tail: deque[int]) -> int:
    result = screener.scan_bytes(data, first_line_no=first_line_no)
    newest = result.newest_progress
    if newest is not None and newest.iteration is not None:
        out.progress = Progress(iteration=newest.iteration, loss=newest.loss, throughput=newest.throughput,
                                iter_time_s=newest.iter_time_s)
    for hit in result.hits:
        if hit.line_no is None:
            continue  # the screener numbers every hit
        if hit.line_no not in out.lines:
            out.lines[hit.line_no] = hit.line
            if len(head) < HEAD_LINES:
                head.append(hit.line_no)
            else:
                tail.append(hit.line_no)
                if len(tail) > TAIL_LINES:
                    dropped = tail.popleft()
                    out.lines.pop(dropped, None)
        if hit.line_no in out.lines:
            out.hits.append(hit)
    if len(out.hits) > 4 * (HEAD_LINES + TAIL_LINES):
        out.hits = [h for h in out.hits if h.line_no in out.lines]
    return data.count(b"\n")


def analyze_file(
    path: str | Path,
    *,
    layout: TaskLayout | None = None,
    job: JobInfo | None = None,
    nodes: list[NodeInfo] | None = None,
    catalogue: Catalogue | None = None,
) -> tuple[Verdict, FileScan]:
    """Screen one file (`-` is standard input) and attribute it. Raises OSError when it cannot be read."""
    catalogue = catalogue or load_catalogue()
    if str(path) == "-":
        scan = scan_stream(sys.stdin.buffer, catalogue=catalogue)
    else:
        with open(path, "rb") as stream:
            scan = scan_stream(stream, catalogue=catalogue)
    return attribute_scan(scan, layout=layout, job=job, nodes=nodes, catalogue=catalogue), scan


def attribute_scan(
    scan: FileScan,
    *,
    layout: TaskLayout | None = None,
    job: JobInfo | None = None,
    nodes: list[NodeInfo] | None = None,
    catalogue: Catalogue | None = None,
) -> Verdict:
    """The verdict for what a streaming pass kept; `nodes` is the node map (names, addresses, FQDNs)."""
    evidence = evidence_for(scan, layout=layout, job=job)
    evidence.nodes = list(nodes or [])
    numbered = sorted(scan.lines.items())
    return attribute_lines(evidence, numbered, catalogue=catalogue, hits=scan.hits, tail=scan.tail)


def evidence_for(scan: FileScan, *, layout: TaskLayout | None = None, job: JobInfo | None = None) -> JobEvidence:
    """JobEvidence for an offline file: optional job facts, the layout, the newest progress."""
    if job is None and layout is not None:
        job = JobInfo(job_id="offline", nodes=list(layout.nodes), layout=layout)
    elif job is not None and layout is not None:
        job = job.model_copy(update={"layout": layout, "nodes": job.nodes or list(layout.nodes)})
    return JobEvidence(job=job, progress=scan.progress)
