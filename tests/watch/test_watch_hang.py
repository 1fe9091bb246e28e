"""Hang evidence in the cluster watch, poll by poll, over scripted logs and a scripted DCGM.

A running job is reported hung (observation reason HANG) only on evidence: a
progress signal that stopped past the bound (a recognised format, a learned
template, the opt-in's progress_pattern), a communication-hang line, or every
GPU idle. A job printing a format nothing knows is watched for crashes only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pytest

from activities.detection.hang import ProgressSignal, hang_bound
from activities.screening import LogScreen
from activities.watch import WatchActivities, WatchContext, WatchState
from adapters.logs.models import LogChunk
from adapters.metrics.prometheus import GpuFinding, GpuHealth
from workflows.contracts import JobInfo, JobKey, JobState, LogCursor, OptIn, OptInResult
from workflows.messages import JobObservation, JobRecoveryInput, ObservationReason

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
OUT = "/logs/job.out"
POLL_S = 10
BOUND_S = 120.0  # the default bound below, before the job's rhythm is known


def running_job(*, pattern: str | None = None) -> JobInfo:
    return JobInfo(
        job_id="42", state=JobState.RUNNING, nodes=["node1", "node2"], submit_time=T0, start_time=T0,
        stdout_path=OUT,
        opt_in=OptInResult(opted_in=True, opt_in=OptIn(environment="prod", mode="action", progress_pattern=pattern)),
    )


@dataclass
class Listing:
    jobs: list[JobInfo]

    async def list_jobs(self, *, opted_in_only: bool = True) -> list[JobInfo]:
        return [j.model_copy(deep=True) for j in self.jobs]


@dataclass
class Logs:
    files: dict[str, list[str]] = field(default_factory=dict)

    async def read(self, cursor: LogCursor, *, max_bytes: int | None = None, final: bool = False) -> LogChunk:
        lines = self.files.get(cursor.path)
        if lines is None:
            return LogChunk(cursor=cursor, missing=True)
        new = lines[cursor.line_no:]
        after = cursor.model_copy(update={"line_no": len(lines), "offset": len(lines)})
        return LogChunk(lines=new, cursor=after, first_line_no=cursor.line_no + 1)


@dataclass
class Temporal:
    observations: list[JobObservation] = field(default_factory=list)

    async def start_workflow(self, run, inp, *, id, start_signal_args, **kw):
        self.observations.append(start_signal_args[0])


@dataclass
class Dcgm:
    util: float | None  # every GPU's mean utilisation; None: no data
    calls: int = 0

    async def gpu_health(self, hosts: list[str], *, start: datetime, end: datetime) -> dict[str, GpuHealth]:
        self.calls += 1
        if self.util is None:
            return {h: GpuHealth(host=h) for h in hosts}
        gpus = [GpuFinding(gpu=str(i), util_mean=self.util) for i in range(2)]
        return {h: GpuHealth(host=h, has_data=True, gpus=gpus) for h in hosts}


class Audit:
    def record(self, entry) -> bool:
        return True


@dataclass
class Run:
    watch: WatchActivities
    state: WatchState
    logs: Logs
    temporal: Temporal
    now: list[datetime]

    async def polls(self, seconds: int, line: Callable[[int], str | list[str] | None] = lambda i: None) -> None:
        """Poll every POLL_S for `seconds`, appending `line(i)` to the job's output before poll i."""
        for i in range(seconds // POLL_S):
            text = line(i)
            if text is not None:
                self.logs.files.setdefault(OUT, []).extend([text] if isinstance(text, str) else text)
            self.now[0] += timedelta(seconds=POLL_S)
            await self.watch.poll_once(self.state)

    @property
    def hangs(self) -> list[JobObservation]:
        return [o for o in self.temporal.observations if ObservationReason.HANG in o.reasons]

    @property
    def watched(self):
        return next(iter(self.state.jobs.values()))


def start(screen: LogScreen, job: JobInfo, *, metrics: Dcgm | None = None) -> Run:
    now = [T0]
    logs, temporal = Logs({OUT: []}), Temporal()

    def recovery_input(j: JobInfo, key: JobKey) -> JobRecoveryInput:
        return JobRecoveryInput(key=key, opt_in=j.opt_in.opt_in, scheduler_queue="q")

    ctx = WatchContext(
        cluster="c1", environment="prod", main_queue="m", scheduler_queue="q", recovery_input=recovery_input,
        hang_bound_s=lambda normal, ckpt: hang_bound(normal, ckpt, floor_s=60.0, ceiling_s=600.0, default_s=BOUND_S),
    )
    watch = WatchActivities(context=ctx, slurm=Listing([job]), logs=logs, screen=screen, client=temporal,  # type: ignore[arg-type]
                            audit=Audit(), metrics=metrics, clock=lambda: now[0])
    return Run(watch, WatchState(), logs, temporal, now)


UNKNOWN = "[worker] chunk {i:x} written, all good"  # a growing hex id, no progress word: nothing knows it


async def test_a_format_nothing_knows_is_never_hung(screen: LogScreen) -> None:
    run = start(screen, running_job())
    await run.polls(600, lambda i: UNKNOWN.format(i=i * 37) if i < 5 else None)  # talks a bit, then goes quiet
    assert run.hangs == []
    assert run.watched.signal is ProgressSignal.NONE
    assert run.watched.hang_watch.startswith("off (no progress signal")
    assert all(not o.hang_suspected for o in run.temporal.observations)


async def test_one_line_mentioning_a_step_is_no_progress_signal(screen: LogScreen) -> None:
    run = start(screen, running_job())
    await run.polls(600, lambda i: "[setup] resuming from step 5000 (phase two)" if i == 0 else None)
    assert run.hangs == [] and run.watched.signal is ProgressSignal.NONE


async def test_a_learned_template_that_stops_is_a_hang(screen: LogScreen) -> None:
    run = start(screen, running_job())
    await run.polls(60, lambda i: f"[trainer] shard batch {i + 1} of 9000 done, loss {3.0 / (i + 1):.3f}")
    assert run.watched.signal is ProgressSignal.LEARNED and run.watched.hang_watch == "on (learned)"
    assert run.hangs == []  # progressing
    await run.polls(int(BOUND_S) + 2 * POLL_S)
    assert len(run.hangs) == 1 and run.hangs[0].hang_suspected


async def test_a_recognised_format_that_stops_is_a_hang(screen: LogScreen) -> None:
    run = start(screen, running_job())
    await run.polls(60, lambda i: f" iteration {i + 1:>6}/  9000 | consumed samples: {i * 8} | lm loss: 2.0E+00 |")
    assert run.watched.signal is ProgressSignal.RECOGNISED
    await run.polls(int(BOUND_S) + 2 * POLL_S)
    assert len(run.hangs) == 1


async def test_a_finished_bar_followed_by_silence_is_not_a_hang(screen: LogScreen) -> None:
    run = start(screen, running_job())
    bar = " {p:>3}%|#   | {n}/4 [00:01<00:01, 3.0it/s]"
    await run.polls(40, lambda i: bar.format(p=25 * (i + 1), n=i + 1))  # a data-preparation bar runs to 4/4
    await run.polls(600)  # then the training prints nothing anyone knows
    assert run.hangs == [] and run.watched.tracker.last_finished


async def test_the_opt_ins_progress_pattern_is_a_progress_signal(screen: LogScreen) -> None:
    run = start(screen, running_job(pattern=r"^ok shard=(\d+)$"))
    await run.polls(60, lambda i: f"ok shard={i}")  # a format the learner does not know either
    assert run.watched.signal is ProgressSignal.USER_PATTERN and run.watched.hang_watch == "on (user pattern)"
    assert run.hangs == []
    await run.polls(int(BOUND_S) + 2 * POLL_S)
    assert len(run.hangs) == 1


async def test_a_progress_pattern_that_never_matched_is_not_evidence(screen: LogScreen) -> None:
    run = start(screen, running_job(pattern=r"^ok shard=(\d+)$"))
    await run.polls(600, lambda i: UNKNOWN.format(i=i))
    assert run.hangs == [] and "progress_pattern not matched yet" in run.watched.hang_watch


async def test_a_communication_hang_line_is_evidence(screen: LogScreen) -> None:
    run = start(screen, running_job())
    watchdog = ("[rank1]:[E1129 12:00:30 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=60000) ran for "
                "60010 milliseconds before timing out.")
    await run.polls(60, lambda i: watchdog if i == 2 else UNKNOWN.format(i=i))
    assert run.hangs == []  # the bound has not passed yet
    await run.polls(int(BOUND_S))
    assert len(run.hangs) == 1


@pytest.mark.parametrize(("util", "hung"), [(0.0, True), (45.0, False), (None, False)])
async def test_every_gpu_idle_is_evidence(screen: LogScreen, util: float | None, hung: bool) -> None:
    dcgm = Dcgm(util)
    run = start(screen, running_job(), metrics=dcgm)
    await run.polls(600, lambda i: UNKNOWN.format(i=i))
    assert bool(run.hangs) is hung
    assert 1 <= dcgm.calls <= 600 // 60 + 1  # asked only past the bound, at most once a minute


async def test_a_new_attempt_starts_a_new_rhythm_but_keeps_the_signal(screen: LogScreen) -> None:
    run = start(screen, running_job())
    await run.polls(60, lambda i: f"[trainer] shard batch {i + 1} of 9000 done")
    requeued = running_job()
    requeued.restarts, requeued.start_time = 1, run.now[0]
    run.watch._slurm.jobs = [requeued]  # type: ignore[attr-defined]
    await run.polls(int(BOUND_S) - 2 * POLL_S)
    assert run.hangs == []  # the new attempt's clock started at its own start
    assert run.watched.signal is ProgressSignal.LEARNED and run.watched.tracker.iteration_intervals_s == []
    await run.polls(4 * POLL_S)
    assert len(run.hangs) == 1  # it never printed progress: a known signal that stopped
