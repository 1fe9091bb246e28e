"""How Slurm commands are run: on this machine, or on a login node over SSH.

Both runners take argument lists, never shell strings. The SSH runner needs a
shell on the far side to start anything, so it quotes every argument with
`shlex.join`: job data passed as an argument (a job id, a node name, a drain
reason) stays one literal word there and never forms shell syntax.

Errors leave this module as jobmedic's own (`adapters.errors`):

* the host does not answer, the connection drops, a command runs past its
  timeout -> `SchedulerUnreachable` (retryable);
* the SSH host key is not the one in `known_hosts`, or the key is refused ->
  `SshHostKeyRejected` / `SshAuthRejected`, subclasses of
  `SchedulerUnreachable` that are NOT retryable: retrying with the same files
  fails the same way, and a changed host key may be an impostor, so an operator
  has to look (the message says which file to fix);
* a Slurm command that does not exist here -> `SchedulerError` (not retryable).

A command that ran and exited non-zero is not an error at this level: the
caller reads `CommandResult.returncode` and `stderr`.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import asyncssh

from adapters.errors import SchedulerError, SchedulerUnreachable

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SshHostKeyRejected(SchedulerUnreachable):
    """The SSH host key could not be verified against known_hosts."""

    retryable = False


class SshAuthRejected(SchedulerUnreachable):
    """The SSH server refused our key (or the key could not be loaded)."""

    retryable = False


@dataclass(frozen=True)
class CommandResult:
    """What a finished command printed and how it exited (-1: killed by a signal)."""

    returncode: int
    stdout: str
    stderr: str


@runtime_checkable
class CommandRunner(Protocol):
    """Runs one command (an argv list) where the Slurm client commands live."""

    async def run(self, argv: list[str], *, timeout: float) -> CommandResult:
        """Run `argv`, wait at most `timeout` seconds, return its output."""
        ...

    async def close(self) -> None:
        """Release connections; the runner may be used again afterwards."""
        ...

    def describe(self) -> str:
        """Where the commands run, for messages ("local", "ssh root@host:22")."""
        ...


def _check_argv(argv: list[str]) -> None:
    if not argv or not all(isinstance(arg, str) for arg in argv):
        raise ValueError(f"a command is a non-empty list of strings, got {argv!r}")
    if any("\x00" in arg for arg in argv):
        raise ValueError("a command argument contains a NUL byte")


def _check_env(env: dict[str, str]) -> dict[str, str]:
    for name, value in env.items():
        if not _ENV_NAME.fullmatch(name) or "\x00" in value:
            raise ValueError(f"bad environment variable for Slurm commands: {name!r}")
    return dict(env)


def _decode(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    # job names and comments may hold any bytes; one bad byte must not hide the rest
    return data.decode("utf-8", errors="replace")


class LocalRunner:
    """Runs commands as child processes of this one (no shell)."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self._env = _check_env(env or {})

    def describe(self) -> str:
        return "local"

    async def run(self, argv: list[str], *, timeout: float) -> CommandResult:
        _check_argv(argv)
        env = {**os.environ, **self._env}
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
            )
        except FileNotFoundError as exc:
            raise SchedulerError(
                f"{argv[0]!r} is not installed here (PATH={env.get('PATH', '')}); install the Slurm "
                "client commands on this machine or set scheduler.access = 'ssh'"
            ) from exc
        except OSError as exc:
            raise SchedulerUnreachable(f"could not start {argv[0]!r}: {exc}") from exc
        try:
            stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError as exc:
            proc.kill()
            await proc.wait()
            raise SchedulerUnreachable(
                f"{shlex.join(argv[:3])} ... did not finish within {timeout:g} s; "
                "is slurmctld overloaded or down? (`scontrol ping` tells)"
            ) from exc
        except asyncio.CancelledError:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            raise
        code = proc.returncode if proc.returncode is not None and proc.returncode >= 0 else -1
        return CommandResult(returncode=code, stdout=_decode(stdout), stderr=_decode(stderr))

    async def close(self) -> None:
        return None


