"""`jobmedic check [--cluster NAME] [--json]`: every configured signal, before the first job.

Reads what jobmedic will depend on — the scheduler (local or SSH), the job
output files or log store, Prometheus, the audit store, Temporal — and prints
one finding per line: OK, WARN or FAIL, the setting or Slurm parameter
concerned, and what to change (`--json`: one JSON object per line). Exits 1
when any finding is a FAIL. Nothing is changed anywhere: the audit store is
probed with a write that is rolled back, the log store and Prometheus are only
queried. The rules (which facts make which finding) are in workers/checks.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from adapters.errors import ConfigError, JobmedicError
from adapters.slurm.ctld_config import min_job_age_s, parse_show_config
from adapters.slurm.parse import load_document
from workers import checks
from workers.checks import Finding
from workers.settings import ClusterSettings, Settings
from workflows.contracts import JobInfo, LogCursor

RECENT_JOBS = 10  # output files looked for
STORE_JOBS = 3  # recent jobs looked up in a log store
LABEL_WINDOW = timedelta(hours=6)  # label names and values asked of a log store over this span
CHECK_TIMEOUT_S = 20.0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "check",
        help="check every configured signal (Slurm, logs, metrics, audit store, Temporal) and say what to change",
        description="One line per finding: OK, WARN or FAIL, the setting or Slurm parameter concerned, what to do. "
        "Exit code 1 when any finding is a FAIL.",
    )
    parser.add_argument("--cluster", metavar="NAME", help="only this cluster (default: every configured one)")
    parser.add_argument("--json", action="store_true", help="one JSON object per finding, one per line")
    parser.set_defaults(handler=run_check)


def run_check(args: argparse.Namespace, settings: Settings) -> int:
    findings = asyncio.run(gather(settings, cluster=args.cluster))
    for finding in findings:
        print(json.dumps(finding.document()) if args.json else finding.line())
    return 1 if any(f.status == "FAIL" for f in findings) else 0


async def gather(settings: Settings, *, cluster: str | None = None) -> list[Finding]:
    """Every finding: each cluster's signals, then the audit store and Temporal."""
    clusters = [settings.cluster(cluster)] if cluster else list(settings.clusters)
    found: list[Finding] = []
    for one in clusters:
        found += await check_cluster(one, settings)
    found += await asyncio.to_thread(check_audit, settings)
    found += await check_temporal(settings)
    return found


# --------------------------------------------------------------------------- scheduler


@dataclass
class SlurmFacts:
    reachable: bool = False
    jobs: list[JobInfo] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)


async def check_cluster(cluster: ClusterSettings, settings: Settings) -> list[Finding]:
    from workers.factories.slurm import build_slurm_client

    found: list[Finding] = []
    facts = SlurmFacts()
    async with build_slurm_client(cluster, deployment=settings.deployment) as slurm:
        found += await _check_slurm(cluster, slurm, facts)
        if facts.reachable:
            found += await _check_output_files(cluster, slurm, facts)
    if cluster.logs.kind != "files":
        found += await _check_log_store(cluster, facts)
    found += await _check_metrics(cluster, facts)
    return found


async def _check_slurm(cluster: ClusterSettings, slurm: Any, facts: SlurmFacts) -> list[Finding]:
    name = cluster.name
    access = cluster.scheduler.access
    setting = f"clusters.{name}.scheduler.ssh" if access == "ssh" else f"clusters.{name}.scheduler.access"
    try:
        facts.jobs = await slurm.list_jobs(opted_in_only=False)
        facts.nodes = [n.name for n in await slurm.list_nodes()]
    except JobmedicError as exc:
        return [Finding("FAIL", "slurm.reachable", setting, f"{exc}", name)]
    facts.reachable = True
    found = [Finding("OK", "slurm.reachable", setting, f"squeue and sinfo answer ({slurm.runner.describe()})", name)]
    timeout = cluster.scheduler.command_timeout_s
    try:
        jobs = load_document((await slurm.runner.run(["squeue", "--json"], timeout=timeout)).stdout,
                             what="squeue --json", list_key="jobs")
        nodes = load_document((await slurm.runner.run(["sinfo", "--json"], timeout=timeout)).stdout,
                              what="sinfo --json", list_key="nodes")
        found.append(checks.slurm_fields(jobs, nodes, cluster=name))
    except JobmedicError as exc:
        found.append(Finding("FAIL", "slurm.fields", f"clusters.{name}.scheduler", str(exc), name))
    result = await slurm.runner.run(["scontrol", "show", "config"], timeout=timeout)
    if result.returncode != 0:
        why = " ".join(result.stderr.split()) or f"exit code {result.returncode}"
        found.append(Finding("FAIL", "slurm.config", f"clusters.{name}.scheduler",
                             f"`scontrol show config` failed ({why}): MinJobAge, JobRequeue and the accounting "
                             "flags cannot be checked; jobmedic's Slurm user must be able to run it", name))
        return found
    config = parse_show_config(result.stdout)
    found.append(checks.job_comments(config, cluster=name))
    try:
        found.append(checks.min_job_age(cluster, min_job_age_s=min_job_age_s(config)))
    except JobmedicError as exc:
        found.append(Finding("FAIL", "slurm.min_job_age", "MinJobAge", str(exc), name))
    found.append(checks.job_requeue(config, cluster=name))
    return found


