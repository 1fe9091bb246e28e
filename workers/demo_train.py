"""The demo's training job: Megatron-style progress, checkpoints, resume, and one hardware failure.

Run by Slurm as the batch step of `jobmedic demo`. It resumes from the last
checkpoint in its checkpoint directory. On the allocation named by
`--fail-on-restart` (0: the first one) it dies the way a job does when a GPU
falls off the bus on one node: the kernel's Xid 79 on that node, NCCL watchdog
timeouts on the other ranks, exit code 1. The failing node is the second node
of the allocation (or the only one).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path


def expand_first_nodes(nodelist: str) -> list[str]:
    """Enough of Slurm's host-list syntax for the demo's `nodeN` and `node[1-2,4]` lists."""
    out: list[str] = []
    for part in _split_top(nodelist):
        if "[" not in part:
            out.append(part)
            continue
        prefix, rest = part.split("[", 1)
        for item in rest.rstrip("]").split(","):
            lo, _, hi = item.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(f"{prefix}{str(i).zfill(len(lo))}")
    return out


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        cur += ch
    if cur:
        parts.append(cur)
    return parts


def log(msg: str) -> None:
    print(msg, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--save-interval", type=int, default=10)
    parser.add_argument("--iteration-seconds", type=float, default=0.15)
    parser.add_argument("--fail-at", type=int, default=35, help="iteration at which a failing attempt fails")
    parser.add_argument(
        "--plan",
        default="xid,ok",
        help="what each attempt does, comma separated (the last repeats): ok | xid (GPU lost on the second "
        "node) | fatal-running (a rank's CUDA error is printed, the job keeps running) | xid-fqdn (the same, the node named only by its FQDN in a syslog line) | gpu-prose (a health "
        "agent names the node in prose) | app (the same Python error every time) | hang (stops logging, keeps running) | "
        "early (transient NCCL error before the first checkpoint) | slow (iterations 3x slower from --fail-at on: the "
        "second node's ranks compute 3x slower, as each rank's DeepSpeed-style timing line shows)",
    )
    args = parser.parse_args(argv)

    ckpt_dir = Path(args.checkpoint_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    latest = ckpt_dir / "latest_checkpointed_iteration.txt"
    restart = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    plan = [p.strip() for p in args.plan.split(",") if p.strip()] or ["ok"]
    todo = plan[min(restart, len(plan) - 1)]
    nodes = expand_first_nodes(os.environ.get("SLURM_JOB_NODELIST", "localhost"))
    ranks_per_node = int(os.environ.get("SLURM_NTASKS_PER_NODE", "4") or 4)
    world = ranks_per_node * len(nodes)
    start = int(latest.read_text().strip()) if latest.exists() else 0

    log(f"[demo] attempt {restart + 1} on {','.join(nodes)} ({world} ranks), job {os.environ.get('SLURM_JOB_ID')}")
    if start:
        log(f" loading checkpoint from {ckpt_dir} at iteration {start}")
        log(f"  successfully loaded checkpoint from {ckpt_dir} [ t 0, p 0 ] at iteration {start}")
    else:
        log(" > no checkpoint found, starting from iteration 0")
    bad = nodes[1] if len(nodes) > 1 else nodes[0]
    bad_index = nodes.index(bad)
    fail_at = min(start + 3, args.iterations) if todo == "early" else max(args.fail_at, start + 1)
    for it in range(start + 1, args.iterations + 1):
        if todo == "hang" and it == fail_at:
            log(f"[demo] failing now (hang) at {datetime.now(UTC).isoformat()}")
            log(f"[demo] (hanging at iteration {it}: no more output)")
            time.sleep(3600)
        slowdown = 3.0 if todo == "slow" and it >= fail_at else 1.0
        time.sleep(args.iteration_seconds * slowdown)
        elapsed_ms = args.iteration_seconds * slowdown * 1000 * (1.0 + 0.02 * (it % 3))
        if todo == "slow":
            rank_timings(it, elapsed_ms, slowdown, bad_index, ranks_per_node, world)
        loss = 10.0 / (1 + it * 0.05)
        log(
            f" [{datetime.now():%Y-%m-%d %H:%M:%S}] iteration {it:8d}/{args.iterations:8d} | consumed samples: "
            f"{it * 256:12d} | elapsed time per iteration (ms): {elapsed_ms:.1f} | learning rate: 1.500E-04 | "
            f"global batch size:   256 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 1.234 | "
            f"number of skipped iterations:   0 | number of nan iterations:   0 |"
        )
        if it % args.save_interval == 0:
            latest.write_text(str(it))
            log(f"saving checkpoint at iteration {it:8d} to {ckpt_dir}")
            log(f"  successfully saved checkpoint from iteration {it:8d} to {ckpt_dir}")
        if it == fail_at and todo in FAILURES:
            log(f"[demo] failing now ({todo}) at {datetime.now(UTC).isoformat()}")
            FAILURES[todo](bad, bad_index, nodes, ranks_per_node, it)
            return 1
        if it == fail_at and todo == "fatal-running":
            log(f"[demo] failing now ({todo}) at {datetime.now(UTC).isoformat()}")
            fail_while_running(bad_index, ranks_per_node)
            time.sleep(3600)  # the other ranks wait in their collective; only jobmedic ends this attempt
    log(f"[demo] training finished at iteration {args.iterations}")
    return 0


def rank_timings(it: int, step_ms: float, slowdown: float, bad_index: int, ranks_per_node: int, world: int) -> None:
    """Each rank's wall-clock breakdown (DeepSpeed `wall_clock_breakdown`): the slow node's ranks compute
    `slowdown` times longer; the others wait for them in the step's communication."""
    slow_ranks = range(bad_index * ranks_per_node, (bad_index + 1) * ranks_per_node)
    for rank in range(world):
        factor = slowdown if rank in slow_ranks else 1.0
        fwd = step_ms / slowdown * 0.3 * factor * (1.0 + 0.01 * ((it + rank) % 3))
        bwd = 2 * fwd
        wait = max(0.0, step_ms - 3 * fwd)  # the fast ranks wait in the gradient all-reduce
        log(f"[Rank {rank}] time (ms) | fwd: {fwd:.2f} | bwd: {bwd:.2f} | bwd_allreduce: {wait:.2f}")


