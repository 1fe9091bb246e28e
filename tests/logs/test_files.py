"""Incremental reading of real files on disk with LocalFileLogSource."""

from __future__ import annotations

import os
import random
import tracemalloc
from pathlib import Path

from adapters.logs.decode import CUT_MARK
from adapters.logs.files import LocalFileLogSource, tail_window
from adapters.logs.models import LogChunk
from workflows.contracts import LogCursor

MiB = 1024 * 1024


async def drain(source: LocalFileLogSource, cursor: LogCursor, **kw: object) -> tuple[list[str], LogChunk]:
    """Read until nothing more is waiting; return all lines and the last chunk."""
    lines: list[str] = []
    while True:
        chunk = await source.read(cursor, **kw)  # type: ignore[arg-type]
        assert chunk.first_line_no == chunk.cursor.line_no - len(chunk.lines) + 1
        lines += chunk.lines
        cursor = chunk.cursor
        if not chunk.more:
            return lines, chunk


async def test_growing_file_read_in_many_pieces_loses_and_repeats_nothing(tmp_path: Path) -> None:
    rng = random.Random(42)
    expected = [f"iteration {i} loss {rng.random():.4f} " + "x" * rng.randrange(0, 300) for i in range(3000)]
    blob = "".join(line + "\n" for line in expected).encode()
    path = tmp_path / "job.out"
    path.write_bytes(b"")
    source = LocalFileLogSource(max_line_bytes=1024)
    cursor = LogCursor(path=str(path))
    got: list[str] = []
    numbers: list[int] = []
    written = 0
    reads = 0
    while written < len(blob) or reads == 0:
        step = rng.randrange(1, 5000)  # cuts lines at arbitrary bytes
        with path.open("ab") as fh:
            fh.write(blob[written : written + step])
        written += step
        chunk = await source.read(cursor, max_bytes=rng.randrange(1, 4096))
        reads += 1
        assert not chunk.reset and not chunk.missing
        numbers += range(chunk.first_line_no, chunk.first_line_no + len(chunk.lines))
        got += chunk.lines
        cursor = chunk.cursor
    rest, last = await drain(source, cursor)
    got += rest
    assert reads > 100
    assert got == expected
    assert numbers == list(range(1, len(numbers) + 1))
    assert last.cursor.offset == len(blob)
    assert last.cursor.line_no == len(expected)


async def test_partial_last_line_waits_until_complete_or_final(tmp_path: Path) -> None:
    path = tmp_path / "job.out"
    path.write_bytes(b"first\nsecond half-writ")
    source = LocalFileLogSource()
    chunk = await source.read(LogCursor(path=str(path)))
    assert chunk.lines == ["first"]
    assert not chunk.more
    again = await source.read(chunk.cursor)
    assert again.lines == [] and again.cursor.offset == chunk.cursor.offset
    with path.open("ab") as fh:
        fh.write(b"ten\nno newline at exit")
    chunk = await source.read(again.cursor)
    assert chunk.lines == ["second half-written"]
    final = await source.read(chunk.cursor, final=True)
    assert final.lines == ["no newline at exit"]
    assert final.first_line_no == 3


async def test_truncation_resets_to_the_start(tmp_path: Path) -> None:
    path = tmp_path / "job.out"
    path.write_bytes(b"".join(b"attempt 1 line %d\n" % i for i in range(100)))
    source = LocalFileLogSource()
    lines, chunk = await drain(source, LogCursor(path=str(path)))
    assert len(lines) == 100
    # Slurm truncates the output file on requeue (no --open-mode=append)
    with path.open("wb") as fh:
        fh.write(b"attempt 2 starts\n")
    after = await source.read(chunk.cursor)
    assert after.reset
    assert after.lines == ["attempt 2 starts"]
    assert after.first_line_no == 1
    assert after.cursor.line_no == 1


async def test_rewrite_in_place_past_the_old_offset_is_caught_by_the_fingerprint(tmp_path: Path) -> None:
    path = tmp_path / "job.out"
    path.write_bytes(b"attempt 1: hello\n")
    source = LocalFileLogSource()
    chunk = await source.read(LogCursor(path=str(path)))
    inode = chunk.cursor.inode
    # same inode, new content that is already longer than the old offset
    with path.open("r+b") as fh:
        fh.truncate(0)
        fh.write(b"attempt 2: a different first line\nand more\n")
    assert os.stat(path).st_ino == inode
    after = await source.read(chunk.cursor)
    assert after.reset
    assert after.lines == ["attempt 2: a different first line", "and more"]


async def test_rotation_resets_and_reads_the_new_file(tmp_path: Path) -> None:
    path = tmp_path / "job.out"
    path.write_bytes(b"old 1\nold 2\n")
    source = LocalFileLogSource()
    chunk = await source.read(LogCursor(path=str(path)))
    assert chunk.lines == ["old 1", "old 2"]
    keep_old_inode_busy = tmp_path / "job.out.1"
    os.rename(path, keep_old_inode_busy)
    path.write_bytes(b"new 1\nnew 2\nnew 3\n")  # longer than the old offset
    assert os.stat(path).st_ino != chunk.cursor.inode
    after = await source.read(chunk.cursor)
    assert after.reset
    assert after.lines == ["new 1", "new 2", "new 3"]


