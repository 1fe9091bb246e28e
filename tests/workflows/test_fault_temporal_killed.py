"""The Temporal server killed with SIGKILL in the middle of a recovery (while jobmedic holds the job), down
for a minute, then started again on the same SQLite file.

Nothing in between is lost: the held job is restarted exactly once without
its bad node once the server is back, it is not left held, and every audit
entry lands once, in order.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.ports import free_port
from tests.workflows.conftest import terminate_cluster_workflows
from tests.workflows.fault_support import RESTART_STEPS, assert_trail_in_order_once
from tests.workflows.harness import Scenario, WorkerProcess, scontrol_job, slurm_state, submit_training, wait_for
from tests.workflows.test_crash_safety import _failing_node, _running_activity
from workers.devserver import start_dev_server
from workflows.contracts import EventType

pytestmark = [pytest.mark.slurm, pytest.mark.temporal, pytest.mark.slow, pytest.mark.timeout(360)]

DOWN_S = 60


async def test_temporal_killed_with_sigkill_while_jobmedic_holds_the_job(
    tmp_path: Path, scenario: Scenario, worker: WorkerProcess
) -> None:
    port, ui = free_port(), free_port()
    address = f"127.0.0.1:{port}"
    data = tmp_path / "temporal"
    server = start_dev_server(data_dir=data, address=address, ui_port=ui)
    scenario.temporal_address = address
    scenario.watchdog = {"activity_timeout_s": 10.0, "action_deadline_s": 150.0}
    try:
        worker.start(fault_delays={"exclude_nodes": 5.0})
        job_id = submit_training(scenario.tmp / "job", environment=scenario.environment, plan="xid,ok", fail_at=20)
        scenario.jobs.append(job_id)
        await wait_for(lambda: _running_activity(address, scenario.cluster, job_id, "exclude_nodes"), timeout=120,
                       what="exclude_nodes running", every=0.3)
        held = scontrol_job(job_id)
        assert (held["JobState"], held["Reason"]) == ("PENDING", "job_requeued_in_held_state"), held
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
        await asyncio.sleep(DOWN_S)
        assert worker.alive()  # the worker rides it out, reconnecting
        server = start_dev_server(data_dir=data, address=address, ui_port=ui)
        await wait_for(lambda: slurm_state(job_id) == ("COMPLETED", 1), timeout=180,
                       what="completed after exactly one restart")
        await wait_for(lambda: EventType.COMPLETED in scenario.kinds(job_id), timeout=60, what="completed entry")
        assert_trail_in_order_once(scenario, job_id, RESTART_STEPS)
        assert EventType.WATCHDOG not in scenario.kinds(job_id)
        bad = _failing_node(scenario, job_id)
        final = scontrol_job(job_id)
        assert bad in final["ExcNodeList"] and bad not in final["NodeList"], final
    finally:
        worker.stop()
        if server.poll() is None:
            await terminate_cluster_workflows(address, scenario.cluster)
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
