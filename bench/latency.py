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

Where the detection comes from (the output says which):
- default: the shared local lab (deploy/up.sh), which wires no EpilogSlurmctld / strigger: the
  poll-only fallback, so a failure waits for the next 15 s poll. Run it under
  `flock /tmp/jobmedic-stack-tests.lock`.
- `--events`: a private lab (4 nodes of 4 CPUs unless --lab-nodes / --lab-cpus) (deploy/slurm/up.sh with its own lab dir and ports; the shared
  lab is left alone) wired as docs/operations.md tells a site to wire it, as
  tests/notify/test_notify_slurm.py does: EpilogSlurmctld and `strigger --node --down` /
  `--drained` (--flags=perm) run `jobmedic notify` through a time-limited wrapper. The poll stays
  the safety net at its default interval. Needs no lock.
- `--private-lab`: the same private lab without the hooks (poll only), so a long run need not hold
  the shared lab.
For a dead node the bench also reads when slurmctld marked it DOWN (its log) and reports
detection minus that (`detect_after_down_s`): the issue's node-loss target.

Usage: .venv/bin/python bench/latency.py [--quick] [--events | --private-lab] [--per-kind N]
       [--kinds crash,hang,...] [--parallel N] [--hang-floor-s S] [--poll-interval-s S]
--quick: 3 jobs per kind, the hang floor and default bound at 30 s (stated in the output), a few minutes.
Temporal must be reachable (the bench runs deploy/up.sh). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
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
JOBMEDIC = str(Path(sys.executable).parent / "jobmedic")
HOOK_LIMIT_S = 5  # the wrappers' hard limit around `jobmedic notify` (its own --timeout-s is 3)
# private labs: own dir and ports, apart from the shared lab (16817/17000) and tests/notify's (26817/27000)
PRIVATE_LABS = {True: ("/tmp/jobmedic-slurm/latency-events", 36817, 37000),
                False: ("/tmp/jobmedic-slurm/latency-poll", 46817, 47000)}
DOWN_LINE = re.compile(r"^\[([0-9T:.-]+)\] error: Nodes (\S+) not responding, setting DOWN", re.M)


@dataclass
class Lab:
    """The Slurm cluster a run uses: the shared one, or a private one this bench started (and stops)."""

    conf: Path
    ctld_log: Path
    events: bool
    private: Path | None = None  # the private lab's dir
    stack: Path | None = None  # its own JOBMEDIC_STACK_DIR, so the shared env.sh is not rewritten

    def env(self) -> dict[str, str]:
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        if self.private is not None:
            env["JOBMEDIC_SLURM_LAB"] = str(self.private)
        return env

    def describe(self) -> str:
        if self.events:
            return (f"events: private lab {self.private} with EpilogSlurmctld and strigger (node down, drained) "
                    "running `jobmedic notify`; the poll reconciles")
        where = f"private lab {self.private}" if self.private else "the shared lab"
        return f"poll only: {where} wires no EpilogSlurmctld / strigger to `jobmedic notify`"


def _hook(lab: Path, name: str, config: Path, argv: str) -> Path:
    """A wrapper as docs/operations.md has a site write it: fixed command line, hard time limit."""
    path = lab / "etc" / name
    path.write_text(
        "#!/bin/sh\n"
        "# slurmctld gives hooks only SLURM_* variables; the limit keeps it from ever waiting on jobmedic\n"
        f"exec /usr/bin/timeout -k 1 {HOOK_LIMIT_S} {JOBMEDIC} --config {config} {argv} 2>>{lab}/log/notify.log\n"
    )
    path.chmod(0o755)
    return path


