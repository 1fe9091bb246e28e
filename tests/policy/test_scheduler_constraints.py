"""The scheduler constraints applied after the rules: Slurm's own requeue, and `--no-requeue` jobs."""

from __future__ import annotations

import pytest

from tests.policy.test_rules import NOW, history_of, job, verdict
from workflows.contracts import AdviceAction, Category, PolicyConfig
from workflows.policy import decide

A = AdviceAction
C = Category


def advise(v, *, requeue_allowed: bool | None = True, slurm_requeued: bool = False):
    j = job().model_copy(update={"requeue_allowed": requeue_allowed})
    return decide(v, j, history_of(), PolicyConfig(), now=NOW, slurm_requeued=slurm_requeued)


def test_slurms_own_requeue_is_never_requeued_again_but_keeps_the_exclusion() -> None:
    advice = advise(verdict(C.NODE_FAILURE, "node3"), slurm_requeued=True)
    assert (advice.action, advice.rule) == (A.LEAVE_TO_SLURM, "hardware_exclude+slurm_requeued")
    assert advice.exclude_nodes == ["node3"]


def test_slurms_own_requeue_with_nothing_found_is_left_to_slurm() -> None:
    advice = advise(verdict(C.NONE), slurm_requeued=True)
    assert (advice.action, advice.rule) == (A.LEAVE_TO_SLURM, "nothing_wrong+slurm_requeued")


def test_slurms_own_requeue_does_not_soften_a_stop() -> None:
    advice = advise(verdict(C.TIME_LIMIT), slurm_requeued=True)  # no new checkpoint: stop
    assert (advice.action, advice.rule) == (A.STOP, "time_limit_no_checkpoint")


def test_a_no_requeue_job_is_stopped_with_a_resubmission_hint() -> None:
    advice = advise(verdict(C.GPU_HARDWARE, "node2"), requeue_allowed=False)
    assert (advice.action, advice.rule) == (A.STOP, "hardware_exclude+requeue_not_allowed")
    assert "--exclude=node2" in advice.reason and advice.exclude_nodes == []


@pytest.mark.parametrize("requeue_allowed", [True, None])
def test_requeueable_or_unknown_jobs_keep_their_restart(requeue_allowed: bool | None) -> None:
    advice = advise(verdict(C.GPU_HARDWARE, "node2"), requeue_allowed=requeue_allowed)
    assert (advice.action, advice.rule) == (A.RESTART_EXCLUDE, "hardware_exclude")
