"""Table tests of the scorecard's checks: one row per outcome of each definition in `workers.scorecard`.

Job "1" is the job under test; its submit time is SUBMIT, its advice comes at T0 + 10 s in monitor
mode unless a row says otherwise. Offsets are seconds after T0.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from workers.scorecard import Check, Snapshot, build_scorecard
from workflows.contracts import AuditEntry, EventType, JobInfo, JobState, NodeInfo

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
SUBMIT = T0 - timedelta(minutes=5)
NOW = T0 + timedelta(hours=1)
_keys = itertools.count(1)


def at(offset: float) -> datetime:
    return T0 + timedelta(seconds=offset)


def entry(event: EventType, offset: float, *, job: str = "1", attempt: int = 0, mode: str = "observe",
          submit: datetime = SUBMIT, **fields: Any) -> AuditEntry:
    return AuditEntry(
        idempotency_key=f"scorecard-{next(_keys)}", timestamp=at(offset), cluster="lab", job_id=job,
        submit_time=submit, attempt=attempt, event_type=event, mode=mode, **fields,
    )


def det(offset: float, incident: str = "failed", **kw: Any) -> AuditEntry:
    return entry(EventType.DETECTION, offset, detail={"incident": incident}, **kw)


def adv(offset: float, action: str, rule: str, *, category: str = "gpu_hardware", pattern: str | None = "xid_79",
        nodes: tuple[str, ...] = (), **kw: Any) -> AuditEntry:
    return entry(EventType.ADVICE, offset, action=action, rule=rule, category=category, pattern_id=pattern,
                 implicated_nodes=list(nodes), **kw)


def ckpt(offset: float, attempt: int, **kw: Any) -> AuditEntry:
    return entry(EventType.CHECKPOINT_SAVED, offset, attempt=attempt, outcome="checkpoint at iteration 30", **kw)


def done(offset: float, attempt: int = 0, **kw: Any) -> AuditEntry:
    return entry(EventType.COMPLETED, offset, attempt=attempt, outcome="training completed", **kw)


def sjob(job_id: str = "1", state: JobState = JobState.FAILED, *, restarts: int = 0, name: str = "train",
         user: str = "alice", submit: datetime = SUBMIT, start: datetime | None = None,
         nodes: tuple[str, ...] = ("node1", "node2")) -> JobInfo:
    return JobInfo(cluster="lab", job_id=job_id, state=state, restarts=restarts, name=name, user=user,
                   submit_time=submit, start_time=start, nodes=list(nodes))


def snode(name: str, state: str = "IDLE", *, flags: tuple[str, ...] = (), reason: str = "",
          reason_user: str = "", reason_time: datetime | None = None) -> NodeInfo:
    return NodeInfo(name=name, state=state, flags=list(flags), reason=reason, reason_user=reason_user,
                    reason_time=reason_time)


def shot(*jobs: JobInfo, nodes: tuple[NodeInfo, ...] = ()) -> Snapshot:
    return Snapshot(cluster="lab", taken_at=NOW, jobs=list(jobs), nodes=list(nodes))


def checks(entries: list[AuditEntry], snapshot: Snapshot | None, *, kind: str, job: str = "1") -> list[Check]:
    card = build_scorecard(entries, [snapshot] if snapshot else [], now=NOW)
    return [c for c in card.clusters[0].checks if c.kind == kind and c.job_id == job]


def one(entries: list[AuditEntry], snapshot: Snapshot | None, *, kind: str) -> Check:
    """The check of job 1's advice at T0 + 10 s (of the job itself for a healthy check)."""
    found = [c for c in checks(entries, snapshot, kind=kind) if c.advised_at in (at(10), None)]
    assert len(found) == 1, found
    return found[0]


RESTART = [det(9), adv(10, "restart_exclude", "hardware_exclude", nodes=("node2",))]
STOP = [det(9, attempt=1), adv(10, "stop", "same_app_error_twice", category="app_error", pattern="py_traceback",
                               attempt=1)]


# --------------------------------------------------------------------------- restart advised

