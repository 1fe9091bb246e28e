"""Table tests of the decision policy: every rule, and the precedence between rules.

Each row builds a verdict, a job, a history (through JobHistory's own methods,
the way the workflow builds it) and a config, and names the advice expected:
action, rule, excluded and drained nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pytest

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
from workflows.policy import Rule, SystemicView, decide

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
A = AdviceAction
C = Category


@dataclass(frozen=True)
class Past:
    """One closed attempt of the history under test."""

    category: Category
    signature: str | None = None
    hosts: tuple[str, ...] = ()
    action: AdviceAction = AdviceAction.RESTART
    checkpoint: int | None = None  # a checkpoint saved during the attempt
    hours_ago: float = 1.0  # when it ended


def history_of(*past: Past, current_checkpoint: int | None = None) -> JobHistory:
    """A history of closed attempts `past` (oldest first) and a running current attempt."""
    history = JobHistory()
    for step in past:
        ended = NOW - timedelta(hours=step.hours_ago)
        history = history.start_attempt(at=ended - timedelta(minutes=30))
        if step.checkpoint is not None:
            history = history.note_checkpoint(step.checkpoint)
        verdict = Verdict(
            category=step.category,
            deterministic_signature=step.signature,
            implicated=Implicated(hosts=list(step.hosts)),
        )
        history = history.record_outcome(verdict, Advice(action=step.action, rule="earlier"), ended_at=ended)
    history = history.start_attempt(at=NOW - timedelta(minutes=10))
    if current_checkpoint is not None:
        history = history.note_checkpoint(current_checkpoint)
    return history


def verdict(category: Category, *hosts: str, signature: str | None = None) -> Verdict:
    return Verdict(category=category, implicated=Implicated(hosts=list(hosts)), deterministic_signature=signature)


def job(*, exit_code: int | None = 1, max_attempts: int | None = None, checkpoint_dir: str | None = None) -> JobInfo:
    opt_in = OptIn(environment="test", max_attempts=max_attempts, checkpoint_dir=checkpoint_dir)
    return JobInfo(
        cluster="lab",
        job_id="100",
        exit_code=exit_code,
        nodes=["node1", "node2", "node3", "node4"],
        opt_in=OptInResult(opted_in=True, opt_in=opt_in),
    )


def systemic(*job_ids: str, hosts: tuple[str, ...] = ("switch-a",)) -> SystemicView:
    return SystemicView(window_s=300, job_ids=sorted(job_ids), hosts=list(hosts), categories=[C.INTERCONNECT])


@dataclass(frozen=True)
class Case:
    id: str
    verdict: Verdict
    expect: tuple[AdviceAction, Rule]
    exclude: tuple[str, ...] = ()
    drain: tuple[str, ...] = ()
    job: JobInfo = field(default_factory=job)
    history: JobHistory = field(default_factory=history_of)
    config: PolicyConfig = field(default_factory=PolicyConfig)
    systemic: SystemicView | None = None
    max_attempts_override: int | None = None


FOUR_FAILED = tuple(Past(C.APP_ERROR, signature=f"sig{i}") for i in range(4))  # 4 of the default 5 attempts
TRACKED_NO_PROGRESS = (Past(C.NCCL_ERROR, hosts=("node9",), checkpoint=100), Past(C.INTERCONNECT), Past(C.HANG))
BUSY = systemic("201", "202", "203", "204")  # with the job under test: 5 jobs, the default threshold

# --------------------------------------------------------------------------- one row per rule

RULE_CASES = [
    Case("exit 93 stops", verdict(C.APP_ERROR), (A.STOP, Rule.DO_NOT_RESTART_EXIT_CODE), job=job(exit_code=93)),
    Case(
        "configured do-not-restart code",
        verdict(C.APP_ERROR),
        (A.STOP, Rule.DO_NOT_RESTART_EXIT_CODE),
        job=job(exit_code=42),
        config=PolicyConfig(do_not_restart_exit_code=42),
    ),
    Case("none is nothing", verdict(C.NONE), (A.NOTHING, Rule.NOTHING_WRONG), job=job(exit_code=None)),
    Case("unknown cause restarts once", verdict(C.UNKNOWN), (A.RESTART, Rule.UNKNOWN_CAUSE_RESTART)),
    Case("preemption left to slurm", verdict(C.PREEMPTED), (A.LEAVE_TO_SLURM, Rule.PREEMPTED_LEAVE_TO_SLURM)),
    Case("systemic outage holds", verdict(C.INTERCONNECT, "node2"), (A.HOLD, Rule.SYSTEMIC_HOLD), systemic=BUSY),
    Case(
        "budget spent",
        verdict(C.GPU_HARDWARE, "node1"),
        (A.STOP, Rule.ATTEMPT_BUDGET),
        history=history_of(*FOUR_FAILED),
    ),
    Case(
        "no checkpoint across attempts",
        verdict(C.NCCL_TIMEOUT),
        (A.STOP, Rule.NO_CHECKPOINT_PROGRESS),
        history=history_of(*TRACKED_NO_PROGRESS),
    ),
    Case(
        "gpu hardware excluded",
        verdict(C.GPU_HARDWARE, "node3"),
        (A.RESTART_EXCLUDE, Rule.HARDWARE_EXCLUDE),
        exclude=("node3",),
    ),
    Case(
        "interconnect drained when configured",
        verdict(C.INTERCONNECT, "node4", "node2"),
        (A.RESTART_DRAIN, Rule.HARDWARE_EXCLUDE),
        exclude=("node2", "node4"),
        drain=("node2", "node4"),
        config=PolicyConfig(drain_nodes=True),
    ),
    Case("node failure without host", verdict(C.NODE_FAILURE), (A.RESTART, Rule.HARDWARE_RESTART)),
    Case(
        "time limit after a checkpoint",
        verdict(C.TIME_LIMIT),
        (A.RESTART, Rule.TIME_LIMIT_CHECKPOINT),
        history=history_of(current_checkpoint=500),
    ),
    Case("time limit without checkpoint", verdict(C.TIME_LIMIT), (A.STOP, Rule.TIME_LIMIT_NO_CHECKPOINT)),
    Case(
        "time limit, old checkpoint only",
        verdict(C.TIME_LIMIT),
        (A.STOP, Rule.TIME_LIMIT_NO_CHECKPOINT),
        history=history_of(Past(C.HANG, checkpoint=300)),
    ),
    Case("first gpu oom restarts", verdict(C.GPU_OOM, "node1"), (A.RESTART, Rule.OOM_RESTART)),
    Case(
        "second oom stops",
        verdict(C.HOST_OOM),
        (A.STOP, Rule.OOM_REPEAT),
        history=history_of(Past(C.GPU_OOM)),
    ),
    Case("first data io restarts", verdict(C.DATA_IO, "node2"), (A.RESTART, Rule.DATA_IO_RESTART)),
    Case(
        "second data io stops",
        verdict(C.DATA_IO),
        (A.STOP, Rule.DATA_IO_REPEAT),
        history=history_of(Past(C.DATA_IO), Past(C.HANG)),
    ),
    Case(
        "same app error twice",
        verdict(C.APP_ERROR, signature="KeyError:model.py:12"),
        (A.STOP, Rule.SAME_APP_ERROR_TWICE),
        history=history_of(Past(C.APP_ERROR, signature="KeyError:model.py:12")),
    ),
    Case(
        "unsigned app error twice in a row",
        verdict(C.APP_ERROR),
        (A.STOP, Rule.APP_ERROR_REPEAT_UNSIGNED),
        history=history_of(Past(C.APP_ERROR)),
    ),
    Case(
        "attributed nccl error excludes",
        verdict(C.NCCL_ERROR, "node2"),
        (A.RESTART_EXCLUDE, Rule.NCCL_EXCLUDE),
        exclude=("node2",),
    ),
    Case("transient nccl restarts", verdict(C.NCCL_TIMEOUT), (A.RESTART, Rule.TRANSIENT_NCCL_RESTART)),
    Case(
        "transient nccl limit",
        verdict(C.NCCL_ERROR),
        (A.STOP, Rule.TRANSIENT_LIMIT),
        history=history_of(Past(C.NCCL_TIMEOUT), Past(C.NCCL_ERROR), Past(C.NCCL_TIMEOUT)),
    ),
    Case(
        "hang on a host excludes it",
        verdict(C.HANG, "node4"),
        (A.RESTART_EXCLUDE, Rule.HANG_EXCLUDE),
        exclude=("node4",),
    ),
    Case("hang without host restarts", verdict(C.HANG), (A.RESTART, Rule.HANG_RESTART)),
    Case(
        "cuda error on a host excludes it",
        verdict(C.CUDA_ERROR, "node1"),
        (A.RESTART_EXCLUDE, Rule.CUDA_ERROR_EXCLUDE),
        exclude=("node1",),
    ),
    Case("cuda error without host", verdict(C.CUDA_ERROR), (A.RESTART, Rule.CUDA_ERROR_RESTART)),
    Case(
        "first app error restarts",
        verdict(C.APP_ERROR, "node1", signature="x"),
        (A.RESTART, Rule.APP_ERROR_RESTART),
    ),
]

# --------------------------------------------------------------------------- precedence and boundaries

PRECEDENCE_CASES = [
    # 1. the job's own "do not restart" beats everything, even "nothing wrong" and a systemic outage
    Case("93 beats nothing wrong", verdict(C.NONE), (A.STOP, Rule.DO_NOT_RESTART_EXIT_CODE), job=job(exit_code=93)),
    Case(
        "93 beats systemic hold",
        verdict(C.INTERCONNECT, "node1"),
        (A.STOP, Rule.DO_NOT_RESTART_EXIT_CODE),
        job=job(exit_code=93),
        systemic=BUSY,
    ),
    Case(
        "93 beats preemption",
        verdict(C.PREEMPTED),
        (A.STOP, Rule.DO_NOT_RESTART_EXIT_CODE),
        job=job(exit_code=93),
    ),
    Case("93 is not 1", verdict(C.NONE), (A.NOTHING, Rule.NOTHING_WRONG), job=job(exit_code=1)),
    # 2-3. nothing wrong and preemption spend no budget and ignore outages
    Case(
        "nothing wrong with budget spent",
        verdict(C.NONE),
        (A.NOTHING, Rule.NOTHING_WRONG),
        history=history_of(*FOUR_FAILED),
        systemic=BUSY,
    ),
    Case(
        "preemption with budget spent",
        verdict(C.PREEMPTED),
        (A.LEAVE_TO_SLURM, Rule.PREEMPTED_LEAVE_TO_SLURM),
        history=history_of(*FOUR_FAILED),
        systemic=systemic("201", "202", "203", "204", "205", "206"),
    ),
    # 4. systemic hold: before the budget, only for shared-infrastructure categories, at the threshold
    Case(
        "systemic beats budget",
        verdict(C.NCCL_TIMEOUT),
        (A.HOLD, Rule.SYSTEMIC_HOLD),
        history=history_of(*FOUR_FAILED),
        systemic=BUSY,
    ),
    Case(
        "systemic beats no-checkpoint",
        verdict(C.DATA_IO),
        (A.HOLD, Rule.SYSTEMIC_HOLD),
        history=history_of(*TRACKED_NO_PROGRESS),
        systemic=BUSY,
    ),
    Case(
        "app error during an outage is an app error",
        verdict(C.APP_ERROR),
        (A.RESTART, Rule.APP_ERROR_RESTART),
        systemic=BUSY,
    ),
    Case(
        "oom during an outage is an oom",
        verdict(C.GPU_OOM),
        (A.RESTART, Rule.OOM_RESTART),
        systemic=BUSY,
    ),
    Case(
        "one job short of systemic",
        verdict(C.INTERCONNECT, "node2"),
        (A.RESTART_EXCLUDE, Rule.HARDWARE_EXCLUDE),
        exclude=("node2",),
        systemic=systemic("201", "202", "203"),
    ),
    Case(
        "the job itself counts once",
        verdict(C.INTERCONNECT, "node2"),
        (A.RESTART_EXCLUDE, Rule.HARDWARE_EXCLUDE),
        exclude=("node2",),
        systemic=systemic("100", "201", "202", "203"),
    ),
    Case(
        "lower systemic threshold",
        verdict(C.HANG),
        (A.HOLD, Rule.SYSTEMIC_HOLD),
        systemic=systemic("201"),
        config=PolicyConfig(systemic_jobs=2),
    ),
    # 5. the budget: counts this failure, only inside the window, only attempts that got a restart
    Case(
        "budget beats hardware exclusion",
        verdict(C.GPU_HARDWARE, "node3"),
        (A.STOP, Rule.ATTEMPT_BUDGET),
        history=history_of(*FOUR_FAILED),
    ),
    Case(
        "budget beats no-checkpoint",
        verdict(C.HANG),
        (A.STOP, Rule.ATTEMPT_BUDGET),
        job=job(checkpoint_dir="/ckpt"),
        history=history_of(Past(C.NCCL_ERROR, hosts=("node9",)), Past(C.INTERCONNECT), Past(C.HANG), Past(C.HANG)),
    ),
    Case(
        "attempts that saved a checkpoint earned their restart",
        verdict(C.GPU_HARDWARE, "node7"),
        (A.RESTART_EXCLUDE, Rule.HARDWARE_EXCLUDE),
        exclude=("node7",),
        history=history_of(*(Past(C.GPU_HARDWARE, hosts=(f"node{i}",), checkpoint=100 * (i + 1), hours_ago=8 - i)
                             for i in range(6)), current_checkpoint=900),
    ),
    Case(
        "unproductive attempts still spend the budget",
        verdict(C.GPU_HARDWARE, "node7"),
        (A.STOP, Rule.ATTEMPT_BUDGET),
        history=history_of(Past(C.GPU_HARDWARE, hosts=("node1",), checkpoint=100), Past(C.INTERCONNECT),
                           Past(C.HANG), Past(C.GPU_HARDWARE, hosts=("node2",), checkpoint=200), Past(C.HANG),
                           Past(C.NCCL_ERROR, hosts=("node3",))),
        job=job(checkpoint_dir="/ckpt"),
    ),
    Case(
        "three of five leaves room",
        verdict(C.GPU_HARDWARE, "node3"),
        (A.RESTART_EXCLUDE, Rule.HARDWARE_EXCLUDE),
        exclude=("node3",),
        history=history_of(*FOUR_FAILED[:3]),
    ),
    Case(
        "attempts outside the window do not count",
        verdict(C.GPU_HARDWARE, "node3"),
        (A.RESTART_EXCLUDE, Rule.HARDWARE_EXCLUDE),
        exclude=("node3",),
        history=history_of(*(Past(C.HANG, hours_ago=30 + i) for i in range(4))),
    ),
    Case(
        "held and preempted attempts do not count",
        verdict(C.GPU_HARDWARE, "node3"),
        (A.RESTART_EXCLUDE, Rule.HARDWARE_EXCLUDE),
        exclude=("node3",),
        history=history_of(
            Past(C.INTERCONNECT, action=A.HOLD),
            Past(C.PREEMPTED, action=A.LEAVE_TO_SLURM),
            Past(C.HANG),
            Past(C.NONE, action=A.NOTHING),
        ),
    ),
    Case(
        "opt-in budget beats config",
        verdict(C.HANG),
        (A.STOP, Rule.ATTEMPT_BUDGET),
        job=job(max_attempts=2),
        history=history_of(Past(C.GPU_HARDWARE, hosts=("node1",))),
    ),
    Case(
        "override beats opt-in",
        verdict(C.HANG),
        (A.RESTART, Rule.HANG_RESTART),
        job=job(max_attempts=2),
        history=history_of(Past(C.GPU_HARDWARE, hosts=("node1",))),
        max_attempts_override=3,
    ),
    Case(
        "budget of one never restarts",
        verdict(C.NCCL_TIMEOUT),
        (A.STOP, Rule.ATTEMPT_BUDGET),
        config=PolicyConfig(max_attempts=1),
    ),
    # 6. no checkpoint progress: only when checkpoints are tracked; a new checkpoint resets the run
    Case(
        "untracked checkpoints fall to the category rule",
        verdict(C.HANG),
        (A.RESTART, Rule.HANG_RESTART),
        history=history_of(Past(C.HANG), Past(C.HANG)),
    ),
    Case(
        "opt-in checkpoint dir means tracked",
        verdict(C.HANG),
        (A.STOP, Rule.NO_CHECKPOINT_PROGRESS),
        job=job(checkpoint_dir="/ckpt"),
        history=history_of(Past(C.HANG), Past(C.INTERCONNECT)),
    ),
    Case(
        "new checkpoint in this attempt resets",
        verdict(C.HANG),
        (A.RESTART, Rule.HANG_RESTART),
        history=history_of(*TRACKED_NO_PROGRESS, current_checkpoint=200),
    ),
    Case(
        "one attempt short of no-checkpoint",
        verdict(C.HANG),
        (A.RESTART, Rule.HANG_RESTART),
        history=history_of(*TRACKED_NO_PROGRESS[:2]),
    ),
    Case(
        "no-checkpoint beats hardware exclusion",
        verdict(C.GPU_HARDWARE, "node1"),
        (A.STOP, Rule.NO_CHECKPOINT_PROGRESS),
        history=history_of(*TRACKED_NO_PROGRESS),
    ),
    Case(
        "no-checkpoint beats time limit",
        verdict(C.TIME_LIMIT),
        (A.STOP, Rule.NO_CHECKPOINT_PROGRESS),
        history=history_of(*TRACKED_NO_PROGRESS),
    ),
    # 7-10. category-specific rules beat the generic signature rule
    Case(
        "hardware ignores a repeated signature",
        verdict(C.GPU_HARDWARE, "node2", signature="xid79"),
        (A.RESTART_EXCLUDE, Rule.HARDWARE_EXCLUDE),
        exclude=("node2",),
        history=history_of(Past(C.GPU_HARDWARE, signature="xid79", hosts=("node1",))),
    ),
    Case(
        "oom_stop_after beats a repeated signature",
        verdict(C.GPU_OOM, signature="oom@layer3"),
        (A.RESTART, Rule.OOM_RESTART),
        history=history_of(Past(C.GPU_OOM, signature="oom@layer3")),
        config=PolicyConfig(oom_stop_after=3),
    ),
    Case(
        "third oom with stop after three",
        verdict(C.GPU_OOM),
        (A.STOP, Rule.OOM_REPEAT),
        history=history_of(Past(C.GPU_OOM), Past(C.HOST_OOM)),
        config=PolicyConfig(oom_stop_after=3),
    ),
    Case(
        "data io repeat regardless of signature",
        verdict(C.DATA_IO, signature="b"),
        (A.STOP, Rule.DATA_IO_REPEAT),
        history=history_of(Past(C.DATA_IO, signature="a")),
    ),
    Case(
        "drain only for hardware categories",
        verdict(C.HANG, "node2"),
        (A.RESTART_EXCLUDE, Rule.HANG_EXCLUDE),
        exclude=("node2",),
        config=PolicyConfig(drain_nodes=True),
    ),
    # 11-12. deterministic repeats beat host exclusion for cuda/nccl/hang
    Case(
        "repeated cuda signature stops despite a host",
        verdict(C.CUDA_ERROR, "node3", signature="illegal-address@kernel7"),
        (A.STOP, Rule.SAME_APP_ERROR_TWICE),
        history=history_of(Past(C.CUDA_ERROR, signature="illegal-address@kernel7", hosts=("node1",))),
    ),
    Case(
        "repeated nccl signature stops despite a host",
        verdict(C.NCCL_ERROR, "node3", signature="ncclInvalidUsage"),
        (A.STOP, Rule.SAME_APP_ERROR_TWICE),
        history=history_of(Past(C.NCCL_ERROR, signature="ncclInvalidUsage")),
    ),
    Case(
        "signature seen long ago still counts",
        verdict(C.APP_ERROR, signature="s"),
        (A.STOP, Rule.SAME_APP_ERROR_TWICE),
        history=history_of(Past(C.APP_ERROR, signature="s", hours_ago=100), Past(C.HANG)),
    ),
    Case(
        "different signature restarts",
        verdict(C.APP_ERROR, signature="b"),
        (A.RESTART, Rule.APP_ERROR_RESTART),
        history=history_of(Past(C.APP_ERROR, signature="a")),
    ),
    Case(
        "same signature below same_error_stop_after",
        verdict(C.APP_ERROR, signature="s"),
        (A.RESTART, Rule.APP_ERROR_RESTART),
        history=history_of(Past(C.APP_ERROR, signature="s")),
        config=PolicyConfig(same_error_stop_after=3),
    ),
    Case(
        "unsigned app error after a signed one",
        verdict(C.APP_ERROR),
        (A.RESTART, Rule.APP_ERROR_RESTART),
        history=history_of(Past(C.APP_ERROR, signature="s")),
    ),
    Case(
        "unsigned app errors not in a row",
        verdict(C.APP_ERROR),
        (A.RESTART, Rule.APP_ERROR_RESTART),
        history=history_of(Past(C.APP_ERROR), Past(C.GPU_HARDWARE, hosts=("node1",))),
    ),
    # 13-14. attributed NCCL failures are isolated and do not spend the transient allowance
    Case(
        "attributed nccl after the transient limit",
        verdict(C.NCCL_TIMEOUT, "node4"),
        (A.RESTART_EXCLUDE, Rule.NCCL_EXCLUDE),
        exclude=("node4",),
        history=history_of(Past(C.NCCL_TIMEOUT), Past(C.NCCL_ERROR), Past(C.NCCL_TIMEOUT)),
    ),
    Case(
        "attributed nccl failures are not transient",
        verdict(C.NCCL_TIMEOUT),
        (A.RESTART, Rule.TRANSIENT_NCCL_RESTART),
        history=history_of(
            Past(C.NCCL_TIMEOUT, hosts=("node1",)),
            Past(C.NCCL_ERROR, hosts=("node2",)),
            Past(C.NCCL_TIMEOUT, hosts=("node3",)),
        ),
    ),
    Case(
        "transient limit of zero",
        verdict(C.NCCL_TIMEOUT),
        (A.STOP, Rule.TRANSIENT_LIMIT),
        config=PolicyConfig(transient_restart_limit=0),
    ),
    # host lists: distinct, sorted, empty names dropped
    Case(
        "hosts deduplicated and sorted",
        verdict(C.GPU_HARDWARE, "node3", "node1", "node3", ""),
        (A.RESTART_EXCLUDE, Rule.HARDWARE_EXCLUDE),
        exclude=("node1", "node3"),
    ),
]


def _run(case: Case) -> Advice:
    return decide(
        case.verdict,
        case.job,
        case.history,
        case.config,
        now=NOW,
        systemic=case.systemic,
        max_attempts_override=case.max_attempts_override,
    )


@pytest.mark.parametrize("case", RULE_CASES + PRECEDENCE_CASES, ids=lambda c: c.id)
def test_advice(case: Case) -> None:
    advice = _run(case)
    assert (advice.action, advice.rule) == (case.expect[0], case.expect[1].value), advice.reason
    assert advice.exclude_nodes == list(case.exclude)
    assert advice.drain_nodes == list(case.drain)
    assert advice.reason


def test_every_rule_has_a_row() -> None:
    covered = {case.expect[1] for case in RULE_CASES}
    assert set(Rule) - covered == set()


def test_table_ids_are_unique() -> None:
    ids = [case.id for case in RULE_CASES + PRECEDENCE_CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("category", list(Category), ids=str)
def test_every_category_has_its_own_rule(category: Category) -> None:
    advice = decide(verdict(category), job(), history_of(), PolicyConfig(), now=NOW)
    # `unknown` (the detection engine's explicit "failed, cause not found") is what the fallback rule is for
    assert (advice.rule == Rule.UNKNOWN_CAUSE_RESTART) == (category == Category.UNKNOWN)


def test_fallback_for_a_new_category() -> None:
    # A category a newer detection engine might send before the policy has a rule for it.
    future = Verdict.model_construct(
        category="gpu_thermal", implicated=Implicated(hosts=["node2"]), deterministic_signature=None
    )
    advice = decide(future, job(), history_of(), PolicyConfig(), now=NOW)
    assert (advice.action, advice.rule) == (A.RESTART, Rule.UNKNOWN_CAUSE_RESTART.value)
    assert advice.exclude_nodes == []


def test_precedence_is_documented_in_order() -> None:
    """The module docstring lists the rule ids in the order the rule table tries them."""
    import workflows.policy as policy

    doc = policy.__doc__ or ""
    positions = [doc.find(rule.value) for rule in Rule]
    assert -1 not in positions, [rule.value for rule, at in zip(Rule, positions) if at == -1]
    assert positions == sorted(positions), "Rule enum order and the documented precedence differ"


def test_window_edge_is_inclusive() -> None:
    config = PolicyConfig(max_attempts=2, attempts_window_s=3600)
    at_edge = history_of(Past(C.HANG, hours_ago=1.0))
    just_out = history_of(Past(C.HANG, hours_ago=1.0 + 1 / 3600))
    assert decide(verdict(C.HANG), job(), at_edge, config, now=NOW).rule == Rule.ATTEMPT_BUDGET
    assert decide(verdict(C.HANG), job(), just_out, config, now=NOW).rule == Rule.HANG_RESTART


def test_naive_times_are_taken_as_utc() -> None:
    config = PolicyConfig(max_attempts=2, attempts_window_s=3600)
    history = history_of(Past(C.HANG, hours_ago=0.5))
    naive_now = NOW.replace(tzinfo=None)
    assert decide(verdict(C.HANG), job(), history, config, now=naive_now).rule == Rule.ATTEMPT_BUDGET


def test_histories_from_before_the_patch_count_every_attempt() -> None:
    """`progress_earns_retries=False` (what the workflow passes when replaying a history from before the
    progress-earns-retries patch) keeps the old budget: every attempt counts, checkpoint or not."""
    history = history_of(*(Past(C.GPU_HARDWARE, hosts=(f"node{i}",), checkpoint=100 * (i + 1)) for i in range(4)),
                         current_checkpoint=500)
    new = decide(verdict(C.GPU_HARDWARE, "node5"), job(), history, PolicyConfig(), now=NOW)
    old = decide(verdict(C.GPU_HARDWARE, "node5"), job(), history, PolicyConfig(), now=NOW,
                 progress_earns_retries=False)
    assert (new.action, new.rule) == (A.RESTART_EXCLUDE, Rule.HARDWARE_EXCLUDE)
    assert (old.action, old.rule) == (A.STOP, Rule.ATTEMPT_BUDGET)
    assert "without a new checkpoint" not in old.reason
