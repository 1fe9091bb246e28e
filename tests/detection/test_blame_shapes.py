"""Blame rules of issue 7, round 4, on real-format tune excerpts (tests/corpus/real/tune/).

- A GPU is named only as faulty hardware (GPU hardware, or a CUDA/interconnect failure in the
  hardware domain): the device an OOM, a code's CUDA error or a failed transfer ran on is not to blame.
- torchrun's first failed worker is a rank to name only on a blamed node (elsewhere it noticed first).
- A pasted session under the RHEL prompt `[user@host dir]# cmd` is that host's output; a prompt on a node
  that is not the job's (a login node) gives its output to the one job node its command names, or to none.
- UCX's `[HOST:PID:THREAD(:TID)]` prefix is the line's writer, not a node the message names; a port a
  node's own tool shows down (ibstat, ibv_devinfo, rdma link) is that node's; one node reporting
  peerless transport errors singles itself out only among three or more (with two, either end).
- srun's `task N: Aborted (core dumped)` is task N's own end.
- A host OOM whose message names one node of a multi-node job ("Memory on the node (IP: ...)") blames it;
  on a one-node job the job outgrew the node (test_blame_near.py).
- GPU health tools: dcgmi diag's table (its 27-character first column, 'Fail - GPU: N'), a health check's
  'GPU DRAM uncorrectable error count', the k8s device plugin's 'the device will go unhealthy' / 'device
  marked unhealthy'; the failing line's own GPU reference before the rows printed around it.
- A failing line inside an `nvidia-smi -q` section is about the GPU of the section's `GPU 00000000:3B:00.0`.
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


def test_ucx_prefix_is_the_writer():
    from activities.detection.line_context import parse_context

    ctx = parse_context("[gpu-c03:77120:0:77120] ib_mlx5_log.c:143  Transport retry count exceeded on mlx5_0:1/RoCE")
    assert (ctx.host, ctx.pid) == ("gpu-c03", 77120)
    assert ctx.text.startswith("ib_mlx5_log.c:143")
    assert parse_context("[1,3]<stderr>:[cn7:4410:0] UCX  ERROR ep timeout").host == "cn7"


def test_a_port_down_on_the_quiet_end_blames_it_not_the_end_that_reports_retries():
    """gpu-c03's UCX prefixes report 'Transport retry count exceeded'; '$ ssh gpu-c04 sudo ibv_devinfo'
    shows gpu-c04's port PORT_DOWN (before: gpu-c03 and its rank 0 blamed)."""
    v = verdict_of("interconnect-roce-retry-peer-port-down-i3a12")
    assert v.category == Category.INTERCONNECT
    assert v.implicated.hosts == ["gpu-c04"]
    assert v.implicated.ranks == []


def test_retries_exceeded_on_one_of_two_nodes_blame_neither():
    """Two nodes, UCX retry-exceeded on ast1816 only: its one peer is the other node, either end may be bad
    (before: ast1816 and srun's sixteen killed tasks of ast1815)."""
    v = verdict_of("interconnect-ucx-fatal-mlx5-3-srun-i3a11")
    assert v.category == Category.INTERCONNECT
    assert v.implicated.hosts == []
    assert v.implicated.ranks == [21]  # 'srun: error: ast1816: task 21: Aborted (core dumped)' went first


def test_one_node_of_four_reporting_retries_is_blamed():
    v = verdict_of("interconnect-ucx-retry-exceeded-one-node-mpirun-b6b03")
    assert v.implicated.hosts == ["cn-c17"] and v.implicated.ranks == [34]


def test_srun_core_dumped_status_is_the_tasks_own_end():
    from activities.detection.launchers import launcher_report

    report = launcher_report(7, "srun: error: ast1816: task 21: Aborted (core dumped)")
    assert report is not None and report.ids == (21,) and report.own_failure


def test_ray_memory_monitor_names_the_node_that_ran_low_by_address():
    """'Memory on the node (IP: 10.18.6.42, ...) ... exceeds the memory usage threshold': of the job's two
    nodes, rl-cpu-h42 ran low (before: no host)."""
    v = verdict_of("host_oom-ray-oom-killer-verl-reward-worker-ip-c7h01")
    assert v.category == Category.HOST_OOM
    assert v.implicated.hosts == ["rl-cpu-h42"]