def _private_lab(tmp: Path, config: Path, *, events: bool, nodes: int, cpus: int, slot: int) -> Lab:
    """deploy/slurm/up.sh with a lab dir and ports of its own; with `events`, the hooks wired.
    `slot` N > 0: another dir and ports (+N*100), so two runs of one kind of lab can overlap."""
    lab_dir, ctld_port, base_port = PRIVATE_LABS[events]
    lab = Path(lab_dir + (f"-{slot}" if slot else ""))
    ctld_port, base_port = ctld_port + 100 * slot, base_port + 100 * slot
    stack = tmp / "stack"
    env = {**os.environ, "JOBMEDIC_STACK_DIR": str(stack), "JOBMEDIC_SLURM_LAB": str(lab),
           "JOBMEDIC_SLURM_NODES": str(nodes), "JOBMEDIC_SLURM_CPUS": str(cpus), "JOBMEDIC_SLURM_CTLD_PORT": str(ctld_port),
           "JOBMEDIC_SLURM_BASE_PORT": str(base_port)}
    _lab_down(lab, stack)  # a lab left over from an interrupted run: start clean
    (lab / "etc").mkdir(parents=True, exist_ok=True)
    (lab / "log").mkdir(parents=True, exist_ok=True)
    if events:
        env["JOBMEDIC_SLURM_EPILOG_SLURMCTLD"] = str(_hook(lab, "epilog-slurmctld", config, "notify job-end"))
        node_down = _hook(lab, "node-down", config, 'notify node-down "$@"')  # strigger: one host list
        node_drained = _hook(lab, "node-drained", config, 'notify node-down --drained "$@"')
    subprocess.run(["bash", str(ROOT / "deploy" / "slurm" / "up.sh")], env=env, check=True, capture_output=True,
                   timeout=300)
    conf = lab / "etc" / "slurm.conf"
    result = Lab(conf=conf, ctld_log=lab / "log" / "slurmctld.log", events=events, private=lab, stack=stack)
    if events:
        if f"EpilogSlurmctld={lab}/etc/epilog-slurmctld" not in conf.read_text():
            raise RuntimeError(f"{conf} has no EpilogSlurmctld line")
        for what, program in (("--down", node_down), ("--drained", node_drained)):
            subprocess.run(["strigger", "--set", "--node", what, f"--program={program}", "--flags=perm"],
                           env=result.env(), check=True, capture_output=True, timeout=30)
    return result


def _lab_down(lab: Path, stack: Path) -> None:
    subprocess.run(["bash", str(ROOT / "deploy" / "slurm" / "down.sh")],
                   env={**os.environ, "JOBMEDIC_STACK_DIR": str(stack), "JOBMEDIC_SLURM_LAB": str(lab),
                        "JOBMEDIC_SLURM_PURGE": "1", "JOBMEDIC_SLURM_KEEP_MUNGE": "1"},
                   capture_output=True, timeout=120)


def _shared_lab() -> Lab:
    subprocess.run(["bash", str(ROOT / "deploy" / "up.sh")], check=True, capture_output=True, timeout=600)
    env_sh = Path(os.environ.get("JOBMEDIC_STACK_DIR", "/tmp/jobmedic-stack")) / "env.sh"
    conf = None
    for line in env_sh.read_text().splitlines():
        if line.startswith("export SLURM_CONF="):
            conf = Path(line.split("=", 1)[1].strip().strip("'\""))
    if conf is None:
        raise RuntimeError(f"{env_sh} sets no SLURM_CONF")
    shown = subprocess.run(["scontrol", "show", "config"], env={**os.environ, "SLURM_CONF": str(conf)},
                           capture_output=True, text=True, timeout=30).stdout
    log = re.search(r"^SlurmctldLogFile\s*=\s*(\S+)", shown, re.M)
    epilog = re.search(r"^EpilogSlurmctld\s*=\s*(\S+)", shown, re.M)
    if epilog and epilog.group(1) != "(null)":
        print(f"note: the shared lab has EpilogSlurmctld={epilog.group(1)}: not poll-only", flush=True)
    return Lab(conf=conf, ctld_log=Path(log.group(1)) if log else conf.parent.parent / "log" / "slurmctld.log",
               events=bool(epilog and epilog.group(1) != "(null)"))


