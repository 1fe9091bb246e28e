"""Task layout and output paths of a real multi-node job agree with what the job itself reports."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from adapters.slurm.client import SlurmClient

from .conftest import Jobs, running, wait_job

pytestmark = pytest.mark.slurm


async def test_ranks_map_to_the_nodes_that_ran_them(local_client: SlurmClient, jobs: Jobs) -> None:
    job_id = jobs.submit("-N2", "-n3", script="ranks", label="ranks",
                         output=str(jobs.workdir / "%x_%j_%u_%3j_%A_%a.out"))
    job = await wait_job(local_client, job_id, running, what="RUNNING")
    out = Path(job.stdout_path)
    assert out.name == f"{job.name}_{job_id}_{job.user}_{int(job_id):03d}_{job_id}_4294967294.out"
    assert job.stderr_path == job.stdout_path
    deadline = time.monotonic() + 30
    seen: dict[int, str] = {}
    while len(seen) < 3 and time.monotonic() < deadline:
        if out.exists():
            seen = {int(m[0]): m[1] for m in re.findall(r"rank (\d+) on (\S+)", out.read_text())}
        await asyncio.sleep(0.3)
    assert sorted(seen) == [0, 1, 2], f"ranks seen in {out}: {seen}"
    assert job.layout.nodes == job.nodes and sum(job.layout.tasks_per_node) == 3
    assert {rank: job.layout.node_of_rank(rank) for rank in seen} == seen
