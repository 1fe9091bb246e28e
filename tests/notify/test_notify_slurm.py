"""Slurm's own events, end to end: EpilogSlurmctld and strigger run `jobmedic notify`, the watch polls at once.

A private 3-node lab cluster (deploy/slurm/up.sh with its own lab dir, ports and
EpilogSlurmctld; the shared lab is left alone) and the shared Temporal dev
server; a real `jobmedic worker` with the default 15 s poll interval, in
monitor mode. Without the hooks a failure waits for the next poll (7.5 s on
average, up to 15 s); with them:
- a crash is detected within ~2 s of the job's end (p50 over 6 jobs whose
  ends are spread over a whole interval);
- a killed node: slurmctld requeues its job when it marks the node DOWN, runs
  EpilogSlurmctld for it, and the job's node loss is detected within ~2 s of
  that; the `strigger --node --down` program pokes the watch too (slurmctld
  checks its triggers periodically, so that poke can be up to 15 s late);
- a drained node: the `strigger --node --drained` program pokes the watch.
Detection is the `detection` audit entry, as `jobmedic report` and
bench/latency.py count it.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.workflows.harness import Scenario, WorkerProcess, cancel, slurm_state, unique, wait_for
from workers.temporal_client import end_cluster_workflows
from workflows.cluster_watch import PokesSince, WatchNames, watch_workflow_id
from workflows.contracts import EventType
from workflows.messages import recovery_query

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(170)]

REPO = Path(__file__).resolve().parents[2]
JOBMEDIC = str(Path(sys.executable).parent / "jobmedic")
LAB = Path("/tmp/jobmedic-slurm/notify-lab")
CRASH_SLEEPS_S = [3.0, 5.5, 8.0, 10.5, 13.0, 15.5]  # job ends spread over a whole 15 s poll interval
HOOK_LIMIT_S = 5  # the wrappers' own hard limit around `jobmedic notify` (its --timeout-s is 3)


@dataclass
class Deployment:
    scenario: Scenario
    worker: WorkerProcess
    conf: Path
    node_job: str  # a --requeue job on node2, submitted before the worker started


def _hook(name: str, argv: str) -> Path:
    """A wrapper as a site would write it: fixed command line, hard time limit, slurmctld's clean environment."""
    path = LAB / "etc" / name
    path.write_text(
        "#!/bin/sh\n"
        "# slurmctld gives hooks only SLURM_* variables; the limit keeps it from ever waiting on jobmedic\n"
        f"exec /usr/bin/timeout -k 1 {HOOK_LIMIT_S} {JOBMEDIC} --config {LAB}/etc/jobmedic.toml {argv} "
        f"2>>{LAB}/log/notify.log\n"
    )
    path.chmod(0o755)
    return path


def _lab_env(stack: Path) -> dict[str, str]:
    return {**os.environ, "JOBMEDIC_STACK_DIR": str(stack), "JOBMEDIC_SLURM_LAB": str(LAB),
            "JOBMEDIC_SLURM_NODES": "3", "JOBMEDIC_SLURM_CTLD_PORT": "26817", "JOBMEDIC_SLURM_BASE_PORT": "27000",
            "JOBMEDIC_SLURM_EPILOG_SLURMCTLD": str(LAB / "etc" / "epilog-slurmctld")}


