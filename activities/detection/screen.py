"""The fast first pass over log bytes: which lines match a pattern, and where training stands.

One hyperscan database holds every screen expression of the catalogue plus the
checkpoint-save markers. A chunk of log bytes (whole lines, 4 MiB by default)
is scanned once, in block mode, with `^`/`$` meaning line start/end. A match
only says where a candidate line ends; that line (and only that line) is then
found by searching for the newline bytes around the match and rescanned on its
own with a second database compiled with HS_FLAG_SINGLEMATCH, which gives the
exact set of patterns that match the line as `grep` would see it (a match that
spans two lines through `\\s` or `[^x]` is dropped there). Lines are never split
into Python strings except the few that match.

Progress is not screened line by line: the newest progress line of each chunk
is found by scanning backwards from the end of the chunk in growing windows
with a small marker database, then parsed (`progress.py`).

Patterns hyperscan cannot compile (back-references, look-arounds) are run with
Python's `re` as bytes patterns in a separate pass over the chunk, one search
per matching line. Without hyperscan (an architecture without wheels) every
pattern takes that path; it is correct but far slower, and the screener says so
loudly once.

A Screener is not safe to share between threads that scan at the same time
(hyperscan scratch space is per database); a lock serialises scans.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO, Protocol

from loguru import logger
from pydantic import Field

from activities.detection.progress import (
    CHECKPOINT_MARKERS,
    PROGRESS_MARKERS,
    ProgressSample,
    parse_checkpoint_line,
    parse_progress_line,
)
from workflows.contracts import Contract

try:  # hyperscan ships wheels for x86_64 and aarch64 Linux only
    import hyperscan as _hs
except ImportError:  # pragma: no cover - exercised on other architectures
    _hs = None

CHUNK_BYTES = 4 << 20
MAX_LINE_TEXT = 8192  # characters of a hit's line kept (a window around the match)
MAX_PROGRESS_LINE = 65536  # a longer "line" is not a progress line
# a line that reports more matches than this stops the chunk scan and resumes after it;
# it bounds the Python callbacks a pathological line (1 MB of near-matches) can cost
MAX_REPORTS_PER_LINE = 256
_FIRST_WINDOW = 16384
_MAX_PARSE_TRIES = 64
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


class ScreenPattern(Protocol):
    """What the screener needs of a catalogue pattern."""

    @property
    def id(self) -> str: ...

    @property
    def regex(self) -> str: ...


class Hit(Contract):
    """One line that matched one pattern."""

    pattern_id: str
    line_no: int
    line: str  # decoded, ANSI codes removed; a window around the match when the line is very long
    offset: int | None = None  # byte offset of the line's start in the scanned data


class ScreenResult(Contract):
    hits: list[Hit] = Field(default_factory=list)  # in line order
    progress: list[ProgressSample] = Field(default_factory=list)  # newest of each chunk, oldest first
    checkpoints: list[ProgressSample] = Field(default_factory=list)  # every checkpoint save seen
    lines: int = 0
    bytes: int = 0

    @property
    def newest_progress(self) -> ProgressSample | None:
        return self.progress[-1] if self.progress else None

    @property
    def flagged_lines(self) -> int:
        return len({h.line_no for h in self.hits})


# --------------------------------------------------------------------------- engines


class _HsDb:
    """One compiled hyperscan database with its own scratch space."""

    def __init__(self, expressions: list[bytes], ids: list[int], flags: list[int]) -> None:
        self.db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
        self.db.compile(expressions=expressions, ids=ids, elements=len(expressions), flags=flags)


def _hs_compiles(expression: bytes, flags: int) -> str | None:
    """None when hyperscan accepts `expression`, else its error message."""
    db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
    try:
        db.compile(expressions=[expression], ids=[0], elements=1, flags=[flags])
    except _hs.error as exc:
        return str(exc)
    return None


class _Compiled:
    """The screen expressions split between hyperscan and Python `re`."""

    def __init__(self, expressions: list[str], caseless: list[bool], *, engine: str) -> None:
        self.re_only: list[tuple[int, re.Pattern[bytes]]] = []
        self.chunk_db: _HsDb | None = None
        self.line_db: _HsDb | None = None
        if engine == "re":
            for i, (expr, ci) in enumerate(zip(expressions, caseless)):
                self.re_only.append((i, re.compile(expr.encode(), re.MULTILINE | (re.IGNORECASE if ci else 0))))
            return
        hs_ids: list[int] = []
        hs_exprs: list[bytes] = []
        hs_flags: list[int] = []
        base = _hs.HS_FLAG_MULTILINE
        for i, (expr, ci) in enumerate(zip(expressions, caseless)):
            raw = expr.encode()
            flags = base | (_hs.HS_FLAG_CASELESS if ci else 0)
            hs_ids.append(i)
            hs_exprs.append(raw)
            hs_flags.append(flags)
        try:
            self._build(hs_exprs, hs_ids, hs_flags)
        except _hs.error:
            # find the expressions hyperscan refuses and give them to `re`
            keep = [k for k in range(len(hs_ids)) if _hs_compiles(hs_exprs[k], hs_flags[k]) is None]
            refused = sorted(set(range(len(hs_ids))) - set(keep))
            for k in refused:
                i = hs_ids[k]
                self.re_only.append(
                    (i, re.compile(expressions[i].encode(), re.MULTILINE | (re.IGNORECASE if caseless[i] else 0)))
                )
            hs_exprs = [hs_exprs[k] for k in keep]
            hs_ids = [hs_ids[k] for k in keep]
            hs_flags = [hs_flags[k] for k in keep]
            if hs_exprs:
                self._build(hs_exprs, hs_ids, hs_flags)

    def _build(self, exprs: list[bytes], ids: list[int], flags: list[int]) -> None:
        self.chunk_db = _HsDb(exprs, ids, flags)
        self.line_db = _HsDb(exprs, ids, [f | _hs.HS_FLAG_SINGLEMATCH for f in flags])

    # ----------------------------------------------------------------- candidate lines

    def candidate_lines(self, data: bytes, start: int, end: int) -> dict[int, tuple[int, int]]:
        """Line start -> (line end, offset of a match's last byte) for lines some match ends in."""
        found: dict[int, tuple[int, int]] = {}
        if self.chunk_db is not None:
            _hs_line_ends(self.chunk_db, data, start, end, found)
        for _, rx in self.re_only:
            _re_line_ends(rx, data, start, end, found)
        return found

    def line_ids(self, data: bytes, ls: int, le: int) -> list[int]:
        """Ids of the expressions that match the line data[ls:le] on its own (grep's view)."""
        ids: list[int] = []
        if self.line_db is not None and le > ls:
            def on_match(pid: int, _frm: int, _to: int, _flags: int, _ctx: object) -> None:
                ids.append(pid)

            self.line_db.db.scan(memoryview(data)[ls:le], match_event_handler=on_match)
        if self.re_only:
            line = data[ls:le]
            ids.extend(i for i, rx in self.re_only if rx.search(line) is not None)
        return sorted(set(ids))


def _hs_line_ends(db: _HsDb, data: bytes, start: int, end: int, found: dict[int, tuple[int, int]]) -> None:
    """Record every line of data[start:end] in which a match of `db` ends."""
    find, rfind = data.find, data.rfind
    view = memoryview(data)
    cur_start = cur_end = -1
    reports = 0
    base = start

    def on_match(_pid: int, _frm: int, to: int, _flags: int, _ctx: object) -> bool:
        nonlocal cur_start, cur_end, reports
        at = base + to - 1  # the match's last byte
        if cur_start <= at <= cur_end:
            reports += 1
            return reports > MAX_REPORTS_PER_LINE
        nl = find(b"\n", at, end)
        cur_end = end if nl < 0 else nl
        cur_start = rfind(b"\n", start, at) + 1
        reports = 0
        found.setdefault(cur_start, (cur_end, at))
        return False

    while base < end:
        try:
            db.db.scan(view[base:end], match_event_handler=on_match)
            return
        except _hs.ScanTerminated:
            # a line with too many matches: its ids come from the line rescan; go on after it
            base = cur_end + 1


def _re_line_ends(rx: re.Pattern[bytes], data: bytes, start: int, end: int, found: dict[int, tuple[int, int]]) -> None:
    pos = start
    while pos < end:
        m = rx.search(data, pos, end)
        if m is None:
            return
        at = max(m.end() - 1, m.start())
        nl = data.find(b"\n", at, end)
        le = end if nl < 0 else nl
        ls = data.rfind(b"\n", start, at) + 1
        found.setdefault(ls, (le, at))
        pos = le + 1


# --------------------------------------------------------------------------- the screener


class Screener:
    """Screens log bytes against a pattern catalogue and extracts progress.

    Args:
        patterns: objects with `.id` and `.regex` (catalogue `PatternSpec`s). A
            pattern whose object has a true `caseless`/`ignore_case` attribute
            matches case-insensitively; inline `(?i)` works too.
        engine: "hyperscan" (default when importable) or "re" (the slow fallback;
            for tests and architectures without hyperscan).
    """

    def __init__(self, patterns: Sequence[ScreenPattern], *, engine: str | None = None) -> None:
        if engine is None:
            engine = "hyperscan" if _hs is not None else "re"
        if engine == "hyperscan" and _hs is None:
            raise RuntimeError(
                "hyperscan is not installed for this Python; install it (pip install hyperscan) "
                "or pass engine='re' (much slower)"
            )
        if engine not in {"hyperscan", "re"}:
            raise ValueError(f"unknown screening engine {engine!r}; use 'hyperscan' or 're'")
        if engine == "re":
            logger.warning(
                "log screening runs on Python re, not hyperscan: expect well under 10 MB/s per "
                "pattern set; install hyperscan (x86_64/aarch64 wheels) to screen at grep speed or better"
            )
        self.engine = engine
        self.pattern_ids: list[str] = [p.id for p in patterns]
        if len(set(self.pattern_ids)) != len(self.pattern_ids):
            raise ValueError("pattern ids must be unique")
        n = len(self.pattern_ids)
        expressions = [p.regex for p in patterns] + list(CHECKPOINT_MARKERS)
        caseless = [_caseless(p) for p in patterns] + [True] * len(CHECKPOINT_MARKERS)
        self._n_patterns = n
        self._main = _Compiled(expressions, caseless, engine=engine)
        self._markers = _Compiled(list(PROGRESS_MARKERS), [True] * len(PROGRESS_MARKERS), engine=engine)
        self._lock = threading.Lock()

    @property
    def fallback_pattern_ids(self) -> list[str]:
        """Catalogue patterns that run on Python `re` because hyperscan refused them."""
        return [self.pattern_ids[i] for i, _ in self._main.re_only if i < self._n_patterns]

    # ----------------------------------------------------------------- public API

    def scan_bytes(
        self,
        data: bytes,
        *,
        first_line_no: int = 1,
        progress: str = "newest",
        chunk_bytes: int = CHUNK_BYTES,
    ) -> ScreenResult:
        """Screen `data` (whole lines; a last line without newline counts as a line).

        Args:
            first_line_no: line number of the first line of `data`.
            progress: "newest" keeps the newest progress line of each chunk,
                "all" parses every progress line (slower), "none" skips progress.
            chunk_bytes: size of the blocks `data` is screened in.
        """
        result = ScreenResult(bytes=len(data))
        newlines = self._scan_region(data, 0, len(data), first_line_no, result, progress, chunk_bytes)
        result.lines = newlines + (1 if data and not data.endswith(b"\n") else 0)
        return result

    def scan_lines(self, lines: Sequence[str], *, first_line_no: int = 1) -> list[Hit]:
        """Screen lines already in memory; each hit carries the original line text."""
        encoded = "\n".join(line.replace("\n", " ") for line in lines).encode("utf-8", "surrogateescape")
        result = self.scan_bytes(encoded + b"\n", first_line_no=first_line_no, progress="none")
        for hit in result.hits:
            original = lines[hit.line_no - first_line_no]
            if len(original) <= MAX_LINE_TEXT:
                hit.line = _ANSI.sub("", original)
        return result.hits

    def scan_file(
        self,
        path: str | Path,
        *,
        offset: int = 0,
        first_line_no: int = 1,
        chunk_bytes: int = CHUNK_BYTES,
        max_line_bytes: int = 4 * CHUNK_BYTES,
        progress: str = "newest",
    ) -> ScreenResult:
        """Screen a file from byte `offset` to its end with bounded memory."""
        with open(path, "rb") as f:
            f.seek(offset)
            return self.scan_stream(
                f,
                first_line_no=first_line_no,
                chunk_bytes=chunk_bytes,
                max_line_bytes=max_line_bytes,
                progress=progress,
            )

    def scan_stream(
        self,
        stream: BinaryIO,
        *,
        first_line_no: int = 1,
        chunk_bytes: int = CHUNK_BYTES,
        max_line_bytes: int = 4 * CHUNK_BYTES,
        progress: str = "newest",
    ) -> ScreenResult:
        """Screen a binary stream to its end, holding at most about `max_line_bytes + chunk_bytes`.

        A line longer than `max_line_bytes` is screened in pieces that overlap by
        64 KiB, so a match longer than that which straddles two pieces is missed.
        """
        result = ScreenResult()
        line_no = first_line_no
        pending = b""
        overlap = 65536
        seen_long: set[tuple[str, int]] = set()
        while True:
            block = stream.read(chunk_bytes)
            result.bytes += len(block)
            data = pending + block if pending else block
            if not block:
                if data:
                    part = ScreenResult()
                    self._scan_region(data, 0, len(data), line_no, part, progress, chunk_bytes)
                    _merge(result, part, seen_long)
                    result.lines = line_no - first_line_no + 1
                else:
                    result.lines = line_no - first_line_no
                return result
            cut = data.rfind(b"\n") + 1
            if cut == 0 and len(data) < max_line_bytes:
                pending = data
                continue
            if cut == 0:
                # one line longer than we are willing to hold: screen this piece of it
                part = ScreenResult()
                self._scan_region(data, 0, len(data), line_no, part, progress, chunk_bytes)
                _merge(result, part, seen_long)
                pending = data[-overlap:]
                continue
            part = ScreenResult()
            line_no += self._scan_region(data, 0, cut, line_no, part, progress, chunk_bytes)
            _merge(result, part, seen_long)
            seen_long = {k for k in seen_long if k[1] >= line_no}
            pending = data[cut:]

    # ----------------------------------------------------------------- internals

    def _scan_region(
        self,
        data: bytes,
        start: int,
        end: int,
        first_line_no: int,
        result: ScreenResult,
        progress: str,
        chunk_bytes: int,
    ) -> int:
        """Screen data[start:end] chunk by chunk; returns the number of newlines in it."""
        newlines = 0
        pos = start
        with self._lock:
            while pos < end:
                cut = data.rfind(b"\n", pos, min(end, pos + chunk_bytes)) + 1
                if cut <= pos:  # a line longer than a chunk: take all of it
                    nl = data.find(b"\n", pos + chunk_bytes, end)
                    cut = end if nl < 0 else nl + 1
                if pos + chunk_bytes >= end:
                    cut = end
                newlines += self._scan_chunk(data, pos, cut, first_line_no + newlines, result, progress)
                pos = cut
        return newlines

    def _scan_chunk(
        self, data: bytes, start: int, end: int, first_line_no: int, result: ScreenResult, progress: str
    ) -> int:
        candidates = self._main.candidate_lines(data, start, end)
        line_no = first_line_no
        counted_to = start
        n = self._n_patterns
        for ls in sorted(candidates):
            le, anchor = candidates[ls]
            ids = self._main.line_ids(data, ls, le)
            if not ids:
                continue  # a match that spanned lines; grep would not flag this line
            line_no += data.count(b"\n", counted_to, ls)
            counted_to = ls
            text: str | None = None
            for i in ids:
                if i < n:
                    if text is None:
                        text = _line_text(data, ls, le, anchor)
                    result.hits.append(Hit(pattern_id=self.pattern_ids[i], line_no=line_no, line=text, offset=ls))
                elif not any(c.line_no == line_no for c in result.checkpoints[-1:]):
                    sample = parse_checkpoint_line(_tail_text(data, ls, le), line_no=line_no)
                    if sample is not None:
                        result.checkpoints.append(sample)
        newlines = line_no - first_line_no + data.count(b"\n", counted_to, end)
        if progress == "newest":
            sample = self._newest_progress(data, start, end, first_line_no, newlines)
            if sample is not None:
                result.progress.append(sample)
        elif progress == "all":
            result.progress.extend(self._all_progress(data, start, end, first_line_no))
        return newlines

    def _newest_progress(
        self, data: bytes, start: int, end: int, first_line_no: int, newlines: int
    ) -> ProgressSample | None:
        """Parse marker lines from the end of the chunk backwards, in growing windows."""
        hi = end
        window = _FIRST_WINDOW
        tries = 0
        while hi > start:
            lo = max(start, hi - window)
            if lo > start:
                nl = data.find(b"\n", lo, hi)
                lo = data.rfind(b"\n", start, lo) + 1 if nl < 0 else nl + 1
            found = self._markers.candidate_lines(data, lo, hi)
            for ls in sorted(found, reverse=True):
                le = found[ls][0]
                if le - ls > MAX_PROGRESS_LINE:
                    continue
                tries += 1
                sample = parse_progress_line(_tail_text(data, ls, le))
                if sample is not None:
                    ends_before = data.count(b"\n", ls, end)  # newlines from this line to the chunk end
                    sample.line_no = first_line_no + newlines - ends_before
                    return sample
                if tries >= _MAX_PARSE_TRIES:
                    return None
            hi = lo
            window *= 4
        return None

    def _all_progress(self, data: bytes, start: int, end: int, first_line_no: int) -> list[ProgressSample]:
        found = self._markers.candidate_lines(data, start, end)
        out: list[ProgressSample] = []
        line_no = first_line_no
        counted_to = start
        for ls in sorted(found):
            le = found[ls][0]
            line_no += data.count(b"\n", counted_to, ls)
            counted_to = ls
            if le - ls > MAX_PROGRESS_LINE:
                continue
            sample = parse_progress_line(_tail_text(data, ls, le), line_no=line_no)
            if sample is not None:
                out.append(sample)
        return out


# --------------------------------------------------------------------------- helpers


def _caseless(pattern: object) -> bool:
    return bool(getattr(pattern, "caseless", False) or getattr(pattern, "ignore_case", False))


def _decode(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return text.replace("\x00", "").rstrip("\r")


def _line_text(data: bytes, ls: int, le: int, anchor: int) -> str:
    """The hit's line, or for a very long line a window around the match's end."""
    if le - ls > MAX_LINE_TEXT:
        lo = max(ls, min(anchor - MAX_LINE_TEXT * 3 // 4, le - MAX_LINE_TEXT))
        ls, le = lo, min(le, lo + MAX_LINE_TEXT)
    return _decode(data[ls:le])


def _tail_text(data: bytes, ls: int, le: int) -> str:
    """The end of a line (progress and checkpoint facts sit in the last `\\r` segment)."""
    return _decode(data[max(ls, le - MAX_LINE_TEXT):le])


def _merge(into: ScreenResult, part: ScreenResult, seen_long: set[tuple[str, int]]) -> None:
    for hit in part.hits:
        key = (hit.pattern_id, hit.line_no)
        if key in seen_long:
            continue  # the same long line, reported again from the overlap of two pieces
        seen_long.add(key)
        into.hits.append(hit)
    into.progress.extend(part.progress)
    into.checkpoints.extend(c for c in part.checkpoints if not any(c.line_no == k.line_no for k in into.checkpoints[-1:]))


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
