"""Culprits named in forms first met on batch b5's tune excerpts (tests/corpus/real/tune/).

- Culprit lists: torch's monitoredBarrier 'Ranks 4, 5, 6, 7 failed to pass' (wait_all_ranks) and torchfrtrace's
  'missing ranks: {13, 14}' name every rank listed; Horovod's '[ready ranks: ...]' sit on the unflagged
  'Stalled ops:' rows under the flagged stall header.
- Ranks timing out on the same collective number in another operation than three or more others took another
  path there: they are the suspects.
- On a one-node job a suspect rank's node is every victim's node too: it is not blamed.
- Known failures in another tool's words: a health agent's Xid (gpud) goes through the Xid table like the
  kernel's; Ray's 'System memory low at node with IP' is that node's OOM; PJRT's 'RESOURCE_EXHAUSTED: Error
  allocating device buffer' is a GPU OOM; 'NCCL operation ncclX(...) failed: internal error' (XLA, TF, CuPy) is
  the NCCL result it names; NCCL's invalid usage is an NCCL error.
- A message naming the lost party: JAX's coordination service names the dead task ('task:5 heartbeat timeout'),
  whose node the layout gives; a NODE_FAIL naming no node falls back to the one host strong node-failure lines
  name, before the launcher's first failed rank.
- Shared storage failing through one node's client: Lustre client lines (LNet timeouts, an eviction) only from
  the node whose process failed blame that node; a pasted section's banner ('--- dmesg -T on HOST ---') gives
  its lines the one job node it names, as a shell prompt does.
- A writer known by its container id: NCCL's 'Bootstrap : Using IF:IP' / 'OOB IF:IP' says which node it is;
  'Call to ibv_* failed with error No such device|Cannot allocate memory' is the reporter's own NIC, even of two.
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


# ----------------------------------------------------------------------------- known failures in another tool's words


def test_a_health_agents_xid_is_read_like_the_kernels():
    """gpud's events API: 'xid 119 detected by dmesg' and '\\"xid\\":119' (GSP RPC timeout) on hgx-0417, the
    node of the prompt (before: an NCCL timeout, no host)."""
    v = verdict_of("gpu_hardware-gpud-events-xid119-dmesg-single-node-e5b07")
    assert v.category == Category.GPU_HARDWARE
    assert v.implicated.hosts == ["hgx-0417"]


def test_rays_system_memory_low_at_node_is_that_nodes_oom():
    """raylet: 'System memory low at node with IP 172.31.41.128 ... killing latest task' (before: app_error)."""
    v = verdict_of("host_oom-ray-train-raylet-system-memory-low-ip-e5b24")
    assert v.category == Category.HOST_OOM
    assert v.implicated.hosts == ["ray-gpu-worker-1"]


def test_pjrt_error_allocating_device_buffer_is_a_gpu_oom():
    """torch_xla on TPU: 'RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 392.00M'."""
    assert verdict_of("gpu_oom-torch-xla-tpu-hbm-resource-exhausted-worker3-e5b37").category == Category.GPU_OOM


def test_xlas_nccl_operation_failed_is_the_nccl_result_it_names():
    """'NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: internal error' (before: app_error)."""
    assert verdict_of("nccl_error-jax-internal-error-topology-nic-busid-e5a15").category == Category.NCCL_ERROR


def test_nccl_invalid_usage_is_an_nccl_error():
    """'NCCL error in: ... invalid usage', then ncclInvalidUsage and NCCL's 'Duplicate GPU detected : rank 9 and
    rank 1 both on CUDA device 34000' (before: app_error). A Duplicate GPU warning that comes first stays the
    launch misconfiguration it is (test_verdict.py, the synthetic corpus's app_error_05)."""
    assert verdict_of("nccl_error-ray-duplicate-gpu-ranks-on-two-nodes-e5a11").category == Category.NCCL_ERROR
    assert verdict_of("nccl_error-invalid-usage-duplicate-gpu-megatron-2171-n1b09").category == Category.NCCL_ERROR


# ----------------------------------------------------------------------------- a message naming the lost party


def test_a_heartbeat_timeout_is_about_the_task_it_names():
    """Slurm says NODE_FAIL, naming no node; tasks 0 and 3 print 'Task /job:jax_worker/replica:0/task:5 heartbeat
    timeout': task 5's node by the layout, gpu-j06, not the writers' nodes, and not task 3, srun's first
    'Aborted', which only noticed first (before: rank 3, no host)."""
    v = verdict_of("node_failure-jax-coordination-heartbeat-task5-srun-e5a36")
    assert v.category == Category.NODE_FAILURE
    assert v.implicated.hosts == ["gpu-j06"]
    assert 3 not in v.implicated.ranks


# ----------------------------------------------------------------------------- one node's file-system client


def test_lustre_client_lines_only_from_the_failed_tasks_node_blame_it():
    """Task 5 on dgj207 gets ESHUTDOWN (errno 108) reading a shard; dgj207's own dmesg (its prompt) shows LNet
    timeouts, obd_ping failing and the client evicted: dgj207's client, not the shared storage (before: no host)."""
    v = verdict_of("data_io-lustre-lnet-timeout-obd-ping-107-eshutdown-task5-e5b27")
    assert v.category == Category.DATA_IO
    assert v.implicated.hosts == ["dgj207"]
    assert v.implicated.ranks == [5]


def test_a_section_banner_gives_its_lines_the_host_it_names():
    """'--- dmesg -T on gpu-e33 ---' opens gpu-e33's kernel log: its LustreError eviction lines are that node's
    (before: no host); a banner naming no job node takes nothing."""
    from activities.detection.launchers import section_header

    assert section_header("--- dmesg -T on gpu-e33 ---")
    assert section_header("=== sacct ===")
    assert not section_header("--- a/train.py")
    assert not section_header("--- dmesg -T on gpu-e33 ===")
    v = verdict_of("data_io-lustre-client-evicted-dmesg-a5d09")
    assert v.implicated.hosts == ["gpu-e33"]
    assert verdict_of("data_io-lustre-oss-recovery-a5d10").implicated.hosts == []


# ----------------------------------------------------------------------------- a writer known by its container id


def test_a_container_writer_is_the_node_of_its_nccl_address_and_its_own_nic_fails():
    """Rank 1 writes as container 7c1fa93e02bd, whose NCCL says 'Bootstrap : Using bond0:10.40.2.14<0>'
    (trn-a14); 'Call to ibv_modify_qp failed with error No such device' is trn-a14's own RoCE device, though
    the job has two nodes (before: no host, rank 1)."""
    from activities.detection.launchers import nccl_own_address

    assert nccl_own_address("7c1fa93e02bd:412:412 [0] NCCL INFO Bootstrap : Using bond0:10.40.2.14<0>") == (
        "7c1fa93e02bd", "10.40.2.14")
    assert nccl_own_address("7c1fa93e02bd:412:520 [0] NCCL INFO NET/IB : Using [0]mlx5_2:1/RoCE [RO]; "
                            "OOB bond0:10.40.2.14<0>") == ("7c1fa93e02bd", "10.40.2.14")
    assert nccl_own_address("7c1fa93e02bd:412:412 [0] NCCL INFO cudaDriverVersion 12020") is None
    v = verdict_of("interconnect-roce-modify-qp-no-such-device-fqdn-e5a06")
    assert v.category == Category.INTERCONNECT
    assert v.implicated.hosts == ["trn-a14"]
