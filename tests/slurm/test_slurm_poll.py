"""One batched query per poll, whatever the number of jobs; its cost, measured."""

from __future__ import annotations

import statistics
import subprocess
import time

import pytest

from adapters.slurm.client import SlurmClient
from adapters.slurm.runner import CommandResult, CommandRunner

from .conftest import OPT_IN, Jobs

pytestmark = pytest.mark.slurm

EXTRA_JOBS = 50


class CountingRunner:
    """A real runner that also remembers the commands it ran."""

    def __init__(self, inner: CommandRunner) -> None:
        self.inner = inner
        self.commands: list[list[str]] = []

    async def run(self, argv: list[str], *, timeout: float) -> CommandResult:
        self.commands.append(list(argv))
        return await self.inner.run(argv, timeout=timeout)

    async def close(self) -> None:
        await self.inner.close()

    def describe(self) -> str:
        return self.inner.describe()


@pytest.fixture(scope="module")
def many_jobs(slurm_cluster: object, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    submitter = Jobs(tmp_path_factory.mktemp("poll"))
    for i in range(EXTRA_JOBS):
        submitter.submit("--hold", label=f"poll{i}", comment=OPT_IN)
    yield submitter
    submitter.cancel_all()


async def test_one_query_per_poll_and_its_cost(runner: CommandRunner, many_jobs: Jobs) -> None:
    counting = CountingRunner(runner)
    client = SlurmClient(counting, cluster="lab")
    await client.list_jobs()  # opens the SSH connection; not part of the poll cost
    counting.commands.clear()
    seconds = []
    for _ in range(5):
        started = time.perf_counter()
        jobs = await client.list_jobs()
        seconds.append(time.perf_counter() - started)
    assert counting.commands == [["squeue", "--json"]] * 5
    assert set(many_jobs.ids) <= {j.job_id for j in jobs}
    total = len(subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i"], capture_output=True, text=True,
                               check=True).stdout.split())
    median = statistics.median(seconds)
    print(f"\nlist_jobs via {runner.describe()}: median {median * 1000:.0f} ms, "
          f"min {min(seconds) * 1000:.0f} ms over 5 polls, {total} jobs in the controller, {len(jobs)} watched")
    assert median < 5.0


async def test_named_jobs_are_read_in_one_query_and_a_job_slurm_no_longer_holds_is_left_out(
    client: SlurmClient, jobs
) -> None:
    """On the real cluster (locally and over SSH): squeue refuses a list holding an unknown id, so the client
    falls back to one query each; the jobs it holds come back either way."""
    held = [jobs.submit("--hold", label="named") for _ in range(2)]
    got = await client.get_jobs(held)
    assert sorted(j.job_id for j in got) == sorted(held)
    got = await client.get_jobs([*held, "987654321"])
    assert sorted(j.job_id for j in got) == sorted(held)
    assert await client.get_jobs([]) == []
