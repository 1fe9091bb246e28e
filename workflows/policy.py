"""The decision policy: verdict + job + job history + policy config -> advice.

Pure and deterministic, because it runs inside the per-job recovery workflow:
no clocks (`now` is passed in), no randomness, no I/O, and only the standard
library, pydantic and `workflows.contracts` / `workflows.history` imported
(the workflow sandbox re-imports this module). Host lists in the advice are
sorted, so the output does not depend on the order evidence arrived in.

`history.current` is the attempt that just failed; `history.attempts` are the
attempts closed before it. The workflow records the outcome only after this
function has decided (`JobHistory.record_outcome`).

Precedence: the rules below are tried in this order and the first that applies
gives the advice (`_RULES` is the same sequence). Each line is `rule id: when
-> action`.

Gates, whatever the category:
 1. do_not_restart_exit_code: the job exited with config.do_not_restart_exit_code
    (93, NVRx "do not restart") -> STOP. The job's own word beats everything.
 2. nothing_wrong: category none -> NOTHING.
 3. preempted_leave_to_slurm: category preempted -> LEAVE_TO_SLURM (the
    scheduler's business; spends no budget).
 4. systemic_hold: the cluster's systemic guard found this failure part of a
    systemic event, a cause several jobs share (`workflows.systemic` is the
    spec) -> HOLD, so that an outage does not burn every job's retries; the
    guard releases the hold when the cause clears. (Histories from before the
    guard pass `systemic` instead: a shared-infrastructure category while at
    least config.systemic_jobs distinct jobs failed on shared infrastructure
    within config.systemic_window_s.)
 5. attempt_budget: this failure is the max_attempts-th within
    config.attempts_window_s -> STOP. max_attempts is `max_attempts_override`,
    else the job's opt-in `max_attempts`, else config.max_attempts. Where the
    job's checkpoints are tracked, an attempt that saved a new checkpoint
    earned its restart and is not counted (`progress_earns_retries`; a budget
    of 1 still means never restart): a large
    job that fails every few hours on a different node, and makes progress
    in between, is restarted as long as restarts help; loops that do not help
    are stopped by the rules that see them (no checkpoint progress, the same
    error, repeated OOM or data I/O, unattributed NCCL failures).
 6. no_checkpoint_progress: the job is known to checkpoint (a checkpoint was
    seen, or its opt-in names a checkpoint dir) and the last
    config.no_checkpoint_attempts attempts, this one included, saved no new
    checkpoint -> STOP. A job whose checkpoints we cannot see is bounded by
    the attempt budget instead.
Category rules (categories are disjoint, so these never overlap):
 7. hardware_exclude / hardware_restart: gpu_hardware, interconnect,
    node_failure -> RESTART_EXCLUDE of the implicated hosts (RESTART_DRAIN of
    the same hosts when config.drain_nodes); no host implicated -> RESTART.
 8. time_limit_checkpoint / time_limit_no_checkpoint: time_limit -> RESTART if
    the attempt saved a new checkpoint, else STOP.
 9. oom_repeat / oom_restart: gpu_oom or host_oom -> STOP once OOMs (both kinds
    together, this one included) reach config.oom_stop_after, else RESTART.
10. data_io_repeat / data_io_restart: data_io -> STOP if an earlier attempt
    ended in data_io, else RESTART.
Deterministic repeats (app_error, cuda_error, nccl_*, hang):
11. same_app_error_twice: the verdict's deterministic signature, this one
    included, was seen config.same_error_stop_after times -> STOP.
12. app_error_repeat_unsigned: app_error without a signature right after an
    attempt that ended the same way -> STOP (nothing tells them apart).
Restarts:
13. nccl_exclude: nccl_timeout / nccl_error naming hosts -> RESTART_EXCLUDE.
14. transient_limit / transient_nccl_restart: nccl_timeout / nccl_error naming
    no host -> STOP once config.transient_restart_limit unattributed NCCL
    failures came before, else RESTART.
15. hang_exclude / hang_restart: hang -> RESTART_EXCLUDE of the implicated
    hosts, or RESTART when none.
16. cuda_error_exclude / cuda_error_restart: likewise for cuda_error.
17. app_error_restart: app_error (first of its kind) -> RESTART.
18. unknown_cause_restart: anything else -> RESTART, excluding nothing.

Exclusion lists of the rules only ever hold hosts the current verdict
implicates; STOP, HOLD, NOTHING and LEAVE_TO_SLURM never carry exclude or
drain lists, except the ones below.

Node limits, applied to a restart when the guard gave them (`nodes`):
- `+dead_node`: nodes that died under the job in an earlier attempt
  (`history.dead_nodes`) are excluded again: a node death is tracked across
  attempts, whoever requeued the job.
- `+lemon`: the guard's lemon nodes (implicated in failures of several jobs)
  are excluded too; drained as well when config.lemon_drain and the guard
  allowed the drain within its caps.
- `+placement`: never so many that the job no longer fits: a node is added
  only while the job's partition keeps at least the job's node count usable
  (not excluded, not down or drained). This failure's own hosts come first,
  then dead nodes, then lemons; a node left out is named in the reason.
- `+readmit`: before leaving out this failure's own host for placement, the
  oldest node jobmedic excluded after an earlier failure that is healthy now
  (not down or drained, not dead under the job, not a lemon) is given back
  (`readmit_nodes`): the node that just failed is the one kept out, and
  exclusions do not pile up for the job's whole life.

Scheduler constraints, applied to the advice of the rules (the rule id gets a
suffix, the reason says why):
- `+slurm_requeued`: Slurm already requeued the job itself (`slurm_requeued`)
  and the advice was a restart or nothing -> LEAVE_TO_SLURM, never a second
  requeue; the exclusion list is kept (the workflow applies it while the job
  is pending).
- `+requeue_not_allowed`: a restart for a job submitted with `--no-requeue`
  (Slurm refuses to requeue it) -> STOP, advising a resubmission that
  excludes the implicated hosts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from pydantic import Field

from workflows.contracts import Advice, AdviceAction, Category, Contract, JobInfo, PolicyConfig, Verdict
from workflows.history import JobHistory, as_utc
from workflows.systemic import SHARED_INFRA_CATEGORIES


class Rule(StrEnum):
    """Stable ids of the policy's rules, recorded with every advice."""

    DO_NOT_RESTART_EXIT_CODE = "do_not_restart_exit_code"
    NOTHING_WRONG = "nothing_wrong"
    PREEMPTED_LEAVE_TO_SLURM = "preempted_leave_to_slurm"
    SYSTEMIC_HOLD = "systemic_hold"
    ATTEMPT_BUDGET = "attempt_budget"
    NO_CHECKPOINT_PROGRESS = "no_checkpoint_progress"
    HARDWARE_EXCLUDE = "hardware_exclude"
    HARDWARE_RESTART = "hardware_restart"
    TIME_LIMIT_CHECKPOINT = "time_limit_checkpoint"
    TIME_LIMIT_NO_CHECKPOINT = "time_limit_no_checkpoint"
    OOM_REPEAT = "oom_repeat"
    OOM_RESTART = "oom_restart"
    DATA_IO_REPEAT = "data_io_repeat"
    DATA_IO_RESTART = "data_io_restart"
    SAME_APP_ERROR_TWICE = "same_app_error_twice"
    APP_ERROR_REPEAT_UNSIGNED = "app_error_repeat_unsigned"
    NCCL_EXCLUDE = "nccl_exclude"
    TRANSIENT_LIMIT = "transient_limit"
    TRANSIENT_NCCL_RESTART = "transient_nccl_restart"
    HANG_EXCLUDE = "hang_exclude"
    HANG_RESTART = "hang_restart"
    CUDA_ERROR_EXCLUDE = "cuda_error_exclude"
    CUDA_ERROR_RESTART = "cuda_error_restart"
    APP_ERROR_RESTART = "app_error_restart"
    UNKNOWN_CAUSE_RESTART = "unknown_cause_restart"


