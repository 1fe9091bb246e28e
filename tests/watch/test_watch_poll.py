"""The cluster watch's poll logic, one poll at a time, over a scripted job listing.

The scheduler listing and log files are in-memory stand-ins (the real ones are
exercised end to end in tests/workflows); what is checked is what the watch
decides to send to Temporal and what it remembers between polls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone


from activities.screening import LogScreen
from activities.watch import GONE_AFTER_POLLS, WatchActivities, WatchContext, WatchState
from workflows.contracts import JobInfo, JobKey, JobState, LogCursor, OptIn, OptInResult
from workflows.messages import JobRecoveryInput, ObservationReason
from tests.watch.fakes import RecordingAudit

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def job(job_id: str, state: JobState, *, restarts: int = 0, env: str = "prod", out: str = "") -> JobInfo:
    return JobInfo(
        job_id=job_id, state=state, restarts=restarts, nodes=["node1", "node2"], submit_time=T0,
        start_time=T0, stdout_path=out,
        opt_in=OptInResult(opted_in=True, opt_in=OptIn(environment=env)),
    )


@dataclass
class Listing:
    jobs: list[JobInfo] = field(default_factory=list)

    async def list_jobs(self, *, opted_in_only: bool = True) -> list[JobInfo]:
        return [j.model_copy(deep=True) for j in self.jobs]


@dataclass
class Logs:
    broken: set[str] = field(default_factory=set)

    async def read(self, cursor: LogCursor, *, max_bytes: int | None = None, final: bool = False):
        if cursor.path in self.broken:
            raise RuntimeError(f"disk on fire under {cursor.path}")
        from adapters.logs.models import LogChunk

        return LogChunk(cursor=cursor, missing=True)


@dataclass
class Temporal:
    started: list[tuple[str, list]] = field(default_factory=list)
    signalled: list[tuple[str, object]] = field(default_factory=list)

    async def start_workflow(self, run, inp, *, id, start_signal_args, **kw):
        self.started.append((id, start_signal_args))

    def get_workflow_handle(self, wid):
        outer = self

        class Handle:
            async def signal(self, name, obs):
                outer.signalled.append((wid, obs))

        return Handle()


def make(listing: Listing, logs: Logs, temporal: Temporal, screen: LogScreen, clock) -> WatchActivities:
    def recovery_input(j: JobInfo, key: JobKey) -> JobRecoveryInput:
        return JobRecoveryInput(key=key, opt_in=j.opt_in.opt_in, scheduler_queue="q")

    ctx = WatchContext(
        cluster="c1", environment="prod", main_queue="m", scheduler_queue="q",
        recovery_input=recovery_input, hang_bound_s=lambda intervals, checkpoints: 3600.0, systemic_window_s=60.0,
    )
    return WatchActivities(context=ctx, slurm=listing, logs=logs, screen=screen, client=temporal,  # type: ignore[arg-type]
                           audit=RecordingAudit(), clock=clock)


async def test_a_long_listed_failure_is_counted_once_however_long_it_stays(screen: LogScreen) -> None:
    now = [T0]
    listing = Listing([job("1", JobState.FAILED), job("2", JobState.RUNNING)])
    watch = make(listing, Logs(), Temporal(), screen, lambda: now[0])
    state = WatchState()
    for minute in range(10):  # the failed job stays listed far past the 60 s window
        now[0] = T0 + timedelta(minutes=minute)
        await watch.poll_once(state)
    assert state.failures_counted.count("1:r0") == 1
    assert state.failures == []  # aged out of the window, and not counted again
    listing.jobs[0] = job("1", JobState.FAILED, restarts=1)  # a new failure of the next attempt counts
    await watch.poll_once(state)
    assert [f[0] for f in state.failures] == ["1"]


async def test_a_job_missing_from_one_listing_is_not_gone(screen: LogScreen) -> None:
    listing = Listing([job("7", JobState.RUNNING)])
    temporal = Temporal()
    watch = make(listing, Logs(), temporal, screen, lambda: T0)
    state = WatchState()
    await watch.poll_once(state)
    listing.jobs = []
    for _ in range(GONE_AFTER_POLLS - 1):
        await watch.poll_once(state)
    assert temporal.signalled == [] and len(state.jobs) == 1
    listing.jobs = [job("7", JobState.RUNNING)]  # back: still the same watched job
    await watch.poll_once(state)
    listing.jobs = []
    for _ in range(GONE_AFTER_POLLS):
        await watch.poll_once(state)
    assert len(temporal.signalled) == 1
    assert temporal.signalled[0][1].reasons == [ObservationReason.GONE]
    assert state.jobs == {}


async def test_one_jobs_failure_does_not_blind_the_watch_to_the_others(screen: LogScreen) -> None:
    listing = Listing([job("1", JobState.RUNNING, out="/bad/1.out"), job("2", JobState.RUNNING, out="/ok/2.out")])
    temporal = Temporal()
    watch = make(listing, Logs(broken={"/bad/1.out"}), temporal, screen, lambda: T0)
    sent = await watch.poll_once(WatchState())
    assert [o.job.job_id for o in sent] == ["2"]
    assert [wid for wid, _ in temporal.started] == ["jobmedic-c1-2-20261129T120000"]


async def test_jobs_of_other_environments_are_left_alone(screen: LogScreen) -> None:
    listing = Listing([job("1", JobState.RUNNING, env="dev"), job("2", JobState.RUNNING, env="prod")])
    temporal = Temporal()
    watch = make(listing, Logs(), temporal, screen, lambda: T0)
    watch._ctx.watches = lambda environment: environment == "prod"
    await watch.poll_once(WatchState())
    assert [wid for wid, _ in temporal.started] == ["jobmedic-c1-2-20261129T120000"]


async def test_a_requeued_job_keeps_the_key_it_was_first_seen_with(screen: LogScreen) -> None:
    listing = Listing([job("5", JobState.RUNNING)])
    temporal = Temporal()
    watch = make(listing, Logs(), temporal, screen, lambda: T0)
    state = WatchState()
    await watch.poll_once(state)
    requeued = job("5", JobState.PENDING, restarts=1)
    requeued.submit_time = T0 + timedelta(minutes=3)  # Slurm stamps a new submit time on requeue
    listing.jobs = [requeued]
    await watch.poll_once(state)
    assert {wid for wid, _ in temporal.started} == {"jobmedic-c1-5-20261129T120000"}


@dataclass
class FlakyTemporal(Temporal):
    """Temporal that refuses the first `down` start calls, as an unreachable frontend does (RPCError)."""

    down: int = 0

    async def start_workflow(self, run, inp, *, id, start_signal_args, **kw):
        from temporalio.service import RPCError, RPCStatusCode

        if self.down > 0:
            self.down -= 1
            raise RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b"")
        await super().start_workflow(run, inp, id=id, start_signal_args=start_signal_args, **kw)


async def test_an_observation_temporal_refused_is_sent_again_with_the_next_one(screen: LogScreen) -> None:
    """A job fails while Temporal is down: the failure reaches its workflow once Temporal is back, not never.

    The state change is seen once (the watch remembers the new state), so before, a refused signal lost it and the
    failed job's workflow never heard of the failure.
    """
    listing = Listing([job("5", JobState.RUNNING)])
    temporal = FlakyTemporal()
    watch = make(listing, Logs(), temporal, screen, lambda: T0)
    state = WatchState()
    await watch.poll_once(state)
    assert len(temporal.started) == 1
    temporal.down = 2
    listing.jobs = [job("5", JobState.FAILED)]
    assert await watch.poll_once(state) == []  # refused
    assert await watch.poll_once(state) == []  # refused again: nothing new to report, the old one is kept
    assert state.jobs[next(iter(state.jobs))].unsent is not None
    sent = await watch.poll_once(state)
    assert [o.reasons for o in sent] == [[ObservationReason.STATE_CHANGE]]
    assert sent[0].job.state is JobState.FAILED
    assert all(w.unsent is None for w in state.jobs.values())
    assert await watch.poll_once(state) == []  # sent once, not again


async def test_routine_news_waits_when_the_pass_is_out_of_time_and_a_failure_never_does(screen: LogScreen) -> None:
    """A pass past its share of the interval keeps first sightings of running jobs for the next pass; a job first
    seen failed, and a running job that fails, are signalled at once."""
    listing = Listing([job("1", JobState.RUNNING), job("2", JobState.FAILED), job("3", JobState.RUNNING)])
    temporal = Temporal()
    watch = make(listing, Logs(), temporal, screen, lambda: T0)
    state = WatchState()
    sent = await watch.poll_once(state, routine_s=0.0)  # no time left for routine news at all
    assert [o.job.job_id for o in sent] == ["2"]
    listing.jobs[2] = job("3", JobState.FAILED)
    sent = await watch.poll_once(state, routine_s=0.0)
    assert [(o.job.job_id, o.reasons) for o in sent] == [
        ("3", [ObservationReason.FIRST_SEEN, ObservationReason.STATE_CHANGE])]  # the kept sighting goes with it
    sent = await watch.poll_once(state, routine_s=60.0)  # time again: the job that waited is started
    assert [(o.job.job_id, o.reasons) for o in sent] == [("1", [ObservationReason.FIRST_SEEN])]
    assert sorted(wid.split("-")[-2] for wid, _ in temporal.started) == ["1", "2", "3"]
    assert await watch.poll_once(state, routine_s=60.0) == []


@dataclass
class ReadsOne(Listing):
    """A listing that also reads named jobs (SlurmClient.get_jobs), counting both kinds of read."""

    full_reads: int = 0
    one_reads: list[str] = field(default_factory=list)

    async def list_jobs(self, *, opted_in_only: bool = True) -> list[JobInfo]:
        self.full_reads += 1
        return await super().list_jobs(opted_in_only=opted_in_only)

    async def get_jobs(self, job_ids) -> list[JobInfo]:
        self.one_reads.extend(job_ids)
        return [j.model_copy(deep=True) for j in self.jobs if j.job_id in set(job_ids)]  # gone ones left out


async def test_a_poke_for_one_job_reads_and_signals_that_job_only(screen: LogScreen) -> None:
    listing = ReadsOne([job("1", JobState.RUNNING), job("2", JobState.RUNNING)])
    temporal = Temporal()
    watch = make(listing, Logs(), temporal, screen, lambda: T0)
    state = WatchState()
    await watch.poll_once(state)
    assert listing.full_reads == 1
    listing.jobs = [job("1", JobState.FAILED), job("2", JobState.FAILED)]
    sent = await watch.poll_jobs(state, {"2", "404"})  # job-end pokes for job 2 and a job long gone
    assert [(o.job.job_id, o.reasons) for o in sent] == [("2", [ObservationReason.STATE_CHANGE])]
    assert listing.full_reads == 1 and sorted(listing.one_reads) == ["2", "404"]
    sent = await watch.poll_once(state)  # the full pass finds job 1's failure, and job 2's is not sent twice
    assert [(o.job.job_id, o.reasons) for o in sent] == [("1", [ObservationReason.STATE_CHANGE])]
