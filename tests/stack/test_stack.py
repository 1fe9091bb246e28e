"""The local stack answers: Slurm, Temporal, MySQL and sshd, as deploy/ brings them up.

The shared services are only used, never stopped. The cold-start, idempotency and
stop paths of the scripts run against private instances on other ports and state
directories, so that they cannot disturb anybody else's tests.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import asyncssh
import pytest

from tests.ports import free_port
import sqlalchemy
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

if TYPE_CHECKING:
    from tests.conftest import SlurmCluster, Sshd, TemporalServer

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
USABLE_NODE_STATES = {"idle", "mix", "alloc"}
SEARCH_ATTRIBUTES = {
    "JobId": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Cluster": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Environment": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Mode": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Phase": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "LastCategory": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Attempts": IndexedValueType.INDEXED_VALUE_TYPE_INT,
    "ImplicatedNodes": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST,
}


def run(argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)




def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def job_field(job_id: str, field: str) -> str:
    out = run(["scontrol", "show", "job", "-o", job_id]).stdout
    prefix = f"{field}="
    return next((word[len(prefix) :] for word in out.split() if word.startswith(prefix)), "")


def wait_job_end(job_id: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        state = job_field(job_id, "JobState")
        if state in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}:
            break
        time.sleep(0.2)
    return state


# ---------------------------------------------------------------------------- Slurm


def test_slurm_has_at_least_four_usable_nodes(slurm_cluster: SlurmCluster) -> None:
    out = run(["sinfo", "-h", "-N", "-o", "%N %t"])
    assert out.returncode == 0, out.stderr
    states = dict(line.split() for line in out.stdout.splitlines())
    assert len(states) >= 4
    assert sorted(states) == sorted(slurm_cluster.nodes)
    assert {node: st for node, st in states.items() if st not in USABLE_NODE_STATES} == {}
    assert os.environ["SLURM_CONF"] == str(slurm_cluster.conf)


def test_slurm_config_has_what_jobmedic_relies_on(slurm_cluster: SlurmCluster) -> None:
    out = run(["scontrol", "show", "config"])
    assert out.returncode == 0, out.stderr
    config = {}
    for line in out.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            config[key.strip()] = value.strip()
    assert config["JobRequeue"] == "1"
    assert config["JobCompType"] == "jobcomp/filetxt"
    assert config["MinJobAge"] == "600 sec"
    assert config["ReturnToService"] == "1"
    assert int(config["SlurmdTimeout"].split()[0]) <= 10
    assert "cred_expire=10" in config["AuthInfo"]


def test_slurm_job_on_every_node_completes(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    script = tmp_path / "hello.sh"
    script.write_text("#!/bin/bash\nsrun bash -c 'echo hello from $SLURMD_NODENAME'\n")
    script.chmod(0o755)
    nodes = len(slurm_cluster.nodes)
    sub = run(
        [
            "sbatch", "--parsable", "-J", f"stack-test-{uuid.uuid4().hex[:8]}", "-N", str(nodes),
            "--ntasks-per-node=1", "-o", str(tmp_path / "%j.out"), str(script),
        ]
    )  # fmt: skip
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip().split(";")[0]

    assert wait_job_end(job_id, timeout_s=120) == "COMPLETED"
    lines = (tmp_path / f"{job_id}.out").read_text().splitlines()
    assert sorted(lines) == sorted(f"hello from {node}" for node in slurm_cluster.nodes)


def test_slurm_description_points_at_the_running_cluster(slurm_cluster: SlurmCluster) -> None:
    assert slurm_cluster.conf.is_file()
    assert slurm_cluster.conf.is_relative_to(slurm_cluster.lab_dir)
    pids = run([str(slurm_cluster.node_ctl), "pids", slurm_cluster.nodes[0]])
    assert pids.returncode == 0, pids.stderr
    slurmd_pid = int(pids.stdout.split()[0].removeprefix("slurmd="))
    assert pid_alive(slurmd_pid)


# ---------------------------------------------------------------------------- Temporal


def test_temporal_cluster_health_says_serving(temporal_server: TemporalServer) -> None:
    out = run(
        [
            str(REPO_ROOT / ".venv" / "bin" / "temporal"), "operator", "cluster", "health",
            "--address", temporal_server.address, "--command-timeout", "10s",
        ]
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "SERVING" in out.stdout


async def test_temporal_has_jobmedic_search_attributes(temporal_server: TemporalServer) -> None:
    client = await Client.connect(temporal_server.address, namespace=temporal_server.namespace)
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=temporal_server.namespace)
    )
    registered = {name: listed.custom_attributes[name] for name in SEARCH_ATTRIBUTES if name in listed.custom_attributes}
    assert registered == SEARCH_ATTRIBUTES


def test_temporal_keeps_history_in_sqlite(temporal_server: TemporalServer) -> None:
    assert temporal_server.db is not None
    assert temporal_server.db.is_file()
    assert temporal_server.db.with_name(temporal_server.db.name + "-wal").exists()  # WAL journal mode


# ---------------------------------------------------------------------------- MySQL


def test_mysql_create_insert_select(mysql_url: str) -> None:
    table = f"stack_test_{uuid.uuid4().hex[:12]}"
    engine = sqlalchemy.create_engine(mysql_url)
    try:
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text(f"CREATE TABLE {table} (id INT PRIMARY KEY, note VARCHAR(64))"))
            conn.execute(sqlalchemy.text(f"INSERT INTO {table} VALUES (1, :note)"), {"note": "jobmedic ✓"})
        with engine.connect() as conn:
            rows = conn.execute(sqlalchemy.text(f"SELECT id, note FROM {table}")).all()
        assert [tuple(row) for row in rows] == [(1, "jobmedic ✓")]
    finally:
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text(f"DROP TABLE IF EXISTS {table}"))
        engine.dispose()


# ---------------------------------------------------------------------------- sshd


async def test_ssh_runs_slurm_commands_remotely(sshd: Sshd, slurm_cluster: SlurmCluster) -> None:
    async with sshd.connect(connect_timeout=10) as conn:
        sinfo = await conn.run(shlex.join(["sinfo", "-h", "-N", "-o", "%N"]), check=True, timeout=30)
        conf = await conn.run(shlex.join(["printenv", "SLURM_CONF"]), check=True, timeout=30)
    assert sorted(set(str(sinfo.stdout).split())) == sorted(slurm_cluster.nodes)
    assert str(conf.stdout).strip() == str(slurm_cluster.conf)


async def test_ssh_serves_sftp(sshd: Sshd, slurm_cluster: SlurmCluster) -> None:
    async with sshd.connect(connect_timeout=10) as conn:
        async with conn.start_sftp_client() as sftp:
            async with sftp.open(str(slurm_cluster.conf), "rb") as remote:
                content = await remote.read()
    assert content == slurm_cluster.conf.read_bytes()


async def test_ssh_refuses_a_wrong_host_key(sshd: Sshd) -> None:
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        await asyncio.wait_for(
            sshd.connect(known_hosts=sshd.wrong_known_hosts),
            timeout=20,
        )


def test_ssh_refuses_a_password_login(sshd: Sshd) -> None:
    out = run(
        [
            "ssh", "-p", str(sshd.port), "-o", "BatchMode=yes", "-o", "PubkeyAuthentication=no",
            "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={sshd.known_hosts}",
            f"{sshd.user}@{sshd.host}", "true",
        ]
    )  # fmt: skip
    assert out.returncode == 255
    assert "Permission denied (publickey)" in out.stderr


# ---------------------------------------------------------------------------- the scripts


def test_second_up_is_a_fast_no_op(
    slurm_cluster: SlurmCluster, temporal_server: TemporalServer, mysql_url: str, sshd: Sshd
) -> None:
    started = time.monotonic()
    out = run(["bash", str(DEPLOY / "up.sh")])
    took = time.monotonic() - started
    assert out.returncode == 0, out.stdout + out.stderr
    assert "everything already up (slurm temporal mysql ssh)" in out.stdout
    assert took < 5, f"a no-op up took {took:.1f} s:\n{out.stdout}"


def test_up_rejects_an_unknown_service() -> None:
    out = run(["bash", str(DEPLOY / "up.sh"), "no-such-service"])
    assert out.returncode == 2
    assert "unknown service 'no-such-service'" in out.stderr


def private_env(stack: Path, **knobs: str) -> dict[str, str]:
    return {**os.environ, "JOBMEDIC_STACK_DIR": str(stack), **knobs}


def test_temporal_cold_up_no_op_and_down_on_private_ports(tmp_path: Path) -> None:
    port, ui_port = free_port(), free_port()
    env = private_env(tmp_path, JOBMEDIC_TEMPORAL_PORT=str(port), JOBMEDIC_TEMPORAL_UI_PORT=str(ui_port))
    try:
        cold = run(["bash", str(DEPLOY / "up.sh"), "temporal"], env=env)
        assert cold.returncode == 0, cold.stdout + cold.stderr
        assert "started dev server pid" in cold.stdout
        assert port_open(port) and port_open(ui_port)
        assert (tmp_path / "temporal.json").read_text().startswith(f'{{"address": "127.0.0.1:{port}"')
        assert f"export JOBMEDIC_TEMPORAL__ADDRESS=127.0.0.1:{port}" in (tmp_path / "env.sh").read_text()

        warm = run(["bash", str(DEPLOY / "up.sh"), "temporal"], env=env)
        assert warm.returncode == 0, warm.stdout + warm.stderr
        assert "everything already up (temporal)" in warm.stdout
    finally:
        down = run(["bash", str(DEPLOY / "down.sh"), "temporal"], env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "stopped the dev server" in down.stdout
    assert not port_open(port)
    assert (tmp_path / "temporal" / "temporal.db").is_file()  # history kept for the next start


def test_ssh_cold_up_no_op_and_down_on_a_private_port(tmp_path: Path) -> None:
    port = free_port()
    env = private_env(tmp_path, JOBMEDIC_SSH_PORT=str(port))
    try:
        cold = run(["bash", str(DEPLOY / "up.sh"), "ssh"], env=env)
        assert cold.returncode == 0, cold.stdout + cold.stderr
        assert "started sshd pid" in cold.stdout
        known = (tmp_path / "ssh" / "known_hosts").read_text()
        wrong = (tmp_path / "ssh" / "wrong_known_hosts").read_text()
        assert known.startswith(f"[127.0.0.1]:{port} ssh-ed25519 ")
        assert wrong.startswith(f"[127.0.0.1]:{port} ssh-ed25519 ")
        assert known != wrong

        warm = run(["bash", str(DEPLOY / "up.sh"), "ssh"], env=env)
        assert warm.returncode == 0, warm.stdout + warm.stderr
        assert "everything already up (ssh)" in warm.stdout
    finally:
        down = run(["bash", str(DEPLOY / "down.sh"), "ssh"], env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "stopped sshd" in down.stdout
    assert not port_open(port)


def test_private_slurm_cluster_cold_up_node_kill_drain_and_down(tmp_path_factory: pytest.TempPathFactory) -> None:
    lab = tmp_path_factory.mktemp("lab")
    stack = tmp_path_factory.mktemp("stack")
    ctld_port, base_port = free_port(), 27100
    assert not any(port_open(base_port + i) for i in (1, 2)), "ports 27101-27102 are taken; free them"
    env = private_env(
        stack,
        JOBMEDIC_SLURM_LAB=str(lab),
        JOBMEDIC_SLURM_NODES="2",
        JOBMEDIC_SLURM_CTLD_PORT=str(ctld_port),
        JOBMEDIC_SLURM_BASE_PORT=str(base_port),
        SLURM_CONF=str(lab / "etc" / "slurm.conf"),
    )
    node_ctl = str(DEPLOY / "slurm" / "node-ctl.sh")
    try:
        cold = run(["bash", str(DEPLOY / "up.sh"), "slurm"], env=env)
        assert cold.returncode == 0, cold.stdout + cold.stderr
        assert "started slurmctld" in cold.stdout
        assert "2 idle, nodes node1 node2 " in cold.stdout

        killed = run([node_ctl, "kill", "node2"], env=env)
        assert killed.returncode == 0, killed.stderr
        # a node killed moments ago belongs to a test in progress: up leaves it dead
        again = run(["bash", str(DEPLOY / "up.sh"), "slurm"], env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "left alone: node2 (slurmd killed by node-ctl.sh" in again.stdout
        assert not (lab / "run" / "slurmd-node2.pid").exists()

        restarted = run([node_ctl, "start", "node2"], env=env)
        assert restarted.returncode == 0, restarted.stderr
        warm = run(["bash", str(DEPLOY / "up.sh"), "slurm"], env=env)
        assert warm.returncode == 0, warm.stdout + warm.stderr
        assert "everything already up (slurm)" in warm.stdout

        drain = ["scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=stack test drain"]
        assert run(drain, env=env).returncode == 0
        # drained moments ago: left alone; once the grace period is over: resumed
        fresh = run(["bash", str(DEPLOY / "up.sh"), "slurm"], env=env)
        assert "left alone: node1 (drain since" in fresh.stdout, fresh.stdout + fresh.stderr
        stale = run(["bash", str(DEPLOY / "up.sh"), "slurm"], env={**env, "JOBMEDIC_SLURM_GRACE_S": "0"})
        assert stale.returncode == 0, stale.stdout + stale.stderr
        assert "resumed node1 (was drain: stack test drain)" in stale.stdout
        assert run(["sinfo", "-h", "-n", "node1", "-o", "%t"], env=env).stdout.strip() == "idle"
    finally:
        pids = [int(p.read_text()) for p in (lab / "run").glob("*.pid")]
        down = run(["bash", str(DEPLOY / "down.sh"), "slurm"], env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert len(pids) == 3  # slurmctld and two slurmd
    assert not [pid for pid in pids if pid_alive(pid)]
