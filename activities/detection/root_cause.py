"""The root cause an operator would act on, chosen from a job's signals (the ordered steps of `verdict`).

Pure code. `choose_root_cause` walks the steps of the `activities.detection.verdict` docstring in
order; NCCL timeouts and hangs name their suspects here (the ranks that did not report, or are
behind, or whose stack dump is elsewhere), since only the choice knows who the victims are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from activities.detection.signals import EXCEPTION_PATTERNS, Signal, SignalBuilder
from activities.detection.stall import bar_stall, gpu_snapshot, gpu_stall
from workflows.contracts import Category, FaultDomain, JobEvidence, JobInfo, JobState

_SOFTWARE = (Category.CUDA_ERROR, Category.DATA_IO, Category.INTERCONNECT, Category.APP_ERROR, Category.NCCL_ERROR)
_SOFTWARE_TIE = {c: i for i, c in enumerate(_SOFTWARE)}
_CONDEMN_ORDER = (Category.GPU_HARDWARE, Category.INTERCONNECT, Category.NODE_FAILURE)
_SYMPTOM_ORDER = (
    Category.HOST_OOM, Category.NODE_FAILURE, Category.PREEMPTED, Category.GPU_OOM, Category.DATA_IO,
    Category.CUDA_ERROR, Category.APP_ERROR, Category.INTERCONNECT, Category.NCCL_ERROR, Category.NCCL_TIMEOUT,
    Category.GPU_HARDWARE, Category.HANG, Category.TIME_LIMIT,
)


@dataclass
class Choice:
    category: Category
    signals: list[Signal]
    base: float
    why: str = ""
    hosts: list[str] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    victims: list[Signal] = field(default_factory=list)


def choose_root_cause(b: SignalBuilder, evidence: JobEvidence) -> Choice:
    sigs = b.signals
    strong = [s for s in sigs if s.strong and s.role in ("cause", "scheduler")]
    job = evidence.job
    job_failed = job is not None and (job.state.failed or (job.exit_code or 0) != 0)
    job_fine = job is not None and not job_failed and job.state in (JobState.COMPLETED, JobState.RUNNING)
    if job is not None and job.state == JobState.COMPLETED and not job_failed:
        return Choice(Category.NONE, [], 0.0)  # Slurm says it finished cleanly: whatever it printed was survived
    if job is None and b.finished_ok and not _failure_after(b, max(b.finished_ok)):
        # the log alone, ending in the run's own word that it finished well (the same as Slurm's COMPLETED)
        return Choice(Category.NONE, [], 0.0)
    ending = None if job_fine else b.ending_exception()
    killed = None if job_fine else b.fatal_signal()
    # the log itself says a process died: its output ends in an exception, a signal, a launcher's failure report
    log_failed = ending is not None or killed is not None or any(
        s.pattern_id in DEATH_REPORTS or (s.pattern_id == "elastic_failure_field") for s in sigs)
    job_failed = job_failed or (job is None and log_failed) or bool(b.elastic and not job_fine)

    # 1. condemning hardware/node evidence
    condemning = [s for s in strong if s.condemns]
    reclaimed = _reclaimed(strong, condemning)
    if reclaimed:
        return Choice(Category.PREEMPTED, reclaimed, 0.85, why=(
            "the cloud's preemption notice came from the node the scheduler then lost: a reclaimed VM, not a "
            "broken node"))
    unkillable = [s for s in condemning if s.pattern_id in _UNKILLABLE]
    if unkillable and len(unkillable) == len(condemning):
        # processes that would not die after the OOM killer went through the step: they were stuck reclaiming
        # memory, the memory ran out first (Slurm drains the node for 'Kill task failed' either way)
        stuck_at = min(s.line_no or 0 for s in unkillable)
        oom = [s for s in strong if s.category == Category.HOST_OOM and s.source == "log"
               and (s.line_no or 0) < stuck_at]
        if oom:
            return Choice(Category.HOST_OOM, oom, 0.75, why=(
                "the step's tasks were OOM-killed before Slurm found processes that would not end: memory ran "
                "out first"))
    if condemning:
        for cat in _CONDEMN_ORDER + tuple(Category):
            chosen = [s for s in condemning if s.category == cat]
            if chosen:
                return Choice(cat, chosen, 0.9)

    sched = {c: [s for s in strong if s.role == "scheduler" and s.category == c] for c in Category}
    node_auth = sched[Category.NODE_FAILURE]
    preempt_auth = sched[Category.PREEMPTED]
    # 2. the scheduler's reason beats the words around it
    if preempt_auth and node_auth:
        nodefail_state = job is not None and job.state == JobState.NODE_FAIL
        node_lines = [s for s in node_auth if s.source in ("log", "node")]
        if nodefail_state or node_lines:
            return Choice(Category.NODE_FAILURE, node_auth, 0.85,
                           why="the scheduler gives a node failure as the reason; the preemption wording is its side effect")
        return Choice(Category.PREEMPTED, preempt_auth, 0.85)
    if preempt_auth:
        words = [s for s in sigs if s.category == Category.NODE_FAILURE and s.role == "symptom"]
        why = "the scheduler's reason is preemption; the 'node died' messages are how the ranks saw it" if words else ""
        return Choice(Category.PREEMPTED, preempt_auth, 0.9, why=why)
    if node_auth:
        return Choice(Category.NODE_FAILURE, node_auth, 0.85)

    # signals after the scheduler ended the job are fallout of it
    cutoff = min((s.line_no for s in sched[Category.TIME_LIMIT] if s.line_no is not None), default=None)
    timeout_state_only = bool(sched[Category.TIME_LIMIT]) and cutoff is None

    def before_cutoff(s: Signal) -> bool:
        return cutoff is None or s.line_no is None or s.line_no < cutoff

    causes = [s for s in strong if s.role == "cause" and before_cutoff(s)]
    if timeout_state_only:
        # a job that ran out of time prints kill noise; only resource and device failures outrank it
        causes = [s for s in causes if s.category in (
            Category.GPU_HARDWARE, Category.HOST_OOM, Category.GPU_OOM, Category.CUDA_ERROR, Category.DATA_IO)]

    # 3. memory
    for cat, base in ((Category.HOST_OOM, 0.85), (Category.GPU_OOM, 0.9)):
        chosen = [s for s in causes if s.category == cat]
        if chosen:
            return Choice(cat, chosen, base)

    # a node the framework saw die (Ray, MPI daemons, SSH sessions): its peers' errors are fallout
    node_deaths = [s for s in causes if s.category == Category.NODE_FAILURE]
    if node_deaths:
        return Choice(Category.NODE_FAILURE, node_deaths, 0.8)

    # non-condemning hardware (contained ECC) is still the reason the process died
    hw = [s for s in causes if s.category == Category.GPU_HARDWARE]
    if hw:
        return Choice(Category.GPU_HARDWARE, hw, 0.75)

    # 4. software causes: the earliest wins, but a generic exception followed closely by a specific
    #    error from the same process is that error's traceback (the last exception is what matters)
    software = [s for s in causes if s.category in _SOFTWARE]
    software = [s for s in software if not _superseded(s, software)]
    timed_out_at = min((s.line_no for s in causes if s.category == Category.NCCL_TIMEOUT and s.line_no is not None),
                       default=None)
    if timed_out_at is not None:
        # an abort after a collective timed out is the watchdog taking the process down, not a crash of its own
        software = [s for s in software if not (s.pattern_id == "fatal_python_error" and "Aborted" in s.line
                                                and (s.line_no or 0) > timed_out_at)]
    if software:
        first = min(software, key=lambda s: (s.order, _SOFTWARE_TIE[s.category]))
        crashed = _far_end_crashed(software, first)
        if crashed:
            return Choice(crashed[0].category, crashed, 0.75, why=(
                f"the failed links all lead to {crashed[0].host}, whose own process failed with "
                f"{crashed[0].category.value.replace('_', ' ')}: its peers lost it, the network did not fail"))
        chosen = [s for s in software if s.category == first.category]
        base = 0.85 if first.severity == "fatal" else 0.75
        return Choice(first.category, chosen, base)

    # 5. NCCL timeouts (they say who is waiting on whom), then hangs of the watchdog itself
    timeouts = [s for s in causes if s.category == Category.NCCL_TIMEOUT]
    if timeouts and not (sched[Category.TIME_LIMIT] and evidence.hang_suspected):
        first_timeout = min((s.line_no for s in timeouts if s.line_no is not None), default=-1)
        sigkilled = [s for s in sigs if s.pattern_id == "process_sigkill" and s.source == "log"
                     and s.line_no is not None and s.line_no < first_timeout]
        if sigkilled:
            # a process SIGKILLed (the OOM killer, most often) before the collectives timed out: they waited for it
            return Choice(Category.HOST_OOM, sigkilled, 0.6, why=(
                "a process was SIGKILLed before the others' collectives timed out; they were waiting for it"))
        odd = _transport_odd_one_out(b)
        if odd is not None:
            host, chose = odd
            own = [s for s in timeouts if s.host == host]  # the others' timeouts wait on it: victims
            return Choice(Category.INTERCONNECT, [chose, *own], 0.7, hosts=[host], victims=[
                s for s in timeouts if s.host != host], why=(
                f"{host} fell back to NCCL's {chose.fields.get('net', 'socket').strip()} transport while the "
                "other nodes use their fabric: its HCA is missing or down, and the collectives waited on it"))
        choice = _nccl_timeout_choice(b, timeouts, evidence)
        if job is not None and job.state == JobState.RUNNING and not log_failed:
            # the collective timed out and nothing ended the job (the watchdog did not abort it): it hangs
            choice.category = Category.HANG
            choice.why = "; ".join(w for w in (
                "a collective timed out and the job is still running: no process ended", choice.why) if w)
        return choice
    hang = [s for s in causes if s.category == Category.HANG]
    recovered: set[int] = set()
    if hang and b.progressed_after(max(s.line_no or 0 for s in hang)):
        recovered = {id(s) for s in sigs if s.category == Category.HANG}  # a stall training got over
    elif hang:
        return _hang_choice(b, hang)

    # 6. out of time
    if sched[Category.TIME_LIMIT]:
        if evidence.hang_suspected:
            return Choice(Category.HANG, [hang_fact(evidence), *sched[Category.TIME_LIMIT]], 0.7,
                           why="progress had stopped before the time limit ended the job")
        dumped = _dumped_while_running(b)  # someone looked at the stuck ranks' stacks; then time ran out
        if dumped is not None and all(before_cutoff(s) for s in dumped.signals):
            dumped.why = dumped.why.replace("of the running job", "of the job") + ", until the time limit ended it"
            return dumped
        return Choice(Category.TIME_LIMIT, sched[Category.TIME_LIMIT], 0.9)

    # 7. the output ends in an uncaught exception: what the process died of
    if ending is not None and before_cutoff(ending):
        b.signals.append(ending)
        return Choice(Category.APP_ERROR, [ending], 0.65, why="nothing more specific is in the log")

    # 8. a process that crashed on a signal of its own (SIGSEGV, SIGBUS, SIGILL, SIGFPE)
    if killed is not None and before_cutoff(killed) and killed.text not in _OUTSIDE_SIGNALS:
        b.signals.append(killed)
        return Choice(killed.category, [killed], 0.6, why="only the way the process died is known")

    # 9. symptoms only (and, for a job known to have failed, warnings)
    weak = [s for s in sigs if s.role in ("symptom", "cause") and s.severity in ("fatal", "error")]
    if not job_failed:
        weak = [s for s in weak if not _ambiguous(s)]
    if job_failed:
        weak += [s for s in sigs if s.severity == "warning" and s.category != Category.NONE]
    weak = [s for s in weak if before_cutoff(s) and id(s) not in recovered]
    exited = [s.line_no for s in sigs if s.pattern_id == "srun_task_exit_code" and s.line_no is not None]
    if exited:
        # srun kills the step's other tasks once one exits with an error: a 'task N: Killed' after that is srun's
        weak = [s for s in weak if not (s.pattern_id == "process_sigkill" and "srun: error:" in s.line
                                        and (s.line_no or 0) > min(exited))]
    if any(s.pattern_id not in DEATH_REPORTS for s in weak):
        weak = [s for s in weak if s.pattern_id not in DEATH_REPORTS]  # "a worker failed" says nothing of why
    for cat in _SYMPTOM_ORDER:
        chosen = [s for s in weak if s.category == cat]
        if chosen:
            if cat == Category.NCCL_TIMEOUT:
                choice = _nccl_timeout_choice(b, chosen, evidence)
                choice.base = 0.5
                return choice
            return Choice(cat, chosen, 0.5, why="only indirect signs point this way")

    # a process killed from outside (SIGKILL: the OOM killer or srun ending the rest; SIGABRT: a watchdog)
    if killed is not None and before_cutoff(killed):
        b.signals.append(killed)
        return Choice(killed.category, [killed], 0.5, why="only the way the process died is known")

    # 10. a hang without words: the tracker's, or the running job's own output standing still
    if job is not None and job.state == JobState.RUNNING and not evidence.hang_suspected:
        standing = _standing_still(b)
        if standing is not None:
            return standing
        dumped = _dumped_while_running(b) or _members_missing(b)
        if dumped is not None:
            return dumped
    if job is not None and job.state == JobState.CANCELLED and not evidence.hang_suspected:
        dumped = _dumped_while_running(b)  # someone looked at the stuck ranks' stacks, then cancelled the job
        if dumped is not None:
            dumped.why = dumped.why.replace("of the running job", "of the job") + ", and then it was cancelled"
            return dumped
        silent = _silent_until_cancelled(b)
        if silent is not None:
            return silent
    if evidence.hang_suspected:
        return Choice(Category.HANG, [hang_fact(evidence)], 0.6, hosts=sorted(set(evidence.straggler_hosts)))
    # 11. a failed job is never "nothing": say that the cause is unknown, with what the end of the output shows
    if job_failed:
        unknown = b.unknown()
        b.signals.append(unknown)
        return Choice(Category.UNKNOWN, [unknown], 0.3, why="the job failed and no known failure explains it")
    return Choice(Category.NONE, [], 0.0)


# launcher lines that report a worker's death (the cause is elsewhere, but something died)
_OUTSIDE_SIGNALS = {"signal 9", "signal 6"}  # Fallback.signature_text of kills that usually come from outside
DEATH_REPORTS = {"elastic_child_failed", "elastic_worker_failed", "srun_task_exit_code", "hydra_job_failed"}


# symptoms that also show up in healthy runs (HTTP retries, handled exceptions, chatter about nodes)
_AMBIGUOUS_PATTERNS = {
    "connection_reset_generic", "c10d_store_failure", "torch_dist_network_error", "node_died_words",
    "preempted_words", "slurm_exceeded_memory", "gloo_transport_failure", "nccl_socket_peer_closed",
}


def _ambiguous(s: Signal) -> bool:
    if s.pattern_id in _AMBIGUOUS_PATTERNS:
        return True
    return s.pattern_id in EXCEPTION_PATTERNS and s.role == "symptom"


def hang_fact(evidence: JobEvidence) -> Signal:
    """The progress tracker's finding, as evidence."""
    progress = evidence.progress
    text = "training progress stopped"
    if evidence.seconds_since_progress is not None:
        text += f": no progress for {evidence.seconds_since_progress:.0f} s"
    if progress is not None and progress.iteration is not None:
        text += f" (last iteration seen: {progress.iteration})"
    if evidence.straggler_hosts:
        text += f"; slow hosts: {', '.join(sorted(evidence.straggler_hosts))}"
    return Signal(Category.HANG, FaultDomain.UNKNOWN, "error", "cause", False, "progress", text, order=10**9)


