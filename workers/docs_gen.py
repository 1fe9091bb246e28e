"""The generated parts of the docs: settings table, opt-in reference, failure-pattern and Xid reference.

Each is rendered from the code it documents (the `Settings` model, the `OptIn`
model and the opt-in parser's limits, the pattern catalogue, the Xid table), so
a doc cannot drift from what jobmedic does. A doc holds a generated part
between two markers:

    <!-- BEGIN GENERATED settings: python -m workers.docs_gen -->
    ...
    <!-- END GENERATED settings -->

`python -m workers.docs_gen` rewrites every generated part of the docs in
`DOCS`; `--check` only reports the stale ones (exit 1).
`tests/docs/test_docs_current.py` fails when a checked-in doc differs from what
this module renders.

A setting or opt-in field that has no meaning (neither a pydantic
`description=` nor an entry in `SETTING_MEANINGS` / `OPT_IN_MEANINGS`) is
listed by `undocumented()`; the tests refuse it.
"""

from __future__ import annotations

import argparse
import enum
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

REGENERATE = "python -m workers.docs_gen"
REPO = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- settings

# Meaning of every setting, by dotted path (`clusters.` for the keys of each [[clusters]] entry).
# A pydantic `Field(description=...)` on the model takes precedence over the text here.
SETTING_MEANINGS: dict[str, str] = {
    "data_dir": "Where the embedded SQLite audit store (`audit.db`) and the dev server's database live.",
    "log_level": "Level of the worker's and the command line's log (any case); `--log-level` overrides it.",
    "deployment": "This deployment's name, written into the `AdminComment` mark of every job it acts on. "
                  "Two deployments that watch one cluster need different names: neither acts on a job the other owns.",
    "fault_delays": "Activity name → seconds slept at its start. Fault injection for the crash-safety tests; "
                    "leave empty in production.",
    "metrics_port": "Port of the worker's Prometheus endpoint (figures about jobmedic itself); not set: not served.",
    "metrics_bind": "Address the metrics endpoint binds.",
    "temporal.api_key": "API key sent as `Authorization: Bearer ...` (Temporal Cloud); implies TLS unless "
                        "`tls.enabled = false`.",
    "temporal.tls.enabled": "TLS to the Temporal frontend; not set: TLS when an API key or any file below is set.",
    "temporal.tls.ca_file": "CA of the server's certificate (PEM); not set: the system's roots.",
    "temporal.tls.cert_file": "Client certificate for mTLS (PEM); goes with `key_file`.",
    "temporal.tls.key_file": "Key of the client certificate (PEM); goes with `cert_file`.",
    "temporal.tls.server_name": "Name the server's certificate carries (and SNI), when it is not the host of "
                                "`temporal.address`.",
    "temporal.address": "Temporal frontend, `host:port`.",
    "temporal.namespace": "Temporal namespace of the workflows.",
    "temporal.task_queue": "Main task queue: the `JobRecovery` and `ClusterWatch` workflows, the `attribute` and "
                           "`record_audit` activities. Each cluster's scheduler activities use "
                           "`jobmedic-slurm-<cluster>`.",
    "temporal.ui_url": "Base URL of the Temporal Web UI, used in the links jobmedic prints.",
    "audit.url": "SQLAlchemy URL of the audit store, e.g. `mysql+pymysql://jobmedic:SECRET@db:3306/jobmedic`; "
                 "not set: SQLite at `<data_dir>/audit.db`.",
    "clusters.name": "The cluster's name: in workflow ids, the `Cluster` search attribute and the task queue "
                     "`jobmedic-slurm-<name>`. Letters, digits, `.`, `_`, `-`; unique.",
    "clusters.environment": "The cluster's own environment; action needs it to match `environment_pattern`.",
    "clusters.environment_pattern": "Regular expression (full match). Action only when both the cluster's "
                                    "`environment` and the job's opt-in `environment` match it.",
    "clusters.job_environments": "Regular expression (full match) over the job's opt-in `environment`: opted-in "
                                 "jobs that do not match are left alone (another deployment's).",
    "clusters.mode": "`observe` (monitor mode: advice only, no scheduler command) or `action`.",
    "clusters.acknowledge_scheduler_actions": "Must be `true`, together with `mode = \"action\"`, before any "
                                              "scheduler command is issued.",
    "clusters.poll_interval_s": "Seconds between two passes of the cluster watch (one scheduler query for all jobs).",
    "clusters.watch_shards": "The cluster watch runs this many activities, each over the jobs whose job-id hash "
                             "names it, so several workers share a large cluster (1-64). A change takes effect "
                             "when the watch workflow starts anew.",
    "clusters.scheduler.access": "`local`: the Slurm commands on this machine (Slurm client + munge); "
                                 "`ssh`: the commands on a login node over SSH (needs `[clusters.scheduler.ssh]`).",
    "clusters.scheduler.command_timeout_s": "Timeout of one Slurm command.",
    "clusters.scheduler.env": "Local mode: extra environment for the Slurm commands (`SLURM_CONF` is inherited anyway).",
    "clusters.scheduler.ssh.host": "Login or controller node that runs the Slurm commands.",
    "clusters.scheduler.ssh.port": "SSH port.",
    "clusters.scheduler.ssh.user": "SSH user (a Slurm operator or admin, so it may requeue, hold, update and drain).",
    "clusters.scheduler.ssh.key_file": "Private key file; not set: asyncssh's default key files in `~/.ssh` (never an SSH agent).",
    "clusters.scheduler.ssh.known_hosts": "Required: a known_hosts file listing the host's key (host keys are "
                                          "always checked).",
    "clusters.scheduler.ssh.connect_timeout_s": "Timeout of the SSH connection.",
    "clusters.scheduler.ssh.env": "Environment of the remote commands, e.g. `{ SLURM_CONF = \"/etc/slurm/slurm.conf\" }`.",
    "clusters.logs.kind": "Log source: `files` (job output files, locally or by SFTP in SSH mode), `loki` or "
                          "`victorialogs`.",
    "clusters.logs.url": "Base URL of the log store (required for `loki` and `victorialogs`).",
    "clusters.logs.job_label": "Label (Loki) or field (VictoriaLogs) holding the Slurm job id.",
    "clusters.logs.host_label": "Label or field holding the node name.",
    "clusters.logs.extra_selector": "Extra selector added to every log-store query.",
    "clusters.logs.max_bytes_per_read": "At most this many bytes of one job's log are read per watch pass.",
    "clusters.logs.max_line_bytes": "Longer lines are cut to this many bytes before screening.",
    "clusters.logs.timeout_s": "Timeout of one log read (SFTP or log-store request).",
    "clusters.logs.bearer_token": "Bearer token for the log store.",
    "clusters.logs.store_settle_s": "Log stores: reads of a running job stop this many seconds short of now, "
                                    "so lines that agents ship late are not skipped.",
    "clusters.logs.store_backoff_s": "Log stores: after a failed request the watch leaves the store alone this long "
                                     "(other jobs are not held up by one timeout each) and then reads on from each "
                                     "job's cursor.",
    "clusters.metrics.prometheus_url": "Prometheus holding the DCGM exporter series (idle GPUs, per-node "
                                       "telemetry for stragglers); not set: no GPU metrics.",
    "clusters.metrics.host_label": "Label of the DCGM series that holds the node name.",
    "clusters.metrics.timeout_s": "Timeout of one Prometheus query.",
    "clusters.metrics.bearer_token": "Bearer token for Prometheus.",
    "clusters.attribution.url": "External attribution service (HTTP); not set: jobmedic's own verdict only.",
    "clusters.attribution.timeout_s": "Timeout of one request to it; it never delays a decision past its deadline.",
    "clusters.attribution.bearer_token": "Bearer token for it.",
    "clusters.watchdog.mode": "`action`: when a decision or action overruns its deadline or fails for good, the "
                              "job is released to normal scheduling (fail open); `observe`: the overrun is only audited.",
    "clusters.watchdog.decision_deadline_s": "Detection to recorded advice. `poll_interval_s` + this must sit well "
                                             "inside Slurm's `MinJobAge`.",
    "clusters.watchdog.action_deadline_s": "Advice to the scheduler's confirmation of the action.",
    "clusters.watchdog.activity_timeout_s": "One scheduler activity attempt; a worker lost mid-activity is "
                                            "noticed after this long.",
    "clusters.watchdog.audit_retry_pause_s": "Audit entries the store refused for good are sent again after this pause.",
    "clusters.policy.max_attempts": "Stop once a failure is the N-th within `attempts_window_s` (rule "
                                    "`attempt_budget`): 5 allows up to 4 restarts, 1 none. The job's opt-in "
                                    "`max_attempts` overrides it.",
    "clusters.policy.attempts_window_s": "Window of the attempt budget.",
    "clusters.policy.no_checkpoint_attempts": "Stop a job known to checkpoint when this many attempts in a row "
                                              "saved no new checkpoint (`no_checkpoint_progress`).",
    "clusters.policy.same_error_stop_after": "Stop when the same deterministic error signature was seen this "
                                             "many times (`same_app_error_twice`).",
    "clusters.policy.oom_stop_after": "Stop once out-of-memory failures (GPU and host together) reach this "
                                      "many (`oom_repeat`).",
    "clusters.policy.transient_restart_limit": "Stop once this many NCCL failures that name no host came before "
                                               "(`transient_limit`).",
    "clusters.policy.systemic_jobs": "Hold (`systemic_hold`) when at least this many distinct jobs failed on shared "
                                     "infrastructure within `systemic_window_s`.",
    "clusters.policy.systemic_window_s": "Window of the systemic rule.",
    "clusters.policy.systemic_settle_s": "A failure that may still become part of a systemic event is answered "
                                         "after at most this long, so a burst's first jobs are held like its last.",
    "clusters.policy.systemic_fraction": "Systemic when failures without node-specific evidence hit at least this "
                                         "fraction of the watched jobs (and at least `systemic_jobs` of them).",
    "clusters.policy.systemic_domain_share": "Systemic by failure domain when at least this share of the window's "
                                             "node-specific failures fall inside one switch, rack or partition.",
    "clusters.policy.systemic_hold_max_s": "Never hold a job for a systemic event longer than this; then it is "
                                           "released to normal scheduling (audited).",
    "clusters.policy.systemic_probe_s": "How often a systemic event's nodes and jobs are looked at to see whether "
                                        "its cause cleared.",
    "clusters.policy.systemic_clear_runtime_s": "A job outside the event that ran this long on the event's nodes "
                                                "means the cause has cleared.",
    "clusters.policy.systemic_webhook_url": "Optional generic JSON webhook for systemic alerts (chat, "
                                            "Alertmanager-style receivers); not set: audit entry and metric only.",
    "clusters.policy.systemic_webhook_timeout_s": "Timeout of one webhook POST (an alert never delays recovery).",
    "clusters.policy.topology": "Failure domains beyond Slurm's own: name (`rack:a`, `switch:s1`) → its nodes.",
    "clusters.policy.lemon_jobs": "A node implicated in failures of this many distinct jobs inside `lemon_window_s` "
                                  "is a lemon: kept out of every jobmedic restart.",
    "clusters.policy.lemon_window_s": "Window in which a node's failures count towards making it a lemon.",
    "clusters.policy.lemon_healthy_s": "Each this much healthy runtime on a node takes one job's worth of suspicion "
                                       "away, so a node that was unlucky once comes back.",
    "clusters.policy.lemon_max_fraction": "At most this fraction of the cluster's nodes (at least one) is kept out "
                                          "as lemons at once.",
    "clusters.policy.lemon_max_per_window": "At most this many new lemons per window (audited when the cap bites).",
    "clusters.policy.lemon_drain": "Also drain lemon nodes (with a reason naming jobmedic), not only exclude them.",
    "clusters.policy.drain_nodes": "Restarts also drain the excluded nodes (reason names jobmedic; a drain set "
                                   "by someone else is never overridden).",
    "clusters.policy.do_not_restart_exit_code": "A job that exits with this code is never restarted "
                                                "(93, NVIDIA Recovery's \"do not restart\").",
    "clusters.policy.straggler_action": "A straggler's culprit may be excluded by a restart; otherwise stragglers "
                                        "get advice only. The job's opt-in `straggler_action` overrides it.",
    "clusters.policy.straggler_restart_limit": "At most this many straggler restarts per job.",
    "clusters.hang.floor_s": "A learned hang bound is never below this.",
    "clusters.hang.ceiling_s": "A learned hang bound is never above this.",
    "clusters.hang.default_s": "Bound while the job's rhythm is still unknown (too few progress intervals).",
    "clusters.hang.factor": "Learned bound: this times the 95th percentile of the job's progress intervals.",
}

