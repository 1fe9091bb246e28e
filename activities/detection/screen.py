"""The fast first pass over log bytes: which lines match a pattern, and where training stands.

One hyperscan database holds every screen expression of the catalogue plus the
checkpoint-save markers. A chunk of log bytes (whole lines, 4 MiB by default)
is scanned once, in block mode, with `^`/`$` meaning line start/end. A match
only says where it ends; the line around it is found by searching for the
newline bytes on either side of that offset, so lines are never split into
Python strings except the few that match. For an expression that can consume
a newline (`\\s`, `[^x]`, ...) a chunk match may span two lines, so such lines are
rescanned on their own with a second database compiled with
HS_FLAG_SINGLEMATCH, which gives exactly the patterns `grep` would see on that
line. Every other line keeps the ids reported by the chunk scan, which are
already exact.

Some expressions hyperscan scans slowly (their only literal is common, so its
automaton runs on most lines); the chunk pass runs a cheaper necessary condition
for them instead (`PREFILTERS`) and the lines it flags get the same exact line
rescan, so what is flagged does not change.

A large input (`parallel_min_bytes`, two chunks by default) is scanned on
worker threads, one chunk each at a time, since hyperscan releases the GIL while
it scans; each thread has its own scratch space. A chunk's findings carry line
numbers relative to the chunk and are merged on the caller's thread in chunk
order, so every figure is exactly what one thread would compute.

Progress is not screened line by line: the newest progress line of each chunk
is found by scanning backwards from the end of the chunk in growing windows
with a small marker database, then parsed (`progress.py`).

Patterns hyperscan cannot compile (back-references, look-arounds) run on
Python's `re` as bytes patterns in a separate pass over the chunk, one search
per matching line. Without hyperscan (an architecture without wheels) every
pattern takes that path: correct, far slower, and the screener says so loudly.

Hits are bounded: every matching line is counted, per pattern, but only the
first few and the newest few hundred per pattern are kept as `Hit` objects, so
a log where a harmless warning repeats a million times costs counts, not
memory. A Screener serialises concurrent scans with a lock (one scan's threads
share its scratch pool).
"""

from __future__ import annotations

import io
import os
import queue
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Protocol, cast

from loguru import logger
from pydantic import Field

from activities.detection.progress import (
    CHECKPOINT_MARKERS,
    PROGRESS_MARKERS,
    ProgressSample,
    parse_checkpoint_line,
    parse_progress_line,
)
from workflows.contracts import Contract, EvidenceLine

try:  # hyperscan ships wheels for x86_64 and aarch64 Linux only
    import hyperscan as _hs
except ImportError:  # pragma: no cover - exercised on other architectures
    _hs = None  # type: ignore[assignment]

CHUNK_BYTES = 4 << 20
_Bytes = bytes | bytearray  # what is screened: bytes, or the stream reader's reused buffers
# a scan of at least this much runs its chunks on worker threads (fewer bytes do not pay for them)
PARALLEL_MIN_BYTES = 2 * CHUNK_BYTES
MAX_WORKERS = 4
MAX_LINE_TEXT = 8192  # characters of a hit's line kept (a window around the match)
MAX_PROGRESS_LINE = 65536  # a longer "line" is not a progress line
# a line that reports more matches than this stops the chunk scan, which resumes after
# it; it bounds the Python callbacks a pathological line (1 MB of near-matches) costs
MAX_REPORTS_PER_LINE = 256
# Hit objects kept per pattern and scan: the first eighth and the newest rest. Large enough
# that every rank reporting an NCCL timeout in a 1,000-rank job is still seen (victims vs
# suspects); benign look-alikes, the patterns that repeat by the million, are not screened.
HITS_PER_PATTERN = 1024
_FIRST_WINDOW = 2048  # bytes before a chunk's end searched first for its newest progress line (then x4)
_MAX_PARSE_TRIES = 64
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# Expressions hyperscan scans slowly, each with a cheaper necessary condition that the chunk pass
# runs instead. Every line the expression matches also matches its prefilter, and every line the
# prefilter flags is checked with the exact expression (the line rescan), so results stay exact;
# only speed changes. An expression edited in the catalogue simply stops being prefiltered.
# - python_exception_qualified: its only literal, ": ", sits on every progress line, so hyperscan
#   ran its automaton there; it cost ~75 % of the scan of bench/screen.py's log (700 -> 2,500 MB/s
#   for the whole catalogue with the prefilter). Any match ends a dotted segment
#   (`[a-z_][a-z0-9_]{0,40}\.`, never empty) right before `[A-Z]`.
PREFILTERS: dict[bytes, bytes] = {
    rb"""(^|[ :>|"'(]|\])([a-z_][a-z0-9_]{0,40}\.){1,8}[A-Z][A-Za-z0-9_]{1,60}: """: rb"[a-z0-9_]\.[A-Z]",
}
_BUFFER_ANCHOR = re.compile(r"(?<!\\)((?:\\\\)*)\\([AZz])")


class ScreenPattern(Protocol):
    """What the screener needs of a catalogue pattern (`caseless` is optional)."""

    @property
    def id(self) -> str: ...

    @property
    def regex(self) -> str: ...


# One line that matched one pattern: the project's one flagged-line type. `line` is decoded, ANSI
# codes removed, a window around the match when the line is very long; `offset` is the byte offset
# of the line's start from where the scan started.
Hit = EvidenceLine


