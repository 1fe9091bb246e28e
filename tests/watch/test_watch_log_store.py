"""The cluster watch reading a job's lines from a log store (Loki, VictoriaLogs) instead of its files.

The watch is the real one (activities/watch.py) with the real screener; the stores are
the HTTP servers of tests/logs/test_loki.py and tests/logs/test_victorialogs.py, which
follow each API's documented request and response format exactly (Loki's
`GET /loki/api/v1/query_range`, VictoriaLogs' `/select/logsql/query`) and answer 400
to anything else: no Loki or VictoriaLogs binary exists in our registries.
"""

from __future__ import annotations

from datetime import timedelta


from activities.screening import LogScreen
from activities.watch import WatchActivities, WatchContext, WatchState
from activities.detection.hang import hang_bound
from adapters.logs.loki import LokiLogSource
from adapters.logs.store_source import StoreLogSource
from adapters.logs.stores import to_ns
from adapters.logs.victorialogs import VictoriaLogsSource
from tests.logs.conftest import go_unquote, http_service  # noqa: F401 - the stores' HTTP server fixtures
from tests.logs.test_loki import Entry, FakeLoki
from tests.logs.test_victorialogs import Entry as VlEntry
from tests.logs.test_victorialogs import FakeVictoriaLogs
from tests.watch.test_watch_hang import T0, Listing, Temporal
from workflows.contracts import EventType, JobInfo, JobKey, JobState, OptIn, OptInResult, Stream
from workflows.messages import JobRecoveryInput, ObservationReason
from tests.watch.fakes import RecordingAudit

POLL_S = 10
NCCL_IB = ("node2:20514:20671 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
           "10.9.0.11<42317> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.9.0.12 "
           "remoteGidsfe80::ba59:9f03:14:5e1e hca mlx5_3")
MEGATRON = (" [2026-11-29 12:00:00] iteration {i:8d}/  100000 | consumed samples: {s:12d} | "
            "elapsed time per iteration (ms): 980.0 | learning rate: 1.500E-04 | lm loss: 2.5E+00 |")


def job(job_id: str) -> JobInfo:
    return JobInfo(
        job_id=job_id, state=JobState.RUNNING, nodes=["node1", "node2"], node_list="node[1-2]",
        submit_time=T0, start_time=T0, stdout_path=f"/nowhere/{job_id}.out",  # files are not read: the store is
        opt_in=OptInResult(opted_in=True, opt_in=OptIn(environment="prod", mode="action")),
    )


def watch_over(screen: LogScreen, source: StoreLogSource, jobs: list[JobInfo], now: list) -> tuple:
    def recovery_input(j: JobInfo, key: JobKey) -> JobRecoveryInput:
        return JobRecoveryInput(key=key, opt_in=j.opt_in.opt_in, scheduler_queue="q")

    ctx = WatchContext(
        cluster="c1", environment="prod", main_queue="m", scheduler_queue="q", recovery_input=recovery_input,
        hang_bound_s=lambda normal, ckpt: hang_bound(normal, ckpt, floor_s=60.0, ceiling_s=600.0, default_s=120.0),
    )
    temporal, audit = Temporal(), RecordingAudit()
    watch = WatchActivities(context=ctx, slurm=Listing(jobs), logs=source, screen=screen, client=temporal,  # type: ignore[arg-type]
                            audit=audit, clock=lambda: now[0])
    return watch, temporal, audit


def ns_at(seconds: float) -> int:
    return to_ns(T0) + int(seconds * 1e9)


