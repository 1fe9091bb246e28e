"""`jobmedic` as a user runs it, on good and broken config files: `--config` in both places, one clear
error line for a broken file (never a traceback), exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

JOBMEDIC = str(Path(sys.executable).with_name("jobmedic"))
GOOD = 'deployment = "from-the-file"\n[[clusters]]\nname = "lab"\npoll_interval_s = 7.5\n[clusters.policy]\nmax_attempts = 9\n'


def jobmedic(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBMEDIC_")}
    env["JOBMEDIC_DATA_DIR"] = str(tmp_path / "data")
    return subprocess.run([JOBMEDIC, *args], env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.toml"
    path.write_text(GOOD)
    return path


@pytest.mark.parametrize(
    "where",
    [
        pytest.param(lambda f: ["--config", f, "config", "show"], id="before"),
        pytest.param(lambda f: ["config", "show", "--config", f], id="after"),
        pytest.param(lambda f: ["config", "--config", f, "show"], id="between"),
        pytest.param(lambda f: ["config", "show", f"--config={f}", "--log-level", "debug"], id="after-with-equals"),
    ],
)
def test_config_is_read_wherever_it_is_given(tmp_path: Path, good: Path, where) -> None:
    done = jobmedic(tmp_path, *where(str(good)))
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["deployment"] == "from-the-file"
    (cluster,) = shown["clusters"]
    assert (cluster["poll_interval_s"], cluster["policy"]["max_attempts"]) == (7.5, 9)


def test_config_after_the_subcommand_wins_over_the_one_before(tmp_path: Path, good: Path) -> None:
    other = tmp_path / "other.toml"
    other.write_text('deployment = "other"\n')
    done = jobmedic(tmp_path, "--config", str(other), "config", "show", "--config", str(good))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["deployment"] == "from-the-file"


def refused(tmp_path: Path, path: Path) -> str:
    for args in (["--config", str(path), "config", "show"], ["config", "show", "--config", str(path)]):
        done = jobmedic(tmp_path, *args)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stdout == ""
        assert "Traceback" not in done.stderr
    return done.stderr


def test_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('deployment = "lab"\n# caf\xe9 du coin\n'.encode("latin-1"))
    (line,) = refused(tmp_path, path).splitlines()
    assert line == (
        f"jobmedic: config file {path}, line 2, column 6: byte 0xe9 is not UTF-8; "
        "TOML files are UTF-8: save it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
    )


@pytest.mark.parametrize(
    ("text", "where", "reason"),
    [
        ('deployment = "lab"\n[clusters\n', "line 2, column 10", "Expected ']' at the end of a table declaration"),
        ("deployment = lab\n", "line 1, column 14", "Invalid value"),
        ('deployment = "lab\n', "line 1, column 18", "Illegal character '\\n'"),
        ('deployment = "lab', "line 1 (end of file)", "Unterminated string"),
        ('[[clusters]]\nname = "a"\nname = "b"\n', "line 3, column 11", "Cannot overwrite a value"),
    ],
)
def test_a_file_that_is_not_toml(tmp_path: Path, text: str, where: str, reason: str) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(text)
    (line,) = refused(tmp_path, path).splitlines()
    assert line.startswith(f"jobmedic: config file {path}, {where}: not valid TOML ({reason}); fix that line")


def test_a_missing_file_and_a_directory(tmp_path: Path) -> None:
    (line,) = refused(tmp_path, tmp_path / "nope.toml").splitlines()
    assert line == f"jobmedic: config file {tmp_path / 'nope.toml'} does not exist (given by --config or JOBMEDIC_CONFIG)"
    (line,) = refused(tmp_path, tmp_path).splitlines()
    assert line.startswith(f"jobmedic: config file {tmp_path} cannot be read: ")


def test_nonsense_values_and_a_nested_typo(tmp_path: Path) -> None:
    path = tmp_path / "nonsense.toml"
    path.write_text('[[clusters]]\nname = "lab"\npoll_interval_s = -5\n[clusters.policy]\nmax_attempt = 9\n')
    assert refused(tmp_path, path).splitlines() == [
        "jobmedic: invalid configuration:",
        "  clusters[0].poll_interval_s = -5: must be greater than or equal to 0.1",
        "  clusters[0].policy.max_attempt: unknown key; did you mean clusters[0].policy.max_attempts?",
    ]


def test_a_bad_value_from_the_environment_names_its_key(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBMEDIC_")}
    env.update(JOBMEDIC_DATA_DIR=str(tmp_path / "data"), JOBMEDIC_METRICS_PORT="0")
    done = subprocess.run([JOBMEDIC, "config", "show"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "metrics_port = '0': must be greater than or equal to 1" in done.stderr
