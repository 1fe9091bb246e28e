"""SftpLogSource against the real loopback sshd (host key verified, key auth only).

The sshd runs on this machine as the same user, so a file written under tmp_path
is the remote file the source reads over SFTP.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import pytest

from adapters.errors import LogSourceError
from adapters.logs.decode import CUT_MARK
from adapters.logs.files import SftpLogSource, tail_window
from workflows.contracts import LogCursor

pytestmark = pytest.mark.ssh


@pytest.fixture
async def ssh_conn(sshd) -> AsyncIterator[asyncssh.SSHClientConnection]:  # noqa: ANN001 - conftest dataclass
    conn = await sshd.connect()
    try:
        yield conn
    finally:
        conn.close()
        await conn.wait_closed()


@pytest.fixture
async def source(ssh_conn: asyncssh.SSHClientConnection) -> AsyncIterator[SftpLogSource]:
    async def provide() -> asyncssh.SSHClientConnection:
        return ssh_conn

    src = SftpLogSource(provide, max_bytes=64 * 1024, max_line_bytes=4096)
    try:
        yield src
    finally:
        await src.aclose()


async def test_growing_file_over_sftp_loses_and_repeats_nothing(source: SftpLogSource, tmp_path: Path) -> None:
    rng = random.Random(3)
    expected = [f"[rank{i % 8}] step {i} ok" for i in range(2000)]
    blob = "".join(f"[rank{i % 8}] step {i} \x1b[32mok\x1b[0m\r\n" for i in range(2000)).encode()
    path = tmp_path / "job.out"
    path.write_bytes(b"")
    cursor = LogCursor(path=str(path))
    got: list[str] = []
    written = 0
    while written < len(blob):
        step = rng.randrange(1, 20_000)
        with path.open("ab") as fh:
            fh.write(blob[written : written + step])
        written += step
        chunk = await source.read(cursor, max_bytes=rng.randrange(1, 30_000))
        assert not chunk.missing and not chunk.reset
        assert chunk.cursor.inode is None  # SFTP v3 has no inodes: the fingerprint identifies the file
        got += chunk.lines
        cursor = chunk.cursor
    while True:
        chunk = await source.read(cursor)
        got += chunk.lines
        cursor = chunk.cursor
        if not chunk.more:
            break
    assert got == expected
    assert cursor.line_no == 2000 and cursor.offset == len(blob)


async def test_requeue_truncation_and_rewrite_are_detected_over_sftp(source: SftpLogSource, tmp_path: Path) -> None:
    path = tmp_path / "job.out"
    path.write_bytes(b"attempt 1 line a\nattempt 1 line b\n")
    chunk = await source.read(LogCursor(path=str(path)))
    assert chunk.lines == ["attempt 1 line a", "attempt 1 line b"]
    path.write_bytes(b"attempt 2\n")  # shorter: plain truncation
    after = await source.read(chunk.cursor)
    assert after.reset and after.lines == ["attempt 2"]
    # rewritten in place and already longer than the cursor: only the fingerprint can tell
    path.write_bytes(b"attempt 3 has a longer first line\nsecond\n")
    again = await source.read(after.cursor)
    assert again.reset
    assert again.lines == ["attempt 3 has a longer first line", "second"]


async def test_missing_file_over_sftp_is_reported(source: SftpLogSource, tmp_path: Path) -> None:
    cursor = LogCursor(path=str(tmp_path / "nope.out"))
    chunk = await source.read(cursor)
    assert chunk.missing and chunk.lines == []
    assert await source.tail_window(cursor, max_lines=5, max_bytes=1000) == []


async def test_long_line_over_sftp_is_cut_and_the_rest_skipped(source: SftpLogSource, tmp_path: Path) -> None:
    path = tmp_path / "long.out"
    path.write_bytes(b"before\n" + b"Z" * 1_000_000 + b"\nafter\n")
    cursor = LogCursor(path=str(path))
    lines: list[str] = []
    reads = 0
    while True:
        chunk = await source.read(cursor)
        reads += 1
        lines += chunk.lines
        cursor = chunk.cursor
        if not chunk.more:
            break
    assert lines == ["before", "Z" * 4096 + CUT_MARK, "after"]
    assert reads > 10  # 64 KiB per read: the megabyte line was never held at once


async def test_tail_window_over_sftp(source: SftpLogSource, tmp_path: Path) -> None:
    path = tmp_path / "job.out"
    path.write_bytes(b"".join(b"iter %d\n" % i for i in range(500)))
    window = await tail_window(str(path), max_lines=3, max_bytes=4096, source=source)
    assert window == ["iter 497", "iter 498", "iter 499"]


async def test_broken_connection_raises_log_source_error(sshd, tmp_path: Path) -> None:  # noqa: ANN001
    conn = await sshd.connect()

    async def provide() -> asyncssh.SSHClientConnection:
        return conn

    src = SftpLogSource(provide)
    path = tmp_path / "job.out"
    path.write_bytes(b"hello\n")
    assert (await src.read(LogCursor(path=str(path)))).lines == ["hello"]
    conn.close()
    await conn.wait_closed()
    with pytest.raises(LogSourceError, match="over SFTP"):
        await src.read(LogCursor(path=str(path)))
    await src.aclose()
