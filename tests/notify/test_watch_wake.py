"""The watch's wait between polls: the interval, cut short by a poke, re-polled while a poked job completes."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pytest

from activities import watch_wake
from activities.watch import WatchedJob, WatchState
from activities.watch_wake import PollWaker
from workflows.cluster_watch import PokesSince, WatchPoke

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


@dataclass
class Clock:
    t: float = 1000.0

    def __call__(self) -> float:
        return self.t


@dataclass
class Watch:
    """The watch workflow's `pokes` query; `pokes` arrive at given clock times."""

    clock: Clock
    schedule: list[tuple[float, WatchPoke]] = field(default_factory=list)
    fail: bool = False
    fail_until: float = 0.0  # a busy worker: queries time out until this clock time
    asked: int = 0

    async def query(self, name, after, *, result_type, rpc_timeout):
        self.asked += 1
        if self.fail:
            raise RuntimeError("query failed: unknown queryType pokes")
        if self.clock.t < self.fail_until:
            self.clock.t += rpc_timeout.total_seconds()
            raise RuntimeError("Timeout expired")
        arrived = [p for t, p in self.schedule if t <= self.clock.t]
        return PokesSince(seq=len(arrived), pokes=arrived[after:])


@dataclass
class Client:
    watch: Watch

    def get_workflow_handle(self, wid):
        return self.watch


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()

    async def sleep(seconds: float) -> None:
        clock.t += seconds

    monkeypatch.setattr(watch_wake.asyncio, "sleep", sleep)
    return clock


def waker(clock: Clock, watch: Watch) -> PollWaker:
    return PollWaker(Client(watch), "jobmedic-watch-c1", monotonic=clock, now=lambda: NOW)


def state(**jobs: str) -> WatchState:
    return WatchState(jobs={f"wf-{j}": WatchedJob(workflow_id=f"wf-{j}", job_id=j, state=s) for j, s in jobs.items()})


def poke(*job_ids: str, at: datetime = NOW, source: str = "job-end") -> WatchPoke:
    return WatchPoke(source=source, job_ids=list(job_ids), sent_at=at)


async def test_without_pokes_it_waits_the_interval(clock: Clock) -> None:
    watch = Watch(clock)
    assert await waker(clock, watch).wait(state(), 15.0) == []
    assert clock.t == pytest.approx(1015.0)
    assert watch.asked == 30  # every half second: cheap, and the workflow's history does not grow


async def test_a_poke_ends_the_wait_within_half_a_second(clock: Clock) -> None:
    watch = Watch(clock, schedule=[(1003.2, poke("7"))])
    woke = await waker(clock, watch).wait(state(), 15.0)
    assert [p.job_ids for p in woke] == [["7"]]
    assert 1003.2 <= clock.t <= 1003.7


async def test_a_poked_job_still_completing_is_polled_again_soon_then_left_to_the_interval(clock: Clock) -> None:
    watch = Watch(clock, schedule=[(1001.0, poke("7"))])
    w = waker(clock, watch)
    assert await w.wait(state(), 15.0)  # poked
    assert w.targets == {"7"}  # the poll that follows reads job 7 only
    t = clock.t
    assert await w.wait(state(**{"7": "COMPLETING"}), 15.0) == []  # the poll saw it in its epilog
    assert clock.t == pytest.approx(t + 0.5) and w.targets == {"7"}
    assert await w.wait(state(**{"7": "FAILED"}), 15.0) == []  # settled: back to the interval
    assert clock.t == pytest.approx(1015.0) and w.targets is None  # the full pass, due since the last one


async def test_pokes_naming_jobs_target_them_and_full_passes_keep_their_interval(clock: Clock) -> None:
    """A poke per ended job (thousands a day on a large cluster) must not turn into full passes back to back."""
    node_down = WatchPoke(source="node-down", nodes=["gpu07"], sent_at=NOW)
    watch = Watch(clock, schedule=[(1002.0, poke("7")), (1004.0, poke("8", "9")), (1006.0, node_down)])
    w = waker(clock, watch)
    ended = state(**{"7": "FAILED", "8": "FAILED", "9": "COMPLETED"})
    await w.wait(ended, 15.0)
    assert w.targets == {"7"}
    await w.wait(ended, 15.0)
    assert w.targets == {"8", "9"}
    await w.wait(ended, 15.0)
    assert w.targets is None  # a node poke: every job of the node may be touched, a full pass
    t = clock.t
    assert await w.wait(ended, 15.0) == [] and clock.t == pytest.approx(t + 15.0)