HARDWARE_CATEGORIES = frozenset({Category.GPU_HARDWARE, Category.INTERCONNECT, Category.NODE_FAILURE})
NCCL_CATEGORIES = frozenset({Category.NCCL_TIMEOUT, Category.NCCL_ERROR})
OOM_CATEGORIES = frozenset({Category.GPU_OOM, Category.HOST_OOM})
_RESTARTS = frozenset({AdviceAction.RESTART, AdviceAction.RESTART_EXCLUDE, AdviceAction.RESTART_DRAIN})


class SystemicHold(Contract):
    """The systemic guard's finding: this failure is part of systemic event `event_id`."""

    event_id: str
    reason: str = ""


class NodeLimits(Contract):
    """What the guard tells about nodes for a restart: lemons, and what the job's partition can spare."""

    lemons: list[str] = Field(default_factory=list)  # most suspicious first
    drain: list[str] = Field(default_factory=list)  # lemons the guard allows to drain
    partition_nodes: list[str] = Field(default_factory=list)  # empty: unknown, no placement check
    unavailable: list[str] = Field(default_factory=list)  # down or drained now


class SystemicView(Contract):
    """Shared-infrastructure failures across the cluster within the systemic window (before the guard)."""

    window_s: float = 0.0
    job_ids: list[str] = Field(default_factory=list)  # distinct, sorted
    hosts: list[str] = Field(default_factory=list)  # distinct, sorted
    categories: list[Category] = Field(default_factory=list)  # distinct, sorted


