"""Helpers for the real-Slurm tests: runners (local and SSH), a client, job submission."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from adapters.slurm.client import SlurmClient
from adapters.slurm.runner import CommandRunner, LocalRunner, SshRunner
from workflows.contracts import JobInfo, JobState

OPT_IN = '{"jobmedic":{"environment":"test","mode":"action"}}'

SCRIPTS = {
    "sleep": "#!/bin/bash\nsleep 300\n",
    "fail": "#!/bin/bash\necho about to fail\nexit 3\n",
    "ok": "#!/bin/bash\necho done\n",
    "ranks": "#!/bin/bash\nsrun -l bash -c 'echo rank $SLURM_PROCID on $SLURMD_NODENAME; sleep 300'\n",
}


class Jobs:
    """Submits short batch jobs with unique names and cancels them all at teardown."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.tag = uuid.uuid4().hex[:8]
        self.ids: list[str] = []
        for name, body in SCRIPTS.items():
            path = workdir / f"{name}.sh"
            path.write_text(body)
            path.chmod(0o755)

    def name(self, label: str) -> str:
        return f"jmt-{label}-{self.tag}"

    def submit(self, *options: str, script: str = "sleep", label: str = "job", name: str | None = None,
               comment: str | None = OPT_IN, output: str = "/dev/null") -> str:
        argv = ["sbatch", "--parsable", "-J", name if name is not None else self.name(label), "-o", output,
                "-D", str(self.workdir)]
        if comment is not None:
            argv.append(f"--comment={comment}")
        argv += [*options, str(self.workdir / f"{script}.sh")]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
        job_id = proc.stdout.strip().split(";")[0]
        self.ids.append(job_id)
        return job_id

    def cancel_all(self) -> None:
        if self.ids:
            subprocess.run(["scancel", *self.ids], capture_output=True, timeout=30, check=False)


@pytest.fixture
def jobs(slurm_cluster: object, tmp_path: Path) -> Iterator[Jobs]:
    submitter = Jobs(tmp_path)
    yield submitter
    submitter.cancel_all()


def ssh_runner(sshd: object, conf: Path, *, known_hosts: Path | None = None) -> SshRunner:
    return SshRunner(
        sshd.host,  # type: ignore[attr-defined]
        port=sshd.port,  # type: ignore[attr-defined]
        user=sshd.user,  # type: ignore[attr-defined]
        key_file=sshd.key_file,  # type: ignore[attr-defined]
        known_hosts=known_hosts or sshd.known_hosts,  # type: ignore[attr-defined]
        env={"SLURM_CONF": str(conf)},
        connect_timeout=10,
    )


@pytest.fixture(params=["local", "ssh"])
async def runner(request: pytest.FixtureRequest, slurm_cluster: object) -> AsyncIterator[CommandRunner]:
    """The same tests through both runners."""
    if request.param == "local":
        made: CommandRunner = LocalRunner()
    else:
        made = ssh_runner(request.getfixturevalue("sshd"), slurm_cluster.conf)  # type: ignore[attr-defined]
    yield made
    await made.close()


@pytest.fixture
async def client(runner: CommandRunner) -> SlurmClient:
    return SlurmClient(runner, cluster="lab", timeout=30, confirm_timeout=30, poll_interval=0.2)


@pytest.fixture
async def local_client(slurm_cluster: object) -> AsyncIterator[SlurmClient]:
    made = SlurmClient(LocalRunner(), cluster="lab", timeout=30, confirm_timeout=30, poll_interval=0.2)
    yield made
    await made.close()


async def wait_job(client: SlurmClient, job_id: str, done: Callable[[JobInfo], bool], *, timeout: float = 60,
                   what: str = "") -> JobInfo:
    """Poll until `done(job)`; fail with the last state seen."""
    deadline = time.monotonic() + timeout
    while True:
        job = await client.get_job(job_id)
        if done(job):
            return job
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id}: not {what} after {timeout} s: {job.state.value} reason {job.reason}")
        await asyncio.sleep(0.2)


def running(job: JobInfo) -> bool:
    return job.state is JobState.RUNNING


def scontrol(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30, check=False)


def ensure_resumed(node: str) -> None:
    scontrol("update", f"NodeName={node}", "State=RESUME")


@pytest.fixture
def drain_node_name(slurm_cluster: object) -> Iterator[str]:
    """A node the test may drain; resumed afterwards whatever happened."""
    node = slurm_cluster.nodes[-1]  # type: ignore[attr-defined]
    yield node
    ensure_resumed(node)