def _hostnames(hostlist: str) -> list[str]:
    """node[1-3,5],gpu7 -> node1 node2 node3 node5 gpu7 (Slurm's host-list syntax, one bracket level)."""
    names: list[str] = []
    for prefix, body, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", hostlist):
        if plain:
            names.append(plain)
            continue
        for part in body.split(","):
            lo, _, hi = part.partition("-")
            if hi:
                names += [f"{prefix}{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1)]
            else:
                names.append(f"{prefix}{lo}")
    return names


def _marked_down(ctld_log: Path, node: str, after: datetime) -> datetime | None:
    """When slurmctld first marked `node` DOWN (not responding) after `after`, from its log (local time)."""
    try:
        text = ctld_log.read_text(errors="replace")
    except FileNotFoundError:
        return None
    for stamp, hostlist in DOWN_LINE.findall(text):
        at = datetime.fromtimestamp(datetime.fromisoformat(stamp).timestamp(), UTC)  # naive: the host's zone
        if at >= after and node in _hostnames(hostlist):
            return at
    return None


@dataclass
class Run:
    kind: str
    job_id: str
    workdir: Path
    failed_at: datetime | None = None
    baseline_seen_at: datetime | None = None
    node: str | None = None  # dead-node: the node killed
    down_at: datetime | None = None  # dead-node: when slurmctld marked it DOWN
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


async def _one(sc: Scenario, lab: Lab, kind: str, index: int, *, hang_floor: float, registry: list[Run],
               learned_hang: bool) -> Run:
    workdir = sc.tmp / f"{kind}-{index}"
    nodes = 1 if kind == "dead-node" else 2
    iterations, step_s, fail_at = (60 if kind != "dead-node" else 400), 0.1, 25
    if kind == "hang" and learned_hang:
        # The watch learns a job's hang bound from the intervals between the progress it sees (one
        # observation a poll, intervals spanning a checkpoint save apart); with fewer than 5 it uses the
        # 1800 s default. So the hang job trains ~200 s (5 s a step, ~13 polls, 4 spanning a save) before
        # it hangs: the bound is then 5 x the usual interval, at least the 300 s floor. A job that hangs
        # 2.5 s in (the old shape) or ~100 s in (fail_at 21: ~4 intervals) waits 1800 s.
        step_s, fail_at = 5.0, 41
    # a killed node kills every job step on it: the dead-node job has its node to itself
    job_id = submit_training(workdir, environment=sc.environment, plan=PLANS[kind], nodes=nodes,
                             iterations=iterations, iteration_seconds=step_s, fail_at=fail_at,
                             name=f"jm-lat-{kind}", extra=["--exclusive"] if kind == "dead-node" else None)
    sc.jobs.append(job_id)
    run = Run(kind, job_id, workdir)
    registry.append(run)  # the baseline watcher follows it from now on
    out = workdir / f"train-{job_id}.out"
    if kind == "dead-node":
        started = await _wait(lambda: scontrol_job(job_id).get("JobState") == "RUNNING" and out.exists()
                              and "iteration" in out.read_text(errors="replace"), timeout=120)
        if started:
            await asyncio.sleep(3)
            node = run.node = _nodes_of(job_id)[0]
            run.failed_at = datetime.now(UTC)
            subprocess.run(["bash", str(NODE_CTL), "kill", node], env=lab.env(), capture_output=True, timeout=60)
            await _wait(lambda: scontrol_job(job_id).get("Restarts", "0") != "0", timeout=180)
            run.down_at = await _wait(lambda: _marked_down(lab.ctld_log, node, run.failed_at), timeout=30)
            subprocess.run(["bash", str(NODE_CTL), "start", node], env=lab.env(), capture_output=True, timeout=60)
    else:
        run.failed_at = await _wait(lambda: _stamp(out), timeout=300)
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
    if run.kind == "dead-node":
        figures["detect_after_down_s"] = gap(run.down_at, det)
        figures["down_after_kill_s"] = gap(run.failed_at, run.down_at)
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


async def _end_workflows(address: str, cluster: str) -> None:
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    from workers.temporal_client import end_cluster_workflows

    try:
        client = await Client.connect(address, data_converter=pydantic_data_converter)
        await end_cluster_workflows(client, cluster, reason="bench/latency.py finished")
    except Exception as exc:  # noqa: BLE001 - cleanup only; the figures are already taken
        print(f"note: could not end the bench's workflows: {exc}", flush=True)


async def main_async(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="jm-latency-"))
    sc = Scenario(tmp=tmp, cluster=unique("lat"), environment=unique("env"),
                  audit_url=f"sqlite:///{tmp / 'audit.db'}",
                  temporal_address=os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233"),
                  poll_interval_s=args.poll_interval_s,
                  hang=({"floor_s": args.hang_floor_s} if args.hang_floor_s is not None else {})
                  | ({"default_s": args.hang_floor_s} if args.quick else {}))
    sc.write_config()  # the hooks name it
    if args.events or args.private_lab:
        subprocess.run(["bash", str(ROOT / "deploy" / "up.sh"), "temporal"], check=True, capture_output=True,
                       timeout=600)
        lab = _private_lab(tmp, sc.config_path, events=args.events, nodes=args.lab_nodes, cpus=args.lab_cpus,
                           slot=args.lab_slot)
    else:
        lab = _shared_lab()
    os.environ["SLURM_CONF"] = str(lab.conf)  # sbatch/scontrol here and the worker's Slurm adapter
    print(f"detection: {lab.describe()}", flush=True)
    hang_floor = args.hang_floor_s if args.hang_floor_s is not None else 300.0
    try:
        return await _measure(args, sc, lab, hang_floor)
    finally:
        await _end_workflows(sc.temporal_address, sc.cluster)
        if lab.private is not None and lab.stack is not None:
            notify_log = lab.private / "log" / "notify.log"
            if notify_log.exists() and notify_log.stat().st_size:
                shutil.copy(notify_log, tmp / "notify.log")
                print(f"notify stderr kept in {tmp / 'notify.log'}", flush=True)
            _lab_down(lab.private, lab.stack)


