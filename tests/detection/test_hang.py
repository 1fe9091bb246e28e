"""The hang bound follows the job's own rhythm; the tracker learns it from observed samples."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from activities.detection.hang import (
    HangEvidence,
    ProgressSignal,
    ProgressTracker,
    all_gpus_idle,
    hang_bound,
    hang_evidence,
    hang_watch_label,
    is_hang,
    percentile,
)
from activities.detection.progress import ProgressSample

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KW = {"floor_s": 60.0, "ceiling_s": 3600.0, "default_s": 900.0, "factor": 5.0}


@pytest.mark.parametrize(
    ("iterations", "checkpoints", "expected"),
    [
        ([], [], 900.0),  # nothing known: the default
        ([10.0] * 4, [], 900.0),  # too few intervals: still the default
        ([10.0] * 4, [1000.0], 1500.0),  # ... but never below 1.5x a checkpoint stall already seen
        ([400.0, 500.0], [], 2500.0),  # ... nor below factor x the longest interval already seen (slow epochs)
        ([10.0] * 20, [], 60.0),  # 5 x 10 s = 50 s, raised to the floor
        ([30.0] * 19 + [40.0], [], pytest.approx(5 * 30.5)),  # 5 x p95 (rank 18.05 of 0..19)
        ([30.0] * 20, [200.0], 300.0),  # the checkpoint stall dominates: 1.5 x 200 s
        ([2000.0] * 20, [], 3600.0),  # clamped to the ceiling
        ([30.0] * 20 + [float("nan"), -1.0], [], 150.0),  # nonsense intervals are ignored
    ],
)
def test_hang_bound_table(iterations: list[float], checkpoints: list[float], expected: float) -> None:
    assert hang_bound(iterations, checkpoints, **KW) == expected


def test_hang_bound_rejects_floor_above_ceiling() -> None:
    with pytest.raises(ValueError, match="fix the configuration"):
        hang_bound([], [], floor_s=100.0, ceiling_s=10.0, default_s=50.0, factor=2.0)


def test_percentile() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert percentile([5.0], 95) == 5.0
    assert percentile([0.0, 10.0], 95) == pytest.approx(9.5)


@pytest.mark.parametrize(
    ("since_s", "bound", "running", "expected"),
    [
        (100, 300.0, True, False),
        (301, 300.0, True, True),
        (10_000, 300.0, False, False),  # a job that is not running cannot hang
    ],
)
def test_is_hang(since_s: int, bound: float, running: bool, expected: bool) -> None:
    assert is_hang(T0, T0 + timedelta(seconds=since_s), bound, running) is expected


def test_is_hang_without_any_progress_time_concludes_nothing() -> None:
    assert is_hang(None, T0, 1.0, True) is False


def _feed(tracker: ProgressTracker, events: list[tuple[float, ProgressSample]]) -> None:
    for seconds, sample in events:
        tracker.observe(sample, T0 + timedelta(seconds=seconds))


def test_tracker_learns_iteration_and_checkpoint_intervals() -> None:
    tracker = ProgressTracker()
    events: list[tuple[float, ProgressSample]] = []
    t = 0.0
    line = 0
    for it in range(1, 31):
        line += 1
        events.append((t, ProgressSample(iteration=it * 10, iter_time_s=1.0, line_no=line)))
        if it == 15:  # a save that stalls training for 400 s
            line += 1
            events.append((t + 1, ProgressSample(checkpoint=True, checkpoint_iteration=150, line_no=line)))
            t += 400.0
        else:
            t += 20.0
    _feed(tracker, events)
    assert tracker.last_iteration == 300
    assert tracker.checkpoint_intervals_s == [400.0]
    assert set(tracker.iteration_intervals_s) == {20.0} and len(tracker.iteration_intervals_s) == 28
    assert tracker.last_checkpoint_iteration == 150
    assert tracker.bound(**KW) == 600.0  # 1.5 x 400 s beats 5 x 20 s
    last = tracker.last_progress_at
    assert last is not None
    assert not is_hang(last, last + timedelta(seconds=599), tracker.bound(**KW), True)
    assert is_hang(last, last + timedelta(seconds=601), tracker.bound(**KW), True)


def test_tracker_ignores_repeats_and_sees_restarts() -> None:
    tracker = ProgressTracker()
    assert tracker.observe(ProgressSample(iteration=100, line_no=10, throughput=5.0), T0)
    assert not tracker.observe(ProgressSample(iteration=100, line_no=10), T0 + timedelta(seconds=30))
    assert tracker.last_progress_at == T0  # the same line seen again is no progress
    # the job was requeued and resumed from iteration 50 (a new attempt)
    assert tracker.observe(ProgressSample(iteration=50, line_no=3), T0 + timedelta(seconds=600))
    assert tracker.restarts_seen == 1 and tracker.last_iteration == 50
    assert tracker.rates == []  # the new attempt builds its own throughput baseline
    assert tracker.iteration_intervals_s == []  # the gap across the restart is no normal interval


def test_tracker_counts_lines_without_step_numbers() -> None:
    tracker = ProgressTracker()
    assert tracker.observe(ProgressSample(loss=2.0, line_no=5, source="hf"), T0)
    assert not tracker.observe(ProgressSample(loss=2.0, line_no=5, source="hf"), T0 + timedelta(seconds=5))
    assert tracker.observe(ProgressSample(loss=1.9, line_no=9, source="hf"), T0 + timedelta(seconds=10))
    assert tracker.iteration_intervals_s == [10.0]


def test_tracker_is_bounded_and_round_trips() -> None:
    tracker = ProgressTracker(max_samples=8)
    for i in range(100):
        tracker.observe(ProgressSample(iteration=i, line_no=i, throughput=float(i + 1)), T0 + timedelta(seconds=i))
    assert len(tracker.iteration_intervals_s) == 8 and len(tracker.rates) == 8
    again = ProgressTracker.model_validate_json(tracker.model_dump_json())
    assert again == tracker
    assert ProgressTracker.model_validate({}).last_iteration is None  # every field has a default


NONE, LEARNED, RECOGNISED, USER = (ProgressSignal.NONE, ProgressSignal.LEARNED, ProgressSignal.RECOGNISED,
                                   ProgressSignal.USER_PATTERN)
STOPPED, COMM, IDLE = HangEvidence.PROGRESS_STOPPED, HangEvidence.COMM_HANG_PATTERN, HangEvidence.GPUS_IDLE


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        # a job with no progress signal at all is never hung for lack of progress
        ({"progress_signal": NONE}, None),
        ({"progress_signal": NONE, "gpus_idle": None}, None),  # metrics unknown: not idle
        ({"progress_signal": NONE, "gpus_idle": False}, None),
        ({"progress_signal": NONE, "gpus_idle": True}, IDLE),
        ({"progress_signal": NONE, "comm_hang_seen": True}, COMM),
        # a progress signal that was seen and then stopped
        ({"progress_signal": RECOGNISED}, STOPPED),
        ({"progress_signal": LEARNED}, STOPPED),
        ({"progress_signal": USER}, STOPPED),
        # ... unless its last line was a finished bar (the next phase may print nothing we know)
        ({"progress_signal": LEARNED, "progress_finished": True}, None),
        ({"progress_signal": LEARNED, "progress_finished": True, "comm_hang_seen": True}, COMM),
        # inside the bound, or not running: nothing, whatever the evidence
        ({"progress_signal": RECOGNISED, "seconds_since_progress": 100.0}, None),
        ({"progress_signal": NONE, "gpus_idle": True, "seconds_since_progress": 100.0}, None),
        ({"progress_signal": RECOGNISED, "running": False}, None),
        ({"progress_signal": RECOGNISED, "seconds_since_progress": None}, None),
    ],
)
def test_hang_needs_evidence(facts: dict, expected: HangEvidence | None) -> None:
    base = {"running": True, "seconds_since_progress": 1000.0, "bound_s": 300.0}
    assert hang_evidence(**{**base, **facts}) is expected


@dataclass
class _Gpu:
    util_mean: float | None


@dataclass
class _Host:
    has_data: bool
    gpus: list[_Gpu] = field(default_factory=list)


@pytest.mark.parametrize(
    ("hosts", "idle"),
    [
        ([_Host(True, [_Gpu(0.0), _Gpu(0.5)]), _Host(True, [_Gpu(1.0)])], True),
        ([_Host(True, [_Gpu(0.0), _Gpu(35.0)])], False),  # one busy GPU: the job is doing something
        ([_Host(True, [_Gpu(0.0)]), _Host(False)], False),  # a host without data: unknown, not idle
        ([_Host(True, [_Gpu(None)])], False),  # no utilisation series
        ([_Host(True, [])], False),
        ([], False),
    ],
)
def test_all_gpus_idle(hosts: list[_Host], idle: bool) -> None:
    assert all_gpus_idle(hosts) is idle


def test_hang_watch_label_says_when_a_job_is_watched_for_crashes_only() -> None:
    assert hang_watch_label(LEARNED) == "on (learned)"
    assert hang_watch_label(USER) == "on (user pattern)"
    assert hang_watch_label(NONE).startswith("off (no progress signal")
    assert "progress_pattern not matched yet" in hang_watch_label(NONE, user_pattern=True)
    assert "GPU idle" in hang_watch_label(NONE, gpu_metrics=True)


def test_a_save_logged_when_it_starts_marks_the_stall_after_it() -> None:
    """Polls see samples together: a save at the poll of step 100 makes the long gap to step 101 a checkpoint stall."""
    tracker = ProgressTracker()
    t = T0
    for it in range(1, 11):
        t += timedelta(seconds=20)
        if it == 5:
            tracker.observe(ProgressSample(checkpoint=True, checkpoint_iteration=5), t)  # checkpoints first
        tracker.observe(ProgressSample(iteration=it), t)
        if it == 5:
            t += timedelta(seconds=400)  # the save stalls training
    assert 420.0 in tracker.checkpoint_intervals_s
    assert 420.0 not in tracker.iteration_intervals_s
    assert tracker.bound(**KW) >= 1.5 * 420.0


def test_a_save_logged_when_it_ends_marks_the_stall_before_it() -> None:
    tracker = ProgressTracker()
    t = T0
    for it in range(1, 11):
        t += timedelta(seconds=420 if it == 6 else 20)
        if it == 6:
            tracker.observe(ProgressSample(checkpoint=True, checkpoint_iteration=5), t)
        tracker.observe(ProgressSample(iteration=it), t)
    assert tracker.checkpoint_intervals_s[0] == 420.0 and 420.0 not in tracker.iteration_intervals_s


def test_switching_the_progress_source_forgets_its_numbers_not_its_rhythm() -> None:
    tracker = ProgressTracker(source="learned")
    tracker.observe(ProgressSample(iteration=40), T0)
    tracker.switch_source("recognised")
    assert tracker.observe(ProgressSample(iteration=3), T0 + timedelta(seconds=10))  # not a restart: a new source
    assert tracker.restarts_seen == 0 and tracker.iteration_intervals_s == [10.0]


def test_a_finished_bar_is_remembered_until_the_next_progress() -> None:
    tracker = ProgressTracker()
    tracker.observe(ProgressSample(iteration=100, finished=True), T0)
    assert tracker.last_finished
    tracker.observe(ProgressSample(iteration=101), T0 + timedelta(seconds=5))
    assert not tracker.last_finished
