"""Round 2 forms from real-format tune excerpts (tests/corpus/real/tune/): who a hang waits for, and more."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from activities.detection.catalogue import load_catalogue
from activities.detection.verdict import attribute
from workflows.contracts import Category, JobEvidence, JobInfo, JobState, TaskLayout

ROOT = Path(__file__).resolve().parents[2]
TUNE = ROOT / "tests" / "corpus" / "real" / "tune"
_spec = importlib.util.spec_from_file_location("bench_attribution_hangs", ROOT / "bench" / "attribution.py")
BENCH = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(BENCH)
CATALOGUE = load_catalogue()


def verdict_of(name: str, *, log_only: bool = False):
    side = json.loads((TUNE / f"{name}.expected.json").read_text())
    return BENCH.run_case(TUNE / f"{name}.log", side, catalogue=CATALOGUE, log_only=log_only)


def running(lines: list[str], nodes: list[str], per_node: int) -> JobEvidence:
    job = JobInfo(job_id="1", state=JobState.RUNNING, nodes=nodes,
                  layout=TaskLayout(nodes=nodes, tasks_per_node=[per_node] * len(nodes)))
    return JobEvidence(job=job, log_lines=lines)


# ----------------------------------------------------------------------------- Horovod's stall inspector


def test_horovod_missing_ranks_entries_name_the_stuck_rank():
    """stall_inspector.cc: 'Stalled ranks:' (or 'Missing ranks:') then one 'R: [tensors ...]' line per rank that
    has not submitted; the rank, not the mpirun tag of the process that printed it, is the culprit."""
    v = verdict_of("hang-horovod-stall-inspector-rank4-wrapped-q9h01")
    assert v.category == Category.HANG
    assert v.implicated.ranks == [4] and v.implicated.hosts == ["bert-n1"]


def test_horovod_old_missing_ranks_brackets():
    """Older operations.cc: 'Stalled ops:' then 'tensor [missing ranks: 5]'."""
    v = verdict_of("hang-horovod-stall-aprun-rank-asymmetry-q9h09")
    assert v.category == Category.HANG
    assert v.implicated.ranks == [5] and v.implicated.hosts == ["nid00417"]


def test_horovod_ready_ranks_the_stuck_one_is_the_complement():
    """'[ready ranks: 4, 9, 0, ...]' lists the ranks that did submit; with 16 tasks the one not listed is stuck."""
    v = verdict_of("hang-horovod-stalled-ops-missing-rank11-i3h13")
    assert v.category == Category.HANG
    assert v.implicated.ranks == [11] and v.implicated.hosts == ["hvd-03"]


def test_horovod_ready_ranks_that_leave_many_out_single_no_one():
    warn = ("WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and "
            "are waiting for remainder of ranks for more than 60 seconds. Stalled ops: allreduce.x [ready ranks: 0, 1]")
    v = attribute(running([warn], ["n1", "n2"], 4), catalogue=CATALOGUE)
    assert v.category == Category.HANG
    assert v.implicated.ranks == [] and v.implicated.hosts == []  # 6 of 8 missing: no culprit


def test_a_numbered_list_without_a_stall_report_is_no_horovod_entry():
    v = attribute(running(["3: [allreduce] 0.41 ms", "step 10 loss 0.3"], ["n1"], 8), catalogue=CATALOGUE)
    assert v.category == Category.NONE
