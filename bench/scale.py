"""Scale of the cluster watch: a real Temporal dev server and the real worker over a simulated cluster.

For each size (default 100 -> 1,000 -> 10,000 jobs) a private `temporal server start-dev`
(in memory, its own port, so its CPU and memory are the watch's alone) and one worker process
(bench/simcluster.py: the real workflows, activities, audit store and Slurm client, with a
simulated cluster behind the Slurm command runner and real growing output files read by the
real file log source). Failures are injected at a known rate once the watch has made its first
pass; the job-end hook of a real site (EpilogSlurmctld -> `jobmedic notify job-end`) pokes the
watch. Per size:
- watch pass duration (median, max) against the poll interval, over the passes after each shard's first;
  the first pass of each shard (onboarding: it starts a workflow per job, which no later pass does) is
  reported on its own (`first_pass_s`, the slowest shard's), and is not held to the interval;
- CPU (s and % of one core) and peak RSS of the worker and of the Temporal server;
- detection latency p50/p95 (failure written -> first `detection` audit entry of the job);
- Temporal history: events and bytes of the watch workflow and of job workflows (max);
- audit rows and watch-state rows;
- baselines from the same run: the heartbeat the old watch would send every poll (the whole
  state; Temporal refuses payloads over 2 MB, so that size says where it fails) against the
  heartbeat sent now, and the per-action job read the old way (decode and convert the whole
  `squeue --json`) against the one-job read.

`--real-slurm N`: the batched query against the real local Slurm (deploy/up.sh) with N queued
jobs (submitted held, one sbatch each, all cancelled afterwards): `squeue --json` through the
local runner and over SSH (the stack's sshd, host key checked), decode + convert time, and the
per-action one-job read (`SlurmClient.get_job`) against the old whole-listing read.

Debugging: JM_SCALE_DEBUG=DIR keeps each size's worker log and every failure's audit trail (seconds after
the failure, observed_at), when its poke was sent and taken by Temporal, and its job workflow's history
events (seconds after the failure: where the time between the watch's signal and the detection went), and
the watch workflow's history (`watch-history-N.json`), in DIR; JM_SCALE_LOG=INFO raises the worker's log
level (costs CPU; the watch's wake-up channel says there when its `pokes` query timed out).

Usage: .venv/bin/python bench/scale.py [--jobs N] [--quick] [--seconds S] [--interval S] [--shards N]
       .venv/bin/python bench/scale.py --real-slurm 2000
--quick: 100 and 1,000 jobs, 45 s each (under three minutes). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import emit_json, print_table  # noqa: E402
from workers.report import percentile  # noqa: E402

TEMPORAL = ROOT / ".venv" / "bin" / "temporal"
HEARTBEAT_LIMIT = 2 * 1024 * 1024  # Temporal's default payload size limit (blob size limit error)
SEARCH_ATTRIBUTES = ["JobId=Keyword", "Cluster=Keyword", "Environment=Keyword", "Mode=Keyword", "Phase=Keyword",
                     "LastCategory=Keyword", "Attempts=Int", "ImplicatedNodes=KeywordList"]
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` and its waited-for children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK


def descendants(pids: list[int]) -> list[int]:
    """The children, grandchildren, ... of `pids` alive now (the workers' listing decoders), from one read of /proc."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        parent[int(stat.parent.name)] = int(fields[1])
    out, todo = [], list(pids)
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):  # peak resident set
            return int(line.split()[1]) / 1024
    return 0.0


def start_server(port: int, log: Path) -> subprocess.Popen:
    argv = [str(TEMPORAL), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port), "--headless",
            "--log-level", "error"]
    for sa in SEARCH_ATTRIBUTES:
        argv += ["--search-attribute", sa]
    proc = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                time.sleep(2.0)  # the frontend listens before the namespace is ready
                return proc
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"temporal dev server did not listen on {port} (log {log})")


