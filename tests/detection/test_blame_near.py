"""Broad blame rules (issue 7, round 3), on real-format tune excerpts (tests/corpus/real/tune/).

- A node-local cause whose failing lines, or the lines of the same message, name exactly one of the
  job's nodes in their text (not in a launcher prefix: that is the line's writer) blames that node.
- On a blamed node running one process per GPU, the one failed rank's local rank is its GPU.
"""

from __future__ import annotations


from workflows.contracts import Category

from tests.detection.real_cases import verdict_of



def test_ray_actor_dead_block_names_the_dead_node_by_address_not_the_reporting_raylet():
    """'The actor is dead because its node has died' with 'ip: 10.72.56.3' in the same error block;
    the raylet that reports the failure ('(raylet, ip=10.72.56.4)' prefix) is a survivor."""
    v = verdict_of("node_failure-ray-actor-dead-node-died-by-ip-q9n02")
    assert v.category == Category.NODE_FAILURE
    assert v.implicated.hosts == ["ray-w3"]
    assert "ray-w3" in v.explanation


def test_host_oom_is_not_blamed_on_the_node_its_message_names():
    """The raylet names the node under memory pressure; a job that outgrows a node's memory is the job's."""
    v = verdict_of("host_oom-ray-raylet-memory-pressure-s4c21")
    assert v.category == Category.HOST_OOM
    assert v.implicated.hosts == []


def test_failed_rank_on_a_one_process_per_gpu_node_names_its_gpu():
    """'[rank1]: ... uncorrectable ECC error' on a two-GPU node: rank 1 runs on GPU 1."""
    v = verdict_of("gpu_hardware-accelerate-rank1-ecc-set-device-b6a05")
    assert v.category == Category.GPU_HARDWARE
    assert v.implicated.hosts == ["a100x2-lab"] and v.implicated.ranks == [1]
    assert v.implicated.gpus == ["a100x2-lab:1"]


def test_second_node_rank_maps_to_its_local_gpu():
    """Rank 11 of ip-10-0-12-[6-7]:8 is local rank 3 of the second node."""
    v = verdict_of("gpu_hardware-ecc-rank11-elastic-summary-ec2-fqdn-r4g04")
    assert v.implicated.hosts == ["ip-10-0-12-7"] and v.implicated.ranks == [11]
    assert v.implicated.gpus == ["ip-10-0-12-7:3"]


def test_a_command_naming_one_job_node_makes_its_output_that_nodes():
    """'$ kubectl describe node gke-...-q2mx | grep -A12 Conditions' then 'XidCriticalError True ...':
    the condition is that node's, though the pod listing above names both of the job's nodes."""
    v = verdict_of("gpu_hardware-gke-xidcriticalerror-condition-g2a16")
    assert v.category == Category.GPU_HARDWARE
    assert v.implicated.hosts == ["gke-trn-a3-pool-5f1c02ab-q2mx"]


def test_a_collective_timeout_in_a_job_still_running_is_a_hang():
    """A desync report on a job Slurm shows RUNNING: the watchdog did not end it, the job hangs,
    and the rank that never joined is the one it waits for."""
    v = verdict_of("hang-desync-report-rank13-multinode-i3h08")
    assert v.category == Category.HANG
    assert 13 in v.implicated.ranks


def test_a_collective_timeout_that_ended_the_job_stays_a_timeout():
    v = verdict_of("nccl_timeout-old-watchdog-allreduce-n1a01")
    assert v.category == Category.NCCL_TIMEOUT
