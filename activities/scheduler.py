"""Scheduler-facing activities, served on one task queue per cluster (`jobmedic-slurm-<cluster>`).

A worker serving that queue runs next to `scontrol` (in-cluster mode) or
anywhere with SSH access (SSH mode). Every action is idempotent: the Slurm
adapter reads the current state first and does nothing when the effect is
already there, so a retried or replayed activity never applies twice.

Crash tests: `kill_after` names scheduler activities (`requeue_hold`,
`exclude_nodes`, `release_job`, `cancel_job`, `drain_nodes`) after whose
Slurm command the worker SIGKILLs itself, before the activity's result reaches
Temporal: the command took effect and its confirmation is never recorded. The
worker sets it from `JOBMEDIC_FAULT_KILL_AFTER` (comma separated; unset, the
default, in every real deployment); see `workers/worker.py`.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
from typing import Protocol

from loguru import logger
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities.errors import activity_errors
from activities.faults import injected_delay
from adapters.errors import JobmedicError, LogSourceError, MetricsError
from activities.screening import LogScreen
from adapters.logs.files import source_streams
from adapters.logs.models import LogChunk
from workflows.contracts import (
    ActionResult, EvidenceLine, JobEvidence, JobInfo, JobKey, LogCursor, NodeInfo,
)
from adapters.slurm.parse import array_of, array_task_count, is_array_remainder
from workflows.messages import (
    ACTION_NOT_ALLOWED,
    ActivityNames,
    ArrayTaskState,
    ArrayView,
    CollectEvidenceInput,
    CollectEvidenceOutput,
    JobActionInput,
)

LOG_WINDOW_BYTES = 2 * 1024 * 1024
WINDOW_READS = 8  # reads past the watch's position for the evidence window (it is normally at the end already)
MAX_ARRAY_TASKS = 2000  # sibling tasks carried in one evidence (bounds the activity's result)


class SlurmPort(Protocol):
    deployment: str  # the name this deployment marks the jobs it acts on with

    async def job_for_key(self, key: JobKey) -> JobInfo: ...
    async def list_nodes(self) -> list[NodeInfo]: ...
    async def requeue_hold(self, key: JobKey, *, expected_restarts: int | None = None) -> ActionResult: ...
    async def set_excluded_nodes(
        self, key: JobKey, nodes: list[str], *, readmit: list[str] | None = None
    ) -> ActionResult: ...
    async def release(self, key: JobKey, *, start_now: bool = True) -> ActionResult: ...
    async def cancel(self, key: JobKey) -> ActionResult: ...
    async def drain_node(self, node: str, reason: str) -> ActionResult: ...
    async def array_tasks(self, job_id: str) -> list[JobInfo]: ...
    def owner_of(self, job: JobInfo) -> str | None: ...
    def holds(self, job: JobInfo) -> bool: ...


class LogTailPort(Protocol):
    async def read(self, cursor: LogCursor, *, max_bytes: int | None = None, final: bool = False) -> LogChunk: ...
    async def tail_window(self, cursor_or_path: LogCursor | str, *, max_lines: int, max_bytes: int) -> list[str]: ...


class GpuHealthPort(Protocol):
    async def gpu_health(self, hosts: list[str], *, start: datetime, end: datetime) -> dict: ...


class SchedulerActivities:
    """Activities that read from and act on one cluster's scheduler."""

    def __init__(
        self,
        *,
        slurm: SlurmPort,
        logs: LogTailPort,
        metrics: GpuHealthPort | None = None,
        delays: dict[str, float] | None = None,
        may_act: Callable[[JobInfo], bool] | None = None,
        kill_after: Iterable[str] = (),
        screen: LogScreen | None = None,
    ) -> None:
        """`may_act` answers, from the worker's current settings and the job's current opt-in,
        whether jobmedic may act on the job now (a cluster switched to observe takes effect at once).
        `kill_after`: crash tests only (see the module docstring)."""
        self._slurm = slurm
        self._logs = logs
        self._metrics = metrics
        self._delays = delays or {}
        self._may_act = may_act
        self._kill_after = frozenset(kill_after)
        self._screen = screen  # screens the evidence window; built on first use when not given

    @activity.defn(name=ActivityNames.READ_JOB)
    async def read_job(self, key: JobKey) -> JobInfo:
        with activity_errors():
            return await self._checked_job(key)

    @activity.defn(name=ActivityNames.COLLECT_EVIDENCE)
    async def collect_evidence(self, inp: CollectEvidenceInput) -> CollectEvidenceOutput:
        """Gather the evidence of one incident, touching nothing.

        `hold_first` is only set by workflows started before decide-then-act
        (the `decide-before-act` patch): they hold a failed job here, before
        the decision. The log window is read before that hold: a requeue
        truncates the job's output file unless the job writes in append mode.
        """
        await injected_delay(self._delays, ActivityNames.COLLECT_EVIDENCE)
        with activity_errors():
            job = await self._checked_job(inp.key)
            # a hold empties the job's node list and task layout: the evidence is the job as it
            # failed (read now, or as the watch saw it when a retried attempt finds it held already)
            failed_job = job if job.nodes else (inp.observed_job or job)
            window, hits = await self._log_window(failed_job, inp)
            may_act = self._may_act(job) if self._may_act is not None else None
            not_acting: str | None = None
            owner = self._slurm.owner_of(job)
            if owner is not None and owner != self._slurm.deployment:
                may_act, not_acting = False, f"the job belongs to jobmedic deployment {owner!r} (AdminComment)"
            elif may_act is False:
                not_acting = "the cluster's settings or the job's opt-in no longer allow action"
            hold: ActionResult | None = None
            hold_error: str | None = None
            held_by_us = False
            if inp.hold_first and may_act is not False:
                try:
                    hold = await self._slurm.requeue_hold(inp.key, expected_restarts=inp.expected_restarts)
                    # on a retry the hold from the lost attempt shows as "unchanged": the mark says whose it is
                    held_by_us = hold.changed or (hold.job is not None and self._slurm.holds(hold.job))
                except JobmedicError as exc:
                    # evidence still matters; the decision goes on without the hold
                    hold_error = f"{type(exc).__name__}: {exc}"
                    logger.warning("job {} could not be held: {}", inp.key.job_id, exc)
            nodes = await self._node_states(failed_job)
            metric_facts = await self._metric_facts(failed_job)
            evidence = JobEvidence(
                job=failed_job,
                window=window,
                hits=_merged_hits(inp.hits, hits, window),
                nodes=nodes,
                metric_facts=metric_facts,
                progress=inp.progress,
                hang_suspected=inp.hang_suspected,
                seconds_since_progress=inp.seconds_since_progress,
                straggler=inp.straggler,
                node_failure_counts=inp.node_failure_counts,
                collected_at=datetime.now(timezone.utc),
            )
            return CollectEvidenceOutput(
                array=await self._array_view(job),
                evidence=evidence,
                hold=hold,
                hold_error=hold_error,
                held_by_us=held_by_us,
                job_now=(hold.job if hold and hold.job else job),
                may_act=may_act,
                not_acting_reason=not_acting,
            )

    @activity.defn(name=ActivityNames.REQUEUE_HOLD)
    async def requeue_hold(self, inp: JobActionInput) -> ActionResult:
        await injected_delay(self._delays, ActivityNames.REQUEUE_HOLD)
        with activity_errors():
            await self._still_allowed(inp.key, "requeue-hold")
            return self._took_effect(
                ActivityNames.REQUEUE_HOLD,
                await self._slurm.requeue_hold(inp.key, expected_restarts=inp.expected_restarts),
            )

    @activity.defn(name=ActivityNames.EXCLUDE_NODES)
    async def exclude_nodes(self, inp: JobActionInput) -> ActionResult:
        await injected_delay(self._delays, ActivityNames.EXCLUDE_NODES)
        with activity_errors():
            await self._still_allowed(inp.key, "exclude nodes")
            return self._took_effect(
                ActivityNames.EXCLUDE_NODES,
                await self._slurm.set_excluded_nodes(inp.key, list(inp.nodes), readmit=list(inp.readmit)),
            )

    @activity.defn(name=ActivityNames.RELEASE)
    async def release_job(self, inp: JobActionInput) -> ActionResult:
        """Release jobmedic's own hold: allowed whatever the settings say now (it undoes, never acts anew)."""
        await injected_delay(self._delays, ActivityNames.RELEASE)
        with activity_errors():
            return self._took_effect(
                ActivityNames.RELEASE, await self._slurm.release(inp.key, start_now=inp.start_now)
            )

    @activity.defn(name=ActivityNames.CANCEL)
    async def cancel_job(self, inp: JobActionInput) -> ActionResult:
        await injected_delay(self._delays, ActivityNames.CANCEL)
        with activity_errors():
            await self._still_allowed(inp.key, "cancel")
            return self._took_effect(ActivityNames.CANCEL, await self._slurm.cancel(inp.key))

    @activity.defn(name=ActivityNames.DRAIN_NODES)
    async def drain_nodes(self, inp: JobActionInput) -> ActionResult:
        """Drain each node; the last result is returned (each drain is idempotent on its own)."""
        await injected_delay(self._delays, ActivityNames.DRAIN_NODES)
        with activity_errors():
            await self._still_allowed(inp.key, "drain")
            result: ActionResult | None = None
            changed = False
            for node in inp.nodes:
                result = await self._slurm.drain_node(node, inp.reason or f"job {inp.key.job_id}")
                changed = changed or result.changed
            if result is None:
                raise ValueError("drain_nodes needs at least one node")
            return self._took_effect(ActivityNames.DRAIN_NODES, result.model_copy(update={"changed": changed}))

    # ------------------------------------------------------------------ helpers

    def _took_effect(self, name: str, result: ActionResult) -> ActionResult:
        """The command returned; a crash test may kill the worker here, before Temporal records the result."""
        if name in self._kill_after:
            logger.warning("fault injection: {} took effect ({}); worker SIGKILLs itself now", name, result.detail)
            logger.complete()
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    async def _still_allowed(self, key: JobKey, what: str) -> None:
        """Refuse (benign, not retryable) when the worker's current settings or the job's opt-in forbid action.

        Checked at every action, not only when the incident began: a cluster
        switched to observe, or acknowledgement withdrawn, stops an incident
        already under way.
        """
        if self._may_act is None:
            return
        job = await self._checked_job(key)
        if not self._may_act(job):
            raise ApplicationError(
                f"{what} of job {key.job_id} not done: the cluster's current settings or the job's opt-in no "
                "longer allow scheduler actions",
                type=ACTION_NOT_ALLOWED,
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,
            )

    async def _array_view(self, job: JobInfo) -> ArrayView | None:
        """The job array `job` is a task of, as Slurm shows it now; None for a job that is no array task."""
        array = array_of(job.job_id)
        if array is None:
            return None
        records = await self._slurm.array_tasks(job.job_id)
        tasks = [r for r in records if not is_array_remainder(r.job_id)]
        # the tasks not started yet are one record, "282_[2-5]"
        waiting = sum(array_task_count(r.job_id.split("_[", 1)[1][:-1]) for r in records if is_array_remainder(r.job_id))
        return ArrayView(
            array_job_id=array,
            tasks=[
                ArrayTaskState(
                    job_id=t.job_id, state=t.state.value, exit_code=t.exit_code, exit_signal=t.exit_signal,
                    restarts=t.restarts,
                )
                for t in tasks[:MAX_ARRAY_TASKS]
            ],
            total=len(tasks) + waiting,
        )

    async def _checked_job(self, key: JobKey) -> JobInfo:
        job = await self._slurm.job_for_key(key)  # refuses a recycled job id
        job.cluster = key.cluster
        return job

    async def _log_window(
        self, job: JobInfo, inp: CollectEvidenceInput
    ) -> tuple[list[EvidenceLine], list[EvidenceLine]]:
        """The last lines of each output file with their file line numbers and stream, and their flagged lines.

        Screened here, once: the verdict screens none of them again.
        """
        if self._screen is None:
            self._screen = await asyncio.to_thread(LogScreen)  # the catalogue's screener is compiled once per process and shared
        cursors = {c.path: c for c in inp.log_cursors}
        window: list[EvidenceLine] = []
        hits: list[EvidenceLine] = []
        for stream, path in source_streams(self._logs, job):
            try:
                first, lines = await self._numbered_tail(path, cursors.get(path), inp.log_window_lines, job)
            except LogSourceError as exc:
                logger.warning("log {} of job {} unreadable: {}", path, job.job_id, exc)
                continue
            window.extend(EvidenceLine(source="log", line=line, line_no=first + i, stream=stream)
                          for i, line in enumerate(lines))
            hits.extend(self._screen.flag(lines, first_line_no=first, stream=stream))
        return window, hits

    async def _numbered_tail(
        self, path: str, cursor: LogCursor | None, max_lines: int, job: JobInfo
    ) -> tuple[int, list[str]]:
        """(file line number of the first line, the last `max_lines` lines of the file).

        The lines before the watch's read position are numbered back from it (it counts the
        lines it consumed); the lines after it are read forward from it, numbered on. Without
        a position the file is read from its start.
        """
        start = cursor or LogCursor(path=path)
        lines: list[str] = []
        if cursor is not None and cursor.offset > 0:
            lines = await self._logs.tail_window(cursor, max_lines=max_lines, max_bytes=LOG_WINDOW_BYTES)
        first = start.line_no - len(lines) + 1
        for _ in range(WINDOW_READS):
            chunk = await self._logs.read(start, max_bytes=LOG_WINDOW_BYTES, final=job.state.finished)
            if chunk.missing:
                break
            if chunk.reset:  # truncated or replaced since the watch read it: its position says nothing now
                lines = []
            if not lines:
                first = chunk.first_line_no
            lines.extend(chunk.lines)
            if len(lines) > max_lines:
                first += len(lines) - max_lines
                lines = lines[-max_lines:]
            start = chunk.cursor
            if not chunk.more:
                break
        return max(first, 1), lines

    async def _node_states(self, job: JobInfo) -> list[NodeInfo]:
        nodes = await self._slurm.list_nodes()
        mine = set(job.nodes) | set(job.excluded_nodes)
        # the job's own nodes, and every unhealthy node (cluster-wide context)
        return [n for n in nodes if n.name in mine or n.unhealthy]

    async def _metric_facts(self, job: JobInfo) -> list[EvidenceLine]:
        if self._metrics is None or not job.nodes:
            return []
        end = job.end_time or datetime.now(timezone.utc)
        if end.tzinfo is None:
            end = end.replace(tzinfo=timezone.utc)
        start = (job.start_time.replace(tzinfo=timezone.utc) if job.start_time and job.start_time.tzinfo is None
                 else job.start_time) or end - timedelta(hours=1)
        try:
            health = await self._metrics.gpu_health(job.nodes, start=start, end=end + timedelta(minutes=1))
        except MetricsError as exc:
            logger.warning("GPU metrics unavailable for job {}: {}", job.job_id, exc)
            return []
        facts: list[EvidenceLine] = []
        for item in health.values():
            facts.extend(item.facts())
        return facts


def _merged_hits(
    watched: list[EvidenceLine], screened: list[EvidenceLine], window: list[EvidenceLine]
) -> list[EvidenceLine]:
    """The window's flagged lines, and the lines the watch flagged before the window (each line once)."""
    starts: dict[object, int] = {}
    for line in window:
        if line.line_no is not None:
            starts[line.stream] = min(starts.get(line.stream, line.line_no), line.line_no)
    only = next(iter(starts)) if len(starts) == 1 else None
    earlier = []
    for h in watched:
        if h.source != "log" or h.line_no is None:
            continue
        line_no = h.line_no
        if h.stream is None and only is not None:  # flagged by a watch that did not say which stream
            h = h.model_copy(update={"stream": only})
        if line_no < starts.get(h.stream, line_no + 1):
            earlier.append(h)
    return [*earlier, *screened]