# What each section is, by path; a model docstring is used when a path is missing here.
SECTION_NOTES: dict[str, str] = {
    "": "Top-level keys of the TOML file.",
    "temporal": "The Temporal service.",
    "audit": "The audit store.",
    "clusters": "One `[[clusters]]` table per Slurm cluster. With none configured, one cluster named "
                "`local` with every default below.",
    "clusters.scheduler": "How jobmedic reaches Slurm.",
    "clusters.scheduler.ssh": "Only with `access = \"ssh\"` (then required).",
    "clusters.logs": "Where the watch reads job log lines.",
    "clusters.metrics": "GPU metrics (DCGM exporter series in Prometheus); optional.",
    "clusters.attribution": "An external attribution service; optional.",
    "clusters.watchdog": "Deadlines; overrunning one fails open.",
    "clusters.policy": "Knobs of the decision policy (`workflows/policy.py`, whose docstring lists the rules).",
    "clusters.hang": "Hang bound learned from the job's own progress intervals, clamped to [floor, ceiling].",
}


@dataclass(frozen=True)
class SettingRow:
    path: str  # dotted, without list brackets: "clusters.policy.max_attempts"
    type: str
    default: str
    meaning: str
    env: str  # environment variable, "" where there is none of its own


@dataclass(frozen=True)
class SettingsSection:
    path: str
    toml: str  # how the section is written in TOML: "", "[temporal]", "[[clusters]]", ...
    note: str
    rows: list[SettingRow]


