"""The cluster-wide view: is a failure systemic, is a node a lemon, has a systemic cause cleared.

Pure and deterministic: the per-cluster systemic guard workflow
(`workflows.systemic_guard`) calls these with workflow time. Only the
standard library, pydantic and `workflows.contracts` / `workflows.history`
are imported (the workflow sandbox re-imports this module).

Systemic means a shared cause, never a mere count of failing jobs. Within
`systemic_window_s`, among failures in shared-infrastructure categories:

1. shared_cause: at least `systemic_jobs` distinct jobs failed with the same
   cause (category and signature; the signature is the verdict's
   deterministic signature, else the pattern of its first evidence line) and
   none of them carries node-specific evidence (no implicated host).
2. domain: at least `systemic_jobs` distinct jobs failed with node-specific
   evidence all inside one failure domain (a switch from `scontrol show
   topology`, a rack or switch from the `topology` setting, a partition),
   the domain is smaller than the cluster, the implicated hosts are at least
   two of its nodes (one node is a lemon, not a domain), and at least
   `systemic_domain_share` of all node-specific failures in the window fall
   inside it.
3. fraction: failures without node-specific evidence, whatever their cause,
   of at least `systemic_fraction` of the watched jobs (and at least
   `systemic_jobs` of them).

Failures that each carry their own node-specific evidence on nodes that share
no small domain are independent: each is handled on its own.

A failure that may still become part of a systemic event (shared
infrastructure, and either no node-specific evidence or a small domain that
already saw another failure) is answered after `systemic_settle_s` at most,
so the first jobs of a burst are held like the last ones (`needs_settling`).

A systemic event ends when its cause has cleared (`cause_cleared`): a job that
is not one of the held ones started on the event's nodes after the event
opened and completed, or has run for `systemic_clear_runtime_s`; or every
event node that was down or not responding when it opened is back.

Lemon nodes: a node implicated (node-specific evidence) in failures of at
least `lemon_jobs` distinct jobs within `lemon_window_s` is a lemon; every
`lemon_healthy_s` of healthy runtime on the node since its last such failure
takes one job's worth of suspicion away (`node_suspicion`). Lemons are capped
(`lemon_caps`): at most `lemon_max_fraction` of the cluster's nodes (at least
one) at once, at most `lemon_max_per_window` new ones per window.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from enum import StrEnum

from pydantic import Field

from workflows.contracts import Category, Contract, PolicyConfig
from workflows.history import as_utc

# Categories whose cause can be infrastructure several jobs share (fabric, file systems, nodes,
# drivers). The job's own errors, memory use, time limit and preemptions say nothing about it.
SHARED_INFRA_CATEGORIES = frozenset(
    {
        Category.NCCL_TIMEOUT,
        Category.NCCL_ERROR,
        Category.CUDA_ERROR,
        Category.GPU_HARDWARE,
        Category.INTERCONNECT,
        Category.HANG,
        Category.NODE_FAILURE,
        Category.DATA_IO,
    }
)
PARTITION_PREFIX = "partition:"


class SystemicKind(StrEnum):
    SHARED_CAUSE = "shared_cause"
    DOMAIN = "domain"
    FRACTION = "fraction"


class FailureReport(Contract):
    """One job's attributed failure, as the job's workflow tells the guard (signal `failure`)."""

    workflow_id: str
    job_id: str
    incident: int = 0  # the job workflow's incident number: the answer names it
    at: datetime | None = None  # set by the guard on receipt (workflow time)
    category: Category = Category.UNKNOWN
    signature: str = ""  # cause within the category (see `cause_signature`)
    hosts: list[str] = Field(default_factory=list)  # implicated: node-specific evidence
    gpus: list[str] = Field(default_factory=list)
    nodes: list[str] = Field(default_factory=list)  # the nodes the job ran on
    num_nodes: int = 1
    excluded_nodes: list[str] = Field(default_factory=list)  # already excluded from the job

    @property
    def node_specific(self) -> bool:
        return bool(self.hosts)

    @property
    def shared_infra(self) -> bool:
        return self.category in SHARED_INFRA_CATEGORIES

    @property
    def cause(self) -> str:
        return f"{self.category.value}/{self.signature or '-'}"


class ClusterContext(Contract):
    """What the guard knows of the cluster's shape (from Slurm and the settings)."""

    nodes: list[str] = Field(default_factory=list)  # every node
    domains: dict[str, list[str]] = Field(default_factory=dict)  # "switch:s1" / "rack:a" / "partition:p" -> nodes
    unavailable: list[str] = Field(default_factory=list)  # down, drained, not responding
    watched_jobs: int = 0  # opted-in jobs this deployment watches
    read_at: datetime | None = None


class Finding(Contract):
    """A systemic group found among recent failures."""

    kind: SystemicKind
    key: str  # the cause, the domain, or "fraction"
    workflow_ids: list[str] = Field(default_factory=list)  # sorted
    nodes: list[str] = Field(default_factory=list)  # sorted: where the failing jobs ran
    reason: str = ""