def systemic_view(
    recent_failures: Iterable[tuple[str, datetime, str, Sequence[str]]],
    *,
    now: datetime,
    config: PolicyConfig,
) -> SystemicView:
    """Summarise recent failures of the cluster's jobs for the systemic rule.

    Args:
        recent_failures: `(job_id, failed_at, category, hosts)` per failure
            on the cluster; several failures of one job count once. Categories
            outside SHARED_INFRA_CATEGORIES, unknown names included, are left out.
        now: the workflow's current time.
        config: supplies `systemic_window_s`.
    """
    jobs: set[str] = set()
    hosts: set[str] = set()
    categories: set[Category] = set()
    for job_id, failed_at, category, failed_hosts in recent_failures:
        if category not in SHARED_INFRA_CATEGORIES:
            continue
        if (as_utc(now) - as_utc(failed_at)).total_seconds() > config.systemic_window_s:
            continue
        jobs.add(job_id)
        hosts.update(h for h in failed_hosts if h)
        categories.add(Category(category))
    return SystemicView(
        window_s=config.systemic_window_s,
        job_ids=sorted(jobs),
        hosts=sorted(hosts),
        categories=sorted(categories),
    )


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class _Facts:
    """Everything the rules look at, derived once per decision."""

    verdict: Verdict
    job: JobInfo
    history: JobHistory
    config: PolicyConfig
    systemic: SystemicView | None
    systemic_hold: SystemicHold | None
    hosts: tuple[str, ...]  # implicated by this verdict, distinct and sorted
    max_attempts: int
    attempts_in_window: int  # this one included
    budget_counts_progress: bool  # attempts_in_window leaves out the attempts that saved a new checkpoint
    checkpoints_tracked: bool
    new_checkpoint: bool  # the failed attempt saved one
    attempts_without_checkpoint: int  # latest in a row, this one included

    @property
    def category(self) -> Category:
        return self.verdict.category


def _facts(
    verdict: Verdict,
    job: JobInfo,
    history: JobHistory,
    config: PolicyConfig,
    *,
    now: datetime,
    systemic: SystemicView | None,
    systemic_hold: SystemicHold | None,
    max_attempts_override: int | None,
    progress_earns_retries: bool,
) -> _Facts:
    opt_in = job.opt_in.opt_in
    if max_attempts_override is not None:
        max_attempts = max_attempts_override
    elif opt_in is not None and opt_in.max_attempts is not None:
        max_attempts = opt_in.max_attempts
    else:
        max_attempts = config.max_attempts
    new_checkpoint = history.current_made_checkpoint
    tracked = history.last_checkpoint_iteration is not None or (opt_in is not None and bool(opt_in.checkpoint_dir))
    window_s = config.attempts_window_s
    counts_progress = progress_earns_retries and tracked and max_attempts > 1  # a budget of one: never restart
    if counts_progress:
        spent = history.recent_unproductive_attempts(now=now, window_s=window_s) + (0 if new_checkpoint else 1)
    else:
        spent = history.recent_attempts(now=now, window_s=window_s) + 1
    return _Facts(
        verdict=verdict,
        job=job,
        history=history,
        config=config,
        systemic=systemic,
        systemic_hold=systemic_hold,
        hosts=tuple(sorted({h for h in verdict.implicated.hosts if h})),
        max_attempts=max_attempts,
        attempts_in_window=spent,
        budget_counts_progress=counts_progress,
        checkpoints_tracked=tracked,
        new_checkpoint=new_checkpoint,
        attempts_without_checkpoint=history.attempts_without_checkpoint() + (0 if new_checkpoint else 1),
    )


