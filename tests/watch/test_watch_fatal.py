"""A fatal error printed while the job runs, then no progress: the watch reports FATAL_STALLED, once.

Scripted logs and the real screener: a rank prints a CUDA error and dies, the other ranks
wait in their collective and Slurm still shows the job RUNNING. Progress after the line
means the job survived it (a handled error) and nothing is reported.
"""

from __future__ import annotations

from datetime import timedelta

from activities.screening import LogScreen
from tests.watch.test_watch_hang import POLL_S, running_job, start
from workflows.messages import ObservationReason

MEGATRON = (" [2026-11-29 12:00:00] iteration {i:8d}/  100000 | consumed samples: {s:12d} | "
            "elapsed time per iteration (ms): 980.0 | learning rate: 1.500E-04 | lm loss: 2.5E+00 |")
FATAL = "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered"


def progress(i: int) -> str:
    return MEGATRON.format(i=i + 1, s=(i + 1) * 256)


def stalled(run):
    return [o for o in run.temporal.observations if ObservationReason.FATAL_STALLED in o.reasons]


async def test_a_fatal_line_then_silence_is_reported_once(screen: LogScreen) -> None:
    run = start(screen, running_job())
    await run.polls(60, progress)
    await run.polls(POLL_S, lambda i: FATAL)
    await run.polls(30)
    assert stalled(run) == []  # not yet: a rank's error can be followed by progress
    await run.polls(120)
    reports = stalled(run)
    assert len(reports) == 1
    assert reports[0].fatal_at is not None and reports[0].job.state.value == "RUNNING"


async def test_progress_after_the_line_means_the_job_survived_it(screen: LogScreen) -> None:
    run = start(screen, running_job())
    await run.polls(60, progress)
    await run.polls(POLL_S, lambda i: FATAL)
    await run.polls(300, lambda i: progress(100 + i))
    assert stalled(run) == []
    assert run.watched.fatal_at is None


async def test_silence_without_a_fatal_line_is_not_this(screen: LogScreen) -> None:
    run = start(screen, running_job())
    await run.polls(60, progress)
    await run.polls(300)
    assert stalled(run) == []


async def test_a_new_attempt_starts_afresh(screen: LogScreen) -> None:
    run = start(screen, running_job())
    await run.polls(60, progress)
    await run.polls(POLL_S, lambda i: FATAL)
    await run.polls(120)
    assert len(stalled(run)) == 1
    run.watch._slurm.jobs[0].restarts = 1  # Slurm requeued it: a new attempt
    run.now[0] += timedelta(seconds=1)
    await run.polls(60, lambda i: progress(i))
    await run.polls(POLL_S, lambda i: FATAL)
    await run.polls(120)
    assert len(stalled(run)) == 2
