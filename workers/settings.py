"""jobmedic's settings: one typed object, built once in `workers/` and passed down.

Sources, strongest first: environment variables (`JOBMEDIC_...`, nested keys with
`__`, e.g. `JOBMEDIC_TEMPORAL__ADDRESS`), then the TOML file named by `--config`
or `JOBMEDIC_CONFIG`, then the defaults. With nothing configured, jobmedic watches
one cluster named `local` through the local Slurm commands (honouring
`SLURM_CONF`), in observe mode, with a SQLite audit store under the user's data
directory: the embedded default.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import tomllib
import typing
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from adapters.errors import ConfigError
from workflows.contracts import Mode, PolicyConfig


def default_data_dir() -> Path:
    """Where the embedded SQLite store and the dev server's database live."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("jobmedic", appauthor=False))


# Bounds shared by many keys. TOML has `inf` and `nan`: a bound refuses them too.
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Port = Annotated[int, Field(ge=1, le=65535)]
ByteCount = Annotated[int, Field(ge=1)]


# what one worker process runs (`jobmedic worker --role`, workers.worker.build_workers)
WORKER_ROLES = ("all", "workflows", "clusters")


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SshSettings(Section):
    host: str = "127.0.0.1"
    port: Port = 22
    user: str = "root"
    key_file: Path | None = None
    known_hosts: Path | None = None
    connect_timeout_s: Seconds = 10.0
    # remote environment, e.g. {"SLURM_CONF": "/etc/slurm/slurm.conf"}
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _needs_known_hosts(self) -> "SshSettings":
        if self.known_hosts is None:
            raise ValueError(
                "ssh.known_hosts is required: jobmedic verifies SSH host keys "
                "(point it at a known_hosts file that lists the scheduler host)"
            )
        return self


class SchedulerSettings(Section):
    access: Literal["local", "ssh"] = "local"
    ssh: SshSettings | None = None
    command_timeout_s: Seconds = 30.0
    # local mode: extra environment for the Slurm commands (SLURM_CONF is inherited anyway)
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ssh_section(self) -> "SchedulerSettings":
        if self.access == "ssh" and self.ssh is None:
            raise ValueError("scheduler.access is 'ssh' but there is no [clusters.scheduler.ssh] section")
        return self


class LogSourceSettings(Section):
    kind: Literal["files", "loki", "victorialogs"] = "files"
    url: str | None = None
    # label holding the Slurm job id (Loki) / field name (VictoriaLogs)
    job_label: str = "slurm_job_id"
    host_label: str = "host"
    extra_selector: str = ""
    max_bytes_per_read: ByteCount = 4 * 1024 * 1024
    max_line_bytes: ByteCount = 64 * 1024
    timeout_s: Seconds = 10.0
    bearer_token: SecretStr | None = None
    # log stores: reads of a running job stop this short of now (agents ship lines late)
    store_settle_s: Seconds = 2.0
    # log stores: after a failed request, reads are refused this long without asking the store
    store_backoff_s: Seconds = 30.0


class MetricsSettings(Section):
    prometheus_url: str | None = None
    host_label: str = "Hostname"
    timeout_s: Seconds = 10.0
    bearer_token: SecretStr | None = None


class AttributionSettings(Section):
    url: str | None = None
    timeout_s: Seconds = 5.0
    bearer_token: SecretStr | None = None


class WatchdogSettings(Section):
    # fail open (release the job) when a decision or action overruns; observe only audits it
    mode: Mode = Mode.ACTION
    decision_deadline_s: Seconds = 120.0
    action_deadline_s: Seconds = 120.0
    # one scheduler activity attempt; a worker lost mid-activity is noticed after this long
    activity_timeout_s: Seconds = 60.0
    # audit entries the store refused for good (not retryable) are sent again after this pause
    audit_retry_pause_s: Seconds = 60.0


class HangSettings(Section):
    floor_s: Seconds = 300.0
    ceiling_s: Seconds = 3600.0
    default_s: Seconds = 1800.0
    # below 1 a job's own normal rhythm would already count as a hang
    factor: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 5.0

    @model_validator(mode="after")
    def _floor_below_ceiling(self) -> "HangSettings":
        if self.floor_s > self.ceiling_s:
            raise ValueError(f"floor_s ({self.floor_s:g}) is above ceiling_s ({self.ceiling_s:g}); lower the floor or raise the ceiling")
        return self