class JobRun(Contract):
    """A job seen on some nodes, as a probe of the scheduler reports it."""

    job_id: str
    state: str
    nodes: list[str] = Field(default_factory=list)
    start_time: datetime | None = None
    end_time: datetime | None = None


class ProbeResult(Contract):
    """Jobs that ran on the nodes of interest since a moment, and which of those nodes are unavailable now."""

    runs: list[JobRun] = Field(default_factory=list)
    unavailable: list[str] = Field(default_factory=list)
    at: datetime | None = None


def cause_signature(deterministic_signature: str | None, first_pattern: str | None) -> str:
    """The cause within a category: the deterministic signature, else the first evidence line's pattern."""
    return deterministic_signature or first_pattern or ""


def recent(failures: Iterable[FailureReport], *, now: datetime, window_s: float) -> list[FailureReport]:
    """The failures received within `window_s` before `now`, oldest first (one per job and incident)."""
    seen: dict[tuple[str, int], FailureReport] = {}
    for f in failures:
        if f.at is not None and (as_utc(now) - as_utc(f.at)).total_seconds() <= window_s:
            seen.setdefault((f.workflow_id, f.incident), f)
    return list(seen.values())


def _small_domains(ctx: ClusterContext) -> dict[str, set[str]]:
    """Domains smaller than the cluster: a domain that is the whole cluster says nothing about a shared cause."""
    everything = set(ctx.nodes)
    return {
        name: set(members)
        for name, members in sorted(ctx.domains.items())
        if members and (not everything or not everything <= set(members))
    }


def classify(failures: Sequence[FailureReport], ctx: ClusterContext, config: PolicyConfig) -> list[Finding]:
    """The systemic groups among `failures` (already limited to the window), in rule order."""
    shared = [f for f in failures if f.shared_infra]
    findings: list[Finding] = []
    need = max(2, config.systemic_jobs)

    unspecific = [f for f in shared if not f.node_specific]
    by_cause: dict[str, list[FailureReport]] = {}
    for f in unspecific:
        by_cause.setdefault(f.cause, []).append(f)
    for cause, group in sorted(by_cause.items()):
        jobs = {f.job_id for f in group}
        if len(jobs) >= need:
            findings.append(
                _finding(SystemicKind.SHARED_CAUSE, cause, group,
                         f"{len(jobs)} jobs failed with the same cause ({cause}) and no node-specific evidence "
                         f"within {config.systemic_window_s:g} s")
            )

    specific = [f for f in shared if f.node_specific]
    for name, members in _small_domains(ctx).items():
        inside = [f for f in specific if set(f.hosts) <= members]
        jobs = {f.job_id for f in inside}
        hosts = {h for f in inside for h in f.hosts}
        if len(jobs) < need or len(hosts) < 2:
            continue
        if len(inside) < config.systemic_domain_share * len(specific):
            continue
        findings.append(
            _finding(SystemicKind.DOMAIN, name, inside,
                     f"{len(jobs)} jobs failed with node-specific evidence on {len(hosts)} nodes of {name} "
                     f"({', '.join(sorted(hosts))}) within {config.systemic_window_s:g} s")
        )

    jobs = {f.job_id for f in unspecific}
    if ctx.watched_jobs > 0 and len(jobs) >= need and len(jobs) >= config.systemic_fraction * ctx.watched_jobs:
        findings.append(
            _finding(SystemicKind.FRACTION, "fraction", unspecific,
                     f"{len(jobs)} of {ctx.watched_jobs} watched jobs failed without node-specific evidence "
                     f"within {config.systemic_window_s:g} s (threshold {config.systemic_fraction:.0%})")
        )
    return findings


def _finding(kind: SystemicKind, key: str, group: Sequence[FailureReport], reason: str) -> Finding:
    return Finding(
        kind=kind,
        key=key,
        workflow_ids=sorted({f.workflow_id for f in group}),
        nodes=sorted({n for f in group for n in (f.nodes or f.hosts)}),
        reason=reason,
    )


def matches(kind: SystemicKind, key: str, report: FailureReport, ctx: ClusterContext) -> bool:
    """Whether `report` belongs to an open event of `kind` and `key` (it joins it and is held too)."""
    if not report.shared_infra:
        return False
    if kind is SystemicKind.SHARED_CAUSE:
        return not report.node_specific and report.cause == key
    if kind is SystemicKind.DOMAIN:
        members = set(ctx.domains.get(key, []))
        return report.node_specific and bool(members) and set(report.hosts) <= members
    return not report.node_specific  # fraction: any failure without node-specific evidence


def needs_settling(report: FailureReport, others: Sequence[FailureReport], ctx: ClusterContext) -> bool:
    """Whether the answer waits (up to `systemic_settle_s`) for failures that may make it part of a systemic event.

    A failure without node-specific evidence may be the first of a shared
    cause; one with node-specific evidence only when a small domain holding
    its hosts already saw another node-specific failure of another job.
    """
    if not report.shared_infra:
        return False
    if not report.node_specific:
        return True
    for members in _small_domains(ctx).values():
        if set(report.hosts) <= members and any(
            o.node_specific and o.job_id != report.job_id and set(o.hosts) <= members for o in others
        ):
            return True
    return False