async def test_the_watch_reads_a_jobs_lines_from_loki_and_goes_on_when_it_is_down(
    screen: LogScreen, http_service, go_unquote  # noqa: ANN001
) -> None:
    entries: list[Entry] = []
    fake = FakeLoki(entries, go_unquote)
    down = {"on": False}

    def serve(req):  # noqa: ANN001, ANN202
        return (503, "text/plain", b"Ingester not ready") if down["on"] else fake(req)

    now = [T0 + timedelta(seconds=5)]
    source = StoreLogSource(LokiLogSource(http_service(serve)), scheme="loki", settle_s=1.0, backoff_s=25.0,
                            clock=lambda: now[0].timestamp())
    watch, temporal, audit = watch_over(screen, source, [job("42"), job("43")], now)
    state = WatchState()

    async def poll(seconds: int, lines: dict[str, list[tuple[str, str]]] | None = None) -> None:
        for _ in range(seconds // POLL_S):
            t = (now[0] - T0).total_seconds()
            for job_id, rows in (lines or {}).items():
                for k, (host, text) in enumerate(rows):
                    entries.append(Entry({"slurm_job_id": job_id, "host": host}, ns_at(t - 3 + k * 0.001), text))
            now[0] += timedelta(seconds=POLL_S)
            await watch.poll_once(state)

    for i in range(6):  # both jobs train; their progress comes from the store
        await poll(POLL_S, {j: [("node1", MEGATRON.format(i=i + 1, s=(i + 1) * 256))] for j in ("42", "43")})
    assert all(w.progress is not None and w.progress.iteration == 6 for w in state.jobs.values()), state.jobs
    asked = len(fake.requests)

    down["on"] = True  # the store goes away for 40 s; the pass goes on, asking it once, not once per job
    await poll(40, {"42": [("node2", NCCL_IB)]})
    assert len(fake.requests) == asked  # the failed asks were answered 503 by `serve`, before the fake
    assert source.outages and source.outages[0].until is None
    assert not [e for e in audit.entries if e.event_type is EventType.LOG_SOURCE_GAP]  # not over yet

    down["on"] = False
    await poll(40)  # the store is asked again once its backoff (25 s after the last failure) is over
    hits = [h for o in temporal.observations if o.job.job_id == "42" for h in o.hits]
    ib = [h for h in hits if "NET/IB" in h.line]
    assert ib and ib[0].line.startswith("node2:") and ib[0].stream is Stream.OUTPUT, hits  # late, not lost
    assert any(ObservationReason.FAILURE_PATTERN in o.reasons for o in temporal.observations if o.job.job_id == "42")
    assert not [o for o in temporal.observations if o.job.job_id == "43" and o.hits]
    gaps = [e for e in audit.entries if e.event_type is EventType.LOG_SOURCE_GAP]
    assert len(gaps) == 1 and gaps[0].job_id == "*" and "503" in (gaps[0].outcome or ""), gaps
    assert 40 <= gaps[0].detail["seconds"] <= 90, gaps[0].detail
    await poll(POLL_S)
    assert len([e for e in audit.entries if e.event_type is EventType.LOG_SOURCE_GAP]) == 1  # audited once


async def test_the_watch_reads_a_jobs_lines_from_victorialogs(screen: LogScreen, http_service, go_unquote) -> None:  # noqa: ANN001
    entries: list[VlEntry] = []
    fake = FakeVictoriaLogs(entries, go_unquote)
    now = [T0 + timedelta(seconds=5)]
    source = StoreLogSource(VictoriaLogsSource(http_service(fake)), scheme="victorialogs", settle_s=1.0,
                            clock=lambda: now[0].timestamp())
    watch, temporal, _ = watch_over(screen, source, [job("42")], now)
    state = WatchState()
    for i in range(4):
        t = (now[0] - T0).total_seconds()
        entries.append(VlEntry(fields={"slurm_job_id": "42", "host": "node1"}, ns=ns_at(t - 2),
                               msg=MEGATRON.format(i=i + 1, s=(i + 1) * 256)))
        if i == 3:
            entries.append(VlEntry(fields={"slurm_job_id": "42", "host": "node2"}, ns=ns_at(t - 2) + 5, msg=NCCL_IB))
        now[0] += timedelta(seconds=POLL_S)
        await watch.poll_once(state)
    watched = next(iter(state.jobs.values()))
    assert watched.progress is not None and watched.progress.iteration == 4
    ib = [h for o in temporal.observations for h in o.hits if "NET/IB" in h.line]
    assert ib and ib[0].line.startswith("node2:"), temporal.observations
    assert not fake.problems