SURVIVED_PROGRESS_LINES = 3


def survived(b: SignalBuilder, choice: Choice, evidence: JobEvidence) -> bool:
    """The job kept training after everything the choice rests on: a worker OOM-killed and retried, a
    handled error. Not for a job the scheduler says failed, nor for a GPU or node condemned outright."""
    job = evidence.job
    if choice.category in (Category.NONE, Category.UNKNOWN) or not choice.signals:
        return False
    if job is not None and (job.state != JobState.RUNNING or (job.exit_code or 0) != 0):
        return False
    if job is None and _log_says_it_ended(b, choice):
        return False  # the log alone (`jobmedic analyze FILE`): training went on, but the output ends in a death
    flaps = [s for s in choice.signals if b.link_came_back(s)]
    if any((s.condemns or s.source != "log") and s not in flaps for s in choice.signals):
        return False
    if flaps:
        # a NIC link that went down and came up again (the kernel says so): training going on since the first
        # error line (the kernel's lines are often pasted below the job's own) says the job rode it out
        first = min(s.line_no or 0 for s in b.signals if s.category == choice.category and s.source == "log")
        return b.progressed_after(first, lines=SURVIVED_PROGRESS_LINES)
    last = max(s.line_no or 0 for s in choice.signals)
    if b.progressed_after(last, lines=SURVIVED_PROGRESS_LINES):
        return True
    # the job's own retry loop said it starts again ('retrying 1/3', 'Restoring checkpoint ...') and steps grow
    return b.resumed_after(last) and b.progressed_after(last, lines=2)