# --------------------------------------------------------------------------- advice builders


def _advice(action: AdviceAction, rule: Rule, reason: str) -> Advice:
    return Advice(action=action, rule=rule.value, reason=reason)


def _isolate(f: _Facts, rule: Rule, what: str, *, drain: bool = False) -> Advice:
    """Restart without (and, with `drain`, draining) exactly the implicated hosts."""
    hosts = list(f.hosts)
    them = "it" if len(hosts) == 1 else "them"
    how = f"draining {them} and restarting without {them}" if drain else f"restarting without {them}"
    return Advice(
        action=AdviceAction.RESTART_DRAIN if drain else AdviceAction.RESTART_EXCLUDE,
        rule=rule.value,
        reason=f"{what} on {', '.join(hosts)}; {how}",
        exclude_nodes=hosts,
        drain_nodes=hosts if drain else [],
    )


def _isolate_or_restart(f: _Facts, isolate: Rule, restart: Rule, what: str, *, drain: bool = False) -> Advice:
    """Isolate the implicated hosts under rule `isolate`, or restart as is under `restart` when none."""
    if f.hosts:
        return _isolate(f, isolate, what, drain=drain)
    return _advice(AdviceAction.RESTART, restart, f"{what} without an implicated host; restarting as is")


# --------------------------------------------------------------------------- rules, in precedence order

_Outcome = Advice | None


def _do_not_restart_exit_code(f: _Facts) -> _Outcome:
    code = f.config.do_not_restart_exit_code
    if f.job.exit_code != code:
        return None
    return _advice(
        AdviceAction.STOP,
        Rule.DO_NOT_RESTART_EXIT_CODE,
        f"the job exited with code {code}, its own request not to be restarted",
    )


def _nothing_wrong(f: _Facts) -> _Outcome:
    if f.category != Category.NONE:
        return None
    return _advice(AdviceAction.NOTHING, Rule.NOTHING_WRONG, "no failure found")


def _preempted(f: _Facts) -> _Outcome:
    if f.category != Category.PREEMPTED:
        return None
    return _advice(
        AdviceAction.LEAVE_TO_SLURM,
        Rule.PREEMPTED_LEAVE_TO_SLURM,
        "preempted by the scheduler, which requeues or ends the job by its own policy",
    )


def _systemic_hold(f: _Facts) -> _Outcome:
    if f.systemic_hold is not None:
        return _advice(
            AdviceAction.HOLD,
            Rule.SYSTEMIC_HOLD,
            f"part of systemic event {f.systemic_hold.event_id}: {f.systemic_hold.reason}; holding instead of "
            "spending retries until the cause clears",
        )
    if f.systemic is None or f.category not in SHARED_INFRA_CATEGORIES:
        return None
    jobs = sorted({*f.systemic.job_ids, f.job.job_id})
    if len(jobs) < f.config.systemic_jobs:
        return None
    hosts = ", ".join(sorted(set(f.systemic.hosts))) or "no common host named"
    return _advice(
        AdviceAction.HOLD,
        Rule.SYSTEMIC_HOLD,
        f"{len(jobs)} jobs failed on shared infrastructure within {f.config.systemic_window_s:g} s "
        f"(hosts: {hosts}); holding instead of spending retries, an operator should look",
    )


def _attempt_budget(f: _Facts) -> _Outcome:
    if f.attempts_in_window < f.max_attempts:
        return None
    counted = "attempts without a new checkpoint" if f.budget_counts_progress else "attempts"
    return _advice(
        AdviceAction.STOP,
        Rule.ATTEMPT_BUDGET,
        f"attempt {f.attempts_in_window} within {f.config.attempts_window_s:g} s failed; "
        f"the budget is {f.max_attempts} {counted}",
    )