class ScreenResult(Contract):
    hits: list[Hit] = Field(default_factory=list)  # in line order; bounded per pattern
    progress: list[ProgressSample] = Field(default_factory=list)  # newest of each chunk, oldest first
    checkpoints: list[ProgressSample] = Field(default_factory=list)  # every checkpoint save seen
    lines: int = 0
    bytes: int = 0
    flagged_lines: int = 0  # lines any pattern matched (grep -c would print this)
    pattern_counts: dict[str, int] = Field(default_factory=dict)  # lines matched, per pattern
    hits_dropped: int = 0  # matches counted but not kept as Hit objects

    @property
    def newest_progress(self) -> ProgressSample | None:
        return self.progress[-1] if self.progress else None


# --------------------------------------------------------------------------- engines


def _hs_db(expressions: list[bytes], ids: list[int], flags: list[int]):
    db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
    db.compile(expressions=expressions, ids=ids, elements=len(expressions), flags=flags)
    return db


def _hs_refuses(expression: bytes, flags: int) -> bool:
    try:
        _hs_db([expression], [0], [flags])
    except _hs.error:
        return True
    return False


def may_match_newline(regex: str, *, caseless: bool = False) -> bool:
    """Whether `regex` can consume a newline byte (so a chunk match may span lines).

    Conservative: anything it does not understand counts as "can".
    """
    try:
        parsed = re._parser.parse(regex, re.IGNORECASE if caseless else 0)  # type: ignore[attr-defined, unused-ignore]
    except (re.error, AttributeError):
        return True
    if parsed.state.flags & re.DOTALL:
        return True  # (?s): '.' eats newlines too
    return _subpattern_newline(parsed)


def _subpattern_newline(items) -> bool:
    c = re._constants  # type: ignore[attr-defined, unused-ignore]
    nl = 10
    for op, av in items:
        if op is c.LITERAL:
            if av == nl:
                return True
        elif op is c.NOT_LITERAL:
            if av != nl:
                return True
        elif op is c.ANY:
            continue  # no DOTALL: '.' stops at a newline, in hyperscan too
        elif op is c.IN:
            if _class_newline(av):
                return True
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", None)):
            if _subpattern_newline(av[2]):
                return True
        elif op is c.SUBPATTERN:
            if _subpattern_newline(av[-1]):
                return True
        elif op is c.BRANCH:
            if any(_subpattern_newline(b) for b in av[1]):
                return True
        elif op in (c.AT, c.GROUPREF):
            continue
        elif op in (c.ASSERT, c.ASSERT_NOT):
            continue  # not consumed; hyperscan refuses these anyway (they go to re)
        else:
            return True
    return False


def _class_newline(items) -> bool:
    c = re._constants  # type: ignore[attr-defined, unused-ignore]
    negate = bool(items) and items[0][0] is c.NEGATE
    has = False
    for op, av in items:
        if op is c.LITERAL and av == 10:
            has = True
        elif op is c.RANGE and av[0] <= 10 <= av[1]:
            has = True
        elif op is c.CATEGORY and av in (c.CATEGORY_SPACE, c.CATEGORY_NOT_DIGIT, c.CATEGORY_NOT_WORD):
            has = True
    return (not has) if negate else has


class _Compiled:
    """Expressions split between one hyperscan database pair and Python `re`."""

    def __init__(self, expressions: list[str], caseless: list[bool], *, engine: str) -> None:
        expressions = [_BUFFER_ANCHOR.sub(lambda m: m.group(1) + ("^" if m.group(2) == "A" else "$"), e)
                       for e in expressions]
        self.re_only: list[tuple[int, re.Pattern[bytes]]] = []
        self.chunk_db = None
        self.line_db = None
        # ids whose chunk matches may span lines, or whose chunk pass runs a prefilter: their
        # lines get the exact line rescan
        self.spanning = frozenset(i for i, (e, ci) in enumerate(zip(expressions, caseless))
                                  if may_match_newline(e, caseless=ci))
        self.prefiltered: frozenset[int] = frozenset()
        self.verify = self.spanning
        if engine == "re":
            self.re_only = [(i, _re_bytes(e, ci)) for i, (e, ci) in enumerate(zip(expressions, caseless))]
            return
        ids = list(range(len(expressions)))
        raw = [e.encode() for e in expressions]
        flags = [_hs.HS_FLAG_MULTILINE | (_hs.HS_FLAG_CASELESS if ci else 0) for ci in caseless]
        try:
            self._build(raw, ids, flags)
        except _hs.error:
            refused = {i for i in ids if _hs_refuses(raw[i], flags[i])}
            self.re_only = [(i, _re_bytes(expressions[i], caseless[i])) for i in sorted(refused)]
            keep = [i for i in ids if i not in refused]
            if keep:
                self._build([raw[i] for i in keep], keep, [flags[i] for i in keep])

    def _build(self, raw: list[bytes], ids: list[int], flags: list[int]) -> None:
        chunk_raw = [PREFILTERS.get(e, e) for e in raw]
        self.chunk_db = _hs_db(chunk_raw, ids, flags)
        self.line_db = _hs_db(raw, ids, [f | _hs.HS_FLAG_SINGLEMATCH for f in flags])
        self.prefiltered = frozenset(i for i, e in zip(ids, raw) if e in PREFILTERS)
        self.verify = self.spanning | self.prefiltered

    def new_scratch(self) -> tuple[object, object]:
        """Scratch space for one thread's scans of both databases (hyperscan's is per scan)."""
        if self.chunk_db is None:
            return (None, None)
        return (_hs.Scratch(self.chunk_db), _hs.Scratch(self.line_db))

    def candidate_lines(self, data: _Bytes, start: int, end: int, scratch: tuple[object, object]) -> dict[int, list]:
        """Line start -> [line end, offset of a match's last byte, reported ids, needs rescan]."""
        found: dict[int, list] = {}
        if self.chunk_db is not None:
            _hs_line_ends(self.chunk_db, scratch[0], data, start, end, found, self.verify)
        for i, rx in self.re_only:
            _re_line_ends(i, rx, data, start, end, found)
        return found

    def line_ids(self, data: _Bytes, ls: int, le: int, scratch: tuple[object, object]) -> set[int]:
        """Ids of the expressions that match the line data[ls:le] on its own (grep's view)."""
        ids: set[int] = set()
        if self.line_db is not None and le > ls:
            def on_match(pid: int, _frm: int, _to: int, _flags: int, _ctx: object) -> None:
                ids.add(pid)

            with memoryview(data) as view:
                self.line_db.scan(view[ls:le], match_event_handler=on_match, scratch=scratch[1])
        if self.re_only:
            line = data[ls:le]
            ids.update(i for i, rx in self.re_only if rx.search(line) is not None)
        return ids


