"""Stragglers in the cluster watch, poll by poll, over a scripted log shaped like the demo's Megatron output.

A sustained throughput drop is reported once per episode with the culprit finding:
the node whose ranks print slower per-rank timings is named. Checkpoint saves in
every poll do not hide the drop (the regression of 5d11c56: a rate was skipped
whenever a save fell in the poll interval, so a job saving every few seconds was
never judged).
"""

from __future__ import annotations

from datetime import datetime

from activities.screening import LogScreen
from tests.watch.test_watch_hang import OUT, running_job, start
from workflows.contracts import OptIn, OptInResult, Stream, TaskLayout
from workflows.messages import ObservationReason

SLOW_FROM = 160


def demo_lines(first: int, last: int, *, ranks: bool) -> list[str]:
    """Iterations first..last as workers/demo_train.py prints them (2 nodes x 2 ranks, node2's ranks slow)."""
    out: list[str] = []
    for it in range(first, last + 1):
        slowdown = 3.0 if it >= SLOW_FROM else 1.0
        step_ms = 100.0 * slowdown * (1.0 + 0.02 * (it % 3))
        if ranks:
            for rank in range(4):
                fwd = 30.0 * (slowdown if rank >= 2 else 1.0)
                out.append(f"[Rank {rank}] time (ms) | fwd: {fwd:.2f} | bwd: {2 * fwd:.2f} | bwd_allreduce: 5.00")
        out.append(
            f" [{datetime(2026, 11, 29):%Y-%m-%d %H:%M:%S}] iteration {it:8d}/     230 | consumed samples: "
            f"{it * 256:12d} | elapsed time per iteration (ms): {step_ms:.1f} | learning rate: 1.500E-04 | "
            "global batch size:   256 | lm loss: 2.0E+00 | loss scale: 1.0 | grad norm: 1.234 |"
        )
        if it % 10 == 0:
            out.append(f"saving checkpoint at iteration {it:8d} to /ckpt")
            out.append(f"  successfully saved checkpoint from iteration {it:8d} to /ckpt")
    return out


def two_node_job():
    job = running_job()
    job.layout = TaskLayout(nodes=["node1", "node2"], tasks_per_node=[2, 2])
    return job


async def run_demo(screen: LogScreen, *, ranks: bool):
    run = start(screen, two_node_job())
    cursor = {"it": 1}

    def poll_lines(i: int) -> list[str] | None:
        per = 10 if cursor["it"] < SLOW_FROM else 3  # one poll: 1 s of training
        if cursor["it"] > 230:
            return None
        lines = demo_lines(cursor["it"], min(230, cursor["it"] + per - 1), ranks=ranks)
        cursor["it"] += per
        return lines

    await run.polls(400, poll_lines)
    return run


async def test_a_sustained_slowdown_is_reported_once_with_the_slow_node(screen: LogScreen) -> None:
    run = await run_demo(screen, ranks=True)
    found = [o for o in run.temporal.observations if ObservationReason.STRAGGLER in o.reasons]
    assert len(found) == 1
    finding = found[0].straggler
    assert finding is not None and finding.culprits == ["node2"], finding
    assert found[0].straggler_hosts == ["node2"]
    culprit = next(e for e in finding.evidence if e.pattern_id == "straggler.culprit")
    assert culprit.host == "node2" and culprit.rank in {2, 3} and "fwd" in culprit.line
    assert run.watched.slow_since is not None and run.watched.rank_timings  # kept while the slow run lasts


async def test_saves_in_every_poll_do_not_hide_the_slowdown(screen: LogScreen) -> None:
    run = await run_demo(screen, ranks=False)
    found = [o for o in run.temporal.observations if ObservationReason.STRAGGLER in o.reasons]
    assert len(found) == 1
    assert found[0].straggler is not None and found[0].straggler.culprits == []  # no per-node evidence
    # only a sampled line that came right after a save is left out (few: saves are every 10th step)
    skipped = run.watched.rate_skip
    assert sum(skipped) * 3 < len(skipped)


async def test_a_progress_line_right_after_a_save_is_not_judged(screen: LogScreen) -> None:
    run = start(screen, two_node_job())
    lines = [
        [" iteration 1/100 | elapsed time per iteration (ms): 100.0 |"],
        [" iteration 2/100 | elapsed time per iteration (ms): 100.0 |"],
        ["  successfully saved checkpoint from iteration 2 to /ckpt",
         " iteration 3/100 | elapsed time per iteration (ms): 900.0 |"],
        [" iteration 4/100 | elapsed time per iteration (ms): 100.0 |"],
    ]
    await run.polls(40, lambda i: lines[i])
    assert run.watched.rate_skip[-2:] == [True, False]


async def test_hits_carry_their_file_line_and_stream(screen: LogScreen) -> None:
    job = two_node_job()
    job.stderr_path = "/logs/job.err"
    job.opt_in = OptInResult(opted_in=True, opt_in=OptIn(environment="prod", mode="action"))
    run = start(screen, job)
    run.logs.files[job.stderr_path] = []
    err = "RuntimeError: CUDA error: an illegal memory access was encountered"
    await run.polls(20, lambda i: [f"step {n}" for n in range(50)] if i == 0 else None)
    run.logs.files[job.stderr_path].extend(["warming up", err])
    await run.polls(10)
    hits = [h for o in run.temporal.observations for h in o.hits]
    assert {(h.line_no, h.stream) for h in hits if h.line == err} == {(2, Stream.STDERR)}
    cursors = run.temporal.observations[-1].log_cursors
    assert {c.path: c.line_no for c in cursors} == {OUT: 50, job.stderr_path: 2}
