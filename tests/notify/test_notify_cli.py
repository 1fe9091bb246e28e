"""`jobmedic notify`: what it reads from Slurm's hook environment, and that it never fails slurmctld.

The command runs as a real process here, with the clean environment slurmctld
gives EpilogSlurmctld (only SLURM_* variables, no PATH).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from workers.cli import _fast_command, build_parser
from workers.commands.notify import build_poke

JOBMEDIC = str(Path(sys.executable).parent / "jobmedic")
OPTED_IN = '{"jobmedic":{"environment":"prod","mode":"observe"}}'


def args(*argv: str) -> argparse.Namespace:
    return build_parser(only=["notify"]).parse_args(["notify", *argv])


def test_job_end_reads_the_epilog_environment() -> None:
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_EXIT_CODE2": "3:0", "SLURM_JOB_DERIVED_EC": "0",
           "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_COMMENT": OPTED_IN, "SLURM_JOB_RESTART_COUNT": "1"}
    poke = build_poke(args("job-end"), env)
    assert poke is not None
    assert (poke.source, poke.job_ids, poke.nodes) == ("job-end", ["42"], ["node1", "node2"])
    assert poke.detail == "exit 3:0, derived 0, restarts 1"
    assert poke.sent_at is not None


def test_an_array_task_is_named_as_the_watch_names_it() -> None:
    env = {"SLURM_JOB_ID": "107", "SLURM_ARRAY_JOB_ID": "100", "SLURM_ARRAY_TASK_ID": "7", "SLURM_JOB_COMMENT": OPTED_IN}
    assert build_poke(args("job-end"), env).job_ids == ["100_7"]


def test_flags_override_the_environment() -> None:
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_COMMENT": "not ours"}
    poke = build_poke(args("job-end", "--job-id", "43", "--exit-code", "1:0", "--nodes", "n7", "--comment", OPTED_IN), env)
    assert (poke.job_ids, poke.nodes, poke.detail) == (["43"], ["n7"], "exit 1:0")


def test_a_job_that_did_not_opt_in_is_not_sent() -> None:
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_COMMENT": "my favourite job"}
    assert build_poke(args("job-end"), env) is None
    assert build_poke(args("job-end", "--any-job"), env) is not None
    # an older Slurm that passes no comment: the watch is told, it knows which jobs are its own
    assert build_poke(args("job-end"), {"SLURM_JOB_ID": "42"}) is not None
    # an invalid opt-in is the watch's to audit
    assert build_poke(args("job-end"), {"SLURM_JOB_ID": "42", "SLURM_JOB_COMMENT": '{"jobmedic": 5}'}) is not None


@pytest.mark.parametrize("job_id", ["", "42; rm -rf /", "$(id)", "4" * 20, "42_x"])
def test_a_job_id_that_is_not_one_is_refused(job_id: str) -> None:
    with pytest.raises(ValueError, match="job id"):
        build_poke(args("job-end", "--job-id", job_id) if job_id else args("job-end"), {"SLURM_JOB_COMMENT": OPTED_IN})


def test_node_down_expands_host_lists_and_refuses_odd_names() -> None:
    poke = build_poke(args("node-down", "node[1-3],gpu7", "node2"), {})
    assert (poke.source, poke.nodes, poke.job_ids) == ("node-down", ["node1", "node2", "node3", "gpu7"], [])
    assert build_poke(args("node-down", "--drained", "node1"), {}).source == "node-drained"
    with pytest.raises(ValueError, match="not a node name"):
        build_poke(args("node-down", "node1;reboot"), {})


def test_the_fast_path_loads_only_notify() -> None:
    assert _fast_command(["notify", "job-end"]) == ["notify"]
    assert _fast_command(["--config", "x.toml", "--log-level", "DEBUG", "notify", "node-down", "n1"]) == ["notify"]
    assert _fast_command(["--config", "notify", "config", "show"]) is None
    assert _fast_command(["config", "show"]) is None
    assert _fast_command([]) is None


def run_notify(tmp_path: Path, *argv: str, address: str = "127.0.0.1:1", env: dict | None = None,
               config: bool = True) -> tuple[subprocess.CompletedProcess, float]:
    cfg = tmp_path / "notify.toml"
    cfg.write_text(f'[temporal]\naddress = "{address}"\n\n[[clusters]]\nname = "c1"\n')
    started = time.monotonic()
    proc = subprocess.run(
        [JOBMEDIC, "--config", str(cfg if config else tmp_path / "missing.toml"), "notify", *argv],
        env=env if env is not None else {"SLURM_JOB_ID": "42", "SLURM_JOB_COMMENT": OPTED_IN},
        capture_output=True, text=True, timeout=30,
    )
    return proc, time.monotonic() - started


def test_nothing_listening_exits_0_and_says_so(tmp_path: Path) -> None:
    proc, _ = run_notify(tmp_path, "job-end")
    assert proc.returncode == 0, proc.stderr
    assert "the watch was not told" in proc.stderr
    strict, _ = run_notify(tmp_path, "job-end", "--strict")
    assert strict.returncode == 1


def test_a_broken_config_exits_0_unless_strict(tmp_path: Path) -> None:
    assert run_notify(tmp_path, "job-end", config=False)[0].returncode == 0
    assert run_notify(tmp_path, "job-end", "--strict", config=False)[0].returncode == 1


def test_bad_input_from_slurm_exits_0(tmp_path: Path) -> None:
    proc, _ = run_notify(tmp_path, "job-end", env={"SLURM_JOB_ID": "$(reboot)"})
    assert proc.returncode == 0
    assert "no usable job id" in proc.stderr


@pytest.fixture
def black_hole() -> str:
    """A TCP port that accepts connections and never answers (a hung Temporal frontend)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for s in held:
        s.close()
    server.close()


def test_a_hung_temporal_costs_slurmctld_at_most_the_timeout(tmp_path: Path, black_hole: str) -> None:
    proc, took = run_notify(tmp_path, "job-end", "--timeout-s", "1", address=black_hole)
    assert proc.returncode == 0, proc.stderr
    assert took < 3.0, f"took {took:.1f} s"
    strict, took = run_notify(tmp_path, "node-down", "node1", "--timeout-s", "1", "--strict", address=black_hole)
    assert strict.returncode == 1
    assert took < 3.0


def test_stdout_and_stderr_closed_as_strigger_starts_it(tmp_path: Path) -> None:
    """slurmctld starts trigger programs with stdout and stderr closed: Python then has no sys.stdout, and
    flushing it must not turn a sent notification into exit 1."""
    import os

    cfg = tmp_path / "notify.toml"
    cfg.write_text('[temporal]\naddress = "127.0.0.1:1"\n\n[[clusters]]\nname = "c1"\n')

    def close_streams() -> None:
        os.close(1)
        os.close(2)

    proc = subprocess.run(
        [JOBMEDIC, "--config", str(cfg), "notify", "node-down", "node1"], env={}, stdin=subprocess.DEVNULL,
        preexec_fn=close_streams, timeout=30,
    )
    assert proc.returncode == 0