class SshRunner:
    """Runs commands on a remote host over one reused asyncssh connection.

    The connection is opened on first use and opened again when it was lost.
    Host keys are always verified against the `known_hosts` file; key
    authentication only. `env` is set for every command with `env NAME=value`
    on the far side (sshd drops most client-sent variables unless AcceptEnv
    allows them).
    """

    #: concurrent commands on the one connection (sshd's MaxSessions is 10 by default)
    MAX_CHANNELS = 8

    def __init__(
        self,
        host: str,
        *,
        port: int = 22,
        user: str,
        key_file: Path | str | None,
        known_hosts: Path | str,
        env: dict[str, str] | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self.host = host
        self.port = port
        self.user = user
        self.key_file = Path(key_file) if key_file is not None else None
        self.known_hosts = Path(known_hosts)
        self._env = _check_env(env or {})
        self.connect_timeout = connect_timeout
        self._conn: asyncssh.SSHClientConnection | None = None
        self._sftp: asyncssh.SFTPClient | None = None
        self._lock = asyncio.Lock()
        self._channels = asyncio.Semaphore(self.MAX_CHANNELS)

    def describe(self) -> str:
        return f"ssh {self.user}@{self.host}:{self.port}"

    async def connection(self) -> asyncssh.SSHClientConnection:
        """The live connection, opened (again) if needed; log readers may reuse it."""
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            self._conn = None
            self._sftp = None
            self._conn = await self._connect()
            return self._conn

    async def sftp(self) -> asyncssh.SFTPClient:
        """An SFTP client on the same connection (opened once, reopened with it)."""
        conn = await self.connection()
        async with self._lock:
            if self._sftp is None or self._conn is not conn:
                try:
                    self._sftp = await asyncio.wait_for(conn.start_sftp_client(), self.connect_timeout)
                except (asyncssh.Error, OSError, TimeoutError) as exc:
                    raise SchedulerUnreachable(f"could not start SFTP on {self.describe()}: {exc}") from exc
            return self._sftp

    async def _connect(self) -> asyncssh.SSHClientConnection:
        where = self.describe()
        if not self.known_hosts.is_file():
            raise SshHostKeyRejected(
                f"known_hosts file {self.known_hosts} does not exist; jobmedic verifies SSH host keys: "
                f"create it, e.g. `ssh-keyscan -p {self.port} {self.host} > {self.known_hosts}` "
                "and compare the key with the one the host's admin gives you"
            )
        options: dict[str, object] = {
            "port": self.port,
            "username": self.user,
            "known_hosts": str(self.known_hosts),
            "connect_timeout": self.connect_timeout,
            # notice a connection that died silently (NAT, login node reboot) within ~90 s
            "keepalive_interval": 30,
            "keepalive_count_max": 3,
            # never fall back to ~/.ssh or an agent: the configured key is the only one
            "agent_path": None,
            "config": [],
            "preferred_auth": ["publickey"],
        }
        if self.key_file is not None:
            options["client_keys"] = [str(self.key_file)]
        try:
            return await asyncssh.connect(self.host, **options)
        except asyncssh.HostKeyNotVerifiable as exc:
            raise SshHostKeyRejected(
                f"the SSH host key of {self.host}:{self.port} does not match {self.known_hosts} ({exc}); "
                "if the host was legitimately re-keyed, replace its line in that file, otherwise "
                "someone may be impersonating it"
            ) from exc
        except asyncssh.PermissionDenied as exc:
            raise SshAuthRejected(
                f"{where} refused the key {self.key_file}: add its public half to the user's "
                "authorized_keys, or fix scheduler.ssh.key_file / user"
            ) from exc
        except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
            raise SshAuthRejected(f"could not load SSH key {self.key_file}: {exc}") from exc
        except FileNotFoundError as exc:
            raise SshAuthRejected(f"SSH key file {self.key_file} does not exist: {exc}") from exc
        except (OSError, TimeoutError, asyncssh.Error) as exc:
            raise SchedulerUnreachable(f"could not connect to {where}: {exc or type(exc).__name__}") from exc

    async def run(self, argv: list[str], *, timeout: float) -> CommandResult:
        _check_argv(argv)
        words = ["env", *(f"{k}={v}" for k, v in self._env.items()), *argv] if self._env else argv
        command = shlex.join(words)
        async with self._channels:
            # A channel that cannot even be opened on a connection that looked alive
            # means the connection died quietly: reconnect once. A command that was
            # started is never run a second time here.
            for attempt in (1, 2):
                conn = await self.connection()
                try:
                    process = await asyncio.wait_for(
                        conn.create_process(command, encoding=None, stdin=asyncssh.DEVNULL), timeout
                    )
                except (asyncssh.ChannelOpenError, asyncssh.ConnectionLost, asyncssh.DisconnectError,
                        BrokenPipeError, ConnectionError) as exc:
                    await self._drop(conn)
                    if attempt == 1:
                        continue
                    raise SchedulerUnreachable(f"{self.describe()}: could not start a command: {exc}") from exc
                except TimeoutError as exc:
                    await self._drop(conn)
                    raise SchedulerUnreachable(
                        f"{self.describe()}: no channel within {timeout:g} s"
                    ) from exc
                return await self._finish(process, argv, timeout)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _finish(self, process: asyncssh.SSHClientProcess, argv: list[str], timeout: float) -> CommandResult:
        try:
            completed = await asyncio.wait_for(process.wait(), timeout)
        except TimeoutError as exc:
            process.close()
            raise SchedulerUnreachable(
                f"{shlex.join(argv[:3])} ... did not finish within {timeout:g} s on {self.describe()}"
            ) from exc
        except asyncio.CancelledError:
            process.close()
            raise
        except (asyncssh.Error, OSError) as exc:
            process.close()
            raise SchedulerUnreachable(f"{self.describe()}: connection lost while running {argv[0]}: {exc}") from exc
        code = completed.exit_status
        if code is None or code < 0:
            code = -1
        return CommandResult(returncode=code, stdout=_decode(completed.stdout), stderr=_decode(completed.stderr))

    async def _drop(self, conn: asyncssh.SSHClientConnection) -> None:
        async with self._lock:
            if self._conn is conn:
                self._conn = None
                self._sftp = None
        conn.close()

    async def close(self) -> None:
        async with self._lock:
            conn, self._conn, self._sftp = self._conn, None, None
        if conn is not None:
            conn.close()
            await conn.wait_closed()
