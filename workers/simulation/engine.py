"""Goodput simulator: one long training job for a week, under jobmedic, manual recovery and Slurm's plain requeue.

A discrete-event simulation in pure Python, deterministic for a seed. jobmedic's
decisions are not modelled: every failure is put to the real decision policy
(`workflows.policy.decide`) with a `JobHistory` kept the way the recovery
workflow keeps it (`start_attempt`, `note_checkpoint`, `record_outcome`,
`note_excluded`, `note_jobmedic_restart`) and node limits the way the workflow
builds them (`NodeLimits`: the partition and its unavailable nodes), and the
advice is carried out as given. Lemon nodes (`workflows.systemic`) need failures
of several distinct jobs on one node; one simulated job cannot make one, so the
guard's lemon list is empty here, as it is for a guard that has not answered.

The job
- `gpus` GPUs on `gpus // gpus_per_node` nodes (at least one) of a partition
  with `spare_fraction` more nodes (at least `min_spares`); it runs for the
  whole horizon (`days`), starting productive at t = 0 at `start_hour` local time
  on a Monday.
- It checkpoints every `checkpoint_interval_s` of training (default: Young's
  interval sqrt(2 x write time x MTTF) for the job, at most 4 h) and stalls for
  `checkpoint_write_s` while writing; a failure loses the work since the last
  completed checkpoint. A new attempt starts `restart_overhead_s` after its
  allocation (initialisation and checkpoint load) before training again.

Failures (per running node, Poisson)
- All nodes: `failures_per_1000_node_days` unexpected interruptions, split into
  classes by the shares of Llama 3's 54-day, 16,384-GPU pre-training snapshot
  (419 unexpected interruptions; Table 5 of "The Llama 3 Herd of Models",
  arXiv 2407.21783): gpu 268 (faulty GPU 148, HBM3 72, SRAM 19, GPU system
  processor 17, silent data corruption 6, thermal interface/sensor 6),
  network 42 (switch/cable 35, NIC 7), host 46 (unplanned host maintenance
  32, SSD 3, power supply 3, chassis 2, IO expansion board 2, CPU 2, system
  memory 2), software 56 (software bug 54, dependency 2), nccl_timeout 7 (NCCL
  watchdog timeouts, cause unknown). Confirmed hardware (all but host
  maintenance, software and NCCL timeouts) is 324 of 419, 77 %: Meta's "~78 %".
- Presets: `rsc1`, 6.5 per 1000 node-days (Meta's RSC-1 research cluster,
  Kokolis et al., "Revisiting Reliability in Large-Scale Machine Learning
  Research Clusters", HPCA 2025, arXiv 2410.21680; RSC-2: 2.34); `llama3`,
  419 / (54 days x 2,048 nodes) = 3.79.
- Bad nodes: each node of the partition is bad with probability
  `bad_node_fraction` (`forced_bad_nodes` of the first allocation are bad
  whatever the draw); a bad node in the allocation adds gpu-class failures
  every `bad_node_mtbf_h` hours of running on average, until it leaves the
  allocation. (An assumption: no public source gives these two figures.)
- Per class: the probability that the evidence names the failing node (the
  verdict's implicated host), that the failure shows as a hang (progress stops,
  ranks alive) instead of a crash, and whether the node dies (Slurm marks it
  DOWN; it is back `repair_h` later): see CLASSES.

Recovery, per strategy (all three then wait `action_to_running_s` for the
scheduler to start the job again plus `queue_wait_s` for the allocation)
- jobmedic: detected after `detect_crash_s`, `detect_hang_s` or
  `detect_dead_node_s` (bench/latency.py's p50 on the local stack), acts
  `detect_to_action_s` later, and does what the real policy advises. A restart
  excludes the advised nodes. A stop leaves the job as Slurm left it; a person
  then picks it up as in manual recovery and resubmits it as a new job (a fresh
  history), excluding the nodes the evidence named.
- manual: the job ends (a crash at once, a hang when the NCCL watchdog fires
  after `nccl_timeout_s`, a dead node when Slurm gives up on it after
  `slurmd_timeout_s`); a person triages it in `triage_min_s`..`triage_max_s`
  (uniform) by day, and at night (`night_start_h`..`night_end_h`) only from
  the end of the night, then resubmits it excluding the nodes the evidence
  named, as long as the partition can spare them.
- requeue: Slurm requeues the job when it ends (same end times as manual),
  on the same nodes except those that are DOWN: a bad node fails it again.

Figures, per strategy and job size, averaged over `runs` seeded runs
- ETTR (effective training time ratio): training time kept at the end of the
  horizon / wall time of the horizon. Lost work, checkpoint stalls, detection,
  triage, queueing and restart overhead are all outside it.
- GPU-hours lost per week: (1 - ETTR) x gpus x 168.
- failures, of them repeats on a bad node that had already failed the job,
  restarts, the policy's stops and the rule of each advice.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timedelta, timezone
from typing import Any

from workflows.contracts import (
    AdviceAction,
    Category,
    FaultDomain,
    Implicated,
    JobInfo,
    Mode,
    OptIn,
    OptInResult,
    PolicyConfig,
    Verdict,
)
from workflows.history import JobHistory
from workflows.policy import NodeLimits, decide, is_restart

STRATEGIES = ("jobmedic", "manual", "requeue")
BASELINES = ("manual", "requeue")
DEFAULT_SIZES = (8, 64, 512, 4096, 16384)
WEEK_H = 168.0
# Monday 2025-01-06, the hour is added from `start_hour`
_EPOCH = datetime(2025, 1, 6, tzinfo=timezone.utc)

PRESETS = {
    "rsc1": 6.5,  # Kokolis et al. 2024: RSC-1, failures per 1000 node-days
    "llama3": 419 / (54 * 2048) * 1000,  # 419 interruptions, 54 days, 16,384 GPUs on 2,048 nodes
}


class SimulationError(ValueError):
    """Input the simulator refuses; the message names the option and what is allowed."""


@dataclass(frozen=True)
class FailureClass:
    """One kind of unexpected interruption and how it presents."""

    name: str
    count: int  # Llama 3 Table 5 interruptions (of 419): the class's share
    category: Category
    fault_domain: FaultDomain
    names_host: float  # probability that the evidence names the failing node
    hang: float  # probability that it shows as a hang rather than a crash
    kills_node: bool = False  # the node goes DOWN


# names_host and hang are assumptions from how each class shows in logs: an Xid line names its
# host, a DOWN node is known to Slurm, a link error often shows on one node only, a software bug
# or a bare NCCL watchdog timeout names none; switch and GPU faults often stall a collective.
CLASSES: tuple[FailureClass, ...] = (
    FailureClass("gpu", 268, Category.GPU_HARDWARE, FaultDomain.HARDWARE, names_host=0.9, hang=0.1),
    FailureClass("network", 42, Category.INTERCONNECT, FaultDomain.NETWORK, names_host=0.6, hang=0.5),
    FailureClass("host", 46, Category.NODE_FAILURE, FaultDomain.NODE, names_host=1.0, hang=0.0, kills_node=True),
    FailureClass("software", 56, Category.APP_ERROR, FaultDomain.APPLICATION, names_host=0.0, hang=0.0),
    FailureClass("nccl_timeout", 7, Category.NCCL_TIMEOUT, FaultDomain.NETWORK, names_host=0.0, hang=1.0),
)
_BY_NAME = {c.name: c for c in CLASSES}


@dataclass(frozen=True)
class SimConfig:
    """Every knob of one simulated job (the CLI option is the field name with dashes)."""

    gpus: int = 512
    gpus_per_node: int = 8
    days: float = 7.0
    failures_per_1000_node_days: float = PRESETS["rsc1"]
    bad_node_fraction: float = 0.002
    bad_node_mtbf_h: float = 12.0
    forced_bad_nodes: int = 0
    checkpoint_interval_s: float | None = None  # None: Young's interval for the job (`checkpoint_interval`)
    checkpoint_write_s: float = 60.0
    restart_overhead_s: float = 300.0
    queue_wait_s: float = 120.0
    detect_crash_s: float = 12.0
    detect_dead_node_s: float = 26.0
    detect_hang_s: float = 71.0
    detect_to_action_s: float = 6.0
    action_to_running_s: float = 11.0
    triage_min_s: float = 1800.0
    triage_max_s: float = 3600.0
    night_start_h: float = 22.0
    night_end_h: float = 8.0
    start_hour: float = 9.0
    nccl_timeout_s: float = 600.0
    slurmd_timeout_s: float = 300.0
    spare_fraction: float = 0.05
    min_spares: int = 2
    repair_h: float = 24.0
    max_attempts: int | None = None  # the job's opt-in max_attempts; None: the policy's
    policy: PolicyConfig = field(default_factory=PolicyConfig)

    def __post_init__(self) -> None:
        validate(self)

    @property
    def nodes(self) -> int:
        return max(1, math.ceil(self.gpus / self.gpus_per_node))

    @property
    def horizon_s(self) -> float:
        return self.days * 86400.0

    @property
    def checkpoint_interval(self) -> float:
        """The checkpoint interval in seconds: as given, else Young's sqrt(2 x write time x MTTF).

        The MTTF is the calibration's for the job's nodes (bad nodes left out), the interval at least
        60 s and at most MAX_AUTO_INTERVAL_S (a job with almost no failures still checkpoints).
        """
        if self.checkpoint_interval_s is not None:
            return self.checkpoint_interval_s
        mttf_h = expected_mttf_h(self)
        if mttf_h is None:
            return MAX_AUTO_INTERVAL_S
        young = math.sqrt(2.0 * max(self.checkpoint_write_s, 1.0) * mttf_h * 3600.0)
        return min(MAX_AUTO_INTERVAL_S, max(60.0, young))

    @property
    def spares(self) -> int:
        return max(self.min_spares, math.ceil(self.nodes * self.spare_fraction))


_POSITIVE = ("gpus", "gpus_per_node", "days", "bad_node_mtbf_h", "repair_h")
_NON_NEGATIVE = (
    "failures_per_1000_node_days", "forced_bad_nodes", "checkpoint_write_s", "restart_overhead_s", "queue_wait_s",
    "detect_crash_s", "detect_dead_node_s", "detect_hang_s", "detect_to_action_s", "action_to_running_s",
    "triage_min_s", "triage_max_s", "nccl_timeout_s", "slurmd_timeout_s", "spare_fraction", "min_spares",
)
MAX_DAYS = 366.0
MAX_AUTO_INTERVAL_S = 4 * 3600.0
MAX_GPUS = 1_048_576


def option(name: str) -> str:
    """The command-line spelling of a SimConfig field."""
    return "--" + name.replace("_", "-")


def validate(cfg: SimConfig) -> None:
    """Raise SimulationError naming the first option that is out of range."""
    for name in _POSITIVE + _NON_NEGATIVE:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SimulationError(f"{option(name)} must be a finite number, not {value!r}")
        if name in _POSITIVE and value <= 0:
            raise SimulationError(f"{option(name)} must be greater than 0, not {value:g}")
        if value < 0:
            raise SimulationError(f"{option(name)} must not be negative, not {value:g}")
    if cfg.checkpoint_interval_s is not None and not (
        isinstance(cfg.checkpoint_interval_s, (int, float)) and math.isfinite(cfg.checkpoint_interval_s)
        and cfg.checkpoint_interval_s > 0
    ):
        raise SimulationError(f"{option('checkpoint_interval_s')} must be greater than 0, not {cfg.checkpoint_interval_s!r}")
    if cfg.days > MAX_DAYS:
        raise SimulationError(f"{option('days')} is at most {MAX_DAYS:g}, not {cfg.days:g}")
    if cfg.gpus > MAX_GPUS:
        raise SimulationError(f"{option('gpus')} is at most {MAX_GPUS:,}, not {cfg.gpus:,}")
    if not 0 <= cfg.bad_node_fraction <= 1:
        raise SimulationError(f"{option('bad_node_fraction')} is a fraction between 0 and 1, not {cfg.bad_node_fraction:g}")
    if cfg.forced_bad_nodes > cfg.nodes:
        raise SimulationError(
            f"{option('forced_bad_nodes')} ({cfg.forced_bad_nodes}) is more than the job's {cfg.nodes} node(s)"
        )
    if cfg.triage_min_s > cfg.triage_max_s:
        raise SimulationError(
            f"{option('triage_min_s')} ({cfg.triage_min_s:g}) must not exceed {option('triage_max_s')} "
            f"({cfg.triage_max_s:g})"
        )
    for name in ("night_start_h", "night_end_h", "start_hour"):
        value = getattr(cfg, name)
        if not isinstance(value, (int, float)) or not 0 <= value < 24:
            raise SimulationError(f"{option(name)} is an hour of the day, 0 to under 24, not {value!r}")
    if cfg.max_attempts is not None and cfg.max_attempts < 1:
        raise SimulationError(f"{option('max_attempts')} must be at least 1, not {cfg.max_attempts}")


# --------------------------------------------------------------------------- one run


@dataclass(frozen=True)
class Recovery:
    """One failure and what followed it."""

    failed_at_s: float
    failure_class: str
    presentation: str  # crash | hang | dead_node
    node: str
    named: bool  # the evidence named the node
    action: str  # the policy's advice (jobmedic), "requeue" or "resubmit"
    rule: str  # the policy rule (jobmedic), else ""
    by: str  # who started the job again: jobmedic | slurm | person
    starts_at_s: float  # the next allocation starts (or waits for nodes) here


@dataclass
class RunResult:
    """What one seeded run of one strategy produced."""

    strategy: str
    gpus: int
    horizon_s: float
    productive_s: float = 0.0
    failures: int = 0
    bad_node_repeats: int = 0  # failures on a bad node that had failed the job before
    restarts: int = 0
    stops: int = 0  # jobmedic: the policy advised not to restart (a person took over)
    lost_work_s: float = 0.0  # training since the last checkpoint, lost with each failure
    running_s: float = 0.0  # allocated and running (for the MTTF)
    rules: Counter = field(default_factory=Counter)
    by_class: Counter = field(default_factory=Counter)
    excluded_nodes: int = 0  # distinct nodes excluded from the job by the end
    recoveries: list[Recovery] = field(default_factory=list)

    @property
    def ettr(self) -> float:
        return self.productive_s / self.horizon_s

    @property
    def gpu_hours_lost_per_week(self) -> float:
        return (1.0 - self.ettr) * self.gpus * WEEK_H


@dataclass(frozen=True)
class _Failure:
    node: str
    cls: FailureClass
    presentation: str  # crash | hang | dead_node
    named: bool  # the evidence names `node`
    on_bad_node: bool


class _Run:
    """One job, one strategy, one seed: the event loop and the job's state."""

    def __init__(self, cfg: SimConfig, strategy: str, seed: str) -> None:
        if strategy not in STRATEGIES:
            raise SimulationError(f"unknown strategy {strategy!r}; one of {', '.join(STRATEGIES)}")
        self.cfg = cfg
        self.strategy = strategy
        # one stream per purpose, named apart from the strategy: the three strategies see the same bad
        # nodes and draw their failures in the same order
        self.rng = {name: random.Random(f"{seed}/{name}") for name in ("bad", "fail", "verdict", "triage")}
        total = cfg.nodes + cfg.spares
        self.partition = [f"node{i:05d}" for i in range(total)]
        self.bad = {n for n in self.partition if self.rng["bad"].random() < cfg.bad_node_fraction}
        self.bad |= set(self.partition[: cfg.forced_bad_nodes])
        self.failed_bad: set[str] = set()
        self.down_until: dict[str, float] = {}
        self.excluded: set[str] = set()
        self.alloc: list[str] = self.partition[: cfg.nodes]
        self.events: list[tuple[float, int, str, int, Any]] = []
        self.seq = 0
        self.epoch = 0  # attempt number: events of an earlier attempt are stale
        self.state = "train"
        self.train_since = 0.0
        self.alloc_since = 0.0
        self.progress = 0.0
        self.saved = 0.0
        self.iteration = 0
        self.history = JobHistory().start_attempt(at=self.at(0.0), checkpoint_iteration=None)
        self.job_number = 1
        self.result = RunResult(strategy=strategy, gpus=cfg.gpus, horizon_s=cfg.horizon_s)
        weights = [c.count for c in CLASSES]
        self._class_weights = [w / sum(weights) for w in weights]

    # ------------------------------------------------------------------ clock

    def at(self, t: float) -> datetime:
        return _EPOCH + timedelta(hours=self.cfg.start_hour, seconds=t)

    def is_night(self, t: float) -> bool:
        hour = (self.cfg.start_hour + t / 3600.0) % 24.0
        start, end = self.cfg.night_start_h, self.cfg.night_end_h
        return (start <= hour or hour < end) if start > end else (start <= hour < end)

    def morning(self, t: float) -> float:
        """The end of the night that `t` falls in."""
        hour = (self.cfg.start_hour + t / 3600.0) % 24.0
        wait_h = (self.cfg.night_end_h - hour) % 24.0
        return t + wait_h * 3600.0

    # ------------------------------------------------------------------ events

    def push(self, t: float, kind: str, payload: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, self.epoch, payload))

    def run(self) -> RunResult:
        self._schedule_attempt(0.0)
        self.push(self.cfg.checkpoint_interval, "ckpt_start")
        horizon = self.cfg.horizon_s
        while self.events:
            t, _, kind, epoch, payload = heapq.heappop(self.events)
            if t >= horizon:
                break
            if epoch != self.epoch:  # an event of an attempt that has ended
                continue
            getattr(self, f"_on_{kind}")(t, payload)
        if self.state in ("train", "ckpt", "startup"):
            self.result.running_s += horizon - self.alloc_since
        if self.state == "train":
            self.progress += horizon - self.train_since
        self.result.productive_s = self.progress
        self.result.excluded_nodes = len(self.excluded)
        return self.result

    def _schedule_attempt(self, t: float) -> None:
        """Draw this attempt's failures, from `t` on, for its allocation."""
        cfg = self.cfg
        rng = self.rng["fail"]
        rate = cfg.failures_per_1000_node_days / 1000.0 / 86400.0 * len(self.alloc)
        if rate > 0:
            when = t + rng.expovariate(rate)
            node = self.alloc[rng.randrange(len(self.alloc))]
            cls = rng.choices(CLASSES, weights=self._class_weights)[0]
            self.push(when, "fail", (node, cls.name))
        for node in sorted(self.bad & set(self.alloc)):
            self.push(t + rng.expovariate(1.0 / (cfg.bad_node_mtbf_h * 3600.0)), "fail", (node, "gpu"))

    def _on_ckpt_start(self, t: float, _: Any) -> None:
        self.progress += t - self.train_since
        self.state = "ckpt"
        self.push(t + self.cfg.checkpoint_write_s, "ckpt_done")

    def _on_ckpt_done(self, t: float, _: Any) -> None:
        self.saved = self.progress
        self.iteration += 1
        if self.strategy == "jobmedic":
            self.history = self.history.note_checkpoint(self.iteration)
        self.state = "train"
        self.train_since = t
        self.push(t + self.cfg.checkpoint_interval, "ckpt_start")

    def _on_ready(self, t: float, _: Any) -> None:
        self.state = "train"
        self.train_since = t
        self.push(t + self.cfg.checkpoint_interval, "ckpt_start")

    def _on_start(self, t: float, _: Any) -> None:
        """The job's new allocation starts (or waits for a node to come back)."""
        nodes = self._allocation(t)
        if nodes is None:
            back = min((u for u in self.down_until.values() if u > t), default=None)
            if back is None:  # nothing will come back: the job never runs again
                self.state = "gone"
                return
            self.push(back, "start")
            return
        self.alloc = nodes
        self.state = "startup"
        self.alloc_since = t
        if self.strategy == "jobmedic":
            self.history = self.history.start_attempt(at=self.at(t), checkpoint_iteration=self.iteration or None)
        self._schedule_attempt(t)
        self.push(t + self.cfg.restart_overhead_s, "ready")

    def _on_fail(self, t: float, payload: tuple[str, str]) -> None:
        node, name = payload
        cls = _BY_NAME[name]
        if self.state == "train":
            self.progress += t - self.train_since
        self.result.running_s += t - self.alloc_since
        self.result.lost_work_s += self.progress - self.saved
        self.progress = self.saved
        self.epoch += 1
        self.state = "down"
        rng = self.rng["verdict"]
        if cls.kills_node:
            presentation = "dead_node"
            self.down_until[node] = t + self.cfg.repair_h * 3600.0
        else:
            presentation = "hang" if rng.random() < cls.hang else "crash"
        failure = _Failure(node=node, cls=cls, presentation=presentation, named=rng.random() < cls.names_host,
                           on_bad_node=node in self.bad)
        self.result.failures += 1
        self.result.by_class[cls.name] += 1
        if failure.on_bad_node:
            if node in self.failed_bad:
                self.result.bad_node_repeats += 1
            self.failed_bad.add(node)
        restart_at, action, rule, by = getattr(self, f"_recover_{self.strategy}")(t, failure)
        self.result.restarts += 1
        self.result.recoveries.append(Recovery(
            failed_at_s=t, failure_class=cls.name, presentation=presentation, node=node, named=failure.named,
            action=action, rule=rule, by=by, starts_at_s=restart_at,
        ))
        self.push(restart_at, "start")

    # ------------------------------------------------------------------ strategies

    def _job_ends_at(self, t: float, f: _Failure) -> float:
        """When the job itself ends without jobmedic: a hang waits for the NCCL watchdog, a dead node for Slurm."""
        if f.presentation == "hang":
            return t + self.cfg.nccl_timeout_s
        if f.presentation == "dead_node":
            return t + self.cfg.slurmd_timeout_s
        return t

    def _scheduler_start(self, t: float) -> float:
        return t + self.cfg.action_to_running_s + self.cfg.queue_wait_s

    def _person_done(self, t: float) -> float:
        """When a person who hears of the failure at `t` has triaged it and resubmitted the job."""
        start = self.morning(t) if self.is_night(t) else t
        return start + self.rng["triage"].uniform(self.cfg.triage_min_s, self.cfg.triage_max_s)

    # each returns (when the next allocation starts, action, rule, who restarted the job)
    _Outcome = tuple[float, str, str, str]

    def _recover_requeue(self, t: float, f: _Failure) -> _Outcome:
        return self._scheduler_start(self._job_ends_at(t, f)), "requeue", "", "slurm"

    def _recover_manual(self, t: float, f: _Failure) -> _Outcome:
        done = self._person_done(self._job_ends_at(t, f))
        if f.named:
            self._exclude_if_it_fits([f.node], at=done)
        return self._scheduler_start(done), "resubmit", "", "person"

    def _recover_jobmedic(self, t: float, f: _Failure) -> _Outcome:
        cfg = self.cfg
        detect = {"crash": cfg.detect_crash_s, "hang": cfg.detect_hang_s, "dead_node": cfg.detect_dead_node_s}
        decided = t + detect[f.presentation]
        verdict = Verdict(
            category=f.cls.category,
            fault_domain=f.cls.fault_domain,
            implicated=Implicated(hosts=[f.node] if f.named else []),
            confidence=0.9,
        )
        exit_code = None if f.presentation == "hang" else 1
        job = JobInfo(
            job_id=str(self.job_number),
            num_nodes=cfg.nodes,
            exit_code=exit_code,
            excluded_nodes=sorted(self.excluded),
            requeue_allowed=True,
            opt_in=OptInResult(
                opted_in=True,
                opt_in=OptIn(mode=Mode.ACTION, max_attempts=cfg.max_attempts, checkpoint_dir="/checkpoints"),
            ),
        )
        limits = NodeLimits(partition_nodes=self.partition, unavailable=self._unavailable(decided))
        advice = decide(
            verdict, job, self.history, cfg.policy, now=self.at(decided), nodes=limits,
            max_attempts_override=cfg.max_attempts,
        )
        self.result.rules[advice.rule] += 1
        self.history = self.history.record_outcome(verdict, advice, ended_at=self.at(decided), exit_code=exit_code)
        if is_restart(advice.action):
            self.excluded.difference_update(advice.readmit_nodes)  # given back to make room (node limits, +readmit)
            self.excluded.update(advice.exclude_nodes)
            self.history = self.history.note_readmitted(advice.readmit_nodes).note_excluded(advice.exclude_nodes)
            self.history = self.history.note_jobmedic_restart()
            return self._scheduler_start(decided + cfg.detect_to_action_s), advice.action.value, advice.rule, "jobmedic"
        # STOP (or any advice that is not a restart): the job stays as Slurm left it; a person takes over
        # and resubmits it as a new job, which starts a new history
        self.result.stops += 1
        if advice.action is not AdviceAction.STOP:
            self.result.rules[f"not_restarted:{advice.action.value}"] += 1
        # jobmedic's stop alert reaches a person at once; a hung job only ends when its watchdog fires
        done = max(self._person_done(decided), self._job_ends_at(t, f))
        if f.named:
            self._exclude_if_it_fits([f.node], at=done)
        self.job_number += 1
        self.history = JobHistory()
        return self._scheduler_start(done), advice.action.value, advice.rule, "person"

    # ------------------------------------------------------------------ nodes

    def _unavailable(self, t: float) -> list[str]:
        return sorted(n for n, until in self.down_until.items() if until > t)

    def _exclude_if_it_fits(self, hosts: Iterable[str], *, at: float) -> None:
        """A person's exclusion: only while the partition keeps enough usable nodes for the job."""
        down = set(self._unavailable(at))
        for host in hosts:
            usable = set(self.partition) - self.excluded - down - {host}
            if len(usable) >= self.cfg.nodes:
                self.excluded.add(host)

    def _allocation(self, t: float) -> list[str] | None:
        """The nodes of the next attempt: the last ones where still allowed, then the partition in order."""
        down = set(self._unavailable(t))
        allowed = [n for n in self.partition if n not in down and n not in self.excluded]
        if len(allowed) < self.cfg.nodes:
            return None
        allowed_set = set(allowed)
        keep = [n for n in self.alloc if n in allowed_set]
        kept = set(keep)
        more = [n for n in allowed if n not in kept]
        return (keep + more)[: self.cfg.nodes]


