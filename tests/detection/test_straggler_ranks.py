"""Per-rank step timings from what Megatron/NeMo, DeepSpeed and per-rank PyTorch loggers print."""

from __future__ import annotations

import pytest

from activities.detection.rank_timing import RankTiming, keep_recent, node_timings, parse_rank_timings
from workflows.contracts import TaskLayout

MEGATRON_BLOCK = [
    " 0: [default0]:times across ranks (ms):",
    " 0: [default0]:  forward-backward:",
    " 0: [default0]:     rank  0: 1203.11",
    " 0: [default0]:     rank  1: 1201.54",
    " 0: [default0]:  forward-compute:",
    " 0: [default0]:     rank  0: 402.12",
    " 0: [default0]:     rank  1: 655.40",
    " 0: [default0]: iteration      100/   10000 | consumed samples: 6400 | elapsed time per iteration (ms): 1204.2 |",
]


def _brief(timings: list[RankTiming]) -> list[tuple[int, int | None, str, float]]:
    return [(t.rank, t.task, t.timer, round(t.seconds, 5)) for t in timings]


@pytest.mark.parametrize(
    ("name", "lines", "expected"),
    [
        ("megatron all-ranks timers block", MEGATRON_BLOCK, [
            (0, None, "forward-backward", 1.20311), (1, None, "forward-backward", 1.20154),
            (0, None, "forward-compute", 0.40212), (1, None, "forward-compute", 0.6554),
        ]),
        ("deepspeed wall clock breakdown",
         ["[2024-05-01 10:11:12,345] [INFO] [logging.py:96:log_dist] [Rank 3] time (ms) | fwd: 120.50 | "
          "bwd: 240.10 | bwd_inner: 200.00 | bwd_allreduce: 40.10 | step: 15.20"],
         [(3, None, "fwd", 0.1205), (3, None, "bwd", 0.2401), (3, None, "bwd_inner", 0.2),
          (3, None, "bwd_allreduce", 0.0401), (3, None, "step", 0.0152)]),
        ("pytorch per-rank prefix", ["[rank3]: step 120 | loss 2.31 | step_time 0.48s"],
         [(3, None, "iteration", 0.48)]),
        ("megatron progress line printed by every rank",
         ["[Rank 5] iteration      100/   10000 | consumed samples: 6400 | elapsed time per iteration (ms): 1503.2 |"
          " learning rate: 1.000E-04 | lm loss: 2.3E+00 |"],
         [(5, None, "iteration", 1.5032)]),
        ("srun label and torchrun tag around a rank line", ["  1: [default0]:[rank8]: step 40 | step_time 0.52s"],
         [(8, 1, "iteration", 0.52)]),
        ("rank at the start of the line", ["rank 2: step 10 | step_time 0.50s"], [(2, None, "iteration", 0.5)]),
        ("rank line without a timing", ["[rank3]:[W socket.cpp:464] [c10d] The server socket has failed to listen"],
         []),
        ("progress without a rank", ["iteration 100/1000 | elapsed time per iteration (ms): 1200.0 |"], []),
        ("torchrun's local rank alone is not a rank", ["[default3]: step 10 | step_time 0.5s"], []),
        ("megatron min/max block has no per-rank figures",
         ["(min, max) time across ranks (ms):", "    forward-backward ...............: (1200.00, 1250.00)"], []),
        ("a rank line after the block ended is not block data",
         ["times across ranks (ms):", "  forward-compute:", "     rank  0: 400.00", "training ...",
          "     rank  1: 900.00"],
         [(0, None, "forward-compute", 0.4)]),
    ],
)
def test_parse_rank_timings_table(name: str, lines: list[str], expected: list) -> None:
    assert _brief(parse_rank_timings(lines)) == expected, name


def test_line_numbers_and_lines_are_kept() -> None:
    timings = parse_rank_timings(MEGATRON_BLOCK, first_line_no=41)
    assert [t.line_no for t in timings] == [43, 44, 46, 47]
    assert timings[-1].line == MEGATRON_BLOCK[6]


def _block(per_rank_ms: dict[int, float], timer: str = "forward-compute") -> list[str]:
    return ["times across ranks (ms):", f"  {timer}:"] + [f"     rank {r:2d}: {ms:.2f}" for r, ms in per_rank_ms.items()]


def test_node_timings_take_each_nodes_slowest_rank_through_the_layout() -> None:
    layout = TaskLayout(nodes=["n1", "n2", "n3", "n4"], tasks_per_node=[2, 2, 2, 2])
    lines: list[str] = []
    for step in range(3):
        lines += _block({r: 400.0 + step + (300.0 if r == 5 else 0.0) for r in range(8)})
        lines += _block({r: 1200.0 for r in range(8)}, timer="forward-backward")
    nodes = node_timings(parse_rank_timings(lines), layout)
    assert set(nodes) == {"n1", "n2", "n3", "n4"}
    # the compute timer is preferred over the whole step (fast ranks wait inside the step)
    assert {n.timer for n in nodes.values()} == {"forward-compute"}
    assert nodes["n3"].rank == 5 and nodes["n3"].seconds == pytest.approx(0.701)
    assert nodes["n1"].seconds == pytest.approx(0.401)
    assert nodes["n3"].line.strip() == "rank  5: 702.00"


def test_srun_task_id_maps_to_the_node_when_ranks_are_not_tasks() -> None:
    # torchrun per node: one Slurm task per node, eight torch ranks each
    layout = TaskLayout(nodes=["a", "b"], tasks_per_node=[1, 1])
    lines = ["  0: [default0]:[rank0]: step 40 | step_time 0.50s", "  1: [default0]:[rank8]: step 40 | step_time 0.90s"]
    nodes = node_timings(parse_rank_timings(lines), layout)
    assert {n: (t.rank, t.seconds) for n, t in nodes.items()} == {"a": (0, 0.5), "b": (8, 0.9)}


def test_ranks_outside_the_layout_are_left_out_and_recent_timings_are_bounded() -> None:
    layout = TaskLayout(nodes=["a"], tasks_per_node=[2])
    timings = parse_rank_timings(["[rank1]: step 1 | step_time 0.5s", "[rank9]: step 1 | step_time 0.5s"])
    assert set(node_timings(timings, layout)) == {"a"}
    assert node_timings([], layout) == {}
    kept = keep_recent(timings, timings, limit=3)
    assert [t.rank for t in kept] == [9, 1, 9]
