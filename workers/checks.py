"""Checks that a configuration fits the scheduler it drives, for the worker's start and a `jobmedic check`.

Each check is a pure function over settings and facts read from the
scheduler that returns the problems it finds, each saying what to change;
`warn_about_decision_timing` reads the facts and logs the problems.

decision_timing: jobmedic decides about a failed job while Slurm still shows
it FAILED (decide, then act) and requeues it only to restart it. slurmctld
forgets a finished job `MinJobAge` after its end (300 s by default), and a job
it forgot cannot be requeued. From the end to the requeue takes at most one
poll interval (detection), the decision deadline, and one attempt of the
requeue-hold (`activity_timeout_s`).
- error: those three add up to MinJobAge or more: a restart can come too late.
- warning: detection plus decision take more than half of MinJobAge (the
  decision does not sit "well inside" it: a slow scheduler or a retried
  activity eats the rest).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from loguru import logger

from adapters.errors import JobmedicError
from adapters.slurm.ctld_config import DEFAULT_MIN_JOB_AGE_S
from workers.settings import ClusterSettings


@dataclass(frozen=True)
class Problem:
    severity: Literal["error", "warning"]
    message: str


class _ReadsMinJobAge(Protocol):
    async def min_job_age_s(self) -> float: ...


def decision_timing(cluster: ClusterSettings, *, min_job_age_s: float) -> list[Problem]:
    """Whether a failed job is decided on and requeued well inside Slurm's MinJobAge (see the module docstring)."""
    w = cluster.watchdog
    detect_and_decide = cluster.poll_interval_s + w.decision_deadline_s
    to_requeue = detect_and_decide + w.activity_timeout_s
    where = f"clusters.{cluster.name}"
    if to_requeue >= min_job_age_s:
        return [
            Problem(
                "error",
                f"{where}: poll_interval_s ({cluster.poll_interval_s:g}) + watchdog.decision_deadline_s "
                f"({w.decision_deadline_s:g}) + watchdog.activity_timeout_s ({w.activity_timeout_s:g}) = "
                f"{to_requeue:g} s is not inside Slurm's MinJobAge ({min_job_age_s:g} s): a failed job can be "
                f"forgotten by slurmctld before jobmedic requeues it. Lower watchdog.decision_deadline_s to at most "
                f"{max(min_job_age_s / 2 - cluster.poll_interval_s, 0):g}, or raise MinJobAge in slurm.conf to at "
                f"least {2 * detect_and_decide:g}.",
            )
        ]
    if detect_and_decide > min_job_age_s / 2:
        return [
            Problem(
                "warning",
                f"{where}: poll_interval_s + watchdog.decision_deadline_s = {detect_and_decide:g} s is more than "
                f"half of Slurm's MinJobAge ({min_job_age_s:g} s); a slow decision leaves little time for the "
                f"requeue. Lower watchdog.decision_deadline_s to at most "
                f"{max(min_job_age_s / 2 - cluster.poll_interval_s, 0):g}, or raise MinJobAge in slurm.conf.",
            )
        ]
    return []


async def warn_about_decision_timing(cluster: ClusterSettings, slurm: _ReadsMinJobAge) -> list[Problem]:
    """Read MinJobAge from the cluster, log every timing problem, and return them."""
    try:
        age = await slurm.min_job_age_s()
    except JobmedicError as exc:
        age = DEFAULT_MIN_JOB_AGE_S
        logger.warning(
            "cluster {}: could not read MinJobAge ({}); checking the decision deadline against Slurm's default {:g} s",
            cluster.name, exc, age,
        )
    problems = decision_timing(cluster, min_job_age_s=age)
    for problem in problems:
        logger.warning("{}: {}", problem.severity, problem.message)
    return problems


# =========================================================================== jobmedic check
#
# `jobmedic check` turns what it read from each signal into findings: one line
# each, OK / WARN / FAIL, naming the setting or Slurm parameter concerned and
# what to change. The functions below are pure (facts in, findings out); the
# reading is in workers/commands/check.py.
#
# - slurm.reachable      FAIL: squeue does not answer (local commands or SSH).
# - slurm.fields         FAIL: squeue/sinfo --json lack a field jobmedic reads.
# - slurm.job_comments   WARN: accounting is on and AccountingStoreFlags lacks job_comment
#                        (sacct loses the opt-in; squeue still shows it).
# - slurm.min_job_age    decision_timing: error FAIL, warning WARN.
# - slurm.job_requeue    WARN: JobRequeue=0 (only jobs submitted with --requeue can restart).
# - slurm.output_paths   FAIL: no recent job's output file is visible; WARN: some are not.
# - logs.*               FAIL: store down, or no job label (the label to set, when one
#                        carries job ids); WARN: host label differs (the one to set),
#                        no recent job's lines found.
# - metrics.*            FAIL: Prometheus down, no DCGM series, no host label naming nodes
#                        (the label to set).
# - audit.*              FAIL: not writable, or a schema newer than this jobmedic;
#                        WARN: not migrated yet (the worker migrates at start).
# - temporal.*           FAIL: unreachable, no namespace, search attributes missing (the
#                        `temporal operator search-attribute create` commands).

