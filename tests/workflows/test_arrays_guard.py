"""The array guard (workflows/array_guard.py): recovery of a job array stops when most of its tasks fail alike."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from workflows.array_guard import RULE, array_guard
from workflows.contracts import Advice, AdviceAction, Category, Implicated, JobInfo, JobState, Verdict
from workflows.messages import ArrayTaskState, ArrayView, RecentFailure

NOW = datetime(2026, 12, 1, tzinfo=UTC)
RESTART = Advice(action=AdviceAction.RESTART, rule="transient_restart", reason="first app error")
APP = Verdict(category=Category.APP_ERROR)


def task(i: int, state: str = "FAILED", exit_code: int | None = 1) -> ArrayTaskState:
    return ArrayTaskState(job_id=f"40_{i}", state=state, exit_code=exit_code, exit_signal=0 if exit_code else None)


def failed(i: int = 0, exit_code: int = 1) -> JobInfo:
    return JobInfo(job_id=f"40_{i}", state=JobState.FAILED, exit_code=exit_code, exit_signal=0)


def view(*tasks: ArrayTaskState, total: int | None = None) -> ArrayView:
    return ArrayView(array_job_id="40", tasks=list(tasks), total=len(tasks) if total is None else total)


def test_most_tasks_ended_alike_stop_the_array() -> None:
    advice = array_guard(RESTART, APP, failed(), view(task(0), task(1), task(2), task(3, "RUNNING", None)), [])
    assert advice.action is AdviceAction.STOP and advice.rule == RULE
    assert "3 of 4 tasks of job array 40" in advice.reason


def test_half_is_not_most() -> None:
    tasks = view(task(0), task(1), task(2, "RUNNING", None), task(3, "RUNNING", None))
    assert array_guard(RESTART, APP, failed(), tasks, []) == RESTART


def test_tasks_waiting_to_start_count_in_the_array() -> None:
    assert array_guard(RESTART, APP, failed(), view(task(0), task(1), task(2), total=8), []) == RESTART


def test_a_failure_that_names_its_node_is_that_nodes() -> None:
    gpu = Verdict(category=Category.GPU_HARDWARE, implicated=Implicated(hosts=["node2"]))
    restart = RESTART.model_copy(update={"action": AdviceAction.RESTART_EXCLUDE, "exclude_nodes": ["node2"]})
    assert array_guard(restart, gpu, failed(), view(task(0), task(1), task(2), task(3)), []) == restart


def test_a_different_exit_code_is_not_the_same_way() -> None:
    tasks = view(task(0), task(1, exit_code=2), task(2, exit_code=3), task(3))
    assert array_guard(RESTART, APP, failed(), tasks, []) == RESTART


def test_recorded_verdicts_count_for_tasks_restarted_already_and_override_slurms_view() -> None:
    recent = [
        RecentFailure(job_id="40_1", at=NOW, category="app_error"),
        RecentFailure(job_id="40_2", at=NOW, category="app_error"),
        RecentFailure(job_id="40_3", at=NOW, category="nccl_error"),  # ended alike in Slurm, but another cause
        RecentFailure(job_id="41_3", at=NOW, category="app_error"),  # another array
    ]
    tasks = view(task(0), task(1, "RUNNING", None), task(2, "PENDING", None), task(3))
    advice = array_guard(RESTART, APP, failed(), tasks, recent)
    assert advice.action is AdviceAction.STOP and "3 of 4" in advice.reason
    assert array_guard(RESTART, APP, failed(), tasks, recent[2:]) == RESTART


@pytest.mark.parametrize("action", [AdviceAction.STOP, AdviceAction.HOLD, AdviceAction.LEAVE_TO_SLURM])
def test_only_a_restart_is_turned_into_a_stop(action: AdviceAction) -> None:
    advice = Advice(action=action, rule="x")
    assert array_guard(advice, APP, failed(), view(task(0), task(1), task(2), task(3)), []) == advice


def test_a_running_task_is_not_stopped_by_the_guard() -> None:
    hung = JobInfo(job_id="40_0", state=JobState.RUNNING)
    running = [task(i, "RUNNING", None) for i in range(4)]
    assert array_guard(RESTART, Verdict(category=Category.HANG), hung, view(*running), []) == RESTART


def test_two_tasks_are_too_few_to_be_a_pattern() -> None:
    assert array_guard(RESTART, APP, failed(), view(task(0), task(1)), []) == RESTART
