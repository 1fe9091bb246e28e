"""Properties of the decision policy over generated verdicts, jobs, histories and configs.

Determinism (same input, same output, whatever the order of hosts or dict keys),
the safety promises (never restart past the budget, never exclude a node that was
not implicated, no exclusion lists on STOP/HOLD), and a simulated recovery loop.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from workflows.contracts import (
    Advice,
    AdviceAction,
    Category,
    Implicated,
    JobInfo,
    OptIn,
    OptInResult,
    PolicyConfig,
    Verdict,
)
from workflows.history import JobHistory
from workflows.policy import HARDWARE_CATEGORIES, Rule, SystemicView, decide, is_restart, systemic_view

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
NODES = ["node1", "node2", "node3", "node4", "gpu-a17"]
SIGNATURES = ["KeyError@train.py:88", "illegal-address@k3"]
ISOLATING = {AdviceAction.RESTART_EXCLUDE, AdviceAction.RESTART_DRAIN}

# No example database on disk (the checkout is shared) and no deadline (the machine is shared);
# a decorator rather than a loaded profile, so other test modules keep their own settings.
policy_settings = settings(database=None, deadline=None, max_examples=200)


@dataclass(frozen=True)
class Step:
    category: Category
    hosts: tuple[str, ...]
    signature: str | None
    action: AdviceAction
    checkpointed: bool
    minutes_ago: int


hosts_st = st.lists(st.sampled_from(NODES), max_size=4).map(tuple)
signature_st = st.none() | st.sampled_from(SIGNATURES)
verdict_st = st.builds(
    lambda category, hosts, signature: Verdict(
        category=category, implicated=Implicated(hosts=list(hosts)), deterministic_signature=signature
    ),
    st.sampled_from(list(Category)),
    hosts_st,
    signature_st,
)
step_st = st.builds(
    Step,
    category=st.sampled_from(list(Category)),
    hosts=hosts_st,
    signature=signature_st,
    action=st.sampled_from(list(AdviceAction)),
    checkpointed=st.booleans(),
    minutes_ago=st.integers(min_value=1, max_value=3 * 24 * 60),
)
config_st = st.builds(
    PolicyConfig,
    max_attempts=st.integers(min_value=0, max_value=6),
    attempts_window_s=st.sampled_from([600.0, 3600.0, 86400.0]),
    no_checkpoint_attempts=st.integers(min_value=1, max_value=4),
    same_error_stop_after=st.integers(min_value=1, max_value=3),
    oom_stop_after=st.integers(min_value=1, max_value=3),
    transient_restart_limit=st.integers(min_value=0, max_value=3),
    systemic_jobs=st.integers(min_value=1, max_value=6),
    drain_nodes=st.booleans(),
)
job_st = st.builds(
    lambda exit_code, max_attempts, checkpoint_dir: JobInfo(
        cluster="lab",
        job_id="100",
        exit_code=exit_code,
        opt_in=OptInResult(
            opted_in=True, opt_in=OptIn(max_attempts=max_attempts, checkpoint_dir=checkpoint_dir)
        ),
    ),
    st.sampled_from([None, 0, 1, 93, 137]),
    st.none() | st.integers(min_value=0, max_value=6),
    st.none() | st.just("/checkpoints"),
)
systemic_st = st.none() | st.builds(
    lambda ids, hosts: SystemicView(window_s=300, job_ids=sorted(set(ids)), hosts=sorted(set(hosts))),
    st.lists(st.sampled_from([str(n) for n in range(100, 108)]), max_size=7),
    hosts_st,
)
override_st = st.none() | st.integers(min_value=0, max_value=6)


def build_history(steps: list[Step], current_checkpointed: bool) -> JobHistory:
    history = JobHistory()
    iteration = 0
    for step in sorted(steps, key=lambda s: -s.minutes_ago):
        ended = NOW - timedelta(minutes=step.minutes_ago)
        history = history.start_attempt(at=ended - timedelta(minutes=1))
        if step.checkpointed:
            iteration += 100
            history = history.note_checkpoint(iteration)
        verdict = Verdict(
            category=step.category,
            implicated=Implicated(hosts=list(step.hosts)),
            deterministic_signature=step.signature,
        )
        history = history.record_outcome(verdict, Advice(action=step.action, rule="earlier"), ended_at=ended)
    history = history.start_attempt(at=NOW - timedelta(seconds=30))
    if current_checkpointed:
        history = history.note_checkpoint(iteration + 100)
    return history


history_st = st.builds(build_history, st.lists(step_st, max_size=8), st.booleans())


def effective_budget(job: JobInfo, config: PolicyConfig, override: int | None) -> int:
    if override is not None:
        return override
    if job.opt_in.opt_in is not None and job.opt_in.opt_in.max_attempts is not None:
        return job.opt_in.opt_in.max_attempts
    return config.max_attempts


@policy_settings
@given(verdict_st, job_st, history_st, config_st, systemic_st, override_st)
def test_safety_promises(
    verdict: Verdict,
    job: JobInfo,
    history: JobHistory,
    config: PolicyConfig,
    systemic: SystemicView | None,
    override: int | None,
) -> None:
    advice = decide(verdict, job, history, config, now=NOW, systemic=systemic, max_attempts_override=override)

    assert advice.rule in {rule.value for rule in Rule}
    assert advice.reason
    # never restart past the budget (this failure included); where checkpoints are tracked, an attempt that
    # saved a new one earned its restart and is not counted (a budget of one still never restarts)
    if is_restart(advice.action):
        budget = effective_budget(job, config, override)
        opt = job.opt_in.opt_in
        tracked = history.last_checkpoint_iteration is not None or bool(opt and opt.checkpoint_dir)
        if tracked and budget > 1:
            used = history.recent_unproductive_attempts(now=NOW, window_s=config.attempts_window_s)
            used += 0 if history.current_made_checkpoint else 1
        else:
            used = history.recent_attempts(now=NOW, window_s=config.attempts_window_s) + 1
        assert used < budget
    # exclusions: only implicated hosts, distinct and sorted; drains only of excluded hosts
    assert set(advice.exclude_nodes) <= set(verdict.implicated.hosts)
    assert advice.exclude_nodes == sorted(set(advice.exclude_nodes))
    assert set(advice.drain_nodes) <= set(advice.exclude_nodes)
    # only the isolating actions carry lists, and they always do
    assert bool(advice.exclude_nodes) == (advice.action in ISOLATING)
    assert bool(advice.drain_nodes) == (advice.action == AdviceAction.RESTART_DRAIN)
    if advice.action == AdviceAction.RESTART_DRAIN:
        assert config.drain_nodes and verdict.category in HARDWARE_CATEGORIES
    # the job's own "do not restart" always wins
    if job.exit_code == config.do_not_restart_exit_code:
        assert (advice.action, advice.rule) == (AdviceAction.STOP, Rule.DO_NOT_RESTART_EXIT_CODE)
    # hold only on a systemic view at the threshold
    if advice.action == AdviceAction.HOLD:
        assert systemic is not None
        assert len({*systemic.job_ids, job.job_id}) >= config.systemic_jobs


@policy_settings
@given(verdict_st, job_st, history_st, config_st, systemic_st, override_st, st.randoms(use_true_random=False))
def test_deterministic_and_order_independent(
    verdict: Verdict,
    job: JobInfo,
    history: JobHistory,
    config: PolicyConfig,
    systemic: SystemicView | None,
    override: int | None,
    rnd: random.Random,
) -> None:
    inputs = [m.model_dump() for m in (verdict, job, history, config)]
    first = decide(verdict, job, history, config, now=NOW, systemic=systemic, max_attempts_override=override)
    again = decide(verdict, job, history, config, now=NOW, systemic=systemic, max_attempts_override=override)
    assert first == again
    assert [m.model_dump() for m in (verdict, job, history, config)] == inputs  # inputs untouched

    # the same facts in another order: hosts, dict keys, systemic lists
    hosts = list(verdict.implicated.hosts)
    rnd.shuffle(hosts)
    shuffled_verdict = verdict.model_copy(update={"implicated": Implicated(hosts=hosts)})
    counts = list(history.implicated_counts.items())
    rnd.shuffle(counts)
    shuffled_history = history.model_copy(update={"implicated_counts": dict(counts)})
    shuffled_systemic = None
    if systemic is not None:
        ids, view_hosts = list(systemic.job_ids), list(systemic.hosts)
        rnd.shuffle(ids)
        rnd.shuffle(view_hosts)
        shuffled_systemic = systemic.model_copy(update={"job_ids": ids, "hosts": view_hosts})
    other = decide(
        shuffled_verdict,
        job,
        shuffled_history,
        config,
        now=NOW,
        systemic=shuffled_systemic,
        max_attempts_override=override,
    )
    assert other == first


@policy_settings
@given(
    config_st,
    st.lists(st.tuples(verdict_st, st.integers(min_value=1, max_value=120)), min_size=1, max_size=12),
)
def test_recovery_loop_never_restarts_past_the_budget(
    config: PolicyConfig, failures: list[tuple[Verdict, int]]
) -> None:
    """Feed failures one after another, as the workflow would, recording each outcome."""
    history = JobHistory()
    now = NOW
    job = JobInfo(cluster="lab", job_id="100", exit_code=1)
    restarts: list[datetime] = []
    for verdict, minutes_later in failures:
        history = history.start_attempt(at=now)
        now = now + timedelta(minutes=minutes_later)
        advice = decide(verdict, job, history, config, now=now)
        history = history.record_outcome(verdict, advice, ended_at=now)
        if is_restart(advice.action):
            restarts.append(now)
            in_window = [t for t in restarts if (now - t).total_seconds() <= config.attempts_window_s]
            assert len(in_window) <= max(config.max_attempts - 1, 0)
        if advice.action == AdviceAction.STOP:
            break
    assert len(history.attempts) <= len(failures)


failure_st = st.tuples(
    st.sampled_from([str(n) for n in range(100, 110)]),
    st.integers(min_value=0, max_value=900).map(lambda s: NOW - timedelta(seconds=s)),
    st.sampled_from([c.value for c in Category] + ["something_new"]),
    st.lists(st.sampled_from(NODES), max_size=3),
)


@policy_settings
@given(st.lists(failure_st, max_size=20), config_st, st.randoms(use_true_random=False))
def test_systemic_view_is_order_independent_and_windowed(
    failures: list[tuple[str, datetime, str, list[str]]], config: PolicyConfig, rnd: random.Random
) -> None:
    view = systemic_view(failures, now=NOW, config=config)
    shuffled = list(failures)
    rnd.shuffle(shuffled)
    assert systemic_view(shuffled, now=NOW, config=config) == view
    assert view.job_ids == sorted(set(view.job_ids))
    assert view.hosts == sorted(set(view.hosts))
    for job_id in view.job_ids:
        assert any(
            f[0] == job_id and (NOW - f[1]).total_seconds() <= config.systemic_window_s for f in failures
        )