async def test_a_job_that_never_settles_is_re_polled_for_a_bounded_time(clock: Clock) -> None:
    watch = Watch(clock, schedule=[(1000.0, poke("7"))])
    w = waker(clock, watch)
    await w.wait(state(), 15.0)
    start, polls = clock.t, 0
    while clock.t - start < 30:
        await w.wait(state(**{"7": "RUNNING"}), 15.0)
        polls += 1
    assert polls <= watch_wake.SETTLE_S / watch_wake.REPOLL_EVERY_S + 3


async def test_a_fresh_activity_ignores_pokes_its_first_poll_already_covered(clock: Clock) -> None:
    old = poke("1", at=NOW - timedelta(minutes=10))
    watch = Watch(clock, schedule=[(0.0, old), (1002.0, poke("2"))])
    woke = await waker(clock, watch).wait(state(), 15.0)
    assert [p.job_ids for p in woke] == [["2"]]


async def test_a_broken_channel_falls_back_to_the_interval(clock: Clock) -> None:
    watch = Watch(clock, fail=True)
    w = waker(clock, watch)
    assert await w.wait(state(), 15.0) == []
    assert clock.t == pytest.approx(1015.0)
    assert watch.asked == 4  # asked after 1, 2, 4 and 8 s of quiet, not twice a second
    for _ in range(8):  # two minutes more: the quiet grows to QUIET_AFTER_ERROR_S and stays there
        await w.wait(state(), 15.0)
    assert watch.asked <= 4 + 120 / watch_wake.QUIET_AFTER_ERROR_S + 1


async def test_a_query_that_timed_out_under_load_does_not_mute_the_pokes(clock: Clock) -> None:
    """At 1,000 jobs a burst of failures kept the worker busy past the query's timeout; the channel then
    stayed quiet for 30 s and the failures ending meanwhile waited for the next full pass (found in
    bench/scale.py: detection p95 16 s where pokes answer in under a second)."""
    watch = Watch(clock, schedule=[(1003.0, poke("7"))], fail_until=1002.0)
    woke = await waker(clock, watch).wait(state(), 15.0)
    assert [p.job_ids for p in woke] == [["7"]]
    assert clock.t <= 1004.5


async def test_a_handover_request_ends_the_wait(clock: Clock) -> None:
    class Handing(Watch):
        async def query(self, name, after, *, result_type, rpc_timeout):
            answer = await super().query(name, after, result_type=result_type, rpc_timeout=rpc_timeout)
            answer.handover = self.clock.t >= 1002.0
            return answer

    w = waker(clock, Handing(clock))
    assert await w.wait(state(), 15.0) == []
    assert w.handover_asked
    assert clock.t <= 1002.5


async def _yield() -> None:
    """Let other tasks run once (asyncio.sleep is the test clock's here, which does not yield)."""
    loop = watch_wake.asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_soon(done.set_result, None)
    await done


async def test_during_a_pass_pokes_are_taken_at_most_twice_a_second_and_a_node_poke_asks_another_pass(
    clock: Clock,
) -> None:
    """The look runs beside the pass (a busy workflow worker answers slowly): its answer comes on a later call."""
    node_down = WatchPoke(source="node-down", nodes=["gpu07"], sent_at=NOW, job_ids=["9"])
    watch = Watch(clock, schedule=[(1000.0, poke("7")), (1000.2, poke("8")), (1001.0, node_down)])
    w = waker(clock, watch)

    async def between_batches() -> set[str]:
        got = await w.poked()
        await _yield()  # the pass goes on; the look's task runs meanwhile
        return got

    assert await between_batches() == set()  # asked
    assert await between_batches() == {"7"}  # answered
    clock.t = 1000.3
    assert await between_batches() == set() and watch.asked == 1  # asked again only after CHECK_EVERY_S
    clock.t = 1000.6
    assert await between_batches() == set()
    assert await between_batches() == {"8"}
    clock.t = 1001.2
    assert await between_batches() == set()
    assert await between_batches() == {"9"}  # the node's jobs it names are read now; the rest wait for ...
    t = clock.t
    assert await w.wait(state(), 15.0) == [] and w.targets is None and clock.t == t  # ... a full pass at once


async def test_a_look_still_out_when_the_pass_ends_is_answered_first(clock: Clock) -> None:
    watch = Watch(clock, schedule=[(1000.0, poke("7"))])
    w = waker(clock, watch)
    assert await w.poked() == set()  # asked; the pass ends before the answer is taken
    woke = await w.wait(state(), 15.0)
    assert [p.job_ids for p in woke] == [["7"]] and w.targets == {"7"} and clock.t == 1000.0