Status = Literal["OK", "WARN", "FAIL"]

# keys of one `squeue --json` job and one `sinfo --json` node that jobmedic reads (adapters/slurm/parse.py)
SQUEUE_FIELDS = (
    "job_id", "job_state", "name", "user_name", "comment", "admin_comment", "nodes", "submit_time",
    "start_time", "end_time", "restart_cnt", "exit_code", "standard_output", "current_working_directory",
    "requeue",
)
SINFO_FIELDS = ("name", "state", "reason")
# label names sites use for the Slurm job id and the node name in log stores and Prometheus
JOB_LABEL_ALIASES = ("slurm_job_id", "job_id", "jobid", "slurm_jobid", "SLURM_JOB_ID", "slurmjobid", "job")
HOST_LABEL_ALIASES = ("host", "hostname", "Hostname", "node", "nodename", "node_name", "host_name", "instance")


@dataclass(frozen=True)
class Finding:
    """One result of `jobmedic check`: what was checked, how it stands, what to do."""

    status: Status
    check: str  # e.g. "slurm.min_job_age"
    setting: str  # the jobmedic setting or Slurm parameter concerned
    message: str
    cluster: str | None = None

    def line(self) -> str:
        where = f"[{self.cluster}] " if self.cluster else ""
        return f"{self.status:<4} {where}{self.check} ({self.setting}): {self.message}"

    def document(self) -> dict[str, str | None]:
        return {"status": self.status, "cluster": self.cluster, "check": self.check,
                "setting": self.setting, "message": self.message}


def missing_fields(records: list[object], fields: tuple[str, ...]) -> list[str]:
    """Fields of `fields` that no record of a `--json` document has (an older or other Slurm)."""
    seen: set[str] = set()
    for record in records:
        if isinstance(record, dict):
            seen |= set(record)
    return [f for f in fields if f not in seen]


def slurm_fields(jobs: list[object], nodes: list[object], *, cluster: str) -> Finding:
    """squeue/sinfo --json carry every field jobmedic reads."""
    where = f"clusters.{cluster}.scheduler"
    lacking = [f"squeue {f}" for f in (missing_fields(jobs, SQUEUE_FIELDS) if jobs else [])]
    lacking += [f"sinfo {f}" for f in missing_fields(nodes, SINFO_FIELDS)]
    if not nodes:
        return Finding("FAIL", "slurm.fields", where, "sinfo --json lists no node: check that this "
                       "slurm.conf (SLURM_CONF) is the cluster's", cluster)
    if lacking:
        return Finding("FAIL", "slurm.fields", where, f"the --json output lacks {', '.join(lacking)}: jobmedic "
                       "needs Slurm 21.08 or newer with JSON support (the tests use 22.05); upgrade the "
                       "client commands where jobmedic runs them", cluster)
    if not jobs:
        return Finding("WARN", "slurm.fields", where, f"sinfo --json readable ({len(nodes)} nodes); squeue "
                       "lists no job, so a job's fields were not checked: submit one and run check again", cluster)
    return Finding("OK", "slurm.fields", where, f"squeue --json ({len(jobs)} jobs) and sinfo --json "
                   f"({len(nodes)} nodes) carry every field jobmedic reads", cluster)


def job_comments(config: dict[str, str], *, cluster: str) -> Finding:
    """The opt-in (the job's comment) is kept where accounting stores job records."""
    storage = config.get("AccountingStorageType", "accounting_storage/none")
    flags = [f.strip().lower() for f in config.get("AccountingStoreFlags", "").split(",")]
    if storage in ("", "(null)", "accounting_storage/none"):
        return Finding("OK", "slurm.job_comments", "AccountingStorageType", "no accounting storage: comments "
                       "live in slurmctld, where squeue shows them", cluster)
    if "job_comment" in flags:
        return Finding("OK", "slurm.job_comments", "AccountingStoreFlags",
                       f"{storage} keeps job comments (job_comment)", cluster)
    return Finding("WARN", "slurm.job_comments", "AccountingStoreFlags",
                   f"accounting ({storage}) does not keep job comments: sacct will not show a job's opt-in once "
                   "slurmctld forgets the job; add job_comment to AccountingStoreFlags in slurm.conf "
                   "(e.g. AccountingStoreFlags=job_comment) and run `scontrol reconfigure`", cluster)