async def _measure(args: argparse.Namespace, sc: Scenario, lab: Lab, hang_floor: float) -> dict:
    worker = WorkerProcess(sc).start()
    runs: list[Run] = []
    stop = asyncio.Event()
    baseline = asyncio.create_task(_baseline_watch(runs, args.baseline_poll_s, stop))
    sem = asyncio.Semaphore(args.parallel)
    started = time.monotonic()

    async def one(kind: str, i: int) -> Run:
        async with sem:
            run = await _one(sc, lab, kind, i, hang_floor=hang_floor, registry=runs, learned_hang=not args.quick)
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
                                    "running_s", "progress_s", "baseline_detect_s", "detect_after_down_s",
                                    "down_after_kill_s")}
    print(f"\ndetection: {lab.describe()}")
    print(f"{len(runs)} failures in {elapsed:.0f} s, {args.parallel} at once; poll interval {args.poll_interval_s:g} s, "
          f"hang floor {hang_floor:g} s" + (" (floor and default bound lowered for --quick; the hang job hangs "
          "2.5 s in)" if args.quick else " (a hang job trains ~200 s, 5 s a step, before it hangs)"))
    print(f"{'kind':<14}{'figure':<24}{'p50':>8}{'p95':>8}{'max':>8}")
    for kind, figs in table.items():
        for name, s in figs.items():
            if s["n"]:
                print(f"{kind:<14}{name:<24}{_fmt(s)}")
    print(f"\nbaselines: NVIDIA's published means {NVIDIA_DETECT_S:g} s to detect, {NVIDIA_ACTION_S:g} s to act; "
          f"a site script polling squeue every {args.baseline_poll_s:g} s, measured in this run")
    ratios: dict[str, dict] = {}
    for kind, figs in table.items():
        d50, a50, b50 = (figs[name]["p50"] for name in ("detect_s", "failure_to_action_s", "baseline_detect_s"))
        r = ratios[kind] = {
            "detect_p50_ratio_to_nvidia": round(d50 / NVIDIA_DETECT_S, 4) if d50 is not None else None,
            "action_p50_ratio_to_nvidia": round(a50 / NVIDIA_ACTION_S, 4) if a50 is not None else None,
            "detect_p50_ratio_to_squeue_poll": round(d50 / b50, 4) if d50 is not None and b50 else None,
            "squeue_poll_p50_s": b50}
        parts = []
        if d50 is not None:
            parts.append(f"detect p50 {d50} s = {r['detect_p50_ratio_to_nvidia']:.3f} x NVIDIA's {NVIDIA_DETECT_S:g} s")
            if b50:
                parts.append(f"{r['detect_p50_ratio_to_squeue_poll']:.3f} x the squeue poll's {b50} s")
            elif kind not in BASELINE_SEES:
                parts.append("the squeue poll never notices it (RUNNING)")
        if a50 is not None:
            parts.append(f"failure -> action p50 {a50} s = {r['action_p50_ratio_to_nvidia']:.3f} x NVIDIA's "
                         f"{NVIDIA_ACTION_S:g} s")
        print(f"  {kind:<14}" + ("; ".join(parts) or "no figures"))
    crash = ratios.get("crash", {})
    return {"quick": args.quick, "parallel": args.parallel, "lab_cpus": args.lab_cpus if lab.private else None,
            "lab_nodes": args.lab_nodes if lab.private else None, "events": lab.events, "private_lab": lab.private is not None, "per_kind": args.per_kind, "poll_interval_s": args.poll_interval_s,
            "hang_floor_s": hang_floor, "baseline_poll_s": args.baseline_poll_s, "elapsed_s": round(elapsed, 1),
            "nvidia_detect_mean_s": NVIDIA_DETECT_S, "nvidia_action_mean_s": NVIDIA_ACTION_S,
            "crash_detect_p50_ratio_to_nvidia": crash.get("detect_p50_ratio_to_nvidia"),
            "crash_action_p50_ratio_to_nvidia": crash.get("action_p50_ratio_to_nvidia"),
            "ratios": ratios, "kinds": table}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--quick", action="store_true", help="3 per kind, a 30 s hang bound; a few minutes")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--events", action="store_true",
                       help="a private lab with EpilogSlurmctld and strigger running `jobmedic notify`")
    where.add_argument("--private-lab", action="store_true",
                       help="a private lab without the hooks (poll only), instead of the shared lab")
    parser.add_argument("--lab-nodes", type=int, default=4, help="nodes of a private lab (default 4, as the shared lab)")
    parser.add_argument("--lab-slot", type=int, default=0, choices=range(0, 5),
                        help="a private lab's dir suffix and port offset (x100), to run two at once")
    parser.add_argument("--lab-cpus", type=int, default=4,
                        help="CPUs per node of a private lab (default 4, as the shared lab); a 2-node job takes 2 a node")
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
