"""What the verdict says: the evidence lines it cites and its explanation for the on-call engineer. Pure code."""

from __future__ import annotations

from activities.detection.catalogue import Catalogue
from activities.detection.root_cause import Choice
from activities.detection.signals import Signal, SignalBuilder, clean_text
from workflows.contracts import Category, EvidenceLine, FaultDomain, JobEvidence, JobState, Stream

MAX_EVIDENCE = 12


def evidence_lines_for(cat: Category, sigs: list[Signal], b: SignalBuilder) -> list[EvidenceLine]:
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


def explain(
    cat: Category, domain: FaultDomain, primary: Signal | None, choice: Choice, sigs: list[Signal],
    b: SignalBuilder, evidence: JobEvidence, hosts: list[str], ranks: list[int], catalogue: Catalogue,
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
    return clean_text(" ".join(parts))

