"""Properties of the goodput simulator that would fail if the model or its use of the real policy broke."""

from __future__ import annotations

import pytest

from workers.simulation.engine import (
    PRESETS,
    STRATEGIES,
    SimConfig,
    SimulationError,
    simulate,
    simulate_run,
    summarise,
)

QUIET = dict(failures_per_1000_node_days=0.0, bad_node_fraction=0.0)


def runs(cfg: SimConfig, strategy: str, n: int = 8, seed: str = "t"):
    return [simulate_run(cfg, strategy, seed=f"{seed}/{i}") for i in range(n)]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_without_failures_every_strategy_keeps_all_its_training_time(strategy):
    result = simulate_run(SimConfig(gpus=512, checkpoint_write_s=0.0, **QUIET), strategy, seed=1)
    assert result.failures == 0
    assert result.ettr == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_without_failures_only_the_checkpoint_stalls_are_lost(strategy):
    cfg = SimConfig(gpus=64, checkpoint_interval_s=3600.0, checkpoint_write_s=60.0, **QUIET)
    assert simulate_run(cfg, strategy, seed=1).ettr == pytest.approx(3600 / 3660, abs=2e-4)


def test_jobmedic_keeps_more_training_time_than_plain_requeue_when_a_bad_node_repeats():
    cfg = SimConfig(gpus=64, forced_bad_nodes=1, bad_node_mtbf_h=4.0, **QUIET)
    jobmedic, requeue = summarise(runs(cfg, "jobmedic")), summarise(runs(cfg, "requeue"))
    assert requeue.bad_node_repeats_per_week > 10  # Slurm puts the job back on the bad node, week-long
    assert jobmedic.bad_node_repeats_per_week < requeue.bad_node_repeats_per_week / 5
    assert jobmedic.ettr > requeue.ettr
    assert jobmedic.rules.get("hardware_exclude", 0) >= 8  # one per run: the policy excluded the node
    assert jobmedic.stops_per_week == 0  # ... and jobmedic restarted without it, no person needed


def test_the_bad_node_is_the_one_jobmedic_excludes():
    cfg = SimConfig(gpus=64, forced_bad_nodes=1, bad_node_mtbf_h=4.0, **QUIET)
    result = simulate_run(cfg, "jobmedic", seed=3)
    excluded = [r for r in result.recoveries if r.action == "restart_exclude"]
    assert excluded and {r.node for r in excluded} == {"node00000"}
    assert all(r.node == "node00000" for r in result.recoveries)
    assert result.recoveries[-1].failed_at_s < 3 * 86400  # and then it stopped failing


def test_more_frequent_checkpoints_lose_less_work_until_the_write_time_dominates():
    base = dict(gpus=4096, failures_per_1000_node_days=PRESETS["rsc1"], bad_node_fraction=0.0,
                checkpoint_write_s=60.0)
    by_interval = {
        s: summarise(runs(SimConfig(checkpoint_interval_s=float(s), **base), "requeue", n=6))
        for s in (60, 600, 1800, 3600, 14400)
    }
    lost = [by_interval[s].lost_work_h_per_week for s in (600, 1800, 3600, 14400)]
    assert lost == sorted(lost) and lost[0] < lost[-1] / 4
    ettr = {s: v.ettr for s, v in by_interval.items()}
    assert ettr[600] > ettr[60] + 0.2  # writing half the time costs more than the work it saves
    assert ettr[600] > ettr[14400]


def test_a_failure_the_real_policy_stops_is_not_restarted_by_jobmedic():
    # with max_attempts 1 the policy's attempt_budget rule stops every failure
    cfg = SimConfig(gpus=4096, max_attempts=1, bad_node_fraction=0.0)
    result = simulate_run(cfg, "jobmedic", seed=5)
    assert result.recoveries
    assert {(r.action, r.rule, r.by) for r in result.recoveries} == {("stop", "attempt_budget", "person")}
    assert all(r.starts_at_s - r.failed_at_s >= cfg.triage_min_s for r in result.recoveries)
    assert result.stops == result.failures
    # the same job with the policy's own budget is restarted by jobmedic
    free = simulate_run(SimConfig(gpus=4096, bad_node_fraction=0.0), "jobmedic", seed=5)
    assert any(r.by == "jobmedic" for r in free.recoveries)


def test_a_stopped_job_that_nobody_resubmits_never_trains_again():
    month = 30 * 86400.0
    cfg = SimConfig(gpus=16384, max_attempts=1, triage_min_s=month, triage_max_s=month, bad_node_fraction=0.0)
    result = simulate_run(cfg, "jobmedic", seed=2)
    assert len(result.recoveries) == 1
    assert result.productive_s <= result.recoveries[0].failed_at_s
    assert result.ettr < simulate_run(cfg, "requeue", seed=2).ettr


def test_manual_recovery_of_a_failure_at_night_waits_for_the_morning():
    cfg = SimConfig(gpus=4096, bad_node_fraction=0.0, start_hour=0.0)
    recoveries = [r for res in runs(cfg, "manual", n=3) for r in res.recoveries if r.presentation == "crash"]
    night = [r for r in recoveries if (r.failed_at_s / 3600) % 24 < 7]
    day = [r for r in recoveries if 9 <= (r.failed_at_s / 3600) % 24 < 20]
    assert night and day
    for r in night:
        until_morning = (8 - (r.failed_at_s / 3600) % 24) * 3600
        assert r.starts_at_s - r.failed_at_s >= until_morning + cfg.triage_min_s
    for r in day:
        assert r.starts_at_s - r.failed_at_s <= cfg.triage_max_s + cfg.action_to_running_s + cfg.queue_wait_s + 1e-6


def test_the_same_seed_gives_the_same_figures_and_another_seed_others():
    cfg = SimConfig(bad_node_fraction=0.01)
    one = simulate(cfg, sizes=(512, 4096), runs=3, seed=7)
    assert one == simulate(cfg, sizes=(512, 4096), runs=3, seed=7)
    assert one != simulate(cfg, sizes=(512, 4096), runs=3, seed=8)


def test_the_baselines_see_the_same_bad_nodes_as_jobmedic():
    cfg = SimConfig(gpus=16384, bad_node_fraction=0.01)
    first = {s: simulate_run(cfg, s, seed=4).recoveries[0] for s in STRATEGIES}
    assert len({(r.failed_at_s, r.node, r.failure_class) for r in first.values()}) == 1


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"gpus_per_node": 0}, "--gpus-per-node"),
        ({"days": -1.0}, "--days"),
        ({"days": 1000.0}, "--days"),
        ({"bad_node_fraction": 1.5}, "--bad-node-fraction"),
        ({"checkpoint_interval_s": 0.0}, "--checkpoint-interval-s"),
        ({"checkpoint_write_s": float("nan")}, "--checkpoint-write-s"),
        ({"triage_min_s": 7200.0, "triage_max_s": 60.0}, "--triage-min-s"),
        ({"night_end_h": 24.0}, "--night-end-h"),
        ({"forced_bad_nodes": 9, "gpus": 64}, "--forced-bad-nodes"),
        ({"max_attempts": 0}, "--max-attempts"),
    ],
)
def test_out_of_range_settings_are_refused_naming_the_option(change, named):
    with pytest.raises(SimulationError, match=named):
        SimConfig(**change)