def test_raylet_oom_report_hard_wrapped_names_its_node():
    """The raylet's 'Workers ... killed due to memory pressure (OOM)' wraps before '(ID: ..., IP: 172.24.3.58)'."""
    v = verdict_of("host_oom-raylet-workers-killed-memory-pressure-ip-c7h02")
    assert v.implicated.hosts == ["wm-node-b"]


def test_cgroup_oom_naming_both_nodes_blames_neither():
    v = verdict_of("host_oom-slurmstepd-batch-cgroup-oom-multinode-c7h05")
    assert v.category == Category.HOST_OOM
    assert v.implicated.hosts == []


def test_dcgmi_diag_table_fail_names_the_gpu():
    """'| PCIe                      | Fail - GPU: 2    |': the test name is padded to the column's width
    (before: not flagged, the job's failure unexplained)."""
    v = verdict_of("gpu_hardware-dcgmi-diag-r3-pcie-fail-gpu2-q9g09")
    assert v.category == Category.GPU_HARDWARE
    assert v.implicated.hosts == ["a100-k8s-w09"]
    assert v.implicated.gpus == ["a100-k8s-w09:2"]


def test_health_tool_verdict_names_its_gpu_among_the_rows_for_every_gpu():
    """Rows 'GPU ID: 0' .. 'GPU ID: 3' then 'Detected a very high GPU DRAM uncorrectable error count (212)
    ... for GPU ID 3, please offline this node (ndv4-0091)'."""
    v = verdict_of("gpu_hardware-azure-ecc-tool-high-dram-dbe-gpu-id-3-r4g11")
    assert v.category == Category.GPU_HARDWARE
    assert v.implicated.hosts == ["ndv4-0091"]
    assert v.implicated.gpus == ["ndv4-0091:3"]


def test_k8s_device_plugin_xid_marks_the_pods_node():
    """'XidCriticalError: Xid=48 on Device=GPU-..., the device will go unhealthy.', then the pod's
    'Node: a100-pool-7/10.128.5.37' (before: an application error, a Python-looking exception line)."""
    v = verdict_of("gpu_hardware-k8s-device-plugin-xid48-unhealthy-q9g06")
    assert v.category == Category.GPU_HARDWARE
    assert v.implicated.hosts == ["a100-pool-7"]


def test_nvidia_smi_q_section_header_names_the_gpu_of_its_indented_lines():
    """'Remapping Failure Occurred : Yes' 22 indented lines under 'GPU 00000000:3B:00.0' (before: host only)."""
    v = verdict_of("gpu_hardware-nvsmi-q-row-remap-failure-g2a21")
    assert v.category == Category.GPU_HARDWARE
    assert v.implicated.gpus == ["node117:0000:3b:00"]


def test_a_line_outside_the_section_takes_no_gpu_from_it():
    from activities.detection.verdict import attribute
    from workflows.contracts import JobEvidence, JobInfo, JobState

    job = JobInfo(job_id="1", state=JobState.FAILED, exit_code=1, nodes=["node117"])
    inside = ["GPU 00000000:3B:00.0", "    Product Name : NVIDIA A100", "        Remapping Failure Occurred : Yes"]
    v = attribute(JobEvidence(job=job, log_lines=inside))
    assert v.implicated.gpus == ["node117:0000:3b:00"]
    # four lines down (past the message's own neighbours), after a line that ends the section
    outside = [*inside[:2], "", "health summary", "checked 8 GPUs", "Remapping Failure Occurred : Yes"]
    v = attribute(JobEvidence(job=job, log_lines=outside))
    assert v.category == Category.GPU_HARDWARE and v.implicated.gpus == []


def test_a_login_node_prompt_is_not_where_the_job_ran():
    """'[sysadm@login02 dcgm]$ sbatch --nodelist=node-153 dcgmi-1n.slurm', then the diag's table: the
    failing GPU is node-153's (b5; before: login02 and its 'GPU 3' blamed)."""
    v = verdict_of("gpu_hardware-dcgmi-diag-r3-row-remap-pending-gpu3-e5b05")
    assert v.category == Category.GPU_HARDWARE
    assert v.implicated.hosts == ["node-153"]
    assert v.implicated.gpus == ["node-153:3"]