def run_size(jobs: int, args: argparse.Namespace, tmp: Path) -> dict:
    port = free_port()
    work = tmp / f"n{jobs}"
    work.mkdir()
    server = start_server(port, work / "temporal.log")
    cpu0 = {"server": proc_cpu_s(server.pid)}
    out = work / "summary.json"
    argv = [sys.executable, str(ROOT / "bench" / "simcluster.py"), "--jobs", str(jobs), "--seconds", str(args.seconds),
            "--interval", str(args.interval), "--shards", str(args.shards), "--temporal", f"127.0.0.1:{port}",
            "--cluster", f"sim-{jobs}", "--workdir", str(work), "--out", str(out),
            "--failures-per-min", str(args.failures_per_min)]
    started = time.time()
    procs = {}
    if args.processes == 2:  # `jobmedic worker --role workflows` beside `--role clusters` (the simulator's side)
        procs["workflows"] = subprocess.Popen(argv + ["--role", "workflows", "--out", str(work / "wf.json")],
                                              stdout=(work / "workflows.log").open("w"), stderr=subprocess.STDOUT)
        argv += ["--role", "clusters"]
    worker = procs["worker"] = subprocess.Popen(argv, stdout=(work / "worker.log").open("w"), stderr=subprocess.STDOUT)
    peak = {name: 0.0 for name in [*procs, "server"]}
    cpu_last = {name: 0.0 for name in [*procs, "server"]}
    kids_cpu: dict[int, float] = {}  # the worker processes' own children (the listing decoder): CPU last seen
    kids_rss: dict[int, float] = {}
    while worker.poll() is None:
        for name, pid in [*((n, pr.pid) for n, pr in procs.items()), ("server", server.pid)]:
            try:
                peak[name] = max(peak[name], proc_rss_mb(pid))
                cpu_last[name] = proc_cpu_s(pid)
            except (FileNotFoundError, ProcessLookupError):
                pass
        for kid in descendants([pr.pid for pr in procs.values()]):
            try:
                kids_cpu[kid] = proc_cpu_s(kid)
                kids_rss[kid] = max(kids_rss.get(kid, 0.0), proc_rss_mb(kid))
            except (FileNotFoundError, ProcessLookupError):
                pass
        time.sleep(1.0)
    clusters_cpu_s = cpu_last["worker"]  # the process of the watch and the simulator, without its children
    cpu_last["worker"] += sum(kids_cpu.values())
    peak["worker"] += sum(kids_rss.values())
    wall = time.time() - started
    if "workflows" in procs:
        procs["workflows"].terminate()
        procs["workflows"].wait(timeout=60)
        cpu_last["worker"] += cpu_last["workflows"]  # the worker's CPU is both processes'
        peak["worker"] += peak["workflows"]
    server_cpu = proc_cpu_s(server.pid) - cpu0["server"]
    server.terminate()
    server.wait(timeout=30)
    if worker.returncode != 0 or not out.exists():
        tail = (work / "worker.log").read_text()[-3000:]
        return {"jobs": jobs, "watch_failed": True, "error": f"worker exited {worker.returncode}: {tail}"}
    s = json.loads(out.read_text())
    if os.environ.get("JM_SCALE_DEBUG"):
        import shutil
        shutil.copy(work / "worker.log", Path(os.environ["JM_SCALE_DEBUG"]) / f"worker-{jobs}.log")
    lat = s["latencies_s"]
    passes = s["pass_s"] or [float("nan")]  # the passes after each shard's first (onboarding) one
    return {
        "jobs": jobs, "shards": s["shards"], "processes": args.processes, "interval_s": s["interval_s"], "seconds": args.seconds,
        "passes": s["passes"], "pass_s": statistics.median(passes), "pass_max_s": max(passes),
        "first_pass_s": max(s["first_pass_s"], default=float("nan")),
        "worker_cpu_s": cpu_last["worker"], "worker_cpu_pct": 100 * cpu_last["worker"] / wall,
        "worker_main_cpu_pct": 100 * clusters_cpu_s / wall,  # the watch's process alone (all of one: the worker)
        "workflows_cpu_pct": 100 * cpu_last["workflows"] / wall if "workflows" in procs else None,
        "sim_cpu_s": s["sim_cpu_s"], "worker_rss_mb": peak["worker"],
        "server_cpu_s": server_cpu, "server_cpu_pct": 100 * server_cpu / wall, "server_rss_mb": peak["server"],
        "failures": s["failures"], "detected": s["detected"],
        "detect_p50_s": percentile(lat, 50) if lat else None, "detect_p95_s": percentile(lat, 95) if lat else None,
        "watch_history_events": s["watch_history_events"], "watch_history_bytes": s["watch_history_bytes"],
        "job_history_events_max": max(s["job_history_events"], default=0),
        "job_history_bytes_max": max(s["job_history_bytes"], default=0),
        "audit_rows": s["audit_rows"], "state_rows": s["state_rows"],
        "heartbeat_bytes_max": max(s["heartbeat_bytes"], default=0), "legacy_heartbeat_bytes": s["legacy_heartbeat_bytes"],
        "legacy_fails": s["legacy_heartbeat_bytes"] > HEARTBEAT_LIMIT,
        "squeue_mb": s["squeue_bytes"] / 1e6, "read_all_s": s["read_all_s"], "read_one_s": s["read_one_s"],
        "squeue_calls": s["scheduler_commands"].get("squeue", 0),
        "squeue_listings": s["scheduler_commands"].get("squeue (whole listing)", 0),
        # failed: no full pass after the onboarding ones, one longer than the interval, or a failure never detected
        "watch_failed": not s["pass_s"] or max(passes) > s["interval_s"] or s["detected"] < s["failures"],
    }