def _re_bytes(expression: str, caseless: bool) -> re.Pattern[bytes]:
    return re.compile(expression.encode(), re.MULTILINE | (re.IGNORECASE if caseless else 0))


def _hs_line_ends(
    db, scratch, data: _Bytes, start: int, end: int, found: dict[int, list], verify: frozenset[int]
) -> None:
    """Record every line of data[start:end] in which a match of `db` ends, with the ids reported there.

    A line on which an id of `verify` is reported is marked for the exact line rescan.
    """
    find, rfind = data.find, data.rfind
    view = memoryview(data)
    cur: list = [-1, -1, -1, set(), False]  # line start, line end, anchor, ids, needs rescan
    cur_start = cur_end = -1
    reports = 0
    base = start

    def on_match(pid: int, _frm: int, to: int, _flags: int, _ctx: object) -> bool:
        nonlocal cur, cur_start, cur_end, reports
        at = base + to - 1  # the match's last byte
        if cur_start <= at <= cur_end:
            cur[3].add(pid)
            if pid in verify:
                cur[4] = True
            reports += 1
            return reports > MAX_REPORTS_PER_LINE
        nl = find(b"\n", at, end)
        cur_end = end if nl < 0 else nl
        cur_start = (rfind(b"\n", start, at) + 1) or start
        reports = 0
        seen = found.get(cur_start)
        if seen is None:
            cur = found[cur_start] = [cur_start, cur_end, at, {pid}, pid in verify]
        else:  # reported out of order: same line again
            cur = seen
            cur[3].add(pid)
            cur[4] = cur[4] or pid in verify
        return False

    with view:
        while base < end:
            try:
                db.scan(view[base:end], match_event_handler=on_match, scratch=scratch)
                return
            except _hs.ScanTerminated:
                # a line with too many matches: its ids come from the line rescan; go on after it
                cur[4] = True
                base = cur_end + 1


def _re_line_ends(pid: int, rx: re.Pattern[bytes], data: _Bytes, start: int, end: int, found: dict[int, list]) -> None:
    """Candidate lines for one Python pattern: the line each leftmost match starts in.

    A greedy match may run on into later lines, so the line it starts in is the
    candidate (checked on its own later), and the search goes on from the next line.
    """
    pos = start
    while pos < end:
        m = rx.search(data, pos, end)
        if m is None:
            return
        at = m.start()
        nl = data.find(b"\n", at, end)
        le = end if nl < 0 else nl
        ls = (data.rfind(b"\n", start, at) + 1) or start
        entry = found.get(ls)
        if entry is None:
            found[ls] = [ls, le, max(at, m.end() - 1) if m.end() - 1 <= le else at, set(), True]
        else:
            entry[4] = True  # the line rescan runs the re patterns on this line
        pos = le + 1


# --------------------------------------------------------------------------- accumulating one scan


