"""Incremental reading of job output files, locally or over SFTP.

Both sources share one algorithm (`_read_chunk`) over a tiny random-access file
interface, and one pure decoder (`adapters.logs.decode`). A read:

1. opens the file and takes its size and identity (inode locally; a digest of the
   first bytes everywhere, kept in `LogCursor.fingerprint`);
2. restarts at offset 0 when the file shrank below the cursor (truncation, e.g. a
   Slurm requeue without `--open-mode=append`) or is another file (rotation);
3. reads at most `max_bytes` from the cursor, plus the byte before it: when that
   byte is not a line end, the cursor sits inside a line already returned cut, and
   the rest of that line is skipped. This keeps the cursor a plain offset;
4. returns only complete lines and advances the cursor past them.

A file that was truncated and then grew past the old offset between two polls
with the same first bytes cannot be told from an appended one; callers that know
a job restarted should start a fresh cursor.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import stat
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

import asyncssh

from adapters.errors import LogSourceError
from adapters.logs.decode import clean_line, split_block
from adapters.logs.models import LogChunk
from workflows.contracts import JobInfo, LogCursor, Stream, job_streams

_T = TypeVar("_T")

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_LINE_BYTES = 64 * 1024
DEFAULT_MAX_LINES = 200_000
# the fingerprint covers up to this many leading bytes
_FINGERPRINT_BYTES = 256


class LogSource(Protocol):
    """Reads one job output file incrementally; the caller keeps the cursor."""

    def streams(self, job: JobInfo) -> list[tuple[Stream, str]]:
        """Where the job's lines are: (stream, path) for each, the paths the cursors are kept by."""
        ...

    async def read(self, cursor: LogCursor, *, max_bytes: int | None = None, final: bool = False) -> LogChunk:
        """Complete lines after `cursor` (at most `max_bytes` read); `final`: the writer is done."""
        ...

    async def tail_window(self, cursor_or_path: LogCursor | str, *, max_lines: int, max_bytes: int) -> list[str]:
        """The last `max_lines` lines before the cursor (or the end of the file)."""
        ...


class _OpenFile(Protocol):
    size: int
    inode: int | None

    async def read_at(self, offset: int, length: int) -> bytes: ...


class _Missing(Exception):
    """The file does not exist; becomes `LogChunk.missing`."""


# --------------------------------------------------------------------------- shared algorithm


def _fingerprint(head: bytes) -> str:
    return f"{len(head)}:{hashlib.blake2b(head, digest_size=8).hexdigest()}"


def _fingerprint_len(fingerprint: str | None) -> int:
    if not fingerprint:
        return 0
    try:
        return int(fingerprint.split(":", 1)[0])
    except ValueError:
        return 0


async def _same_file(file: _OpenFile, cursor: LogCursor) -> bool:
    if cursor.offset > file.size:
        return False  # truncated
    if file.inode is not None and cursor.inode is not None and file.inode != cursor.inode:
        return False  # rotated (renamed away, a new file in its place)
    known = _fingerprint_len(cursor.fingerprint)
    if known:
        if file.size < known:
            return False
        return _fingerprint(await file.read_at(0, known)) == cursor.fingerprint
    return True


