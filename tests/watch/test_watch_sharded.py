"""The sharded watch with its state in the watch_state table: partition, resume, small heartbeat, bad records.

Real job output files on disk read by the real file log source, a real SQLite audit store holding the state;
the scheduler listing and Temporal are in-memory stand-ins (tests/workflows runs the whole thing for real).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path


from activities.screening import LogScreen
from activities.watch import WatchActivities, WatchContext, WatchState, _FailureIndex
from activities.watch_state import ShardKeeper
from adapters.audit import AuditStore
from adapters.audit.rows import shard_of
from adapters.logs.files import LocalFileLogSource
from adapters.slurm.parse import SkippedRecord, SqueueListing
from workflows.contracts import EventType, JobInfo, JobKey, JobState, OptIn, OptInResult
from workflows.messages import JobRecoveryInput, ObservationReason
from tests.watch.fakes import RecordingAudit

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
CRASH = "RuntimeError: CUDA error: an illegal memory access was encountered"


def job(job_id: str, out: Path, *, state: JobState = JobState.RUNNING, nodes: list[str] | None = None) -> JobInfo:
    return JobInfo(
        job_id=job_id, state=state, nodes=nodes or ["n1", "n2"], submit_time=T0, start_time=T0,
        stdout_path=str(out), stderr_path=str(out),
        opt_in=OptInResult(opted_in=True, opt_in=OptIn(environment="prod")),
    )


@dataclass
class Listing:
    jobs: list[JobInfo] = field(default_factory=list)
    skipped: list[SkippedRecord] = field(default_factory=list)
    calls: int = 0

    async def list_jobs(self, *, opted_in_only: bool = True) -> list[JobInfo]:
        return (await self.listing(opted_in_only=opted_in_only)).jobs

    async def listing(self, *, opted_in_only: bool = True) -> SqueueListing:
        self.calls += 1
        return SqueueListing(jobs=[j.model_copy(deep=True) for j in self.jobs], skipped=list(self.skipped))


@dataclass
class Temporal:
    started: list[tuple[str, list]] = field(default_factory=list)

    async def start_workflow(self, run, inp, *, id, start_signal_args, **kw):
        self.started.append((id, start_signal_args))

    def get_workflow_handle(self, wid):
        raise AssertionError("no job leaves the listing in these tests")


def make(listing: Listing, temporal: Temporal, screen: LogScreen, audit: RecordingAudit, store: AuditStore | None,
         clock=lambda: T0) -> WatchActivities:
    def recovery_input(j: JobInfo, key: JobKey) -> JobRecoveryInput:
        return JobRecoveryInput(key=key, opt_in=j.opt_in.opt_in, scheduler_queue="q")

    ctx = WatchContext(cluster="c1", environment="prod", main_queue="m", scheduler_queue="q",
                       recovery_input=recovery_input, hang_bound_s=lambda i, c: 3600.0)
    return WatchActivities(context=ctx, slurm=listing, logs=LocalFileLogSource(), screen=screen,
                           client=temporal, audit=audit, clock=clock, state_store=store)  # type: ignore[arg-type]


def write(path: Path, lines: list[str]) -> None:
    with path.open("a") as f:
        f.writelines(line + "\n" for line in lines)


def hit_lines(temporal: Temporal) -> dict[str, list[int]]:
    """Workflow id -> the file line numbers of the flagged lines it was sent."""
    out: dict[str, set[int]] = {}
    for wid, args in temporal.started:
        out.setdefault(wid, set()).update(h.line_no for obs in args for h in obs.hits if h.line_no is not None)
    return {wid: sorted(lines) for wid, lines in out.items()}


async def test_shards_split_the_jobs_and_a_restarted_watch_resumes_every_cursor(tmp_path: Path, screen) -> None:
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    shards = 3
    jobs = []
    for i in range(30):
        out = tmp_path / f"out-{i}.txt"
        write(out, [f"iteration {n}/1000 | loss 2.0" for n in range(1, 4)] + [CRASH])
        jobs.append(job(str(100 + i), out))
    listing = Listing(jobs)

    async def one_pass(watch: WatchActivities, keepers: list[ShardKeeper], states: list[WatchState]) -> None:
        for shard, (keeper, state) in enumerate(zip(keepers, states)):
            await watch.poll_once(state, shard=shard, shards=shards, keeper=keeper)

    first = Temporal()
    watch = make(listing, first, screen, RecordingAudit(), store)
    keepers = [ShardKeeper(store, cluster="c1", shard=s, shards=shards) for s in range(shards)]
    states = [WatchState.model_validate(await k.load()) for k in keepers]
    await one_pass(watch, keepers, states)
    # every job watched by exactly the shard its id hashes to
    for shard, state in enumerate(states):
        assert {w.job_id for w in state.jobs.values()} == {j.job_id for j in jobs if shard_of(j.job_id, shards) == shard}
    assert sorted(len(lines) for lines in hit_lines(first).values()) == [1] * 30  # line 4 of each job, once
    assert listing.calls == 1  # the three shards of this worker shared one listing

    # the worker is replaced: new activities, new keepers, the state read back from the table
    for i in range(30):
        write(tmp_path / f"out-{i}.txt", ["iteration 4/1000 | loss 1.9", CRASH])
    second = Temporal()
    watch = make(listing, second, screen, RecordingAudit(), store)
    keepers = [ShardKeeper(store, cluster="c1", shard=s, shards=shards) for s in range(shards)]
    states = [WatchState.model_validate(await k.load()) for k in keepers]
    assert sum(len(s.jobs) for s in states) == 30
    await one_pass(watch, keepers, states)
    sent = hit_lines(second)
    assert sent and all(lines == [6] for lines in sent.values())  # only the new crash line: none again, none lost
    assert all(ObservationReason.FIRST_SEEN not in obs.reasons for _, args in second.started for obs in args)
    store.close()


async def test_a_pass_writes_only_the_rows_that_changed(tmp_path: Path, screen) -> None:
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    quiet, busy = tmp_path / "quiet.txt", tmp_path / "busy.txt"
    write(quiet, ["iteration 1/10 | loss 1"])
    write(busy, ["iteration 1/10 | loss 1"])
    listing = Listing([job("1", quiet), job("2", busy)])
    watch = make(listing, Temporal(), screen, RecordingAudit(), store)
    keeper = ShardKeeper(store, cluster="c1")
    state = WatchState()
    await watch.poll_once(state, keeper=keeper)
    assert keeper.rows_written == 3  # two jobs and the shard's own row
    write(busy, ["iteration 2/10 | loss 1"])
    await watch.poll_once(state, keeper=keeper)
    assert keeper.rows_written == 3 + 2  # the busy job's cursor and the shard's poll count; the quiet job stays
    store.close()


async def test_a_job_that_only_progressed_waits_for_its_turn_and_a_signalled_one_is_written_at_once(tmp_path: Path) -> None:
    """Each pass rewrites the rows of the jobs it signalled, and a quarter of the others (their turn)."""
    from activities.watch_state import SAVE_EVERY_POLLS

    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    state = WatchState.model_validate({"jobs": {f"wf-{i}": {"workflow_id": f"wf-{i}", "job_id": str(i)}
                                                for i in range(40)}})
    keeper = ShardKeeper(store, cluster="c1")
    assert await keeper.save(state, urgent=set()) == 41  # never written: every job, and the shard's row
    written: dict[str, int] = {}
    for poll in range(1, SAVE_EVERY_POLLS + 1):
        state.polls = poll
        for watched in state.jobs.values():
            watched.restarts = poll  # every job changed since the last save
        before = {item: data for item, data in store.load_watch_state("c1").items()}
        rows = await keeper.save(state, urgent={"wf-7"})
        after = store.load_watch_state("c1")
        changed = [item for item in after if after[item] != before[item]]
        assert "wf-7" in changed and "~shard-0" in changed and rows == len(changed)
        assert len(changed) < 2 + 40 // 2  # the urgent job, the shard row, about a quarter of the others
        for item in changed:
            written[item] = written.get(item, 0) + 1
    # over SAVE_EVERY_POLLS polls every job's row was written (its turn came once), the urgent one every time
    assert written["wf-7"] == SAVE_EVERY_POLLS
    assert all(written.get(f"wf-{i}") == 1 for i in range(40) if i != 7)
    # a full save (a handover) writes every changed row, turn or not (the shard's row did not change)
    for watched in state.jobs.values():
        watched.restarts = 99
    assert await keeper.save(state) == 40
    store.close()


async def test_the_heartbeat_stays_small_with_thousands_of_jobs(tmp_path: Path, screen) -> None:
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    jobs = []
    for i in range(1500):
        out = tmp_path / f"o{i}"
        write(out, ["iteration 1/100 | loss 3.0 | elapsed time per iteration (ms): 900.1"])
        jobs.append(job(str(5000 + i), out))
    watch = make(Listing(jobs), Temporal(), screen, RecordingAudit(), store)
    keeper = ShardKeeper(store, cluster="c1")
    state = WatchState()
    await watch.poll_once(state, keeper=keeper)
    beat = json.dumps(WatchActivities._beat(state, keeper, 0, 1))
    legacy = json.dumps(WatchActivities._beat(state, None, 0, 1))  # what the heartbeat used to carry
    assert len(state.jobs) == 1500 and store.watch_state_rows("c1") == 1501
    assert len(beat) < 200 < 1000 * 1500 < len(legacy) * 1.5
    store.close()


async def test_an_unreadable_record_is_skipped_and_audited_once_and_the_others_are_watched(tmp_path: Path, screen) -> None:
    out = tmp_path / "out.txt"
    write(out, [CRASH])
    bad = SkippedRecord(reason="a job entry has no job_id", excerpt='{"name": "x"}')
    listing = Listing([job("7", out)], skipped=[bad])
    audit, temporal = RecordingAudit(), Temporal()
    watch = make(listing, temporal, screen, audit, None)
    state = WatchState()
    await watch.poll_once(state)
    await watch.poll_once(state)
    assert [e.event_type for e in audit.entries] == [EventType.MALFORMED_RECORD]
    assert "no job_id" in (audit.entries[0].outcome or "")
    assert [wid for wid, _ in temporal.started] and state.jobs  # job 7 is watched as usual


async def test_a_fifo_as_output_file_is_refused_without_blocking_the_watch(tmp_path: Path, screen) -> None:
    fifo, good = tmp_path / "fifo.out", tmp_path / "good.out"
    os.mkfifo(fifo)
    write(good, [CRASH])
    temporal = Temporal()
    watch = make(Listing([job("1", fifo), job("2", good)]), temporal, screen, RecordingAudit(), None)
    started = time.monotonic()
    await watch.poll_once(WatchState())
    assert time.monotonic() - started < 5  # an open() of the FIFO would wait for a writer for ever
    assert sum(len(v) for v in hit_lines(temporal).values()) == 1  # the good job's crash line


def test_failure_counts_per_job_match_a_direct_count_and_are_not_quadratic() -> None:
    nodes = [f"gpu{n:03d}" for n in range(256)]
    failures = [(str(i), float(i), nodes[(i * 7) % 192:(i * 7) % 192 + 64]) for i in range(1000)]
    observed = [JobInfo(job_id=str(i), nodes=nodes[(i * 5) % 192:(i * 5) % 192 + 64]) for i in range(0, 1000, 10)]

    def direct(j: JobInfo) -> dict[str, int]:
        counts: dict[str, int] = {}
        for job_id, _, failed in failures:
            if job_id != j.job_id:
                for node in failed:
                    if node in j.nodes:
                        counts[node] = counts.get(node, 0) + 1
        return counts

    class Counted(list):
        """The failures list, counting how often it is walked (each walk is a cost per failure)."""

        walks = 0

        def __iter__(self):
            Counted.walks += 1
            return super().__iter__()

    index = _FailureIndex(Counted(failures))
    assert all(index.counts_for(j) == direct(j) for j in observed)
    # one walk over the failures to build the index, none per job: the cost per job is its own nodes
    # (counting by scanning every failure for every observed job was quadratic, ~0.26 s a job here)
    assert Counted.walks == 1


def test_old_state_rows_are_pruned_on_load(tmp_path: Path) -> None:
    import asyncio

    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    old = ShardKeeper(store, cluster="c1", clock=lambda: T0 - timedelta(days=5))
    state = WatchState.model_validate({"jobs": {"wf-1": {"workflow_id": "wf-1", "job_id": "1"}}})
    asyncio.run(old.save(state))
    assert store.watch_state_rows("c1") == 2
    loaded = asyncio.run(ShardKeeper(store, cluster="c1", clock=lambda: T0).load())
    assert loaded["jobs"] == {} and store.watch_state_rows("c1") == 0
    store.close()


@dataclass
class PokedListing(Listing):
    """A listing taken at the pass's start, and the per-job read a poke's poll makes later (the job has ended)."""

    now: dict[str, JobInfo] = field(default_factory=dict)

    async def get_jobs(self, job_ids) -> list[JobInfo]:
        return [self.now[j].model_copy(deep=True) for j in job_ids if j in self.now]


async def test_a_poke_during_a_long_pass_is_read_at_once_and_the_stale_listing_left_alone(
    tmp_path: Path, screen
) -> None:
    """At 10,000 jobs a pass takes longer than the interval; a job ending at its start waited for its end (22 s in
    bench/scale.py). The poke is taken between batches; the listing's older record of that job is not observed
    afterwards (it would say RUNNING again)."""
    jobs = []
    for i in range(70):  # three batches of JOBS_AT_ONCE
        out = tmp_path / f"out-{i}.txt"
        write(out, ["iteration 1/1000 | loss 2.0"])
        jobs.append(job(str(100 + i), out))
    ended = jobs[-1].model_copy(update={"state": JobState.FAILED, "exit_code": 1})
    write(Path(ended.stdout_path or ""), [CRASH])
    listing = PokedListing(jobs, now={ended.job_id: ended})
    temporal = Temporal()
    watch = make(listing, temporal, screen, RecordingAudit(), None)
    asked: list[int] = []

    async def poked() -> set[str]:
        asked.append(len(temporal.started))
        return {ended.job_id} if len(asked) == 1 else set()

    state = WatchState()
    await watch.poll_once(state, poked=poked)
    assert asked[0] <= 32  # asked after the first batch, long before the pass reached the job
    observed = [obs for wid, args in temporal.started for obs in args if obs.job.job_id == ended.job_id]
    assert [o.job.state for o in observed] == [JobState.FAILED]  # once, as the poke's read saw it
    assert {h.line_no for h in observed[0].hits} == {2}
    assert len(temporal.started) == 70  # every other job observed by the pass as before
    assert len(state.jobs) == 70 and all(w.missing_polls == 0 for w in state.jobs.values())


async def test_full_passes_share_a_listing_up_to_half_an_interval_old(monkeypatch) -> None:
    """Four shards' passes drift apart; at 10,000 jobs each decoding its own 39 MB listing was a third of the
    watch's time. Within `max_age_s` they share one query; a shard never gets the same listing twice."""
    from activities import watch as watch_mod

    now = [100.0]
    monkeypatch.setattr(watch_mod.time, "monotonic", lambda: now[0])
    listing = Listing([])
    shared = watch_mod._SharedListing(listing, reuse_s=1.0)
    _, taken = await shared.get(0, max_age_s=7.5)
    now[0] += 5.0
    await shared.get(1, max_age_s=7.5)
    assert (await shared.get(2, max_age_s=7.5))[1] == taken == 100.0  # the listing's own time, not the ask's
    assert listing.calls == 1
    await shared.get(0, max_age_s=7.5)  # shard 0 had that one: a new query
    assert listing.calls == 2
    now[0] += 5.0
    await shared.get(3)  # 5 s later without a max age (a poke's poll): the one-second window only
    assert listing.calls == 3