RESTART_ROWS = [
    ("restarted, then a checkpoint", [ckpt(60, 1)], None, "agree", "restarted and progressed"),
    ("restarted, then completed", [done(90, 1)], None, "agree", "restarted and completed"),
    ("restarted, failed again before progress", [det(50, attempt=1), adv(51, "restart", "hardware_restart",
                                                  attempt=1)], None, "disagree", "failed again before any progress"),
    ("a checkpoint at the same attempt is no restart", [ckpt(20, 0)], shot(sjob()), "untested", "not restarted"),
    ("a requeue's own advice is no failure again", [det(30, "slurm_requeue", attempt=1),
                                                    adv(31, "leave_to_slurm", "x+slurm_requeued", attempt=1),
                                                    ckpt(60, 1)], None, "agree", "restarted and progressed"),
    ("Slurm shows it completed after a restart", [], shot(sjob(state=JobState.COMPLETED, restarts=1)), "agree",
     "COMPLETED (restarts 1)"),
    ("Slurm shows it failed again after a restart", [], shot(sjob(state=JobState.FAILED, restarts=1)), "disagree",
     "FAILED again"),
    ("restarted and pending", [], shot(sjob(state=JobState.PENDING, restarts=1)), "open", "no progress seen yet"),
    ("resubmitted by its user, completed", [],
     shot(sjob(), sjob("2", JobState.COMPLETED, submit=at(100))), "agree", "resubmitted as job 2, which worked"),
    ("resubmitted, the new job checkpointed", [ckpt(200, 0, job="2", submit=at(100))],
     shot(sjob(), sjob("2", JobState.RUNNING, submit=at(100))), "agree", "resubmitted as job 2, which worked"),
    ("resubmitted, failed", [], shot(sjob(), sjob("2", JobState.FAILED, submit=at(100))), "disagree",
     "resubmitted as job 2, which failed"),
    ("resubmitted, still running", [], shot(sjob(), sjob("2", JobState.RUNNING, submit=at(100))), "open",
     "still pending or running"),
    ("same name by another user is no resubmission", [],
     shot(sjob(), sjob("2", JobState.COMPLETED, user="bob", submit=at(100))), "untested", "not restarted"),
    ("a resubmission too late is none", [],
     shot(sjob(), sjob("2", JobState.COMPLETED, submit=at(3 * 3600))), "untested", "not restarted"),
    ("a job submitted before the advice is none", [],
     shot(sjob(), sjob("2", JobState.COMPLETED, submit=at(-60))), "untested", "not restarted"),
    ("left failed", [], shot(sjob()), "untested", "Slurm shows it FAILED"),
    ("gone from Slurm", [], shot(), "untested", "no longer shows the job"),
    ("Slurm not read", [], None, "untested", "Slurm was not read"),
    ("still running (a hang advised restart)", [], shot(sjob(state=JobState.RUNNING)), "open", "not restarted yet"),
    ("a recycled id is another job", [],
     shot(sjob(state=JobState.COMPLETED, submit=at(500), restarts=0)), "untested", "no longer shows the job"),
]


@pytest.mark.parametrize(("case", "later", "snapshot", "result", "words"), RESTART_ROWS, ids=[r[0] for r in RESTART_ROWS])
def test_restart_advised(case: str, later: list[AuditEntry], snapshot: Snapshot | None, result: str, words: str) -> None:
    check = one(RESTART + later, snapshot, kind="restart")
    assert (check.result, check.rule, check.category) == (result, "hardware_exclude", "gpu_hardware"), check
    assert words in check.what_happened, check.what_happened


# --------------------------------------------------------------------------- stop advised

SAME = adv(51, "stop", "same_app_error_twice", category="app_error", pattern="py_traceback", attempt=2)
OTHER = adv(51, "restart", "nccl_exclude", category="nccl_timeout", pattern="nccl_watchdog", attempt=2)
STOP_ROWS = [
    ("not retried, left failed", [], shot(sjob(restarts=1)), "agree", "not retried; Slurm shows it FAILED"),
    ("not retried, gone", [], shot(), "agree", "not retried; Slurm no longer shows the job"),
    ("retried, failed the same way", [det(50, attempt=2), SAME], None, "agree", "failed again the same way"),
    ("retried, failed another way", [det(50, attempt=2), OTHER], None, "disagree", "failed another way"),
    ("retried, progressed", [ckpt(60, 2)], None, "disagree", "retried anyway and progressed"),
    ("retried, failed, no advice to compare", [det(50, attempt=2)], None, "open", "no advice to compare"),
    ("Slurm shows the retry completed", [], shot(sjob(state=JobState.COMPLETED, restarts=2)), "disagree",
     "COMPLETED"),
    ("retry still running", [], shot(sjob(state=JobState.RUNNING, restarts=2)), "open", "nothing to compare yet"),
    ("resubmission worked", [], shot(sjob(restarts=1), sjob("2", JobState.COMPLETED, submit=at(100))), "disagree",
     "which worked"),
    ("resubmission failed the same way",
     [det(150, job="2", submit=at(100)), adv(151, "restart", "app_error_restart", category="app_error",
                                              pattern="py_traceback", job="2", submit=at(100))],
     shot(sjob(restarts=1), sjob("2", JobState.FAILED, submit=at(100))), "agree", "failed the same way"),
    ("resubmission failed, nothing to compare", [],
     shot(sjob(restarts=1), sjob("2", JobState.FAILED, submit=at(100))), "open", "which failed"),
]


