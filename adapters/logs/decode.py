"""Turning raw log bytes into clean lines: pure functions shared by every file source.

Job output is hostile by accident: progress bars redraw themselves with `\\r`,
colour codes wrap every word, a crashed process leaves NULs and half-written
UTF-8, and a misbehaving rank may print one line of a hundred megabytes. These
functions take bytes and return bounded, printable text; they never raise on
content.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: appended to a line that was longer than `max_line_bytes`
CUT_MARK = " [... line cut by jobmedic]"

# CSI (colours, cursor moves), OSC (window titles, hyperlinks; BEL or ST ends them),
# DCS/SOS/PM/APC strings, and the two-byte escapes (ESC 7, ESC M, ...)
# (never across a line end, so whole blocks of lines can be cleaned at once)
_ANSI = re.compile(
    rb"\x1b(?:"
    rb"\[[0-?]*[ -/]*[@-~]"
    rb"|\][^\x07\x1b\n\r]*(?:\x07|\x1b\\)"
    rb"|[PX^_][^\x1b\n\r]*\x1b\\"
    rb"|[@-Z\\-_]"
    rb")"
)
# C0 controls except TAB, and DEL; `\r` and `\n` never reach this step
_CONTROL = bytes([*range(0x00, 0x09), *range(0x0A, 0x20), 0x7F])
# the same, keeping `\n` (the line separator of a block)
_CONTROL_KEEP_NL = bytes([*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F])
_CONTROL_KEEP_NL_CR = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])


def clean_line(raw: bytes, *, max_line_bytes: int, cut: bool = False) -> tuple[str, bool]:
    """One log line (without its `\\n`) as printable text.

    Trailing `\\r`s (CRLF endings) are dropped; of the `\\r`-separated frames of a
    progress bar only the last is kept; ANSI escape sequences and control bytes
    (NUL included) are removed; the result is cut at `max_line_bytes` bytes;
    invalid UTF-8 becomes U+FFFD.

    Args:
        raw: the line's bytes.
        max_line_bytes: longest line kept, in bytes of the raw frame.
        cut: the caller already cut this line short (it holds only a prefix).

    Returns:
        The text (ending in `CUT_MARK` when cut) and whether it was cut.
    """
    raw = raw.rstrip(b"\r")
    last_cr = raw.rfind(b"\r")
    if last_cr >= 0:
        raw = raw[last_cr + 1 :]
    if b"\x1b" in raw:
        raw = _ANSI.sub(b"", raw)
    raw = raw.translate(None, _CONTROL)
    if len(raw) > max_line_bytes:
        raw = raw[:max_line_bytes]
        cut = True
    if cut:
        raw = _drop_split_utf8_tail(raw)
    text = raw.decode("utf-8", errors="replace")
    return (text + CUT_MARK, True) if cut else (text, False)


def clean_block(block: bytes, *, max_line_bytes: int) -> tuple[list[str], list[int]]:
    """Many complete lines at once (`block` ends with `\\n`): the same result as
    `clean_line` on each, with whole-block operations wherever possible (on
    these machines Python's `re` manages 20-60 MB/s, `bytes.replace` ~200 MB/s).

    Returns:
        The lines and the indexes of those that were cut.
    """
    frames = False
    if b"\r" in block:
        while b"\r\n" in block:  # CRLF endings (and the odd "\r\r\n")
            block = block.replace(b"\r\n", b"\n")
        frames = b"\r" in block  # bare "\r": progress frames somewhere in the block
    if b"\x1b" in block:
        block = _ANSI.sub(b"", block)
    block = block.translate(None, _CONTROL_KEEP_NL_CR if frames else _CONTROL_KEEP_NL)
    lines = block.decode("utf-8", errors="replace").split("\n")
    lines.pop()  # after the final "\n"
    if frames:
        lines = [line.rpartition("\r")[2] if "\r" in line else line for line in lines]
    if len(block) <= max_line_bytes or max(map(len, lines)) * 4 <= max_line_bytes:
        return lines, []  # no line can be longer (a character is at most 4 bytes)
    # a rare block with a line that may be too long: measure the raw bytes of each
    parts = block.split(b"\n")
    parts.pop()
    if frames:
        parts = [part.rpartition(b"\r")[2] for part in parts]
    cut = [i for i, part in enumerate(parts) if len(part) > max_line_bytes]
    for i in cut:
        lines[i] = _drop_split_utf8_tail(parts[i][:max_line_bytes]).decode("utf-8", errors="replace") + CUT_MARK
    return lines, cut


def _drop_split_utf8_tail(raw: bytes) -> bytes:
    """Drop a multi-byte UTF-8 sequence that a cut left incomplete at the end."""
    i = len(raw) - 1
    # walk back over at most 3 continuation bytes to the lead byte
    while i >= 0 and len(raw) - i <= 4 and 0x80 <= raw[i] <= 0xBF:
        i -= 1
    if i < 0:
        return raw
    lead = raw[i]
    need = 2 if 0xC0 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else 4 if 0xF0 <= lead <= 0xF7 else 1
    return raw[:i] if need > len(raw) - i else raw


@dataclass
class Split:
    """Lines found in a block of bytes and how many bytes they consumed."""

    lines: list[str] = field(default_factory=list)
    cut: list[int] = field(default_factory=list)  # indexes into `lines`
    consumed: int = 0
    stopped_early: bool = False  # hit `max_lines` with complete lines left


def split_block(
    data: bytes,
    *,
    mid_line: bool,
    at_eof: bool,
    final: bool,
    max_line_bytes: int,
    max_lines: int,
) -> Split:
    """Split bytes read from a log at a line (or progress-frame) boundary into clean lines.

    Only complete lines are returned; the bytes of a trailing partial line are not
    consumed, so the next read starts at that line again. Exceptions, all bounded:

    * a partial line longer than `max_line_bytes` is returned cut, and its rest is
      skipped by the next read (which starts `mid_line`);
    * a partial line holding complete `\\r` progress frames returns the newest
      complete frame, so a progress bar that never prints `\\n` still shows progress;
    * with `final` (the writer is done) and `at_eof`, a last line without `\\n` is
      returned.

    Args:
        data: bytes starting at the reader's offset.
        mid_line: the offset is inside a line already returned (cut): skip to the
            next `\\n` first.
        at_eof: `data` reaches the end of the file as it was when read.
        final: return a trailing partial line too.
        max_line_bytes: longest line kept.
        max_lines: stop after this many lines (the rest stays for the next read).
    """
    out = Split()
    pos = 0
    if mid_line:
        nl = data.find(b"\n")
        if nl < 0:
            # all of it is the rest of the cut line; a final "\r" may be half a CRLF
            out.consumed = len(data) - 1 if data.endswith(b"\r") else len(data)
            return out
        pos = nl + 1

    def add(raw: bytes, *, cut: bool = False) -> None:
        text, was_cut = clean_line(raw, max_line_bytes=max_line_bytes, cut=cut)
        if was_cut:
            out.cut.append(len(out.lines))
        out.lines.append(text)

    last_nl = data.rfind(b"\n", pos)
    if last_nl >= 0:
        block = data[pos : last_nl + 1]
        if block.count(b"\n") > max_lines:
            # keep the first max_lines lines; the rest waits for the next read
            rest = block.split(b"\n", max_lines)[-1]
            block = block[: len(block) - len(rest)]
            out.stopped_early = True
        out.lines, out.cut = clean_block(block, max_line_bytes=max_line_bytes)
        pos += len(block)
        if out.stopped_early:
            out.consumed = pos
            return out

    end = len(data)
    if pos < end:
        # complete progress frames ("...\r" followed by more bytes) in the partial line:
        # the newest one is returned, older ones are superseded and dropped
        last_cr = data.rfind(b"\r", pos, end - 1)
        if last_cr >= 0:
            frame_start = data.rfind(b"\r", pos, last_cr) + 1 or pos
            frame_start = max(frame_start, pos)
            if last_cr - frame_start > 0:
                add(data[frame_start:last_cr])
            pos = last_cr + 1
        tail_len = end - pos
        if tail_len > max_line_bytes:
            add(data[pos : pos + max_line_bytes], cut=True)
            # leave a final "\r" unread: it may be half of a CRLF, and starting the next
            # read just before it keeps that read in mid-line (skip) mode
            pos = end - 1 if data.endswith(b"\r") else end
        elif tail_len and final and at_eof:
            add(data[pos:end])
            pos = end
    out.consumed = pos
    return out
