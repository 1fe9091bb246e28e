"""Culprits and causes in forms first met on batch b6's tune excerpts (tests/corpus/real/tune/).

- An NFS client that lost its server ('nfs: server 10.0.0.148 not responding, still trying' with writers stuck in
  D state in nfs_file_fsync) on one node of the job is that node's mount: data_io, that node blamed (before: none).
- A GPU known by its index is named by the bus id an inventory row of its host ties to it: dcgm-exporter's
  gpu="5" ... pci_bus_id="00000000:9B:00.0" labels, nvidia-smi's CSV (index first) and table rows.
- The kernel's OOM killer seen on exactly one node of several (not a cgroup limit the job set) blames that node.
- Slurm's own words for a node's bad RAM ('*** STEP 330117.0 ON gx07 UNCORRECTABLE MEMORY ERROR AT ...') and a
  pasted `sinfo -lNe` row showing a job node 'down*  ... Not responding' name the node that failed.
- A peer nobody can reach: c10d giving up ('failed to connect to any network address of (HOST, PORT)', no longer
  cleared as a start-up retry) and NCCL's 'socketPollConnect poll() failed ... connect to IP:PORT' from every
  other node name the far end.
- A device fault printed without a host by ranks the layout puts on one node (OpenACC's 'call to cuCtxCreate
  returned error 214 (CUDA_ERROR_ECC_UNCORRECTABLE)' from srun's tasks 2-3) is that node's GPU.
- Horovod's 'Missing ranks:' rows naming every rank of one node of several (half the world here) single that
  node out; more than a quarter of the world on several nodes still does not.
- Health checks' own words for a failed GPU: a DCGM diagnostic's error text ('A memory mismatch was detected on
  GPU 1', here in a preflight container's JSON log) and gpu-burn's summary row ('GPU 2: FAULTY').
- A running job whose own retry loop says it starts again ('Training failed, retrying 1/3', 'Restoring checkpoint')
  and whose steps then grow has survived the error, after two progress lines as after three without those words.
- aws-ofi-nccl unable to create an endpoint on its own domain ('NET/OFI Creating new endpoint for domain 0x...
  failed') is the reporter's own EFA device, even on a job of two nodes (CloudWatch's '| time | ' table format).
- The cloud taking a VM down under the job (GCE's compute.instances.terminateOnHostMaintenance system event, listed
  by a 'gcloud compute operations list' naming the instance) is that node's failure, ahead of the survivors'
  watchdog timeouts.
"""

from __future__ import annotations

from activities.detection.gpu_inventory import GpuRow, inventory_row
from workflows.contracts import Category

from tests.detection.real_cases import verdict_of, verdict_of_edited


def test_an_nfs_server_not_responding_on_one_node_is_that_nodes_mount():
    """A running job; the syslog header names the node by its EC2 hostname only (ip-10-0-27-211)."""
    v = verdict_of("data_io-nfs-not-responding-hung-task-fsync-ec2-hostname-e6c06")
    assert v.category == Category.DATA_IO
    assert v.implicated.hosts == ["train-dy-g5-12xlarge-4"]


def test_a_gpu_index_is_named_by_the_bus_id_dcgm_exporter_gives_it():
    """torchrun's failed local_rank 5 on h100-c018; the exporter's Xid series for gpu="5" carries its bus id."""
    v = verdict_of("gpu_hardware-torchrun-ecc-rank13-dcgm-exporter-xid48-hostname-label-e6a17")
    assert v.implicated.gpus == ["h100-c018:0000:9b:00"]


def test_a_gpu_index_is_named_by_the_bus_id_of_nvidia_smis_csv_row():
    """'6, GPU-1d7c..., 00000000:BA:00.0, Yes' printed through 'kubectl debug node/H': that node's GPU 6."""
    v = verdict_of("gpu_hardware-k8s-device-plugin-xid94-contained-ecc-allocatable-7-e6a20")
    assert v.implicated.gpus == ["h100-pool-a-0x7k9:0000:ba:00"]


def test_inventory_rows_of_each_tool():
    assert inventory_row('DCGM_FI_DEV_GPU_TEMP{Hostname="n1",pci_bus_id="00000000:3B:00.0",gpu="2"} 71') == GpuRow(
        2, "0000:3b:00", "n1")
    assert inventory_row("|   7  NVIDIA A100-SXM4-80GB          On  |   00000000:BD:00.0 Off |        0 |") == GpuRow(
        7, "0000:bd:00")
    assert inventory_row("3, NVIDIA H100, 00000000:4E:00.0") == GpuRow(3, "0000:4e:00")
    assert inventory_row("GPU 00000000:4E:00.0") is None  # nvidia-smi -q's section header names no index
    assert inventory_row("3, 45, 12.5 W") is None


def test_a_global_oom_on_one_node_of_two_blames_that_node():
    """dmesg's 'oom-kill:constraint=CONSTRAINT_NONE,...,global_oom' after a prompt on hgx-b03 (before: rank only)."""
    v = verdict_of("host_oom-dmesg-iso-global-oom-python-rank-host-prompt-e6a08")
    assert v.category == Category.HOST_OOM
    assert v.implicated.hosts == ["hgx-b03"]