@pytest.mark.parametrize(("case", "later", "snapshot", "result", "words"), STOP_ROWS, ids=[r[0] for r in STOP_ROWS])
def test_stop_advised(case: str, later: list[AuditEntry], snapshot: Snapshot | None, result: str, words: str) -> None:
    check = one(STOP + later, snapshot, kind="stop")
    assert (check.result, check.rule, check.attempt) == (result, "same_app_error_twice", 1), check
    assert words in check.what_happened, check.what_happened


# --------------------------------------------------------------------------- healthy

CKPT = [ckpt(5, 0)]
HEALTHY_ROWS = [
    ("completed", CKPT + [done(90)], None, "agree", "completed"),
    ("Slurm shows it completed", CKPT, shot(sjob(state=JobState.COMPLETED)), "agree", "COMPLETED"),
    ("a failure jobmedic did not see", CKPT, shot(sjob(state=JobState.FAILED)), "disagree", "ended FAILED"),
    ("cancelled", CKPT + [entry(EventType.STOPPED, 90, outcome="job cancelled")], None, "disagree", "job cancelled"),
    ("still running", CKPT, shot(sjob(state=JobState.RUNNING)), "open", "still RUNNING"),
    ("gone without an end in the trail", CKPT, shot(), "open", "no longer shows it"),
    ("a straggler's advice is no failure", CKPT + [
        entry(EventType.DETECTION, 20, detail={"incident": "straggler"}, implicated_nodes=["node2"]),
        adv(21, "nothing", "straggler_advice_only", category=None, pattern=None, nodes=("node2",),
            detail={"incident": "straggler"}), done(90)], None, "agree", "completed"),
]


@pytest.mark.parametrize(("case", "trail", "snapshot", "result", "words"), HEALTHY_ROWS,
                         ids=[r[0] for r in HEALTHY_ROWS])
def test_healthy(case: str, trail: list[AuditEntry], snapshot: Snapshot | None, result: str, words: str) -> None:
    check = one(trail, snapshot, kind="healthy")
    assert (check.result, check.rule, check.category) == (result, "no_advice", "none"), check
    assert words in check.what_happened, check.what_happened


def test_advice_of_nothing_is_a_healthy_check_under_its_rule() -> None:
    check = one([det(9), adv(10, "nothing", "nothing_wrong", category="none", pattern=None), done(90)], None,
                kind="healthy")
    assert (check.result, check.rule) == ("agree", "nothing_wrong")


# --------------------------------------------------------------------------- node blamed

BLAMED = RESTART  # node2 blamed at T0 + 10 s
NODE_ROWS = [
    ("drained by an admin after the blame", [],
     shot(nodes=(snode("node2", "IDLE", flags=("DRAIN",), reason="bad gpu, RMA", reason_user="ops",
                       reason_time=at(60)),)), "agree", "drained by ops: bad gpu, RMA"),
    ("drained by an admin, time unknown", [], shot(nodes=(snode("node2", "IDLE", flags=("DRAIN",), reason="x"),)),
     "agree", "drained"),
    ("drained by jobmedic itself", [],
     shot(nodes=(snode("node2", "IDLE", flags=("DRAIN",), reason="jobmedic: xid 79", reason_time=at(60)),)),
     "open", "not drained"),
    ("drained before the blame", [],
     shot(nodes=(snode("node2", "IDLE", flags=("DRAIN",), reason="old", reason_time=at(-600)),)), "open",
     "not drained"),
    ("down, not responding", [],
     shot(nodes=(snode("node2", "DOWN", flags=("NOT_RESPONDING",), reason="Not responding"),)), "agree",
     "DOWN+NOT_RESPONDING"),
    ("other jobs' failures blamed on it", [det(300, job="7"), adv(301, "restart_exclude", "hardware_exclude",
                                                                  nodes=("node2",), job="7", mode="action")],
     None, "agree", "also implicated in the failures of job 7"),
    ("a job completed on it since", [],
     shot(sjob("8", JobState.COMPLETED, start=at(100), nodes=("node2", "node3"))), "disagree",
     "job 8 completed on it since"),
    ("a job that completed on it before does not count", [],
     shot(sjob("8", JobState.COMPLETED, start=at(-100), nodes=("node2",))), "open", "not drained"),
    ("nothing known", [], shot(), "open", "not drained"),
]


@pytest.mark.parametrize(("case", "later", "snapshot", "result", "words"), NODE_ROWS, ids=[r[0] for r in NODE_ROWS])
def test_node_blamed(case: str, later: list[AuditEntry], snapshot: Snapshot | None, result: str, words: str) -> None:
    check = one(BLAMED + later, snapshot, kind="node")
    assert (check.node, check.result, check.rule) == ("node2", result, "hardware_exclude"), check
    assert words in check.what_happened, check.what_happened


