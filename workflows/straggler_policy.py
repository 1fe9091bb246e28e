"""The straggler decision: culprit finding + job + opt-in + cluster policy -> advice.

Pure and deterministic, because it runs inside the per-job recovery workflow: no
clocks, no randomness, no I/O, and only the standard library, pydantic and
`workflows.contracts` imported (the workflow sandbox re-imports this module).

A straggling job is still training. Restarting it costs the work since its last
checkpoint and a trip through the queue, so the default is to say which node is
slow and change nothing; the restart that would exclude the culprit is in the
advice's reason and in `recommended_exclude` either way.

Straggler action is enabled by the job's opt-in `"straggler_action"` when it says
true or false, else by the cluster's `policy.straggler_action` (default false).

Rules, tried in this order; the first that applies gives the advice (`_RULES`):
 1. straggler_no_culprit: the finding names no node -> NOTHING.
 2. straggler_action_off: straggler action not enabled -> NOTHING (advice only).
 3. straggler_requeue_not_allowed: the job was submitted with `--no-requeue`
    -> NOTHING (a restart would have to be a cancel: worse than slow).
 4. straggler_restart_limit: the job was already restarted
    config.straggler_restart_limit times for stragglers -> NOTHING (a job that
    stays slow wherever it runs is slow for its own reasons).
 5. straggler_no_checkpoint: no checkpoint of the job has been seen -> NOTHING
    (a restart would start it over from the beginning).
 6. straggler_exclude: -> RESTART_EXCLUDE of the culprits.

NOTHING never carries an exclusion list (as in workflows/policy.py). The mode
gates - the cluster in action mode with scheduler actions acknowledged, the
environment, the opt-in's `"mode":"action"` - apply to this advice exactly as to
every other: enabling straggler action never bypasses them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from pydantic import Field

from workflows.contracts import Advice, AdviceAction, Contract, JobInfo, OptIn, PolicyConfig, StragglerFinding


class StragglerRule(StrEnum):
    """Stable ids of the straggler rules, recorded with the advice."""

    NO_CULPRIT = "straggler_no_culprit"
    ACTION_OFF = "straggler_action_off"
    REQUEUE_NOT_ALLOWED = "straggler_requeue_not_allowed"
    RESTART_LIMIT = "straggler_restart_limit"
    NO_CHECKPOINT = "straggler_no_checkpoint"
    EXCLUDE = "straggler_exclude"


class StragglerDecision(Contract):
    """The advice, and what a restart would exclude whatever the advice says."""

    advice: Advice = Field(default_factory=Advice)
    recommended_exclude: list[str] = Field(default_factory=list)
    action_enabled: bool = False


@dataclass(frozen=True)
class _Case:
    finding: StragglerFinding
    job: JobInfo | None
    config: PolicyConfig
    enabled: bool
    straggler_restarts: int
    checkpoint_seen: bool
    culprits: list[str]


def straggler_action_enabled(opt_in: OptIn | None, config: PolicyConfig) -> bool:
    """The job's own word when it gave one, else the cluster's policy."""
    if opt_in is not None and opt_in.straggler_action is not None:
        return opt_in.straggler_action
    return config.straggler_action


def decide_straggler(
    finding: StragglerFinding,
    *,
    job: JobInfo | None,
    opt_in: OptIn | None,
    config: PolicyConfig,
    straggler_restarts: int = 0,
    checkpoint_seen: bool = False,
) -> StragglerDecision:
    """Advice for a sustained throughput drop; see the module docstring for the rules.

    Args:
        finding: the culprit finding for this episode.
        job: the job as last seen (None when unknown).
        opt_in: the job's opt-in (None when unknown).
        config: the cluster's policy.
        straggler_restarts: restarts this job already had for stragglers.
        checkpoint_seen: a checkpoint of this job was seen (this attempt or an earlier one).
    """
    case = _Case(
        finding=finding,
        job=job,
        config=config,
        enabled=straggler_action_enabled(opt_in, config),
        straggler_restarts=straggler_restarts,
        checkpoint_seen=checkpoint_seen,
        culprits=sorted(set(finding.culprits)),
    )
    for rule in _RULES:
        advice = rule(case)
        if advice is not None:
            return StragglerDecision(advice=advice, recommended_exclude=case.culprits, action_enabled=case.enabled)
    raise AssertionError("the last straggler rule always applies")  # pragma: no cover


def _advised(case: _Case) -> str:
    return f"restart excluding {', '.join(case.culprits)} advised ({case.finding.explanation})"


def _no_culprit(case: _Case) -> Advice | None:
    if case.culprits:
        return None
    return Advice(action=AdviceAction.NOTHING, rule=StragglerRule.NO_CULPRIT,
                  reason=f"straggler without a culprit node: {case.finding.explanation or 'no per-node evidence'}")


def _action_off(case: _Case) -> Advice | None:
    if case.enabled:
        return None
    return Advice(action=AdviceAction.NOTHING, rule=StragglerRule.ACTION_OFF,
                  reason=f"{_advised(case)}; advice only: straggler action is off (enable it with "
                         '"straggler_action": true in the opt-in or policy.straggler_action for the cluster)')


def _requeue_not_allowed(case: _Case) -> Advice | None:
    if case.job is None or case.job.requeue_allowed is not False:
        return None
    return Advice(action=AdviceAction.NOTHING, rule=StragglerRule.REQUEUE_NOT_ALLOWED,
                  reason=f"{_advised(case)}; advice only: the job was submitted with --no-requeue")


def _restart_limit(case: _Case) -> Advice | None:
    if case.straggler_restarts < case.config.straggler_restart_limit:
        return None
    return Advice(action=AdviceAction.NOTHING, rule=StragglerRule.RESTART_LIMIT,
                  reason=f"{_advised(case)}; advice only: already restarted {case.straggler_restarts} time(s) "
                         f"for stragglers (policy.straggler_restart_limit {case.config.straggler_restart_limit})")


def _no_checkpoint(case: _Case) -> Advice | None:
    if case.checkpoint_seen:
        return None
    return Advice(action=AdviceAction.NOTHING, rule=StragglerRule.NO_CHECKPOINT,
                  reason=f"{_advised(case)}; advice only: no checkpoint of the job seen, a restart would "
                         "start it over")


def _exclude(case: _Case) -> Advice | None:
    return Advice(action=AdviceAction.RESTART_EXCLUDE, rule=StragglerRule.EXCLUDE,
                  reason=f"straggler: {case.finding.explanation}", exclude_nodes=list(case.culprits))


_RULES: tuple[Callable[[_Case], Advice | None], ...] = (
    _no_culprit,
    _action_off,
    _requeue_not_allowed,
    _restart_limit,
    _no_checkpoint,
    _exclude,
)
