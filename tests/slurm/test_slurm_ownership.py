"""jobmedic's mark on a job (AdminComment): pure format tests, then the real cluster."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from adapters.errors import ActionRefused
from adapters.slurm.client import SlurmClient
from adapters.slurm.ownership import Mark, read_mark, with_mark
from adapters.slurm.runner import LocalRunner
from workflows.contracts import JobState

from .conftest import Jobs, running, scontrol, wait_job

AT = datetime(2025, 6, 1, 10, 0, 0, tzinfo=UTC)


def test_mark_round_trips() -> None:
    mark = Mark(owner="prod-a", action="requeue_hold", at=AT, holding=True)
    assert mark.text() == "jobmedic:prod-a requeue_hold 2025-06-01T10:00:00Z holding"
    assert read_mark(mark.text()) == mark
    released = Mark(owner="prod-a", action="release", at=AT)
    assert read_mark(released.text()) == released and not read_mark(released.text()).holding


def test_an_operators_text_is_kept_and_only_our_segment_replaced() -> None:
    first = with_mark("ticket 4711: bad GPU", Mark(owner="a", action="requeue_hold", at=AT, holding=True))
    assert first == "ticket 4711: bad GPU | jobmedic:a requeue_hold 2025-06-01T10:00:00Z holding"
    second = with_mark(first, Mark(owner="a", action="release", at=AT))
    assert second == "ticket 4711: bad GPU | jobmedic:a release 2025-06-01T10:00:00Z"
    assert read_mark(second) == Mark(owner="a", action="release", at=AT)


@pytest.mark.parametrize(
    "text",
    ["", "held by admin", "jobmedic:", "jobmedic:a hold", "jobmedic:a requeue_hold yesterday holding",
     "jobmedic:a;rm requeue_hold 2025-06-01T10:00:00Z"],
)
def test_no_mark_without_a_well_formed_segment(text: str) -> None:
    assert read_mark(text) is None


def test_deployment_names_are_checked() -> None:
    with pytest.raises(ValueError, match="deployment name"):
        SlurmClient(LocalRunner(), cluster="lab", deployment="a b")


def _client(deployment: str) -> SlurmClient:
    return SlurmClient(LocalRunner(), cluster="lab", confirm_timeout=30, poll_interval=0.2, deployment=deployment)


@pytest.mark.slurm
async def test_the_mark_says_who_holds_the_job_and_survives_requeue_and_release(jobs: Jobs) -> None:
    ours = _client("dep-a")
    job_id = jobs.submit("--requeue", label="mark")
    job = await wait_job(ours, job_id, running, what="RUNNING")
    held = await ours.requeue_hold(job.key, expected_restarts=0)
    assert held.changed and held.job is not None and held.job.restarts == 1
    mark = read_mark(held.job.admin_comment)
    assert mark is not None and (mark.owner, mark.action, mark.holding) == ("dep-a", "requeue_hold", True)
    assert ours.holds(held.job)
    # what an operator sees
    assert "AdminComment=jobmedic:dep-a requeue_hold" in scontrol("show", "job", "-o", job_id).stdout
    released = await ours.release(job.key, start_now=False)  # Slurm's own wait: no start on a revoked credential
    assert released.changed
    after = await wait_job(ours, job_id, running, what="RUNNING again", timeout=120)
    mark = read_mark(after.admin_comment)
    assert mark is not None and (mark.owner, mark.action, mark.holding) == ("dep-a", "release", False)
    # the mark survives a second requeue: the job is still dep-a's
    again = await ours.requeue_hold(job.key, expected_restarts=1)
    assert again.changed and again.job is not None and again.job.restarts == 2 and ours.holds(again.job)


@pytest.mark.slurm
async def test_a_job_that_ended_is_marked_right_after_its_requeue(jobs: Jobs) -> None:
    ours = _client("dep-a")
    job_id = jobs.submit(script="fail", label="markfail")
    job = await wait_job(ours, job_id, lambda j: j.state.finished, what="finished")
    assert job.admin_comment == ""
    held = await ours.requeue_hold(job.key, expected_restarts=0)
    assert held.changed and held.job is not None and ours.holds(held.job)


@pytest.mark.slurm
async def test_another_deployments_job_is_never_touched(jobs: Jobs) -> None:
    first, second = _client("dep-a"), _client("dep-b")
    job_id = jobs.submit(label="owned")
    job = await wait_job(first, job_id, running, what="RUNNING")
    await first.requeue_hold(job.key, expected_restarts=0)
    for act in (
        lambda: second.release(job.key),
        lambda: second.requeue_hold(job.key),
        lambda: second.set_excluded_nodes(job.key, ["node1"]),
        lambda: second.cancel(job.key),
    ):
        with pytest.raises(ActionRefused, match="belongs to jobmedic deployment 'dep-a'"):
            await act()
    now = await first.get_job(job_id)
    assert (now.state, now.held, now.excluded_nodes) == (JobState.PENDING, True, [])
    assert first.holds(now) and not second.holds(now)


@pytest.mark.slurm
async def test_someone_elses_hold_is_never_released(jobs: Jobs) -> None:
    ours = _client("dep-a")
    job_id = jobs.submit("--begin=now+1hour", label="admhold")
    assert scontrol("hold", job_id).returncode == 0  # an operator's hold
    job = await ours.get_job(job_id)
    assert job.held and not ours.holds(job)
    held = await ours.requeue_hold(job.key, expected_restarts=0)
    assert not held.changed and "not by jobmedic" in held.detail
    with pytest.raises(ActionRefused, match="releases only its own holds"):
        await ours.release(job.key)
    assert (await ours.get_job(job_id)).held


@pytest.mark.slurm
async def test_min_job_age_is_read_from_the_controller(slurm_cluster: object) -> None:
    configured = next(
        line.split("=", 1)[1].split()[0]
        for line in scontrol("show", "config").stdout.splitlines()
        if line.startswith("MinJobAge")
    )
    assert await _client("dep-a").min_job_age_s() == float(configured)


@pytest.mark.slurm
async def test_a_hold_whose_mark_was_lost_is_taken_back_only_by_the_retry_of_that_requeue(jobs: Jobs) -> None:
    """A worker lost between `requeuehold` of an ended job and its mark: the retry (same expected restarts) marks
    the hold; a hold that only looks similar (requeued, then held by an operator) stays unmarked and refused."""
    ours = _client("dep-a")
    lost = jobs.submit(script="fail", label="lostmark")
    job = await wait_job(ours, lost, lambda j: j.state.finished, what="finished")
    assert scontrol("requeuehold", lost).returncode == 0  # the command went through, the mark never came
    held = await wait_job(ours, lost, lambda j: j.held and j.restarts == 1, what="held once more")
    assert not ours.holds(held)
    retried = await ours.requeue_hold(job.key, expected_restarts=0)
    assert not retried.changed and "marked now" in retried.detail
    assert retried.job is not None and ours.holds(retried.job) and retried.job.restarts == 1

    other = jobs.submit(script="fail", label="opshold")
    job = await wait_job(ours, other, lambda j: j.state.finished, what="finished")
    assert scontrol("requeue", other).returncode == 0
    assert scontrol("hold", other).returncode == 0  # an operator's hold after Slurm's requeue
    held = await wait_job(ours, other, lambda j: j.held and j.restarts == 1, what="held by the operator")
    result = await ours.requeue_hold(job.key, expected_restarts=0)
    assert not result.changed and result.job is not None and not ours.holds(result.job)
    with pytest.raises(ActionRefused, match="releases only its own holds"):
        await ours.release(job.key)
