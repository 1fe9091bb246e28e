"""Straggler advice: a restart excluding the culprit only when straggler action is enabled; advice only otherwise."""

from __future__ import annotations

import pytest

from adapters.slurm.optin import parse_opt_in
from workflows.contracts import AdviceAction, JobInfo, OptIn, PolicyConfig, StragglerFinding
from workflows.straggler_policy import StragglerRule, decide_straggler, straggler_action_enabled

FOUND = StragglerFinding(culprits=["node3"], reasons={"node3": ["SM clock 1410 MHz vs 1980 MHz"]},
                         explanation="node3 is slower than the job's other nodes: SM clock 1410 MHz vs 1980 MHz",
                         nodes_compared=4)
NONE = StragglerFinding(explanation="no node stands out among the job's 4 nodes", nodes_compared=4)
JOB = JobInfo(job_id="42", nodes=["node1", "node2", "node3", "node4"], requeue_allowed=True)
ON = OptIn(straggler_action=True)
OFF = OptIn(straggler_action=False)
DEFAULT = OptIn()
CLUSTER_ON = PolicyConfig(straggler_action=True)
CLUSTER_OFF = PolicyConfig()


@pytest.mark.parametrize(
    ("name", "finding", "job", "opt_in", "config", "restarts", "checkpoint", "rule", "action", "exclude"),
    [
        ("no culprit", NONE, JOB, ON, CLUSTER_ON, 0, True, StragglerRule.NO_CULPRIT, AdviceAction.NOTHING, []),
        ("off by default", FOUND, JOB, DEFAULT, CLUSTER_OFF, 0, True, StragglerRule.ACTION_OFF,
         AdviceAction.NOTHING, []),
        ("opt-in enables", FOUND, JOB, ON, CLUSTER_OFF, 0, True, StragglerRule.EXCLUDE,
         AdviceAction.RESTART_EXCLUDE, ["node3"]),
        ("cluster policy enables", FOUND, JOB, DEFAULT, CLUSTER_ON, 0, True, StragglerRule.EXCLUDE,
         AdviceAction.RESTART_EXCLUDE, ["node3"]),
        ("the job's own no beats the cluster's yes", FOUND, JOB, OFF, CLUSTER_ON, 0, True, StragglerRule.ACTION_OFF,
         AdviceAction.NOTHING, []),
        ("unknown opt-in follows the cluster", FOUND, JOB, None, CLUSTER_ON, 0, True, StragglerRule.EXCLUDE,
         AdviceAction.RESTART_EXCLUDE, ["node3"]),
        ("--no-requeue job", FOUND, JOB.model_copy(update={"requeue_allowed": False}), ON, CLUSTER_OFF, 0, True,
         StragglerRule.REQUEUE_NOT_ALLOWED, AdviceAction.NOTHING, []),
        ("restart limit reached", FOUND, JOB, ON, CLUSTER_OFF, 2, True, StragglerRule.RESTART_LIMIT,
         AdviceAction.NOTHING, []),
        ("under the limit", FOUND, JOB, ON, CLUSTER_OFF, 1, True, StragglerRule.EXCLUDE,
         AdviceAction.RESTART_EXCLUDE, ["node3"]),
        ("no checkpoint seen", FOUND, JOB, ON, CLUSTER_OFF, 0, False, StragglerRule.NO_CHECKPOINT,
         AdviceAction.NOTHING, []),
        ("job unknown", FOUND, None, ON, CLUSTER_OFF, 0, True, StragglerRule.EXCLUDE,
         AdviceAction.RESTART_EXCLUDE, ["node3"]),
    ],
)
def test_decide_straggler_table(name, finding, job, opt_in, config, restarts, checkpoint, rule, action, exclude) -> None:
    decision = decide_straggler(finding, job=job, opt_in=opt_in, config=config, straggler_restarts=restarts,
                                checkpoint_seen=checkpoint)
    assert (decision.advice.rule, decision.advice.action, decision.advice.exclude_nodes) == (rule, action, exclude), name
    # what a restart would exclude is recorded whatever the advice
    assert decision.recommended_exclude == finding.culprits, name


def test_advice_only_says_what_it_would_do_and_how_to_enable_it() -> None:
    decision = decide_straggler(FOUND, job=JOB, opt_in=DEFAULT, config=CLUSTER_OFF, checkpoint_seen=True)
    reason = decision.advice.reason
    assert reason.startswith("restart excluding node3 advised (node3 is slower than the job's other nodes")
    assert '"straggler_action": true' in reason and "policy.straggler_action" in reason
    assert not decision.action_enabled


def test_culprits_are_sorted_and_deduplicated_and_the_config_limit_is_used() -> None:
    finding = FOUND.model_copy(update={"culprits": ["node7", "node3", "node7"]})
    decision = decide_straggler(finding, job=JOB, opt_in=ON, config=PolicyConfig(straggler_restart_limit=5),
                                straggler_restarts=4, checkpoint_seen=True)
    assert decision.advice.exclude_nodes == ["node3", "node7"] == decision.recommended_exclude


@pytest.mark.parametrize(
    ("comment", "opted_in", "value", "invalid"),
    [
        ('{"jobmedic":{"mode":"action","straggler_action":true}}', True, True, None),
        ('{"jobmedic":{"straggler_action":false}}', True, False, None),
        ('{"jobmedic":{"environment":"prod"}}', True, None, None),
        ('{"nvidia-recovery":{"straggler_action":null}}', True, None, None),
        ('{"jobmedic":{"straggler_action":"yes"}}', False, None, "jobmedic.straggler_action must be true or false"),
        ('{"jobmedic":{"straggler_action":1}}', False, None, "jobmedic.straggler_action must be true or false"),
    ],
)
def test_opt_in_straggler_action(comment: str, opted_in: bool, value: bool | None, invalid: str | None) -> None:
    result = parse_opt_in(comment)
    assert result.opted_in is opted_in
    if invalid is None:
        assert result.opt_in is not None and result.opt_in.straggler_action is value
        assert straggler_action_enabled(result.opt_in, CLUSTER_ON) is (True if value is None else value)
    else:
        assert result.invalid_reason is not None and result.invalid_reason.startswith(invalid)