def cause_cleared(
    *,
    nodes: Sequence[str],
    opened_at: datetime,
    down_at_open: Sequence[str],
    held_job_ids: Iterable[str],
    probe: ProbeResult,
    now: datetime,
    clear_runtime_s: float,
) -> str | None:
    """Why the cause of an event has cleared, or None while it has not (see the module docstring)."""
    ours = set(nodes)
    held = set(held_job_ids)
    opened = as_utc(opened_at)
    for run in sorted(probe.runs, key=lambda r: r.job_id):
        if run.job_id in held or run.start_time is None or not ours & set(run.nodes):
            continue
        started = as_utc(run.start_time)
        if started <= opened:
            continue
        where = ",".join(sorted(ours & set(run.nodes)))
        if run.state == "COMPLETED":
            return f"job {run.job_id} started on {where} after the event opened and completed"
        if run.state == "RUNNING" and (as_utc(now) - started).total_seconds() >= clear_runtime_s:
            return f"job {run.job_id} has run on {where} for {clear_runtime_s:g} s since the event opened"
    if down_at_open and not set(down_at_open) & set(probe.unavailable):
        return f"node(s) {', '.join(sorted(down_at_open))} are back"
    return None


# --------------------------------------------------------------------------- lemon nodes


def healthy_seconds(node: str, *, since: datetime, runs: Sequence[JobRun], now: datetime,
                    failed_job_ids: Iterable[str] = ()) -> float:
    """Runtime of jobs on `node` after `since` that have not failed (running, or completed), summed."""
    failed = set(failed_job_ids)
    total = 0.0
    for run in runs:
        if node not in run.nodes or run.job_id in failed or run.start_time is None:
            continue
        if run.state not in {"RUNNING", "COMPLETED", "COMPLETING"}:
            continue
        start = max(as_utc(run.start_time), as_utc(since))
        end = as_utc(run.end_time) if run.end_time and run.state != "RUNNING" else as_utc(now)
        total += max(0.0, (end - start).total_seconds())
    return total


def node_suspicion(
    failures: Sequence[FailureReport],
    *,
    now: datetime,
    config: PolicyConfig,
    healthy_s: dict[str, float] | None = None,
) -> dict[str, float]:
    """Per node: distinct jobs that implicated it within `lemon_window_s`, less the decay of healthy runtime.

    `healthy_s[node]` is the healthy runtime on the node since its latest
    failure (see `healthy_seconds`); each `lemon_healthy_s` of it removes one.
    """
    jobs: dict[str, set[str]] = {}
    for f in recent(failures, now=now, window_s=config.lemon_window_s):
        for host in f.hosts:
            jobs.setdefault(host, set()).add(f.job_id)
    healthy_s = healthy_s or {}
    out: dict[str, float] = {}
    for node, ids in sorted(jobs.items()):
        decay = int(healthy_s.get(node, 0.0) // config.lemon_healthy_s) if config.lemon_healthy_s > 0 else 0
        score = len(ids) - decay
        if score > 0:
            out[node] = float(score)
    return out


class LemonCaps(Contract):
    """Lemons kept, and what a cap refused (audited by the guard)."""

    lemons: list[str] = Field(default_factory=list)  # most suspicious first
    refused: dict[str, str] = Field(default_factory=dict)  # node -> which cap


def lemon_caps(
    suspicion: dict[str, float],
    *,
    current: Sequence[str],
    declared_in_window: int,
    cluster_size: int,
    config: PolicyConfig,
) -> LemonCaps:
    """The lemons, most suspicious first, within the caps (see the module docstring).

    `current` are the lemons already declared (they stay while suspicious);
    `declared_in_window` counts new declarations within `lemon_window_s`.
    """
    candidates = sorted(
        (n for n, s in suspicion.items() if s >= config.lemon_jobs),
        key=lambda n: (n not in current, -suspicion[n], n),
    )
    overall = max(1, int(config.lemon_max_fraction * cluster_size)) if cluster_size else 1
    kept: list[str] = []
    refused: dict[str, str] = {}
    new = declared_in_window
    for node in candidates:
        if len(kept) >= overall:
            refused[node] = f"overall cap: at most {overall} of {cluster_size} nodes ({config.lemon_max_fraction:.0%})"
            continue
        if node not in current:
            if new >= config.lemon_max_per_window:
                refused[node] = (
                    f"window cap: at most {config.lemon_max_per_window} new lemon nodes per "
                    f"{config.lemon_window_s:g} s"
                )
                continue
            new += 1
        kept.append(node)
    return LemonCaps(lemons=kept, refused=refused)


def job_partition_nodes(job_nodes: Sequence[str], ctx: ClusterContext) -> list[str]:
    """The nodes of the smallest partition that holds all of the job's nodes (the job's partition, as far as known)."""
    want = set(job_nodes)
    best: list[str] | None = None
    for name, members in sorted(ctx.domains.items()):
        if name.startswith(PARTITION_PREFIX) and want and want <= set(members):
            if best is None or len(members) < len(best):
                best = sorted(members)
    return best if best is not None else sorted(ctx.nodes)