async def test_a_job_a_poke_read_is_not_observed_again_from_an_older_shared_listing(tmp_path: Path, screen) -> None:
    """Shard 0 takes the listing (the job RUNNING); the job ends and its poke is read on its own (FAILED); shard 1's
    pass then shares shard 0's listing, older than that read: it must not report the job RUNNING again."""
    jobs = []
    for i in range(8):
        out = tmp_path / f"out-{i}.txt"
        write(out, ["iteration 1/1000 | loss 2.0"])
        jobs.append(job(str(200 + i), out))
    target = next(j for j in jobs if shard_of(j.job_id, 2) == 1)
    ended = target.model_copy(update={"state": JobState.FAILED, "exit_code": 1})
    listing = PokedListing(jobs, now={ended.job_id: ended})
    temporal = Temporal()
    watch = make(listing, temporal, screen, RecordingAudit(), None)
    states = [WatchState(), WatchState()]
    await watch.poll_once(states[0], shard=0, shards=2, listing_age_s=7.5)
    await watch.poll_jobs(states[1], {ended.job_id}, shard=1, shards=2)
    await watch.poll_once(states[1], shard=1, shards=2, listing_age_s=7.5)
    assert listing.calls == 1  # shard 1's pass shared shard 0's listing
    observed = [obs.job.state for _, args in temporal.started for obs in args if obs.job.job_id == ended.job_id]
    assert observed == [JobState.FAILED]
    assert all(w.missing_polls == 0 for w in states[1].jobs.values())
