"""`jobmedic slurm jobs|nodes` as a user runs them, against the real cluster (local and over SSH)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import OPT_IN, Jobs

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]


def jobmedic(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBMEDIC_")}
    return subprocess.run([sys.executable, "-m", "workers.cli", *args], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env=env, check=False)


def test_jobs_json_lists_opted_in_and_invalid_jobs_only(jobs: Jobs) -> None:
    good = jobs.submit("--hold", label="cli-good", comment=OPT_IN)
    bad = jobs.submit("--hold", label="cli-bad", comment='{"jobmedic": {"mode": "sometimes"}}')
    plain = jobs.submit("--hold", label="cli-plain", comment="nothing to see")
    proc = jobmedic("slurm", "jobs", "--json")
    assert proc.returncode == 0, proc.stderr
    listed = {j["job_id"]: j for j in json.loads(proc.stdout)["jobs"]}
    assert plain not in listed
    assert listed[good]["state"] == "PENDING" and listed[good]["restarts"] == 0 and listed[good]["nodes"] == []
    opt_in = listed[good]["opt_in"]
    assert opt_in["key"] == "jobmedic" and opt_in["environment"] == "test" and opt_in["mode"] == "action"
    # every other field (newer ones too) is at its default: the comment sets none of them
    assert all(opt_in[k] is None for k in opt_in if k not in {"key", "environment", "mode"}), opt_in
    assert listed[good]["invalid_reason"] is None
    assert listed[bad]["opt_in"] is None and "'observe' or 'action'" in listed[bad]["invalid_reason"]


def test_jobs_table(jobs: Jobs) -> None:
    good = jobs.submit("--hold", label="cli-table", name=jobs.name("tbl") + "\x1b[31mred")
    proc = jobmedic("slurm", "jobs")
    assert proc.returncode == 0, proc.stderr
    line = next(row for row in proc.stdout.splitlines() if row.startswith(good + " "))
    assert "PENDING" in line and "action env=test" in line
    assert "\x1b" not in proc.stdout  # names cannot drive the terminal


def test_nodes_json_and_table(slurm_cluster: object) -> None:
    proc = jobmedic("slurm", "nodes", "--json")
    assert proc.returncode == 0, proc.stderr
    nodes = {n["name"]: n for n in json.loads(proc.stdout)["nodes"]}
    assert set(slurm_cluster.nodes) <= set(nodes)  # type: ignore[attr-defined]
    assert all({"state", "flags", "reason", "drained_by_jobmedic"} <= set(n) for n in nodes.values())
    table = jobmedic("slurm", "nodes")
    assert table.returncode == 0 and table.stdout.splitlines()[0].split()[:3] == ["NODE", "STATE", "REASON"]


def test_unknown_cluster_says_which_exist(slurm_cluster: object) -> None:
    proc = jobmedic("slurm", "jobs", "--cluster", "nosuch")
    assert proc.returncode != 0 and "no cluster named 'nosuch'" in proc.stderr and "local" in proc.stderr


def test_nodes_over_ssh_from_a_config_file(slurm_cluster: object, request: pytest.FixtureRequest,
                                           tmp_path: Path) -> None:
    sshd = request.getfixturevalue("sshd")
    config = tmp_path / "jobmedic.toml"
    config.write_text(
        f"""
[[clusters]]
name = "remote"
[clusters.scheduler]
access = "ssh"
[clusters.scheduler.ssh]
host = "{sshd.host}"
port = {sshd.port}
user = "{sshd.user}"
key_file = "{sshd.key_file}"
known_hosts = "{sshd.known_hosts}"
env = {{ SLURM_CONF = "{slurm_cluster.conf}" }}
"""  # type: ignore[attr-defined]
    )
    proc = jobmedic("--config", str(config), "slurm", "nodes", "--cluster", "remote", "--json")
    assert proc.returncode == 0, proc.stderr
    assert set(slurm_cluster.nodes) <= {n["name"] for n in json.loads(proc.stdout)["nodes"]}  # type: ignore[attr-defined]
    wrong = config.read_text().replace(str(sshd.known_hosts), str(sshd.wrong_known_hosts))
    config.write_text(wrong)
    refused = jobmedic("--config", str(config), "slurm", "nodes", "--json")
    assert refused.returncode == 1
    assert "does not match" in refused.stderr and str(sshd.wrong_known_hosts) in refused.stderr
