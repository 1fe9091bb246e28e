"""JobHistory: recording is pure, the counts the policy relies on, and old histories decode."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from workflows.contracts import Advice, AdviceAction, Category, FaultDomain, Implicated, Verdict
from workflows.history import AttemptRecord, JobHistory

T0 = datetime(2026, 11, 29, 8, 0, tzinfo=timezone.utc)


def fail(
    history: JobHistory,
    category: Category,
    *hosts: str,
    minutes: int,
    signature: str | None = None,
    action: AdviceAction = AdviceAction.RESTART,
) -> JobHistory:
    verdict = Verdict(
        category=category,
        fault_domain=FaultDomain.HARDWARE,
        implicated=Implicated(hosts=list(hosts)),
        deterministic_signature=signature,
    )
    return history.record_outcome(
        verdict, Advice(action=action, rule="r"), ended_at=T0 + timedelta(minutes=minutes), exit_code=1
    )


def test_record_outcome_closes_the_current_attempt() -> None:
    history = JobHistory().start_attempt(at=T0, checkpoint_iteration=50).note_checkpoint(80)
    after = fail(history, Category.GPU_HARDWARE, "node2", "node1", "node2", minutes=30, signature="xid79")

    closed = after.attempts[-1]
    assert closed.attempt == 1
    assert closed.started_at == T0
    assert closed.ended_at == T0 + timedelta(minutes=30)
    assert (closed.category, closed.fault_domain, closed.signature) == (
        Category.GPU_HARDWARE,
        FaultDomain.HARDWARE,
        "xid79",
    )
    assert closed.implicated_hosts == ["node1", "node2"]
    assert (closed.checkpoint_iteration_at_start, closed.checkpoint_iteration_at_end) == (50, 80)
    assert closed.made_checkpoint
    assert (closed.exit_code, closed.advice_action, closed.rule) == (1, AdviceAction.RESTART, "r")
    assert after.current == AttemptRecord(attempt=2, checkpoint_iteration_at_start=80)
    assert after.implicated_counts == {"node1": 1, "node2": 1}
    assert after.categories_seen == [Category.GPU_HARDWARE]


def test_recording_leaves_the_old_history_alone() -> None:
    before = JobHistory().start_attempt(at=T0)
    snapshot = before.model_dump()
    fail(before, Category.HANG, "node1", minutes=5).note_excluded(["node1"]).note_checkpoint(9)
    assert before.model_dump() == snapshot


def test_implicated_counts_and_categories_accumulate() -> None:
    history = JobHistory()
    history = fail(history, Category.NCCL_TIMEOUT, "node3", minutes=1)
    history = fail(history, Category.HANG, "node3", "node1", minutes=2)
    history = fail(history, Category.NCCL_TIMEOUT, minutes=3)
    assert history.implicated_counts == {"node1": 1, "node3": 2}
    assert list(history.implicated_counts) == ["node1", "node3"]  # stable order
    assert history.categories_seen == [Category.NCCL_TIMEOUT, Category.HANG]
    assert [a.attempt for a in history.attempts] == [1, 2, 3]


def test_recent_attempts_window_and_budget() -> None:
    history = JobHistory()
    history = fail(history, Category.HANG, minutes=0)
    history = fail(history, Category.INTERCONNECT, minutes=10, action=AdviceAction.HOLD)
    history = fail(history, Category.PREEMPTED, minutes=20, action=AdviceAction.LEAVE_TO_SLURM)
    history = fail(history, Category.GPU_HARDWARE, "node1", minutes=30, action=AdviceAction.RESTART_EXCLUDE)
    history = fail(history, Category.APP_ERROR, minutes=40, action=AdviceAction.STOP)
    now = T0 + timedelta(minutes=60)
    assert history.recent_attempts(now=now, window_s=3600) == 3  # hold and leave-to-slurm spend nothing
    assert history.recent_attempts(now=now, window_s=3600 - 1) == 2  # the first fell out of the window
    assert history.recent_attempts(now=now, window_s=0) == 0


def test_attempt_of_unknown_time_counts() -> None:
    history = JobHistory(attempts=[AttemptRecord(attempt=1, advice_action=AdviceAction.RESTART)])
    assert history.recent_attempts(now=T0, window_s=1) == 1


def test_attempts_without_checkpoint_counts_the_latest_run() -> None:
    history = JobHistory().start_attempt(at=T0)
    history = fail(history.note_checkpoint(10), Category.HANG, minutes=1)  # progress
    history = fail(history, Category.HANG, minutes=2)  # none
    history = fail(history, Category.PREEMPTED, minutes=3, action=AdviceAction.LEAVE_TO_SLURM)  # ignored
    history = fail(history, Category.HANG, minutes=4)  # none
    assert history.attempts_without_checkpoint() == 2
    assert not history.current_made_checkpoint
    history = history.note_checkpoint(5)  # older than the last one: no progress
    assert not history.current_made_checkpoint
    assert history.last_checkpoint_iteration == 10
    history = history.note_checkpoint(11)
    assert history.current_made_checkpoint
    history = fail(history, Category.HANG, minutes=5)
    assert history.attempts_without_checkpoint() == 0


def test_resuming_from_an_older_checkpoint_is_not_progress() -> None:
    history = JobHistory().start_attempt(at=T0).note_checkpoint(100)
    history = fail(history, Category.HANG, minutes=1)
    history = history.start_attempt(at=T0 + timedelta(minutes=2), checkpoint_iteration=60)
    assert history.current.checkpoint_iteration_at_start == 100
    assert not history.current_made_checkpoint


def test_first_sight_checkpoint_sets_the_baseline() -> None:
    history = JobHistory().start_attempt(at=T0, checkpoint_iteration=40)
    assert history.last_checkpoint_iteration == 40
    assert not history.current_made_checkpoint
    assert history.note_checkpoint(41).current_made_checkpoint


def test_signature_and_category_counts() -> None:
    history = JobHistory()
    history = fail(history, Category.APP_ERROR, minutes=1, signature="a")
    history = fail(history, Category.APP_ERROR, minutes=2, signature="b")
    history = fail(history, Category.CUDA_ERROR, minutes=3, signature="a")
    history = fail(history, Category.NCCL_ERROR, "node1", minutes=4)
    history = fail(history, Category.NCCL_TIMEOUT, minutes=5)
    assert history.signature_count("a") == 2
    assert history.signature_count("c") == 0
    assert history.signature_count(None) == 0  # unsigned errors are never "the same"
    assert history.category_count(Category.APP_ERROR) == 2
    assert history.category_count(Category.NCCL_ERROR, Category.NCCL_TIMEOUT) == 2
    assert history.category_count(Category.NCCL_ERROR, Category.NCCL_TIMEOUT, unattributed_only=True) == 1
    assert history.previous is not None and history.previous.category == Category.NCCL_TIMEOUT


def test_restart_bookkeeping() -> None:
    history = JobHistory().note_restart_count(2).note_jobmedic_restart()
    assert history.slurm_own_restarts == 1
    assert history.note_restart_count(1).slurm_restarts_seen == 2  # the count never goes back
    assert history.note_excluded(["node3", "node1"]).note_excluded(["node1"]).excluded_nodes == ["node1", "node3"]


def test_round_trips_through_json() -> None:
    history = fail(JobHistory().start_attempt(at=T0).note_checkpoint(7), Category.GPU_OOM, "node2", minutes=9)
    history = history.note_excluded(["node2"]).note_jobmedic_restart()
    assert JobHistory.model_validate_json(history.model_dump_json()) == history


def test_old_and_partial_histories_decode() -> None:
    # Histories written before a field existed, or by a newer version with extra fields.
    old = JobHistory.model_validate({"attempts": [{"attempt": 1}], "a_future_field": 1})
    assert old.attempts[0].category is None
    assert old.current.attempt == 1
    assert old.attempts_without_checkpoint() == 1
    assert JobHistory.model_validate({}) == JobHistory()