def recent_jobs(jobs: list[JobInfo], *, limit: int) -> list[JobInfo]:
    """Jobs that started (running or ended), opted-in ones first, newest first."""
    started = [j for j in jobs if j.start_time is not None and (j.state.value == "RUNNING" or j.state.finished)]
    started.sort(key=lambda j: (j.opt_in.opted_in, j.start_time), reverse=True)
    return started[:limit]


async def _check_output_files(cluster: ClusterSettings, slurm: Any, facts: SlurmFacts) -> list[Finding]:
    from workers.factories.logs import file_log_source

    connection = slurm.runner.connection if cluster.scheduler.access == "ssh" else None
    source = file_log_source(cluster.logs, connection_provider=connection)
    with_files = [j for j in recent_jobs(facts.jobs, limit=len(facts.jobs))
                  if j.stdout_path and not j.stdout_path.startswith("/dev/")][:RECENT_JOBS]
    seen: dict[str, tuple[str, bool]] = {}
    lines: dict[str, int] = {}
    try:
        for job in with_files:
            try:
                chunk = await source.read(LogCursor(path=job.stdout_path), max_bytes=4096)
            except JobmedicError:
                seen[job.job_id] = (job.stdout_path, False)
                continue
            seen[job.job_id] = (job.stdout_path, not chunk.missing)
            if not chunk.missing:
                lines[job.job_id] = len(chunk.lines)
    finally:
        if hasattr(source, "aclose"):
            await source.aclose()
    finding = checks.output_paths(seen, cluster=cluster.name, access=cluster.scheduler.access)
    if cluster.logs.kind != "files" and finding.status == "FAIL":
        # the watch reads the log store then; the files only serve people
        finding = Finding("WARN", finding.check, finding.setting, finding.message, finding.cluster)
    found = [finding]
    if cluster.logs.kind == "files" and lines:
        job_id = max(lines, key=lambda j: lines[j])
        if lines[job_id]:
            found.append(Finding("OK", "logs.recent_job", f"clusters.{cluster.name}.logs.kind",
                                 f"read {lines[job_id]} line(s) of job {job_id}'s output ({seen[job_id][0]})",
                                 cluster.name))
        else:
            found.append(Finding("WARN", "logs.recent_job", f"clusters.{cluster.name}.logs.kind",
                                 f"the output files of {len(lines)} recent jobs are empty: nothing to detect from "
                                 "yet; run check again once a job has printed", cluster.name))
    return found


# --------------------------------------------------------------------------- log stores