def _run(argv: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> str:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{argv}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, temporal_server) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("notify")
    stack = tmp / "stack"
    (LAB / "etc").mkdir(parents=True, exist_ok=True)
    (LAB / "log").mkdir(parents=True, exist_ok=True)
    _hook("epilog-slurmctld", "notify job-end")
    # strigger passes the nodes as one argument (a host list)
    node_down = _hook("node-down", 'notify node-down "$@"')
    node_drained = _hook("node-drained", 'notify node-down --drained "$@"')
    env = _lab_env(stack)
    sc = Scenario(tmp=tmp, cluster=unique("nt"), environment=unique("env"),
                  audit_url=f"sqlite:///{tmp / 'audit.db'}", temporal_address=temporal_server.address,
                  mode="observe", poll_interval_s=15.0)
    (LAB / "etc" / "jobmedic.toml").write_text(sc.write_config().read_text())
    patch = pytest.MonkeyPatch()
    worker = WorkerProcess(sc)
    try:
        _run(["bash", str(REPO / "deploy" / "slurm" / "up.sh")], env)
        conf = LAB / "etc" / "slurm.conf"
        assert f"EpilogSlurmctld={LAB}/etc/epilog-slurmctld" in conf.read_text()
        patch.setenv("SLURM_CONF", str(conf))
        # strigger keeps its triggers in slurmctld's state; --flags=perm: they stay after firing
        _run(["strigger", "--set", "--node", "--down", f"--program={node_down}", "--flags=perm"])
        _run(["strigger", "--set", "--node", "--drained", f"--program={node_drained}", "--flags=perm"])
        node_job = _submit(sc, tmp, sleep_s=600, where=["-w", "node2", "--requeue"], name="jm-node")
        worker.start()
        yield Deployment(scenario=sc, worker=worker, conf=conf, node_job=node_job)
    finally:
        worker.stop()
        if os.environ.get("JOBMEDIC_NOTIFY_TEST_LOG"):
            print(worker.tail(300))
            notify_log = LAB / "log" / "notify.log"
            print(notify_log.read_text() if notify_log.exists() else "(no notify.log)")
        for job_id in sc.jobs:
            cancel(job_id)
        patch.undo()
        subprocess.run(["bash", str(REPO / "deploy" / "slurm" / "down.sh")],
                       env={**env, "JOBMEDIC_SLURM_PURGE": "1", "JOBMEDIC_SLURM_KEEP_MUNGE": "1"},
                       capture_output=True, timeout=120)
        _end_workflows(temporal_server.address, sc.cluster)


def _end_workflows(address: str, cluster: str) -> None:
    import asyncio

    async def end() -> None:
        client = await Client.connect(address, data_converter=pydantic_data_converter)
        await end_cluster_workflows(client, cluster, reason="test finished")

    asyncio.run(end())


def _submit(sc: Scenario, tmp: Path, *, sleep_s: float, where: list[str], name: str = "jm-crash") -> str:
    script = tmp / "crash.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        'echo "[job] started on $(hostname)"\n'
        'sleep "$1"\n'
        'echo "[job] failing now at $(date +%s.%N)"\n'
        "exit 3\n"
    )
    comment = json.dumps({"jobmedic": {"environment": sc.environment, "mode": "observe"}})
    out = _run(["sbatch", "--parsable", f"--job-name={name}", "-N1", "-n1", *where, f"--output={tmp}/job-%j.out",
                f"--comment={comment}", str(script), str(sleep_s)])
    job_id = out.strip().split(";")[0]
    sc.jobs.append(job_id)
    return job_id


def _failed_at(tmp: Path, job_id: str) -> float | None:
    try:
        text = (tmp / f"job-{job_id}.out").read_text()
    except FileNotFoundError:
        return None
    found = re.search(r"failing now at (\d+\.\d+)", text)
    return float(found.group(1)) if found else None


def _detected_at(sc: Scenario, job_id: str) -> float | None:
    for entry in sc.entries(job_id):
        if entry.event_type is EventType.DETECTION:
            ts = entry.timestamp
            return (ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)).timestamp()
    return None


def _marked_down_at(node: str) -> float | None:
    """When slurmctld marked `node` DOWN, from its log (local time, milliseconds)."""
    log = (LAB / "log" / "slurmctld.log").read_text(errors="replace")
    found = re.findall(rf"^\[([0-9T:.-]+)\] error: Nodes {node} not responding, setting DOWN", log, re.M)
    return datetime.fromisoformat(found[-1]).timestamp() if found else None


