"""Recovery latency on the real local stack: failure -> detection -> first scheduler action -> running -> progress.

A real `jobmedic worker` (default settings: poll every 15 s, the default hang bound,
action mode) watches real Slurm jobs running the demo trainer, which fails the way real
jobs fail, one failure per job, N per kind:
- `crash`: an error line naming a host, then the process exits (Slurm: FAILED);
- `hang`: progress stops, the process stays alive (Slurm: RUNNING);
- `dead-node`: the node's slurmd and its job steps are SIGKILLed (Slurm: NODE_FAIL);
- `fatal-running`: a rank prints a CUDA error and dies, the others keep running.

Per kind, p50/p95/max of
- failure -> detection (the failure instant: the trainer's own "[demo] failing now" stamp,
  the bench's kill time for a dead node; for a hang the stamp, so the hang bound is included,
  and also detection minus the bound);
- detection -> first scheduler action confirmed (the first `action_confirmed` entry);
- action -> job running again (`allocation_restart`), action -> first progress line of the
  next attempt (`progress_restored`).

Baselines: NVIDIA's published means (69 s failure -> detection, 94 s failure -> recovery
action) as ratios, and, measured in the same run, a site script that polls `squeue` every
60 s (`--baseline-poll-s`) and notices a job as failed when Slurm no longer shows it RUNNING
(or it restarted): its failure -> noticed latency, beside jobmedic's, for crashes and dead
nodes. A hang, or a rank's fatal error while the others run, stays RUNNING to such a script:
it never notices them.

Usage: .venv/bin/python bench/latency.py [--quick] [--per-kind N] [--kinds crash,hang,...]
       [--parallel N] [--hang-floor-s S] [--poll-interval-s S]
--quick: 3 jobs per kind and a 30 s hang floor (stated in the output), a few minutes.
The local stack must be up (deploy/up.sh; the bench runs it). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.workflows.harness import Scenario, WorkerProcess, cancel, scontrol_job, submit_training, unique  # noqa: E402
from workers.report import percentile  # noqa: E402
from workflows.contracts import EventType  # noqa: E402

KINDS = ("crash", "hang", "dead-node", "fatal-running")
PLANS = {"crash": "xid,ok", "hang": "hang,ok", "dead-node": "ok", "fatal-running": "fatal-running,ok"}
NVIDIA_DETECT_S, NVIDIA_ACTION_S = 69.0, 94.0
BASELINE_SEES = {"crash", "dead-node"}  # what a squeue poll can notice at all
NODE_CTL = ROOT / "deploy" / "slurm" / "node-ctl.sh"


@dataclass
class Run:
    kind: str
    job_id: str
    workdir: Path
    failed_at: datetime | None = None
    baseline_seen_at: datetime | None = None
    figures: dict[str, float | None] = field(default_factory=dict)


def _stamp(out: Path) -> datetime | None:
    """The trainer's own failure instant, from its output."""
    try:
        for line in out.read_text(errors="replace").splitlines():
            if line.startswith("[demo] failing now"):
                return datetime.fromisoformat(line.rsplit(" at ", 1)[1].strip())
    except FileNotFoundError:
        return None
    return None


def _nodes_of(job_id: str) -> list[str]:
    out = subprocess.run(["scontrol", "show", "hostnames", scontrol_job(job_id).get("NodeList", "")],
                         capture_output=True, text=True, timeout=30)
    return [n for n in out.stdout.split() if n]


