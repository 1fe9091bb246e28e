"""Against the real Temporal dev server: a job whose workflow starts with a failure goes ahead of the routine
starts onboarding queues (Temporal's task priority, `URGENT_START`); a routine start keeps the default."""

from __future__ import annotations

import uuid

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.screening import LogScreen
from activities.watch import URGENT_START, WatchActivities, WatchContext, WatchState
from workflows.contracts import JobInfo, JobKey, JobState
from workflows.messages import JobRecoveryInput
from tests.watch.fakes import RecordingAudit
from tests.watch.test_watch_poll import T0, Listing, Logs, job


async def test_a_job_first_seen_failed_starts_with_the_urgent_priority(temporal_server, screen: LogScreen) -> None:
    client = await Client.connect(temporal_server.address, namespace=temporal_server.namespace,
                                  data_converter=pydantic_data_converter)
    cluster = f"prio-{uuid.uuid4().hex[:8]}"  # fresh workflow ids on a dev server that keeps its history

    def recovery_input(j: JobInfo, key: JobKey) -> JobRecoveryInput:
        return JobRecoveryInput(key=key, opt_in=j.opt_in.opt_in, scheduler_queue="q")

    queue = f"no-worker-{cluster}"  # nothing runs them: only how Temporal holds their first task matters
    ctx = WatchContext(cluster=cluster, environment="prod", main_queue=queue, scheduler_queue=queue,
                       recovery_input=recovery_input, hang_bound_s=lambda intervals, checkpoints: 3600.0,
                       systemic_window_s=60.0)
    watch = WatchActivities(context=ctx, slurm=Listing([job("1", JobState.RUNNING), job("2", JobState.FAILED)]),
                            logs=Logs(), screen=screen, client=client, audit=RecordingAudit(),  # type: ignore[arg-type]
                            clock=lambda: T0)
    state = WatchState()
    sent = await watch.poll_once(state)
    assert sorted(o.job.job_id for o in sent) == ["1", "2"]
    keys = {}
    for wid, watched in state.jobs.items():
        handle = client.get_workflow_handle(wid)
        desc = await handle.describe()
        keys[watched.job_id] = desc.raw_description.workflow_execution_info.priority.priority_key
        await handle.terminate("test over")
    assert keys == {"1": 0, "2": URGENT_START.priority_key}  # 0: unset, the server's default (3)
