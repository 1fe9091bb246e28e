"""Culprits and causes in forms first met on batch b7's tune excerpts (tests/corpus/real/tune/).

- A node's own disk failing in the kernel's words (NVMe 'Write(0x1) @ LBA ... Data Transfer Error', 'blk_update_request:
  I/O error, dev nvme0n1', 'XFS (nvme1n1p1): Metadata CRC error') is data_io on that node, even when the training
  error names only the path; the ranks that failed writing there are its ranks.
- A process stuck in the file-system client (a hung task's call trace in [lustre]/[obdclass]/[nfs] frames) with
  the Lustre client losing its server on one node explains a job that then ran out of time: data_io, that node.
- slurmstepd's '*** JOB N ON HOST CANCELLED ... DUE TO NODE FAILURE' comes from the batch host, alive to print
  it: when the survivors' NCCL links all lost one address, that node failed.
- A node whose container runtime cannot start the tasks' containers (pyxis 'container start failed', the NVIDIA
  container hook's ldcache error) while the others started theirs is that node's failure; on every node, no node's.
- torchelastic's own retry ('Worker group FAILED. 3/3 attempts left; will restart worker group') followed by
  growing steps: a running job that recovered.
- A process SIGKILLed (DeepSpeed's 'exits with return code = -9', most often the OOM killer) before the others'
  collectives timed out is what they waited for: host_oom; the launcher's pdsh prefix names the node of its
  --local_rank, and the layout gives the global rank.
- Slurm refusing to create a step for what it asks ('Unable to create step for job N: Memory required by task is
  not available') is the submission's: app_error, no node.
- A NIC link that went down and came up again ('mlx5_core ... eth1: Link down', then '... eth1: Link up') in a
  running job whose steps grow since the first link error is a flap the job rode out (the kernel's lines pasted
  below the job's own); without the 'Link up' it stays an interconnect fault.
"""

from __future__ import annotations

from workflows.contracts import Category

from tests.detection.real_cases import verdict_of, verdict_of_edited


def test_nvme_write_errors_in_dmesg_blame_that_nodes_disk():
    """DeepSpeed's 'PytorchStreamWriter failed writing file' on rank 8; dmesg after a prompt on gpu-c12."""
    v = verdict_of("data_io-nvme-data-transfer-error-local-ckpt-deepspeed-e7b07")
    assert v.category == Category.DATA_IO
    assert (v.implicated.hosts, v.implicated.ranks) == (["gpu-c12"], [8])


def test_xfs_corruption_in_a_forwarded_syslog_blames_the_node_by_its_fqdn():
    v = verdict_of("data_io-xfs-crc-scratch-rsyslog-fqdn-ray-ip-e7b08")
    assert v.category == Category.DATA_IO
    assert v.implicated.hosts == ["trn-p4d-0413"]


def test_a_job_timed_out_while_stuck_in_the_lustre_client_is_that_nodes_storage():
    """Before: time_limit (the scheduler's TIMEOUT), no node."""
    v = verdict_of("data_io-fsx-lustre-client-hang-one-node-completing-dstate-e7c24")
    assert v.category == Category.DATA_IO
    assert v.implicated.hosts == ["gpu-dy-p5-5"]


def test_a_node_fail_notice_from_the_batch_host_blames_the_node_the_links_lost():
    """Before: gpu-c03, the batch host that printed the notice, and its ranks."""
    v = verdict_of("node_failure-peer-ip-connection-reset-node-fail-e7a05")
    assert v.category == Category.NODE_FAILURE
    assert v.implicated.hosts == ["gpu-c04"]


def test_a_container_that_will_not_start_on_one_node_blames_it():
    """srun -l tasks 20-23 (hkg0316 by the layout); before: app_error, no node."""
    v = verdict_of("node_failure-pyxis-enroot-ldcache-one-node-label-e7c01")
    assert v.category == Category.NODE_FAILURE
    assert v.implicated.hosts == ["hkg0316"]


def test_containers_failing_on_every_node_blame_none(tmp_path):
    """The same runtime failure on both nodes' tasks (the image or the site's hooks): no node is singled out."""
    from tests.detection.real_cases import BENCH, CATALOGUE, sidecar

    side = sidecar("node_failure-pyxis-enroot-ldcache-one-node-label-e7c01")
    side.update(layout="hkg[0315-0316]:2", cluster_nodes=[{"name": "hkg0315"}, {"name": "hkg0316"}])
    side["job"]["nodes"] = ["hkg0315", "hkg0316"]
    lines = []
    for task in range(4):
        lines += [f"{task}: slurmstepd: error: pyxis: container start failed with error code: 1",
                  f"{task}: slurmstepd: error: pyxis:     nvidia-container-cli: ldcache error: process /sbin/ldconfig "
                  "failed with error code: 1",
                  f"{task}: slurmstepd: error: pyxis: couldn't start container"]
    lines += ["srun: error: hkg0315: tasks 0-1: Exited with exit code 1",
              "srun: error: hkg0316: tasks 2-3: Exited with exit code 1"]
    log = tmp_path / "pyxis-everywhere.log"
    log.write_text("\n".join(lines) + "\n")
    v = BENCH.run_case(log, side, catalogue=CATALOGUE)
    assert v.category == Category.NODE_FAILURE
    assert v.implicated.hosts == []


def test_a_worker_group_torchelastic_restarted_and_that_trains_again_is_fine():
    v = verdict_of("none-torchelastic-restart-after-store-connect-timeout-recovers-e7a19")
    assert v.category == Category.NONE


def test_a_worker_sigkilled_before_the_timeouts_is_the_cause_and_its_rank_is_placed():
    """Before: nccl_timeout on hgpu2057. Rank 10 = hgpu2057 (the second of three 8-task nodes) local rank 2."""
    v = verdict_of("host_oom-pdsh-zero3-offload-rank10-sigkill-others-timeout-e7a14")
    assert v.category == Category.HOST_OOM
    assert (v.implicated.hosts, v.implicated.ranks) == ([], [10])


def test_a_step_slurm_refuses_to_create_is_the_submissions():
    """Before: unknown."""
    v = verdict_of("app_error-srun-step-creation-disabled-memory-not-available-eval-step-e7c25")
    assert v.category == Category.APP_ERROR
    assert v.implicated.hosts == []


def test_a_link_flap_that_came_back_while_training_goes_on_is_fine():
    v = verdict_of("none-mlx5-single-link-flap-recovered-training-continues-e7b23")
    assert v.category == Category.NONE


def test_a_link_that_stays_down_is_still_the_nodes_fault(tmp_path):
    v = verdict_of_edited(
        "none-mlx5-single-link-flap-recovered-training-continues-e7b23",
        lambda text: "".join(line for line in text.splitlines(keepends=True) if "Link up" not in line),
        tmp_path,
    )
    assert v.category == Category.INTERCONNECT
    assert v.implicated.hosts == ["roce-g03"]
