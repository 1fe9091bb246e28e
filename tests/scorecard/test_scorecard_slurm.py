"""The scorecard of a real audit trail: monitor-mode jobs on the local Slurm cluster, a real `jobmedic worker`.

Three jobs run in monitor mode (`xid,ok`, `app,app`, `ok`); jobmedic advises and touches nothing. Then a
person does what users and admins do: an admin drains the node jobmedic blamed for the Xid (with a reason
of their own), and the users requeue both failed jobs by hand (`scontrol requeue`). The scorecard computed
from that trail and from what Slurm shows now must say: the Xid job's restart worked (agree), the node it
blamed was drained by an admin (agree), the app job's restart failed again the same way before any progress
(disagree), its stop advice was right (agree: not retried since), and the healthy job finished (agree).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.workflows.harness import Scenario, WorkerProcess, slurm_state, submit_training, unique, wait_for
from workflows.contracts import AuditEntry, EventType

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(240)]


def _submit(sc: Scenario, plan: str, **kw) -> str:
    job_id = submit_training(
        sc.tmp / plan.replace(",", "-"), environment=sc.environment, mode="observe", plan=plan,
        iteration_seconds=0.05, name=unique("jm-sc-"), **kw,
    )
    sc.jobs.append(job_id)
    return job_id


def _advice(sc: Scenario, job_id: str, *, attempt: int = 0) -> list[AuditEntry]:
    return [e for e in sc.entries(job_id) if e.event_type is EventType.ADVICE and e.attempt == attempt]


def _advised_after_failure(sc: Scenario, job_id: str, attempt: int) -> AuditEntry | None:
    """The advice on a `failed` incident at `attempt` (not the one on the requeue itself)."""
    trail = sc.entries(job_id)
    for n, e in enumerate(trail):
        if e.event_type is EventType.DETECTION and e.attempt == attempt and (e.detail or {}).get("incident") == "failed":
            return next((a for a in trail[n + 1:] if a.event_type is EventType.ADVICE), None)
    return None


def _scontrol(*args: str) -> None:
    done = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


async def test_scorecard_of_monitor_mode_runs_on_real_slurm(scenario: Scenario, worker: WorkerProcess) -> None:
    scenario.mode = "observe"
    worker.start()
    xid = _submit(scenario, "xid,ok")
    app = _submit(scenario, "app,app", fail_at=15)
    ok = _submit(scenario, "ok", iterations=30)

    first = await wait_for(lambda: _advice(scenario, xid) and _advice(scenario, app), timeout=90,
                           what="advice on both failures")
    xid_advice, app_advice = _advice(scenario, xid)[0], _advice(scenario, app)[0]
    assert (xid_advice.action, xid_advice.rule, xid_advice.mode) == ("restart_exclude", "hardware_exclude", "observe")
    assert (app_advice.action, app_advice.rule) == ("restart", "app_error_restart"), first
    blamed = xid_advice.implicated_nodes
    assert len(blamed) == 1, blamed
    await wait_for(lambda: slurm_state(xid) == ("FAILED", 0) and slurm_state(app) == ("FAILED", 0), timeout=30,
                   what="both left FAILED (monitor mode touches nothing)")

    _scontrol("update", f"NodeName={blamed[0]}", "State=DRAIN", "Reason=ops: GPU fell off the bus, RMA")
    try:
        _scontrol("requeue", xid)
        _scontrol("requeue", app)
        await wait_for(lambda: EventType.COMPLETED in scenario.kinds(xid), timeout=120, what="the requeued Xid job completed")
        stop = await wait_for(lambda: _advised_after_failure(scenario, app, 1), timeout=60,
                              what="advice on the app job's second failure")
        assert stop.action == "stop" and stop.category == app_advice.category, stop
        await wait_for(lambda: EventType.COMPLETED in scenario.kinds(ok), timeout=60, what="the healthy job completed")

        out = scenario.cli("scorecard", "--cluster", scenario.cluster, "--format", "json")
        card = json.loads(out.stdout)["clusters"]
        page = scenario.cli("scorecard", "--cluster", scenario.cluster, "--format", "html").stdout
    finally:
        _scontrol("update", f"NodeName={blamed[0]}", "State=RESUME")

    assert [c["cluster"] for c in card] == [scenario.cluster]
    score = card[0]
    assert score["snapshot_error"] is None and score["snapshot_at"], score["snapshot_error"]
    got = {(c["kind"], c["job_id"], c["node"], c["rule"], c["result"]) for c in score["checks"]}
    assert got == {
        ("restart", xid, None, "hardware_exclude", "agree"),
        ("node", xid, blamed[0], "hardware_exclude", "agree"),
        ("restart", app, None, "app_error_restart", "disagree"),
        ("stop", app, None, stop.rule, "agree"),
        ("healthy", ok, None, "no_advice", "agree"),
    } | {("node", app, n, "app_error_restart", "open") for n in app_advice.implicated_nodes}, score["checks"]
    node = next(c for c in score["checks"] if c["kind"] == "node" and c["job_id"] == xid)
    assert "ops: GPU fell off the bus, RMA" in node["what_happened"]
    kinds = {t["group"]: t for t in score["by_kind"]}
    assert kinds["restart"]["agreement"] == 0.5
    assert kinds["restart"]["jobs"] == {"agree": [xid], "disagree": [app]}
    assert kinds["stop"]["jobs"] == {"agree": [app]} and kinds["healthy"]["jobs"] == {"agree": [ok]}
    rules = {t["group"]: t["agreement"] for t in score["by_rule"]}
    assert rules["hardware_exclude"] == 1.0 and rules["app_error_restart"] == 0.0
    # the requeues were someone else's: jobmedic's advice on them is no prediction
    assert set(score["not_scored"].get("advice after someone else's requeue (slurm_requeue)", [])) == {xid, app}
    assert "<svg" in page and xid in page