async def _read_chunk(
    file: _OpenFile,
    cursor: LogCursor,
    *,
    max_bytes: int,
    max_line_bytes: int,
    max_lines: int,
    final: bool,
) -> LogChunk:
    reset = not await _same_file(file, cursor)
    offset = 0 if reset else max(cursor.offset, 0)
    line_no = 0 if reset else cursor.line_no
    # a line up to max_line_bytes must fit in one read, or it could never complete
    budget = max(max_bytes, max_line_bytes + 2)
    start = offset - 1 if offset > 0 else 0
    want = min(file.size - start, budget + (offset - start))
    data = await file.read_at(start, want) if want > 0 else b""
    bytes_read = len(data)
    mid_line = False
    if offset > start:
        if not data:  # shrank between stat and read: the next read resets
            return LogChunk(cursor=cursor.model_copy(), first_line_no=line_no + 1, bytes_read=0)
        mid_line = data[0] not in b"\n\r"
        data = data[1:]
    read_end = offset + len(data)
    split = split_block(
        data,
        mid_line=mid_line,
        at_eof=read_end >= file.size,
        final=final,
        max_line_bytes=max_line_bytes,
        max_lines=max_lines,
    )
    fingerprint = None if reset else cursor.fingerprint
    if _fingerprint_len(fingerprint) < min(file.size, _FINGERPRINT_BYTES):
        fingerprint = _fingerprint(await file.read_at(0, min(file.size, _FINGERPRINT_BYTES)))
        bytes_read += min(file.size, _FINGERPRINT_BYTES)
    new_cursor = LogCursor(
        path=cursor.path,
        offset=offset + split.consumed,
        inode=file.inode,
        line_no=line_no + len(split.lines),
        fingerprint=fingerprint,
    )
    first = line_no + 1
    return LogChunk(
        lines=split.lines,
        cursor=new_cursor,
        first_line_no=first,
        reset=reset,
        bytes_read=bytes_read,
        more=read_end < file.size or split.stopped_early,
        cut_line_nos=[first + i for i in split.cut],
    )


async def _tail(
    file: _OpenFile, cursor: LogCursor | None, *, max_lines: int, max_bytes: int, max_line_bytes: int
) -> list[str]:
    # a cursor into an older incarnation of the file says nothing about this one: use its end
    end = cursor.offset if cursor is not None and await _same_file(file, cursor) else file.size
    end = min(end, file.size)
    start = max(0, end - max_bytes)
    data = await file.read_at(start, end - start) if end > start else b""
    raw_lines = data.split(b"\n")
    if start > 0 and len(raw_lines) > 1:
        raw_lines = raw_lines[1:]  # began inside a line
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    raw_lines = raw_lines[-max_lines:] if max_lines > 0 else []
    return [clean_line(raw, max_line_bytes=max_line_bytes)[0] for raw in raw_lines]


# --------------------------------------------------------------------------- local files


class _LocalFile:
    """An open local file; `read_at` reads at once (the whole read of a chunk runs in one worker thread)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        st = os.fstat(fd)
        self.size = st.st_size
        self.inode: int | None = st.st_ino

    async def read_at(self, offset: int, length: int) -> bytes:
        return self._read_at(offset, length)  # never suspends: see _at_once

    def _read_at(self, offset: int, length: int) -> bytes:
        parts = []
        while length > 0:
            piece = os.pread(self.fd, length, offset)
            if not piece:
                break
            parts.append(piece)
            offset += len(piece)
            length -= len(piece)
        return b"".join(parts)


def _open_local(path: str) -> _LocalFile:
    """`path` opened for reading, refused unless it is a regular file.

    O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer, for ever, in one of the
    few threads every read of the watch shares; a job's output path can be anything its user made.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError as exc:
        raise _Missing(path) from exc
    except OSError as exc:
        hint = "check the path and that jobmedic's user may read it" if exc.errno in (errno.EACCES, errno.EPERM) else ""
        raise LogSourceError(f"cannot open log file {path}: {exc.strerror}. {hint}".strip()) from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LogSourceError(f"log {path} is not a regular file (a FIFO, device or directory): not read")
        return _LocalFile(fd)
    except LogSourceError:
        os.close(fd)
        raise
    except OSError as exc:
        os.close(fd)
        raise LogSourceError(f"cannot stat log file {path}: {exc.strerror}") from exc