class _Acc:
    """What one scan has found so far; bounded per pattern."""

    def __init__(self, n_patterns: int, hits_per_pattern: int | None) -> None:
        self.keep_first = None if hits_per_pattern is None else max(1, hits_per_pattern // 8)
        self.keep_last = None if hits_per_pattern is None else max(1, hits_per_pattern - (self.keep_first or 0))
        self.first: list[Hit] = []
        self.first_count = [0] * n_patterns
        # the newest hits per pattern as (line no, line bytes, offset): most are pushed out again,
        # so they become Hit objects only when the scan ends
        # (by pattern index, made on a pattern's first overflow: most scans are of a few lines with no hit)
        self.recent: dict[int, deque[tuple[int, bytes, int]]] = {}
        self.counts = [0] * n_patterns
        self.flagged = 0
        self.last_flagged: tuple[int, set[int]] = (-1, set())  # line no, ids counted on it
        self.dropped = 0
        self.progress: list[ProgressSample] = []
        self.checkpoints: list[ProgressSample] = []

    def result(self, pattern_ids: list[str], *, lines: int, nbytes: int) -> ScreenResult:
        hits = self.first + [
            Hit.model_construct(pattern_id=pattern_ids[i], line_no=no, line=_text(raw), offset=offset)
            for i, ring in sorted(self.recent.items()) for no, raw, offset in ring
        ]
        if len(hits) > 1:
            order = {pid: i for i, pid in enumerate(pattern_ids)}
            hits.sort(key=lambda h: (h.line_no, order[h.pattern_id or ""]))
        return ScreenResult(
            hits=hits,
            progress=self.progress,
            checkpoints=self.checkpoints,
            lines=lines,
            bytes=nbytes,
            flagged_lines=self.flagged,
            pattern_counts={pattern_ids[i]: c for i, c in enumerate(self.counts) if c} if any(self.counts) else {},
            hits_dropped=self.dropped,
        )


# --------------------------------------------------------------------------- the screener


def default_workers() -> int:
    """Threads a large scan spreads its chunks over: the cores this process may run on, at most 4."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores))


class Screener:
    """Screens log bytes against a pattern catalogue and extracts progress.

    Args:
        patterns: objects with `.id` and `.regex` (catalogue `PatternSpec`s); a
            true `.caseless` makes one match case-insensitively.
        engine: "hyperscan" (default when importable) or "re" (the slow
            fallback, for architectures without hyperscan and for tests).
        hits_per_pattern: Hit objects kept per pattern and scan (the first
            eighth and the newest rest); None keeps all. Counts are always exact.
        workers: threads that scan the chunks of one large input side by side
            (hyperscan releases the GIL); 1 keeps every scan on the caller's
            thread. Default: the usable cores, at most 4.
        parallel_min_bytes: inputs smaller than this are scanned on the
            caller's thread (starting threads does not pay for them).
    """

    def __init__(
        self,
        patterns: Sequence[ScreenPattern],
        *,
        engine: str | None = None,
        hits_per_pattern: int | None = HITS_PER_PATTERN,
        workers: int | None = None,
        parallel_min_bytes: int = PARALLEL_MIN_BYTES,
    ) -> None:
        if engine is None:
            engine = "hyperscan" if _hs is not None else "re"
        if engine not in {"hyperscan", "re"}:
            raise ValueError(f"unknown screening engine {engine!r}; use 'hyperscan' or 're'")
        if engine == "hyperscan" and _hs is None:
            raise RuntimeError(
                "hyperscan is not installed for this Python; install it (pip install hyperscan) "
                "or use engine='re' (much slower)"
            )
        if engine == "re":
            logger.warning(
                "log screening runs on Python re, not hyperscan: expect a few MB/s instead of "
                "hundreds; install hyperscan (x86_64/aarch64 wheels) to screen faster than grep"
            )
        self.engine = engine
        self.hits_per_pattern = hits_per_pattern
        # Python re holds the GIL, so threads only pay when hyperscan does the scanning
        self.workers = 1 if engine == "re" else max(1, default_workers() if workers is None else workers)
        self.parallel_min_bytes = parallel_min_bytes
        self.pattern_ids: list[str] = [p.id for p in patterns]
        if len(set(self.pattern_ids)) != len(self.pattern_ids):
            raise ValueError("pattern ids must be unique")
        self._n = len(self.pattern_ids)
        expressions = [p.regex for p in patterns] + list(CHECKPOINT_MARKERS)
        caseless = [_caseless(p) for p in patterns] + [True] * len(CHECKPOINT_MARKERS)
        self._main = _Compiled(expressions, caseless, engine=engine)
        self._markers = _Compiled(list(PROGRESS_MARKERS), [True] * len(PROGRESS_MARKERS), engine=engine)
        self._lock = threading.Lock()
        self._scratches: queue.SimpleQueue[tuple] = queue.SimpleQueue()  # one set per thread in a scan
        if self._main.re_only and engine == "hyperscan":
            logger.info("screen patterns on Python re (hyperscan refused them): {}", self.fallback_pattern_ids)

    @property
    def fallback_pattern_ids(self) -> list[str]:
        """Catalogue patterns that run on Python `re` (hyperscan refused them, or no hyperscan)."""
        return [self.pattern_ids[i] for i, _ in self._main.re_only if i < self._n]

    # ----------------------------------------------------------------- public API

    def scan_bytes(
        self,
        data: _Bytes,
        *,
        first_line_no: int = 1,
        progress: str = "newest",
        chunk_bytes: int = CHUNK_BYTES,
    ) -> ScreenResult:
        """Screen `data` (whole lines; a last line without a newline counts as a line).

        Args:
            first_line_no: line number of the first line of `data`.
            progress: "newest" keeps the newest progress line of each chunk,
                "all" parses every progress line (slower), "none" skips progress.
            chunk_bytes: size of the blocks `data` is screened in.
        """
        _check_progress_mode(progress)
        acc = _Acc(self._n, self.hits_per_pattern)
        with self._lock, self._pipeline(acc, progress, chunk_bytes, first_line_no, len(data)) as pipe:
            pipe.add(data, 0, len(data))
            pipe.drain()
            newlines = pipe.line_no - first_line_no
        lines = newlines + (1 if data and not data.endswith(b"\n") else 0)
        return acc.result(self.pattern_ids, lines=lines, nbytes=len(data))

    def scan_lines(self, lines: Sequence[str], *, first_line_no: int = 1) -> list[Hit]:
        """Screen lines already in memory; every hit is kept and carries the original line text."""
        encoded = "\n".join(line.replace("\n", " ") for line in lines).encode("utf-8", "surrogateescape")
        acc = _Acc(self._n, None)
        with self._lock, self._pipeline(acc, "none", CHUNK_BYTES, first_line_no, 0) as pipe:
            pipe.add(encoded + b"\n", 0, len(encoded) + 1)
        hits = acc.result(self.pattern_ids, lines=len(lines), nbytes=len(encoded)).hits
        for hit in hits:
            if hit.line_no is None:
                continue  # every hit of a scan is numbered
            original = lines[hit.line_no - first_line_no]
            if len(original) <= MAX_LINE_TEXT:
                hit.line = _clean(original)
        return hits

    def scan_file(
        self,
        path: str | Path,
        *,
        offset: int = 0,
        first_line_no: int = 1,
        chunk_bytes: int = CHUNK_BYTES,
        max_line_bytes: int = 4 * CHUNK_BYTES,
        progress: str = "newest",
        complete_lines_only: bool = False,
    ) -> ScreenResult:
        """Screen a file from byte `offset` to its end with bounded memory (see scan_stream)."""
        with open(path, "rb") as f:
            f.seek(offset)
            return self.scan_stream(
                f, first_line_no=first_line_no, chunk_bytes=chunk_bytes,
                max_line_bytes=max_line_bytes, progress=progress, complete_lines_only=complete_lines_only,
                size_hint=max(0, os.fstat(f.fileno()).st_size - offset),
            )

    def scan_stream(
        self,
        stream: BinaryIO,
        *,
        first_line_no: int = 1,
        chunk_bytes: int = CHUNK_BYTES,
        max_line_bytes: int = 4 * CHUNK_BYTES,
        progress: str = "newest",
        complete_lines_only: bool = False,
        size_hint: int | None = None,
    ) -> ScreenResult:
        """Screen a binary stream to its end, holding at most about `max_line_bytes + chunk_bytes`.

        A line longer than `max_line_bytes` is screened in pieces that overlap by
        64 KiB (a match longer than that, straddling two pieces, is missed, and a
        `^`-anchored pattern may match at the start of a later piece); it still
        counts as one line.

        With `complete_lines_only` (tailing a log that is still being written) a
        last line without a newline is left alone: `result.bytes` then counts the
        bytes up to the last newline, where the next read should start.

        A stream of at least `parallel_min_bytes` (known from `size_hint`, or
        once that much has been read) is screened on worker threads, chunks
        merged in order; that holds up to `2 * workers + 2` chunk buffers.
        Lines longer than two chunks are screened on the caller's thread.
        """
        _check_progress_mode(progress)
        acc = _Acc(self._n, self.hits_per_pattern)
        with self._lock, self._pipeline(acc, progress, chunk_bytes, first_line_no, size_hint or 0) as pipe:
            nbytes = _feed_stream(
                pipe, stream, chunk_bytes=chunk_bytes, max_line_bytes=max_line_bytes,
                complete_lines_only=complete_lines_only, parallel_after=self.parallel_min_bytes,
            )
            pipe.drain()
            lines = pipe.line_no - first_line_no
        return acc.result(self.pattern_ids, lines=lines, nbytes=nbytes)

    # ----------------------------------------------------------------- internals

    def _pipeline(self, acc: _Acc, progress: str, chunk_bytes: int, first_line_no: int, size: int) -> _Pipeline:
        parallel = self.workers > 1 and size >= self.parallel_min_bytes
        return _Pipeline(self, acc, progress=progress, chunk_bytes=chunk_bytes,
                         first_line_no=first_line_no, parallel=parallel)

    def _take_scratch(self) -> tuple:
        try:
            return self._scratches.get_nowait()
        except queue.Empty:
            return (self._main.new_scratch(), self._markers.new_scratch())

    def _find_pooled(self, data: _Bytes, start: int, end: int, progress: str) -> _Found:
        scratch = self._take_scratch()
        try:
            return self._find(data, start, end, progress, scratch)
        finally:
            self._scratches.put(scratch)

    def _find(self, data: _Bytes, start: int, end: int, progress: str, scratch: tuple) -> _Found:
        """What the chunk data[start:end] holds; line numbers count newlines from its start.

        Runs on any thread that owns `scratch`; touches nothing of the scan's state.
        """
        main, markers = scratch
        n = self._n
        candidates = self._main.candidate_lines(data, start, end, main)
        flagged: list[tuple] = []
        rel = 0
        counted_to = start
        for ls in sorted(candidates):
            _, le, anchor, ids, rescan = candidates[ls]
            if rescan:
                ids = self._main.line_ids(data, ls, le, main)
                if not ids:
                    continue  # the match spanned lines; grep would not flag this line
            rel += data.count(b"\n", counted_to, ls)
            counted_to = ls
            ordered = sorted(ids)
            checkpoint = parse_checkpoint_line(_tail_text(data, ls, le)) if ordered[-1] >= n else None
            flagged.append((rel, ls, le, anchor, ordered, checkpoint))
        newlines = rel + data.count(b"\n", counted_to, end)
        samples: list[ProgressSample] = []
        if progress == "newest":
            sample = self._newest_progress(data, start, end, newlines, markers)
            if sample is not None:
                samples.append(sample)
        elif progress == "all":
            samples = self._all_progress(data, start, end, markers)
        return _Found(newlines, flagged, samples)

    def _merge(self, found: _Found, data: _Bytes, first_line_no: int, acc: _Acc, base: int) -> int:
        """Add one chunk's findings to the scan, in chunk order; returns the chunk's newlines.

        `base` is the offset in the scanned input of `data[0]` (a stream's buffer holds a window).
        """
        n = self._n
        keep_first, keep_last = acc.keep_first, acc.keep_last
        chunk_recent: dict[int, deque] = {}
        for rel, ls, le, anchor, ids, checkpoint in found.flagged:
            line_no = first_line_no + rel
            last_no, last_ids = acc.last_flagged
            if line_no == last_no:  # the next piece of a very long line
                ids = [i for i in ids if i not in last_ids]
                last_ids.update(ids)
            else:
                acc.last_flagged = (line_no, set(ids))
                if ids[0] < n:
                    acc.flagged += 1
            if checkpoint is not None and ids and ids[-1] >= n:
                checkpoint.line_no = line_no
                acc.checkpoints.append(checkpoint)
            for i in ids:
                if i >= n:
                    break  # ids are sorted: the rest are checkpoint markers
                acc.counts[i] += 1
                if keep_first is None or acc.first_count[i] < keep_first:
                    acc.first_count[i] += 1
                    acc.first.append(self._hit(i, line_no, data, ls, le, anchor, base))
                    continue
                ring = chunk_recent.get(i)
                if ring is None:
                    ring = chunk_recent[i] = deque(maxlen=keep_last)
                if len(ring) == keep_last:
                    acc.dropped += 1
                ring.append((line_no, ls, le, anchor))
        for i, ring in chunk_recent.items():
            target = acc.recent.get(i)
            if target is None:
                target = acc.recent[i] = deque(maxlen=acc.keep_last)
            acc.dropped += max(0, len(target) + len(ring) - (target.maxlen or 0))
            target.extend((no, _line_bytes(data, ls, le, anchor), base + ls) for no, ls, le, anchor in ring)
        for sample in found.progress:
            sample.line_no = first_line_no + (sample.line_no or 0)
            acc.progress.append(sample)
        return found.newlines

    def _hit(self, i: int, line_no: int, data: _Bytes, ls: int, le: int, anchor: int, base: int) -> Hit:
        return Hit.model_construct(
            pattern_id=self.pattern_ids[i], line_no=line_no, line=_text(_line_bytes(data, ls, le, anchor)),
            offset=base + ls,
        )

    def _newest_progress(
        self, data: _Bytes, start: int, end: int, newlines: int, scratch: tuple
    ) -> ProgressSample | None:
        """Parse marker lines from the end of the chunk backwards, in growing windows.

        `newlines` is the chunk's number of newlines; the sample's `line_no` is
        the number of newlines before its line.
        """
        hi = end
        window = _FIRST_WINDOW
        tries = 0
        while hi > start:
            lo = max(start, hi - window)
            if lo > start:
                nl = data.find(b"\n", lo, hi)
                lo = ((data.rfind(b"\n", start, lo) + 1) or start) if nl < 0 else nl + 1
            found = self._markers.candidate_lines(data, lo, hi, scratch)
            for ls in sorted(found, reverse=True):
                le = found[ls][1]
                if le - ls > MAX_PROGRESS_LINE:
                    continue
                tries += 1
                sample = parse_progress_line(_tail_text(data, ls, le))
                if sample is not None:
                    sample.line_no = newlines - data.count(b"\n", ls, end)
                    return sample
                if tries >= _MAX_PARSE_TRIES:
                    return None
            hi = lo
            window *= 4
        return None

    def _all_progress(self, data: _Bytes, start: int, end: int, scratch: tuple) -> list[ProgressSample]:
        found = self._markers.candidate_lines(data, start, end, scratch)
        out: list[ProgressSample] = []
        rel = 0
        counted_to = start
        for ls in sorted(found):
            le = found[ls][1]
            rel += data.count(b"\n", counted_to, ls)
            counted_to = ls
            if le - ls > MAX_PROGRESS_LINE:
                continue
            sample = parse_progress_line(_tail_text(data, ls, le), line_no=rel)
            if sample is not None:
                out.append(sample)
        return out


# --------------------------------------------------------------------------- chunks, in order, on threads


class _Found:
    """One chunk's findings: newlines, flagged lines (newlines before, start, end, anchor, ids, checkpoint), progress."""

    __slots__ = ("newlines", "flagged", "progress")

    def __init__(self, newlines: int, flagged: list[tuple], progress: list[ProgressSample]) -> None:
        self.newlines = newlines
        self.flagged = flagged
        self.progress = progress


def _chunk_cuts(data: _Bytes, start: int, end: int, chunk_bytes: int) -> Iterator[tuple[int, int]]:
    """data[start:end] as chunks of at most `chunk_bytes` cut after a newline (a longer line is one chunk)."""
    pos = start
    while pos < end:
        if pos + chunk_bytes >= end:
            cut = end
        else:
            cut = data.rfind(b"\n", pos, pos + chunk_bytes) + 1
            if cut <= pos:  # a line longer than a chunk: take all of it
                nl = data.find(b"\n", pos + chunk_bytes, end)
                cut = end if nl < 0 else nl + 1
        yield pos, cut
        pos = cut


class _Pipeline:
    """The chunks of one scan: found on worker threads where that pays, merged on the caller's in order.

    Merging in order keeps every figure exactly what one thread would compute
    (line numbers, the bounded hit rings, the newest progress of each chunk).
    """

    def __init__(
        self, screener: Screener, acc: _Acc, *, progress: str, chunk_bytes: int, first_line_no: int, parallel: bool
    ) -> None:
        self.screener = screener
        self.acc = acc
        self.progress = progress
        self.chunk_bytes = chunk_bytes
        self.line_no = first_line_no  # of the first line not merged yet
        self.parallel = parallel
        self._pending: deque[tuple[Future[_Found], _Bytes, int, Callable[[], None] | None]] = deque()
        self._executor: ThreadPoolExecutor | None = None
        self._scratch: tuple | None = None

    def __enter__(self) -> _Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)  # no thread still reads a buffer
        if self._scratch is not None:
            self.screener._scratches.put(self._scratch)

    def add(self, data: _Bytes, start: int, end: int, *, base: int = 0, release: Callable[[], None] | None = None,
            inline: bool = False) -> None:
        """Screen data[start:end] (whole lines) of which `data[0]` is at offset `base` of the input.

        `release` is called once nothing reads `data` any more.
        """
        if inline or not self.parallel:
            self.drain()
            if self._scratch is None:
                self._scratch = self.screener._take_scratch()
            for lo, hi in _chunk_cuts(data, start, end, self.chunk_bytes):
                found = self.screener._find(data, lo, hi, self.progress, self._scratch)
                self.line_no += self.screener._merge(found, data, self.line_no, self.acc, base)
            if release is not None:
                release()
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.screener.workers, thread_name_prefix="screen")
        cuts = list(_chunk_cuts(data, start, end, self.chunk_bytes))
        if not cuts and release is not None:
            release()
        depth = 2 * self.screener.workers  # in flight: enough that no worker waits for the merge
        for k, (lo, hi) in enumerate(cuts):
            future = self._executor.submit(self.screener._find_pooled, data, lo, hi, self.progress)
            self._pending.append((future, data, base, release if k == len(cuts) - 1 else None))
            while len(self._pending) > depth:
                self._merge_next()

    def drain(self) -> None:
        while self._pending:
            self._merge_next()

    def _merge_next(self) -> None:
        future, data, base, release = self._pending.popleft()
        self.line_no += self.screener._merge(future.result(), data, self.line_no, self.acc, base)
        if release is not None:
            release()