def _failure_after(b: SignalBuilder, line_no: int) -> bool:
    """Something after `line_no` says a process failed: a launcher's failure report, a fatal or condemning line."""
    later = [s for s in b.signals if s.line_no is not None and s.line_no > line_no]
    return bool(b.elastic) or any(s.pattern_id in DEATH_REPORTS or s.severity == "fatal" or s.condemns for s in later)


_STAMP = re.compile(r"\b(20[0-9]{2})-([01][0-9])-([0-3][0-9])[ T]([0-2][0-9]):([0-5][0-9]):([0-5][0-9])")
_CANCEL_SILENCE_S = 1800  # output silent this long before someone cancelled the job: it stood still
_TASK_LABEL = re.compile(r"^\s{0,4}([0-9]{1,5}): ")


def _stamp(text: str) -> datetime | None:
    m = _STAMP.search(text)
    if m is None:
        return None
    try:
        year, month, day, hour, minute, second = (int(g) for g in m.groups())
        return datetime(year, month, day, hour, minute, second)
    except ValueError:
        return None


def _silent_until_cancelled(b: SignalBuilder) -> Choice | None:
    """A job cancelled after its output had stood still for half an hour (the timestamps of its last lines
    against slurmstepd's 'CANCELLED AT'): it hung, and someone ended it. When `srun -l` labels show one task of
    several that never printed, that task's node (and its ranks) is where it stood still."""
    cancels = [s for s in b.signals if s.pattern_id == "slurm_cancelled_other" and s.line_no is not None]
    if not cancels:
        return None
    cancel = min(cancels, key=lambda s: s.line_no or 0)
    ended = _stamp(cancel.line)
    before = [t for n, line in b.lines if n < (cancel.line_no or 0) and (t := _stamp(line)) is not None]
    if ended is None or not before or (ended - max(before)).total_seconds() < _CANCEL_SILENCE_S:
        return None
    quiet = (ended - max(before)).total_seconds()
    hosts: list[str] = []
    ranks: list[int] = []
    layout = b.layout
    task = _quiet_first(b, cancel.line_no or 0)
    if task is not None and layout is not None and _task_per_node(b) and len(layout.tasks_per_node) == len(
            layout.nodes) and task < len(layout.nodes):
        hosts = [layout.nodes[task]]
        first = sum(layout.tasks_per_node[:task])
        ranks = list(range(first, first + layout.tasks_per_node[task]))
    why = f"the output stood still for {quiet / 60:.0f} min before the job was cancelled"
    if hosts:
        why += f"; task {task} ({hosts[0]}) went quiet before the others: its ranks are where it stood still"
    return Choice(Category.HANG, [cancel], 0.45, why=why, hosts=hosts, ranks=ranks)