def test_a_cgroup_oom_on_one_node_stays_the_jobs():
    """Slurm's 'Detected 1 oom_kill event ... cgroup' is the job's own limit: no node is blamed for it."""
    v = verdict_of("host_oom-slurmstepd-batch-cgroup-oom-multinode-c7h05")
    assert v.category == Category.HOST_OOM
    assert v.implicated.hosts == []


def test_slurms_uncorrectable_memory_error_names_the_node():
    """Rank 19's Bus error and everyone's watchdog timeouts follow; the cause is gx07's RAM (before: app_error)."""
    v = verdict_of("node_failure-slurmstepd-uncorrectable-memory-error-bus-error-e6c27")
    assert v.category == Category.NODE_FAILURE
    assert v.implicated.hosts == ["gx07"]


def test_a_pasted_sinfo_row_names_the_down_node():
    v = verdict_of("node_failure-sinfo-down-star-not-responding-job-completing-e6c11")
    assert v.category == Category.NODE_FAILURE
    assert v.implicated.hosts == ["gpu-023"]


def test_c10d_giving_up_on_the_store_host_blames_it():
    """errno 113 No route to host to MASTER_ADDR by FQDN, after a complete rendezvous (before: app_error, no host)."""
    v = verdict_of("interconnect-elastic-etcd-master-no-route-to-host-e6b15")
    assert v.category == Category.INTERCONNECT
    assert v.implicated.hosts == ["gpu-k03"]


def test_nccl_socket_connects_timing_out_to_one_address_blame_that_node():
    """A running job's per-rank files: five nodes' bootstrap connects to 172.16.41.117 time out (before: none)."""
    v = verdict_of("interconnect-socketpollconnect-syn-drop-dest-ip-e6b01")
    assert v.category == Category.INTERCONNECT
    assert v.implicated.hosts == ["s07gn0117"]


def test_a_device_fault_without_a_host_is_on_the_node_of_its_ranks():
    v = verdict_of("gpu_hardware-openacc-cuctxcreate-214-ecc-uncorrectable-one-node-e6a15")
    assert v.category == Category.GPU_HARDWARE
    assert v.implicated.hosts == ["atl1-1-02-011-19-0"]
    assert v.implicated.ranks == [2, 3]


def test_horovod_missing_ranks_of_one_whole_node_blame_it():
    """Ranks 4-7 of 8, all of hvd-w02's (before: more than a quarter of the world, so nobody)."""
    v = verdict_of("hang-horovod-stall-missing-ranks-one-node-e6b12")
    assert v.category == Category.HANG
    assert v.implicated.ranks == [4, 5, 6, 7]
    assert v.implicated.hosts == ["hvd-w02"]


def test_horovod_missing_ranks_across_nodes_single_out_nobody(tmp_path):
    """The same report with ranks 3-6 missing (two nodes' ranks, half the world): no suspect set."""
    v = verdict_of_edited("hang-horovod-stall-missing-ranks-one-node-e6b12",
                          lambda text: text.replace("[0] 7: [", "[0] 3: ["), tmp_path)
    assert v.implicated.hosts == []


def test_a_dcgm_diagnostic_error_text_names_the_gpu():
    """Before: unknown (the JSON line matched nothing)."""
    v = verdict_of("gpu_hardware-k8s-preflight-dcgm-diag-json-memory-fail-gpu1-e6a21")
    assert v.category == Category.GPU_HARDWARE
    assert (v.implicated.hosts, v.implicated.gpus) == (["gpu-a100-node-19"], ["gpu-a100-node-19:1"])


def test_gpu_burns_faulty_row_names_the_gpu():
    """Before: cuda_error from CUBLAS_STATUS_EXECUTION_FAILED, no GPU."""
    v = verdict_of("gpu_hardware-gpuburn-epilog-cublas-exec-failed-gpu-missing-nvsmi-e6a30")
    assert v.category == Category.GPU_HARDWARE
    assert (v.implicated.hosts, v.implicated.gpus) == (["rtx8k-07"], ["rtx8k-07:2"])


def test_a_running_job_that_retried_and_trains_again_is_fine():
    """Ray: an actor lost (spot reclaim), the script retries, restores epoch 12, prints two growing steps."""
    v = verdict_of("none-ray-spot-actor-lost-socket-closed-retry-resumes-e6c18")
    assert v.category == Category.NONE


def test_without_the_retry_words_two_progress_lines_do_not_clear_the_error(tmp_path):
    v = verdict_of_edited(
        "none-ray-spot-actor-lost-socket-closed-retry-resumes-e6c18",
        lambda text: text.replace("Training failed, retrying 1/3", "Training failed").replace(
            "Restoring checkpoint", "Loading"),
        tmp_path,
    )
    assert v.category != Category.NONE


def test_an_efa_endpoint_that_cannot_be_created_is_the_reporters_device():
    v = verdict_of("interconnect-efa-empty-provider-list-one-instance-cloudwatch-e6b22")
    assert v.category == Category.INTERCONNECT
    assert v.implicated.hosts == ["ip-10-36-41-87"]


def test_a_host_maintenance_termination_is_the_named_instances_failure():
    v = verdict_of("node_failure-gke-host-maintenance-terminated-pod-outofgpu-e6a27")
    assert v.category == Category.NODE_FAILURE
    assert v.implicated.hosts == ["gke-train-a2-pool-3c1f9e2a-w7kd"]
