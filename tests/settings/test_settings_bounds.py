"""Every bound of the settings, one table row each: the value refused names its full key on one line.

Each row is written into a real TOML file and loaded the way the CLI loads it
(`load_settings`), so the key in the message is the key as the file spells it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import TypeAdapter, ValidationError

from adapters.errors import ConfigError
from workers.settings import PolicySettings, Settings, _policy_bound, dotted_key, load_settings
from workflows.contracts import PolicyConfig

SSH = {"clusters.scheduler.access": "ssh", "clusters.scheduler.ssh.known_hosts": "/etc/ssh/ssh_known_hosts"}


@pytest.fixture(autouse=True)
def _no_outside_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.startswith("JOBMEDIC_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("JOBMEDIC_DATA_DIR", str(tmp_path / "data"))


def toml(values: dict[str, object]) -> str:
    """TOML for dotted keys; keys under `clusters.` go to one [[clusters]] entry."""
    tables: dict[str, dict[str, object]] = {}
    for dotted, value in values.items():
        table, _, key = dotted.rpartition(".")
        tables.setdefault(table, {})[key] = value
    lines: list[str] = [f"{k} = {literal(v)}" for k, v in tables.pop("", {}).items()]
    if any(t == "clusters" or t.startswith("clusters.") for t in tables):
        lines += ["[[clusters]]", 'name = "lab"', *(f"{k} = {literal(v)}" for k, v in tables.pop("clusters", {}).items())]
    for table, keys in sorted(tables.items()):
        lines.append(f"[{table}]")
        lines += [f"{k} = {literal(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def literal(value: object) -> str:
    return value if isinstance(value, str) and value in {"inf", "-inf", "nan"} else json.dumps(value)


def load(tmp_path: Path, values: dict[str, object]) -> Settings:
    path = tmp_path / "jobmedic.toml"
    path.write_text(toml(values))
    return load_settings(path)


def refusal(tmp_path: Path, values: dict[str, object]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, values)
    return str(caught.value).splitlines()[1:]


def file_key(dotted: str) -> str:
    return dotted.replace("clusters.", "clusters[0].", 1) if dotted.startswith("clusters.") else dotted


# (key, refused value, accepted edge value, words of the message)
BOUNDS = [
    ("clusters.poll_interval_s", -5, 0.1, "greater than or equal to 0.1"),
    ("clusters.poll_interval_s", 0, 0.1, "greater than or equal to 0.1"),
    ("clusters.poll_interval_s", "inf", 3600, "finite number"),
    ("clusters.scheduler.command_timeout_s", 0, 0.5, "greater than 0"),
    ("clusters.scheduler.ssh.port", 0, 1, "greater than or equal to 1"),
    ("clusters.scheduler.ssh.port", 65536, 65535, "less than or equal to 65535"),
    ("clusters.scheduler.ssh.connect_timeout_s", -1, 1, "greater than 0"),
    ("clusters.logs.max_bytes_per_read", 0, 1, "greater than or equal to 1"),
    ("clusters.logs.max_line_bytes", -64, 1, "greater than or equal to 1"),
    ("clusters.logs.timeout_s", 0, 1, "greater than 0"),
    ("clusters.metrics.timeout_s", "nan", 1, "finite number"),
    ("clusters.attribution.timeout_s", 0, 0.1, "greater than 0"),
    ("clusters.watchdog.decision_deadline_s", 0, 1, "greater than 0"),
    ("clusters.watchdog.action_deadline_s", -120, 1, "greater than 0"),
    ("clusters.watchdog.activity_timeout_s", 0, 1, "greater than 0"),
    ("clusters.watchdog.audit_retry_pause_s", 0, 1, "greater than 0"),
    ("clusters.hang.floor_s", 0, 1, "greater than 0"),
    ("clusters.hang.ceiling_s", -1, 3600, "greater than 0"),
    ("clusters.hang.default_s", 0, 1, "greater than 0"),
    ("clusters.hang.factor", 0.5, 1, "greater than or equal to 1"),
    ("clusters.policy.max_attempts", 0, 1, "greater than or equal to 1"),
    ("clusters.policy.attempts_window_s", 0, 1, "greater than 0"),
    ("clusters.policy.no_checkpoint_attempts", 0, 1, "greater than or equal to 1"),
    ("clusters.policy.same_error_stop_after", 0, 1, "greater than or equal to 1"),
    ("clusters.policy.oom_stop_after", 0, 1, "greater than or equal to 1"),
    ("clusters.policy.transient_restart_limit", -1, 0, "greater than or equal to 0"),
    ("clusters.policy.systemic_jobs", 1, 2, "greater than or equal to 2"),
    ("clusters.policy.systemic_window_s", 0, 1, "greater than 0"),
    ("clusters.policy.do_not_restart_exit_code", 256, 255, "less than or equal to 255"),
    ("clusters.policy.do_not_restart_exit_code", 0, 1, "greater than or equal to 1"),
    ("clusters.policy.straggler_restart_limit", -1, 0, "greater than or equal to 0"),
    ("metrics_port", 0, 1, "greater than or equal to 1"),
    ("metrics_port", 70000, 65535, "less than or equal to 65535"),
    ("fault_delays.record_audit", -1, 0, "greater than or equal to 0"),
]


@pytest.mark.parametrize(("key", "bad", "edge", "words"), BOUNDS, ids=[f"{b[0]}={b[1]}" for b in BOUNDS])
def test_a_bound_refuses_with_the_key_on_one_line(tmp_path: Path, key: str, bad: object, edge: object, words: str) -> None:
    extra = SSH if ".ssh." in key else {}
    (line,) = refusal(tmp_path, {**extra, key: bad})
    assert line.strip().startswith(f"{file_key(key)} = ")
    assert words in line


@pytest.mark.parametrize(("key", "bad", "edge", "words"), BOUNDS, ids=[f"{b[0]}={b[2]}" for b in BOUNDS])
def test_the_edge_of_a_bound_is_accepted(tmp_path: Path, key: str, bad: object, edge: object, words: str) -> None:
    extra = SSH if ".ssh." in key else {}
    settings = load(tmp_path, {**extra, key: edge})
    value: object = settings.model_dump()
    for part in key.split("."):
        value = value[0] if isinstance(value, list) else value
        value = value[part]  # type: ignore[index]
    assert value == edge


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"clusters.policy.max_attempt": 9}, "clusters[0].policy.max_attempt: unknown key; did you mean clusters[0].policy.max_attempts?"),
        ({"clusters.max_attempts": 9}, "clusters[0].max_attempts: unknown key; known keys here: "),
        ({"clusters.hang.flor_s": 9}, "clusters[0].hang.flor_s: unknown key; did you mean clusters[0].hang.floor_s?"),
        ({"clusters.watchdog.decision_deadline": 9}, "clusters[0].watchdog.decision_deadline: unknown key; did you mean clusters[0].watchdog.decision_deadline_s?"),
        ({**SSH, "clusters.scheduler.ssh.prot": 22}, "clusters[0].scheduler.ssh.prot: unknown key; did you mean clusters[0].scheduler.ssh.port?"),
        ({"temporal.adress": "x:1"}, "temporal.adress: unknown key; did you mean temporal.address?"),
        ({"metrics_prot": 9}, "metrics_prot: unknown key; did you mean metrics_port?"),
    ],
)
def test_a_misspelt_key_is_refused_at_any_depth(tmp_path: Path, values: dict[str, object], expected: str) -> None:
    lines = [line.strip() for line in refusal(tmp_path, values)]
    assert any(line.startswith(expected) for line in lines), lines


def test_a_policy_knob_is_refused_in_the_policy_section_not_ignored(tmp_path: Path) -> None:
    # the typo of the issue: `max_attempt = 9` under [clusters.policy] used to leave the default 5 in force
    assert load(tmp_path, {"clusters.policy.max_attempts": 9}).clusters[0].policy.max_attempts == 9
    assert refusal(tmp_path, {"clusters.policy.max_attempt": 9})


def test_hang_floor_above_its_ceiling(tmp_path: Path) -> None:
    (line,) = refusal(tmp_path, {"clusters.hang.floor_s": 4000, "clusters.hang.ceiling_s": 3600})
    assert line.strip() == "clusters[0].hang: floor_s (4000) is above ceiling_s (3600); lower the floor or raise the ceiling"


@pytest.mark.parametrize(
    ("bind", "ok"),
    [("127.0.0.1", True), ("0.0.0.0", True), ("::", True), ("::1", True), ("metrics.example.org", True),
     ("", False), ("0.0.0.0:9100", False), ("a b", False), ("-x", False)],
)
def test_metrics_bind(tmp_path: Path, bind: str, ok: bool) -> None:
    if ok:
        assert load(tmp_path, {"metrics_bind": bind}).metrics_bind == bind
    else:
        (line,) = refusal(tmp_path, {"metrics_bind": bind})
        assert line.strip().startswith("metrics_bind = ") and "IP address or host name" in line


def test_metrics_bind_is_loopback_by_default(tmp_path: Path) -> None:
    assert load(tmp_path, {}).metrics_bind == "127.0.0.1"


def test_log_level(tmp_path: Path) -> None:
    assert load(tmp_path, {"log_level": "debug"}).log_level == "DEBUG"
    (line,) = refusal(tmp_path, {"log_level": "LOUD"})
    assert line.strip().startswith("log_level = 'LOUD': must be ")


def test_every_error_of_a_file_is_one_line(tmp_path: Path) -> None:
    lines = refusal(tmp_path, {"clusters.poll_interval_s": -5, "clusters.policy.max_attempt": 9, "metrics_port": 0})
    assert len(lines) == 3


@pytest.mark.parametrize(
    ("loc", "key"),
    [(("clusters", 0, "policy", "max_attempts"), "clusters[0].policy.max_attempts"), (("metrics_port",), "metrics_port"),
     (("fault_delays", "observe"), "fault_delays.observe"), ((), "")],
)
def test_dotted_key(loc: tuple, key: str) -> None:
    assert dotted_key(loc) == key


@pytest.mark.parametrize(
    ("name", "annotation", "refused", "accepted"),
    [("new_fraction", float, [1.5, -0.1, float("nan")], [0.0, 0.5, 1.0]),
     ("new_share", float, [2.0], [0.8]),
     ("new_window_s", float, [-1.0, float("inf")], [0.0, 60.0]),
     ("new_count", int, [-1], [0, 7])],
)
def test_a_policy_knob_added_later_is_bounded_by_its_kind(name: str, annotation: type, refused: list, accepted: list) -> None:
    adapter = TypeAdapter(Annotated[annotation, _policy_bound(name, annotation)])
    for value in refused:
        with pytest.raises(ValidationError):
            adapter.validate_python(value)
    for value in accepted:
        assert adapter.validate_python(value) == value


def test_every_policy_knob_of_a_number_is_bounded() -> None:
    for name, field in PolicyConfig.model_fields.items():
        if field.annotation in (int, float):
            assert PolicySettings.model_fields[name].metadata, f"policy.{name} has no bound"
            assert PolicySettings.model_fields[name].default == field.default
