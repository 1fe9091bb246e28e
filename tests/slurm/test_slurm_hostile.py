"""Hostile job names, comments and reasons through real sbatch jobs: nothing executes, nothing crashes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.slurm.client import SlurmClient
from workflows.contracts import JobState

from .conftest import OPT_IN, Jobs

pytestmark = pytest.mark.slurm


def payloads(marker: Path) -> list[str]:
    """Strings that would run `touch marker` if they ever reached a shell."""
    return [
        f"a;touch {marker};b",
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"q'\"; touch {marker}; echo \"'",
        f"line1\ntouch {marker}\nline3",
        f"pipe|touch {marker}|\x1fus",
    ]


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "marker"
    yield path
    assert not path.exists(), "a job name, comment or reason was executed by a shell"


async def test_hostile_names_and_comments(client: SlurmClient, jobs: Jobs, marker: Path) -> None:
    evil = payloads(marker)
    named = {jobs.submit("--hold", name=f"jmt-{jobs.tag}-{text}", label="n"): f"jmt-{jobs.tag}-{text}" for text in evil}
    commented = {jobs.submit("--hold", label="c", comment=text): text for text in evil}
    bad_json = {
        jobs.submit("--hold", label="bad1", comment='{"jobmedic": {"mode": "action"'): "not valid JSON",
        jobs.submit("--hold", label="bad2", comment='{"jobmedic": {"mode": "$(touch x)"}}'): "'observe' or 'action'",
        jobs.submit("--hold", label="bad3",
                    comment=f'{{"jobmedic": `touch {marker}`}}'): "not valid JSON",
    }
    # the largest comment Slurm 22.05 accepts is 1024 bytes: an opt-in padded to that size
    big = json.dumps({"jobmedic": {"environment": "prod", "mode": "observe", "pad": ""}})
    big = big.replace('"pad": ""', '"pad": "' + "x" * (1024 - len(big)) + '"')
    assert len(big) == 1024
    big_id = jobs.submit("--hold", label="big", comment=big)
    good_id = jobs.submit("--hold", label="good",
                          comment=json.dumps({"jobmedic": {"environment": f"$(touch {marker})", "mode": "observe"}}))

    everything = {j.job_id: j for j in await client.list_jobs(opted_in_only=False)}
    for job_id, name in named.items():
        assert everything[job_id].name == name
    for job_id, comment in commented.items():
        assert everything[job_id].comment == comment
        assert not everything[job_id].opt_in.opted_in

    watched = {j.job_id: j for j in await client.list_jobs()}
    for job_id, reason in bad_json.items():
        assert watched[job_id].opt_in.invalid and reason in (watched[job_id].opt_in.invalid_reason or "")
    assert watched[big_id].opt_in.opted_in
    good = watched[good_id].opt_in.opt_in
    assert good is not None and good.environment == f"$(touch {marker})"
    assert not set(commented) & set(watched)  # plain (non-opt-in) comments are not watched

    # actions on a job with a hostile name work and run nothing
    job_id = next(iter(named))
    held = await client.requeue_hold(everything[job_id].key)
    assert not held.changed  # submitted with --hold
    assert (await client.cancel(everything[job_id].key)).job.state is JobState.CANCELLED  # type: ignore[union-attr]


def test_slurm_refuses_a_one_megabyte_comment(jobs: Jobs, tmp_path: Path) -> None:
    # the parser copes with 1 MB comments (test_slurm_parse, test_slurm_optin); Slurm itself
    # does not store them: sbatch fails, so such a job never exists
    script = tmp_path / "big.sh"
    comment = '{"jobmedic":{"environment":"' + "A" * (1 << 20) + '"}}'
    script.write_text(f"#!/bin/bash\n#SBATCH --comment='{comment}'\nsleep 1\n")
    proc = subprocess.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "-J", jobs.name("1mb"), str(script)],
                          capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode == 0:
        jobs.ids.append(proc.stdout.strip())
    assert proc.returncode != 0 and "too long" in proc.stderr


async def test_hostile_drain_reason_is_stored_literally(client: SlurmClient, drain_node_name: str,
                                                          marker: Path) -> None:
    reason = f"$(touch {marker}); `touch {marker}`\n'\"|x"
    drained = await client.drain_node(drain_node_name, reason)
    assert drained.node is not None
    assert drained.node.reason == f"jobmedic: $(touch {marker}); `touch {marker}` '\"|x"
    assert (await client.resume_node(drain_node_name)).changed


async def test_other_jobs_are_still_listed_next_to_hostile_ones(client: SlurmClient, jobs: Jobs, marker: Path) -> None:
    good = jobs.submit("--hold", label="fine", comment=OPT_IN)
    jobs.submit("--hold", label="bad", comment="{" * 1000)
    jobs.submit("--hold", name=f"jmt-{jobs.tag}-" + "\n" * 5 + "$(reboot)", label="x")
    watched = {j.job_id for j in await client.list_jobs()}
    assert good in watched
