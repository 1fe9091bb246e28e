"""The systemic guard on real Slurm: a burst with one shared cause is held and comes back; a burst of independent,
node-specific failures is handled job by job.

Each burst is 12 one-node, one-task jobs on the local 4-node cluster (16 CPUs), failing within a second of each other
when the test creates their flag file. The figures (failure -> first scheduler action, -> running again) are printed.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests import fake_http
from tests.workflows.harness import Scenario, WorkerProcess, scontrol_job, slurm_state, wait_for
from tests.workflows.systemic_support import SHARED_NCCL, latencies, node_specific, submit_burst, summary
from workflows.contracts import EventType

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(300)]
BURST = 12


def _cluster_entries(sc: Scenario, kind: EventType) -> list:
    store = sc.store()
    try:
        return store.query(cluster=sc.cluster, event_types=[kind])
    finally:
        store.close()


async def _all_running(ids: list[str]) -> None:
    await wait_for(lambda: all(slurm_state(j)[0] == "RUNNING" for j in ids), timeout=60, what="every job RUNNING")


async def test_a_burst_with_one_shared_cause_is_held_once_and_runs_again_when_it_clears(
    scenario: Scenario, worker: WorkerProcess
) -> None:
    posts: list[dict] = []

    def hook(request: fake_http.Request) -> tuple[int, str, bytes]:
        posts.append(json.loads(request.body))
        return 200, "application/json", b"{}"

    server = fake_http.serve(hook)
    try:
        scenario.policy = {
            "systemic_settle_s": 6.0, "systemic_probe_s": 2.0,
            "systemic_webhook_url": f"{fake_http.base_url(server)}/alert", "systemic_webhook_timeout_s": 3.0,
        }
        worker.start()
        ids, flag = submit_burst(scenario, BURST, failure=SHARED_NCCL, steps=40)
        await _all_running(ids)
        time.sleep(3)  # the watch has seen them all
        flag.touch()
        await wait_for(lambda: all(slurm_state(j) == ("PENDING", 1) for j in ids), timeout=90,
                       what="every job held by jobmedic (requeued once, pending)")
        for job_id in ids:
            advice = [e for e in scenario.entries(job_id) if e.event_type is EventType.ADVICE]
            assert [(a.action, a.rule) for a in advice] == [("hold", "systemic_hold")], (job_id, advice)
            assert scontrol_job(job_id)["Reason"] == "job_requeued_in_held_state"
        alerts = await wait_for(lambda: [e for e in _cluster_entries(scenario, EventType.SYSTEMIC_EVENT)
                                         if e.action == "alert"],
                                timeout=30, what="the alert entry")
        assert len(alerts) == 1, alerts
        event_id = alerts[0].detail["event_id"]
        assert "same cause" in alerts[0].outcome and len(alerts[0].detail["jobs"]) >= 5
        await wait_for(lambda: len(posts) >= 1, timeout=30, what="the webhook POST")
        assert [(p["status"], p["event_id"]) for p in posts] == [("firing", event_id)]
        listed = scenario.cli("release", "--list").stdout
        assert event_id in listed and "open" in listed, listed

        # the cause clears; an operator releases one job at once, the rest follow when a new job on the nodes succeeds
        flag.unlink()
        cleared = time.time()
        assert scenario.cli("release", ids[0]).returncode == 0
        await wait_for(lambda: slurm_state(ids[0])[0] in {"RUNNING", "COMPLETED"}, timeout=30, what="released job")
        assert all(slurm_state(j)[0] == "PENDING" for j in ids[1:])
        canary = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--ntasks=1", "-o", "/dev/null",
                                 "--wrap", "sleep 1"], capture_output=True, text=True, timeout=30, check=True)
        scenario.jobs.append(canary.stdout.strip())
        await wait_for(lambda: all(slurm_state(j) == ("COMPLETED", 1) for j in ids), timeout=150,
                       what="every job COMPLETED, restarted once")
        ended = [e for e in _cluster_entries(scenario, EventType.SYSTEMIC_EVENT) if e.action == "release"]
        assert len(ended) == 1 and "cause cleared" in ended[0].outcome, [e.outcome for e in ended]
        await wait_for(lambda: len(posts) >= 2, timeout=30, what="the resolved POST")
        assert posts[1]["status"] == "resolved"
        for job_id in ids:
            entries = scenario.entries(job_id)
            releases = [e for e in entries if e.event_type is EventType.ACTION_CONFIRMED and e.action == "release"]
            assert len(releases) == 1, (job_id, [r.outcome for r in releases])
            expected = "released by an operator" if job_id == ids[0] else "cause cleared"
            assert expected in releases[0].outcome, releases[0].outcome
        action = [latencies(scenario.entries(j))[0] for j in ids]
        again = [e.timestamp.timestamp() - cleared for j in ids for e in scenario.entries(j)
                 if e.event_type is EventType.ALLOCATION_RESTART]
        print(f"\nshared-cause burst: {BURST}/{BURST} held once and completed; failure -> hold confirmed "
              f"{summary(action)}; cause cleared -> running again {summary(again)}")
        assert max(a for a in action if a is not None) < 30
    finally:
        fake_http.stop(server)


async def test_a_burst_of_independent_node_specific_failures_is_handled_job_by_job(
    scenario: Scenario, worker: WorkerProcess
) -> None:
    worker.start()
    ids, flag = submit_burst(scenario, BURST, failure=node_specific, steps=40, first_only=True)
    await _all_running(ids)
    first_nodes = {j: scontrol_job(j)["NodeList"] for j in ids}
    time.sleep(3)
    flag.touch()
    await wait_for(lambda: all(slurm_state(j) == ("COMPLETED", 1) for j in ids), timeout=150,
                   what="every job restarted once and COMPLETED")
    right = 0
    for job_id in ids:
        entries = scenario.entries(job_id)
        advice = [e for e in entries if e.event_type is EventType.ADVICE]
        assert len(advice) == 1 and advice[0].action == "restart_exclude", (job_id, advice)
        assert advice[0].rule.startswith("hardware_exclude"), advice[0].rule
        assert advice[0].implicated_nodes == [first_nodes[job_id]]
        excluded = scontrol_job(job_id).get("ExcNodeList", "")
        assert first_nodes[job_id] in excluded, (job_id, excluded)
        right += 1
    held = _cluster_entries(scenario, EventType.SYSTEMIC_EVENT)
    assert held == []
    figures = [latencies(scenario.entries(j)) for j in ids]
    print(f"\nindependent burst: {right}/{BURST} restarted once without their own node, none held; "
          f"failure -> first action {summary([a for a, _ in figures])}; "
          f"failure -> running again {summary([b for _, b in figures])}")
