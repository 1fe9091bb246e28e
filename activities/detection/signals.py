"""Flagged log lines and scheduler, node and metric facts turned into classified signals.

A *signal* is one piece of evidence: category, fault domain, severity, role (cause, symptom,
scheduler), the host, rank, task and GPU it concerns and the peers it names. `SignalBuilder`
makes them and keeps the bookkeeping the blame rules need: ranks learnt on hosts, torchrun's
failure summaries, stack dumps per process, the last lines of the output. Pure code.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from activities.detection import fallback
from activities.detection.catalogue import Catalogue, PatternSpec
from activities.detection.gpu_inventory import GpuRow, inventory_row, norm_pci
from activities.detection.hosts import NodeMap, mentioned_ips
from activities.detection.launchers import (
    LauncherReport,
    NcclProcess,
    launcher_report,
    nccl_own_address,
    nccl_process,
    prompt_host,
    section_header,
    task_ids,
)
from activities.detection.line_context import MAX_LINE, LineContext, parse_context
from activities.detection.progress import parse_progress_line
from activities.detection.xid import xid_info
from workflows.contracts import Category, EvidenceLine, FaultDomain, JobEvidence, JobInfo, JobState, NodeInfo

MAX_SIGNAL_LINES = 20000  # flagged lines turned into signals (first ones and last ones kept)
_DUMP_PATTERNS = {"stack_dump_header", "faulthandler_timeout_dump", "stack_frame_in_collective"}


@dataclass
class Signal:
    """One piece of evidence, classified."""

    category: Category
    fault_domain: FaultDomain
    severity: str
    role: str  # cause | symptom | scheduler
    condemns: bool
    source: str  # log | scheduler | node | metrics
    line: str
    line_no: int | None = None
    pattern_id: str | None = None
    host: str | None = None
    rank: int | None = None
    task: int | None = None
    gpu: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    note: str = ""
    text: str = ""  # the line without prefixes (for the signature)
    order: int = 0  # position in the log (scheduler facts come last)
    peers: list[str] = field(default_factory=list)  # other nodes the line names (a link's far end, a peer)
    host_from: str = ""  # "message" (the line names it), "prefix" (who printed it), "layout" (rank/task map)
    pid: int | None = None  # the NCCL "host:pid:tid" prefix's pid

    @property
    def strong(self) -> bool:
        return self.severity in {"fatal", "error"}


EXCEPTION_PATTERNS = {"python_exception", "python_exception_qualified"}
_DASHES = re.compile(r"^-{5,}\s*$")
_NODESET_LINE = re.compile(r"^[A-Za-z0-9._\[\],:-]{1,200}(?: \([0-9]{1,6}\))?\s*$")
# exceptions a DataLoader worker raises from the dataset's own code (its I/O errors are the data's: OSError, ...)
_CODE_ERRORS = {"IndexError", "KeyError", "TypeError", "ValueError", "AttributeError", "NameError", "AssertionError",
                "ZeroDivisionError", "NotImplementedError", "UnboundLocalError", "RecursionError", "ImportError",
                "ModuleNotFoundError"}
FALLBACK_PATTERNS = {"fallback_uncaught_exception", "fallback_fatal_signal", "fallback_unknown"}
_GENERIC = EXCEPTION_PATTERNS | {"cuda_error_generic", "nccl_error_generic", "connection_reset_generic"}
_STRUCTURE = {"python_traceback", "python_exception_ignored", "run_finished_ok", "elastic_failure_field"}
# exception types that report a failure elsewhere rather than being one
_SYMPTOM_EXCEPTIONS = {
    "KeyboardInterrupt", "SystemExit", "SignalException", "ChildFailedError", "DistBackendError",
    "DistNetworkError", "DistStoreError", "DistError", "ConnectionResetError", "BrokenPipeError",
    "ConnectionAbortedError", "ProcessExitedException", "ProcessRaisedException", "CalledProcessError",
    "RendezvousClosedError", "RendezvousTimeoutError", "TimeoutError", "CancelledError",
}
_NUMERIC_MESSAGE = re.compile(r"^[\s0-9.,eE+\-%:=/()]*$")
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}


def _cat(value: str) -> Category:
    return Category(value)


class SignalBuilder:
    """Turns flagged lines and facts into signals; keeps the rank/host bookkeeping."""

    def __init__(self, evidence: JobEvidence, catalogue: Catalogue) -> None:
        self.evidence = evidence
        self.catalogue = catalogue
        self.specs = catalogue.by_id()
        self.benign = [p.compiled for p in catalogue.benign_patterns]
        job = evidence.job
        hosts = list(job.nodes) if job else []
        if job:
            hosts += [h for h in job.layout.nodes if h not in hosts]
        self.nodemap = NodeMap.build(hosts, evidence.nodes)
        self.job_hosts = frozenset(hosts)  # the job's own nodes (empty when unknown)
        self.known_hosts = self.nodemap.names  # every node the evidence can name
        self.spellings = frozenset(self.nodemap.aliases)  # node names, FQDNs and addresses
        self.layout = job.layout if job else None
        self.signals: list[Signal] = []
        self.benign_lines = 0
        self.elastic: list[dict[str, str]] = []  # torchrun failure summaries, in order
        self.tracebacks: dict[tuple, int] = {}  # source key -> line of the last "Traceback" start
        self._ignored_at: dict[tuple, int] = {}  # source key -> line of the last 'Exception ignored in: ...'
        self._tb_ignored: dict[tuple, bool] = {}  # source key -> its last traceback is one Python ignored
        self.ignored_exceptions: set[int] = set()  # lines of exceptions Python printed and ignored
        self.finished_ok: list[int] = []  # lines where the run says it finished well (run_finished_ok)
        self.rank_host: dict[int, str] = {}  # learnt from lines naming both
        self.tail: list[tuple[int, str]] = []  # the last lines of the output, flagged or not
        self._marks: list[tuple[int, int]] | None = None  # progress lines of `tail` (set before the first read)
        self.specific_lines: set[int] = set()  # lines a specific catalogue pattern already explains
        # stack dumps, per process that printed one: does any of its threads wait in a collective?
        self.dumps: dict[tuple, bool] = {}
        self._dumping: tuple | None = None  # the process whose dump the following unprefixed frames belong to
        self._dump_host: str | None = None  # the host a dump header named ("# on HOST") for the dumps after it
        # position of a line in the log as the verdict orders it -> the line's file line number and stream
        # (empty when the positions are the file's line numbers already)
        self.where: dict[int, EvidenceLine] = {}
        self.launches: list[LauncherReport] = []  # what launchers said about how processes ended
        self.nccl_procs: dict[tuple[str, int], NcclProcess] = {}  # (host, pid) -> rank and GPU, from NCCL INFO
        self.gpu_rows: list[tuple[int, str | None, GpuRow]] = []  # inventory rows: (line, prefix host, row)
        self.gpu_bus: dict[tuple[str, int], str] = {}  # (host, GPU index) -> bus id, from those rows
        self.per_node_launcher = False  # torchrun / DeepSpeed under each Slurm task: task ids are not ranks
        self.lines: list[tuple[int, str]] = []  # every line the verdict has (flagged ones and the tail), in order
        self.prompts: list[tuple[int, str | None]] = []  # shell prompts: (line, the host commands after it run on)
        self.host_alias: dict[str, str] = {}  # a writer's container hostname -> its node, by NCCL's own address

    def cite(self, s: Signal) -> EvidenceLine:
        """A signal as the evidence line the verdict shows: file line number and stream for a log line."""
        line_no, stream = s.line_no, None
        placed = self.where.get(s.line_no) if s.line_no is not None and s.source == "log" else None
        if placed is not None:
            line_no, stream = placed.line_no, placed.stream
        return EvidenceLine(source=s.source, line=clean_text(s.line[:2000]), line_no=line_no, pattern_id=s.pattern_id,
                            host=s.host, rank=s.rank, stream=stream)

    # --------------------------------------------------------------- the end of the output

    def _strip(self, line: str) -> str:
        return parse_context(line, known_hosts=self.spellings).text

    def fallback_signal(self, found: fallback.Fallback, pattern_id: str) -> Signal:
        """A fallback finding as a signal, with the host and rank its line's prefixes give."""
        raw = dict(self.tail).get(found.line_no, found.line) if found.line_no is not None else found.line
        ctx = parse_context(raw, known_hosts=self.spellings) if found.line_no is not None else LineContext()
        return Signal(
            category=found.category, fault_domain=found.fault_domain, severity="error", role="cause",
            condemns=False, source="log" if found.line_no is not None else "scheduler", line=raw,
            line_no=found.line_no, pattern_id=pattern_id, host=self._norm_host(ctx.host), task=ctx.task,
            rank=ctx.rank, note=found.note, text=found.signature_text, order=10**7,
        )

    def ending_exception(self) -> Signal | None:
        found = fallback.ends_in_exception(self.tail, self._strip)
        if found is None or found.line_no in self.specific_lines or found.line_no in self.ignored_exceptions:
            return None  # nothing, a line the catalogue knows better (its signal decides), or one Python ignored
        short = found.signature_text.rsplit(".", 1)[-1]
        if short in _SYMPTOM_EXCEPTIONS:
            return None  # a launcher reporting a failure elsewhere
        return self.fallback_signal(found, "fallback_uncaught_exception")

    def fatal_signal(self) -> Signal | None:
        found = fallback.fatal_signal(self.tail, self.evidence.job, self._strip)
        return self.fallback_signal(found, "fallback_fatal_signal") if found is not None else None

    def unknown(self) -> Signal:
        return self.fallback_signal(fallback.unknown_failure(self.tail, self.evidence.job, self._strip),
                                    "fallback_unknown")

    # --------------------------------------------------------------- log lines

    def add_log(self, numbered: Sequence[tuple[int, str]], hits: Iterable[EvidenceLine]) -> None:
        by_line: dict[int, list[str]] = {}
        for hit in hits:
            if hit.line_no is None or hit.pattern_id is None:
                continue  # a screened hit always has both; an evidence line without them flags nothing
            ids = by_line.setdefault(hit.line_no, [])
            if hit.pattern_id not in ids:
                ids.append(hit.pattern_id)
        text_of = dict(numbered)
        line_nos = sorted(by_line)
        if len(line_nos) > MAX_SIGNAL_LINES:  # hostile volume: keep the start and the end
            half = MAX_SIGNAL_LINES // 2
            line_nos = line_nos[:half] + line_nos[-half:]
        for order, line_no in enumerate(line_nos):
            line = text_of.get(line_no, "")[:MAX_LINE]
            self._add_line(line_no, line, by_line[line_no], order)

    def _add_line(self, line_no: int, line: str, ids: list[str], order: int) -> None:
        specs = [self.specs[i] for i in ids if i in self.specs]
        if any(s.benign for s in specs) or any(rx.search(line) for rx in self.benign):
            self.benign_lines += 1
            return
        specs = [s for s in specs if not s.benign]
        if not specs:
            return
        ctx = parse_context(line, known_hosts=self.spellings)
        if ctx.local_rank is not None:
            self.per_node_launcher = True
        key = (ctx.host, ctx.task, ctx.rank)
        specific = [s for s in specs if s.id not in _GENERIC and s.id not in _STRUCTURE]
        if specific:
            self.specific_lines.add(line_no)
            specs = [s for s in specs if s.id not in _GENERIC]
        elif any(s.id not in EXCEPTION_PATTERNS for s in specs if s.id in _GENERIC):
            specs = [s for s in specs if s.id not in EXCEPTION_PATTERNS]
        if "python_exception" in {s.id for s in specs}:
            specs = [s for s in specs if s.id != "python_exception_qualified"]  # one exception, one signal
        if any(s.id in _DUMP_PATTERNS for s in specs):
            self._track_dump(ctx, specs, line)
        for spec in specs:
            if spec.id == "run_finished_ok":
                self.finished_ok.append(line_no)
                continue
            if spec.id == "python_exception_ignored":
                self._ignored_at[key] = line_no
                continue
            if spec.id == "python_traceback":
                self.tracebacks[key] = line_no
                at = self._ignored_at.get(key)
                self._tb_ignored[key] = at is not None and 0 < line_no - at <= 2
                continue
            fields = spec.extract_fields(line)
            if spec.id == "elastic_failure_field":
                self._elastic_field(fields, line_no)
                continue
            if spec.id == "launcher_first_failed_rank":
                rank = fields.get("rank") or fields.get("container_rank") or fields.get("spawn_index")
                if rank is not None and not any(e.get("rank") for e in self.elastic):
                    self.elastic.append({"line_no": str(line_no), "rank": rank})
                continue
            sig = self._signal(spec, line, line_no, ctx, fields, order)
            if sig is not None:
                self.signals.append(sig)

    def _signal(
        self, spec: PatternSpec, line: str, line_no: int, ctx: LineContext, fields: dict[str, str], order: int
    ) -> Signal | None:
        sig = Signal(
            category=spec.category, fault_domain=spec.fault_domain, severity=spec.severity, role=spec.role,
            condemns=spec.condemns, source="log", line=line, line_no=line_no, pattern_id=spec.id,
            host=self._norm_host(fields.get("host") or ctx.host), task=ctx.task, rank=ctx.rank,
            fields=fields, text=ctx.text, order=order, pid=ctx.pid,
        )
        named = self._named_hosts(ctx.text)
        if fields.get("host"):
            sig.host_from = "message"
        elif sig.host:
            sig.host_from = "prefix"
        if sig.host is None and named:
            sig.host, sig.host_from = named[0], "message"  # "... on instance gpu-b17", "Node failure on node12"
        peer = fields.get("peer")
        # with a node map, only a peer it knows can be acted on; offline, the address as the log gave it
        peer = self.nodemap.resolve(peer) if self.nodemap else self._norm_host(peer)
        sig.peers = [h for h in ([peer] if peer else []) + named if h and h != sig.host]
        sig.peers = list(dict.fromkeys(sig.peers))
        family = (fallback.exception_family(fields.get("exc_type", ""), fields.get("message") or "")
                  if spec.id in EXCEPTION_PATTERNS else None)
        if family is not None:
            sig.category, sig.fault_domain = family
        if "rank" in fields:
            sig.rank = int(fields["rank"])
        if "tasks" in fields:
            tasks = task_ids(fields["tasks"])
            if tasks:
                sig.task = tasks[0]
                sig.fields["task_ids"] = ",".join(map(str, tasks))
        if sig.rank is not None and sig.host and (ctx.host or "host" in fields):
            self.rank_host.setdefault(sig.rank, sig.host)
        if fields.get("lost_task"):
            self._about_lost_task(sig, int(fields["lost_task"]))
        pci = fields.get("pci")
        if not pci and spec.category == Category.GPU_HARDWARE:
            m = PCI.search(ctx.text)
            pci = m.group(1) if m else None  # "NVRM: GPU 0000:9b:00.0: GPU has fallen off the bus."
        if pci:
            pci = norm_pci(pci)
            sig.gpu = f"{sig.host}:{pci.lower()}" if sig.host else pci.lower()
        elif fields.get("gpu_index"):
            sig.gpu = f"{sig.host}:{fields['gpu_index']}" if sig.host else fields["gpu_index"]
        elif ctx.local_gpu is not None and sig.host:
            sig.gpu = f"{sig.host}:{ctx.local_gpu}"
        if fields.get("xid"):  # the kernel's Xid line, or a tool reporting one (gpud): the code says what it is
            info = xid_info(int(fields["xid"]))
            earlier = _PREVIOUS_XID.search(line)
            if earlier and not info.condemns:
                # "Xid 45 ... caused by previous Xid 149": the line is evidence of the earlier one on this GPU
                info = xid_info(int(earlier.group(1)))
            sig.category, sig.fault_domain = _cat(info.category), FaultDomain(info.fault_domain)
            sig.severity, sig.condemns = info.severity, info.condemns
            sig.note = f"Xid {info.code} ({info.name}): {info.meaning}; action: {info.action}"
        elif spec.id in EXCEPTION_PATTERNS:
            return self._exception(sig, ctx, line_no)
        elif spec.id == "srun_task_exit_code" and fields.get("exit_code") == str(self._dnr_code()):
            sig.role, sig.severity = "cause", "fatal"
            sig.note = f"exit code {fields['exit_code']}: the application asked not to be restarted"
        elif spec.id == "nvswitch_sxid" and fields.get("fatality") == "Fatal":
            return None  # nvswitch_sxid_fatal carries it
        elif spec.id == "dataloader_worker_exception" and fields.get("exc_type", "").rsplit(".", 1)[-1] in _CODE_ERRORS:
            # a worker's IndexError or KeyError is the dataset code's bug, not the data's storage
            sig.category, sig.fault_domain = Category.APP_ERROR, FaultDomain.APPLICATION
            sig.note = f"the DataLoader worker's {fields['exc_type']} is raised by the dataset's own code"
        elif spec.id == "dataloader_killed" and fields.get("signal", "").strip() == "Bus error":
            sig.note = "the worker died of SIGBUS: /dev/shm is too small for the DataLoader"
        return sig

    def _about_lost_task(self, sig: Signal, task: int) -> None:
        """A line about the task it says was lost (JAX's coordination service: 'Task /job:jax_worker/replica:0/
        task:5 heartbeat timeout', printed by every survivor): that task, on its node by the layout."""
        sig.rank = sig.task = task
        node = self.layout.node_of_rank(task) if self.layout is not None else None
        if node:
            sig.host, sig.host_from = node, "message"
            sig.peers = [h for h in sig.peers if h != node]

    def _exception(self, sig: Signal, ctx: LineContext, line_no: int) -> Signal | None:
        exc = sig.fields.get("exc_type", "")
        message = sig.fields.get("message", "") or ""
        short = exc.rsplit(".", 1)[-1]
        if not short[:1].isupper():
            return None  # "socket.error: ..." style lowercase names are not raised exception classes
        if message and _NUMERIC_MESSAGE.match(message):
            return None  # "ValError: 0.12" is a metric, not an exception
        key = (ctx.host, ctx.task, ctx.rank)
        started = self.tracebacks.get(key)
        if started is not None and self._tb_ignored.get(key):
            sig.role, sig.severity = "symptom", "warning"  # raised in a __del__ or at exit: the process went on
            self.ignored_exceptions.add(line_no)
            self._tb_ignored[key] = False
        elif short in _SYMPTOM_EXCEPTIONS:
            sig.role, sig.severity = "symptom", "warning"
        elif started is None:
            sig.role = "symptom"  # an exception printed without a traceback (logged, maybe handled)
        sig.note = f"{exc}: {message}".strip() if message else exc
        return sig

    def _track_dump(self, ctx: LineContext, specs: list[PatternSpec], line: str) -> None:
        own = (ctx.host, ctx.task, ctx.rank, None) if (ctx.task is not None or ctx.rank is not None) else None
        header = next((s for s in specs if s.id in ("stack_dump_header", "faulthandler_timeout_dump")), None)
        if header is not None:
            rank = header.extract_fields(line).get("rank")
            if own is None and rank is not None:
                own = (ctx.host, None, int(rank), None)
            if own is None:
                own = self._dump_owner(ctx.text, prefix_host=ctx.host)
            if own is not None:
                self._dumping = own
                self.dumps.setdefault(own, False)
        source = own or self._dumping
        if source is not None and any(s.id == "stack_frame_in_collective" for s in specs):
            self.dumps[source] = True

    def _dump_owner(self, text: str, *, prefix_host: str | None = None) -> tuple | None:
        """Whose dump a header starts, from what it says: py-spy's 'Process PID:', ray stack's 'Stack dump for
        USER PID', or a header the user wrote ('== task 2 pid 18770 on olmo-g2 ==', '$ py-spy dump --pid N  #
        gpu-h01 local_rank 0', '$ ray stack  # on 10.9.1.4'). A header naming only a host starts nothing but
        gives its host to the headers after it; one that says nothing new continues the current dump."""
        named = self._named_hosts(text)
        host = named[0] if named else None
        pid_m = _DUMP_PID.search(text)
        pid = int(next(g for g in pid_m.groups() if g)) if pid_m else None
        local_m = _DUMP_LOCAL_RANK.search(text)
        rest = _DUMP_LOCAL_RANK.sub(" ", text)
        rank_m, task_m = _DUMP_RANK.search(rest), _DUMP_TASK.search(rest)
        rank = int(rank_m.group(1)) if rank_m else None
        task = int(task_m.group(1)) if task_m else None
        if host is not None and pid is None and rank is None and task is None and local_m is None:
            self._dump_host = host
            return None
        # the host the text names, else the one a launcher prefix says wrote it (pdsh's 'gpu-c12: Process 30918:
        # ... --local_rank=1'), else the one a header above named
        host = host or prefix_host or self._dump_host
        if local_m is not None and rank is None:
            rank = self._global_rank(host, int(local_m.group(1)))
        current = self._dumping
        if current is not None and rank is None and task is None and (pid is None or pid == current[3]):
            return current  # py-spy's own 'Process PID:' under the user's header for the same process
        if rank is None and task is None and pid is None:
            return None
        return (host, task, rank, pid)

    def _global_rank(self, host: str | None, local_rank: int) -> int | None:
        """A local rank's global rank: ranks are blocks per node in layout order (torchrun, DeepSpeed,
        accelerate); on a one-node job they are the same."""
        layout = self.layout
        if layout is None or not layout.nodes:
            return local_rank if len(self.job_hosts) == 1 else None
        if host is None:
            return local_rank if len(layout.nodes) == 1 else None
        if host not in layout.nodes or len(layout.tasks_per_node) != len(layout.nodes):
            return None
        index = layout.nodes.index(host)
        if local_rank >= layout.tasks_per_node[index]:
            return None
        return sum(layout.tasks_per_node[:index]) + local_rank

    def progressed_after(self, line_no: int, *, lines: int = 2) -> bool:
        """Training went on after `line_no`: `lines` progress lines later in the output, and not all at one number
        (a bar that starts again each epoch counts as going on; the same line printed again does not)."""
        seen = [iteration for n, iteration in self._progress_marks() if n > line_no]
        return len(seen) >= lines and len(set(seen)) > 1

    def _progress_marks(self) -> list[tuple[int, int]]:
        """(line number, iteration) of every progress line of the tail, read once."""
        if self._marks is None:
            self._marks = []
            for n, line in self.tail:
                sample = parse_progress_line(self._strip(line))
                if sample is not None and sample.iteration is not None:
                    self._marks.append((n, sample.iteration))
        return self._marks

    def link_came_back(self, sig: Signal) -> bool:
        """`sig` is a NIC link going down ('mlx5_core 0000:b1:00.1 eth1: Link down') and a later line says the same
        device is up again ('... eth1: Link up'): a flap, not a dead link."""
        m = _LINK_DOWN.search(sig.text or sig.line) if sig.line_no is not None else None
        if m is None:
            return False
        up = f"{m.group(1)}: Link up"
        return any(n > (sig.line_no or 0) and up in line for n, line in self.lines)

    def resumed_after(self, line_no: int) -> bool:
        """A line after `line_no` says the job's own retry loop starts training again (Ray Train's and Tune's
        FailureConfig, an elastic agent's restart, a script's retry): 'retrying 1/3', 'Restoring checkpoint',
        'Resuming from checkpoint', 'restarting worker group'."""
        return any(n > line_no and _RESUMED.search(line) for n, line in self.tail)

    def dump_culprits(self) -> list[tuple]:
        """Processes whose dump shows no thread in a collective while the others' do: the stuck ones."""
        waiting = [k for k, in_collective in self.dumps.items() if in_collective]
        elsewhere = [k for k, in_collective in self.dumps.items() if not in_collective]
        if not waiting or not elsewhere or len(elsewhere) > max(1, len(self.dumps) // 2):
            return []
        return elsewhere

    def stalled_ranks(self) -> set[int]:
        """Ranks Horovod's stall inspector says the others wait for: its 'Missing ranks:' / 'Stalled ranks:'
        entries, '[missing ranks: N]', and the ranks absent from a '[ready ranks: ...]' list (the job's
        world size from its task layout). Empty when the report does not single out a few, or one node's."""
        reports = [s for s in self.signals if s.pattern_id == "horovod_stalled_ranks"]
        if not reports:
            return set()
        missing: set[int] = set()
        ready_lists: list[set[int]] = []
        for text in self._stall_report_texts(reports):
            for m in _HVD_LIST.finditer(text):
                ranks = {int(r) for r in re.findall(r"[0-9]{1,6}", m.group(2))}
                if m.group(1) == "missing":
                    missing |= ranks
                elif ranks:
                    ready_lists.append(ranks)
        missing |= {int(s.fields["rank"]) for s in self.signals
                    if s.pattern_id == "horovod_stalled_rank_entry" and s.fields.get("rank")}
        layout = self.layout
        world = sum(layout.tasks_per_node) if layout is not None and len(layout.tasks_per_node) == len(layout.nodes) else 0
        if not missing and ready_lists and world:
            for ready in ready_lists:
                if max(ready) < world:
                    missing |= set(range(world)) - ready
        if not missing or (world and len(missing) >= world):
            return set()
        if world and len(missing) > max(1, world // 4):
            # many ranks: a suspect set only when they are one node's (of several), the node that stopped
            nodes = {self.host_of_rank(r) for r in missing}
            if len(nodes) != 1 or None in nodes or len(self.job_hosts) < 2:
                return set()
        return missing

    def _stall_report_texts(self, reports: list[Signal]) -> list[str]:
        """The report lines and the rows printed right under each: Horovod lists its 'Stalled ops:' one a row,
        each with its '[ready ranks: ...]', on lines no pattern flags."""
        texts = [s.line for s in reports]
        starts = {s.line_no for s in reports if s.line_no is not None}
        following = -1  # the line number the report's next row would have
        for n, line in self.lines:
            if n in starts:
                following = n + 1
            elif n == following and (_HVD_ROW.search(line) or "Stalled ops:" in line):
                texts.append(line)
                following = n + 1
        return texts

    def _elastic_field(self, fields: dict[str, str], line_no: int) -> None:
        if not self.elastic or ("host" in fields and "host" in self.elastic[-1]) or (
            "rank" in fields and "rank" in self.elastic[-1]
        ):
            self.elastic.append({"line_no": str(line_no)})
        self.elastic[-1].update(fields)

    def _dnr_code(self) -> int:
        return 93

    def _norm_host(self, host: str | None) -> str | None:
        return self.nodemap.normalise(host)

    def _named_hosts(self, text: str) -> list[str]:
        """Nodes a line names outside its prefixes: known spellings, else (offline) bare IP addresses."""
        named = self.nodemap.mentioned(text)
        if not named and not self.nodemap:
            named = mentioned_ips(text)
        return named

    # --------------------------------------------------------------- launchers and NCCL processes

    def add_process_lines(self, lines: Iterable[tuple[int, str]]) -> None:
        """Launcher reports of how processes ended and NCCL's word on which rank and GPU each process is.

        Read from every line the verdict has (flagged or in the tail): these are INFO-level lines
        nothing flags, printed at the start (NCCL) and at the end (launchers) of the output."""
        seen: set[int] = set()
        rule_at = -2  # the line of the last row of dashes (clush -b and clubak frame each block's nodes in them)
        for line_no, line in lines:
            if line_no in seen:
                continue
            seen.add(line_no)
            if _DASHES.match(line):
                rule_at = line_no
                continue
            if self.nodemap and rule_at == line_no - 1 and _NODESET_LINE.match(line):
                # clush -b's block header: what follows is the output of these nodes (of one job node, or none)
                self.prompts.append((line_no, self._one_job_node(line)))
                continue
            if self.nodemap and section_header(line):
                # a pasted section ('--- dmesg -T on gpu-e33 ---') is about the one job node its banner names;
                # a banner naming none (another machine's log, sacct) ends the session before it
                self.prompts.append((line_no, self._one_job_node(line)))
                continue
            shell = prompt_host(line)
            if shell is None and self.nodemap and line.lstrip().startswith(("$ ", "# ")):
                # a command typed at a prompt that names one of the job's nodes: "$ kubectl describe node H",
                # "$ sudo dmesg -T  # on H", "# dcgmi diag -r 3 --host H"; its output is about that node
                shell = self._one_job_node(line)
            if shell is not None:
                host = self.nodemap.resolve(shell) if self.nodemap else (shell if any(c.isdigit() for c in shell) else None)
                if self.job_hosts and host not in self.job_hosts:
                    # a prompt on a login or admin node: what it prints is about the one job node its command
                    # names ("[sysadm@login02 ~]$ sbatch --nodelist=node-153 ..."), if any, not about itself
                    host = self._one_job_node(line)
                self.prompts.append((line_no, host))
                continue
            if self.nodemap and "NCCL INFO" in line and ("Bootstrap" in line or " OOB " in line):
                self._learn_alias(line)
            if ('pci_bus_id="' in line or _LONG_BUS.search(line)) and len(self.gpu_rows) < 1024:
                ctx = parse_context(line[:MAX_LINE], known_hosts=self.spellings)
                row = inventory_row(ctx.text)
                if row is not None:
                    self.gpu_rows.append((line_no, ctx.host, row))
                    continue
            if not ("srun: error:" in line or "noticed that process rank" in line or "exits with return code" in line
                    or ("NCCL INFO" in line and " busId " in line)):
                continue
            ctx = parse_context(line[:MAX_LINE], known_hosts=self.spellings)
            report = launcher_report(line_no, ctx.text)
            if report is not None and report.host is None and ctx.host and report.launcher == "deepspeed":
                report = replace(report, host=ctx.host)  # pdsh's 'HOST: ' prefix: the node whose worker it was
            if report is not None:
                self.launches.append(report)
                if report.launcher == "deepspeed":
                    self.per_node_launcher = True
                continue
            proc = nccl_process(ctx.text)
            if proc is not None and len(self.nccl_procs) < 4096:
                host = self._norm_host(proc.host) or proc.host
                self.nccl_procs.setdefault((host, proc.pid), proc)
                self.rank_host.setdefault(proc.rank, host)

    def _one_job_node(self, line: str) -> str | None:
        """The one node of the job (any node, when the job's are unknown) that `line` names, else None."""
        named = [h for h in self.nodemap.mentioned(line[:MAX_LINE]) if not self.job_hosts or h in self.job_hosts]
        return named[0] if len(named) == 1 else None

    def _learn_alias(self, line: str) -> None:
        """A writer the node map does not know (a container's or pod's hostname in NCCL's prefix) that says
        which address it uses: the node with that address."""
        own = nccl_own_address(parse_context(line[:MAX_LINE], known_hosts=self.spellings).text)
        if own is None or self.nodemap.resolve(own[0]) is not None:
            return
        node = self.nodemap.resolve(own[1])
        if node:
            self.host_alias.setdefault(own[0], node)

    def apply_host_aliases(self) -> None:
        """Signals, ranks and NCCL processes of a writer known by a container id: its node's."""
        if not self.host_alias:
            return
        alias = self.host_alias
        for sig in self.signals:
            if sig.host in alias:
                node = alias[sig.host]
                if sig.gpu and sig.gpu.startswith(f"{sig.host}:"):
                    sig.gpu = node + sig.gpu[len(sig.host):]
                sig.host = node
        self.rank_host = {r: alias.get(h, h) for r, h in self.rank_host.items()}
        self.nccl_procs = {(alias.get(h, h), pid): p for (h, pid), p in self.nccl_procs.items()}

    def tasks_are_ranks(self) -> bool:
        """Slurm task ids are the global ranks: srun starts the training processes itself (no torchrun or
        DeepSpeed launcher under each task, and no line shows a task and a different rank)."""
        if self.per_node_launcher or self.elastic:
            return False
        return not any(s.task is not None and s.rank is not None and s.task != s.rank for s in self.signals)

    def first_failed(self) -> tuple[str | None, list[int]] | None:
        """Host and global ranks of the first process a launcher reports ending of its own failure."""
        for report in sorted(self.launches, key=lambda r: r.line_no):
            if not report.own_failure:
                continue
            host = self._norm_host(report.host)
            ranks = list(report.ids)
            if report.launcher == "srun" and not self.tasks_are_ranks():
                ranks = []
            elif report.local and len(self.job_hosts) > 1:
                # a local rank on one of several nodes: its global rank where the launcher's prefix names the node
                # and the layout places it (DeepSpeed's pdsh 'HOST: ... --local_rank=2 ... exits with return code')
                placed = [self.layout.global_rank(host, r) if self.layout is not None and host else None for r in ranks]
                ranks = [r for r in placed if r is not None] if None not in placed else []
            return host, ranks
        return None

    def host_of_session(self, line_no: int) -> str | None:
        """The host of the last shell prompt before `line_no` (a pasted terminal session), if any."""
        host = None
        for at, shell in sorted(self.prompts):
            if at >= line_no:
                break
            host = shell
        return host

    def apply_nccl_processes(self) -> None:
        """Ranks and GPUs of signals printed by a process NCCL described; a log written by one NCCL process
        (a per-rank file, an excerpt of one rank) gives its rank and GPU to its unlabelled lines too."""
        if not self.nccl_procs:
            return
        only = next(iter(self.nccl_procs.values())) if len(self.nccl_procs) == 1 else None
        if only is not None and any(s.host not in (None, self._norm_host(only.host)) for s in self.signals):
            only = None  # other hosts write into this log too: an unlabelled line may be theirs
        for sig in self.signals:
            if sig.source != "log":
                continue
            proc = self.nccl_procs.get((sig.host, sig.pid)) if sig.host and sig.pid is not None else None
            unlabelled = sig.rank is None and sig.task is None and sig.pid is None
            if (proc is None and only is not None and unlabelled and sig.category in _DEVICE_CATEGORIES
                    and sig.host in (None, self._norm_host(only.host))):
                proc = only  # a line that names no other host than the one process's
            if proc is None:
                continue
            host = self._norm_host(proc.host) or proc.host
            if sig.rank is None:
                sig.rank = proc.rank
            if sig.host is None:
                sig.host, sig.host_from = host, "layout"
            if sig.host == host and sig.category in _DEVICE_CATEGORIES and (sig.gpu is None or _index_gpu(sig.gpu)):
                sig.gpu = f"{host}:{proc.pci}"

    def apply_gpu_inventory(self) -> None:
        """A GPU known by its index only is named by the bus id an inventory row of its host ties to that index
        (dcgm-exporter's labels, nvidia-smi's table or CSV): one spelling per device, the one it is replaced by."""
        for line_no, prefix_host, row in self.gpu_rows:
            host = self._norm_host(row.host or prefix_host) or self.host_of_session(line_no)
            if host is None and len(self.job_hosts) == 1:
                host = next(iter(self.job_hosts))
            if host is not None:
                self.gpu_bus.setdefault((host, row.index), row.pci)
        for sig in self.signals:
            if sig.gpu:
                sig.gpu = self.bus_spelling(sig.gpu)

    def bus_spelling(self, ref: str) -> str:
        """`host:5` -> `host:0000:9b:00` where an inventory row of that host says so; any other ref as it is."""
        if not self.gpu_bus or not _index_gpu(ref) or ":" not in ref:
            return ref
        host, _, index = ref.rpartition(":")
        found = self.gpu_bus.get((host, int(index)))
        return f"{host}:{found}" if found else ref

    # --------------------------------------------------------------- torchrun summaries

    def elastic_root(self) -> tuple[str | None, int | None] | None:
        """Host and rank of torchrun's first observed failure, if the log has its summary."""
        for entry in self.elastic:
            if entry.get("host") or entry.get("rank"):
                rank = int(entry["rank"]) if entry.get("rank") else None
                host = self._norm_host(entry.get("host")) or (self.host_of_rank(rank) if rank is not None else None)
                return host, rank
        return None

    def add_elastic(self) -> None:
        """torchrun's 'Root Cause' blocks: the first one names the first failed worker."""
        for entry in self.elastic[:4]:
            code = entry.get("exitcode")
            if code is None:
                continue
            exitcode = int(code)
            host = self._norm_host(entry.get("host"))
            rank = int(entry["rank"]) if entry.get("rank") else None
            signum = -exitcode if exitcode < 0 else (int(entry["signal"]) if entry.get("signal") else None)
            if signum == 9:
                cat, dom, sev, note = Category.HOST_OOM, FaultDomain.RESOURCE, "error", "killed by SIGKILL (usually the OOM killer)"
            elif signum == 7:
                cat, dom, sev, note = Category.HOST_OOM, FaultDomain.RESOURCE, "error", "killed by SIGBUS (shared memory exhausted)"
            elif signum == 11:
                cat, dom, sev, note = Category.APP_ERROR, FaultDomain.APPLICATION, "error", "crashed with SIGSEGV"
            elif signum in (6, 15, 2, 1):
                cat, dom, sev, note = Category.APP_ERROR, FaultDomain.APPLICATION, "warning", f"ended by {_SIGNALS[signum]}"
            else:
                cat, dom, sev, note = Category.APP_ERROR, FaultDomain.APPLICATION, "error", f"exited with code {exitcode}"
            if exitcode == self._dnr_code():
                sev, note = "fatal", f"exit code {exitcode}: the application asked not to be restarted"
            self.signals.append(Signal(
                category=cat, fault_domain=dom, severity=sev, role="cause" if sev == "fatal" else "symptom",
                condemns=False, source="log", line=f"torchrun root cause: host {host} rank {rank} exitcode {exitcode}",
                line_no=int(entry["line_no"]), pattern_id="elastic_failure_field", host=host, rank=rank,
                note=f"worker {note}", order=10**8,
            ))

    # --------------------------------------------------------------- scheduler, nodes, metrics

    def add_job(self, job: JobInfo) -> None:
        def fact(cat: Category, dom: FaultDomain, sev: str, text: str, *, role: str = "scheduler") -> None:
            self.signals.append(Signal(
                category=cat, fault_domain=dom, severity=sev, role=role, condemns=False, source="scheduler",
                line=text, order=10**9,
            ))

        state, reason = job.state, (job.reason or "")
        described = f"job {job.job_id} state {state.value}" + (f", reason {reason}" if reason else "")
        if job.exit_code is not None:
            described += f", exit code {job.exit_code}"
        lowered = reason.lower().replace("_", "").replace(" ", "")
        if state in (JobState.TIMEOUT, JobState.DEADLINE) or "timelimit" in lowered:
            fact(Category.TIME_LIMIT, FaultDomain.SCHEDULER, "fatal", described)
        if state in (JobState.NODE_FAIL, JobState.BOOT_FAIL) or "nodefail" in lowered or "nodedown" in lowered:
            fact(Category.NODE_FAILURE, FaultDomain.NODE, "fatal", described)
        if state == JobState.PREEMPTED or "preempt" in lowered:
            fact(Category.PREEMPTED, FaultDomain.SCHEDULER, "fatal", described)
        if state == JobState.OUT_OF_MEMORY or "outofmemory" in lowered:
            fact(Category.HOST_OOM, FaultDomain.RESOURCE, "fatal", described, role="cause")
        if job.exit_code == self._dnr_code():
            fact(Category.APP_ERROR, FaultDomain.APPLICATION, "fatal",
                 described + " (the application asked not to be restarted)", role="cause")

    def add_nodes(self, nodes: Sequence[NodeInfo]) -> None:
        job_nodes = self.job_hosts
        for node in nodes:
            if job_nodes and node.name not in job_nodes:
                continue
            down = node.state in {"DOWN", "FAIL", "FAILING"} or "NOT_RESPONDING" in node.flags
            reason = node.reason or ""
            ours = node.drained_by_jobmedic
            text = f"node {node.name} {node.state}{'+' + '+'.join(node.flags) if node.flags else ''}"
            if reason:
                text += f" reason: {reason}"
            gpu = _gpu_words(reason)
            if gpu is not None and (node.drained or down) and not ours:
                cat, dom, sev, condemns, note = gpu
                self.signals.append(Signal(cat, dom, sev, "scheduler", condemns, "node", text, host=node.name,
                                           note=note, order=10**9))
            elif down:
                self.signals.append(Signal(Category.NODE_FAILURE, FaultDomain.NODE, "fatal", "scheduler", True,
                                           "node", text, host=node.name, order=10**9))
            elif node.drained and not ours:
                self.signals.append(Signal(Category.NODE_FAILURE, FaultDomain.NODE, "warning", "symptom", False,
                                           "node", text, host=node.name, order=10**9))

    def add_metrics(self, facts: Sequence[EvidenceLine]) -> None:
        for fact in facts:
            text = fact.line[:MAX_LINE]
            gpu = _gpu_words(text)
            host = self._norm_host(fact.host)
            if gpu is not None:
                cat, dom, sev, condemns, note = gpu
            elif re.search(r"(?i)nvlink.{0,40}(error|crc|replay|recovery|down)", text):
                cat, dom, sev, condemns, note = Category.INTERCONNECT, FaultDomain.HARDWARE, "warning", False, "NVLink errors"
            else:
                continue
            m = re.search(r"GPU ([0-9]{1,3})(?: \(([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9])?)\))?", text)
            gpu_ref = None
            if m and host:
                gpu_ref = f"{host}:{(m.group(2) or m.group(1)).lower()}"
            self.signals.append(Signal(cat, dom, sev, "cause", condemns, "metrics", text, host=host,
                                       pattern_id=fact.pattern_id, note=note, gpu=gpu_ref, order=10**9))

    # --------------------------------------------------------------- hosts of ranks

    def srun_task_hosts(self) -> dict[int, str]:
        """Task id -> node from srun's own lines about its tasks ('srun: error: ndv4-0007: task 2: Exited with exit
        code 1', 'srun: error: node3: tasks 5-7: Killed'; the launcher reports): where a task ran, whatever the
        layout's arithmetic says (one srun task per node running torchrun, a layout given in ranks). Tasks named
        on two nodes: none."""
        seen: dict[int, set[str]] = {}
        for report in self.launches:
            host = self._norm_host(report.host) if report.launcher == "srun" else None
            if not host or (self.job_hosts and host not in self.job_hosts):
                continue
            for task in report.ids:
                seen.setdefault(task, set()).add(host)
        return {t: next(iter(h)) for t, h in seen.items() if len(h) == 1}

    def resolve_hosts(self) -> None:
        srun_tasks = self.srun_task_hosts()
        ranks = [s.rank for s in self.signals if s.rank is not None]
        world = max(ranks) + 1 if ranks else 0
        for sig in self.signals:
            if sig.host:
                continue
            if sig.source == "log" and sig.line_no is not None and self.prompts:
                sig.host = self.host_of_session(sig.line_no)
                if sig.host:
                    sig.host_from = "prefix"  # the session's prompt says where the command ran
                    if sig.gpu and (sig.gpu.count(":") == 2 or sig.gpu.isdigit()):
                        sig.gpu = f"{sig.host}:{sig.gpu}"
                    continue
            if sig.task is not None and sig.task in srun_tasks:
                sig.host = srun_tasks[sig.task]  # srun's own word on where the task ran
            elif sig.task is not None and self.layout is not None:
                sig.host = self.layout.node_of_rank(sig.task)
            if not sig.host and sig.rank is not None:
                sig.host = self.rank_host.get(sig.rank) or self._host_of_rank(sig.rank, world)
            if not sig.host and len(self.job_hosts) == 1 and sig.source == "log":
                sig.host = next(iter(self.job_hosts))
            if sig.host:
                sig.host_from = "layout"
                if sig.gpu and (sig.gpu.count(":") == 2 or sig.gpu.isdigit()):
                    sig.gpu = f"{sig.host}:{sig.gpu}"  # a bare PCI id or index from a line without a host

    def host_of_rank(self, rank: int) -> str | None:
        ranks = [s.rank for s in self.signals if s.rank is not None]
        world = max(ranks + [rank]) + 1
        return self.rank_host.get(rank) or self._host_of_rank(rank, world)

    def _host_of_rank(self, rank: int, world: int) -> str | None:
        layout = self.layout
        if layout is None or not layout.nodes:
            return None
        total = sum(layout.tasks_per_node) if len(layout.tasks_per_node) == len(layout.nodes) else 0
        if total and world <= total:
            return layout.node_of_rank(rank)
        # one Slurm task per node running torchrun: global ranks are blocks of ranks per node
        per_node = max(1, math.ceil(max(world, rank + 1) / len(layout.nodes)))
        index = rank // per_node
        return layout.nodes[index] if index < len(layout.nodes) else None


_DUMP_PID = re.compile(r"(?:\bpid[ =:]{0,2}|--pid[ =]{1,2}|\bgdb\b[^#]{0,80}?-p ?|^Process |Stack dump for [^ ]{1,32} +)([0-9]{1,9})")
_DUMP_LOCAL_RANK = re.compile(r"(?i)\blocal[_ -]?rank[ =:#]{0,2}([0-9]{1,6})")
_DUMP_RANK = re.compile(r"(?i)\b(?:global[_ ])?rank[ =:#]{0,2}([0-9]{1,6})")
_DUMP_TASK = re.compile(r"(?i)\btask[ =:#]{0,2}([0-9]{1,6})")
_HVD_LIST = re.compile(r"\[(missing|ready) ranks: ?([0-9][0-9, ]{0,4000})\]")
_HVD_ROW = re.compile(r"\[(?:missing|ready) ranks: ?[0-9]")  # a 'Stalled ops:' row: 'TENSOR [ready ranks: 3, 0]'
_LONG_BUS = re.compile(r"[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9]")  # nvidia-smi's spelling of a bus id
_LINK_DOWN = re.compile(r"mlx5_core [0-9a-f:.]{7,16} ([A-Za-z0-9_.-]{1,20}): Link down")
_RESUMED = re.compile(r"(?i)\bretrying \(?[0-9]{1,3} ?(/|of) ?[0-9]{1,3}\b|\b(restor|resum)(ing|ed) (training )?(from )?(the )?(latest |last )?checkpoint|(restarting|will restart) (the )?worker group")
_PREVIOUS_XID = re.compile(r"caused by previous Xid ([0-9]{1,4})")
PCI = re.compile(r"(?<![0-9A-Fa-f:])((?:[0-9A-Fa-f]{4}|[0-9A-Fa-f]{8}):[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-9])?(?![0-9A-Fa-f:])")



_DEVICE_CATEGORIES = {Category.GPU_HARDWARE, Category.CUDA_ERROR, Category.GPU_OOM, Category.NCCL_ERROR}


def _index_gpu(ref: str) -> bool:
    """`host:3` or `3`: a GPU known by its index only."""
    return ref.rsplit(":", 1)[-1].isdigit() and ref.count(":") <= 1


def _gpu_words(text: str) -> tuple[Category, FaultDomain, str, bool, str] | None:
    """GPU trouble named in free text (a drain reason, a metric fact)."""
    m = re.search(r"(?i)xid[ _:=(]{0,3}(?:code[ :=]{0,3})?([0-9]{1,4})", text)
    if m:
        info = xid_info(int(m.group(1)))
        return (_cat(info.category), FaultDomain(info.fault_domain), info.severity, info.condemns,
                f"Xid {info.code} ({info.name}); action: {info.action}")
    if re.search(r"(?i)(double[ _-]?bit|\bdbe\b|ecc_dbe|uncorrectable ecc|row[ _-]?remap[a-z_ ]{0,12}fail|"
                 r"fallen off the bus|gpu is lost|gpu (lost|dead|missing))", text):
        return Category.GPU_HARDWARE, FaultDomain.HARDWARE, "fatal", True, "GPU hardware fault"
    return None


def clean_text(text: str) -> str:
    """Text safe to serialise anywhere: lone surrogates (undecodable bytes) and NULs replaced."""
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "?")