def _feed_stream(
    pipe: _Pipeline, stream: BinaryIO, *, chunk_bytes: int, max_line_bytes: int,
    complete_lines_only: bool, parallel_after: int,
) -> int:
    """Read `stream` to its end into `pipe`, whole lines at a time; returns the bytes screened."""
    overlap = 65536
    nbytes = 0
    free: list[bytearray] = []  # buffers no chunk in flight reads any more

    def releaser(buf: bytearray) -> Callable[[], None]:
        # a buffer grown for a long line is not kept for reuse: memory stays about a chunk per buffer
        return lambda: free.append(buf) if len(buf) <= 2 * chunk_bytes else None

    # the unfinished last line stays at a buffer's front, the next read lands after it
    buf = bytearray(chunk_bytes)
    filled = 0
    while True:
        # top a short carried-over line up to one chunk (one scan, not a chunk and a sliver);
        # a long one gets a whole chunk more
        want = chunk_bytes - filled if filled < chunk_bytes // 2 else chunk_bytes
        if len(buf) < filled + want:
            buf.extend(bytes(filled + want - len(buf)))
        with memoryview(buf) as view:
            # every binary stream we are given has readinto (files, BytesIO, sys.stdin.buffer); BinaryIO does not say so
            got = cast(io.BufferedIOBase, stream).readinto(view[filled:filled + want]) or 0
        nbytes += got
        total = filled + got
        if got == 0:
            if complete_lines_only:
                nbytes -= total  # the unfinished line is read again next time
            elif total:  # a last line without a newline
                pipe.add(buf, 0, total, base=nbytes - total, inline=True)
                pipe.line_no += 1
            return nbytes
        cut = buf.rfind(b"\n", 0, total) + 1
        if cut == 0:
            if total < max_line_bytes:
                filled = total
                continue
            # one line longer than we are willing to hold: screen this piece of it
            pipe.add(buf, 0, total, base=nbytes - total, inline=True)
            buf[:overlap] = buf[total - overlap:total]
            filled = overlap
            continue
        if nbytes >= parallel_after and pipe.screener.workers > 1:
            pipe.parallel = True
        if not pipe.parallel or cut > 2 * chunk_bytes:
            pipe.add(buf, 0, cut, base=nbytes - total, inline=True)
            buf[:total - cut] = buf[cut:total]
            filled = total - cut
            continue
        nxt = free.pop() if free else bytearray(chunk_bytes)
        if len(nxt) < total - cut:
            nxt.extend(bytes(total - cut - len(nxt)))
        nxt[:total - cut] = buf[cut:total]
        pipe.add(buf, 0, cut, base=nbytes - total, release=releaser(buf))
        buf, filled = nxt, total - cut


