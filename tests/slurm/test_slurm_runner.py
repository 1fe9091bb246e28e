"""The command runners: argv stays data, timeouts kill, SSH host keys are verified, errors translated."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest

from adapters.errors import SchedulerError, SchedulerUnreachable
from adapters.slurm.client import SlurmClient
from adapters.slurm.runner import CommandRunner, LocalRunner, SshHostKeyRejected, SshRunner

from .conftest import ssh_runner


async def test_arguments_reach_the_command_as_literal_words(runner: CommandRunner, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    words = [f"$(touch {marker})", f"`touch {marker}`", f"; touch {marker}", "q'\"", "new\nline", "", "*", "~"]
    result = await runner.run(["printf", "<%s>", *words], timeout=10)
    assert result.returncode == 0
    assert result.stdout == "".join(f"<{w}>" for w in words)
    assert not marker.exists()


async def test_exit_code_and_stderr(runner: CommandRunner) -> None:
    result = await runner.run(["sh", "-c", "echo out; echo err >&2; exit 7"], timeout=10)
    assert (result.returncode, result.stdout, result.stderr) == (7, "out\n", "err\n")


async def test_invalid_utf8_is_replaced_not_fatal(runner: CommandRunner) -> None:
    result = await runner.run(["printf", "a\\377b"], timeout=10)
    assert result.stdout == "a\ufffdb"


async def test_environment_is_passed(slurm_cluster: object, request: pytest.FixtureRequest) -> None:
    value = "a b $(touch /nonexistent) 'q'"
    local = LocalRunner(env={"JM_TEST_VALUE": value})
    assert (await local.run(["sh", "-c", 'printf %s "$JM_TEST_VALUE"'], timeout=10)).stdout == value
    sshd = request.getfixturevalue("sshd")
    remote = SshRunner(sshd.host, port=sshd.port, user=sshd.user, key_file=sshd.key_file,
                       known_hosts=sshd.known_hosts, env={"JM_TEST_VALUE": value})
    try:
        assert (await remote.run(["sh", "-c", 'printf %s "$JM_TEST_VALUE"'], timeout=10)).stdout == value
    finally:
        await remote.close()


async def test_a_local_timeout_kills_the_command() -> None:
    seconds = f"{300 + uuid.uuid4().int % 1000}.5"  # an argv we can look for afterwards
    started = time.monotonic()
    with pytest.raises(SchedulerUnreachable, match="did not finish within") as caught:
        await LocalRunner().run(["sleep", seconds], timeout=0.5)
    assert time.monotonic() - started < 5 and caught.value.retryable
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert f"sleep {seconds}" not in ps


async def test_an_ssh_timeout_is_unreachable(runner: CommandRunner) -> None:
    with pytest.raises(SchedulerUnreachable, match="did not finish within"):
        await runner.run(["sleep", "20"], timeout=0.5)
    assert (await runner.run(["true"], timeout=10)).returncode == 0  # the runner is still usable


async def test_a_missing_command_says_what_to_do() -> None:
    with pytest.raises(SchedulerError, match="not installed here") as caught:
        await LocalRunner().run(["jobmedic-no-such-command"], timeout=5)
    assert not caught.value.retryable


async def test_wrong_host_key_is_refused(slurm_cluster: object, request: pytest.FixtureRequest) -> None:
    sshd = request.getfixturevalue("sshd")
    runner = ssh_runner(sshd, slurm_cluster.conf, known_hosts=sshd.wrong_known_hosts)  # type: ignore[attr-defined]
    with pytest.raises(SshHostKeyRejected, match=str(sshd.wrong_known_hosts)) as caught:
        await runner.run(["squeue", "--json"], timeout=10)
    assert isinstance(caught.value, SchedulerUnreachable) and not caught.value.retryable
    await runner.close()


async def test_missing_known_hosts_is_refused(slurm_cluster: object, request: pytest.FixtureRequest,
                                              tmp_path: Path) -> None:
    sshd = request.getfixturevalue("sshd")
    runner = ssh_runner(sshd, slurm_cluster.conf, known_hosts=tmp_path / "absent")  # type: ignore[attr-defined]
    with pytest.raises(SshHostKeyRejected, match="does not exist"):
        await runner.run(["true"], timeout=10)


async def test_nothing_listening_is_unreachable_and_retryable(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    runner = SshRunner("127.0.0.1", port=1, user="root", key_file=None, known_hosts=known, connect_timeout=5)
    with pytest.raises(SchedulerUnreachable) as caught:
        await runner.run(["true"], timeout=5)
    assert caught.value.retryable


async def test_one_connection_reused_and_reopened_when_lost(slurm_cluster: object,
                                                             request: pytest.FixtureRequest) -> None:
    sshd = request.getfixturevalue("sshd")
    runner = ssh_runner(sshd, slurm_cluster.conf)  # type: ignore[attr-defined]
    try:
        await runner.run(["true"], timeout=10)
        first = await runner.connection()
        await runner.run(["true"], timeout=10)
        assert await runner.connection() is first
        first.close()
        await first.wait_closed()
        assert (await runner.run(["echo", "back"], timeout=10)).stdout == "back\n"
        assert await runner.connection() is not first
    finally:
        await runner.close()


async def test_an_unreachable_controller(slurm_cluster: object, tmp_path: Path) -> None:
    conf = Path(slurm_cluster.conf).read_text()  # type: ignore[attr-defined]
    bad = tmp_path / "slurm.conf"
    bad.write_text("\n".join("SlurmctldPort=1" if line.startswith("SlurmctldPort=") else line
                             for line in conf.splitlines()) + "\n")
    client = SlurmClient(LocalRunner(env={"SLURM_CONF": str(bad)}), cluster="lab", timeout=30)
    with pytest.raises(SchedulerUnreachable, match="scontrol ping") as caught:
        await client.list_jobs()
    assert caught.value.retryable


async def test_sftp_rides_on_the_same_connection(slurm_cluster: object, request: pytest.FixtureRequest,
                                                 tmp_path: Path) -> None:
    sshd = request.getfixturevalue("sshd")
    runner = ssh_runner(sshd, slurm_cluster.conf)  # type: ignore[attr-defined]
    target = tmp_path / "log.txt"
    target.write_text("line one\n")
    try:
        sftp = await runner.sftp()
        assert await runner.sftp() is sftp
        async with sftp.open(str(target), "rb") as handle:
            assert await handle.read() == b"line one\n"
        connection = await runner.connection()
        connection.close()
        await connection.wait_closed()
        reopened = await runner.sftp()  # a lost connection takes its SFTP client with it
        assert reopened is not sftp and await runner.connection() is not connection
        assert (await reopened.stat(str(target))).size == len("line one\n")
    finally:
        await runner.close()