class _LabelApi:
    """Label (Loki) or field (VictoriaLogs) names and values, from the store's own discovery API.

    Loki: `GET /loki/api/v1/labels` and `/loki/api/v1/label/<name>/values` (`start`,
    `end` in ns) answer `{"status": "success", "data": [...]}`. VictoriaLogs:
    `/select/logsql/field_names` and `/select/logsql/field_values` (`query`,
    `start`, `end`, `field`) answer `{"values": [{"value": ..., "hits": N}, ...]}`.
    """

    def __init__(self, cluster: ClusterSettings, client: httpx.AsyncClient) -> None:
        self.kind = cluster.logs.kind
        self.url = (cluster.logs.url or "").rstrip("/")
        self.client = client
        self.store = "Loki" if self.kind == "loki" else "VictoriaLogs"
        end = datetime.now(UTC)
        self.start, self.end = end - LABEL_WINDOW, end

    async def names(self) -> list[str]:
        if self.kind == "loki":
            return await self._loki("/loki/api/v1/labels")
        return await self._victoria("/select/logsql/field_names", {})

    async def values(self, name: str) -> list[str]:
        if self.kind == "loki":
            return await self._loki(f"/loki/api/v1/label/{name}/values")
        return await self._victoria("/select/logsql/field_values", {"field": name, "limit": "1000"})

    async def _loki(self, path: str) -> list[str]:
        from adapters.logs.stores import to_ns

        body = await self._get(path, {"start": str(to_ns(self.start)), "end": str(to_ns(self.end))})
        if not isinstance(body, dict) or body.get("status") != "success" or not isinstance(body.get("data"), list):
            raise JobmedicError(f"Loki at {self.url} answered {path} with something that is not a label list")
        return [str(v) for v in body["data"]]

    async def _victoria(self, path: str, extra: dict[str, str]) -> list[str]:
        from adapters.logs.stores import rfc3339_ns, to_ns

        params = {"query": "*", "start": rfc3339_ns(to_ns(self.start)), "end": rfc3339_ns(to_ns(self.end)), **extra}
        body = await self._get(path, params)
        if not isinstance(body, dict) or not isinstance(body.get("values"), list):
            raise JobmedicError(f"VictoriaLogs at {self.url} answered {path} with something that is not a value list")
        return [str(v.get("value")) for v in body["values"] if isinstance(v, dict)]

    async def _get(self, path: str, params: dict[str, str]) -> Any:
        try:
            response = await self.client.get(self.url + path, params=params)
        except httpx.HTTPError as exc:
            raise JobmedicError(f"{self.store} at {self.url} did not answer ({type(exc).__name__}: {exc})") from exc
        if response.status_code != 200:
            raise JobmedicError(f"{self.store} at {self.url} answered {path} with HTTP {response.status_code}: "
                                f"{response.text[:200]}")
        try:
            return response.json()
        except ValueError as exc:
            raise JobmedicError(f"{self.store} at {self.url} answered {path} with non-JSON") from exc


async def _check_log_store(cluster: ClusterSettings, facts: SlurmFacts) -> list[Finding]:
    from workers.factories.logs import job_log_store
    from adapters.logs.stores import bearer_headers

    logs, name = cluster.logs, cluster.name
    if not logs.url:
        return [Finding("FAIL", "logs.reachable", f"clusters.{name}.logs.url",
                        f"logs.kind is {logs.kind!r} but logs.url is not set: set it to the store's base URL", name)]
    headers = {"Accept": "application/json", **bearer_headers(logs.bearer_token)}
    async with httpx.AsyncClient(timeout=logs.timeout_s, headers=headers) as client:
        api = _LabelApi(cluster, client)
        try:
            names = await api.names()
        except JobmedicError as exc:
            return [Finding("FAIL", "logs.reachable", f"clusters.{name}.logs.url",
                            f"{exc}; check logs.url and logs.bearer_token", name)]
        found = [Finding("OK", "logs.reachable", f"clusters.{name}.logs.url",
                         f"{api.store} at {api.url} answers ({len(names)} label names)", name)]
        recent = recent_jobs(facts.jobs, limit=STORE_JOBS)
        job_ids = [j.job_id for j in recent]
        job_values = {n: await api.values(n) for n in dict.fromkeys([logs.job_label, *checks.JOB_LABEL_ALIASES])
                      if n in names}
        job_finding = checks.job_label(job_values, configured=logs.job_label, job_ids=job_ids, store=api.store,
                                       cluster=name)
        found.append(job_finding)
        host_values = {n: await api.values(n) for n in dict.fromkeys([logs.host_label, *checks.HOST_LABEL_ALIASES])
                       if n in names}
        found.append(checks.host_label(host_values, configured=logs.host_label, nodes=facts.nodes,
                                       where=api.store, key="logs.host_label", check="logs.host_label",
                                       cluster=name, missing="WARN"))
    label = logs.job_label if job_finding.status == "OK" else checks.best_label(job_values, job_ids)
    if label is None:
        return found
    store = job_log_store(logs.model_copy(update={"job_label": label}))
    for job in recent:
        start = (job.start_time or datetime.now(UTC)) - timedelta(minutes=1)
        end = (job.end_time or datetime.now(UTC)) + timedelta(minutes=1)
        try:
            records = await store.query(job.job_id, start=start, end=end, limit=1, direction="backward")  # type: ignore[union-attr]
        except JobmedicError as exc:
            found.append(Finding("FAIL", "logs.recent_job", f"clusters.{name}.logs", str(exc), name))
            return found
        if records:
            found.append(Finding("OK", "logs.recent_job", f"clusters.{name}.logs.job_label",
                                 f"found lines of job {job.job_id} in {api.store} by {label}={job.job_id!r}", name))
            return found
    shown = ", ".join(job_ids) or "none"
    found.append(Finding("WARN", "logs.recent_job", f"clusters.{name}.logs.job_label",
                         f"no line of the recent jobs ({shown}) in {api.store} by {label}=<job id>: check that the "
                         "log agent ships each job's output with that label" if job_ids else
                         "no running or recent job to look up: submit one and run check again", name))
    return found


