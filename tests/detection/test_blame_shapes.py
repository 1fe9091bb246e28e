"""Blame rules of issue 7, round 4, on real-format tune excerpts (tests/corpus/real/tune/).

- A GPU is named only as faulty hardware (GPU hardware, or a CUDA/interconnect failure in the
  hardware domain): the device an OOM, a code's CUDA error or a failed transfer ran on is not to blame.
- torchrun's first failed worker is a rank to name only on a blamed node (elsewhere it noticed first).
- A pasted session under the RHEL prompt `[user@host dir]# cmd` is that host's output.
"""

from __future__ import annotations

from workflows.contracts import Category

from tests.detection.real_cases import verdict_of


def test_gpu_oom_names_no_gpu():
    """'NCCL WARN Cuda failure 2 out of memory' on every GPU of a node, through NCCL's [dev] prefixes:
    the job outgrew the memory, no device is faulty (before: eight GPUs named)."""
    v = verdict_of("gpu_oom-megatron-nccl-cuda-failure-2-alloc-c7g03")
    assert v.category == Category.GPU_OOM
    assert v.implicated.gpus == []


def test_a_failed_network_transfer_names_the_host_not_its_gpus():
    """IB port flaps on gpu-b08; the NCCL lines of its three ranks carry their devices (before: three GPUs)."""
    v = verdict_of("interconnect-ib-port-flap-lightning-i3a08")
    assert v.category == Category.INTERCONNECT
    assert v.implicated.hosts == ["gpu-b08"]
    assert v.implicated.gpus == []


def test_a_cuda_error_of_the_code_names_no_gpu():
    """An illegal memory access reported through NCCL on one rank: the code's, not the device's."""
    v = verdict_of("cuda_error-illegal-access-nccl-alloc-warn-g2b01")
    assert v.category == Category.CUDA_ERROR
    assert v.implicated.ranks == [1]
    assert v.implicated.gpus == []


def test_gpu_hardware_still_names_its_gpu():
    v = verdict_of("interconnect-nvlink-xid74-talos-kmsg-i3a17")
    assert v.implicated.gpus == ["gpu-node-06:0000:9d:00"]


def test_torchrun_root_cause_on_a_survivor_names_no_rank():
    """The IB completion errors name ip-10-0-3-46 as the broken end; torchrun's root cause is rank 6 on
    ip-10-0-3-44, which only noticed first (before: rank 6 named)."""
    v = verdict_of("interconnect-ncclremote-ib-lasterror-hf-i3a05")
    assert v.implicated.hosts == ["ip-10-0-3-46"]
    assert v.implicated.ranks == []


def test_rhel_prompt_starts_a_session_on_its_host():
    from activities.detection.launchers import prompt_host

    assert prompt_host("[root@mi300-vm-3 ~]# rdma link show mlx5_7/1") == "mi300-vm-3"
    assert prompt_host("[jdoe@login-2.hpc.example.org /scratch/run]$ sacct -j 41") == "login-2.hpc.example.org"
    assert prompt_host("[rank0]: email root@mi300-vm-3 ] for access") is None
    v = verdict_of("interconnect-rdma-link-flapping-rccl-i3a22")
    assert v.category == Category.INTERCONNECT
    assert v.implicated.hosts == ["mi300-vm-3"]
