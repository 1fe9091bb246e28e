"""Fixtures of the `jobmedic check` tests: private real Slurm clusters, a config writer, a runner.

Each private cluster is deploy/slurm/up.sh with its own lab directory, ports and
stack directory (one node, `node1`), so a test may change its slurm.conf and
restart its slurmctld without touching the shared lab cluster other tests use.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.ports import free_port
from workers.cli import main

REPO = Path(__file__).resolve().parents[2]
OPT_IN = '{"jobmedic":{"environment":"test","mode":"observe"}}'


@dataclass(frozen=True)
class PrivateSlurm:
    lab: Path
    conf: Path
    env: dict[str, str]  # for the Slurm commands of this cluster (SLURM_CONF, the deploy knobs)
    outputs: Path  # where the jobs submitted by `run_job` write

    def slurm(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env={**os.environ, **self.env}, capture_output=True, text=True,
                              timeout=30, check=check)

    def run_job(self, script: str, *, comment: str | None = None) -> str:
        """Submit a batch job writing to `outputs`, wait until it ended, return its id."""
        path = self.outputs / "job.sh"
        path.write_text("#!/bin/bash\n" + script + "\n")
        argv = ["sbatch", "--parsable", "-o", str(self.outputs / "out-%j.txt"), "-D", str(self.outputs)]
        if comment:
            argv.append(f"--comment={comment}")
        job = self.slurm(*argv, str(path)).stdout.strip().split(";")[0]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = self.slurm("squeue", "-h", "-t", "all", "-j", job, "-o", "%T").stdout.strip()
            if state in {"COMPLETED", "FAILED"}:
                return job
            time.sleep(0.2)
        pytest.fail(f"job {job} of the private cluster did not end in 30 s (state {state!r})")

    def set_conf(self, **values: str) -> None:
        """Rewrite `Key=value` lines of slurm.conf (a value "" drops the key) and restart slurmctld."""
        text = self.conf.read_text()
        for key, value in values.items():
            text, count = re.subn(rf"(?m)^{key}=.*\n", f"{key}={value}\n" if value else "", text)
            if not count and value:
                text = f"{key}={value}\n" + text
        self.conf.write_text(text)
        pid = (self.lab / "run" / "slurmctld.pid").read_text().strip()
        os.kill(int(pid), 15)  # the slurmctld deploy/slurm/up.sh started for this fixture
        for _ in range(100):
            if self.slurm("scontrol", "ping", check=False).stdout.count("DOWN"):
                break
            time.sleep(0.05)
        time.sleep(0.3)
        self.slurm("slurmctld", "-f", str(self.conf), "-i")
        for _ in range(100):
            if "UP" in self.slurm("scontrol", "ping", check=False).stdout:
                return
            time.sleep(0.1)
        pytest.fail(f"the private slurmctld did not come back; see {self.lab}/log/slurmctld.log")


def _private_slurm(tmp: Path) -> Iterator[PrivateSlurm]:
    ctld = free_port()
    env = {
        "JOBMEDIC_STACK_DIR": str(tmp / "stack"),
        "JOBMEDIC_SLURM_LAB": str(tmp / "lab"),
        "JOBMEDIC_SLURM_NODES": "1",
        "JOBMEDIC_SLURM_CTLD_PORT": str(ctld),
        "JOBMEDIC_SLURM_BASE_PORT": str(free_port()),
        "JOBMEDIC_SLURM_KEEP_MUNGE": "1",
        "SLURM_CONF": str(tmp / "lab" / "etc" / "slurm.conf"),
    }
    up = subprocess.run(["bash", str(REPO / "deploy/slurm/up.sh")], env={**os.environ, **env},
                        capture_output=True, text=True, timeout=120)
    if up.returncode != 0:
        pytest.fail(f"deploy/slurm/up.sh of a private cluster failed:\n{up.stdout}\n{up.stderr}", pytrace=False)
    outputs = tmp / "outputs"
    outputs.mkdir()
    try:
        yield PrivateSlurm(lab=tmp / "lab", conf=Path(env["SLURM_CONF"]), env=env, outputs=outputs)
    finally:
        subprocess.run(["bash", str(REPO / "deploy/slurm/down.sh")], env={**os.environ, **env,
                       "JOBMEDIC_SLURM_PURGE": "1"}, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def good_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateSlurm]:
    """A private cluster configured as deploy/ configures it, with one ended job that printed lines."""
    for cluster in _private_slurm(tmp_path_factory.mktemp("good-slurm")):
        cluster.run_job("for i in 1 2 3; do echo step $i loss 0.5; done", comment=OPT_IN)
        yield cluster


@pytest.fixture(scope="module")
def bad_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateSlurm]:
    """A private cluster whose slurm.conf a test changes."""
    yield from _private_slurm(tmp_path_factory.mktemp("bad-slurm"))


Writer = Callable[..., Path]


def write_config(tmp_path: Path, *, slurm_conf: Path | None = None, cluster: str = "lab",
                 temporal: dict[str, str] | None = None, audit_url: str | None = None,
                 scheduler: str = "", logs: str = "", metrics: str = "", extra: str = "") -> Path:
    """A jobmedic.toml with one cluster; `scheduler`, `logs`, `metrics` are TOML lines of those sections."""
    temporal = {"address": "127.0.0.1:7233", "namespace": "default", **(temporal or {})}
    lines = [f'data_dir = "{tmp_path / "data"}"', "[temporal]"]
    lines += [f'{k} = "{v}"' for k, v in temporal.items()]
    lines += ["[audit]", f'url = "{audit_url or "sqlite:///" + str(tmp_path / "audit.db")}"']
    lines += ["[[clusters]]", f'name = "{cluster}"', extra, "[clusters.scheduler]", scheduler]
    if slurm_conf is not None and "access" not in scheduler:
        lines.append(f'env = {{ SLURM_CONF = "{slurm_conf}" }}')
    lines += ["[clusters.logs]", logs, "[clusters.metrics]", metrics]
    path = tmp_path / "jobmedic.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_check(config: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, Any]]]:
    """`jobmedic --config CONFIG check --json ARGS`: exit code and the findings."""
    capsys.readouterr()
    code = main(["--config", str(config), "check", "--json", *args])
    out = capsys.readouterr().out
    return code, [json.loads(line) for line in out.splitlines() if line.strip()]


def finding(findings: list[dict[str, Any]], check: str) -> dict[str, Any]:
    [one] = [f for f in findings if f["check"] == check]
    return one