def _quiet_first(b: SignalBuilder, until: int) -> int | None:
    """The `srun -l` task (one per node) that stopped printing first, while every other task of three or more
    went on for at least `_AFTER_QUIET` more lines each; None when no task stands out."""
    last: dict[int, int] = {}
    lines_of: dict[int, list[int]] = {}
    for n, line in b.lines:
        m = _TASK_LABEL.match(line) if n < until else None
        if m is not None:
            task = int(m.group(1))
            last[task] = n
            lines_of.setdefault(task, []).append(n)
    if len(last) < 3:
        return None
    quiet = min(last, key=lambda t: last[t])
    others = [t for t in last if t != quiet]
    if all(sum(1 for n in lines_of[t] if n > last[quiet]) >= _AFTER_QUIET for t in others):
        return quiet
    return None


_AFTER_QUIET = 2
_LABELLED_RANK = re.compile(r"^\s{0,4}([0-9]{1,5}): \[rank([0-9]{1,6})\]")


def _task_per_node(b: SignalBuilder) -> bool:
    """Slurm's tasks are one launcher per node (torchrun under srun): known to the builder, or shown by a line
    whose `srun -l` label is not the rank it prints ('1: [rank8]: ...')."""
    return b.per_node_launcher or any(
        (m := _LABELLED_RANK.match(line)) is not None and m.group(1) != m.group(2) for _, line in b.lines)