async def test_a_crash_is_detected_within_2s_of_the_job_ending(deployment: Deployment) -> None:
    sc = deployment.scenario
    jobs = [_submit(sc, sc.tmp, sleep_s=s, where=["--exclude=node2", "--no-requeue"]) for s in CRASH_SLEEPS_S]
    latencies: dict[str, float] = {}

    def all_detected() -> bool:
        for job_id in jobs:
            failed, detected = _failed_at(sc.tmp, job_id), _detected_at(sc, job_id)
            if failed is not None and detected is not None:
                latencies[job_id] = round(detected - failed, 3)
        return len(latencies) == len(jobs)

    await wait_for(all_detected, timeout=max(CRASH_SLEEPS_S) + 30, what="every crash detected", every=0.5)
    values = sorted(latencies.values())
    p50 = statistics.median(values)
    print(f"\ncrash failure -> detection (s), poll interval 15 s, EpilogSlurmctld on: {values}; p50 {p50:.3f}")
    assert p50 <= 2.5, f"p50 {p50:.2f} s over {values}\n{deployment.worker.tail(80)}"
    assert max(values) <= 6.0, values  # the interval poll alone would take up to 15 s


async def test_a_killed_node_is_detected_within_2s_of_slurm_marking_it_down(deployment: Deployment) -> None:
    sc, job_id = deployment.scenario, deployment.node_job
    client = await Client.connect(sc.temporal_address, data_converter=pydantic_data_converter)

    async def watched() -> bool:  # the watch has seen the job running (its workflow exists)
        return bool([wf async for wf in client.list_workflows(recovery_query(cluster=sc.cluster, job_id=job_id))])

    await wait_for(watched, timeout=30, what=f"the watch to see job {job_id}")
    assert slurm_state(job_id)[0] == "RUNNING"
    node_ctl = REPO / "deploy" / "slurm" / "node-ctl.sh"
    _run(["bash", str(node_ctl), "kill", "node2"], {**os.environ, "JOBMEDIC_SLURM_LAB": str(LAB)})
    try:
        down_at = await wait_for(lambda: _marked_down_at("node2"), timeout=40, what="slurmctld to mark node2 DOWN")
        detected_at = await wait_for(lambda: _detected_at(sc, job_id), timeout=20, what="node loss detected")
        latency = detected_at - down_at
        print(f"\nnode2 marked DOWN -> job {job_id}'s node loss detected: {latency:.3f} s (EpilogSlurmctld of the "
              f"requeue)")
        assert latency <= 2.5, f"{latency:.2f} s\n{deployment.worker.tail(80)}"
        detection = next(e for e in sc.entries(job_id) if e.event_type is EventType.DETECTION)
        assert "slurm_requeue" in detection.outcome or "NODE_FAIL" in detection.outcome, detection.outcome

        handle = client.get_workflow_handle(watch_workflow_id(sc.cluster))

        poked_at = await wait_for(lambda: _poked(handle, "node-down", "node2"), timeout=25,
                                  what="the strigger --down program to poke the watch")
        print(f"node2 marked DOWN -> strigger's poke: {poked_at - down_at:.3f} s (slurmctld checks triggers every 15 s)")
    finally:
        _run(["bash", str(node_ctl), "start", "node2"], {**os.environ, "JOBMEDIC_SLURM_LAB": str(LAB)})


async def test_a_drained_node_pokes_the_watch(deployment: Deployment) -> None:
    sc = deployment.scenario
    client = await Client.connect(sc.temporal_address, data_converter=pydantic_data_converter)
    handle = client.get_workflow_handle(watch_workflow_id(sc.cluster))
    _run(["scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=jobmedic notify test"])
    try:
        drained_at = time.time()
        poked_at = await wait_for(lambda: _poked(handle, "node-drained", "node3"), timeout=25,
                                  what="the strigger --drained program to poke the watch")
        print(f"\nnode3 drained -> strigger's poke: {poked_at - drained_at:.3f} s")
    finally:
        _run(["scontrol", "update", "NodeName=node3", "State=RESUME"])


async def _poked(handle, source: str, node: str) -> float | None:
    """When the notifier sent the watch's newest poke from `source` naming `node` (None: none yet)."""
    answer = await handle.query(WatchNames.POKES, 0, result_type=PokesSince)
    for p in reversed(answer.pokes):
        if p.source == source and node in p.nodes and p.sent_at is not None:
            return p.sent_at.timestamp()
    return None