class LocalFileLogSource:
    """Reads job output files on this machine (file I/O runs in worker threads)."""

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_lines: int = DEFAULT_MAX_LINES,
    ) -> None:
        self.max_bytes = max_bytes
        self.max_line_bytes = max_line_bytes
        self.max_lines = max_lines

    def streams(self, job: JobInfo) -> list[tuple[Stream, str]]:
        return job_streams(job)

    async def read(self, cursor: LogCursor, *, max_bytes: int | None = None, final: bool = False) -> LogChunk:
        # open, check, read and close in one worker thread: at 10,000 watched jobs the hops between the event
        # loop and the threads (four a read) cost more than the reading
        return await asyncio.to_thread(self._read, cursor, max_bytes or self.max_bytes, final)

    def _read(self, cursor: LogCursor, max_bytes: int, final: bool) -> LogChunk:
        try:
            file = _open_local(cursor.path)
        except _Missing:
            return LogChunk(cursor=cursor.model_copy(), first_line_no=cursor.line_no + 1, missing=True)
        try:
            return _at_once(_read_chunk(
                file,
                cursor,
                max_bytes=max_bytes,
                max_line_bytes=self.max_line_bytes,
                max_lines=self.max_lines,
                final=final,
            ))
        except OSError as exc:
            raise LogSourceError(f"cannot read log file {cursor.path}: {exc.strerror or exc}") from exc
        finally:
            os.close(file.fd)

    async def tail_window(self, cursor_or_path: LogCursor | str, *, max_lines: int, max_bytes: int) -> list[str]:
        return await asyncio.to_thread(self._tail_window, cursor_or_path, max_lines, max_bytes)

    def _tail_window(self, cursor_or_path: LogCursor | str, max_lines: int, max_bytes: int) -> list[str]:
        path, cursor = _path_and_cursor(cursor_or_path)
        try:
            file = _open_local(path)
        except _Missing:
            return []
        try:
            return _at_once(_tail(
                file,
                cursor,
                max_lines=max_lines,
                max_bytes=max_bytes,
                max_line_bytes=self.max_line_bytes,
            ))
        except OSError as exc:
            raise LogSourceError(f"cannot read log file {path}: {exc.strerror or exc}") from exc
        finally:
            os.close(file.fd)


