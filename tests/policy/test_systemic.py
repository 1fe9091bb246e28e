"""Table tests of the systemic guard's pure decisions (workflows/systemic.py) and the node limits of a restart."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from workflows.contracts import Advice, AdviceAction, Category, JobInfo, PolicyConfig
from workflows.history import JobHistory
from workflows.policy import NodeLimits, node_limits
from workflows.systemic import (
    ClusterContext,
    FailureReport,
    JobRun,
    ProbeResult,
    SystemicKind,
    cause_cleared,
    classify,
    healthy_seconds,
    job_partition_nodes,
    lemon_caps,
    matches,
    needs_settling,
    node_suspicion,
    recent,
)

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
NODES = [f"n{i}" for i in range(1, 9)]
RACKS = {"rack:a": ["n1", "n2", "n3", "n4"], "rack:b": ["n5", "n6", "n7", "n8"], "partition:p": NODES}
CTX = ClusterContext(nodes=NODES, domains=RACKS, watched_jobs=20)
CONFIG = PolicyConfig(systemic_jobs=4)


def f(job: int, category: Category = Category.NCCL_ERROR, *, sig: str = "nccl_system_error", hosts=(), nodes=None,
      at: float = 0.0, gpus=()) -> FailureReport:
    return FailureReport(
        workflow_id=f"wf{job}", job_id=str(job), category=category, signature=sig, hosts=list(hosts),
        gpus=list(gpus), nodes=list(nodes if nodes is not None else hosts or [NODES[job % 8]]),
        at=T0 + timedelta(seconds=at),
    )


CLASSIFY = [
    # id, failures, expected (kind, key) findings
    ("same cause, no node evidence", [f(i) for i in range(4)], [(SystemicKind.SHARED_CAUSE, "nccl_error/nccl_system_error")]),
    ("same cause, one job short", [f(i) for i in range(3)], []),
    ("one job failing four times is one job", [f(1) for _ in range(4)], []),
    ("different signatures are different causes",
     [f(0), f(1), f(2, sig="other"), f(3, sig="other")], []),
    ("job's own errors are never systemic", [f(i, Category.APP_ERROR, sig="KeyError") for i in range(6)], []),
    ("node-specific evidence on different nodes: independent",
     [f(i, Category.GPU_HARDWARE, sig="nvrm_xid", hosts=[NODES[i]]) for i in range(8)], []),
    ("node-specific evidence concentrated in a rack",
     [f(i, Category.GPU_HARDWARE, sig="nvrm_xid", hosts=[NODES[i % 4]]) for i in range(5)],
     [(SystemicKind.DOMAIN, "rack:a")]),
    ("a rack, but all on one node: a lemon, not a domain",
     [f(i, Category.GPU_HARDWARE, sig="nvrm_xid", hosts=["n1"]) for i in range(5)], []),
    ("a rack with as many failures outside it: not concentrated",
     [f(i, Category.GPU_HARDWARE, sig="nvrm_xid", hosts=[NODES[i % 4]]) for i in range(4)]
     + [f(10 + i, Category.GPU_HARDWARE, sig="nvrm_xid", hosts=[NODES[4 + i % 4]]) for i in range(4)], []),
    ("half the watched jobs without node evidence, mixed causes",
     [f(i, sig=f"s{i}") for i in range(10)], [(SystemicKind.FRACTION, "fraction")]),
    ("a partition that is the whole cluster is no domain",
     [f(i, Category.CUDA_ERROR, sig="x", hosts=[NODES[i]]) for i in range(8)], []),
]


@pytest.mark.parametrize("failures, expected", [c[1:] for c in CLASSIFY], ids=[c[0] for c in CLASSIFY])
def test_classify(failures, expected) -> None:
    assert [(x.kind, x.key) for x in classify(failures, CTX, CONFIG)] == expected


def test_a_finding_names_its_jobs_and_nodes() -> None:
    (finding,) = classify([f(i, nodes=[f"n{i + 1}"]) for i in range(4)], CTX, CONFIG)
    assert finding.workflow_ids == ["wf0", "wf1", "wf2", "wf3"] and finding.nodes == ["n1", "n2", "n3", "n4"]
    assert "4 jobs failed with the same cause" in finding.reason


def test_recent_keeps_the_window_and_one_report_per_incident() -> None:
    reports = [f(1, at=0), f(1, at=1), f(2, at=-400)]
    assert [r.job_id for r in recent(reports, now=T0 + timedelta(seconds=10), window_s=300)] == ["1"]


MATCHES = [
    ("same cause joins", SystemicKind.SHARED_CAUSE, "nccl_error/nccl_system_error", f(9), True),
    ("node evidence does not join a shared cause", SystemicKind.SHARED_CAUSE, "nccl_error/nccl_system_error",
     f(9, hosts=["n1"]), False),
    ("rack failure joins the rack", SystemicKind.DOMAIN, "rack:a", f(9, Category.GPU_HARDWARE, hosts=["n2"]), True),
    ("other rack does not", SystemicKind.DOMAIN, "rack:a", f(9, Category.GPU_HARDWARE, hosts=["n6"]), False),
    ("app error never joins", SystemicKind.FRACTION, "fraction", f(9, Category.APP_ERROR), False),
]


@pytest.mark.parametrize("kind, key, report, expected", [m[1:] for m in MATCHES], ids=[m[0] for m in MATCHES])
def test_matches(kind, key, report, expected) -> None:
    assert matches(kind, key, report, CTX) is expected


SETTLE = [
    ("no node evidence: may be the first of a shared cause", f(1), [], True),
    ("first node-specific failure of a quiet rack: at once", f(1, Category.GPU_HARDWARE, hosts=["n1"]), [], False),
    ("second in the rack: wait", f(1, Category.GPU_HARDWARE, hosts=["n1"]),
     [f(2, Category.GPU_HARDWARE, hosts=["n3"])], True),
    ("second in the other rack: at once", f(1, Category.GPU_HARDWARE, hosts=["n1"]),
     [f(2, Category.GPU_HARDWARE, hosts=["n6"])], False),
    ("application error: at once", f(1, Category.APP_ERROR), [f(2), f(3)], False),
]


@pytest.mark.parametrize("report, others, expected", [s[1:] for s in SETTLE], ids=[s[0] for s in SETTLE])
def test_needs_settling(report, others, expected) -> None:
    assert needs_settling(report, others, CTX) is expected


def run(job: str, state: str, nodes: list[str], start: float, end: float | None = None) -> JobRun:
    return JobRun(job_id=job, state=state, nodes=nodes, start_time=T0 + timedelta(seconds=start),
                  end_time=T0 + timedelta(seconds=end) if end is not None else None)


CLEARED = [
    ("nothing ran since", [], [], [], None),
    ("a new job completed on the nodes", [run("9", "COMPLETED", ["n1"], 10, 20)], [], [], "completed"),
    ("a held job running again is no evidence", [run("1", "COMPLETED", ["n1"], 10, 20)], [], [], None),
    ("a job that started before the event is no evidence", [run("9", "COMPLETED", ["n1"], -5, 20)], [], [], None),
    ("elsewhere is no evidence", [run("9", "COMPLETED", ["n7"], 10, 20)], [], [], None),
    ("running long enough", [run("9", "RUNNING", ["n2"], 10)], [], [], "has run"),
    ("running, not long enough", [run("9", "RUNNING", ["n2"], 90)], [], [], None),
    ("a new job failed", [run("9", "FAILED", ["n1"], 10, 20)], [], [], None),
    ("the nodes that were down are back", [], ["n1"], [], "are back"),
    ("still down", [], ["n1"], ["n1"], None),
]


@pytest.mark.parametrize("runs, down, unavailable, expected", [c[1:] for c in CLEARED], ids=[c[0] for c in CLEARED])
def test_cause_cleared(runs, down, unavailable, expected) -> None:
    why = cause_cleared(
        nodes=["n1", "n2"], opened_at=T0, down_at_open=down, held_job_ids=["1", "2"],
        probe=ProbeResult(runs=runs, unavailable=unavailable), now=T0 + timedelta(seconds=100), clear_runtime_s=60,
    )
    assert (why is None) if expected is None else (why is not None and expected in why), why


# --------------------------------------------------------------------------- lemons

LEMON = PolicyConfig(lemon_jobs=3, lemon_window_s=3600, lemon_healthy_s=600, lemon_max_fraction=0.25,
                     lemon_max_per_window=2)


SUSPICION = [
    ("three jobs on one node", [f(i, Category.GPU_HARDWARE, hosts=["n1"]) for i in range(3)], {}, {"n1": 3.0}),
    ("the same job three times counts once", [f(1, Category.GPU_HARDWARE, hosts=["n1"]) for _ in range(3)], {},
     {"n1": 1.0}),
    ("healthy runtime decays it", [f(i, Category.GPU_HARDWARE, hosts=["n1"]) for i in range(3)], {"n1": 1300.0},
     {"n1": 1.0}),
    ("decayed to nothing", [f(i, Category.GPU_HARDWARE, hosts=["n1"]) for i in range(2)], {"n1": 1200.0}, {}),
    ("outside the window", [f(i, Category.GPU_HARDWARE, hosts=["n1"], at=-4000) for i in range(3)], {}, {}),
]


@pytest.mark.parametrize("failures, healthy, expected", [s[1:] for s in SUSPICION], ids=[s[0] for s in SUSPICION])
def test_node_suspicion(failures, healthy, expected) -> None:
    assert node_suspicion(failures, now=T0 + timedelta(seconds=5), config=LEMON, healthy_s=healthy) == expected


CAPS = [
    ("one lemon", {"n1": 3.0}, [], 0, 8, ["n1"], []),
    ("below the threshold", {"n1": 2.0}, [], 0, 8, [], []),
    ("overall cap: a quarter of 8 nodes", {"n1": 5.0, "n2": 4.0, "n3": 3.0}, [], 0, 8, ["n1", "n2"], ["n3"]),
    ("window cap", {"n1": 3.0, "n2": 3.0}, [], 1, 40, ["n1"], ["n2"]),
    ("current lemons stay ahead of new ones", {"n1": 9.0, "n2": 3.0}, ["n2"], 1, 8, ["n2", "n1"], []),
    ("current lemons stay; a new one waits for the window cap", {"n1": 9.0, "n2": 3.0}, ["n2"], 2, 8, ["n2"], ["n1"]),
    ("a tiny cluster still allows one", {"n1": 3.0, "n2": 3.0}, [], 0, 2, ["n1"], ["n2"]),
]


@pytest.mark.parametrize("suspicion, current, declared, size, kept, refused", [c[1:] for c in CAPS],
                         ids=[c[0] for c in CAPS])
def test_lemon_caps(suspicion, current, declared, size, kept, refused) -> None:
    caps = lemon_caps(suspicion, current=current, declared_in_window=declared, cluster_size=size, config=LEMON)
    assert caps.lemons == kept and sorted(caps.refused) == refused, caps


def test_healthy_seconds_counts_only_runs_after_the_failure_that_did_not_fail() -> None:
    runs = [run("1", "COMPLETED", ["n1"], -100, 50), run("2", "RUNNING", ["n1", "n2"], 60),
            run("3", "FAILED", ["n1"], 10, 20), run("4", "COMPLETED", ["n2"], 0, 90)]
    assert healthy_seconds("n1", since=T0, runs=runs, now=T0 + timedelta(seconds=100)) == 50 + 40


def test_a_jobs_partition_is_the_smallest_that_holds_its_nodes() -> None:
    ctx = ClusterContext(nodes=NODES, domains={"partition:all": NODES, "partition:small": ["n1", "n2"],
                                               "rack:a": ["n1"]})
    assert job_partition_nodes(["n1"], ctx) == ["n1", "n2"]
    assert job_partition_nodes(["n1", "n5"], ctx) == NODES
    assert job_partition_nodes(["x"], ctx) == NODES


# --------------------------------------------------------------------------- node limits of a restart

def advice(action=AdviceAction.RESTART_EXCLUDE, exclude=("n1",)) -> Advice:
    return Advice(action=action, rule="hardware_exclude", reason="gpu_hardware fault on n1",
                  exclude_nodes=list(exclude))


LIMITS = [
    # id, advice, job nodes, job excluded, dead, limits, config, (action, exclude, drain, rule)
    ("lemon added", advice(), 1, [], [], NodeLimits(lemons=["n3"], partition_nodes=NODES), PolicyConfig(),
     (AdviceAction.RESTART_EXCLUDE, ["n1", "n3"], [], "hardware_exclude+lemon")),
    ("a plain restart excludes the lemon", advice(AdviceAction.RESTART, ()), 1, [], [],
     NodeLimits(lemons=["n3"], partition_nodes=NODES), PolicyConfig(),
     (AdviceAction.RESTART_EXCLUDE, ["n3"], [], "hardware_exclude+lemon")),
    ("dead node from an earlier attempt", advice(AdviceAction.RESTART, ()), 1, [], ["n4"],
     NodeLimits(partition_nodes=NODES), PolicyConfig(),
     (AdviceAction.RESTART_EXCLUDE, ["n4"], [], "hardware_exclude+dead_node")),
    ("placement: a 3-node job in a 4-node partition keeps only its own bad node out", advice(), 3, [], ["n2"],
     NodeLimits(lemons=["n3"], partition_nodes=["n1", "n2", "n3", "n4"]), PolicyConfig(),
     (AdviceAction.RESTART_EXCLUDE, ["n1"], [], "hardware_exclude+placement")),
    ("placement counts down nodes", advice(), 2, [], [], NodeLimits(lemons=["n3"], partition_nodes=["n1", "n2", "n3", "n4"],
     unavailable=["n4"]), PolicyConfig(), (AdviceAction.RESTART_EXCLUDE, ["n1"], [], "hardware_exclude+placement")),
    ("placement: the job's own host dropped when nothing else is left", advice(), 1, ["n2"], [],
     NodeLimits(partition_nodes=["n1", "n2"]), PolicyConfig(), (AdviceAction.RESTART, [], [], "hardware_exclude+placement")),
    ("drain the lemon when configured and allowed", advice(), 1, [], [],
     NodeLimits(lemons=["n3"], drain=["n3"], partition_nodes=NODES), PolicyConfig(lemon_drain=True),
     (AdviceAction.RESTART_DRAIN, ["n1", "n3"], ["n3"], "hardware_exclude+lemon")),
    ("no partition known: no placement check", advice(), 1, [], [], NodeLimits(lemons=["n3"]), PolicyConfig(),
     (AdviceAction.RESTART_EXCLUDE, ["n1", "n3"], [], "hardware_exclude+lemon")),
    ("nothing to add: the advice as it was", advice(), 1, [], [], NodeLimits(partition_nodes=NODES), PolicyConfig(),
     (AdviceAction.RESTART_EXCLUDE, ["n1"], [], "hardware_exclude")),
]


@pytest.mark.parametrize("adv, num_nodes, excluded, dead, limits, config, expected", [c[1:] for c in LIMITS],
                         ids=[c[0] for c in LIMITS])
def test_node_limits(adv, num_nodes, excluded, dead, limits, config, expected) -> None:
    job = JobInfo(job_id="1", num_nodes=num_nodes, excluded_nodes=excluded)
    history = JobHistory(dead_nodes=dead)
    out = node_limits(adv, job, history, limits, config)
    assert (out.action, sorted(out.exclude_nodes), out.drain_nodes, out.rule) == expected, out.reason


def _history_with_exclusions(*earlier: str) -> JobHistory:
    """A job whose earlier failures (oldest first) each blamed one node, which jobmedic then excluded."""
    from workflows.contracts import Implicated, Verdict

    history = JobHistory()
    for i, host in enumerate(earlier):
        history = history.start_attempt(at=T0 + timedelta(hours=i))
        verdict = Verdict(category=Category.GPU_HARDWARE, implicated=Implicated(hosts=[host]))
        history = history.record_outcome(verdict, Advice(action=AdviceAction.RESTART_EXCLUDE, rule="hardware_exclude"),
                                         ended_at=T0 + timedelta(hours=i, minutes=30))
        history = history.note_excluded([host])
    return history.start_attempt(at=T0 + timedelta(hours=len(earlier)))


READMIT = [
    # id, excluded earlier (oldest first), limits, readmit_oldest, (exclude, readmit, rule)
    ("the oldest exclusion makes room for the node that just failed", ("n3", "n4"),
     NodeLimits(partition_nodes=["n1", "n2", "n3", "n4"]), True, (["n1"], ["n3"], "hardware_exclude+readmit")),
    ("a node down now is not given back: the next oldest is", ("n3", "n4"),
     NodeLimits(partition_nodes=["n1", "n2", "n3", "n4"], unavailable=["n3"]), True,
     (["n1"], ["n4"], "hardware_exclude+readmit")),
    ("a lemon is not given back", ("n3", "n4"),
     NodeLimits(partition_nodes=["n1", "n2", "n3", "n4"], lemons=["n3", "n4"]), True,
     ([], [], "hardware_exclude+placement")),
    ("histories from before the patch leave the new node in", ("n3", "n4"),
     NodeLimits(partition_nodes=["n1", "n2", "n3", "n4"]), False, ([], [], "hardware_exclude+placement")),
    ("room enough: nothing given back", ("n3",), NodeLimits(partition_nodes=["n1", "n2", "n3", "n4", "n5"]), True,
     (["n1"], [], "hardware_exclude")),
]


@pytest.mark.parametrize("earlier, limits, readmit_oldest, expected", [c[1:] for c in READMIT],
                         ids=[c[0] for c in READMIT])
def test_exclusions_do_not_pile_up_past_what_the_partition_can_spare(earlier, limits, readmit_oldest, expected) -> None:
    history = _history_with_exclusions(*earlier)
    job = JobInfo(job_id="1", num_nodes=2, excluded_nodes=list(earlier))
    out = node_limits(advice(), job, history, limits, PolicyConfig(), readmit_oldest=readmit_oldest)
    new = sorted(set(out.exclude_nodes) - set(earlier))
    assert (new, out.readmit_nodes, out.rule) == expected, out.reason
    usable = set(limits.partition_nodes) - (set(earlier) - set(out.readmit_nodes)) - set(out.exclude_nodes)
    assert len(usable - set(limits.unavailable)) >= job.num_nodes  # the job still fits


def test_exclusion_order_is_the_order_of_the_failures() -> None:
    assert _history_with_exclusions("n4", "n2", "n3").exclusion_order() == ["n4", "n2", "n3"]
    assert _history_with_exclusions("n4", "n2").note_readmitted(["n4"]).excluded_nodes == ["n2"]


# --------------------------------------------------------------------------- the rule, through decide()

def _decide(category: Category, *, exit_code: int | None = 1, hold: bool = True, nodes: NodeLimits | None = None):
    from workflows.contracts import Implicated, Verdict
    from workflows.policy import SystemicHold, decide

    verdict = Verdict(category=category, implicated=Implicated(hosts=["n1"]))
    job = JobInfo(job_id="1", exit_code=exit_code, num_nodes=1)
    return decide(verdict, job, JobHistory(), PolicyConfig(), now=T0,
                  systemic_hold=SystemicHold(event_id="e1", reason="7 jobs failed alike") if hold else None,
                  nodes=nodes)


DECIDE = [
    ("the guard's event holds the job", Category.NCCL_ERROR, 1, True, (AdviceAction.HOLD, "systemic_hold")),
    ("the job's own 'do not restart' beats it", Category.NCCL_ERROR, 93, True,
     (AdviceAction.STOP, "do_not_restart_exit_code")),
    ("no event: the category's own rule", Category.GPU_HARDWARE, 1, False, (AdviceAction.RESTART_EXCLUDE, "hardware_exclude")),
]


@pytest.mark.parametrize("category, exit_code, hold, expected", [d[1:] for d in DECIDE], ids=[d[0] for d in DECIDE])
def test_decide_with_the_guard(category, exit_code, hold, expected) -> None:
    advice = _decide(category, exit_code=exit_code, hold=hold)
    assert (advice.action, advice.rule) == expected
    if advice.action is AdviceAction.HOLD:
        assert "e1" in advice.reason and not advice.exclude_nodes


def test_a_hold_never_carries_lemons() -> None:
    advice = _decide(Category.NCCL_ERROR, nodes=NodeLimits(lemons=["n3"], partition_nodes=NODES))
    assert advice.action is AdviceAction.HOLD and advice.exclude_nodes == []