def settings_sections() -> list[SettingsSection]:
    """Every settings section with its keys, in model order."""
    from workers.settings import Settings

    out: list[SettingsSection] = []
    _walk(Settings, path="", toml="", env_prefix="JOBMEDIC_", out=out, doc=Settings.__doc__)
    return out


def _walk(model: type[BaseModel], *, path: str, toml: str, env_prefix: str | None, out: list[SettingsSection],
          doc: str | None = None) -> None:
    rows: list[SettingRow] = []
    nested: list[tuple[str, type[BaseModel], bool]] = []
    for name, field in model.model_fields.items():
        key = f"{path}.{name}" if path else name
        section, many = _section_of(field.annotation)
        if section is not None:
            nested.append((name, section, many))
            continue
        env = f"{env_prefix}{name.upper()}" if env_prefix is not None else ""
        rows.append(SettingRow(path=key, type=_type_text(field), default=_default_text(field),
                               meaning=_meaning(field, SETTING_MEANINGS.get(key, "")), env=env))
    note = SECTION_NOTES.get(path) or _first_line(doc if path == "" else model.__doc__)
    out.append(SettingsSection(path=path, toml=toml, note=note, rows=rows))
    for name, section, many in nested:
        key = f"{path}.{name}" if path else name
        # lists of tables have no environment variable per key: the whole list is one JSON value
        child_env = None if (many or env_prefix is None) else f"{env_prefix}{name.upper()}__"
        child_toml = f"[[{key}]]" if many else f"[{key}]"
        _walk(section, path=key, toml=child_toml, env_prefix=child_env, out=out)