def _no_checkpoint_progress(f: _Facts) -> _Outcome:
    needed = f.config.no_checkpoint_attempts
    if not f.checkpoints_tracked or f.attempts_without_checkpoint < needed:
        return None
    return _advice(
        AdviceAction.STOP,
        Rule.NO_CHECKPOINT_PROGRESS,
        f"{f.attempts_without_checkpoint} attempts in a row saved no new checkpoint "
        f"(limit {needed}); more retries would not make progress",
    )


def _hardware(f: _Facts) -> _Outcome:
    if f.category not in HARDWARE_CATEGORIES:
        return None
    return _isolate_or_restart(
        f, Rule.HARDWARE_EXCLUDE, Rule.HARDWARE_RESTART, f"{f.category} fault", drain=f.config.drain_nodes
    )


def _time_limit(f: _Facts) -> _Outcome:
    if f.category != Category.TIME_LIMIT:
        return None
    if f.new_checkpoint:
        return _advice(
            AdviceAction.RESTART,
            Rule.TIME_LIMIT_CHECKPOINT,
            f"time limit reached after saving checkpoint {f.history.last_checkpoint_iteration}; resuming from it",
        )
    return _advice(
        AdviceAction.STOP,
        Rule.TIME_LIMIT_NO_CHECKPOINT,
        "time limit reached without a new checkpoint; a restart would repeat the same work",
    )


def _oom(f: _Facts) -> _Outcome:
    if f.category not in OOM_CATEGORIES:
        return None
    seen = f.history.category_count(*OOM_CATEGORIES) + 1
    if seen >= f.config.oom_stop_after:
        return _advice(
            AdviceAction.STOP,
            Rule.OOM_REPEAT,
            f"out of memory ({f.category}) for the {_ordinal(seen)} time; the job needs a smaller footprint",
        )
    return _advice(AdviceAction.RESTART, Rule.OOM_RESTART, f"out of memory ({f.category}) once; restarting")


def _data_io(f: _Facts) -> _Outcome:
    if f.category != Category.DATA_IO:
        return None
    if f.history.category_count(Category.DATA_IO):
        return _advice(AdviceAction.STOP, Rule.DATA_IO_REPEAT, "data I/O failed again after a restart")
    return _advice(AdviceAction.RESTART, Rule.DATA_IO_RESTART, "data I/O failed; restarting once")


def _same_error(f: _Facts) -> _Outcome:
    signature = f.verdict.deterministic_signature
    if signature is None:
        return None
    seen = f.history.signature_count(signature) + 1
    if seen < f.config.same_error_stop_after:
        return None
    return _advice(
        AdviceAction.STOP,
        Rule.SAME_APP_ERROR_TWICE,
        f"the same deterministic error ({signature}) for the {_ordinal(seen)} time; a restart would fail again",
    )


def _app_error_unsigned(f: _Facts) -> _Outcome:
    previous = f.history.previous
    if (
        f.category != Category.APP_ERROR
        or f.verdict.deterministic_signature is not None
        or previous is None
        or previous.category != Category.APP_ERROR
        or previous.signature is not None
    ):
        return None
    return _advice(
        AdviceAction.STOP,
        Rule.APP_ERROR_REPEAT_UNSIGNED,
        "an application error ended two attempts in a row and nothing shows they differ",
    )


def _nccl_attributed(f: _Facts) -> _Outcome:
    if f.category not in NCCL_CATEGORIES or not f.hosts:
        return None
    return _isolate(f, Rule.NCCL_EXCLUDE, str(f.category))


def _nccl_transient(f: _Facts) -> _Outcome:
    if f.category not in NCCL_CATEGORIES:
        return None
    before = f.history.category_count(*NCCL_CATEGORIES, unattributed_only=True)
    limit = f.config.transient_restart_limit
    if before >= limit:
        return _advice(
            AdviceAction.STOP,
            Rule.TRANSIENT_LIMIT,
            f"{before + 1} NCCL failures without an implicated host (limit {limit} restarts)",
        )
    return _advice(
        AdviceAction.RESTART,
        Rule.TRANSIENT_NCCL_RESTART,
        f"{f.category} without an implicated host, taken as transient ({before + 1} of {limit} restarts)",
    )