async def test_missing_file_is_reported_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "not-yet.out"
    source = LocalFileLogSource()
    chunk = await source.read(LogCursor(path=str(path)))
    assert chunk.missing
    assert chunk.lines == [] and chunk.cursor.offset == 0
    path.write_bytes(b"job started\n")
    chunk = await source.read(chunk.cursor)
    assert not chunk.missing
    assert chunk.lines == ["job started"]
    assert await tail_window(str(tmp_path / "gone.out"), max_lines=10, max_bytes=1000) == []


async def test_hundred_megabyte_line_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "huge.out"
    line_len = 100 * MiB
    with path.open("wb") as fh:
        fh.write(b"before\n")
        block = b"A" * MiB
        for _ in range(line_len // MiB):
            fh.write(block)
        fh.write(b"\nafter\n")
    source = LocalFileLogSource(max_bytes=4 * MiB, max_line_bytes=64 * 1024)
    tracemalloc.start()
    try:
        lines, last = await drain(source, LogCursor(path=str(path)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lines[0] == "before"
    assert lines[1] == "A" * 64 * 1024 + CUT_MARK
    assert lines[2:] == ["after"]
    assert last.cursor.offset == path.stat().st_size
    # one read buffer (plus the slice of it being cleaned), never the line
    assert peak < 12 * MiB, f"peak {peak / MiB:.1f} MiB"


async def test_huge_line_still_being_written_is_cut_then_skipped(tmp_path: Path) -> None:
    path = tmp_path / "huge.out"
    path.write_bytes(b"ok\n" + b"B" * 300_000)  # no newline yet, at EOF
    source = LocalFileLogSource(max_bytes=64 * 1024, max_line_bytes=1000)
    lines, last = await drain(source, LogCursor(path=str(path)))
    assert lines == ["ok", "B" * 1000 + CUT_MARK]
    with path.open("ab") as fh:
        fh.write(b"B" * 200_000 + b"\r\nnext line\n")
    more, _ = await drain(source, last.cursor)
    assert more == ["next line"]


async def test_progress_bar_frames_show_progress_before_the_newline(tmp_path: Path) -> None:
    path = tmp_path / "bar.out"
    path.write_bytes(b"Epoch 1\n\r  1%|      | 1/100\r  2%|      | 2/100")
    source = LocalFileLogSource()
    chunk = await source.read(LogCursor(path=str(path)))
    assert chunk.lines == ["Epoch 1", "  1%|      | 1/100"]
    with path.open("ab") as fh:
        fh.write(b"\r  3%|      | 3/100\r100%|######| 100/100\r\nEpoch 2\n")
    chunk = await source.read(chunk.cursor)
    assert chunk.lines == ["100%|######| 100/100", "Epoch 2"]


async def test_hostile_bytes_crlf_ansi_nul_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "hostile.out"
    path.write_bytes(
        b"\x1b[31m[rank3]: RuntimeError: NCCL error\x1b[0m\r\n"
        b"nul\x00bytes\x00here\r\n"
        b"latin1 caf\xe9\r\n"
        + bytes(range(256))
        + b"\n"
    )
    chunk = await LocalFileLogSource().read(LogCursor(path=str(path)))
    assert chunk.lines[:3] == ["[rank3]: RuntimeError: NCCL error", "nulbyteshere", "latin1 caf\ufffd"]
    assert len(chunk.lines) == 5  # bytes 0..255 hold one "\n" and one "\r": two lines, the first collapsed
    assert all("\x00" not in line and "\x1b" not in line for line in chunk.lines)


async def test_more_is_set_while_data_waits_and_max_lines_bounds_a_read(tmp_path: Path) -> None:
    path = tmp_path / "many.out"
    path.write_bytes(b"".join(b"line %06d\n" % i for i in range(20_000)))
    source = LocalFileLogSource(max_lines=5000)
    first = await source.read(LogCursor(path=str(path)), max_bytes=1 * MiB)
    assert len(first.lines) == 5000 and first.more
    lines, last = await drain(source, first.cursor)
    assert first.lines + lines == [f"line {i:06d}" for i in range(20_000)]
    assert not last.more


async def test_tail_window_gives_the_last_lines_before_the_cursor(tmp_path: Path) -> None:
    path = tmp_path / "job.out"
    path.write_bytes(b"".join(b"step %d\n" % i for i in range(1000)))
    source = LocalFileLogSource()
    assert await tail_window(str(path), max_lines=3, max_bytes=10_000) == ["step 997", "step 998", "step 999"]
    # only max_bytes are read: the first, partial line of the window is dropped
    assert await tail_window(str(path), max_lines=100, max_bytes=30) == ["step 997", "step 998", "step 999"]
    chunk = await source.read(LogCursor(path=str(path)), max_bytes=500)
    window = await source.tail_window(chunk.cursor, max_lines=2, max_bytes=10_000)
    assert window == chunk.lines[-2:]


async def test_tail_window_with_a_stale_cursor_reads_the_new_file_to_its_end(tmp_path: Path) -> None:
    path = tmp_path / "job.out"
    path.write_bytes(b"".join(b"attempt 1 step %d\n" % i for i in range(100)))
    source = LocalFileLogSource()
    _, last = await drain(source, LogCursor(path=str(path)))
    path.write_bytes(b"attempt 2 step 0\nattempt 2 step 1\n")  # requeued: truncated and rewritten
    assert await source.tail_window(last.cursor, max_lines=5, max_bytes=10_000) == ["attempt 2 step 0", "attempt 2 step 1"]