# --------------------------------------------------------------------------- metrics


async def _check_metrics(cluster: ClusterSettings, facts: SlurmFacts) -> list[Finding]:
    from adapters.errors import MetricsError
    from adapters.metrics.prometheus import PrometheusClient

    m, name = cluster.metrics, cluster.name
    setting = f"clusters.{name}.metrics.prometheus_url"
    if not m.prometheus_url:
        return [Finding("OK", "metrics.configured", setting, "not set: no GPU metrics (idle-GPU hangs and DCGM "
                        "evidence are off); set it to the Prometheus that scrapes dcgm-exporter to use them", name)]
    client = PrometheusClient(m.prometheus_url, host_label=m.host_label, timeout_s=m.timeout_s,
                              bearer_token=m.bearer_token)
    now = datetime.now(UTC)
    try:
        await client.query("vector(1)", at=now)
    except MetricsError as exc:
        return [Finding("FAIL", "metrics.reachable", setting, f"{exc}; check metrics.bearer_token too", name)]
    found = [Finding("OK", "metrics.reachable", setting, f"Prometheus at {client.url} answers", name)]
    _, result = await client.query('count by (__name__) ({__name__=~"DCGM_FI_DEV_.*"})', at=now)
    names = sorted({str((r.get("metric") or {}).get("__name__", "")) for r in result} - {""})
    found.append(checks.dcgm_series(names, cluster=name))
    if not names:
        return found
    metric = "DCGM_FI_DEV_GPU_UTIL" if "DCGM_FI_DEV_GPU_UTIL" in names else names[0]
    _, series = await client.query(f"last_over_time({metric}[10m])", at=now)
    values: dict[str, set[str]] = {}
    for one in series:
        for label, value in (one.get("metric") or {}).items():
            values.setdefault(str(label), set()).add(str(value))
    found.append(checks.host_label({k: sorted(v) for k, v in values.items()}, configured=m.host_label,
                                   nodes=facts.nodes, where="the DCGM series", key="metrics.host_label",
                                   check="metrics.host_label", cluster=name, missing="FAIL"))
    return found


# --------------------------------------------------------------------------- audit store


def check_audit(settings: Settings) -> list[Finding]:
    """The audit store can be written (a rolled-back write) and its schema version."""
    from adapters.audit import migrations
    from adapters.audit.engine import SQLITE_BEGIN, family, make_engine, parse_url, sqlite_path
    from adapters.audit.errors import where
    from adapters.audit.store import AuditStore

    try:
        url = parse_url(settings.audit_url)
    except ConfigError as exc:
        return [Finding("FAIL", "audit.writable", "audit.url", str(exc))]
    shown = where(url)
    path = sqlite_path(url)
    if path is not None and not path.exists():
        return [_sqlite_directory(path)]
    try:
        version = AuditStore(settings.audit_url).schema_version()
    except JobmedicError as exc:
        return [Finding("FAIL", "audit.writable", "audit.url", f"{exc}; {_audit_fix(path)}")]
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            if family(url) == "sqlite":
                conn = conn.execution_options(**{SQLITE_BEGIN: "BEGIN IMMEDIATE"})
            with conn.begin() as tx:
                if version:
                    conn.execute(sa.text("UPDATE schema_version SET name = name WHERE version = -1"))
                tx.rollback()
    except sa.exc.SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", exc)).splitlines()[0]
        return [Finding("FAIL", "audit.writable", "audit.url",
                        f"audit store {shown} cannot be written ({reason}); {_audit_fix(path)}")]
    finally:
        engine.dispose()
    if version > migrations.LATEST_VERSION:
        return [Finding("FAIL", "audit.schema", "audit.url", f"{shown} has schema version {version}, newer than this "
                        f"jobmedic's {migrations.LATEST_VERSION}: upgrade jobmedic on every machine that uses it")]
    return [Finding("OK", "audit.writable", "audit.url", f"{shown} can be written"),
            checks.audit_schema(version, migrations.LATEST_VERSION, where=shown)]