def _hang(f: _Facts) -> _Outcome:
    if f.category != Category.HANG:
        return None
    return _isolate_or_restart(f, Rule.HANG_EXCLUDE, Rule.HANG_RESTART, "training hung")


def _cuda_error(f: _Facts) -> _Outcome:
    if f.category != Category.CUDA_ERROR:
        return None
    return _isolate_or_restart(f, Rule.CUDA_ERROR_EXCLUDE, Rule.CUDA_ERROR_RESTART, "CUDA error")


def _app_error(f: _Facts) -> _Outcome:
    if f.category != Category.APP_ERROR:
        return None
    return _advice(
        AdviceAction.RESTART, Rule.APP_ERROR_RESTART, "application error, first of its kind; restarting once"
    )


def _unknown_cause(f: _Facts) -> _Outcome:
    return _advice(
        AdviceAction.RESTART,
        Rule.UNKNOWN_CAUSE_RESTART,
        f"no specific rule for {f.category}; restarting without excluding any node",
    )


_RULES: tuple[Callable[[_Facts], _Outcome], ...] = (
    _do_not_restart_exit_code,
    _nothing_wrong,
    _preempted,
    _systemic_hold,
    _attempt_budget,
    _no_checkpoint_progress,
    _hardware,
    _time_limit,
    _oom,
    _data_io,
    _same_error,
    _app_error_unsigned,
    _nccl_attributed,
    _nccl_transient,
    _hang,
    _cuda_error,
    _app_error,
    _unknown_cause,
)


def decide(
    verdict: Verdict,
    job: JobInfo,
    history: JobHistory,
    config: PolicyConfig,
    *,
    now: datetime,
    systemic: SystemicView | None = None,
    systemic_hold: SystemicHold | None = None,
    nodes: NodeLimits | None = None,
    max_attempts_override: int | None = None,
    slurm_requeued: bool = False,
    progress_earns_retries: bool = True,
    readmit_oldest: bool = True,
) -> Advice:
    """Advise what to do about the failure `verdict` describes, by the first rule that applies.

    Args:
        verdict: attribution of the incident that ended `history.current`.
        job: the job as the scheduler shows it now (exit code, opt-in).
        history: the job's history before this incident is recorded.
        config: the cluster's policy knobs.
        now: workflow time, for the attempt window.
        systemic: recent shared-infrastructure failures across the cluster,
            as histories from before the systemic guard counted them.
        systemic_hold: the guard found this failure part of a systemic event.
        nodes: lemons and the job's partition, from the guard; None: no node
            limits (no dead-node, lemon or placement handling).
        max_attempts_override: an attempt budget that beats the job's opt-in
            and the config (the recovery workflow passes none: the opt-in
            reaches the policy only in `job`; histories from before its
            `opt-in-from-job` patch passed the start-time opt-in's budget).
        slurm_requeued: Slurm requeued the job itself after this failure.
        progress_earns_retries: the attempt budget counts only attempts that saved
            no new checkpoint, where checkpoints are tracked (histories from before
            the workflow's `progress-earns-retries` patch pass False: every attempt).
        readmit_oldest: node limits may give back jobmedic's oldest exclusion to keep this
            failure's node out of a partition that cannot spare both (histories from before
            the `readmit-oldest` patch pass False).

    Returns:
        The advice, with the rule that fired and a reason an operator can read.
    """
    facts = _facts(
        verdict, job, history, config, now=now, systemic=systemic, systemic_hold=systemic_hold,
        max_attempts_override=max_attempts_override, progress_earns_retries=progress_earns_retries,
    )
    for rule in _RULES:
        advice = rule(facts)
        if advice is not None:
            if nodes is not None and advice.action in _RESTARTS:
                advice = node_limits(advice, job, history, nodes, config, readmit_oldest=readmit_oldest)
            return _scheduler_constraints(advice, job, slurm_requeued=slurm_requeued)
    raise AssertionError("unreachable: the last rule always advises")


