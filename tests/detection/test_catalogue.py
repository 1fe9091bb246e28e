"""The pattern catalogue: loads, validates, extracts fields, and stays safe on hostile lines."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from activities.detection.catalogue import DEFAULT_PATH, load_catalogue
from activities.detection.screen import Screener, to_grep_ere
from activities.detection.xid import XIDS, condemning_xids, xid_info
from adapters.errors import ConfigError
from workflows.contracts import Category


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue()


def test_catalogue_is_versioned_and_covers_every_category(catalogue):
    assert catalogue.version >= 1
    used = {p.category for p in catalogue.patterns}
    assert set(Category) - {Category.NONE, Category.UNKNOWN} <= used  # unknown: the fallback, never a pattern
    assert len({p.id for p in catalogue.patterns}) == len(catalogue.patterns)
    assert any(p.benign for p in catalogue.patterns)


def test_load_is_cached_per_path(catalogue):
    assert load_catalogue() is catalogue
    assert load_catalogue(DEFAULT_PATH) is catalogue


def test_every_expression_runs_on_hyperscan_and_translates_to_grep(catalogue):
    screener = Screener(catalogue.patterns, engine="hyperscan")
    assert screener.fallback_pattern_ids == []
    for p in catalogue.patterns:
        assert "(?P<" not in p.regex, p.id
        assert to_grep_ere(p.regex, caseless=p.caseless) is not None, p.id


def test_grep_accepts_every_expression(catalogue, tmp_path):
    for p in catalogue.patterns:
        ere = to_grep_ere(p.regex, caseless=p.caseless)
        proc = subprocess.run(["grep", "-E", "-c", "--", ere, "/dev/null"], capture_output=True, text=True,
                              env={"LC_ALL": "C"}, check=False)
        assert proc.returncode in (0, 1), f"{p.id}: {proc.stderr}"


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(body)
    return path


def test_bad_regex_is_reported_with_the_pattern_id(tmp_path):
    path = _write(tmp_path, 'version = 1\n[[pattern]]\nid = "broken_one"\nregex = "(unclosed"\n'
                  'category = "app_error"\nfault_domain = "application"\nseverity = "error"\n')
    with pytest.raises(ConfigError, match="broken_one"):
        load_catalogue(path)


def test_duplicate_ids_and_unknown_category_are_rejected(tmp_path):
    entry = '[[pattern]]\nid = "twice"\nregex = "x"\ncategory = "app_error"\nfault_domain = "application"\nseverity = "error"\n'
    with pytest.raises(ConfigError, match="duplicate"):
        load_catalogue(_write(tmp_path, "version = 1\n" + entry + entry))
    bad = entry.replace("app_error", "cosmic_rays")
    with pytest.raises(ConfigError, match="twice"):
        load_catalogue(_write(tmp_path, "version = 2\n" + bad))


def test_missing_version_or_file_says_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="version"):
        load_catalogue(_write(tmp_path, '[[pattern]]\nid = "a"\n'))
    with pytest.raises(ConfigError, match="does not exist"):
        load_catalogue(tmp_path / "nope.toml")


def test_fields_must_have_groups(tmp_path):
    body = ('version = 1\n[[pattern]]\nid = "f"\nregex = "x"\nextract = "(?P<a>x)"\nfields = ["a", "b"]\n'
            'category = "app_error"\nfault_domain = "application"\nseverity = "error"\n')
    with pytest.raises(ConfigError, match="'b'"):
        load_catalogue(_write(tmp_path, body))


@pytest.mark.parametrize(
    ("pattern_id", "line", "expected"),
    [
        ("torch_nccl_watchdog_timeout",
         "[rank5]:[E1102 10:00:01.5 77 ProcessGroupNCCL.cpp:616] [Rank 5] Watchdog caught collective operation timeout: "
         "WorkNCCL(SeqNum=4411, OpType=_ALLGATHER_BASE, NumelIn=10, NumelOut=80, Timeout(ms)=600000) ran for 600321 milliseconds before timing out.",
         {"rank": "5", "seq": "4411", "op": "_ALLGATHER_BASE", "numel": "10", "timeout_ms": "600000"}),
        ("torch_nccl_watchdog_timeout",
         "[E ProcessGroupNCCL.cpp:737] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800410 milliseconds before timing out.",
         {"rank": "2", "seq": "9", "op": "BROADCAST", "timeout_ms": "1800000"}),
        ("torch_nccl_timeout_at_work",
         "[PG 0 (default_pg) Rank 3] Exception (either an error or timeout) detected by watchdog at work: 77, last enqueued NCCL work: 79, last completed NCCL work: 76.",
         {"rank": "3", "seq": "77", "last_enqueued": "79", "last_completed": "76"}),
        ("nvrm_xid", "Mar  2 11:05:12 n7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python, GPU has fallen off the bus.",
         {"pci": "0000:3b:00", "xid": "79", "pid": "48213"}),
        ("nccl_ib_completion_error",
         "n1:12:34 [2] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<4541> with error 12, opcode 0, len 0, vendor err 129 (Recv)",
         {"peer": "10.0.0.3", "wc_status": "12", "opcode": "0", "vendor_err": "129"}),
        ("nccl_duplicate_gpu", "n1:1:2 [1] NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000",
         {"rank": "1", "other_rank": "0", "pci": "1a000"}),
        ("srun_task_exit_code", "srun: error: gpu-a17: tasks 8-15: Exited with exit code 93",
         {"host": "gpu-a17", "tasks": "8-15", "exit_code": "93"}),
        ("torch_cuda_oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.15 GiB",
         {"alloc": "2.00 GiB", "gpu_index": "3"}),
        ("elastic_failure_field", "  rank      : 13 (local_rank: 5)", {"rank": "13", "local_rank": "5"}),
        ("elastic_failure_field", "  exitcode  : -9 (pid: 4242)", {"exitcode": "-9"}),
        ("ucx_error", "[1700000000.1] [cn17:4411:0] ib_iface.c:746 UCX  ERROR transport retry count exceeded", {"host": "cn17", "pid": "4411"}),
        ("torch_monitored_barrier_failed", "RuntimeError: Rank 6 failed to pass monitoredBarrier in 1800000 ms", {"suspect_rank": "6"}),
        ("python_exception", "  File x\nValueError: bad shape (3, 4)".split("\n")[1], {"exc_type": "ValueError", "message": "bad shape (3, 4)"}),
    ],
)
def test_field_extraction(catalogue, pattern_id, line, expected):
    spec = catalogue.get(pattern_id)
    assert spec is not None
    assert spec.matches(line), f"{pattern_id} does not screen its own example"
    assert spec.extract_fields(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        "n1:1:2 [0] NCCL INFO NET/IB : DMA-BUF registration failed, falling back to legacy registration",
        "n1:1:2 [0] NCCL WARN NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory",
        "[W ProcessGroupNCCL.cpp:1250] Warning: WARNING: process group has NOT been destroyed before we destruct ProcessGroupNCCL.",
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768",
        "huggingface/tokenizers: The current process just got forked, after parallelism has already been used.",
        "/x/dataloader.py:558: UserWarning: This DataLoader will create 16 worker processes in total.",
    ],
)
def test_lookalikes_are_benign(catalogue, line):
    assert catalogue.benign_line(line)
    assert not catalogue.benign_line("RuntimeError: CUDA error: an illegal memory access was encountered")


def test_xid_table_condemns_hardware_not_sympathetic_codes():
    for code in (13, 31, 43, 45, 63, 68, 69, 92, 94):
        assert not xid_info(code).condemns, code
    for code in (48, 62, 64, 74, 79, 95, 119, 120, 140):
        assert xid_info(code).condemns, code
    assert {13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120, 140} <= set(XIDS)
    assert 79 in condemning_xids()
    unknown = xid_info(9999)
    assert not unknown.condemns and "9999" in unknown.name
    assert all(info.action for info in XIDS.values())


def test_no_pattern_backtracks_on_hostile_lines(catalogue):
    hostile = [
        "a." * 50_000,
        "Error: " * 20_000,
        "[Rank 1] " * 10_000 + "Watchdog",
        "NCCL INFO " + "x" * 100_000,
        "\x00\x1b[31m" * 20_000,
        "(" * 50_000 + "Error",
        "ValueErrorValueError" * 5_000,
        "A" * 100_000,
    ]
    for line in hostile:
        for p in catalogue.patterns:
            t0 = time.perf_counter()
            p.matches(line)
            p.extract_fields(line)
            elapsed = time.perf_counter() - t0
            assert elapsed < 0.5, f"{p.id} took {elapsed:.2f}s on a hostile line"


def test_regexes_avoid_constructs_other_engines_lack(catalogue):
    for p in catalogue.patterns:
        assert not re.search(r"\(\?[=!<]", p.regex), p.id  # look-arounds
        assert not re.search(r"\\[1-9]", p.regex), p.id  # back-references
        assert ".*" not in p.regex and ".+" not in p.regex, f"{p.id}: use a bounded gap"
