"""`jobmedic analyze` as a real process: JSON lines, readable report, errors per file, hostile files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from activities.detection.analyze import analyze_file, parse_layout
from adapters.errors import ParseError

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "tuning"


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workers.cli", "analyze", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, check=False, env={**os.environ, "NO_COLOR": "1"})


def test_json_one_object_per_file():
    files = [CORPUS / "gpu_hardware_00.log", CORPUS / "none_00.log"]
    proc = run("--json", *map(str, files))
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["path"] for r in records] == [str(f) for f in files]
    for r in records:
        assert {"category", "fault_domain", "implicated", "confidence", "evidence", "explanation"} <= set(r)
        assert {"hosts", "ranks", "gpus"} <= set(r["implicated"])
    assert records[0]["category"] == "gpu_hardware" and records[0]["implicated"]["hosts"]
    assert records[1]["category"] == "none"


def test_standard_input_is_a_path():
    data = (CORPUS / "data_io_01.log").read_bytes()
    proc = subprocess.run([sys.executable, "-m", "workers.cli", "analyze", "--json", "-"], input=data, capture_output=True,
                          cwd=ROOT, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["category"] == "data_io"


def test_missing_file_is_reported_and_the_others_still_analysed(tmp_path):
    good = CORPUS / "host_oom_00.log"
    proc = run("--json", str(tmp_path / "missing.log"), str(good))
    assert proc.returncode == 1
    assert "missing.log" in proc.stderr and "cannot read" in proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert records[0]["error"] and records[1]["category"] == "host_oom"


def test_readable_report_without_colour_when_not_a_tty():
    proc = run(str(CORPUS / "interconnect_00.log"))
    assert proc.returncode == 0, proc.stderr
    assert "category:" in proc.stdout and "interconnect" in proc.stdout and "evidence:" in proc.stdout
    assert "\x1b[" not in proc.stdout


def test_layout_maps_ranks_to_hosts(tmp_path):
    log = tmp_path / "t.log"
    lines = [f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, "
             f"Timeout(ms)=600000) ran for 600001 milliseconds before timing out." for r in range(16) if r != 9]
    log.write_text("\n".join(lines) + "\n")
    proc = run("--json", "--layout", "node[1-2]:8", str(log))
    record = json.loads(proc.stdout)
    assert record["category"] == "nccl_timeout"
    assert record["implicated"]["hosts"] == ["node2"] and record["implicated"]["ranks"] == [9]


def test_bad_layout_says_what_is_expected(tmp_path):
    proc = run("--layout", "node[1-2", str(CORPUS / "none_01.log"))
    assert proc.returncode == 2 and "--layout" in proc.stderr
    with pytest.raises(ParseError):
        parse_layout("node[1-4]:x")
    assert parse_layout("a1,a2:4,8").tasks_per_node == [4, 8]


def test_hostile_file_is_bounded_and_still_attributed(tmp_path):
    log = tmp_path / "hostile.log"
    with log.open("wb") as f:
        f.write(b"step 1 loss 2.0\n")
        f.write(b"\x00\xff\xfe" * 10 + b"\x1b[31m" + b"A" * (40 << 20) + b"\n")  # one 40 MB line
        f.write(b"progress\r" * 10000 + b"\n")
        f.write(b"\xc3\x28 invalid utf-8\n")
        f.write(b"3: Traceback (most recent call last):\n3: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.\n")
    verdict, scan = analyze_file(log)
    assert verdict.category.value == "gpu_oom"
    assert scan.line_count == 6
    assert all(len(t) <= 20000 for t in scan.lines.values())
    oom_line = next(e for e in verdict.evidence if e.pattern_id == "torch_cuda_oom")
    assert oom_line.line_no == 6


def test_line_numbers_survive_chunk_boundaries(tmp_path):
    log = tmp_path / "long.log"
    filler = "0: step {} loss 1.0 " + "x" * 200 + "\n"
    with log.open("w") as f:
        for i in range(60_000):  # about 13 MB: several 4 MiB chunks
            f.write(filler.format(i))
        f.write("Nov  2 10:00:00 cn7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n")
    verdict, scan = analyze_file(log)
    assert scan.line_count == 60_001
    assert verdict.category.value == "gpu_hardware"
    assert verdict.evidence[0].line_no == 60_001 and verdict.implicated.hosts == ["cn7"]


IB_PEER_LOG = (
    "iteration 5\n"
    "[2026-01-01 10:00:00] gpu-b16:1234:1300 [0] NCCL WARN NET/IB : Got completion from peer 10.20.1.17<43211> "
    "with error 12, opcode 0, len 0, vendor err 129\n"
    "RuntimeError: NCCL communicator was aborted\n"
)


@pytest.mark.parametrize(
    "node_file",
    [
        "gpu-b16 10.20.1.16 gpu-b16.hpc.example.org\ngpu-b17 10.20.1.17  # the far end\n",
        json.dumps([{"name": "gpu-b16", "addr": "10.20.1.16"}, {"name": "gpu-b17", "addr": "10.20.1.17"}]),
        json.dumps({"nodes": [{"name": "gpu-b17", "address": "10.20.1.17", "hostname": "gpu-b17", "state": ["IDLE"]}]}),
        "NodeName=gpu-b16 Arch=x86_64 CoresPerSocket=32\n   NodeAddr=10.20.1.16 NodeHostName=gpu-b16 Version=22.05\n\n"
        "NodeName=gpu-b17 Arch=x86_64 CoresPerSocket=32\n   NodeAddr=10.20.1.17 NodeHostName=gpu-b17 Version=22.05\n",
    ],
    ids=["plain", "jobmedic-json", "sinfo-json", "scontrol"],
)
def test_nodes_file_maps_an_ip_peer_to_its_node(tmp_path, node_file):
    log = tmp_path / "job.log"
    log.write_text(IB_PEER_LOG)
    nodes = tmp_path / "nodes"
    nodes.write_text(node_file)
    mapped = json.loads(run("--json", "--nodes", str(nodes), str(log)).stdout)
    assert mapped["category"] == "interconnect"
    assert mapped["implicated"]["hosts"] == ["gpu-b17"]
    bare = json.loads(run("--json", str(log)).stdout)
    assert bare["implicated"]["hosts"] == ["10.20.1.17"]  # without a map the address the log gave


def test_bad_node_file_and_state_are_refused_with_the_reason(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(IB_PEER_LOG)
    nodes = tmp_path / "nodes"
    nodes.write_text("gpu-b16 10.20.1.16 fqdn extra-word\n")
    proc = run("--nodes", str(nodes), str(log))
    assert proc.returncode == 2 and "line 1: expected NAME [ADDRESS [HOSTNAME]]" in proc.stderr
    proc = run("--state", "EXPLODED", str(log))
    assert proc.returncode == 2 and "not a Slurm job state" in proc.stderr


def test_state_and_exit_code_turn_a_quiet_log_into_an_explicit_unknown(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("loading shards\niteration 1 | loss 3.2\n")
    quiet = json.loads(run("--json", str(log)).stdout)
    assert quiet["category"] == "none"
    failed = json.loads(run("--json", "--state", "FAILED", "--exit-code", "3", str(log)).stdout)
    assert failed["category"] == "unknown"
    assert "exit code 3" in failed["explanation"] and failed["evidence"]


@pytest.mark.slurm
def test_cluster_node_map_from_the_real_slurm(tmp_path, slurm_cluster):
    """`--cluster local` reads the node names from the local Slurm: a node named only in prose is blamed."""
    log = tmp_path / "job.log"
    log.write_text("step 10\nGPU 0 on instance node3 has fallen off the bus\n")
    with_map = json.loads(run("--json", "--cluster", "local", str(log)).stdout)
    assert with_map["category"] == "gpu_hardware" and with_map["implicated"]["hosts"] == ["node3"]
    proc = run("--cluster", "nowhere", str(log))
    assert proc.returncode == 2 and "no cluster named 'nowhere'" in proc.stderr