def _at_once(coro: Coroutine[Any, Any, _T]) -> _T:
    """The result of a coroutine that never suspends (the shared algorithm over a `_LocalFile`), run here."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a local file read suspended; it must run to its end at once")


def _path_and_cursor(cursor_or_path: LogCursor | str | os.PathLike[str]) -> tuple[str, LogCursor | None]:
    if isinstance(cursor_or_path, LogCursor):
        return cursor_or_path.path, cursor_or_path
    return os.fspath(cursor_or_path), None


# --------------------------------------------------------------------------- SFTP

ConnectionProvider = Callable[[], Awaitable[asyncssh.SSHClientConnection]]


class _SftpFile:
    def __init__(self, handle: asyncssh.SFTPClientFile, size: int) -> None:
        self.handle = handle
        self.size = size
        self.inode: int | None = None  # SFTP v3 has no inode; the fingerprint stands in

    async def read_at(self, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        data = await self.handle.read(length, offset)
        return data if isinstance(data, bytes) else data.encode()


class SftpLogSource:
    """Reads job output files on a remote host over SFTP, through an existing SSH connection.

    Args:
        connection_provider: returns the (already open, host-key-verified) asyncssh
            connection to use, e.g. the Slurm adapter's SSH runner's connection. It is
            called for every read, so a runner that reconnects is followed.
    """

    def __init__(
        self,
        connection_provider: ConnectionProvider,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_lines: int = DEFAULT_MAX_LINES,
        timeout_s: float = 30.0,
    ) -> None:
        self._provider = connection_provider
        self.max_bytes = max_bytes
        self.max_line_bytes = max_line_bytes
        self.max_lines = max_lines
        self.timeout_s = timeout_s
        self._conn: asyncssh.SSHClientConnection | None = None
        self._sftp: asyncssh.SFTPClient | None = None
        self._lock = asyncio.Lock()

    async def _client(self) -> asyncssh.SFTPClient:
        conn = await self._provider()
        async with self._lock:
            if self._sftp is None or conn is not self._conn:
                self._drop_client()
                self._sftp = await conn.start_sftp_client()
                self._conn = conn
            return self._sftp

    def _drop_client(self) -> None:
        if self._sftp is not None:
            self._sftp.exit()
        self._sftp = None
        self._conn = None

    async def aclose(self) -> None:
        """Close the SFTP session (the SSH connection belongs to its provider)."""
        async with self._lock:
            self._drop_client()

    def streams(self, job: JobInfo) -> list[tuple[Stream, str]]:
        return job_streams(job)

    async def read(self, cursor: LogCursor, *, max_bytes: int | None = None, final: bool = False) -> LogChunk:
        async def read_chunk(file: _SftpFile) -> LogChunk:
            return await _read_chunk(
                file,
                cursor,
                max_bytes=max_bytes or self.max_bytes,
                max_line_bytes=self.max_line_bytes,
                max_lines=self.max_lines,
                final=final,
            )

        try:
            return await self._with_file(cursor.path, read_chunk)
        except _Missing:
            return LogChunk(cursor=cursor.model_copy(), first_line_no=cursor.line_no + 1, missing=True)

    async def tail_window(self, cursor_or_path: LogCursor | str, *, max_lines: int, max_bytes: int) -> list[str]:
        path, cursor = _path_and_cursor(cursor_or_path)

        async def tail(file: _SftpFile) -> list[str]:
            return await _tail(
                file,
                cursor,
                max_lines=max_lines,
                max_bytes=max_bytes,
                max_line_bytes=self.max_line_bytes,
            )

        try:
            return await self._with_file(path, tail)
        except _Missing:
            return []

    async def _with_file(self, path: str, use: Callable[[_SftpFile], Awaitable[_T]]) -> _T:
        """Open `path` read-only, run `use` on it, close it; asyncssh errors become ours."""
        try:
            async with asyncio.timeout(self.timeout_s):
                sftp = await self._client()
                # a FIFO would block the server's open until a writer came: only regular files are opened
                found = await sftp.stat(path)
                if found.permissions is not None and not stat.S_ISREG(found.permissions):
                    raise LogSourceError(f"log {path} is not a regular file (a FIFO, device or directory): not read")
                handle = await sftp.open(path, "rb")
                try:
                    attrs = await handle.stat()
                    return await use(_SftpFile(handle, attrs.size or 0))
                finally:
                    await handle.close()
        except asyncssh.SFTPNoSuchFile as exc:
            raise _Missing(path) from exc
        except asyncssh.SFTPPermissionDenied as exc:
            raise LogSourceError(
                f"permission denied reading {path} over SFTP: check that the SSH user may read the job's output"
            ) from exc
        except TimeoutError as exc:
            self._drop_client()
            raise LogSourceError(f"reading {path} over SFTP took longer than {self.timeout_s:g} s") from exc
        except (asyncssh.Error, OSError) as exc:
            # a broken channel or connection: start a fresh SFTP session next time
            self._drop_client()
            raise LogSourceError(
                f"cannot read {path} over SFTP: {exc} (does the SSH server enable the sftp subsystem?)"
            ) from exc


# --------------------------------------------------------------------------- helpers


async def tail_window(
    cursor_or_path: LogCursor | str,
    *,
    max_lines: int,
    max_bytes: int,
    source: LogSource | None = None,
) -> list[str]:
    """The last `max_lines` clean lines before the cursor (or the end of the file).

    "The lines just before the failure": with a cursor, the window ends where the
    cursor stands (the last line read); with a path, at the end of the file. At
    most `max_bytes` are read. A missing file gives `[]`.
    """
    return await (source or LocalFileLogSource()).tail_window(cursor_or_path, max_lines=max_lines, max_bytes=max_bytes)


def source_streams(source: object, job: JobInfo) -> list[tuple[Stream, str]]:
    """Where `source` keeps the job's lines: its own `streams(job)`, else the job's output files."""
    streams = getattr(source, "streams", None)
    return streams(job) if callable(streams) else job_streams(job)
