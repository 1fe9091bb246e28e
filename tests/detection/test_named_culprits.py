"""Culprits named in forms first met on batch b5's tune excerpts (tests/corpus/real/tune/).

- Culprit lists: torch's monitoredBarrier 'Ranks 4, 5, 6, 7 failed to pass' (wait_all_ranks) and torchfrtrace's
  'missing ranks: {13, 14}' name every rank listed; Horovod's '[ready ranks: ...]' sit on the unflagged
  'Stalled ops:' rows under the flagged stall header.
- Ranks timing out on the same collective number in another operation than three or more others took another
  path there: they are the suspects.
- On a one-node job a suspect rank's node is every victim's node too: it is not blamed.
"""

from __future__ import annotations

from pathlib import Path

from workflows.contracts import Category

from tests.detection.real_cases import BENCH, CATALOGUE, TUNE, sidecar, verdict_of

# ----------------------------------------------------------------------------- culprit lists


def test_monitored_barrier_names_every_rank_it_lists():
    """'[Rank 0]: Ranks 4, 5, 6, 7 failed to pass monitoredBarrier': the second node's four ranks (before: none)."""
    v = verdict_of("hang-monitored-barrier-ranks4-7-second-node-e5a23")
    assert v.implicated.ranks == [4, 5, 6, 7]
    assert v.implicated.hosts == ["a6k-n2"]


def test_torchfrtrace_missing_ranks_set_of_several(tmp_path: Path):
    """The flight-recorder analyser's set names two ranks (before: only a one-element set matched)."""
    name = "hang-fr-trace-missing-rank-13-allreduce-r4h01"
    log = tmp_path / f"{name}.log"
    log.write_text((TUNE / f"{name}.log").read_text().replace("missing ranks: {13}", "missing ranks: {13, 14}"))
    v = BENCH.run_case(log, sidecar(name), catalogue=CATALOGUE)
    assert v.implicated.ranks == [13, 14]
    assert v.implicated.hosts == ["h100-r2"]


def test_horovod_ready_ranks_on_the_stalled_ops_rows():
    """mpirun --timestamp-output: the stall header is flagged, the 'TENSOR [ready ranks: 3, 0, 5, 6, 1, 4]' rows
    under 'Stalled ops:' are not; of seven ranks, 2 is not ready (before: no rank)."""
    v = verdict_of("hang-horovod-broadcast-ready-ranks-missing-rank2-e5a20")
    assert v.category == Category.HANG
    assert v.implicated.ranks == [2]


# ----------------------------------------------------------------------------- the watchdog's own reports


def test_the_rank_in_another_collective_at_the_same_seqnum_is_the_suspect():
    """Four ranks time out at SeqNum 40417: three in an ALLREDUCE, rank 3 in a BROADCAST (before: no rank);
    one node, so the node is not named."""
    v = verdict_of("hang-watchdog-call-stack-rank3-skipped-eval-sync-e5a24")
    assert v.implicated.ranks == [3]
    assert v.implicated.hosts == []


def test_a_suspect_on_a_one_node_job_does_not_blame_the_node():
    """Seven ranks wait in a broadcast rank 0 never joined, all on axon-02 (before: axon-02 blamed)."""
    v = verdict_of("nccl_timeout-accelerate-seqnum1-broadcast-main-process-first-e5a29")
    assert v.category == Category.NCCL_TIMEOUT
    assert v.implicated.hosts == []