def test_a_node_is_checked_once_per_job_at_its_first_blame() -> None:
    trail = [*RESTART, det(30, "slurm_requeue", attempt=1),
             adv(31, "leave_to_slurm", "hardware_exclude+slurm_requeued", nodes=("node2", "node3"), attempt=1)]
    found = checks(trail, shot(), kind="node")
    assert [(c.node, c.rule, c.attempt) for c in found] == [
        ("node2", "hardware_exclude", 0), ("node3", "hardware_exclude+slurm_requeued", 1)]


# --------------------------------------------------------------------------- not scored, tallies


def test_advice_that_is_no_prediction_is_listed_not_scored() -> None:
    entries = [
        det(9, "slurm_requeue", job="3"), adv(10, "stop", "same_app_error_twice", job="3"),
        det(9, job="4"), adv(10, "hold", "systemic_hold", job="4"),
        det(9, "preempted", job="5"), adv(10, "leave_to_slurm", "preempted_leave_to_slurm", job="5"),
        det(9, job="6", mode="action"), adv(10, "restart", "hardware_restart", job="6", mode="action"),
        det(9, job="9"), entry(EventType.WATCHDOG, 20, job="9"),
    ]
    score = build_scorecard(entries, [shot()], now=NOW).clusters[0]
    assert score.checks == []
    assert score.not_scored == {
        "advice after someone else's requeue (slurm_requeue)": ["3"],
        "hold advice": ["4"],
        "interruption detected, no advice (watchdog)": ["9"],
        "leave_to_slurm advice": ["5"],
    }
    assert score.action_mode_jobs == ["6"]


def test_tallies_per_kind_rule_and_category_name_the_jobs_behind_each_count() -> None:
    entries = [
        det(9, job="10"), adv(10, "restart_exclude", "hardware_exclude", nodes=("node2",), job="10"),
        ckpt(60, 1, job="10"),
        det(9, job="11"), adv(10, "restart_exclude", "hardware_exclude", nodes=("node3",), job="11"),
        det(50, job="11", attempt=1), adv(51, "stop", "attempt_budget", job="11", attempt=1),
        ckpt(5, 0, job="12"), done(90, job="12"),
        ckpt(5, 0, job="13"),
    ]
    snapshot = shot(sjob("11", JobState.FAILED, restarts=1), sjob("13", JobState.RUNNING),
                    nodes=(snode("node2", flags=("DRAIN",), reason="rma", reason_time=at(100)),))
    score = build_scorecard(entries, [snapshot], now=NOW).clusters[0]
    kinds = {t.group: t for t in score.by_kind}
    assert list(kinds) == ["restart", "stop", "node", "healthy"]
    assert (kinds["restart"].agree, kinds["restart"].disagree, kinds["restart"].agreement) == (1, 1, 0.5)
    assert kinds["restart"].jobs == {"agree": ["10"], "disagree": ["11"]}
    assert kinds["stop"].jobs == {"agree": ["11"]}
    assert kinds["node"].jobs == {"agree": ["10"], "open": ["11"]}
    assert (kinds["healthy"].agree, kinds["healthy"].open, kinds["healthy"].agreement) == (1, 1, 1.0)
    rules = {t.group: (t.agree, t.disagree, t.open) for t in score.by_rule}
    assert rules == {"attempt_budget": (1, 0, 0), "hardware_exclude": (2, 1, 1), "no_advice": (1, 0, 1)}
    categories = {t.group: t.agreement for t in score.by_category}
    assert categories == {"gpu_hardware": 0.75, "none": 1.0}
    assert (score.overall.agree, score.overall.disagree, score.overall.open, score.overall.untested) == (4, 1, 2, 0)


def test_a_cluster_whose_scheduler_was_not_read_is_judged_on_its_trail_and_says_so() -> None:
    failed = Snapshot(cluster="lab", error="scheduler not read: squeue: Unable to contact slurm controller")
    score = build_scorecard([*RESTART, ckpt(60, 1)], [failed], now=NOW).clusters[0]
    assert score.snapshot_error.startswith("scheduler not read") and score.snapshot_at is None
    assert [(c.kind, c.result) for c in score.checks] == [("restart", "agree"), ("node", "open")]
    assert build_scorecard(RESTART, [], now=NOW).clusters[0].snapshot_error == "Slurm was not read"


def test_input_order_does_not_matter() -> None:
    entries = [*STOP, det(50, attempt=2), SAME]
    forward = build_scorecard(entries, [], now=NOW)
    backward = build_scorecard(list(reversed(entries)), [], now=NOW)
    assert forward == backward
