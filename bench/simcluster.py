"""A simulated Slurm cluster for the scale benchmark (bench/scale.py): a benchmark harness, not a test double.

`SimCluster` keeps N running jobs with real output files on disk that grow like
Megatron-LM training logs (NCCL INFO chatter at start, one progress line per
iteration); failures are injected at a known rate (a CUDA error line, then the
job is FAILED with exit code 1; it stays listed like a job inside MinJobAge,
then a new job takes its place, so N stays constant). `SimRunner` implements
the `CommandRunner` interface of adapters/slurm/runner.py: `squeue --json`
(and `--jobs ID`) print the 22.05 schema with records of realistic size
(~2.7 KB, as the real 10,000-job listing is ~27 MB), so the real `SlurmClient`
and its parser do the real work. Logs are read by the real `LocalFileLogSource`.

Run as a process (scale.py does): the real worker (`workers.worker.build_workers`:
real workflows and activities, real audit store, a real Temporal server) with
the simulated cluster behind its Slurm adapter, for `--seconds`; the job-end
hook of a real site (`EpilogSlurmctld` -> `jobmedic notify job-end`) is the
`poke` signal the simulator sends when a job ends (`--no-epilog`: polling only).
It writes one JSON file of what it saw (`--out`).

The simulator is not the worker: a real cluster's jobs write their files and slurmctld prints `squeue`
in other processes. So its stepping (advancing 10,000 jobs, appending their lines) and the printing of a
listing run in a thread of their own (`asyncio.to_thread`, one lock between them), not on the worker's
event loop, where they used to stall the watch's shards, pokes and activities for tens of milliseconds
a second. Their CPU still counts in the worker's (`sim_cpu_s` says how much of it is theirs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from adapters.slurm.runner import CommandResult  # noqa: E402
from workers.settings import WORKER_ROLES  # noqa: E402

CRASH_LINES = (
    "[rank{rank}]: RuntimeError: CUDA error: an illegal memory access was encountered",
    "{host}:{pid}:{pid2} [0] NCCL WARN NET/IB : Got completion from peer {peer} with error 12, opcode 0, len 0",
)
NCCL_CHATTER = (
    "{host}:{pid}:{pid2} [{gpu}] NCCL INFO Channel {ch:02d}/24 :    0   1   2   3   4   5   6   7",
    "{host}:{pid}:{pid2} [{gpu}] NCCL INFO Connected all rings",
    "{host}:{pid}:{pid2} [{gpu}] NCCL INFO comm 0x55d0c8 rank {gpu} nranks 16 cudaDev {gpu} busId 1b000 - Init COMPLETE",
)
PROGRESS = (" [{stamp}] iteration {it:>8}/  500000 | consumed samples: {samples:>12} | elapsed time per iteration "
            "(ms): {ms:.1f} | learning rate: 1.500E-04 | global batch size:   512 | lm loss: {loss:.6E} | "
            "loss scale: 1.0 | grad norm: 0.812 | number of skipped iterations:   0 | number of nan iterations:   0 |")
LISTED_AFTER_END_S = 30.0  # a finished job stays in squeue this long (MinJobAge is 300 s by default; shorter here)


@dataclass
class SimJob:
    job_id: int
    out: Path
    nodes: list[str]
    started: float  # epoch s
    iter_s: float
    state: str = "RUNNING"
    iteration: int = 0
    next_iter_at: float = 0.0
    ended: float | None = None
    failed_at: float | None = None


@dataclass
class SimCluster:
    jobs_wanted: int
    workdir: Path
    failures_per_min: float = 6.0
    seed: int = 1
    first_id: int = 1_000_000
    environment: str = "bench"
    jobs: dict[int, SimJob] = field(default_factory=dict)
    failures: dict[str, float] = field(default_factory=dict)  # job id -> failure time (epoch s)
    cpu_s: float = 0.0  # CPU the simulator itself spent (stepping, writing files, printing squeue)
    _rng: random.Random = field(init=False)
    _rendered: dict[int, tuple[tuple[str, float | None], str]] = field(default_factory=dict)  # job id -> (key, JSON)
    _next_id: int = field(init=False)
    _fail_credit: float = 0.0
    failing: bool = True  # the benchmark turns failures on once the watch has made its first pass
    # step() and squeue_json() run in threads (see the module's docstring): one at a time
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._next_id = self.first_id
        self.workdir.mkdir(parents=True, exist_ok=True)
        now = time.time()
        for _ in range(self.jobs_wanted):
            self._start_job(now)

    def _start_job(self, now: float) -> None:
        job_id = self._next_id
        self._next_id += 1
        base = self._rng.randrange(0, 4096)
        nodes = [f"gpu{(base + i) % 4096:04d}" for i in range(self._rng.choice((1, 2, 4, 8)))]
        job = SimJob(job_id=job_id, out=self.workdir / f"slurm-{job_id}.out", nodes=nodes, started=now,
                     iter_s=self._rng.uniform(3.0, 20.0))
        job.next_iter_at = now + self._rng.uniform(0, job.iter_s)
        lines = [f"[sim] job {job_id} on {','.join(nodes)}"]
        for gpu in range(4):
            lines += [t.format(host=nodes[0], pid=4000 + gpu, pid2=4100 + gpu, gpu=gpu, ch=gpu) for t in NCCL_CHATTER]
        _append(job.out, lines)
        self.jobs[job_id] = job

    def step(self, now: float) -> list[str]:
        """Advance to `now`; returns the ids of jobs that ended in this step."""
        with self._lock:
            return self._step(now)

    def _step(self, now: float) -> list[str]:
        c0 = time.thread_time()
        ended: list[str] = []
        running = [j for j in self.jobs.values() if j.state == "RUNNING"]
        if not self.failing:
            self._last = now
        self._fail_credit += self.failures_per_min / 60.0 * max(0.0, min(5.0, now - getattr(self, "_last", now)))
        self._last = now
        while self._fail_credit >= 1.0 and running:
            self._fail_credit -= 1.0
            job = running.pop(self._rng.randrange(len(running)))
            template = self._rng.choice(CRASH_LINES)
            _append(job.out, [template.format(rank=self._rng.randrange(16), host=job.nodes[0], pid=4000, pid2=4100,
                                              peer=job.nodes[-1])])
            job.state, job.ended, job.failed_at = "FAILED", now, now
            self.failures[str(job.job_id)] = now
            ended.append(str(job.job_id))
        for job in running:
            if now >= job.next_iter_at:
                job.iteration += 1
                job.next_iter_at += job.iter_s
                stamp = datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
                _append(job.out, [PROGRESS.format(stamp=stamp, it=job.iteration, samples=job.iteration * 512,
                                                  ms=job.iter_s * 1000, loss=3.0 / (1 + job.iteration / 100))])
        for job in [j for j in self.jobs.values() if j.ended is not None and now - j.ended > LISTED_AFTER_END_S]:
            del self.jobs[job.job_id]
            self._rendered.pop(job.job_id, None)
            self._start_job(now)
        self.cpu_s += time.thread_time() - c0
        return ended

    def squeue_json(self, only: set[str] | None = None) -> str:
        """What `squeue --json` prints; each record is rendered again only when its job changed (slurmctld's
        work is not the worker's: rendering 10,000 records anew each poll cost this process ~1.6 s)."""
        with self._lock:
            c0 = time.thread_time()
            records = [self._record_text(j) for j in self.jobs.values() if only is None or str(j.job_id) in only]
            text = '{"meta": {"plugin": {"type": "openapi/v0.0.38"}}, "errors": [], "jobs": [' + ", ".join(records) + "]}"
            self.cpu_s += time.thread_time() - c0
            return text

    def _record_text(self, j: SimJob) -> str:
        key = (j.state, j.ended)
        cached = self._rendered.get(j.job_id)
        if cached is None or cached[0] != key:
            cached = self._rendered[j.job_id] = (key, json.dumps(self._record(j)))
        return cached[1]

    def _record(self, j: SimJob) -> dict[str, Any]:
        comment = json.dumps({"jobmedic": {"environment": self.environment, "mode": "observe"}})
        nodes = f"{j.nodes[0]}" if len(j.nodes) == 1 else ",".join(j.nodes)
        return {
            "account": "research", "accrue_time": int(j.started), "admin_comment": "", "array_job_id": 0,
            "array_task_id": None, "array_max_tasks": 0, "array_task_string": "", "association_id": 7,
            "batch_features": "", "batch_flag": True, "batch_host": j.nodes[0], "flags": ["JOB_WAS_RUNNING"],
            "burst_buffer": "", "burst_buffer_state": "", "cluster": "sim", "cluster_features": "",
            "command": f"{self.workdir}/train.sbatch", "comment": comment, "contiguous": False, "core_spec": None,
            "thread_spec": None, "cores_per_socket": None, "billable_tres": 64.0, "cpus_per_task": 8,
            "cpu_frequency_minimum": None, "cpu_frequency_maximum": None, "cpu_frequency_governor": None,
            "cpus_per_tres": "", "deadline": 0, "delay_boot": 0, "dependency": "", "derived_exit_code": 0,
            "eligible_time": int(j.started), "end_time": int(j.ended or j.started + 86400),
            "excluded_nodes": "", "exit_code": 256 if j.state == "FAILED" else 0, "features": "",
            "federation_origin": "", "federation_siblings_active": "", "federation_siblings_viable": "",
            "gres_detail": ["gpu:h100:8(IDX:0-7)" for _ in j.nodes], "group_id": 1000, "job_id": j.job_id,
            "job_resources": {"nodes": nodes, "allocated_cores": 64 * len(j.nodes), "allocated_hosts": len(j.nodes),
                              "allocated_nodes": [{"sockets": {"0": {"cores": {str(c): "allocated" for c in range(8)}}},
                                                   "nodename": n, "cpus_used": 64, "memory_used": 512000,
                                                   "memory_allocated": 512000} for n in j.nodes]},
            "job_state": j.state, "last_sched_evaluation": int(j.started), "licenses": "", "max_cpus": 0,
            "max_nodes": 0, "mcs_label": "", "memory_per_tres": "", "name": f"megatron-gpt-{j.job_id % 97}",
            "nodes": nodes, "nice": None, "tasks_per_core": None, "tasks_per_node": 8, "tasks_per_socket": None,
            "tasks_per_board": 0, "cpus": 64 * len(j.nodes), "node_count": len(j.nodes), "tasks": 8 * len(j.nodes),
            "het_job_id": 0, "het_job_id_set": "", "het_job_offset": 0, "partition": "gpu",
            "memory_per_node": 512000, "memory_per_cpu": None, "minimum_cpus_per_node": 64,
            "minimum_tmp_disk_per_node": 0, "preempt_time": 0, "pre_sus_time": 0, "priority": 4294901000,
            "profile": None, "qos": "normal", "reboot": False, "required_nodes": "", "requeue": True,
            "resize_time": 0, "restart_cnt": 0, "resv_name": "", "shared": None,
            "show_flags": ["SHOW_ALL", "SHOW_DETAIL", "SHOW_LOCAL"], "sockets_per_board": 0,
            "sockets_per_node": None, "start_time": int(j.started),
            "state_description": "", "state_reason": "None", "standard_error": str(j.out), "standard_input": "/dev/null",
            "standard_output": str(j.out), "submit_time": int(j.started) - 60, "suspend_time": 0,
            "system_comment": "", "time_limit": 2880, "time_minimum": 0, "threads_per_core": None,
            "tres_bind": "", "tres_freq": "", "tres_per_job": "", "tres_per_node": "gres:gpu:8",
            "tres_per_socket": "", "tres_per_task": "",
            "tres_req_str": f"cpu={64 * len(j.nodes)},mem=500G,node={len(j.nodes)},billing=64,gres/gpu={8 * len(j.nodes)}",
            "tres_alloc_str": f"cpu={64 * len(j.nodes)},mem=500G,node={len(j.nodes)},billing=64,gres/gpu={8 * len(j.nodes)}",
            "user_id": 1000, "user_name": "researcher", "wckey": "", "current_working_directory": str(self.workdir),
        }


class SimRunner:
    """The `CommandRunner` of adapters/slurm/runner.py over a `SimCluster`: what squeue and sinfo would print."""

    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        self.commands: dict[str, int] = {}

    def describe(self) -> str:
        return "simulated cluster (bench/simcluster.py)"

    async def close(self) -> None:
        return None

    async def run(self, argv: list[str], *, timeout: float) -> CommandResult:
        self.commands[argv[0]] = self.commands.get(argv[0], 0) + 1
        if argv[0] == "squeue" and "--json" in argv:
            only = set(argv[argv.index("--jobs") + 1].split(",")) if "--jobs" in argv else None
            if only is None:
                self.commands["squeue (whole listing)"] = self.commands.get("squeue (whole listing)", 0) + 1
            # printed off the event loop, as slurmctld and squeue's own process would
            return CommandResult(0, await asyncio.to_thread(self.sim.squeue_json, only), "")
        if argv[0] == "sinfo":
            return CommandResult(0, json.dumps({"errors": [], "nodes": []}), "")
        if argv[:3] == ["scontrol", "show", "config"]:
            return CommandResult(0, "MinJobAge               = 300 sec\n", "")
        return CommandResult(1, "", f"the simulated cluster does not run {argv[0]} (observe mode only)")


def _append(path: Path, lines: list[str]) -> None:
    with path.open("a") as f:
        f.write("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- the worker process


class PassStats:
    """`workers.metrics_server.WatchStats`' interface: the watch's passes, kept for the summary.

    Each shard's first pass (of its activity) is told apart: it starts a workflow per job (onboarding), which
    no later pass does, so the summary reports it on its own (`first_pass_s`)."""

    def __init__(self) -> None:
        self.passes: list[tuple[float, float, int, bool]] = []  # (ended at, seconds, watched jobs, first)
        self._shards_seen: set[str] = set()  # activity ids (one per shard) that made a pass with jobs

    def record_pass(self, cluster: str, *, started_at: datetime, finished_at: datetime, watched_jobs: int) -> None:
        from temporalio import activity

        shard = activity.info().activity_id if activity.in_activity() else ""
        first = watched_jobs > 0 and shard not in self._shards_seen
        if watched_jobs > 0:
            self._shards_seen.add(shard)
        self.passes.append((finished_at.timestamp(), (finished_at - started_at).total_seconds(), watched_jobs, first))


async def serve(args: argparse.Namespace) -> dict[str, Any]:
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    import workers.worker as worker_mod
    from adapters.logs.files import LocalFileLogSource
    from adapters.slurm.client import SlurmClient
    from workers.settings import Settings
    from workflows.cluster_watch import WatchNames, WatchPoke, watch_workflow_id

    cluster = args.cluster
    settings = Settings.model_validate({
        "deployment": "bench",
        "data_dir": args.workdir,
        "temporal": {"address": args.temporal, "task_queue": f"jobmedic-{cluster}"},
        "audit": {"url": f"sqlite:///{args.workdir}/audit.db"},
        "clusters": [{"name": cluster, "environment": "bench", "mode": "observe", "job_environments": "bench",
                      "poll_interval_s": args.interval, "watch_shards": args.shards}],
    })
    client = await Client.connect(args.temporal, data_converter=pydantic_data_converter)
    if args.role == "workflows":  # the other process of a two-process deployment: no cluster, no simulator
        workers = await worker_mod.build_workers(settings, client, role="workflows")
        tasks = [asyncio.create_task(w.run()) for w in workers]
        await asyncio.sleep(args.seconds + min(args.interval, 15.0) + 60.0)  # outlives the watch's process
        await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
        await asyncio.gather(*tasks, return_exceptions=True)
        return {"role": "workflows"}
    sim = SimCluster(args.jobs, Path(args.workdir), failures_per_min=args.failures_per_min, seed=args.seed)
    runner = SimRunner(sim)

    def sim_parts(c, *, deployment: str = "jobmedic"):  # the simulated cluster behind the real adapters' interfaces
        return worker_mod.ClusterParts(settings=c, slurm=SlurmClient(runner, cluster=c.name, deployment=deployment,
                                                                      decode_in_child=True),
                                       logs=LocalFileLogSource(), metrics=None, external=None)

    worker_mod.build_cluster_parts = sim_parts  # type: ignore[assignment]
    stats = PassStats()
    workers = await worker_mod.build_workers(settings, client, stats=stats, role=args.role)
    await worker_mod.start_watches(settings, client)
    tasks = [asyncio.create_task(w.run()) for w in workers]
    watch = client.get_workflow_handle(watch_workflow_id(cluster))
    t_end = time.time() + args.seconds
    sim.failing = False
    pokes: dict[str, tuple[float, float]] = {}
    while time.time() < t_end:
        # failures start once every shard made its first pass (the first pass starts a workflow per job)
        sim.failing = sim.failing or sum(p[3] for p in stats.passes) >= args.shards
        ended = await asyncio.to_thread(sim.step, time.time())
        if ended and args.epilog:  # EpilogSlurmctld -> jobmedic notify job-end -> poke
            try:
                sent = time.time()
                await watch.signal(WatchNames.POKE, WatchPoke(source="job-end", job_ids=ended,
                                                              sent_at=datetime.now(UTC)))
                pokes.update((j, (sent, time.time())) for j in ended)  # when sent, when Temporal took it
            except Exception as exc:  # noqa: BLE001 - a lost poke leaves the job to the interval poll
                print(f"poke failed: {exc}", file=sys.stderr)
        await asyncio.sleep(1.0)
    await asyncio.sleep(min(args.interval, 15.0))  # the last failures' detections
    summary = await _summary(args, sim, runner, stats, client, settings, pokes)
    await watch.terminate("benchmark over")
    await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
    await asyncio.gather(*tasks, return_exceptions=True)
    return summary


async def _history_after(client, workflow_id: str, since: float) -> list[tuple[float, str, str]]:
    """(seconds after `since`, event type, activity type or signal name) of a workflow's history (debugging)."""
    out: list[tuple[float, str, str]] = []
    try:
        async for e in client.get_workflow_handle(workflow_id).fetch_history_events():
            at = e.event_time.seconds + e.event_time.nanos / 1e9
            if at < since:
                continue
            what = (e.activity_task_scheduled_event_attributes.activity_type.name
                    or e.workflow_execution_signaled_event_attributes.signal_name)
            out.append((round(at - since, 3), e.WhichOneof("attributes") or str(e.event_type), what))
    except Exception as exc:  # noqa: BLE001 - a debugging aid: say what failed, keep the summary
        out.append((0.0, "history not read", str(exc)))
    return out


async def _summary(args, sim: SimCluster, runner: SimRunner, stats: PassStats, client, settings,
                   sim_pokes: dict[str, tuple[float, float]] | None = None) -> dict[str, Any]:
    sim_pokes = sim_pokes or {}
    from activities.watch import WatchState
    from activities.watch_state import ShardKeeper
    from workers.factories.audit import build_audit_store
    from adapters.slurm.parse import parse_squeue_json, parse_squeue_listing
    from workflows.cluster_watch import watch_workflow_id
    from workflows.contracts import EventType

    store = build_audit_store(settings)
    detections = store.query(cluster=args.cluster, event_types=[EventType.DETECTION], limit=None)
    first: dict[str, float] = {}
    for e in detections:
        first.setdefault(e.job_id, e.timestamp.timestamp())
    latencies = sorted(first[j] - t for j, t in sim.failures.items() if j in first)
    if os.environ.get("JM_SCALE_DEBUG"):  # a folder: each failure's audit trail, to see where its latency went
        trail = []
        for j, t in sim.failures.items():
            evs = store.query(cluster=args.cluster, job_id=j, limit=None)
            wid = next((e.workflow_id for e in evs if e.workflow_id), None)
            trail.append({"job": j, "failed_at": t, "detect_s": first.get(j, t) - t,
                          "poke_s": [round(x - t, 3) for x in sim_pokes.get(j, ())],
                          "events": [(round(e.timestamp.timestamp() - t, 3), str(e.event_type),
                                      (e.detail or {}).get("observed_at")) for e in evs],
                          # the job workflow's Temporal history after the failure: where the time between the
                          # watch's signal and the detection entry went (workflow tasks, evidence activity)
                          "history": await _history_after(client, wid, t) if wid else []})
        watch_history = await _history_after(client, watch_workflow_id(args.cluster), 0.0)
        (Path(os.environ["JM_SCALE_DEBUG"]) / f"watch-history-{args.jobs}.json").write_text(json.dumps(watch_history))
        (Path(os.environ["JM_SCALE_DEBUG"]) / f"failures-{args.jobs}.json").write_text(json.dumps(trail, indent=1))
    rows_audit = len(store.query(cluster=args.cluster, limit=None))
    state_rows = store.watch_state_rows(args.cluster)
    # the baseline heartbeat: the whole watch state, as the old watch heartbeated it every poll
    legacy_bytes = 0
    for shard in range(args.shards):
        data = await ShardKeeper(store, cluster=args.cluster, shard=shard, shards=args.shards).load()
        legacy_bytes += len(WatchState.model_validate(data).model_dump_json())
    store.close()
    # history sizes: the watch workflow, and a sample of job workflows
    desc = await client.get_workflow_handle(watch_workflow_id(args.cluster)).describe()
    info = desc.raw_description.workflow_execution_info
    beats = [len(p.heartbeat_details.SerializeToString()) for p in desc.raw_description.pending_activities]
    job_hist: list[int] = []
    job_bytes: list[int] = []
    async for wf in client.list_workflows(f"Cluster = '{args.cluster}'", limit=50):
        d = await client.get_workflow_handle(wf.id).describe()
        job_hist.append(d.raw_description.workflow_execution_info.history_length)
        job_bytes.append(d.raw_description.workflow_execution_info.history_size_bytes)
    # per-job read against the old one: decode all and convert all (old get_job) vs convert the one record
    text = sim.squeue_json()
    target = str(next(iter(sim.jobs)))
    t0 = time.perf_counter()
    old = [j for j in parse_squeue_json(text) if j.job_id == target]
    old_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    new = parse_squeue_listing(text, only=lambda ident: ident == target).jobs
    new_s = time.perf_counter() - t0
    assert [j.job_id for j in old] == [j.job_id for j in new] == [target]
    passes = [p for p in stats.passes if p[2] > 0]
    return {
        "jobs": args.jobs, "shards": args.shards, "interval_s": args.interval, "epilog": args.epilog,
        "passes": len(passes), "pass_s": [round(p[1], 3) for p in passes if not p[3]],
        "first_pass_s": [round(p[1], 3) for p in passes if p[3]],
        "failures": len(sim.failures), "detected": len(latencies), "latencies_s": [round(x, 3) for x in latencies],
        "audit_rows": rows_audit, "state_rows": state_rows, "heartbeat_bytes": beats,
        "legacy_heartbeat_bytes": legacy_bytes, "watch_history_events": info.history_length,
        "watch_history_bytes": info.history_size_bytes, "job_history_events": job_hist,
        "job_history_bytes": job_bytes, "squeue_bytes": len(text), "read_all_s": old_s, "read_one_s": new_s,
        "sim_cpu_s": sim.cpu_s, "first_pass_at": stats.passes[0][0] if stats.passes else None, "scheduler_commands": runner.commands,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, required=True)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--interval", type=float, default=15.0)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--failures-per-min", type=float, default=6.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-epilog", dest="epilog", action="store_false")
    p.add_argument("--role", choices=WORKER_ROLES, default="all",
                   help="what this worker process runs (jobmedic worker --role); clusters: the simulator is here")
    p.add_argument("--temporal", default="127.0.0.1:7233")
    p.add_argument("--cluster", default="sim")
    p.add_argument("--workdir", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level=os.environ.get("JM_SCALE_LOG", "WARNING"))  # the worker's INFO lines would cost CPU
    summary = asyncio.run(serve(args))
    Path(args.out).write_text(json.dumps(summary))


if __name__ == "__main__":
    main()