def _section_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field is a section of (`X`, `X | None`, `list[X]`), and whether it is a list of them."""
    args = [a for a in _union_args(annotation) if a is not type(None)]
    if len(args) == 1:
        only = args[0]
        if isinstance(only, type) and issubclass(only, BaseModel):
            return only, False
        if typing.get_origin(only) is list:
            (item,) = typing.get_args(only)
            if isinstance(item, type) and issubclass(item, BaseModel):
                return item, True
    return None, False


def _union_args(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return list(typing.get_args(annotation))
    return [annotation]


def _type_text(field: FieldInfo) -> str:
    # `X | None`: the default column says "not set"
    text = " or ".join(_one_type(a) for a in _union_args(field.annotation) if a is not type(None))
    bounds = _bounds(field)
    return f"{text}, {bounds}" if bounds else text


def _one_type(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:  # `Port | None`, `dict[str, Annotated[float, Field(ge=0)]]`: bounds inside
        base, *extras = typing.get_args(tp)
        items = [m for extra in extras for m in (extra.metadata if isinstance(extra, FieldInfo) else [extra])]
        bounds = _bounds_text(items)
        return f"{_one_type(base)}, {bounds}" if bounds else _one_type(base)
    if origin is Literal:
        return " \\| ".join(f'`"{v}"`' for v in typing.get_args(tp))
    if origin is dict:
        _, value = typing.get_args(tp)
        return f"table (each value: {_one_type(value)})"
    if origin is list:
        (item,) = typing.get_args(tp)
        return f"list (each item: {_one_type(item)})"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " \\| ".join(f'`"{m.value}"`' for m in tp)
    names = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "path", SecretStr: "secret string"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def _bounds(field: FieldInfo) -> str:
    return _bounds_text(field.metadata)


def _bounds_text(metadata: list[Any]) -> str:
    parts = []
    for item in metadata:
        for attr, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            value = getattr(item, attr, None)
            if isinstance(item, annotated_types.BaseMetadata) and value is not None:
                parts.append(f"{sign} {_plain(value)}")
    return ", ".join(parts)


def _default_text(field: FieldInfo) -> str:
    from workers.settings import default_data_dir

    if field.default_factory is default_data_dir:
        return "the user's data directory (`~/.local/share/jobmedic` on Linux)"
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    return _value_text(value)


def _value_text(value: Any) -> str:
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, enum.Enum):
        return f'`"{value.value}"`'
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, dict):
        return "`{}`" if not value else "`" + ", ".join(f"{k} = {_plain(v)}" for k, v in value.items()) + "`"
    return f"`{_plain(value)}`"


def _plain(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _meaning(field: FieldInfo, fallback: str) -> str:
    return (field.description or fallback).strip()


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().split("\n\n", 1)[0].replace("\n", " ")


def settings_table() -> str:
    """Every setting, one table per section, as Markdown."""
    parts = ["Cluster keys (under `[[clusters]]`) have no environment variable of their own: set them in the TOML "
             "file, or give the whole list as JSON in `JOBMEDIC_CLUSTERS`."]
    for section in settings_sections():
        if not section.rows:
            continue
        title = f"`{section.toml}`" if section.toml else "Top level"
        parts.append(f"### {title}\n\n{section.note}")
        with_env = any(row.env for row in section.rows)
        header = "| key | type | default | meaning |" + (" environment |" if with_env else "")
        rule = "|---|---|---|---|" + ("---|" if with_env else "")
        lines = [header, rule]
        for row in section.rows:
            key = row.path.rsplit(".", 1)[-1]
            cells = [f"`{key}`", row.type, row.default, _cell(row.meaning or "(undocumented)")]
            if with_env:
                cells.append(f"`{row.env}`" if row.env else "")
            lines.append("| " + " | ".join(cells) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


# --------------------------------------------------------------------------- opt-in

OPT_IN_MEANINGS: dict[str, str] = {
    "environment": "The job's environment. The deployment watches the job only when it matches the cluster's "
                   "`job_environments`, and acts only when it matches `environment_pattern`. At most "
                   "{MAX_TEXT_FIELD} characters.",
    "mode": "`observe`: advice only, whatever the cluster allows. `action`: jobmedic may act on the job when the "
            "cluster allows action too. Any case.",
    "max_attempts": "Attempt budget of this job; replaces the cluster's `policy.max_attempts`. The failure "
                    "that is the N-th within the policy's window stops the job: 3 allows up to 2 restarts, "
                    "0 or 1 none.",
    "checkpoint_dir": "Where the job writes its checkpoints. Naming one tells the policy that the job checkpoints, "
                      "so attempts that save no new checkpoint stop it (`no_checkpoint_progress`); jobmedic does "
                      "not read the directory. At most {MAX_TEXT_FIELD} characters.",
    "straggler_action": "`true`: a straggler's culprit node may be excluded by a restart; `false`: stragglers get "
                        "advice only. Not set: the cluster's `policy.straggler_action`.",
    "progress_pattern": "A Python regular expression for the job's own progress line; its first group, if any, "
                        "is the iteration. Once it has matched, progress that stops counts as a hang. At most "
                        "{MAX_PATTERN_CHARS} characters, no back-references, look-arounds or conditionals, no "
                        "repeat inside a repeat (`(a+)+`), no repeated alternation (`(a|b)*`), at most "
                        "{MAX_OPEN_REPEATS} open-ended repeats (`+`, `*`, `{{n,}}`); it sees the first "
                        "{USER_LINE_CHARS} characters of a line.",
}
OPT_IN_TYPES: dict[str, str] = {
    "environment": "string",
    "mode": '`"observe"` \\| `"action"`',
    "max_attempts": "integer ≥ 0",
    "checkpoint_dir": "string (a path)",
    "straggler_action": "boolean",
    "progress_pattern": "string (a regular expression)",
}
# `key` records which of the two keys the job used; it is not written in the comment
_OPT_IN_INTERNAL = {"key"}


def _opt_in_limits() -> dict[str, Any]:
    from activities.detection.progress import USER_LINE_CHARS
    from adapters.slurm import optin

    return {"MAX_TEXT_FIELD": optin.MAX_TEXT_FIELD, "MAX_PATTERN_CHARS": optin.MAX_PATTERN_CHARS,
            "MAX_OPEN_REPEATS": optin.MAX_OPEN_REPEATS, "USER_LINE_CHARS": USER_LINE_CHARS}


def opt_in_max_bytes() -> int:
    """The largest comment the watch reads as an opt-in (the Slurm client's default)."""
    from adapters.slurm.client import SlurmClient

    return int(inspect.signature(SlurmClient.__init__).parameters["opt_in_max_bytes"].default)


def opt_in_fields() -> list[str]:
    from workflows.contracts import OptIn

    return [name for name in OptIn.model_fields if name not in _OPT_IN_INTERNAL]


def opt_in_reference() -> str:
    """The opt-in keys and every field with type, default and meaning, as Markdown."""
    from adapters.slurm.optin import KEYS
    from workflows.contracts import OptIn

    limits = _opt_in_limits()
    keys = " and ".join(f"`{k}`" for k in KEYS)
    lines = [
        f"Keys: {keys} (exactly one of them; both in one comment make the opt-in invalid). The same fields "
        f"go under either key. A comment larger than {opt_in_max_bytes()} bytes is not read as an opt-in.",
        "",
        "| field | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for name in opt_in_fields():
        field = OptIn.model_fields[name]
        meaning = field.description or OPT_IN_MEANINGS.get(name, "")
        meaning = meaning.format(**limits) if meaning else "(undocumented)"
        default = _opt_in_default(name, field)
        lines.append(f"| `{name}` | {OPT_IN_TYPES.get(name, _type_text(field))} | {default} | {_cell(meaning)} |")
    return "\n".join(lines)


def _opt_in_default(name: str, field: FieldInfo) -> str:
    from workflows.contracts import PolicyConfig

    if name == "max_attempts" and field.default is None:
        return f"the cluster's `policy.max_attempts` ({PolicyConfig().max_attempts} by default)"
    if name == "straggler_action" and field.default is None:
        return f"the cluster's `policy.straggler_action` ({_value_text(PolicyConfig().straggler_action)} by default)"
    return _value_text(field.default)


# --------------------------------------------------------------------------- failure patterns and Xids


def failure_pattern_reference() -> str:
    """Every catalogue pattern, grouped by category, as Markdown."""
    from activities.detection.catalogue import DEFAULT_PATH, load_catalogue
    from workflows.contracts import Category

    catalogue = load_catalogue()
    source = DEFAULT_PATH.relative_to(REPO).as_posix()
    parts = [f"Catalogue version {catalogue.version}: {len(catalogue.patterns)} patterns "
             f"([{source}](../{source})), grouped by category in catalogue order."]
    counts = ["| category | patterns |", "|---|---|"]
    groups: dict[str, list] = {}
    for pattern in catalogue.patterns:
        groups.setdefault(pattern.category.value, []).append(pattern)
    order = [c.value for c in Category if c.value in groups]
    for category in order:
        counts.append(f"| [`{category}`](#{_slug(category)}) | {len(groups[category])} |")
    parts.append("\n".join(counts))
    for category in order:
        lines = [f"### {category}", "",
                 "| id | category | fault domain | severity | role | condemns | extracts | description |",
                 "|---|---|---|---|---|---|---|---|"]
        for p in groups[category]:
            fields = ", ".join(p.fields) if p.fields else ""
            lines.append(f"| `{p.id}` | {p.category.value} | {p.fault_domain.value} | {p.severity} | {p.role} | "
                         f"{'yes' if p.condemns else 'no'} | {fields} | {_cell(p.description)} |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def xid_table() -> str:
    """NVIDIA Xid codes jobmedic knows, as Markdown."""
    from activities.detection.xid import XIDS, xid_info

    unknown = xid_info(-1)
    lines = [
        "| Xid | name | category | fault domain | severity | condemns | meaning | what to do |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for code in sorted(XIDS):
        x = XIDS[code]
        lines.append(f"| {x.code} | {_cell(x.name)} | {x.category} | {x.fault_domain} | {x.severity} | "
                     f"{'yes' if x.condemns else 'no'} | {_cell(x.meaning)} | {_cell(x.action)} |")
    lines += ["", f"A code missing from this table is read as {unknown.category} / {unknown.fault_domain}, "
                  f"severity {unknown.severity}, condemning nothing ({unknown.action})."]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


# --------------------------------------------------------------------------- the docs and their blocks

BLOCKS: dict[str, Callable[[], str]] = {
    "settings": settings_table,
    "opt-in": opt_in_reference,
    "failure-patterns": failure_pattern_reference,
    "xid": xid_table,
}
# doc (relative to the repository) -> the generated blocks it must hold
DOCS: dict[str, tuple[str, ...]] = {
    "docs/operator-guide.md": ("settings",),
    "docs/opt-in.md": ("opt-in",),
    "docs/failure-patterns.md": ("failure-patterns", "xid"),
}

_BLOCK = re.compile(
    r"(?P<begin><!-- BEGIN GENERATED (?P<name>[a-z-]+)[^>]*-->\n)(?P<body>.*?)(?P<end><!-- END GENERATED (?P=name) -->)",
    re.DOTALL,
)


def begin_marker(name: str) -> str:
    return f"<!-- BEGIN GENERATED {name}: {REGENERATE} -->"


def end_marker(name: str) -> str:
    return f"<!-- END GENERATED {name} -->"


def render_doc(text: str, *, expected: tuple[str, ...] = ()) -> str:
    """`text` with every generated block rendered afresh; a missing expected block or an unknown one raises."""
    found: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in BLOCKS:
            raise ValueError(f"unknown generated block {name!r} (known: {', '.join(BLOCKS)})")
        found.append(name)
        return f"{begin_marker(name)}\n{BLOCKS[name]().rstrip()}\n{end_marker(name)}"

    rendered = _BLOCK.sub(replace, text)
    missing = [name for name in expected if name not in found]
    if missing:
        raise ValueError(f"no generated block {', '.join(missing)}: add the lines "
                         + " / ".join(f"{begin_marker(n)} ... {end_marker(n)}" for n in missing))
    return rendered


def stale_docs(root: Path | None = None) -> Iterator[tuple[str, str, str]]:
    """(doc, checked-in text, rendered text) for every doc whose generated parts are out of date."""
    root = root or REPO
    for doc, blocks in DOCS.items():
        current = (root / doc).read_text(encoding="utf-8")
        rendered = render_doc(current, expected=blocks)
        if rendered != current:
            yield doc, current, rendered


def undocumented() -> list[str]:
    """Settings and opt-in fields that have no meaning to print."""
    missing = [f"setting {row.path}" for section in settings_sections() for row in section.rows if not row.meaning]
    from workflows.contracts import OptIn

    missing += [f"opt-in field {name}" for name in opt_in_fields()
                if not (OptIn.model_fields[name].description or OPT_IN_MEANINGS.get(name))]
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.docs_gen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only list stale docs; exit 1 when there are any")
    args = parser.parse_args(argv)
    stale = list(stale_docs())
    for doc, _, rendered in stale:
        if args.check:
            print(f"{doc}: out of date; run `{REGENERATE}`")
        else:
            (REPO / doc).write_text(rendered, encoding="utf-8")
            print(f"{doc}: rewritten")
    for item in undocumented():
        print(f"undocumented: {item} (add it to workers/docs_gen.py or give the field a description)",
              file=sys.stderr)
    return 1 if (stale and args.check) else 0


if __name__ == "__main__":
    raise SystemExit(main())
