"""The pure decoder: bytes from a job's output in, clean bounded lines out."""

from __future__ import annotations

import random

import pytest

from adapters.logs.decode import CUT_MARK, clean_line, split_block


def clean(raw: bytes, max_line_bytes: int = 1024) -> str:
    return clean_line(raw, max_line_bytes=max_line_bytes)[0]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"plain", "plain"),
        (b"crlf ending\r", "crlf ending"),
        (b"\x1b[1;31mERROR\x1b[0m: NCCL \x1b[32mwatchdog\x1b[m", "ERROR: NCCL watchdog"),
        (b"\x1b]0;window title\x07after osc", "after osc"),
        (b"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),
        (b"\x1b[2K\x1b[1Gcleared", "cleared"),
        (b"  5%|#    | 5/100\r 50%|#####     | 50/100\r100%|##########| 100/100", "100%|##########| 100/100"),
        (b"frame one\rframe two\r\r", "frame two"),
        (b"nul\x00in\x00the\x00middle", "nulinthemiddle"),
        (b"tab\tkept, bell\x07 and del\x7f gone", "tab\tkept, bell and del gone"),
        (b"bad utf8 \xff\xfe ok", "bad utf8 \ufffd\ufffd ok"),
        (b"caf\xc3\xa9 \xe2\x9c\x93", "café ✓"),
        (b"", ""),
    ],
)
def test_clean_line(raw: bytes, expected: str) -> None:
    assert clean(raw) == expected


def test_long_line_is_cut_and_marked_without_splitting_a_character() -> None:
    raw = "é".encode() * 10  # 2 bytes each
    text, cut = clean_line(raw, max_line_bytes=5)
    assert cut
    # 5 bytes would end in the middle of the third "é": only two whole ones are kept
    assert text == "éé" + CUT_MARK


def test_split_returns_complete_lines_and_leaves_a_partial_one() -> None:
    data = b"one\ntwo\r\nthree"
    out = split_block(data, mid_line=False, at_eof=True, final=False, max_line_bytes=100, max_lines=10)
    assert out.lines == ["one", "two"]
    assert data[out.consumed :] == b"three"


def test_split_final_flushes_the_partial_line() -> None:
    out = split_block(b"one\nlast words", mid_line=False, at_eof=True, final=True, max_line_bytes=100, max_lines=10)
    assert out.lines == ["one", "last words"]
    assert out.consumed == len(b"one\nlast words")


def test_split_skips_the_rest_of_a_cut_line() -> None:
    out = split_block(b"rest of a cut line\nnext\n", mid_line=True, at_eof=True, final=False, max_line_bytes=100, max_lines=10)
    assert out.lines == ["next"]


def test_split_partial_progress_bar_returns_newest_complete_frame() -> None:
    data = b"epoch 1\n 10%\r 20%\r 30%"
    out = split_block(data, mid_line=False, at_eof=True, final=False, max_line_bytes=100, max_lines=10)
    assert out.lines == ["epoch 1", " 20%"]
    assert data[out.consumed :] == b" 30%"


def test_split_does_not_mistake_half_a_crlf_for_a_frame() -> None:
    data = b"line\r"
    out = split_block(data, mid_line=False, at_eof=True, final=False, max_line_bytes=100, max_lines=10)
    assert out.lines == []
    assert out.consumed == 0


def test_split_stops_at_max_lines() -> None:
    data = b"".join(b"%d\n" % i for i in range(10))
    out = split_block(data, mid_line=False, at_eof=True, final=False, max_line_bytes=100, max_lines=4)
    assert out.lines == ["0", "1", "2", "3"]
    assert out.stopped_early
    assert data[out.consumed :].startswith(b"4\n")


def test_binary_garbage_gives_bounded_printable_lines() -> None:
    rng = random.Random(7)
    data = bytes(rng.randrange(256) for _ in range(200_000))
    out = split_block(data, mid_line=False, at_eof=True, final=True, max_line_bytes=512, max_lines=10**6)
    assert out.consumed == len(data)
    assert len(out.lines) == data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    for line in out.lines:
        assert len(line.removesuffix(CUT_MARK).encode("utf-8", errors="surrogatepass")) <= 512 * 3
        assert not any(ord(ch) < 0x20 and ch != "\t" for ch in line)
        assert "\x7f" not in line


def test_block_cleaning_equals_line_by_line_cleaning() -> None:
    rng = random.Random(11)
    pieces = [b"step 12 loss 2.5", b"\x1b[31m", b"\x1b[0m", b"\r", b"\r\r", b"\x00", b"\xff", b"\xc3\xa9", b"\xe2\x9c",
              b"\t", b"\x1b]0;title\x07", b"\x1b", b"[", b"A" * 40, b" ", b"\x7f", b"\x1bM"]
    lines = [b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 12))) for _ in range(3000)]
    block = b"".join(line + b"\n" for line in lines)
    out = split_block(block, mid_line=False, at_eof=True, final=False, max_line_bytes=60, max_lines=10**6)
    expected = [clean_line(line, max_line_bytes=60) for line in lines]
    assert out.lines == [text for text, _ in expected]
    assert out.cut == [i for i, (_, cut) in enumerate(expected) if cut]
    assert out.consumed == len(block)


def test_skipping_the_rest_of_a_cut_line_stops_before_half_a_crlf() -> None:
    out = split_block(b"rest of the cut line\r", mid_line=True, at_eof=True, final=False, max_line_bytes=100, max_lines=10)
    assert out.lines == [] and out.consumed == len(b"rest of the cut line")