def _log_says_it_ended(b: SignalBuilder, choice: Choice) -> bool:
    """Without the scheduler's word: the output itself says the job ended (a launcher's failure report, the
    exception or signal it died of, the scheduler's own lines about time, preemption or a lost node)."""
    if b.elastic or any(s.pattern_id in DEATH_REPORTS for s in b.signals):
        return True
    if any(s.category in (Category.PREEMPTED, Category.TIME_LIMIT, Category.NODE_FAILURE) for s in choice.signals):
        return True
    return b.ending_exception() is not None or b.fatal_signal() is not None


def _hang_choice(b: SignalBuilder, hang: list[Signal]) -> Choice:
    """A hang; when stack dumps show every process but a few waiting in a collective, those few are stuck."""
    culprits = b.dump_culprits()
    ranks: set[int] = set()
    hosts: set[str] = set()
    for host, task, rank, _pid in culprits:
        r = rank if rank is not None else task
        if r is not None:
            ranks.add(r)
        h = host or (b.host_of_rank(r) if r is not None else None)
        if task is not None and b.layout is not None and not host:
            h = b.layout.node_of_rank(task) or h
        if h:
            hosts.add(h)
    why = ""
    if culprits:
        named = ", ".join(str(r) for r in sorted(ranks)) or "?"
        why = (f"{len(b.dumps) - len(culprits)} process(es) wait in a collective; rank(s) {named}"
               f"{' on ' + ', '.join(sorted(hosts)) if hosts else ''} are elsewhere: they are the ones stuck")
    absent = set() if culprits else _absent_from_barrier(b, hang)
    if absent:
        ranks |= absent
        if len(b.job_hosts) != 1:  # on a one-node job the node holds the waiting ranks too
            hosts |= {h for h in (b.host_of_rank(r) for r in absent) if h}
        why = (f"a barrier timed out waiting for rank(s) {', '.join(map(str, sorted(absent)))}"
               f"{' on ' + ', '.join(sorted(hosts)) if hosts else ''}, which never arrived: they are the ones stuck")
    if not culprits and not absent:
        # XLA's rendezvous warning is one process's threads (one per local device) waiting for each other: when one
        # process of several prints it, that process is where the job stands still
        writers = {(s.host, s.task if s.task is not None else s.rank) for s in hang
                   if s.pattern_id == "xla_rendezvous_stuck"}
        if len(writers) == 1 and all(s.pattern_id == "xla_rendezvous_stuck" for s in hang):
            host, proc = next(iter(writers))
            if proc is not None and b.layout is not None and len(b.layout.nodes) > 1:
                ranks.add(proc)
                if host:
                    hosts.add(host)
                why = (f"only process {proc}{' on ' + host if host else ''} reports its device threads stuck in an "
                       "XLA rendezvous: the job stands still there")
    stalled = set() if culprits or absent or ranks else b.stalled_ranks()
    if stalled:
        ranks |= stalled
        hosts |= {h for h in (b.host_of_rank(r) for r in stalled) if h}
        why = (f"Horovod's stall inspector: the other ranks wait for rank(s) {', '.join(map(str, sorted(stalled)))}"
               f"{' on ' + ', '.join(sorted(hosts)) if hosts else ''}, which never submitted the pending tensors")
    return Choice(Category.HANG, hang, 0.75, why=why, hosts=sorted(hosts), ranks=sorted(ranks))


_BARRIER_TASK = re.compile(r"^\s*/job:[A-Za-z_]+/replica:[0-9]+/task:([0-9]+)\s*$")
_BARRIER_LISTS = 8  # lines below a barrier report that may list the tasks that never (or did) arrive
_REPORTED = re.compile(r"\{[0-9]{1,6}: [0-9.]{1,12}(?:, [0-9]{1,6}: [0-9.]{1,12}){0,4095}\}$")  # Ray: rank -> seconds waited
# Lightning's 'initializing ddp: GLOBAL_RANK: 5, MEMBER: 6/12' (newer: 'Initializing distributed: ...'), one per process
_NCCL_INIT = re.compile(r"comm 0x[0-9a-fA-F]{1,16} rank ([0-9]{1,6}) nranks ([0-9]{1,6}) .{0,160}?commId (0x[0-9a-fA-F]{1,16})"
                        r" - Init (START|COMPLETE)")
_MEMBER = re.compile(r"(?i)initializing (?:ddp|distributed): GLOBAL_RANK: ([0-9]{1,6}), MEMBER: [0-9]{1,6}/([0-9]{1,6})")