def simulate_run(cfg: SimConfig, strategy: str, *, seed: str | int = 0) -> RunResult:
    """One seeded run of one strategy for the job `cfg` describes."""
    return _Run(cfg, strategy, str(seed)).run()


# --------------------------------------------------------------------------- many runs


@dataclass(frozen=True)
class Summary:
    """The mean over runs of one strategy at one job size."""

    strategy: str
    gpus: int
    runs: int
    ettr: float
    ettr_ci95: float  # half-width of a normal 95 % interval of the mean
    gpu_hours_lost_per_week: float
    failures_per_week: float
    bad_node_repeats_per_week: float
    stops_per_week: float
    mttf_h: float | None  # running hours per failure, all runs together
    lost_work_h_per_week: float
    excluded_nodes: float
    rules: dict[str, int]

    def as_json(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def summarise(results: Sequence[RunResult]) -> Summary:
    first = results[0]
    weeks = first.horizon_s / (WEEK_H * 3600.0)
    ettrs = [r.ettr for r in results]
    ci = 1.96 * statistics.stdev(ettrs) / math.sqrt(len(ettrs)) if len(ettrs) > 1 else 0.0
    failures = sum(r.failures for r in results)
    running_h = sum(r.running_s for r in results) / 3600.0
    rules: Counter = Counter()
    for r in results:
        rules.update(r.rules)
    n = len(results)
    return Summary(
        strategy=first.strategy,
        gpus=first.gpus,
        runs=n,
        ettr=statistics.fmean(ettrs),
        ettr_ci95=ci,
        gpu_hours_lost_per_week=statistics.fmean(r.gpu_hours_lost_per_week for r in results),
        failures_per_week=failures / n / weeks,
        bad_node_repeats_per_week=sum(r.bad_node_repeats for r in results) / n / weeks,
        stops_per_week=sum(r.stops for r in results) / n / weeks,
        mttf_h=running_h / failures if failures else None,
        lost_work_h_per_week=sum(r.lost_work_s for r in results) / 3600.0 / n / weeks,
        excluded_nodes=sum(r.excluded_nodes for r in results) / n,
        rules=dict(sorted(rules.items())),
    )


def simulate(
    cfg: SimConfig,
    *,
    sizes: Sequence[int] = DEFAULT_SIZES,
    runs: int = 20,
    seed: int = 0,
    strategies: Sequence[str] = STRATEGIES,
    min_failures: int = 0,
) -> dict[int, dict[str, Summary]]:
    """Every strategy at every job size, seeded runs; run i of a size has the same seed for every strategy.

    Each size gets `runs` runs, or more where the calibration expects fewer than `min_failures`
    failures over them all (a small job fails about once a year: a week tells nothing), at most
    MAX_RUNS_PER_SIZE.
    """
    if runs < 1:
        raise SimulationError(f"--runs must be at least 1, not {runs}")
    if not sizes:
        raise SimulationError("--sizes needs at least one job size")
    out: dict[int, dict[str, Summary]] = {}
    for gpus in sizes:
        sized = with_changes(cfg, gpus=gpus, forced_bad_nodes=min(cfg.forced_bad_nodes, max(1, math.ceil(gpus / cfg.gpus_per_node))))
        n = runs_for(sized, runs=runs, min_failures=min_failures)
        out[gpus] = {
            s: summarise([simulate_run(sized, s, seed=f"{seed}/{gpus}/{i}") for i in range(n)]) for s in strategies
        }
    return out


MAX_RUNS_PER_SIZE = 5000


def runs_for(cfg: SimConfig, *, runs: int, min_failures: int) -> int:
    """`runs`, raised until the expected failures over all runs reach `min_failures` (at most MAX_RUNS_PER_SIZE)."""
    mttf_h = expected_mttf_h(cfg)
    if not min_failures or mttf_h is None:
        return runs
    per_run = cfg.days * 24.0 / mttf_h
    return max(runs, min(MAX_RUNS_PER_SIZE, math.ceil(min_failures / per_run)))


def with_changes(cfg: SimConfig, **changes: Any) -> SimConfig:
    """A copy of `cfg` with some fields changed (validated again)."""
    values = {f.name: getattr(cfg, f.name) for f in fields(cfg)}
    values.update(changes)
    return SimConfig(**values)


def expected_mttf_h(cfg: SimConfig) -> float | None:
    """The background MTTF the calibration implies for the job (bad nodes left out): 1 / (rate x nodes)."""
    if cfg.failures_per_1000_node_days <= 0:
        return None
    return 1000.0 / (cfg.failures_per_1000_node_days * cfg.nodes) * 24.0
