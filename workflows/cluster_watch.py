"""The per-cluster watch workflow.

It runs one long-lived, heartbeating activity (`watch_cluster`) on the cluster's
scheduler task queue. That activity polls Slurm once per interval for all jobs,
reads their logs incrementally, and signals (or signal-with-starts) a job's
recovery workflow only when something changed. Its cursors travel in the
heartbeat details, so a worker that dies is replaced by one that resumes from
the last recorded cursors (the job workflows drop re-delivered observations);
the workflow's own history stays a handful of events however long it runs.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from workflows.messages import ActivityNames, WatchInput


def watch_workflow_id(cluster: str) -> str:
    return f"jobmedic-watch-{cluster}"


@workflow.defn(name="ClusterWatch")
class ClusterWatchWorkflow:
    @workflow.run
    async def run(self, inp: WatchInput) -> None:
        heartbeat = timedelta(seconds=max(5.0, inp.poll_interval_s * 5))
        # The activity only returns when it is cancelled; a failure (worker lost,
        # scheduler unreachable for long) is retried for ever with back-off.
        await workflow.execute_activity(
            ActivityNames.WATCH_CLUSTER,
            inp,
            task_queue=inp.scheduler_queue or f"jobmedic-slurm-{inp.cluster}",
            start_to_close_timeout=timedelta(days=3650),
            heartbeat_timeout=heartbeat,
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=1),
                maximum_interval=timedelta(seconds=30),
                backoff_coefficient=2.0,
            ),
        )
