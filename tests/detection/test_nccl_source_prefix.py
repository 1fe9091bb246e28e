"""NCCL 2.19+ prints the source location between the device and "NCCL": the host must still be read."""

from __future__ import annotations

from activities.detection.verdict import attribute, parse_context
from workflows.contracts import Category, JobEvidence, JobInfo, JobState

LINE = (
    "gpu-b07:91823:92011 [5] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
    "10.1.4.22<37211> with status=12 opcode=129 len=0 vendor err 129 (Recv) hca mlx5_3"
)


def test_host_and_device_are_read_past_the_source_location() -> None:
    ctx = parse_context(LINE)
    assert (ctx.host, ctx.local_gpu) == ("gpu-b07", "5")


def test_ib_completion_error_implicates_the_reporting_host() -> None:
    job = JobInfo(job_id="7", state=JobState.FAILED, exit_code=1, nodes=["gpu-b07", "gpu-b08"])
    verdict = attribute(JobEvidence(job=job, log_lines=["step 10 loss 2.0", LINE, "srun: error: gpu-b07: task 3: Exited with exit code 1"]))
    assert verdict.category is Category.INTERCONNECT
    assert verdict.implicated.hosts == ["gpu-b07"]