async def _wait(check, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        await asyncio.sleep(every)
    return None


async def _baseline_watch(runs: list[Run], poll_s: float, stop: asyncio.Event) -> None:
    """A site script: every poll_s, one squeue; a job not RUNNING any more (or restarted) is noticed."""
    while not stop.is_set():
        states = _squeue_states([r.job_id for r in runs])
        now = datetime.now(UTC)
        for run in runs:
            if run.failed_at is None or run.baseline_seen_at is not None or run.kind not in BASELINE_SEES:
                continue  # a hung or half-dead job stays RUNNING to squeue until someone acts on it
            state, restarts = states.get(run.job_id, ("GONE", 0))
            if state != "RUNNING" or restarts > 0:
                run.baseline_seen_at = now
        try:
            await asyncio.wait_for(stop.wait(), timeout=poll_s)
        except TimeoutError:
            pass


def _squeue_states(job_ids: list[str]) -> dict[str, tuple[str, int]]:
    if not job_ids:
        return {}
    out = subprocess.run(["squeue", "--json", "--jobs", ",".join(job_ids)], capture_output=True, text=True, timeout=60)
    try:
        jobs = json.loads(out.stdout).get("jobs", [])
    except json.JSONDecodeError:
        return {}
    states = {}
    for job in jobs:
        state = job.get("job_state")
        state = state[0] if isinstance(state, list) and state else state
        states[str(job.get("job_id"))] = (str(state), int(job.get("restart_cnt") or 0))
    return states


async def _one(sc: Scenario, kind: str, index: int, *, hang_floor: float, registry: list[Run]) -> Run:
    workdir = sc.tmp / f"{kind}-{index}"
    nodes = 1 if kind == "dead-node" else 2
    job_id = submit_training(workdir, environment=sc.environment, plan=PLANS[kind], nodes=nodes,
                             iterations=60 if kind != "dead-node" else 400, iteration_seconds=0.1, fail_at=25,
                             name=f"jm-lat-{kind}")
    sc.jobs.append(job_id)
    run = Run(kind, job_id, workdir)
    registry.append(run)  # the baseline watcher follows it from now on
    out = workdir / f"train-{job_id}.out"
    if kind == "dead-node":
        started = await _wait(lambda: scontrol_job(job_id).get("JobState") == "RUNNING" and out.exists()
                              and "iteration" in out.read_text(errors="replace"), timeout=120)
        if started:
            await asyncio.sleep(3)
            node = _nodes_of(job_id)[0]
            run.failed_at = datetime.now(UTC)
            subprocess.run(["bash", str(NODE_CTL), "kill", node], capture_output=True, timeout=60)
            await _wait(lambda: scontrol_job(job_id).get("Restarts", "0") != "0", timeout=180)
            subprocess.run(["bash", str(NODE_CTL), "start", node], capture_output=True, timeout=60)
    else:
        run.failed_at = await _wait(lambda: _stamp(out), timeout=180)
    kinds_needed = {EventType.PROGRESS_RESTORED, EventType.COMPLETED}
    await _wait(lambda: kinds_needed & set(sc.kinds(job_id)), timeout=hang_floor + 240, every=1.0)
    cancel(job_id)
    return run


def _figures(sc: Scenario, run: Run, *, hang_floor: float) -> dict[str, float | None]:
    entries = sc.entries(run.job_id)
    first = lambda kind, after=None: next((e for e in entries if e.event_type is kind  # noqa: E731
                                           and (after is None or e.timestamp >= after)), None)
    detection = first(EventType.DETECTION)
    if detection is None or run.failed_at is None:
        return {"detect_s": None}
    det = detection.timestamp.replace(tzinfo=UTC) if detection.timestamp.tzinfo is None else detection.timestamp
    action = first(EventType.ACTION_CONFIRMED, detection.timestamp)
    running = first(EventType.ALLOCATION_RESTART, detection.timestamp)
    progress = first(EventType.PROGRESS_RESTORED, detection.timestamp)

    def at(e):
        return None if e is None else (e.timestamp.replace(tzinfo=UTC) if e.timestamp.tzinfo is None else e.timestamp)

    def gap(a, b):
        return None if a is None or b is None else round((b - a).total_seconds(), 3)

    figures = {
        "detect_s": gap(run.failed_at, det),
        "action_s": gap(det, at(action)),
        "failure_to_action_s": gap(run.failed_at, at(action)),
        "running_s": gap(at(action), at(running)),
        "progress_s": gap(at(action), at(progress)),
        "baseline_detect_s": gap(run.failed_at, run.baseline_seen_at),
        "category": detection.category,
    }
    if run.kind == "hang" and figures["detect_s"] is not None:
        figures["detect_minus_bound_s"] = round(figures["detect_s"] - hang_floor, 3)
    return figures


def _summary(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    return {"n": len(values), "p50": round(statistics.median(values), 2), "p95": round(percentile(values, 95) or 0, 2),
            "max": round(max(values), 2)}


def _fmt(s: dict) -> str:
    return "-" if not s["n"] else f"{s['p50']:>7.1f} {s['p95']:>7.1f} {s['max']:>7.1f}"


async def main_async(args: argparse.Namespace) -> dict:
    subprocess.run(["bash", str(ROOT / "deploy" / "up.sh")], check=True, capture_output=True, timeout=600)
    env_sh = Path(os.environ.get("JOBMEDIC_STACK_DIR", "/tmp/jobmedic-stack")) / "env.sh"
    for line in env_sh.read_text().splitlines():
        if line.startswith("export SLURM_CONF="):
            os.environ["SLURM_CONF"] = line.split("=", 1)[1]
    tmp = Path(tempfile.mkdtemp(prefix="jm-latency-"))
    sc = Scenario(tmp=tmp, cluster=unique("lat"), environment=unique("env"),
                  audit_url=f"sqlite:///{tmp / 'audit.db'}",
                  temporal_address=os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233"),
                  poll_interval_s=args.poll_interval_s,
                  hang={"floor_s": args.hang_floor_s} if args.hang_floor_s is not None else {})
    hang_floor = args.hang_floor_s if args.hang_floor_s is not None else 300.0
    worker = WorkerProcess(sc).start()
    runs: list[Run] = []
    stop = asyncio.Event()
    baseline = asyncio.create_task(_baseline_watch(runs, args.baseline_poll_s, stop))
    sem = asyncio.Semaphore(args.parallel)
    started = time.monotonic()

    async def one(kind: str, i: int) -> Run:
        async with sem:
            run = await _one(sc, kind, i, hang_floor=hang_floor, registry=runs)
            print(f"  {kind:<14} job {run.job_id:>6} done", flush=True)
            return run

    kinds = [k for k in args.kinds.split(",") if k]
    try:
        await asyncio.gather(*(one(kind, i) for i in range(args.per_kind) for kind in kinds))
        # one more baseline poll, so the site script had its chance at every failure
        await asyncio.sleep(args.baseline_poll_s + 1)
    finally:
        stop.set()
        await baseline
        worker.stop()
        for job in sc.jobs:
            cancel(job)
    elapsed = time.monotonic() - started
    for run in runs:
        run.figures = _figures(sc, run, hang_floor=hang_floor)
        print(f"  {run.kind:<14} job {run.job_id:>6}: " + (", ".join(
            f"{k} {v}" for k, v in run.figures.items() if v is not None) or "never detected"))
    table: dict[str, dict] = {}
    for kind in kinds:
        mine = [r.figures for r in runs if r.kind == kind]
        table[kind] = {name: _summary([f[name] for f in mine if isinstance(f.get(name), (int, float))])
                       for name in ("detect_s", "detect_minus_bound_s", "action_s", "failure_to_action_s",
                                    "running_s", "progress_s", "baseline_detect_s")}
    print(f"\n{len(runs)} failures in {elapsed:.0f} s; poll interval {args.poll_interval_s:g} s, hang floor "
          f"{hang_floor:g} s{' (lowered for --quick)' if args.quick else ''}")
    print(f"{'kind':<14}{'figure':<24}{'p50':>8}{'p95':>8}{'max':>8}")
    for kind, figs in table.items():
        for name, s in figs.items():
            if s["n"]:
                print(f"{kind:<14}{name:<24}{_fmt(s)}")
    crash = table.get("crash", {})
    d50 = (crash.get("detect_s") or {}).get("p50")
    a50 = (crash.get("failure_to_action_s") or {}).get("p50")
    b50 = (crash.get("baseline_detect_s") or {}).get("p50")
    print(f"\nbaselines (crash): NVIDIA's published means {NVIDIA_DETECT_S:g} s to detect, {NVIDIA_ACTION_S:g} s to act; "
          f"a {args.baseline_poll_s:g} s squeue poll in this run: p50 {b50} s to notice")
    if d50 is not None:
        print(f"  detection p50 {d50} s = {d50 / NVIDIA_DETECT_S:.3f} x NVIDIA's mean"
              + (f", {d50 / b50:.3f} x the squeue poll's" if b50 else ""))
    if a50 is not None:
        print(f"  failure -> first action p50 {a50} s = {a50 / NVIDIA_ACTION_S:.3f} x NVIDIA's mean")
    return {"quick": args.quick, "per_kind": args.per_kind, "poll_interval_s": args.poll_interval_s,
            "hang_floor_s": hang_floor, "baseline_poll_s": args.baseline_poll_s, "elapsed_s": round(elapsed, 1),
            "nvidia_detect_mean_s": NVIDIA_DETECT_S, "nvidia_action_mean_s": NVIDIA_ACTION_S,
            "crash_detect_p50_ratio_to_nvidia": round(d50 / NVIDIA_DETECT_S, 4) if d50 is not None else None,
            "crash_action_p50_ratio_to_nvidia": round(a50 / NVIDIA_ACTION_S, 4) if a50 is not None else None,
            "kinds": table}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--quick", action="store_true", help="3 per kind, a 30 s hang floor; a few minutes")
    parser.add_argument("--per-kind", type=int, default=20, help="failures per kind (default 20)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma list of {', '.join(KINDS)}")
    parser.add_argument("--parallel", type=int, default=2, help="jobs at once (the lab has 4 nodes)")
    parser.add_argument("--poll-interval-s", type=float, default=15.0, help="the watch's poll (default: the default)")
    parser.add_argument("--hang-floor-s", type=float, default=None, help="hang bound floor (default: the default)")
    parser.add_argument("--baseline-poll-s", type=float, default=60.0, help="the site script's squeue period")
    args = parser.parse_args(argv)
    bad = [k for k in args.kinds.split(",") if k and k not in KINDS]
    if bad:
        parser.error(f"unknown kind(s) {', '.join(bad)}; choose from {', '.join(KINDS)}")
    if args.per_kind < 1 or args.parallel < 1:
        parser.error("--per-kind and --parallel must be at least 1")
    if args.quick:
        args.per_kind = min(args.per_kind, 3)
        args.hang_floor_s = 30.0 if args.hang_floor_s is None else args.hang_floor_s
    figures = asyncio.run(main_async(args))
    print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
