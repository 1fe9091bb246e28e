"""Bursts of small real jobs for the systemic guard's end-to-end tests, and the figures they report."""

from __future__ import annotations

import json
import statistics
import subprocess
from datetime import datetime
from pathlib import Path

from tests.workflows.harness import Scenario
from workflows.contracts import AuditEntry, EventType

# Every attempt runs `steps` quarter-second steps and exits 0, unless the flag file exists: then it fails the way the
# job's FAILURE says (one line, into its output). A first attempt only (`first_only`) or every attempt.
SCRIPT = """#!/bin/bash
echo "[burst] attempt $((${SLURM_RESTART_COUNT:-0} + 1))"
for i in $(seq 1 %(steps)d); do
  if [ -e %(flag)s ] && { [ "%(first_only)s" = no ] || [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; }; then
    %(failure)s
    exit 1
  fi
  echo "step $i of %(steps)d"
  sleep 0.25
done
echo "[burst] done"
"""

SHARED_NCCL = ('echo "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system '
               'error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5" >&2')


def node_specific(i: int) -> str:
    """A different hardware fault on the job's own node for each i (GPU, ECC, PCI id vary)."""
    pci = f"0000:{0x17 + 0x10 * (i % 8):02x}:00"
    kinds = [
        f'echo "$(date "+%b %d %H:%M:%S") $SLURMD_NODENAME kernel: NVRM: Xid (PCI:{pci}): 79, pid=4{i}1, '
        'name=python, GPU has fallen off the bus."',
        f'echo "$(date "+%b %d %H:%M:%S") $SLURMD_NODENAME kernel: NVRM: Xid (PCI:{pci}): 48, pid=4{i}2, '
        'name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at '
        'partition 0, subpartition 0."',
        'echo "RuntimeError: CUDA error: uncorrectable ECC error encountered"; echo "$SLURMD_NODENAME: CUDA error on '
        f'device {i % 8}"',
    ]
    return kinds[i % len(kinds)]


def submit_burst(sc: Scenario, n: int, *, failure, steps: int = 40, first_only: bool = False,
                 name: str = "jm-burst") -> tuple[list[str], Path]:
    """`n` one-node, one-task opted-in jobs; returns their ids and the flag file that makes them fail."""
    workdir = sc.tmp / "burst"
    workdir.mkdir(exist_ok=True)
    flag = workdir / "cause"
    comment = json.dumps({"jobmedic": {"environment": sc.environment, "mode": "action"}})
    ids = []
    for i in range(n):
        script = workdir / f"job{i}.sbatch"
        text = failure(i) if callable(failure) else failure
        script.write_text(SCRIPT % {"steps": steps, "flag": flag, "failure": text,
                                    "first_only": "yes" if first_only else "no"})
        out = subprocess.run(
            ["sbatch", "--parsable", f"--job-name={name}{i}", "--nodes=1", "--ntasks=1", "--requeue",
             "--open-mode=append", f"--output={workdir}/out-%j.txt", f"--comment={comment}", str(script)],
            capture_output=True, text=True, timeout=30, check=True,
        )
        ids.append(out.stdout.strip().split(";")[0])
    sc.jobs.extend(ids)
    return ids, flag


def _at(value) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def latencies(entries: list[AuditEntry]) -> tuple[float | None, float | None]:
    """(failure -> first confirmed scheduler action, failure -> running again) of a job's first incident, seconds."""
    detection = next((e for e in entries if e.event_type is EventType.DETECTION), None)
    if detection is None or not (detection.detail or {}).get("failure_at"):
        return None, None
    failed = _at(detection.detail["failure_at"])
    failed = failed if failed.tzinfo else failed.replace(tzinfo=detection.timestamp.tzinfo)
    action = next((e for e in entries if e.event_type is EventType.ACTION_CONFIRMED), None)
    running = next((e for e in entries if e.event_type is EventType.ALLOCATION_RESTART), None)
    started = _at((running.detail or {}).get("start_time")) if running else None
    if started is not None and started.tzinfo is None:
        started = started.replace(tzinfo=failed.tzinfo)
    return (
        (action.timestamp - failed).total_seconds() if action else None,
        (started - failed).total_seconds() if started else None,
    )


def summary(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "n/a"
    return f"median {statistics.median(got):.1f} s, max {max(got):.1f} s (n={len(got)})"