# Bounds of the decision policy's knobs (`PolicyConfig` lives with the workflows, which must
# keep decoding old histories, so it ignores unknown keys; a settings file must not).
_POLICY_BOUNDS: dict[str, Any] = {
    "max_attempts": Field(ge=1),
    "attempts_window_s": Field(gt=0, allow_inf_nan=False),
    "no_checkpoint_attempts": Field(ge=1),
    "same_error_stop_after": Field(ge=1),
    "oom_stop_after": Field(ge=1),
    "transient_restart_limit": Field(ge=0),
    # one job alone is never a shared cause
    "systemic_jobs": Field(ge=2),
    "systemic_window_s": Field(gt=0, allow_inf_nan=False),
    "do_not_restart_exit_code": Field(ge=1, le=255),
    "straggler_restart_limit": Field(ge=0),
}

class _StrictPolicy(PolicyConfig):
    model_config = ConfigDict(extra="forbid")


def _policy_bound(name: str, annotation: Any) -> Any:
    """The bound of one policy knob: the table above, else by kind (a knob added later is bounded too)."""
    if name in _POLICY_BOUNDS:
        return _POLICY_BOUNDS[name]
    if annotation is float and name.endswith(("_fraction", "_share")):
        return Field(ge=0, le=1, allow_inf_nan=False)
    if annotation is float and name.endswith("_s"):
        return Field(ge=0, allow_inf_nan=False)
    if annotation is int:
        return Field(ge=0)
    return None


if set(_POLICY_BOUNDS) - set(PolicyConfig.model_fields):
    raise RuntimeError(f"_POLICY_BOUNDS names knobs PolicyConfig lacks: {set(_POLICY_BOUNDS) - set(PolicyConfig.model_fields)}")

_POLICY_FIELDS: dict[str, Any] = {
    name: (Annotated[field.annotation, bound], field.default)
    for name, field in PolicyConfig.model_fields.items()
    if (bound := _policy_bound(name, field.annotation)) is not None and field.default_factory is None
}
PolicySettings = create_model(
    "PolicySettings",
    __base__=_StrictPolicy,
    __doc__="`PolicyConfig` as a settings section: unknown keys refused, every knob bounded.",
    **_POLICY_FIELDS,
)