def fail(bad: str, bad_index: int, nodes: list[str], ranks_per_node: int, it: int) -> None:
    seq = it * 7
    # the node's kernel log, as the cluster's log collector forwards it into the job's output
    stamp = datetime.now().strftime("%b %d %H:%M:%S")
    log(f"{stamp} {bad} kernel: [81234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python, "
        "GPU has fallen off the bus.")
    log(f"{stamp} {bad} kernel: [81234.567912] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.")
    bad_ranks = range(bad_index * ranks_per_node, (bad_index + 1) * ranks_per_node)
    for rank in range(len(nodes) * ranks_per_node):
        if rank in bad_ranks:
            continue
        log(
            f"[rank{rank}]:[E ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) "
            f"ran for 600021 milliseconds before timing out."
        )
    log(
        f"srun: error: {bad}: task {bad_index * ranks_per_node}: Exited with exit code 1"
    )
    print("Traceback (most recent call last):", file=sys.stderr, flush=True)
    print('  File "pretrain_gpt.py", line 212, in <module>', file=sys.stderr, flush=True)
    print(
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error "
        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
        file=sys.stderr,
        flush=True,
    )


def fail_while_running(bad_index: int, ranks_per_node: int) -> None:
    """One rank hits a CUDA error and dies; the job's other ranks keep running (blocked), so Slurm sees RUNNING."""
    rank = bad_index * ranks_per_node
    err = sys.stderr
    print(f"[rank{rank}]: Traceback (most recent call last):", file=err, flush=True)
    print(f'[rank{rank}]:   File "pretrain_gpt.py", line 212, in train_step', file=err, flush=True)
    print(f"[rank{rank}]: RuntimeError: CUDA error: an illegal memory access was encountered", file=err, flush=True)
    print(f"[rank{rank}]: CUDA kernel errors might be asynchronously reported at some other API call, so the "
          "stacktrace below might be incorrect.", file=err, flush=True)


def fail_app(bad: str, bad_index: int, nodes: list[str], ranks_per_node: int, it: int) -> None:
    err = sys.stderr
    print("Traceback (most recent call last):", file=err, flush=True)
    print('  File "train.py", line 88, in <module>', file=err, flush=True)
    print("    main()", file=err, flush=True)
    print('  File "train.py", line 61, in main', file=err, flush=True)
    print("    batch = collate(samples)", file=err, flush=True)
    print("KeyError: 'input_ids'", file=err, flush=True)


def fail_early(bad: str, bad_index: int, nodes: list[str], ranks_per_node: int, it: int) -> None:
    print(
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited "
        "or there was a network error, NCCL version 2.21.5\nncclRemoteError: A call failed possibly due to a "
        "network error or a remote process exiting prematurely.",
        file=sys.stderr,
        flush=True,
    )


def _timeouts_on_the_others(bad_index: int, nodes: list[str], ranks_per_node: int, it: int) -> None:
    bad_ranks = range(bad_index * ranks_per_node, (bad_index + 1) * ranks_per_node)
    for rank in range(len(nodes) * ranks_per_node):
        if rank not in bad_ranks:
            log(
                f"[rank{rank}]:[E ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation "
                f"timeout: WorkNCCL(SeqNum={it * 7}, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
                f"Timeout(ms)=600000) ran for 600021 milliseconds before timing out."
            )


def fail_kernel_fqdn(bad: str, bad_index: int, nodes: list[str], ranks_per_node: int, it: int) -> None:
    """The GPU's node is named only by its FQDN in a forwarded syslog line; no launcher line names it."""
    _timeouts_on_the_others(bad_index, nodes, ranks_per_node, it)
    stamp = datetime.now().strftime("%b %d %H:%M:%S")
    log(f"{stamp} {bad}.cluster.internal kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=48213, name=python, "
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, "
        "subpartition 0.")
    log("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error "
        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5")


def fail_health_prose(bad: str, bad_index: int, nodes: list[str], ranks_per_node: int, it: int) -> None:
    """A node health agent names the node in prose ("... on instance HOST ..."), after the ranks' timeouts."""
    _timeouts_on_the_others(bad_index, nodes, ranks_per_node, it)
    log(f"[{datetime.now():%Y-%m-%dT%H:%M:%S}Z health-agent] GPU 0 (PCI 0000:3b:00) on instance {bad} "
        "is unhealthy: Xid 79 (GPU has fallen off the bus); node marked for repair")


FAILURES = {"xid": fail, "app": fail_app, "early": fail_early, "xid-fqdn": fail_kernel_fqdn,
            "gpu-prose": fail_health_prose}


if __name__ == "__main__":
    sys.exit(main())
