"""Sustained throughput drops are stragglers; warm-up, checkpoints and one slow step are not."""

from __future__ import annotations

import pytest

from activities.detection.progress import ProgressSample
from activities.detection.straggler import detect_slowdown, slow_hosts, slowdown_from_samples

WARM = [20.0, 60.0, 80.0]  # warm-up: compilation and data loader start
STEADY = [100.0, 102.0, 98.0, 101.0, 99.0, 100.0, 103.0, 97.0]


@pytest.mark.parametrize(
    ("name", "rates", "skip", "sustained", "slow_run"),
    [
        ("steady", WARM + STEADY, (), False, 0),
        ("slow warm-up only", [5.0, 5.0, 5.0] + STEADY, (), False, 0),
        ("one slow step", WARM + STEADY + [40.0] + [100.0, 99.0], (), False, 0),
        ("one slow step at the end", WARM + STEADY + [40.0], (), False, 1),
        ("two slow steps", WARM + STEADY + [60.0, 60.0], (), False, 2),
        ("sustained drop", WARM + STEADY + [60.0, 55.0, 62.0], (), True, 3),
        ("long drop", WARM + STEADY + [50.0] * 10, (), True, 10),
        ("drop then recovery", WARM + STEADY + [50.0] * 5 + [100.0], (), False, 0),
        ("mild dip above threshold", WARM + STEADY + [75.0] * 6, (), False, 0),
        ("checkpoint step skipped", WARM + STEADY + [60.0, 10.0, 60.0], {len(WARM + STEADY) + 1}, False, 2),
        ("too little history", WARM + [100.0, 100.0, 50.0, 50.0, 50.0], (), False, 0),
        ("gaps ignored", WARM + STEADY + [None, 50.0, float("nan"), 50.0, 50.0], (), True, 3),
    ],
)
def test_detect_slowdown_table(name: str, rates: list, skip, sustained: bool, slow_run: int) -> None:
    result = detect_slowdown(rates, skip=skip)
    assert (result.sustained, result.slow_run) == (sustained, slow_run), name


def test_slowdown_figures() -> None:
    result = detect_slowdown(WARM + STEADY + [50.0, 50.0, 50.0])
    assert result.baseline == pytest.approx(100.0)
    assert result.current == pytest.approx(50.0)
    assert result.ratio == pytest.approx(0.5)
    assert result.since_index == len(WARM + STEADY)


def test_baseline_follows_recent_healthy_window() -> None:
    # the job got faster over time; the baseline is the recent speed, not the old one
    rates = WARM + [50.0] * 30 + [100.0] * 20 + [65.0, 65.0, 65.0]
    result = detect_slowdown(rates, window=10)
    assert result.baseline == pytest.approx(100.0) and result.sustained


def test_slowdown_from_samples_skips_the_step_after_a_checkpoint() -> None:
    samples = [ProgressSample(iteration=i, iter_time_s=1.0) for i in range(12)]
    samples += [ProgressSample(checkpoint=True, checkpoint_iteration=11)]
    samples += [ProgressSample(iteration=12, iter_time_s=30.0)]  # includes the save
    samples += [ProgressSample(iteration=13, iter_time_s=1.0), ProgressSample(iteration=14, iter_time_s=1.0)]
    assert not slowdown_from_samples(samples).sustained
    slow = samples + [ProgressSample(iteration=15 + i, iter_time_s=2.0) for i in range(3)]
    assert slowdown_from_samples(slow).sustained


@pytest.mark.parametrize(
    ("metric", "higher_is_better", "expected"),
    [
        ({"n1": [95, 96, 94], "n2": [97, 95, 96], "n3": [40, 42, 41], "n4": [96, 95, 97]}, True, ["n3"]),
        ({"n1": [95, 96], "n2": [97, 95], "n3": [94, 96]}, True, []),  # all alike
        ({"n1": [90], "n2": [45]}, True, ["n2"]),  # two hosts: the slow one
        ({"n1": [40], "n2": [42], "n3": [41], "n4": [95]}, True, []),  # most hosts "slow": the job changed, not a host
        ({"n1": [0.0], "n2": [0.0], "n3": [0.0]}, True, []),  # an idle job points at nobody
        ({"n1": [1.0, 1.1], "n2": [1.0, 0.9], "n3": [2.5, 2.4]}, False, ["n3"]),  # step time: higher is worse
        ({"n1": [95, float("nan")], "n2": [], "n3": [96], "n4": [30]}, True, ["n4"]),  # gaps and empty series
        ({"n1": [95]}, True, []),  # one host: nothing to compare with
    ],
)
def test_slow_hosts_table(metric: dict, higher_is_better: bool, expected: list[str]) -> None:
    assert slow_hosts(metric, higher_is_better=higher_is_better) == expected
