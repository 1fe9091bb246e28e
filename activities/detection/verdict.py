"""Attribution: all the evidence about one job -> one verdict (root cause, implicated nodes, why).

Pure code: no I/O, no clocks. `attribute(evidence)` screens the job's log window
with the pattern catalogue, turns every flagged line into a *signal* (category,
fault domain, severity, role, host, rank, GPU), adds signals from the
scheduler's view (job state, reason, exit code), node states and drain reasons
and GPU metric facts, then picks the root cause an operator would act on.

How the root cause is chosen (first step that applies wins):

1. A signal that condemns a GPU or node on its own (Xid 79/48/64/74/95/119/
   120/140..., "fallen off the bus", "GPU is lost", row-remap failure,
   uncorrectable ECC, a node DOWN in Slurm) - whatever else the log says: the
   NCCL timeouts, CUDA errors and tracebacks on other ranks are its victims.
   Sympathetic Xids (13, 31, 43, 45, 63, 94...) never condemn on their own.
2. The scheduler's own reason: preemption, node failure. Its *reason* beats
   free text: "preempted" next to a node-failure reason is a node failure, and
   "node died" with a preemption reason is a preemption.
3. Host OOM, then GPU OOM (a CUDA OOM reported through an NCCL WARN is still an
   OOM): a process that runs out of memory takes its peers down with it.
4. Software causes (CUDA errors, storage, interconnect, application, NCCL
   errors): the earliest in the log wins; what follows it is fallout. A device
   assert or illegal access beats the NCCL errors it causes.
5. NCCL watchdog timeouts, then communication hangs. Ranks that report a
   timeout are victims; ranks that do not report (or report an older sequence
   number, or are named by a monitored barrier) are suspects and implicate
   their hosts.
6. Time limit (the job was simply out of time).
7. Symptoms only (a worker killed with SIGKILL, a ChildFailedError, a closed
   socket): the likeliest cause behind them, with low confidence.
8. `hang_suspected` (progress stopped while RUNNING) with no cause -> hang.
9. Nothing -> none.

Ranks map to hosts through srun `--label` task ids and the job's task layout,
NCCL `host:pid:tid [dev]` prefixes, pdsh/syslog host prefixes and torchrun's
failure summary. The same node failing other jobs recently raises confidence.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from activities.detection.catalogue import Catalogue, PatternSpec, load_catalogue
from activities.detection import fallback
from activities.detection.hosts import NodeMap, mentioned_ips
from activities.detection.progress import parse_progress_line
from activities.detection.screen import Screener
from activities.detection.xid import xid_info
from workflows.contracts import (
    Category,
    EvidenceLine,
    FaultDomain,
    Implicated,
    JobEvidence,
    JobInfo,
    JobState,
    NodeInfo,
    Stream,
    Verdict,
)

MAX_LINE = 16384  # characters of one line any Python regex here ever sees
MAX_EVIDENCE = 12
MAX_SIGNAL_LINES = 20000  # flagged lines turned into signals (first ones and last ones kept)

# ----------------------------------------------------------------------------- screening seam

_SCREENERS: dict[int, tuple[Catalogue, Screener]] = {}


def screener_for(catalogue: Catalogue) -> Screener:
    """One screener per catalogue object (building a hyperscan database takes a moment)."""
    cached = _SCREENERS.get(id(catalogue))
    if cached is not None and cached[0] is catalogue:
        return cached[1]
    screener = Screener(catalogue.screen_patterns)
    _SCREENERS[id(catalogue)] = (catalogue, screener)
    return screener


# ----------------------------------------------------------------------------- line context

_SYSLOG = re.compile(
    r"^(?:<[0-9]{1,3}>)?(?:[A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{8,15}(?:Z|[+-][0-9:]{4,5})?) "
    r"([A-Za-z0-9][A-Za-z0-9._-]{0,62}) [A-Za-z0-9_./-]{1,40}(?:\[[0-9]{1,8}\])?: "
)
_STAMP = re.compile(
    r"^(?:\[ {0,6}[0-9]{1,8}\.[0-9]{1,9}\] "  # dmesg
    r"|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9][0-9] [0-9:]{8} [0-9]{4}\] "  # dmesg -T
    r"|\[?[0-9]{4}-[0-9]{2}-[0-9]{2}[ T_][0-9:.,]{5,15}(?:Z|[+-][0-9:]{4,5})?\]?[ :|-]{0,3}"  # ISO-ish
    r"|[A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} )"
)
_MPI_TAG = re.compile(r"^\[(?:[0-9]{1,6},)?([0-9]{1,6})\]<(?:stdout|stderr)>: ?")  # mpirun, horovodrun
_TORCH_RANK = re.compile(r"^\[(?:rank|RANK) ?([0-9]{1,6})\]: ?")
_SRUN_LABEL = re.compile(r"^ {0,6}([0-9]{1,6}): ")
_HOST_PREFIX = re.compile(r"^([A-Za-z][A-Za-z0-9._-]{0,62}): ")
_TEE_PREFIX = re.compile(r"^\[(?:default|[a-z_]{1,20})([0-9]{1,4})\]:")  # torchrun --tee: [default3]:
_RAY_PREFIX = re.compile(r"^\((?:[A-Za-z_]{0,40} ?pid=[0-9]{1,8}|raylet|gcs_server|autoscaler), ip=([0-9A-Fa-f.:]{3,45})\) ?")
_KUBECTL_PREFIX = re.compile(r"^\[pod/([A-Za-z0-9._-]{1,253})/[A-Za-z0-9._-]{1,63}\] ")
# an epilog or pdsh dump without the colon: "gpu-c21 [Mon Dec  2 11:00:00 2024] NVRM: ..."
_HOST_DMESG_PREFIX = re.compile(
    r"^([A-Za-z][A-Za-z0-9._-]{0,62}) (?=\[(?: {0,6}[0-9]{1,8}\.[0-9]{1,9}|[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9][0-9] [0-9:]{8} [0-9]{4})\] )"
)
_COMPOSE_PREFIX = re.compile(r"^([A-Za-z][A-Za-z0-9._-]{0,62}) +\| ")
_NCCL_PREFIX = re.compile(
    # newer NCCL puts the source location between the device and "NCCL": "[5] transport/net_ib.cc:1696 NCCL WARN"
    r"(?:^|[\s\]:>])([A-Za-z0-9][A-Za-z0-9._-]{0,62}):[0-9]{1,8}:[0-9]{1,8} \[([0-9]{1,3})\] "
    r"(?:[A-Za-z0-9_./-]{1,80}:[0-9]{1,6} )?NCCL "
)
_RANK_BRACKET = re.compile(r"\[(?:PG [^\]]{0,80}?)?Rank ([0-9]{1,6})\]")
_NOT_HOSTS = re.compile(
    r"(?i)^(?:epoch|step|iter|iteration|rank|batch|layer|cuda|device|dev|loss|lr|worker|task|line|"
    r"stage|phase|part|block|thread|proc|process|pid|error|warning|info|debug|note|node|srun|slurmstepd)[0-9_]*$"
)


@dataclass
class LineContext:
    """Who wrote a log line, as far as its prefixes tell."""

    host: str | None = None
    task: int | None = None  # Slurm task id (srun --label)
    rank: int | None = None  # torch global rank
    local_gpu: str | None = None  # NCCL "[dev]"
    local_rank: int | None = None  # torchrun --tee "[default3]:"
    text: str = ""  # the line without its prefixes


def _host_like(token: str, known: frozenset[str]) -> bool:
    if known:
        return token in known or token.split(".", 1)[0] in known
    if _NOT_HOSTS.match(token) or token.endswith(("Error", "Warning", "Exception")):
        return False
    return any(c.isdigit() for c in token) and not token.isdigit()


def parse_context(line: str, *, known_hosts: frozenset[str] = frozenset()) -> LineContext:
    """Peel launcher, syslog and timestamp prefixes off `line`; read host, task, rank and GPU."""
    ctx = LineContext()
    text = line[:MAX_LINE]
    for _ in range(8):
        m = _SYSLOG.match(text)
        if m:
            ctx.host = ctx.host or m.group(1)
            text = text[m.end():]
            continue
        m = _STAMP.match(text)
        if m and m.end() > 0:
            text = text[m.end():]
            continue
        m = _MPI_TAG.match(text)
        if m:
            ctx.rank = int(m.group(1)) if ctx.rank is None else ctx.rank
            text = text[m.end():]
            continue
        m = _TORCH_RANK.match(text)
        if m:
            ctx.rank = int(m.group(1)) if ctx.rank is None else ctx.rank
            text = text[m.end():]
            continue
        m = _SRUN_LABEL.match(text)
        if m:
            ctx.task = int(m.group(1)) if ctx.task is None else ctx.task
            text = text[m.end():]
            continue
        m = _HOST_PREFIX.match(text) or _COMPOSE_PREFIX.match(text) or _HOST_DMESG_PREFIX.match(text)
        if m and _host_like(m.group(1), known_hosts):
            ctx.host = ctx.host or m.group(1)
            text = text[m.end():]
            continue
        m = _TEE_PREFIX.match(text)
        if m:
            ctx.local_rank = int(m.group(1)) if ctx.local_rank is None else ctx.local_rank
            text = text[m.end():]
            continue
        m = _RAY_PREFIX.match(text) or _KUBECTL_PREFIX.match(text)
        if m:
            ctx.host = ctx.host or m.group(1)
            text = text[m.end():]
            continue
        break
    m = _NCCL_PREFIX.search(text)
    if m:
        ctx.host = ctx.host or m.group(1)
        ctx.local_gpu = m.group(2)
    m = _RANK_BRACKET.search(text)
    if m and ctx.rank is None:
        ctx.rank = int(m.group(1))
    ctx.text = text
    return ctx


# ----------------------------------------------------------------------------- signals


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

    @property
    def strong(self) -> bool:
        return self.severity in {"fatal", "error"}


_EXCEPTION_PATTERNS = {"python_exception", "python_exception_qualified"}
_FALLBACK_PATTERNS = {"fallback_uncaught_exception", "fallback_fatal_signal", "fallback_unknown"}
_GENERIC = _EXCEPTION_PATTERNS | {"cuda_error_generic", "nccl_error_generic", "connection_reset_generic"}
_STRUCTURE = {"python_traceback", "elastic_failure_field"}
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


class _Builder:
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
        self.rank_host: dict[int, str] = {}  # learnt from lines naming both
        self.tail: list[tuple[int, str]] = []  # the last lines of the output, flagged or not
        self.specific_lines: set[int] = set()  # lines a specific catalogue pattern already explains
        # stack dumps, per process that printed one: does any of its threads wait in a collective?
        self.dumps: dict[tuple, bool] = {}
        self._dumping: tuple | None = None  # the process whose dump the following unprefixed frames belong to
        # position of a line in the log as the verdict orders it -> the line's file line number and stream
        # (empty when the positions are the file's line numbers already)
        self.where: dict[int, EvidenceLine] = {}

    def cite(self, s: Signal) -> EvidenceLine:
        """A signal as the evidence line the verdict shows: file line number and stream for a log line."""
        line_no, stream = s.line_no, None
        placed = self.where.get(s.line_no) if s.line_no is not None and s.source == "log" else None
        if placed is not None:
            line_no, stream = placed.line_no, placed.stream
        return EvidenceLine(source=s.source, line=_clean(s.line[:2000]), line_no=line_no, pattern_id=s.pattern_id,
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
        if found is None or found.line_no in self.specific_lines:
            return None  # nothing, or a line the catalogue knows better (its signal decides)
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
        key = (ctx.host, ctx.task, ctx.rank)
        specific = [s for s in specs if s.id not in _GENERIC and s.id not in _STRUCTURE]
        if specific:
            self.specific_lines.add(line_no)
            specs = [s for s in specs if s.id not in _GENERIC]
        elif any(s.id not in _EXCEPTION_PATTERNS for s in specs if s.id in _GENERIC):
            specs = [s for s in specs if s.id not in _EXCEPTION_PATTERNS]
        if "python_exception" in {s.id for s in specs}:
            specs = [s for s in specs if s.id != "python_exception_qualified"]  # one exception, one signal
        if any(s.id in _DUMP_PATTERNS for s in specs):
            self._track_dump(ctx, specs, line)
        for spec in specs:
            if spec.id == "python_traceback":
                self.tracebacks[key] = line_no
                continue
            fields = spec.extract_fields(line)
            if spec.id == "elastic_failure_field":
                self._elastic_field(fields, line_no)
                continue
            if spec.id == "launcher_first_failed_rank":
                rank = fields.get("rank") or fields.get("container_rank")
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
            fields=fields, text=ctx.text, order=order,
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
                  if spec.id in _EXCEPTION_PATTERNS else None)
        if family is not None:
            sig.category, sig.fault_domain = family
        if "rank" in fields:
            sig.rank = int(fields["rank"])
        if "tasks" in fields:
            tasks = _task_ids(fields["tasks"])
            if tasks:
                sig.task = tasks[0]
                sig.fields["task_ids"] = ",".join(map(str, tasks))
        if sig.rank is not None and sig.host and (ctx.host or "host" in fields):
            self.rank_host.setdefault(sig.rank, sig.host)
        pci = fields.get("pci")
        if not pci and spec.category == Category.GPU_HARDWARE:
            m = _PCI.search(ctx.text)
            pci = m.group(1) if m else None  # "NVRM: GPU 0000:9b:00.0: GPU has fallen off the bus."
        if pci:
            pci = _norm_pci(pci)
            sig.gpu = f"{sig.host}:{pci.lower()}" if sig.host else pci.lower()
        elif fields.get("gpu_index"):
            sig.gpu = f"{sig.host}:{fields['gpu_index']}" if sig.host else fields["gpu_index"]
        elif ctx.local_gpu is not None and sig.host:
            sig.gpu = f"{sig.host}:{ctx.local_gpu}"
        if spec.id == "nvrm_xid" and fields.get("xid"):
            info = xid_info(int(fields["xid"]))
            earlier = _PREVIOUS_XID.search(line)
            if earlier and not info.condemns:
                # "Xid 45 ... caused by previous Xid 149": the line is evidence of the earlier one on this GPU
                info = xid_info(int(earlier.group(1)))
            sig.category, sig.fault_domain = _cat(info.category), FaultDomain(info.fault_domain)
            sig.severity, sig.condemns = info.severity, info.condemns
            sig.note = f"Xid {info.code} ({info.name}): {info.meaning}; action: {info.action}"
        elif spec.id in _EXCEPTION_PATTERNS:
            return self._exception(sig, ctx, line_no)
        elif spec.id == "srun_task_exit_code" and fields.get("exit_code") == str(self._dnr_code()):
            sig.role, sig.severity = "cause", "fatal"
            sig.note = f"exit code {fields['exit_code']}: the application asked not to be restarted"
        elif spec.id == "nvswitch_sxid" and fields.get("fatality") == "Fatal":
            return None  # nvswitch_sxid_fatal carries it
        elif spec.id == "dataloader_killed" and fields.get("signal", "").strip() == "Bus error":
            sig.note = "the worker died of SIGBUS: /dev/shm is too small for the DataLoader"
        return sig

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
        if short in _SYMPTOM_EXCEPTIONS:
            sig.role, sig.severity = "symptom", "warning"
        elif started is None:
            sig.role = "symptom"  # an exception printed without a traceback (logged, maybe handled)
        sig.note = f"{exc}: {message}".strip() if message else exc
        return sig

    def _track_dump(self, ctx: LineContext, specs: list[PatternSpec], line: str) -> None:
        own = (ctx.host, ctx.task, ctx.rank) if (ctx.task is not None or ctx.rank is not None) else None
        header = next((s for s in specs if s.id in ("stack_dump_header", "faulthandler_timeout_dump")), None)
        if header is not None:
            rank = header.extract_fields(line).get("rank")
            if own is None and rank is not None:
                own = (ctx.host, None, int(rank))
            if own is not None:
                self._dumping = own
                self.dumps.setdefault(own, False)
        source = own or self._dumping
        if source is not None and any(s.id == "stack_frame_in_collective" for s in specs):
            self.dumps[source] = True

    def progressed_after(self, line_no: int, *, lines: int = 2) -> bool:
        """Training went on after `line_no`: `lines` progress lines later in the output, the number growing."""
        seen: list[int] = []
        for n, line in self.tail:
            if n <= line_no:
                continue
            sample = parse_progress_line(self._strip(line))
            if sample is not None and sample.iteration is not None:
                seen.append(sample.iteration)
        return len(seen) >= lines and seen[-1] > seen[0]

    def dump_culprits(self) -> list[tuple]:
        """Processes whose dump shows no thread in a collective while the others' do: the stuck ones."""
        waiting = [k for k, in_collective in self.dumps.items() if in_collective]
        elsewhere = [k for k, in_collective in self.dumps.items() if not in_collective]
        if not waiting or not elsewhere or len(elsewhere) > max(1, len(self.dumps) // 2):
            return []
        return elsewhere

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

    def resolve_hosts(self) -> None:
        ranks = [s.rank for s in self.signals if s.rank is not None]
        world = max(ranks) + 1 if ranks else 0
        for sig in self.signals:
            if sig.host:
                continue
            if sig.task is not None and self.layout is not None:
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


_PREVIOUS_XID = re.compile(r"caused by previous Xid ([0-9]{1,4})")
_PCI = re.compile(r"(?<![0-9A-Fa-f:])((?:[0-9A-Fa-f]{4}|[0-9A-Fa-f]{8}):[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-9])?(?![0-9A-Fa-f:])")
MAX_TASK_IDS = 64


def _norm_pci(pci: str) -> str:
    """`00000000:3B:00.0` -> `0000:3b:00`: one spelling per GPU whatever tool printed it."""
    parts = pci.lower().split(".")[0].split(":")
    if len(parts) == 3 and len(parts[0]) == 8:
        parts[0] = parts[0][4:]
    return ":".join(parts)


def _task_ids(text: str) -> list[int]:
    """`0`, `1-3`, `0,2-3` -> the task ids (at most MAX_TASK_IDS)."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            continue
        for t in range(int(lo), min(int(hi or lo), int(lo) + MAX_TASK_IDS) + 1):
            out.append(t)
            if len(out) >= MAX_TASK_IDS:
                return out
    return out


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


# ----------------------------------------------------------------------------- the decision

_SOFTWARE = (Category.CUDA_ERROR, Category.DATA_IO, Category.INTERCONNECT, Category.APP_ERROR, Category.NCCL_ERROR)
_SOFTWARE_TIE = {c: i for i, c in enumerate(_SOFTWARE)}
_CONDEMN_ORDER = (Category.GPU_HARDWARE, Category.INTERCONNECT, Category.NODE_FAILURE)
_SYMPTOM_ORDER = (
    Category.HOST_OOM, Category.NODE_FAILURE, Category.PREEMPTED, Category.GPU_OOM, Category.DATA_IO,
    Category.CUDA_ERROR, Category.APP_ERROR, Category.INTERCONNECT, Category.NCCL_ERROR, Category.NCCL_TIMEOUT,
    Category.GPU_HARDWARE, Category.HANG, Category.TIME_LIMIT,
)
_SIGNED = {Category.APP_ERROR, Category.CUDA_ERROR, Category.GPU_OOM, Category.DATA_IO, Category.UNKNOWN}


@dataclass
class _Choice:
    category: Category
    signals: list[Signal]
    base: float
    why: str = ""
    hosts: list[str] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    victims: list[Signal] = field(default_factory=list)


def _choose(b: _Builder, evidence: JobEvidence) -> _Choice:
    sigs = b.signals
    strong = [s for s in sigs if s.strong and s.role in ("cause", "scheduler")]
    job = evidence.job
    job_failed = job is not None and (job.state.failed or (job.exit_code or 0) != 0)
    job_fine = job is not None and not job_failed and job.state in (JobState.COMPLETED, JobState.RUNNING)
    if job is not None and job.state == JobState.COMPLETED and not job_failed:
        return _Choice(Category.NONE, [], 0.0)  # Slurm says it finished cleanly: whatever it printed was survived
    ending = None if job_fine else b.ending_exception()
    killed = None if job_fine else b.fatal_signal()
    # the log itself says a process died: its output ends in an exception, a signal, a launcher's failure report
    log_failed = ending is not None or killed is not None or any(
        s.pattern_id in _DEATH_REPORTS or (s.pattern_id == "elastic_failure_field") for s in sigs)
    job_failed = job_failed or (job is None and log_failed) or bool(b.elastic and not job_fine)

    # 1. condemning hardware/node evidence
    condemning = [s for s in strong if s.condemns]
    if condemning:
        for cat in _CONDEMN_ORDER + tuple(Category):
            chosen = [s for s in condemning if s.category == cat]
            if chosen:
                return _Choice(cat, chosen, 0.9)

    sched = {c: [s for s in strong if s.role == "scheduler" and s.category == c] for c in Category}
    node_auth = sched[Category.NODE_FAILURE]
    preempt_auth = sched[Category.PREEMPTED]
    # 2. the scheduler's reason beats the words around it
    if preempt_auth and node_auth:
        nodefail_state = job is not None and job.state == JobState.NODE_FAIL
        node_lines = [s for s in node_auth if s.source in ("log", "node")]
        if nodefail_state or node_lines:
            return _Choice(Category.NODE_FAILURE, node_auth, 0.85,
                           why="the scheduler gives a node failure as the reason; the preemption wording is its side effect")
        return _Choice(Category.PREEMPTED, preempt_auth, 0.85)
    if preempt_auth:
        words = [s for s in sigs if s.category == Category.NODE_FAILURE and s.role == "symptom"]
        why = "the scheduler's reason is preemption; the 'node died' messages are how the ranks saw it" if words else ""
        return _Choice(Category.PREEMPTED, preempt_auth, 0.9, why=why)
    if node_auth:
        return _Choice(Category.NODE_FAILURE, node_auth, 0.85)

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
            return _Choice(cat, chosen, base)

    # a node the framework saw die (Ray, MPI daemons, SSH sessions): its peers' errors are fallout
    node_deaths = [s for s in causes if s.category == Category.NODE_FAILURE]
    if node_deaths:
        return _Choice(Category.NODE_FAILURE, node_deaths, 0.8)

    # non-condemning hardware (contained ECC) is still the reason the process died
    hw = [s for s in causes if s.category == Category.GPU_HARDWARE]
    if hw:
        return _Choice(Category.GPU_HARDWARE, hw, 0.75)

    # 4. software causes: the earliest wins, but a generic exception followed closely by a specific
    #    error from the same process is that error's traceback (the last exception is what matters)
    software = [s for s in causes if s.category in _SOFTWARE]
    software = [s for s in software if not _superseded(s, software)]
    if software:
        first = min(software, key=lambda s: (s.order, _SOFTWARE_TIE[s.category]))
        chosen = [s for s in software if s.category == first.category]
        base = 0.85 if first.severity == "fatal" else 0.75
        return _Choice(first.category, chosen, base)

    # 5. NCCL timeouts (they say who is waiting on whom), then hangs of the watchdog itself
    timeouts = [s for s in causes if s.category == Category.NCCL_TIMEOUT]
    if timeouts and not (sched[Category.TIME_LIMIT] and evidence.hang_suspected):
        return _nccl_timeout_choice(b, timeouts, evidence)
    hang = [s for s in causes if s.category == Category.HANG]
    recovered: set[int] = set()
    if hang and b.progressed_after(max(s.line_no or 0 for s in hang)):
        recovered = {id(s) for s in sigs if s.category == Category.HANG}  # a stall training got over
    elif hang:
        return _hang_choice(b, hang)

    # 6. out of time
    if sched[Category.TIME_LIMIT]:
        if evidence.hang_suspected:
            return _Choice(Category.HANG, [_hang_fact(evidence), *sched[Category.TIME_LIMIT]], 0.7,
                           why="progress had stopped before the time limit ended the job")
        return _Choice(Category.TIME_LIMIT, sched[Category.TIME_LIMIT], 0.9)

    # 7. the output ends in an uncaught exception: what the process died of
    if ending is not None and before_cutoff(ending):
        b.signals.append(ending)
        return _Choice(Category.APP_ERROR, [ending], 0.65, why="nothing more specific is in the log")

    # 8. a process that crashed on a signal of its own (SIGSEGV, SIGBUS, SIGILL, SIGFPE)
    if killed is not None and before_cutoff(killed) and killed.text not in _OUTSIDE_SIGNALS:
        b.signals.append(killed)
        return _Choice(killed.category, [killed], 0.6, why="only the way the process died is known")

    # 9. symptoms only (and, for a job known to have failed, warnings)
    weak = [s for s in sigs if s.role in ("symptom", "cause") and s.severity in ("fatal", "error")]
    if not job_failed:
        weak = [s for s in weak if not _ambiguous(s)]
    if job_failed:
        weak += [s for s in sigs if s.severity == "warning" and s.category != Category.NONE]
    weak = [s for s in weak if before_cutoff(s) and id(s) not in recovered]
    if any(s.pattern_id not in _DEATH_REPORTS for s in weak):
        weak = [s for s in weak if s.pattern_id not in _DEATH_REPORTS]  # "a worker failed" says nothing of why
    for cat in _SYMPTOM_ORDER:
        chosen = [s for s in weak if s.category == cat]
        if chosen:
            if cat == Category.NCCL_TIMEOUT:
                choice = _nccl_timeout_choice(b, chosen, evidence)
                choice.base = 0.5
                return choice
            return _Choice(cat, chosen, 0.5, why="only indirect signs point this way")

    # a process killed from outside (SIGKILL: the OOM killer or srun ending the rest; SIGABRT: a watchdog)
    if killed is not None and before_cutoff(killed):
        b.signals.append(killed)
        return _Choice(killed.category, [killed], 0.5, why="only the way the process died is known")

    # 10. a hang without words
    if evidence.hang_suspected:
        return _Choice(Category.HANG, [_hang_fact(evidence)], 0.6, hosts=sorted(set(evidence.straggler_hosts)))
    # 11. a failed job is never "nothing": say that the cause is unknown, with what the end of the output shows
    if job_failed:
        unknown = b.unknown()
        b.signals.append(unknown)
        return _Choice(Category.UNKNOWN, [unknown], 0.3, why="the job failed and no known failure explains it")
    return _Choice(Category.NONE, [], 0.0)


# launcher lines that report a worker's death (the cause is elsewhere, but something died)
_DUMP_PATTERNS = {"stack_dump_header", "faulthandler_timeout_dump", "stack_frame_in_collective"}
_OUTSIDE_SIGNALS = {"signal 9", "signal 6"}  # Fallback.signature_text of kills that usually come from outside
_DEATH_REPORTS = {"elastic_child_failed", "elastic_worker_failed", "srun_task_exit_code", "hydra_job_failed"}


# symptoms that also show up in healthy runs (HTTP retries, handled exceptions, chatter about nodes)
_AMBIGUOUS_PATTERNS = {
    "connection_reset_generic", "c10d_store_failure", "torch_dist_network_error", "node_died_words",
    "preempted_words", "slurm_exceeded_memory", "gloo_transport_failure", "nccl_socket_peer_closed",
}


def _ambiguous(s: Signal) -> bool:
    if s.pattern_id in _AMBIGUOUS_PATTERNS:
        return True
    return s.pattern_id in _EXCEPTION_PATTERNS and s.role == "symptom"


def _hang_fact(evidence: JobEvidence) -> Signal:
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


def _survived(b: _Builder, choice: _Choice, evidence: JobEvidence) -> bool:
    """The job kept training after everything the choice rests on: a worker OOM-killed and retried, a
    handled error. Not for a job the scheduler says failed, nor for a GPU or node condemned outright."""
    job = evidence.job
    if choice.category in (Category.NONE, Category.UNKNOWN) or not choice.signals:
        return False
    if job is None or job.state != JobState.RUNNING or (job.exit_code or 0) != 0:
        return False
    if any(s.condemns or s.source != "log" for s in choice.signals):
        return False
    last = max(s.line_no or 0 for s in choice.signals)
    return b.progressed_after(last, lines=SURVIVED_PROGRESS_LINES)


def _hang_choice(b: _Builder, hang: list[Signal]) -> _Choice:
    """A hang; when stack dumps show every process but a few waiting in a collective, those few are stuck."""
    culprits = b.dump_culprits()
    ranks: set[int] = set()
    hosts: set[str] = set()
    for host, task, rank in culprits:
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
    return _Choice(Category.HANG, hang, 0.75, why=why, hosts=sorted(hosts), ranks=sorted(ranks))


def _superseded(s: Signal, others: list[Signal]) -> bool:
    if s.pattern_id not in _EXCEPTION_PATTERNS or s.line_no is None:
        return False
    return any(
        t.pattern_id not in _EXCEPTION_PATTERNS and t.line_no is not None and 0 < t.line_no - s.line_no <= 40
        and (t.host, t.task, t.rank) == (s.host, s.task, s.rank)
        for t in others
    )


def _nccl_timeout_choice(b: _Builder, timeouts: list[Signal], evidence: JobEvidence) -> _Choice:
    """Victims report the timeout; the rank that did not (or is behind) is the suspect."""
    seq_of: dict[int, int] = {}
    hosts_reporting: set[str] = set()
    suspects: set[int] = set()
    for s in timeouts:
        if s.fields.get("suspect_rank"):
            suspects.add(int(s.fields["suspect_rank"]))
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
    reporters = set(seq_of)
    enqueued = {s.rank: int(s.fields["enqueued"]) for s in timeouts if s.rank is not None and s.fields.get("enqueued")}
    if len(enqueued) >= 2 and len(set(enqueued.values())) > 1:
        most = max(enqueued.values())
        suspects |= {r for r, n in enqueued.items() if n < most}  # it never enqueued what the others wait on
    known_seqs = {r: q for r, q in seq_of.items() if q >= 0}
    if len(set(known_seqs.values())) > 1:
        newest = max(known_seqs.values())
        suspects |= {r for r, q in known_seqs.items() if q < newest}
    if not suspects and len(reporters) >= 2 and max(reporters) < 65536:
        world = _world_size(evidence.job, reporters)
        silent = set(range(world)) - reporters
        if silent and len(silent) <= max(1, world // 4) and len(silent) < len(reporters):
            suspects |= silent
    hosts: set[str] = set()
    for r in suspects:
        h = b.host_of_rank(r)
        if h:
            hosts.add(h)
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
    return _Choice(Category.NCCL_TIMEOUT, timeouts, base, why=why, hosts=sorted(hosts), ranks=sorted(suspects))


def _world_size(job: JobInfo | None, reporters: set[int]) -> int:
    seen = max(reporters) + 1
    if job is not None:
        layout_total = sum(job.layout.tasks_per_node) if job.layout.tasks_per_node else 0
        if layout_total >= seen:
            return layout_total
        if job.num_tasks and job.num_tasks >= seen:
            return job.num_tasks
    return seen


# ----------------------------------------------------------------------------- signature


_NORMALISE = [
    (re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"\b[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-9])?\b"), "<pci>"),
    (re.compile(r"\b[0-9]{1,3}(?:\.[0-9]{1,3}){3}(?::[0-9]+|<[0-9]+>)?"), "<ip>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"[0-9]+"), "#"),
    (re.compile(r"\s+"), " "),
]


def normalise_error_text(text: str, *, hosts: Iterable[str] = ()) -> str:
    """The error text with hosts, addresses and numbers stripped, so two attempts compare equal."""
    out = text[:2000]
    for host in sorted(set(hosts), key=len, reverse=True):
        if host:
            out = out.replace(host, "<host>")
    out = re.sub(r"\b[a-z][a-z0-9-]*[0-9][a-z0-9-]*(?:\.[a-z0-9.-]+)?\b", "<host>", out)
    for rx, repl in _NORMALISE:
        out = rx.sub(repl, out)
    return out.strip()


def _signature(category: Category, primary: Signal | None, hosts: Iterable[str]) -> str | None:
    if category not in _SIGNED or primary is None:
        return None
    text = primary.note if primary.pattern_id in _EXCEPTION_PATTERNS and primary.note else (primary.text or primary.line)
    if primary.pattern_id in _FALLBACK_PATTERNS:
        text = primary.text  # the exception type, the signal, or the exit code and last line
    norm = normalise_error_text(text, hosts=hosts)
    if not norm:
        return None
    return hashlib.sha256(f"{category.value}|{norm}".encode("utf-8", "replace")).hexdigest()[:16]


# ----------------------------------------------------------------------------- public API


def attribute(evidence: JobEvidence, *, catalogue: Catalogue | None = None) -> Verdict:
    """The verdict for one job from everything known about it (pure; never raises on odd input).

    Lines that come screened (`evidence.window` and `evidence.hits`) are not screened again;
    raw `evidence.log_lines` are screened here, once.
    """
    catalogue = catalogue or load_catalogue()
    if evidence.window or evidence.hits:
        numbered, hits, where = _placed(evidence)
        return _attribute(evidence, numbered, catalogue=catalogue, hits=hits, tail=None, where=where)
    first = evidence.log_first_line_no
    numbered = [(first + i, line) for i, line in enumerate(evidence.log_lines)]
    return _attribute(evidence, numbered, catalogue=catalogue, hits=None, tail=None, where={})


def attribute_lines(
    evidence: JobEvidence,
    numbered_lines: Sequence[tuple[int, str]],
    *,
    catalogue: Catalogue | None = None,
    hits: Iterable[EvidenceLine] | None = None,
    tail: Sequence[tuple[int, str]] | None = None,
) -> Verdict:
    """Like `attribute`, for a sparse set of (line number, line) pairs, e.g. only the flagged lines of a big file.

    `evidence.log_lines`, `window` and `hits` are ignored here. Pass `hits` when the lines were screened
    already (they are not screened again), and `tail` (the last lines of the output, flagged or not) when
    `numbered_lines` holds only flagged lines.
    """
    return _attribute(evidence, numbered_lines, catalogue=catalogue or load_catalogue(), hits=hits, tail=tail, where={})


def _attribute(
    evidence: JobEvidence,
    numbered_lines: Sequence[tuple[int, str]],
    *,
    catalogue: Catalogue,
    hits: Iterable[EvidenceLine] | None,
    tail: Sequence[tuple[int, str]] | None,
    where: dict[int, EvidenceLine],
) -> Verdict:
    if hits is None:
        hits = _screen_numbered(catalogue, numbered_lines)
    b = _Builder(evidence, catalogue)
    b.where = where
    b.tail = [(n, line[:MAX_LINE]) for n, line in (numbered_lines[-fallback.TAIL_LINES:] if tail is None else tail)]
    b.add_log(numbered_lines, hits)
    b.add_elastic()
    if evidence.job is not None:
        b.add_job(evidence.job)
    job = evidence.job
    if job is None or not (job.state == JobState.COMPLETED and (job.exit_code or 0) == 0):
        # a job that finished cleanly is not explained by a node that went bad afterwards
        b.add_nodes(evidence.nodes)
        b.add_metrics(evidence.metric_facts)
    b.resolve_hosts()
    choice = _choose(b, evidence)
    if _survived(b, choice, evidence):
        choice = _Choice(Category.NONE, [], 0.0)
    return _verdict(b, choice, evidence, catalogue)


def _screen_numbered(catalogue: Catalogue, numbered: Sequence[tuple[int, str]]) -> list[EvidenceLine]:
    """Raw numbered lines, screened once; each hit carries the line's own number."""
    lines = [line[:MAX_LINE] for _, line in numbered]
    hits = screener_for(catalogue).scan_lines(lines, first_line_no=0)
    return [hit.model_copy(update={"line_no": numbered[hit.line_no][0]})
            for hit in hits if 0 <= hit.line_no < len(numbered)]


_STREAM_ORDER = {Stream.OUTPUT: 0, Stream.STDOUT: 0, Stream.STDERR: 1, None: 2}


def _placed(evidence: JobEvidence) -> tuple[list[tuple[int, str]], list[EvidenceLine], dict[int, EvidenceLine]]:
    """Screened log lines in the order the verdict reads them: each stream's lines by file line number,
    stdout before stderr (as one text, the way the output reads when both go to one file).

    Returns (position, text) pairs, the hits at those positions, and position -> the line's place in its file.
    """
    text: dict[tuple[int, int], str] = {}
    place: dict[tuple[int, int], EvidenceLine] = {}
    for item in [*evidence.window, *evidence.hits]:
        if item.line_no is None:
            continue
        key = (_STREAM_ORDER.get(item.stream, 2), item.line_no)
        if key not in text:
            text[key] = item.line
            place[key] = EvidenceLine(source="log", line_no=item.line_no, stream=item.stream)
    position = {key: i + 1 for i, key in enumerate(sorted(text))}
    numbered = [(position[key], text[key]) for key in sorted(text)]
    hits = [h.model_copy(update={"line_no": position[(_STREAM_ORDER.get(h.stream, 2), h.line_no)]})
            for h in evidence.hits if h.line_no is not None and h.pattern_id]
    where = {position[key]: place[key] for key in position}
    return numbered, hits, where


def _verdict(b: _Builder, choice: _Choice, evidence: JobEvidence, catalogue: Catalogue) -> Verdict:
    cat = choice.category
    sigs = sorted(choice.signals, key=lambda s: (s.order, s.line_no or 0))
    if cat == Category.NONE:
        return _none_verdict(b, evidence)
    primary = _primary(cat, sigs, b)
    domain = primary.fault_domain if primary else _default_domain(cat)
    # the scheduler said it; the scheduler's own domain is not the interesting one for node failures
    if cat == Category.NODE_FAILURE:
        domain = FaultDomain.HARDWARE if any(s.fault_domain == FaultDomain.HARDWARE for s in sigs) else FaultDomain.NODE
    if cat == Category.HANG:
        domain = FaultDomain.UNKNOWN
    hosts: set[str] = set(choice.hosts)
    ranks: set[int] = set(choice.ranks)
    gpus: set[str] = set()
    if _implicates_hosts(cat, domain):
        any_condemns = any(x.condemns for x in sigs)
        if cat in (Category.NODE_FAILURE, Category.GPU_HARDWARE) and any(x.host_from == "message" for x in sigs):
            sigs_for_hosts = [x for x in sigs if x.host_from == "message" or x.source == "node"]
        else:
            sigs_for_hosts = sigs
        for s in sigs_for_hosts:
            if any_condemns and not s.condemns:
                continue  # the condemning lines name the node; the rest may come from victims
            if cat == Category.INTERCONNECT and not (s.condemns or s.severity == "fatal" or s.host_from == "message"):
                continue  # a rank that lost its peer is not the faulty one (a host the line names may be)
            if s.host:
                hosts.add(s.host)
    for s in sigs:
        if s.rank is not None and cat != Category.NCCL_TIMEOUT and s.role != "scheduler":
            ranks.add(s.rank)
        elif s.rank is None and "task_ids" in s.fields and cat != Category.NCCL_TIMEOUT:
            # "srun: error: node3: tasks 5-7: Out Of Memory": Slurm's task ids are the ranks
            ranks.update(int(t) for t in s.fields["task_ids"].split(","))
        if s.gpu and cat in (Category.GPU_HARDWARE, Category.CUDA_ERROR, Category.GPU_OOM, Category.INTERCONNECT):
            gpus.add(s.gpu)
    if cat == Category.CUDA_ERROR and not hosts and domain != FaultDomain.APPLICATION:
        # a CUDA error is the code's unless the driver logged an Xid on that host too: then suspect the GPU
        erring = {s.host for s in sigs if s.host}
        root = b.elastic_root()
        if not erring and root is not None and root[0]:
            erring = {root[0]}  # torchrun's first failed worker is where the CUDA error happened
        xid_hosts = {s.host for s in b.signals if s.pattern_id == "nvrm_xid"}
        if None in xid_hosts and len(erring) == 1:
            xid_hosts |= erring  # a bare dmesg line printed by the job: the host it ran on
        if any(s.pattern_id in _DEVICE_CUDA_ERRORS for s in sigs):
            xid_hosts |= erring  # the error text itself points to the device
        hosts |= erring & xid_hosts
    if cat == Category.DATA_IO and not hosts:
        hosts |= _local_mount(sigs, b)
    if cat == Category.CUDA_ERROR and not hosts and domain == FaultDomain.SYSTEM_SOFTWARE:
        # a driver/runtime mismatch on some nodes only is those nodes' software; on all of them, the image's
        erring = {s.host for s in sigs if s.host}
        if erring and b.job_hosts and erring < b.job_hosts:
            hosts |= erring
    link_lines = sigs if cat == Category.INTERCONNECT else [
        s for s in b.signals if s.category in (Category.NCCL_ERROR, Category.INTERCONNECT) and s.source == "log"]
    if cat in (Category.INTERCONNECT, Category.NCCL_ERROR, Category.NCCL_TIMEOUT) and any(s.peers for s in link_lines):
        blamed, why = _link_blame(link_lines, b.signals)
        if blamed and (cat == Category.INTERCONNECT or not hosts):
            if cat == Category.INTERCONNECT:
                hosts = set(blamed)
            else:
                hosts |= set(blamed)
            choice.why = (choice.why + "; " if choice.why else "") + why
    if cat == Category.INTERCONNECT and hosts and "far end" not in choice.why:
        far = [s for s in sigs if s.host in hosts and s.fields.get("peer") and s.host_from == "message"]
        if far:
            choice.why = (choice.why + "; " if choice.why else "") + (
                f"{len(far)} failed link(s) name {', '.join(sorted({s.host for s in far}))} as their far end")
    root = b.elastic_root()
    if root is not None and cat not in (Category.NCCL_TIMEOUT, Category.HANG, Category.PREEMPTED, Category.TIME_LIMIT):
        if not hosts and root[0] and _implicates_hosts(cat, domain):
            hosts.add(root[0])
        if root[1] is not None and not ranks:
            ranks.add(root[1])  # torchrun's first observed failure: the rank that went first
    if cat == Category.HANG:
        hosts |= set(evidence.straggler_hosts)
    if cat in (Category.NODE_FAILURE,) and not hosts:
        hosts |= {s.host for s in b.signals if s.source == "node" and s.category == cat and s.host}
    if cat in (Category.NCCL_TIMEOUT, Category.NCCL_ERROR, Category.HANG, Category.INTERCONNECT) and not hosts:
        repeat = [h for h in sorted(b.job_hosts) if evidence.node_failure_counts.get(h, 0) >= 2]
        if len(repeat) == 1:
            hosts.add(repeat[0])
            choice.why = (choice.why + "; " if choice.why else "") + (
                f"{repeat[0]} failed {evidence.node_failure_counts[repeat[0]]} other jobs recently")
    if cat == Category.INTERCONNECT and not hosts:
        # a transport error with no peer in it is the reporter's own NIC (RC: -22 opening its endpoint);
        # when a single node reports them, it is the one
        local = {s.host for s in sigs if s.host and not s.peers and s.host_from in ("prefix", "layout")}
        if len(local) == 1 and (len(b.job_hosts) > 1 or not b.job_hosts):
            hosts |= local
            choice.why = (choice.why + "; " if choice.why else "") + (
                f"only {next(iter(local))} reports the transport failing, naming no peer")
    if hosts and not ranks and cat in (Category.GPU_HARDWARE, Category.NODE_FAILURE, Category.CUDA_ERROR,
                                       Category.DATA_IO, Category.INTERCONNECT):
        # the ranks that crashed on the blamed node are where it showed
        ranks |= {s.rank if s.rank is not None else s.task for s in b.signals
                  if s.host in hosts and s.source == "log" and s.strong and (s.rank is not None or "tasks" in s.fields)
                  and s.category in _RANK_CRASH and (s.rank is not None or s.task is not None)}
        ranks.discard(None)  # type: ignore[arg-type]
    if hosts:  # a GPU is evidence on a blamed node; the far end's view of its own device is not
        gpus = {g for g in gpus if g.split(":", 1)[0] in hosts or ":" not in g}
    confidence = _confidence(choice, b, evidence, hosts)
    evidence_lines = _evidence_lines(cat, sigs, b)
    explanation = _explain(cat, domain, primary, choice, sigs, b, evidence, sorted(hosts), sorted(ranks), catalogue)
    return Verdict(
        category=cat,
        fault_domain=domain,
        implicated=Implicated(hosts=sorted(hosts), ranks=sorted(ranks), gpus=sorted(gpus)),
        confidence=round(confidence, 3),
        evidence=evidence_lines,
        explanation=explanation,
        deterministic_signature=_signature(cat, primary, b.known_hosts | hosts),
    )


_IB_LOCAL_STATUS = {"1", "2", "3", "4", "8"}  # ibv_wc_status LOC_LEN, LOC_QP_OP, LOC_EEC_OP, LOC_PROT, MW_BIND


def _link_blame(sigs: list[Signal], everything: list[Signal]) -> tuple[list[str], str]:
    """Which end of a failed link the evidence points to.

    Each line that names a peer is one vote (reporter, peer). A node named as the peer by two or
    more reporters is the common end; a reporter that lost two or more different peers is itself
    the broken end; a single pair blames the far end, since the reporter is the one still alive to
    complain, unless the reporter's own device errors are in the log too.
    """
    local = sorted({s.host for s in sigs if s.host and s.fields.get("wc_status") in _IB_LOCAL_STATUS})
    if local:
        return local, f"the work completion status on {', '.join(local)} is a local error: its own NIC or memory registration"
    pairs = {(s.host, p) for s in sigs for p in s.peers if s.host != p}
    if not pairs:
        return [], ""
    as_peer: dict[str, set] = {}
    as_reporter: dict[str, set] = {}
    for reporter, peer in pairs:
        as_peer.setdefault(peer, set()).add(reporter)
        if reporter:
            as_reporter.setdefault(reporter, set()).add(peer)
    common = sorted(p for p, who in as_peer.items() if len(who) >= 2)
    if common:
        return common, f"{', '.join(common)} is the far end named by {max(len(as_peer[p]) for p in common)} reporting nodes"
    broken = sorted(r for r, peers in as_reporter.items() if len(peers) >= 2)
    if broken:
        return broken, f"{', '.join(broken)} lost its links to several peers: the fault is on its side"
    reporter, peer = sorted(pairs, key=lambda p: (p[0] or "", p[1]))[0]
    local_device = [s for s in everything if s.host == reporter and s.condemns]
    if reporter and local_device:
        return [reporter], f"{reporter} reports device errors of its own; {peer} is the far end of its failed link"
    where = f" from {reporter}" if reporter else ""
    return [peer], f"the failed link{where} points to its far end {peer}"


_RANK_CRASH = {Category.CUDA_ERROR, Category.GPU_HARDWARE, Category.APP_ERROR, Category.NODE_FAILURE, Category.NCCL_ERROR}
_MOUNT_ERRORS = {"stale_file_handle", "io_error", "disk_full", "checkpoint_write_failed", "file_not_found"}
_NODE_LOCAL_PATH = re.compile(r"['\" (](/(?:local|localscratch|lscratch|scratch/local|local_scratch|tmp|raid[0-9]?|nvme[0-9a-z]*|ssd|mnt/local|mnt/nvme|local_disk[0-9]?|dev/nvme)[/'\" ]|\$TMPDIR|SLURM_TMPDIR)")
_DEVICE_CUDA_ERRORS = {"cuda_unknown_error"}  # "CUDA error: unknown error": usually a GPU that became unusable


def _local_mount(sigs: list[Signal], b: _Builder) -> set[str]:
    """The node whose own disk failed: storage errors on a node-local path (local scratch, /tmp,
    NVMe, RAID) seen on exactly one node. A shared file system's errors (stale NFS handles, EIO on
    Lustre/GPFS, a full project quota) are the storage's problem, not a node's, wherever they show."""
    mount = [s for s in sigs if s.pattern_id in _MOUNT_ERRORS and _NODE_LOCAL_PATH.search(s.text or s.line)]
    seen = {s.host for s in mount if s.host}
    root = b.elastic_root()
    if mount and not seen and root is not None and root[0]:
        seen = {root[0]}  # torchrun's first failed worker is where the mount broke
    if len(seen) != 1:
        return set()
    return seen


def _implicates_hosts(cat: Category, domain: FaultDomain) -> bool:
    """Whether the hosts the evidence came from are suspects (not just where a victim or a bug showed)."""
    if cat in (Category.NCCL_TIMEOUT, Category.NCCL_ERROR):
        return False  # every rank reports these; suspects are worked out separately
    if cat == Category.CUDA_ERROR:
        return domain == FaultDomain.HARDWARE  # a CUDA error alone is the code's; the GPU only with hardware words
    if cat == Category.DATA_IO:
        return False  # storage is shared; a mount broken on one node is worked out in _local_mount
    # a hang is reported by every stuck rank alike; its suspects are the stragglers named separately
    return cat in (Category.GPU_HARDWARE, Category.INTERCONNECT, Category.NODE_FAILURE)


def _primary(cat: Category, sigs: list[Signal], b: _Builder) -> Signal | None:
    if not sigs:
        return None
    if cat == Category.APP_ERROR:
        # the last exception of the first process that failed is what it died of
        exceptions = [s for s in sigs if s.pattern_id in _EXCEPTION_PATTERNS and s.role == "cause"]
        if exceptions:
            by_source: dict[tuple, Signal] = {}
            for s in exceptions:
                by_source[(s.host, s.task, s.rank)] = s  # later ones replace earlier ones
            return min(by_source.values(), key=lambda s: s.order)
        fatal = [s for s in sigs if s.severity == "fatal"]
        return (fatal or sigs)[0]
    fatal = [s for s in sigs if s.severity == "fatal" or s.condemns]
    return (fatal or sigs)[0]


def _default_domain(cat: Category) -> FaultDomain:
    return {
        Category.TIME_LIMIT: FaultDomain.SCHEDULER, Category.PREEMPTED: FaultDomain.SCHEDULER,
        Category.NODE_FAILURE: FaultDomain.NODE, Category.HOST_OOM: FaultDomain.RESOURCE,
        Category.GPU_OOM: FaultDomain.RESOURCE, Category.APP_ERROR: FaultDomain.APPLICATION,
        Category.GPU_HARDWARE: FaultDomain.HARDWARE, Category.INTERCONNECT: FaultDomain.NETWORK,
    }.get(cat, FaultDomain.UNKNOWN)


def _confidence(choice: _Choice, b: _Builder, evidence: JobEvidence, hosts: set[str]) -> float:
    conf = choice.base
    sigs = choice.signals
    distinct = {(s.source, s.line_no) for s in sigs}
    conf += min(0.06, 0.02 * (len(distinct) - 1)) if distinct else 0
    sources = {s.source for s in sigs}
    if len(sources) > 1:
        conf += 0.05
    if hosts and any(s.host in hosts for s in sigs):
        conf += 0.02
    if any(evidence.node_failure_counts.get(h, 0) >= 2 for h in hosts):
        conf += 0.08
    job = evidence.job
    if job is not None and job.state == JobState.COMPLETED and (job.exit_code or 0) == 0:
        conf -= 0.2  # the job says it finished fine
    return max(0.05, min(0.99, conf))


def _evidence_lines(cat: Category, sigs: list[Signal], b: _Builder) -> list[EvidenceLine]:
    chosen = sigs[:MAX_EVIDENCE - 3] if len(sigs) > MAX_EVIDENCE - 3 else sigs
    if len(sigs) > len(chosen):
        chosen = chosen[:-1] + [sigs[-1]]  # keep the newest too
    extra = [s for s in b.signals if s not in sigs and s.strong and s.category != cat]
    extra = sorted(extra, key=lambda s: (s.order, s.line_no or 0))[:3]
    out: list[EvidenceLine] = []
    seen: set[tuple] = set()
    for s in chosen + extra:
        key = (s.source, s.line_no, s.line if s.line_no is None else "")
        if key in seen:
            continue
        seen.add(key)
        out.append(b.cite(s))
    return out


_LABEL = {
    Category.NCCL_TIMEOUT: "NCCL collective timeout",
    Category.NCCL_ERROR: "NCCL error",
    Category.CUDA_ERROR: "CUDA error",
    Category.GPU_OOM: "GPU out of memory",
    Category.GPU_HARDWARE: "GPU hardware failure",
    Category.INTERCONNECT: "interconnect failure",
    Category.HANG: "hang",
    Category.NODE_FAILURE: "node failure",
    Category.TIME_LIMIT: "time limit reached",
    Category.PREEMPTED: "preemption",
    Category.APP_ERROR: "application error",
    Category.DATA_IO: "storage / data I/O failure",
    Category.HOST_OOM: "host out of memory",
}

_ADVICE = {
    Category.NCCL_TIMEOUT: "restart; exclude the suspect host if one is named, and look at it if timeouts repeat",
    Category.NCCL_ERROR: "restart; if it repeats, check the NCCL WARN lines above the error and the network",
    Category.CUDA_ERROR: "look at the failing kernel (CUDA_LAUNCH_BLOCKING=1, compute-sanitizer); suspect the GPU only if Xids accompany it",
    Category.GPU_OOM: "reduce memory use (batch size, sequence length, activation checkpointing) before restarting",
    Category.GPU_HARDWARE: "drain the implicated node and reset or replace the GPU; restart the job without it",
    Category.INTERCONNECT: "check the named host's NICs/links; restart excluding it",
    Category.HANG: "collect stacks (py-spy dump) if it is still running, then restart; exclude a named host",
    Category.NODE_FAILURE: "restart excluding the failed node; the node needs an administrator",
    Category.TIME_LIMIT: "resubmit from the last checkpoint (or ask for more time)",
    Category.PREEMPTED: "nothing to fix; the scheduler requeues or ends it by its own policy",
    Category.APP_ERROR: "fix the application; restarting the same code fails the same way",
    Category.DATA_IO: "free space or fix the file system/path, then restart from the last good checkpoint",
    Category.HOST_OOM: "lower host memory use (DataLoader workers, pinned memory, shm) or ask for more memory",
}


def _explain(
    cat: Category, domain: FaultDomain, primary: Signal | None, choice: _Choice, sigs: list[Signal],
    b: _Builder, evidence: JobEvidence, hosts: list[str], ranks: list[int], catalogue: Catalogue,
) -> str:
    parts: list[str] = []
    where = f" on {', '.join(hosts)}" if hosts else ""
    parts.append(f"Root cause: {_LABEL.get(cat, cat.value)}{where} (fault domain {domain.value}).")
    if primary is not None:
        cited = b.cite(primary)
        loc = (f"line {cited.line_no}" + (f" of {cited.stream.value}" if cited.stream is Stream.STDERR else "")
               if cited.line_no is not None else primary.source)
        detail = primary.note
        if not detail and primary.pattern_id:
            spec = catalogue.get(primary.pattern_id)
            detail = spec.description if spec else ""
        shown = (primary.text or primary.line).strip()
        if detail and detail.strip().rstrip(".") in shown and primary.pattern_id:
            spec = catalogue.get(primary.pattern_id)
            detail = spec.description if spec else ""
        shown = shown if len(shown) <= 220 else shown[:217] + "..."
        seen_on = f" on {primary.host}" if primary.host and not hosts else ""
        detail = detail.strip().rstrip(".")
        parts.append(f"Key evidence ({loc}{seen_on}): \"{shown}\"" + (f" - {detail}" if detail else "") + ".")
    if choice.why:
        parts.append(choice.why[0].upper() + choice.why[1:] + ".")
    victims = [s for s in b.signals if s not in sigs and s.strong and s.category in (
        Category.NCCL_TIMEOUT, Category.NCCL_ERROR, Category.INTERCONNECT, Category.APP_ERROR)]
    if victims and cat not in (Category.NCCL_TIMEOUT,):
        victim_ranks = sorted({s.rank for s in victims if s.rank is not None})
        who = f" from rank(s) {', '.join(map(str, victim_ranks[:16]))}" if victim_ranks else ""
        parts.append(f"{len(victims)} other error line(s){who} are fallout or context, not the root cause.")
    if ranks and cat != Category.NCCL_TIMEOUT:
        parts.append(f"Rank(s) involved: {', '.join(map(str, ranks[:16]))}.")
    repeat = [h for h in hosts if evidence.node_failure_counts.get(h, 0) >= 2]
    if repeat:
        parts.append(f"{', '.join(repeat)} also failed other jobs recently, which raises confidence.")
    job = evidence.job
    if job is not None and job.state != JobState.UNKNOWN:
        who = "the job" if job.job_id in ("offline", "corpus") else f"job {job.job_id}"
        parts.append(f"Scheduler: {who} is {job.state.value}"
                     + (f" ({job.reason})" if job.reason else "")
                     + (f", exit code {job.exit_code}" if job.exit_code is not None else "") + ".")
    parts.append(f"Suggested: {_ADVICE.get(cat, 'restart')}.")
    return _clean(" ".join(parts))


def _clean(text: str) -> str:
    """Text safe to serialise anywhere: lone surrogates (undecodable bytes) and NULs replaced."""
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "?")


def _none_verdict(b: _Builder, evidence: JobEvidence) -> Verdict:
    notes = [s for s in b.signals if s.category != Category.NONE]
    stragglers = sorted(set(evidence.straggler_hosts))
    text = "No failure found"
    if b.benign_lines:
        text += f"; {b.benign_lines} line(s) looked like errors but are known to be harmless"
    if notes:
        text += f"; {len(notes)} minor warning(s) that do not explain a failure"
    text += "."
    if stragglers:
        text += f" Training is progressing, but {', '.join(stragglers)} run(s) slower than the rest (straggler)."
    conf = 0.9 if not notes else 0.7
    if not (evidence.log_lines or evidence.window) and not b.signals and evidence.job is None:
        conf = 0.3
    return Verdict(
        category=Category.NONE,
        fault_domain=FaultDomain.UNKNOWN,
        implicated=Implicated(hosts=stragglers),
        confidence=conf,
        evidence=[b.cite(s) for s in notes[:MAX_EVIDENCE]],
        explanation=text,
    )