def _absent_from_barrier(b: SignalBuilder, hang: list[Signal]) -> set[int]:
    """The ranks a barrier timeout names as never arrived: a monitored barrier's 'Rank 11 failed to pass', JAX's
    task list below 'Barrier timed out ... Timed out task names:' (a JAX process index is its rank)."""
    absent: set[int] = set()
    for s in hang:
        if s.fields.get("suspect_rank"):
            absent |= _listed_ranks(s.fields["suspect_rank"])
    stores = [s for s in hang if s.pattern_id == "store_barrier_timeout" and s.fields.get("world")]
    if stores:
        absent |= _never_added_key(b, int(stores[0].fields["world"]))
    reports = [s for s in hang if s.pattern_id == "ray_train_report_barrier" and s.line_no is not None
               and s.fields.get("world")]
    barriers = [s.line_no for s in hang if s.pattern_id == "jax_barrier_timeout" and s.line_no is not None]
    if not reports and not barriers:
        return absent
    text_of = {n: b._strip(line) for n, line in b.lines}  # the lines below a report, without their prefixes
    for s in reports:
        world = int(s.fields["world"])
        for n in range((s.line_no or 0) + 1, (s.line_no or 0) + 1 + _BARRIER_LISTS):
            m = _REPORTED.search(text_of.get(n, "").strip())  # after the actor's '(Name pid=N) ' prefix
            if m is None:
                continue
            reported = {int(r) for r in re.findall(r"(?:^\{|, )([0-9]{1,6}):", m.group(0))}
            missing = set(range(world)) - reported
            if reported and 0 < len(missing) <= max(1, world // 4):
                absent |= missing
            break
    for at in barriers:
        for n in range(at + 1, at + 1 + _BARRIER_LISTS):
            m = _BARRIER_TASK.match(text_of.get(n, ""))
            if m is None:
                if n in text_of and text_of[n].strip():
                    break
                continue
            absent.add(int(m.group(1)))
    return absent


_ADDED_KEY = re.compile(r"Added key: store_based_barrier_key:[0-9]{1,6} to store for rank: ([0-9]{1,6})")


def _never_added_key(b: SignalBuilder, world: int) -> set[int]:
    """The ranks of a store-based barrier that never said 'Added key: ... to store for rank: R' when the others
    did (a few of many; nothing when no rank said it, as with logging below INFO)."""
    added = {int(m.group(1)) for _, line in b.lines if (m := _ADDED_KEY.search(line))}
    missing = set(range(world)) - added
    return missing if added and 0 < len(missing) <= max(1, world // 4) else set()


def _members_missing(b: SignalBuilder) -> Choice | None:
    """A running job whose processes announce themselves as members of a group where some never did, and
    nothing came after: the group is waiting for them. Lightning's 'initializing ddp: GLOBAL_RANK: 5, MEMBER:
    6/12'; NCCL's 'comm 0x... rank 4 nranks 8 ... commId 0x... - Init START' for a communicator no rank finished
    ('Init COMPLETE'). The missing ranks, and their node when they are all one node's of several."""
    groups: dict[str, tuple[set[int], int, int]] = {}  # group -> (ranks seen, world, last line)
    complete: set[str] = set()
    for n, line in b.lines:
        text = b._strip(line)
        m = _MEMBER.search(text)
        key = "ddp"
        if m is None:
            m = _NCCL_INIT.search(text)
            if m is not None and m.group(4) == "COMPLETE":
                complete.add(m.group(3))
                continue
            key = m.group(3) if m is not None else ""
        if m is None:
            continue
        seen, world, _ = groups.get(key, (set(), 0, 0))
        seen.add(int(m.group(1)))
        groups[key] = (seen, max(world, int(m.group(2))), n)
    for key, (seen, world, last) in groups.items():
        if key in complete or not world or world > 65536 or max(seen) >= world:
            continue
        missing = set(range(world)) - seen
        if not missing or len(missing) * 2 > world or b.progressed_after(last, lines=1):
            continue
        hosts = {b.host_of_rank(r) for r in missing}
        # a whole node's processes absent points to the node; one process of a node whose others joined, to itself
        joined_there = {b.host_of_rank(r) for r in seen} & hosts
        named = (sorted(h for h in hosts if h) if len(hosts) == 1 and None not in hosts and len(b.job_hosts) > 1
                 and not joined_there else [])
        line = dict(b.lines).get(last, "")
        sig = Signal(Category.HANG, FaultDomain.UNKNOWN, "error", "cause", False, "log", line, line_no=last,
                     pattern_id="group_members_missing", text=f"{len(seen)} of {world} members joined")
        b.signals.append(sig)
        what = "processes joined the group" if key == "ddp" else "ranks started the NCCL communicator's init"
        return Choice(Category.HANG, [sig], 0.55, hosts=named, ranks=sorted(missing), why=(
            f"only {len(seen)} of {world} {what} and nothing came after; rank(s) "
            f"{', '.join(map(str, sorted(missing)))}{' on ' + named[0] if named else ''} never did"))
    return None


def _dumped_while_running(b: SignalBuilder) -> Choice | None:
    """A running job whose output holds stack dumps of two or more of its processes (py-spy, faulthandler, ray
    stack) and no progress after them: what an operator, or a watchdog, collects from a job that stands still.
    Low confidence: the dumps say where it waits, not why."""
    headers = [s for s in b.signals if s.pattern_id == "stack_dump_header" and s.source == "log" and s.line_no]
    if len(b.dumps) < 2 or not headers:
        return None
    first = min(s.line_no or 0 for s in headers)
    if b.progressed_after(first):
        return None  # training went on after the dumps: they were a look, not a rescue
    return Choice(Category.HANG, headers, 0.5, why=(
        f"stack dumps of {len(b.dumps)} processes of the running job and no progress after them: it stands still"))


def _standing_still(b: SignalBuilder) -> Choice | None:
    """A running job whose output shows it stopped: an nvidia-smi snapshot with every GPU idle and its memory
    held (or one GPU idle while the rest spin, waiting for it), a progress bar redrawn at the same step."""
    texts = [(n, b._strip(line)) for n, line in b.lines]
    snap = gpu_stall(gpu_snapshot(texts))
    text_of = dict(b.lines)
    if snap is not None:
        line = text_of.get(snap.line_no, "")
        host = b.host_of_session(snap.line_no + 1) if b.prompts else None
        if host is None and len(b.job_hosts) == 1:
            host = next(iter(b.job_hosts))
        if snap.all_idle:
            sig = Signal(Category.HANG, FaultDomain.UNKNOWN, "error", "cause", False, "log", line, line_no=snap.line_no,
                         pattern_id="gpu_snapshot_idle", host=host, text=f"all {snap.gpus} GPUs idle with memory held")
            b.signals.append(sig)
            return Choice(Category.HANG, [sig], 0.6,
                          why=f"nvidia-smi shows all {snap.gpus} GPUs at 0% with their memory held: the ranks are blocked")
        ranks: list[int] = []
        if host is not None and b.layout is not None and host in b.layout.nodes:
            i = b.layout.nodes.index(host)
            if len(b.layout.tasks_per_node) == len(b.layout.nodes) and b.layout.tasks_per_node[i] == snap.gpus:
                ranks = [r for r in (b._global_rank(host, g) for g in snap.idle) if r is not None]  # one rank per GPU
        sig = Signal(Category.HANG, FaultDomain.UNKNOWN, "error", "cause", False, "log", line, line_no=snap.line_no,
                     pattern_id="gpu_snapshot_one_idle", host=host,
                     text=f"GPU {', '.join(map(str, snap.idle))} idle while the others spin")
        b.signals.append(sig)
        where = f" on {host}" if host else ""
        return Choice(Category.HANG, [sig], 0.65, hosts=[host] if host else [], ranks=ranks,
                      why=f"nvidia-smi{where}: GPU {', '.join(map(str, snap.idle))} idle while the other "
                          f"{snap.gpus - len(snap.idle)} spin at full load, waiting for it")
    bar = bar_stall(texts)
    if bar is not None:
        line = text_of.get(bar.line_no, "")
        sig = Signal(Category.HANG, FaultDomain.UNKNOWN, "error", "cause", False, "log", line, line_no=bar.line_no,
                     pattern_id="progress_bar_stalled", text=f"progress bar stopped at step {bar.step}")
        b.signals.append(sig)
        return Choice(Category.HANG, [sig], 0.55,
                      why=f"the progress bar stood at step {bar.step} for {bar.seconds:.0f} s, "
                          f"{bar.seconds / bar.step_seconds:.0f} times its step time")
    return None


_UNKILLABLE = {"slurm_stepd_not_ending"}  # Slurm could not end a step's processes (Kill task failed)
_PEER_CRASH = {Category.CUDA_ERROR, Category.APP_ERROR, Category.DATA_IO}  # a process's own death, not a link's


def _far_end_crashed(software: list[Signal], first: Signal) -> list[Signal]:
    """When the earliest cause is a failed link and every link error names the same far end, and that node's
    own process failed of something else (a CUDA error, an exception), that failure: the far end's process
    exiting is what broke its peers' links ('remote process exited or there was a network error')."""
    if first.category not in (Category.INTERCONNECT, Category.NCCL_ERROR):
        return []
    links = [s for s in software if s.category in (Category.INTERCONNECT, Category.NCCL_ERROR) and s.peers]
    far = {p for s in links for p in s.peers}
    if len(far) != 1 or len({s.host for s in links}) < 2:
        return []
    peer = next(iter(far))
    if any(s.host == peer for s in links):
        return []  # the far end reports the link failing too: the link, not a crash
    return [s for s in software if s.host == peer and s.category in _PEER_CRASH and s.source == "log"]


def _superseded(s: Signal, others: list[Signal]) -> bool:
    if s.pattern_id not in EXCEPTION_PATTERNS or s.line_no is None:
        return False
    return any(
        t.pattern_id not in EXCEPTION_PATTERNS and t.line_no is not None and 0 < t.line_no - s.line_no <= 40
        and (t.host, t.task, t.rank) == (s.host, s.task, s.rank)
        for t in others
    )


def _nccl_timeout_choice(b: SignalBuilder, timeouts: list[Signal], evidence: JobEvidence) -> Choice:
    """Victims report the timeout; the rank that did not (or is behind) is the suspect."""
    seq_of: dict[int, int] = {}
    hosts_reporting: set[str] = set()
    suspects: set[int] = set()
    for s in timeouts:
        if s.fields.get("suspect_rank"):
            suspects |= _listed_ranks(s.fields["suspect_rank"])  # 'Ranks 4, 5, 6, 7 failed to pass', '{1, 3}'
            continue
        if s.host:
            hosts_reporting.add(s.host)
        if s.rank is None:
            continue
        seq = s.fields.get("seq")
        if seq is not None:
            seq_of[s.rank] = min(int(seq), seq_of.get(s.rank, int(seq)))
        else:
            seq_of.setdefault(s.rank, -1)
    # a barrier the same job's ranks timed out in names who never arrived (a monitored barrier beside the watchdog)
    suspects |= _absent_from_barrier(b, [s for s in b.signals if s.category == Category.HANG and s.source == "log"])
    reporters = set(seq_of)
    enqueued = {s.rank: int(s.fields["enqueued"]) for s in timeouts if s.rank is not None and s.fields.get("enqueued")}
    if len(enqueued) >= 2 and len(set(enqueued.values())) > 1:
        most = max(enqueued.values())
        suspects |= {r for r, n in enqueued.items() if n < most}  # it never enqueued what the others wait on
    known_seqs = {r: q for r, q in seq_of.items() if q >= 0}
    if len(set(known_seqs.values())) > 1:
        newest = max(known_seqs.values())
        suspects |= {r for r, q in known_seqs.items() if q < newest}
    other_path: set[int] = set()
    if not suspects:
        other_path = _other_collective(timeouts)
        suspects |= other_path
    if not suspects and len(reporters) >= 2 and max(reporters) < 65536:
        world = _world_size(evidence.job, reporters)
        silent = set(range(world)) - reporters
        if silent and len(silent) <= max(1, world // 4) and len(silent) < len(reporters):
            suspects |= silent
    hosts: set[str] = set()
    for r in suspects - other_path:  # a rank in another collective took another code path: not its node's doing
        h = b.host_of_rank(r)
        if h and len(b.job_hosts) != 1:  # a one-node job's node holds the victims too: it singles nothing out
            hosts.add(h)
    if not suspects:
        # NCCL's RAS names the process it got nothing from: its node, and its rank where one task runs per GPU
        unheard = {(s.host, s.fields.get("gpu_index")) for s in timeouts if s.pattern_id == "nccl_ras_missing_process"
                  and s.host}
        if len({h for h, _ in unheard}) == 1:
            host, gpu = next(iter(unheard))
            if len(b.job_hosts) != 1:
                hosts.add(host)
            rank = b.layout.global_rank(host, int(gpu)) if b.layout is not None and gpu and len(unheard) == 1 else None
            if rank is not None:
                suspects.add(rank)
    if not suspects and len(hosts_reporting) >= 2 and len(b.job_hosts) > len(hosts_reporting):
        silent_hosts = set(b.job_hosts) - hosts_reporting
        if len(silent_hosts) == 1:
            hosts |= silent_hosts
    why = ""
    if suspects or hosts:
        named = ", ".join(str(r) for r in sorted(suspects)) or "none identified"
        why = (f"{len(reporters)} rank(s) reported the timeout (victims); suspect rank(s): {named}"
               f"{' on ' + ', '.join(sorted(hosts)) if hosts else ''}")
    elif reporters:
        why = f"{len(reporters)} rank(s) reported the timeout and none stands out as the one that never arrived"
    base = 0.7 if (suspects or hosts) else 0.6
    return Choice(Category.NCCL_TIMEOUT, timeouts, base, why=why, hosts=sorted(hosts), ranks=sorted(suspects))


def _listed_ranks(text: str) -> set[int]:
    return {int(r) for r in re.findall(r"[0-9]{1,6}", text)}


# collectives whose input is the same size on every rank: a rank that enters one with another size is the odd one
_SAME_SIZE_OPS = {"ALLREDUCE", "BROADCAST", "ALLGATHER", "_ALLGATHER_BASE", "REDUCE_SCATTER", "_REDUCE_SCATTER_BASE",
                  "REDUCE"}


def _other_collective(timeouts: list[Signal]) -> set[int]:
    """Ranks that time out on the same collective number as the others but in another operation (a BROADCAST
    where three or more wait in an ALLREDUCE), or in the same one with another input size (NumelIn=10 where the
    others give 11): the program took another path there. Fewer than half, one op."""
    op_of: dict[int, tuple[str, str]] = {}
    for s in timeouts:
        if s.rank is not None and s.fields.get("op") and s.fields.get("seq") is not None:
            op = s.fields["op"]
            if op in _SAME_SIZE_OPS and s.fields.get("numel"):
                op = f"{op} of {s.fields['numel']}"
            op_of.setdefault(s.rank, (s.fields["seq"], op))
    if len(op_of) < 3 or len({seq for seq, _ in op_of.values()}) != 1:
        return set()
    by_op: dict[str, set[int]] = {}
    for rank, (_, op) in op_of.items():
        by_op.setdefault(op, set()).add(rank)
    if len(by_op) != 2:
        return set()
    fewest = min(by_op.values(), key=len)
    return fewest if 2 * len(fewest) < len(op_of) else set()


def _world_size(job: JobInfo | None, reporters: set[int]) -> int:
    seen = max(reporters) + 1
    if job is not None:
        layout_total = sum(job.layout.tasks_per_node) if job.layout.tasks_per_node else 0
        if layout_total >= seen:
            return layout_total
        if job.num_tasks and job.num_tasks >= seen:
            return job.num_tasks
    return seen


def _reclaimed(strong: list[Signal], condemning: list[Signal]) -> list[Signal]:
    """The cloud's preemption notices for the node the job then lost: the cloud took the VM back (its name comes
    back on a new VM), so the node failure that follows is the preemption's, unless hardware was condemned too."""
    if any(s.category != Category.NODE_FAILURE for s in condemning):
        return []
    lost = {s.host for s in strong if s.category == Category.NODE_FAILURE and s.role == "scheduler" and s.host}
    lost |= {s.host for s in condemning if s.host}
    if not lost and not condemning:
        return []
    return [s for s in strong if s.pattern_id == "cloud_preemption_notice" and (
        s.host is None or not lost or s.host in lost)]


def _transport_odd_one_out(b: SignalBuilder) -> tuple[str, Signal] | None:
    """The one node whose NCCL chose the socket transport while the job's other nodes chose a fabric (IB, a
    network plugin), and the line that says so; None unless exactly one node is on Socket and another is not."""
    chosen: dict[str, Signal] = {}
    for s in b.signals:
        if s.pattern_id == "nccl_network_chosen" and s.host and s.fields.get("net"):
            chosen.setdefault(s.host, s)
    socket = [h for h, s in chosen.items() if s.fields["net"].strip().lower().startswith("socket")]
    if len(socket) != 1 or len(chosen) < 2:
        return None
    return socket[0], chosen[socket[0]]