def node_limits(
    advice: Advice, job: JobInfo, history: JobHistory, limits: NodeLimits, config: PolicyConfig,
    *, readmit_oldest: bool = True,
) -> Advice:
    """A restart's exclusions with dead nodes and lemons added, within what the partition can spare.

    `readmit_oldest`: when this failure's own host does not fit, jobmedic's oldest earlier exclusion
    that is healthy now (not down or drained, not dead under the job, not a lemon) is given back to
    make room, so the node that just failed is the one kept out.
    """
    already = set(job.excluded_nodes) | set(history.excluded_nodes)
    partition = set(limits.partition_nodes)
    usable = partition - already - set(limits.unavailable)
    need = max(1, job.num_nodes or 1)
    kept: list[str] = []
    added: dict[str, list[str]] = {"dead_node": [], "lemon": []}
    dropped: list[str] = []
    readmit: list[str] = []
    keep_out = set(limits.unavailable) | set(limits.lemons) | set(history.dead_nodes) | set(advice.exclude_nodes)
    spares = [h for h in history.exclusion_order() if h in partition and h not in keep_out] if readmit_oldest else []
    wanted: list[tuple[str, str | None]] = [(h, None) for h in advice.exclude_nodes]
    wanted += [(h, "dead_node") for h in history.dead_nodes]
    wanted += [(h, "lemon") for h in limits.lemons]
    for host, why in wanted:
        if host in kept:
            continue
        if host in already:
            kept.append(host)  # excluded already: it costs the placement nothing more
            continue
        if partition and host in usable and len(usable) - 1 < need:
            if why is not None or not spares:
                dropped.append(host)
                continue
            back = spares.pop(0)  # the oldest of jobmedic's own exclusions makes room for this failure's host
            readmit.append(back)
            usable.add(back)
        usable.discard(host)
        kept.append(host)
        if why is not None:
            added[why].append(host)
    if not any(added.values()) and not dropped and not readmit:
        return advice
    rule, reason = advice.rule, advice.reason
    if readmit:
        rule += "+readmit"
        reason += (
            f"; letting {', '.join(readmit)} back in (excluded by jobmedic after an earlier failure, healthy now): "
            f"the job needs {need} node(s) and its partition cannot spare them and this failure's node"
        )
    for why, hosts in added.items():
        if hosts:
            rule += f"+{why}"
            what = "died under the job before" if why == "dead_node" else "a lemon node (several jobs failed on it)"
            reason += f"; also without {', '.join(sorted(hosts))}: {what}"
    if dropped:
        rule += "+placement"
        reason += (
            f"; not excluding {', '.join(sorted(dropped))}: the job needs {need} node(s) and its partition would "
            "have too few left"
        )
    exclude = sorted(set(kept))
    drain = set(advice.drain_nodes)
    if config.lemon_drain:
        drain |= {h for h in added["lemon"] if h in limits.drain}
    drain &= set(exclude)
    if drain:
        action = AdviceAction.RESTART_DRAIN
    else:
        action = AdviceAction.RESTART_EXCLUDE if exclude else AdviceAction.RESTART
    return Advice(
        action=action, rule=rule, reason=reason, exclude_nodes=exclude, drain_nodes=sorted(drain), readmit_nodes=readmit,
    )


def _scheduler_constraints(advice: Advice, job: JobInfo, *, slurm_requeued: bool) -> Advice:
    """What Slurm has done or will refuse overrides a restart (see the module docstring)."""
    restart = advice.action in _RESTARTS
    if slurm_requeued and (restart or advice.action is AdviceAction.NOTHING):
        return advice.model_copy(
            update={
                "action": AdviceAction.LEAVE_TO_SLURM,
                "rule": f"{advice.rule}+slurm_requeued",
                "reason": f"Slurm requeued the job itself; {advice.reason}",
            }
        )
    if restart and job.requeue_allowed is False:
        nodes = ", ".join(advice.exclude_nodes)
        return Advice(
            action=AdviceAction.STOP,
            rule=f"{advice.rule}+requeue_not_allowed",
            reason=(
                f"{advice.reason}; but the job was submitted with --no-requeue, so Slurm will not requeue it: "
                "resubmit it" + (f" with --exclude={nodes}" if nodes else "")
            ),
        )
    return advice


def is_restart(action: AdviceAction) -> bool:
    """True for the advice actions that release the job for another attempt."""
    return action in _RESTARTS


def _ordinal(n: int) -> str:
    if 10 <= n % 100 <= 20:
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