def real_slurm(count: int) -> dict:
    """Time the batched query against the real local cluster with `count` held jobs, locally and over SSH."""
    import asyncio

    from adapters.slurm.client import SlurmClient
    from adapters.slurm.parse import parse_squeue_json
    from adapters.slurm.runner import LocalRunner, SshRunner

    slurm = json.loads(Path("/tmp/jobmedic-stack/slurm.json").read_text())
    ssh = json.loads(Path("/tmp/jobmedic-stack/ssh.json").read_text())
    env = {**os.environ, "SLURM_CONF": slurm["slurm_conf"]}
    comment = json.dumps({"jobmedic": {"environment": "bench", "mode": "observe"}})
    ids: list[str] = []
    t0 = time.time()
    try:
        for i in range(count):
            done = subprocess.run(["sbatch", "--parsable", "--hold", f"--job-name=jm-scale-{i}", f"--comment={comment}",
                                   "--output=/dev/null", "--wrap", "sleep 1"], env=env, capture_output=True, text=True,
                                  check=True, timeout=30)
            ids.append(done.stdout.strip().split(";")[0])
        submit_s = time.time() - t0

        async def measure(runner) -> dict:
            client = SlurmClient(runner, cluster="lab", timeout=120)
            await client.list_jobs()  # connect (SSH) and warm up
            q = []
            for _ in range(3):
                t = time.perf_counter()
                result = await runner.run(["squeue", "--json"], timeout=120)
                q.append(time.perf_counter() - t)
            t = time.perf_counter()
            listed = parse_squeue_json(result.stdout)
            parse_s = time.perf_counter() - t
            t = time.perf_counter()
            old = [j for j in await client.list_jobs(opted_in_only=False) if j.job_id == ids[len(ids) // 2]]
            old_s = time.perf_counter() - t
            t = time.perf_counter()
            one = await client.get_job(ids[len(ids) // 2])
            one_s = time.perf_counter() - t
            assert old and old[0].job_id == one.job_id
            await client.close()
            return {"listed": len(listed), "bytes": len(result.stdout), "query_s": statistics.median(q),
                    "parse_s": parse_s, "read_all_s": old_s, "read_one_s": one_s}

        local = asyncio.run(measure(LocalRunner({"SLURM_CONF": slurm["slurm_conf"]})))
        remote = asyncio.run(measure(SshRunner(ssh["host"], port=ssh["port"], user=ssh["user"], key_file=ssh["key_file"],
                                               known_hosts=ssh["known_hosts"], env={"SLURM_CONF": slurm["slurm_conf"]})))
    finally:
        for start in range(0, len(ids), 500):
            subprocess.run(["scancel", *ids[start:start + 500]], env=env, capture_output=True, timeout=120)
    print(f"real Slurm, {count} held jobs queued (submitted in {submit_s:.0f} s, all cancelled afterwards)")
    print_table(["runner", "jobs listed", "squeue --json MB", "query s (median of 3)", "decode+convert s",
                 "job read, old (whole listing) s", "job read, now (one job) s"],
                [[name, m["listed"], m["bytes"] / 1e6, m["query_s"], m["parse_s"], m["read_all_s"], m["read_one_s"]]
                 for name, m in (("local", local), ("ssh", remote))])
    return {"queued": count, "local": local, "ssh": remote}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, help="one size only")
    p.add_argument("--quick", action="store_true", help="100 and 1,000 jobs, 45 s each")
    p.add_argument("--seconds", type=float, help="simulated run per size (default 120, --quick 45)")
    p.add_argument("--interval", type=float, default=15.0, help="poll interval (the default setting)")
    p.add_argument("--shards", type=int, default=4, help="watch shards (the default setting)")
    p.add_argument("--processes", type=int, choices=(1, 2), default=1,
                   help="worker processes: 1 (jobmedic worker) or 2 (--role workflows and --role clusters)")
    p.add_argument("--failures-per-min", type=float, default=6.0)
    p.add_argument("--real-slurm", type=int, metavar="N", help="only the batched query against real Slurm, N jobs queued")
    args = p.parse_args()
    if args.real_slurm:
        figures = real_slurm(args.real_slurm)
        local = figures["local"]
        emit_json({"jobs": args.real_slurm, "pass_s": local["query_s"] + local["parse_s"], "interval_s": args.interval,
                   "detect_p95_s": None, "watch_failed": False, "real_slurm": figures})
        return
    sizes = [args.jobs] if args.jobs else ([100, 1000] if args.quick else [100, 1000, 10_000])
    args.seconds = args.seconds or (45.0 if args.quick else 120.0)
    with tempfile.TemporaryDirectory(prefix="jm-scale-") as tmp:
        results = [run_size(n, args, Path(tmp)) for n in sizes]
    ok = [r for r in results if "error" not in r]
    for r in results:
        if "error" in r:
            print(f"{r['jobs']} jobs: {r['error']}", file=sys.stderr)
    print(f"poll interval {args.interval:g} s, {args.shards} shards, {args.seconds:g} s per size, "
          f"{args.failures_per_min:g} failures/min once the first pass is done; {args.processes} worker "
          f"process(es){' (--role workflows + --role clusters; worker CPU and RSS are both, with their child processes)' if args.processes == 2 else ''}; "
          f"{os.cpu_count()} CPU cores shared")
    print_table(
        ["jobs", "pass p50 s (after 1st)", "pass max s (after 1st)", "1st pass s (onboarding)", "interval s", "worker CPU %", "(sim CPU s)",
         "worker RSS MB", "server CPU %", "server RSS MB", "detect p50 s", "p95 s", "detected"],
        [[r["jobs"], r["pass_s"], r["pass_max_s"], r["first_pass_s"], r["interval_s"], r["worker_cpu_pct"], r["sim_cpu_s"],
          r["worker_rss_mb"], r["server_cpu_pct"], r["server_rss_mb"], r["detect_p50_s"], r["detect_p95_s"],
          f"{r['detected']}/{r['failures']}"] for r in ok],
    )
    print()
    print_table(
        ["jobs", "heartbeat B (now)", "old heartbeat B", "old fails (>2 MB)", "watch hist ev/B", "job hist max ev/B",
         "audit rows", "state rows", "squeue MB", "job read: all s", "one s", "squeue calls", "whole listings"],
        [[r["jobs"], r["heartbeat_bytes_max"], r["legacy_heartbeat_bytes"], r["legacy_fails"],
          f"{r['watch_history_events']}/{r['watch_history_bytes']}",
          f"{r['job_history_events_max']}/{r['job_history_bytes_max']}", r["audit_rows"], r["state_rows"],
          r["squeue_mb"], r["read_all_s"], r["read_one_s"], r["squeue_calls"], r["squeue_listings"]] for r in ok],
    )
    last = results[-1]
    emit_json({
        "jobs": last["jobs"], "pass_s": last.get("pass_s"), "interval_s": args.interval,
        "detect_p95_s": last.get("detect_p95_s"), "watch_failed": last.get("watch_failed", True),
        "sizes": results,
    })


if __name__ == "__main__":
    main()