class ClusterSettings(Section):
    name: str = "local"
    environment: str = "dev"
    environment_pattern: str = ".*"
    # opted-in jobs whose environment does not match are left alone (another deployment's)
    job_environments: str = ".*"
    mode: Mode = Mode.OBSERVE
    acknowledge_scheduler_actions: bool = False
    # one scheduler query per interval; a shorter one would poll slurmctld in a tight loop
    poll_interval_s: Annotated[float, Field(ge=0.1, allow_inf_nan=False)] = 15.0
    # the watch is split into this many activities by job-id hash (more workers share one cluster; each pass
    # covers 1/shards of the jobs); changing it takes effect when the watch workflow starts anew
    watch_shards: Annotated[int, Field(ge=1, le=64)] = 4
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    logs: LogSourceSettings = Field(default_factory=LogSourceSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    attribution: AttributionSettings = Field(default_factory=AttributionSettings)
    watchdog: WatchdogSettings = Field(default_factory=WatchdogSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    hang: HangSettings = Field(default_factory=HangSettings)

    @field_validator("name")
    @classmethod
    def _name_is_an_identifier(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", value):
            raise ValueError("cluster names use letters, digits, '.', '_' or '-' (at most 63 characters)")
        return value

    @field_validator("environment_pattern", "job_environments")
    @classmethod
    def _pattern_compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        return value

    @property
    def task_queue(self) -> str:
        """Task queue of the scheduler-facing activities of this cluster."""
        return f"jobmedic-slurm-{self.name}"

    def watches(self, job_environment: str) -> bool:
        """Whether this deployment watches a job that opted in with `job_environment`."""
        return re.fullmatch(self.job_environments, job_environment or "") is not None

    def may_act(self, job_environment: str, job_mode: Mode) -> bool:
        """True only when every action condition holds at once.

        The cluster is in action mode and acknowledges scheduler actions, the
        cluster's environment and the job's own environment both match
        `environment_pattern`, and the job's opt-in says `"mode": "action"`.
        """
        return (
            self.mode is Mode.ACTION
            and self.acknowledge_scheduler_actions
            and re.fullmatch(self.environment_pattern, self.environment) is not None
            and re.fullmatch(self.environment_pattern, job_environment or "") is not None
            and job_mode is Mode.ACTION
        )


class TemporalTlsSettings(Section):
    """TLS to the Temporal frontend (self-hosted with mTLS, or Temporal Cloud)."""

    # None: TLS when an API key or any file below is set, plain otherwise
    enabled: bool | None = None
    # CA of the server's certificate; None: the system's roots
    ca_file: Path | None = None
    # client certificate and key for mTLS, PEM, always both
    cert_file: Path | None = None
    key_file: Path | None = None
    # name the server's certificate carries (SNI too) when it is not the host of `temporal.address`
    server_name: str | None = None

    @model_validator(mode="after")
    def _cert_with_key(self) -> "TemporalTlsSettings":
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (mTLS needs the client certificate and its key)")
        if self.enabled is False and (self.ca_file or self.cert_file or self.server_name):
            raise ValueError("enabled is false but TLS files or server_name are set; remove them or enable TLS")
        return self

    def files_set(self) -> bool:
        return any(v is not None for v in (self.ca_file, self.cert_file, self.server_name))


class TemporalSettings(Section):
    address: str = "127.0.0.1:7233"
    # Temporal Cloud: `<name>.<account>`; it must exist on the server (the worker checks at start)
    namespace: str = "default"
    task_queue: str = "jobmedic"
    ui_url: str = "http://127.0.0.1:8233"
    tls: TemporalTlsSettings = Field(default_factory=TemporalTlsSettings)
    # sent as `Authorization: Bearer ...` (Temporal Cloud API keys); implies TLS unless tls.enabled = false
    api_key: SecretStr | None = None

    @field_validator("namespace")
    @classmethod
    def _namespace_is_a_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}", value):
            raise ValueError("a Temporal namespace name uses letters, digits, '.', '_' or '-' (e.g. default, prod.a1b2c)")
        return value

    @field_validator("api_key")
    @classmethod
    def _api_key_not_blank(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("is empty; unset it (no API key) or fill the Secret it comes from")
        return value

    def use_tls(self) -> bool:
        if self.tls.enabled is not None:
            return self.tls.enabled
        return self.api_key is not None or self.tls.files_set()


class AuditSettings(Section):
    # SQLAlchemy URL; None means SQLite under the data directory
    url: SecretStr | None = None

    def resolved_url(self, data_dir: Path) -> str:
        if self.url is not None:
            return self.url.get_secret_value()
        return f"sqlite:///{data_dir / 'audit.db'}"


_CONFIG_PATH: ContextVar[Path | None] = ContextVar("jobmedic_config_path", default=None)


class _TomlSource(PydanticBaseSettingsSource):
    """Reads the TOML file named by `--config` / `JOBMEDIC_CONFIG`."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        super().__init__(settings_cls)
        self.path = path

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover - unused
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        return read_toml(self.path)


_TOML_WHERE = re.compile(r"\s*\((?:at line (\d+), column (\d+)|at end of document)\)$")


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML file at `path`; any reason it cannot be read is one `ConfigError` line naming file and line."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist (given by --config or JOBMEDIC_CONFIG)") from exc
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror or exc}; check the path and its permissions") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(
            f"config file {path}, line {line}, column {column}: byte 0x{raw[exc.start]:02x} is not UTF-8; "
            "TOML files are UTF-8: save it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        reason = str(exc)
        where = _TOML_WHERE.search(reason)
        if where is None:
            place = ""
        elif where.group(1):
            place = f", line {where.group(1)}, column {where.group(2)}"
        else:
            place = f", line {text.count(chr(10)) + 1} (end of file)"
        reason = _TOML_WHERE.sub("", reason)
        raise ConfigError(
            f"config file {path}{place}: not valid TOML ({reason}); fix that line "
            "(one `key = value` per line, strings in double quotes, `[section]` headers)"
        ) from None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JOBMEDIC_", env_nested_delimiter="__", extra="forbid")

    data_dir: Path = Field(default_factory=default_data_dir)
    log_level: Literal["TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    # this deployment's name, written on every Slurm job it acts on (AdminComment `jobmedic:<deployment> ...`);
    # two deployments watching one cluster need different names: neither acts on a job the other owns
    deployment: str = "jobmedic"
    temporal: TemporalSettings = Field(default_factory=TemporalSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    clusters: list[ClusterSettings] = Field(default_factory=lambda: [ClusterSettings()])
    # activity name -> seconds slept at its start: fault injection for crash-safety tests only
    fault_delays: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(default_factory=dict)
    # the worker serves Prometheus metrics about jobmedic itself on this port; None: not served
    metrics_port: Port | None = None
    metrics_bind: str = Field(
        default="127.0.0.1",
        description="Address the metrics endpoint binds: loopback unless opened on purpose "
        "(`0.0.0.0` or `::` for every interface, e.g. in a container that Prometheus scrapes).",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_in_capitals(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("metrics_bind")
    @classmethod
    def _bind_is_an_address(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            if not re.fullmatch(r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*", value):
                raise ValueError("not an IP address or host name (e.g. 127.0.0.1, or 0.0.0.0 for every interface)") from None
        return value

    @field_validator("deployment")
    @classmethod
    def _deployment_is_an_identifier(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", value):
            raise ValueError("deployment names use letters, digits, '.', '_' or '-' (at most 63 characters)")
        return value

    @field_validator("clusters")
    @classmethod
    def _unique_names(cls, value: list[ClusterSettings]) -> list[ClusterSettings]:
        names = [c.name for c in value]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"cluster names must be unique; repeated: {', '.join(sorted(dup))}")
        if not value:
            raise ValueError("at least one [[clusters]] section is needed")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        path = _CONFIG_PATH.get()
        if path is None and os.environ.get("JOBMEDIC_CONFIG"):
            path = Path(os.environ["JOBMEDIC_CONFIG"])
        return (init_settings, env_settings, _TomlSource(settings_cls, path))

    def cluster(self, name: str | None = None) -> ClusterSettings:
        """The cluster called `name`, or the only/first one when `name` is None."""
        if name is None:
            return self.clusters[0]
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        known = ", ".join(c.name for c in self.clusters)
        raise ConfigError(f"no cluster named {name!r} is configured (known: {known})")

    @property
    def audit_url(self) -> str:
        return self.audit.resolved_url(self.data_dir)


def load_settings(config_path: str | Path | None = None) -> Settings:
    """Build the settings once; a bad file or value raises `ConfigError` naming the key."""
    token = _CONFIG_PATH.set(Path(config_path) if config_path is not None else None)
    try:
        return Settings()
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None  # the pydantic traceback adds nothing a user can act on
    finally:
        _CONFIG_PATH.reset(token)


def _describe(exc: ValidationError) -> str:
    """One line per error: the full key (`clusters[0].policy.max_attempts`), what is wrong, what to do."""
    return "invalid configuration:\n  " + "\n  ".join(_describe_one(err) for err in exc.errors())


def _describe_one(err: Any) -> str:
    loc = tuple(err["loc"])
    key = dotted_key(loc) or "(top level)"
    if err["type"] == "extra_forbidden":
        known = sorted(_known_keys(loc[:-1]))
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        hint = f"did you mean {dotted_key((*loc[:-1], close[0]))}?" if close else f"known keys here: {', '.join(known)}"
        return f"{key}: unknown key; {hint}"
    msg = str(err["msg"]).removeprefix("Value error, ").replace("Input should be", "must be")
    if err["type"] in {"missing", "model_type", "dict_type"} or isinstance(err.get("input"), dict | list):
        return f"{key}: {msg}"
    return f"{key} = {_shown(err.get('input'))}: {msg}"


def dotted_key(loc: tuple[Any, ...]) -> str:
    """A settings key as the TOML file spells it: `clusters[0].policy.max_attempts`."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _shown(value: Any) -> str:
    shown = repr(value) if isinstance(value, str) else str(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    """Field names of the settings section at `loc` (list indices skipped); empty when not a section."""
    model: type[BaseModel] | None = Settings
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part)) if model is not None else None
        model = _section_in(field.annotation) if field is not None else None
        if model is None:
            return []
    return list(model.model_fields) if model is not None else []


def _section_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _section_in(arg)
        if found is not None:
            return found
    return None


def masked_dump(settings: Settings) -> dict[str, Any]:
    """The effective settings as plain data, secrets masked."""
    return settings.model_dump(mode="json")