def min_job_age(cluster: ClusterSettings, *, min_job_age_s: float) -> Finding:
    """MinJobAge against the decision deadline (`decision_timing`)."""
    problems = decision_timing(cluster, min_job_age_s=min_job_age_s)
    setting = f"MinJobAge / clusters.{cluster.name}.watchdog.decision_deadline_s"
    if not problems:
        w = cluster.watchdog
        total = cluster.poll_interval_s + w.decision_deadline_s + w.activity_timeout_s
        return Finding("OK", "slurm.min_job_age", setting, f"a failed job is requeued within {total:g} s, well "
                       f"inside MinJobAge ({min_job_age_s:g} s)", cluster.name)
    problem = problems[0]
    return Finding("FAIL" if problem.severity == "error" else "WARN", "slurm.min_job_age", setting,
                   problem.message, cluster.name)


def job_requeue(config: dict[str, str], *, cluster: str) -> Finding:
    """Jobs can be requeued (JobRequeue, 1 by default)."""
    value = config.get("JobRequeue", "1").strip()
    if value == "0":
        return Finding("WARN", "slurm.job_requeue", "JobRequeue",
                       "JobRequeue=0: Slurm refuses to requeue a job not submitted with --requeue, so jobmedic "
                       "can only advise resubmitting; set JobRequeue=1 in slurm.conf, or have users add "
                       "`#SBATCH --requeue`", cluster)
    return Finding("OK", "slurm.job_requeue", "JobRequeue", f"JobRequeue={value}: jobs can be requeued", cluster)


def output_paths(seen: dict[str, tuple[str, bool]], *, cluster: str, access: str) -> Finding:
    """Whether the output files of recent jobs (job id -> (path, visible)) can be read by jobmedic."""
    setting = f"clusters.{cluster}.scheduler.access"
    how = "over SFTP" if access == "ssh" else "on this machine"
    if not seen:
        return Finding("WARN", "slurm.output_paths", setting, "no running or recent job writes an output file, "
                       "so none was looked for: submit a job and run check again", cluster)
    hidden = {job: path for job, (path, visible) in seen.items() if not visible}
    examples = ", ".join(f"job {job}: {path}" for job, path in list(hidden.items())[:3])
    if len(hidden) == len(seen):
        fix = ("mount the file system holding the jobs' output here, or set scheduler.access = \"ssh\" to a "
               "login node that sees it" if access == "local" else
               "give the SSH user read access to the jobs' output, or point scheduler.ssh.host at a node that "
               "mounts it")
        return Finding("FAIL", "slurm.output_paths", setting, f"none of {len(seen)} recent jobs' output files is "
                       f"readable {how} ({examples}): detection from logs sees nothing; {fix}", cluster)
    if hidden:
        return Finding("WARN", "slurm.output_paths", setting, f"{len(hidden)} of {len(seen)} recent jobs' output "
                       f"files are not readable {how} ({examples}); deleted since, or on a file system "
                       "jobmedic does not see", cluster)
    return Finding("OK", "slurm.output_paths", setting,
                   f"the output files of {len(seen)} recent jobs are readable {how}", cluster)


def maps_to_nodes(values: list[str], nodes: list[str]) -> list[str]:
    """Values that name a node, exactly or as `node.domain`."""
    names = set(nodes)
    return [v for v in values if v in names or v.split(".", 1)[0] in names]


def best_label(values_by_label: dict[str, list[str]], wanted: list[str]) -> str | None:
    """The label whose values include most of `wanted`; None when none includes any."""
    scored = [(len(set(values) & set(wanted)), name) for name, values in values_by_label.items()]
    scored = [item for item in scored if item[0] > 0]
    return max(scored)[1] if scored else None


def job_label(
    values_by_label: dict[str, list[str]], *, configured: str, job_ids: list[str], store: str, cluster: str,
) -> Finding:
    """The store's label for the Slurm job id is the configured one (else which to set).

    `values_by_label` holds the values of the labels that could carry job ids
    (the configured one when the store has it, and the usual names).
    """
    setting = f"clusters.{cluster}.logs.job_label"
    if configured in values_by_label:
        values = values_by_label[configured]
        if not job_ids or set(values) & set(job_ids) or any(v.isdigit() for v in values):
            return Finding("OK", "logs.job_label", setting, f"{store} has the label {configured!r} "
                           f"({len(values)} values)", cluster)
    # a label holding a recent job's id is certain; else a usual name whose values are numbers
    # (never Loki's `job`, the scrape job, unless its values are the job ids themselves)
    better = best_label(values_by_label, job_ids) or next(
        (name for name in JOB_LABEL_ALIASES if name not in (configured, "job")
         and any(v.isdigit() for v in values_by_label.get(name, []))), None)
    present = "has it, but none of its values is a job id" if configured in values_by_label else "has no such label"
    if better and better != configured:
        return Finding("FAIL", "logs.job_label", setting, f"logs.job_label = {configured!r}, but {store} {present}; "
                       f"its label {better!r} carries the Slurm job ids: set logs.job_label = {better!r}", cluster)
    return Finding("FAIL", "logs.job_label", setting, f"logs.job_label = {configured!r}, but {store} {present} and "
                   "no other label carries Slurm job ids: have the log agent attach SLURM_JOB_ID as a label "
                   f"(e.g. {configured}) to every line of a job's output", cluster)