def _sqlite_directory(path: Path) -> Finding:
    """A SQLite store not created yet: the worker creates it, so its directory must be writable."""
    directory = path.parent
    existing = next((p for p in [directory, *directory.parents] if p.exists()), Path("/"))
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        return Finding("FAIL", "audit.writable", "data_dir / audit.url", f"{path} does not exist and {existing} "
                       f"is not writable ({exc.strerror}); {_audit_fix(path)}")
    return Finding("OK", "audit.writable", "data_dir / audit.url", f"{path} does not exist yet: the worker creates "
                   f"and migrates it at start ({existing} is writable)")


def _audit_fix(path: Path | None) -> str:
    if path is None:
        return "check audit.url and that its user may write the database (INSERT, UPDATE, CREATE, ALTER)"
    return (f"make {path.parent} and {path.name} writable for jobmedic's user (SQLite also writes "
            f"{path.name}-wal and -shm beside it), or set data_dir (JOBMEDIC_DATA_DIR) or audit.url elsewhere")


# --------------------------------------------------------------------------- Temporal


def expected_search_attributes() -> dict[str, str]:
    """Name -> type (as `temporal operator search-attribute create --type` spells it) of every attribute set."""
    from temporalio.common import SearchAttributeKey

    from workflows import job_recovery

    types = {"TEXT": "Text", "KEYWORD": "Keyword", "INT": "Int", "DOUBLE": "Double", "BOOL": "Bool",
             "DATETIME": "Datetime", "KEYWORD_LIST": "KeywordList"}
    return {key.name: types[key.indexed_value_type.name] for key in vars(job_recovery).values()
            if isinstance(key, SearchAttributeKey)}


async def check_temporal(settings: Settings) -> list[Finding]:
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
    from temporalio.service import RPCError

    from workers.temporal_client import connect

    t = settings.temporal
    try:
        client = await asyncio.wait_for(connect(settings), CHECK_TIMEOUT_S)
    except ConfigError as exc:
        setting = "temporal.namespace" if "no such namespace" in str(exc) else "temporal.api_key / temporal.tls"
        return [Finding("FAIL", "temporal.namespace" if setting == "temporal.namespace" else "temporal.reachable",
                        setting, str(exc))]
    except (JobmedicError, TimeoutError) as exc:
        return [Finding("FAIL", "temporal.reachable", "temporal.address",
                        str(exc) or f"no answer from {t.address} within {CHECK_TIMEOUT_S:g} s")]
    found = [Finding("OK", "temporal.reachable", "temporal.address",
                     f"Temporal at {t.address} answers; namespace {t.namespace!r} exists")]
    try:
        answer = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=t.namespace), timeout=timedelta(seconds=10))
    except RPCError as exc:
        found.append(Finding("FAIL", "temporal.search_attributes", "temporal.namespace",
                             f"cannot list the search attributes of {t.namespace!r} ({exc.message}): the API key or "
                             "certificate needs the operator's read permission"))
        return found
    prefix = "INDEXED_VALUE_TYPE_"
    registered = {
        name: "".join(p.title() for p in IndexedValueType.Name(kind).removeprefix(prefix).split("_"))
        for name, kind in answer.custom_attributes.items()
    }
    found.append(checks.search_attributes(registered, expected_search_attributes(), namespace=t.namespace,
                                          address=t.address))
    return found
