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

The parts, in the order a verdict is made: `line_context` (who wrote a line), `signals`
(flagged lines and facts -> signals), `root_cause` (the steps above), `blame` (the hosts,
ranks and GPUs to name), `explain` and `signature` (what the verdict says).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from activities.detection import fallback
from activities.detection.blame import implicate
from activities.detection.catalogue import Catalogue, load_catalogue
from activities.detection.explain import MAX_EVIDENCE, evidence_lines_for, explain
from activities.detection.line_context import MAX_LINE, LineContext, parse_context
from activities.detection.root_cause import Choice, choose_root_cause, survived
from activities.detection.screen import Screener
from activities.detection.signals import EXCEPTION_PATTERNS, Signal, SignalBuilder
from activities.detection.signature import normalise_error_text, signature
from workflows.contracts import (
    Category,
    EvidenceLine,
    FaultDomain,
    Implicated,
    JobEvidence,
    JobState,
    Stream,
    Verdict,
)

__all__ = ["LineContext", "attribute", "attribute_lines", "normalise_error_text", "parse_context", "screener_for"]

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
    b = SignalBuilder(evidence, catalogue)
    b.where = where
    b.tail = [(n, line[:MAX_LINE]) for n, line in (numbered_lines[-fallback.TAIL_LINES:] if tail is None else tail)]
    b.add_log(numbered_lines, hits)
    b.add_elastic()
    b.lines = sorted(dict([*numbered_lines, *b.tail]).items())
    b.add_process_lines(b.lines)
    if evidence.job is not None:
        b.add_job(evidence.job)
    job = evidence.job
    if job is None or not (job.state == JobState.COMPLETED and (job.exit_code or 0) == 0):
        # a job that finished cleanly is not explained by a node that went bad afterwards
        b.add_nodes(evidence.nodes)
        b.add_metrics(evidence.metric_facts)
    b.apply_host_aliases()
    b.apply_nccl_processes()
    b.apply_gpu_inventory()
    b.resolve_hosts()
    choice = choose_root_cause(b, evidence)
    if survived(b, choice, evidence):
        choice = Choice(Category.NONE, [], 0.0)
    return _verdict(b, choice, evidence, catalogue)


def _screen_numbered(catalogue: Catalogue, numbered: Sequence[tuple[int, str]]) -> list[EvidenceLine]:
    """Raw numbered lines, screened once; each hit carries the line's own number."""
    lines = [line[:MAX_LINE] for _, line in numbered]
    hits = screener_for(catalogue).scan_lines(lines, first_line_no=0)
    return [hit.model_copy(update={"line_no": numbered[hit.line_no][0]})
            for hit in hits if hit.line_no is not None and 0 <= hit.line_no < len(numbered)]


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


def _verdict(b: SignalBuilder, choice: Choice, evidence: JobEvidence, catalogue: Catalogue) -> Verdict:
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
    hosts, ranks, gpus = implicate(b, choice, evidence, cat=cat, domain=domain, sigs=sigs)
    confidence = _confidence(choice, b, evidence, hosts)
    evidence_lines = evidence_lines_for(cat, sigs, b)
    explanation = explain(cat, domain, primary, choice, sigs, b, evidence, sorted(hosts), sorted(ranks), catalogue)
    return Verdict(
        category=cat,
        fault_domain=domain,
        implicated=Implicated(hosts=sorted(hosts), ranks=sorted(ranks), gpus=sorted(gpus)),
        confidence=round(confidence, 3),
        evidence=evidence_lines,
        explanation=explanation,
        deterministic_signature=signature(cat, primary, b.known_hosts | hosts),
    )


def _primary(cat: Category, sigs: list[Signal], b: SignalBuilder) -> Signal | None:
    if not sigs:
        return None
    if cat == Category.APP_ERROR:
        # the last exception of the first process that failed is what it died of
        exceptions = [s for s in sigs if s.pattern_id in EXCEPTION_PATTERNS and s.role == "cause"]
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


def _confidence(choice: Choice, b: SignalBuilder, evidence: JobEvidence, hosts: set[str]) -> float:
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


def _none_verdict(b: SignalBuilder, evidence: JobEvidence) -> Verdict:
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