def host_label(
    values_by_label: dict[str, list[str]], *, configured: str, nodes: list[str], where: str, key: str,
    check: str, cluster: str, missing: Status,
) -> Finding:
    """The label holding the node name is the configured one and its values are Slurm node names.

    `key` is the setting (`logs.host_label`, `metrics.host_label`); `missing` the status when it is wrong.
    """
    setting = f"clusters.{cluster}.{key}"
    if configured in values_by_label and (not nodes or maps_to_nodes(values_by_label[configured], nodes)):
        named = maps_to_nodes(values_by_label[configured], nodes)
        return Finding("OK", check, setting, f"{where} label {configured!r} names nodes "
                       f"({', '.join(sorted(named)[:4]) or 'no node list to compare'})", cluster)
    naming = {name: maps_to_nodes(values, nodes) for name, values in values_by_label.items()}
    better = max(((len(v), name) for name, v in naming.items() if v), default=(0, None))[1]
    state = (f"has values {', '.join(sorted(values_by_label[configured])[:4])} that are no Slurm node names"
             if configured in values_by_label else "is not a label there")
    if better is not None:
        return Finding(missing, check, setting, f"{configured!r} {state}; its label {better!r} names the nodes "
                       f"({', '.join(sorted(naming[better])[:4])}): set {key} = {better!r}",
                       cluster)
    return Finding(missing, check, setting, f"{configured!r} {state}, and no label of {where} names a Slurm node "
                   f"({', '.join(nodes[:4])}...): make the exporter or agent label each series with the node's "
                   "Slurm name (as `sinfo -N` prints it)", cluster)


def dcgm_series(names: list[str], *, cluster: str) -> Finding:
    """Prometheus holds DCGM exporter series, the ones jobmedic reads among them."""
    setting = f"clusters.{cluster}.metrics.prometheus_url"
    if not names:
        return Finding("FAIL", "metrics.dcgm_series", setting, "Prometheus holds no DCGM_FI_DEV_* series: run "
                       "NVIDIA's dcgm-exporter on every GPU node and add it to Prometheus' scrape_configs, or point "
                       "metrics.prometheus_url at the Prometheus that scrapes it", cluster)
    wanted = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]
    lacking = [n for n in wanted if n not in names]
    if lacking:
        return Finding("WARN", "metrics.dcgm_series", setting, f"DCGM series present but not {', '.join(lacking)}: "
                       "add those fields to dcgm-exporter's collectors CSV (-f)", cluster)
    return Finding("OK", "metrics.dcgm_series", setting, f"{len(names)} DCGM series names, the ones jobmedic reads "
                   "among them", cluster)


def audit_schema(version: int, latest: int, *, where: str) -> Finding:
    """The audit store's schema is this jobmedic's."""
    if version == latest:
        return Finding("OK", "audit.schema", "audit.url", f"{where} is at schema version {version} (current)")
    return Finding("WARN", "audit.schema", "audit.url", f"{where} is at schema version {version}, this jobmedic's "
                   f"is {latest}: the worker migrates it at start (its user needs CREATE and ALTER there)")


def search_attributes(registered: dict[str, str], expected: dict[str, str], *, namespace: str, address: str) -> Finding:
    """Every search attribute the workflows set is registered with its type (name -> type, as the CLI spells it)."""
    wrong = {n: t for n, t in expected.items() if n in registered and registered[n] != t}
    absent = {n: t for n, t in expected.items() if n not in registered}
    if not wrong and not absent:
        return Finding("OK", "temporal.search_attributes", "temporal.namespace",
                       f"namespace {namespace!r} has jobmedic's {len(expected)} search attributes")
    parts = []
    if absent:
        pairs = " ".join(f"--name {n} --type {t}" for n, t in absent.items())
        command = f"temporal operator search-attribute create --address {address} --namespace {namespace} {pairs}"
        parts.append(f"missing {', '.join(absent)}: register them with `{command}`")
    if wrong:
        parts.append("registered with another type: " + ", ".join(
            f"{n} is {registered[n]}, jobmedic sets {t}" for n, t in wrong.items())
            + " (a type cannot be changed: use another namespace, or remove and re-create the attribute)")
    return Finding("FAIL", "temporal.search_attributes", "temporal.namespace",
                   f"namespace {namespace!r}: " + "; ".join(parts))