# --------------------------------------------------------------------------- helpers


def _check_progress_mode(progress: str) -> None:
    if progress not in {"newest", "all", "none"}:
        raise ValueError(f"progress must be 'newest', 'all' or 'none', not {progress!r}")


def _caseless(pattern: object) -> bool:
    return bool(getattr(pattern, "caseless", False) or getattr(pattern, "ignore_case", False))


def _clean(text: str) -> str:
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return text.replace("\x00", "").rstrip("\r")


def _line_bytes(data: _Bytes, ls: int, le: int, anchor: int) -> bytes:
    """The hit's line, or for a very long line a window around the match's end."""
    if le - ls > MAX_LINE_TEXT:
        lo = max(ls, min(anchor - MAX_LINE_TEXT * 3 // 4, le - MAX_LINE_TEXT))
        ls, le = lo, min(le, lo + MAX_LINE_TEXT)
    return bytes(data[ls:le])  # a reused buffer's slice is a bytearray; bytes of bytes is the same object


def _text(raw: bytes) -> str:
    return _clean(raw.decode("utf-8", "replace"))


def _tail_text(data: _Bytes, ls: int, le: int) -> str:
    """The end of a line (progress and checkpoint facts sit in the last `\\r` segment)."""
    return _clean(data[max(ls, le - MAX_LINE_TEXT):le].decode("utf-8", "replace"))


# --------------------------------------------------------------------------- grep compatibility

_CLASS_SHORTHAND = {
    "d": "0-9",
    "s": "[:space:]",
    "w": "_[:alnum:]",
}
_SHORTHAND = {
    "d": "[0-9]",
    "D": "[^0-9]",
    "s": "[[:space:]]",
    "S": "[^[:space:]]",
    "w": "[_[:alnum:]]",
    "W": "[^_[:alnum:]]",
}
_ESCAPE_CHARS = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "v": "\v", "a": "\a", "e": "\x1b"}
_QUANT_BRACE = re.compile(r"\{[0-9]+(,[0-9]*)?\}")


def to_grep_ere(regex: str, *, caseless: bool = False) -> str | None:
    """Translate a Python regular expression into GNU `grep -E` syntax (C locale).

    For comparing the screener with grep on the same pattern set. Returns None
    for constructs ERE lacks (look-arounds, atomic groups, conditionals). Lazy
    quantifiers become greedy: whether a line matches does not change.
    """
    if regex.startswith("(?i)"):
        caseless, regex = True, regex[4:]
    out: list[str] = []
    i, n = 0, len(regex)

    def lit(ch: str) -> str:
        if caseless and ch.isalpha() and ch.isascii():
            return f"[{ch.lower()}{ch.upper()}]"
        if ch in ".[]()*+?{}|^$\\":
            return "\\" + ch
        return ch

    while i < n:
        c = regex[i]
        if c == "\\":
            if i + 1 >= n:
                return None
            e = regex[i + 1]
            i += 2
            if e in _SHORTHAND:
                out.append(_SHORTHAND[e])
            elif e in "bB<>":
                out.append("\\" + e)
            elif e.isdigit():
                out.append("\\" + e)  # back-reference, GNU ERE has them
            elif e in _ESCAPE_CHARS:
                out.append(lit(_ESCAPE_CHARS[e]))
            elif e == "x" and i + 2 <= n:
                out.append(lit(chr(int(regex[i:i + 2], 16))))
                i += 2
            elif e in "AZz":
                out.append("^" if e == "A" else "$")
            elif e.isalnum():
                return None  # \p, \N and friends
            else:
                out.append(lit(e))
        elif c == "[":
            j, cls = _translate_class(regex, i, caseless)
            if cls is None:
                return None
            out.append(cls)
            i = j
        elif c == "(":
            if regex.startswith("(?:", i):
                out.append("(")
                i += 3
            elif regex.startswith("(?P<", i):
                close = regex.find(">", i)
                if close < 0:
                    return None
                out.append("(")
                i = close + 1
            elif regex.startswith("(?", i):
                return None  # look-around, inline flags mid-pattern, comments, conditionals
            else:
                out.append("(")
                i += 1
        elif c in "*+?":
            out.append(c)
            i += 1
            if i < n and regex[i] == "?":
                i += 1  # lazy -> greedy
            elif i < n and regex[i] == "+":
                return None  # possessive
        elif c == "{":
            m = _QUANT_BRACE.match(regex, i)
            if m is None:
                out.append("\\{")
                i += 1
            else:
                out.append(m.group(0))
                i = m.end()
                if i < n and regex[i] == "?":
                    i += 1
        elif c == "}":
            out.append("\\}")
            i += 1
        elif c in ".|)^$":
            out.append(c)
            i += 1
        else:
            out.append(lit(c))
            i += 1
    return "".join(out)


def _translate_class(regex: str, i: int, caseless: bool) -> tuple[int, str | None]:
    """Translate the bracket expression starting at regex[i] == '['."""
    j = i + 1
    negate = False
    if j < len(regex) and regex[j] == "^":
        negate, j = True, j + 1
    items: list[str] = []
    first = True
    while j < len(regex):
        c = regex[j]
        if c == "]" and not first:
            break
        first = False
        if c == "\\" and j + 1 < len(regex):
            e = regex[j + 1]
            j += 2
            if e in _CLASS_SHORTHAND:
                items.append(_CLASS_SHORTHAND[e])
                continue
            if e in "DSW":
                return j, None  # negated shorthand inside a class has no ERE spelling
            if e in _ESCAPE_CHARS:
                items.append(_ESCAPE_CHARS[e])
                continue
            if e == "x":
                items.append(chr(int(regex[j:j + 2], 16)))
                j += 2
                continue
            items.append("\\]" if e == "]" else ("\\-" if e == "-" else e))
            continue
        if c == "[" and regex.startswith("[:", j):
            close = regex.find(":]", j)
            if close < 0:
                return j, None
            items.append(regex[j:close + 2])
            j = close + 2
            continue
        items.append(c)
        j += 1
    if j >= len(regex):
        return j, None
    # rebuild for ERE: ']' first, '^' late, '-' last; backslash is literal there
    body: list[str] = []
    has_close = has_dash = has_caret = False
    k = 0
    while k < len(items):
        item = items[k]
        if item == "\\]":
            has_close = True
        elif item in ("\\-", "-"):
            has_dash = True  # a dash that did not form a range above is literal
        elif k + 2 < len(items) and items[k + 1] == "-" and len(item) == 1 and len(items[k + 2]) == 1:
            lo, hi = item, items[k + 2]
            body.append(f"{lo}-{hi}")
            if caseless and lo.isalpha() and hi.isalpha() and lo.isascii() and hi.isascii():
                body.append(f"{lo.swapcase()}-{hi.swapcase()}")
            k += 3
            continue
        elif item == "^":
            has_caret = True
        else:
            body.append(item)
            if caseless and len(item) == 1 and item.isalpha() and item.isascii():
                body.append(item.swapcase())
        k += 1
    body = [b for b in body if b != "\n"]  # a line never holds a newline
    text = "".join(body)
    if not text and not has_close and not has_caret and not has_dash:
        return j + 1, "." if negate else None
    if not text and not has_close and not negate and has_caret:
        return j + 1, "[-^]" if has_dash else "\\^"
    cls = "[" + ("^" if negate else "") + ("]" if has_close else "") + text
    cls += ("^" if has_caret else "") + ("-" if has_dash else "") + "]"
    return j + 1, cls


def export_grep_patterns(patterns: Iterable[ScreenPattern]) -> tuple[list[str], list[str]]:
    """(ERE lines for `grep -E -f`, ids of patterns that have no ERE translation)."""
    lines: list[str] = []
    skipped: list[str] = []
    for p in patterns:
        ere = to_grep_ere(p.regex, caseless=_caseless(p))
        if ere is None or "\n" in ere:
            skipped.append(p.id)
        else:
            lines.append(ere)
    return lines, skipped
