"""Culprits and causes in forms first met on batch b8's tune excerpts (tests/corpus/real/tune/).

- The kernel's OOM killer on one node of several names that node even when only a syslog header or a launcher
  prefix says which (`Mar 14 02:17:49 ip-10-42-7-16 kernel: Out of memory: Killed process ...`, pdsh's
  `10.8.0.14: [...] oom-kill:...`); a cgroup limit the job set for itself still names none.
- A cloud preemption notice (Azure's Scheduled Events `"EventType":"Preempt"`) from the node Slurm then lost
  (`srun: error: Node failure on HOST`, NODE_FAIL) is a preemption, not a broken node: nothing is excluded.
- One node whose NCCL chose `Using network Socket` while the others chose IB, and the first collective timed out:
  that node's HCA (interconnect), not an unattributed NCCL timeout.
- A stall watchdog's own words ('no progress for 1740 s since step 10870') in a running job are a hang.
- The kernel's network watchdog (mlx5's 'TX timeout detected', NETDEV WATCHDOG) condemns the node's NIC: a soft
  lockup that follows it in the NIC driver's poll loop is the interconnect's, not a node failure.
- A DataLoader worker's IndexError, KeyError or TypeError ('Caught IndexError in DataLoader worker process 3') is the dataset
  code's bug (app_error); its OSError stays data_io.
- Every rank times out on the same all-reduce but one entered it with another size (NumelIn=10 where fifteen
  give 11): that rank took another code path; its node is not blamed.
"""

from __future__ import annotations

import re

from workflows.contracts import Category

from tests.detection.real_cases import verdict_of, verdict_of_edited


def test_kernel_oom_named_only_by_a_syslog_header_blames_that_node():
    """The EC2-style header ip-10-42-7-16 is gpu-a08's hostname in the node map."""
    v = verdict_of("host_oom-syslog-ec2-hostname-f8b01")
    assert v.category == Category.HOST_OOM
    assert v.implicated.hosts == ["gpu-a08"]


def test_kernel_oom_under_a_pdsh_address_prefix_blames_that_node():
    v = verdict_of("host_oom-deepspeed-dmesg-T-pdsh-ip-f8b03")
    assert v.category == Category.HOST_OOM
    assert v.implicated.hosts == ["hpc-n14"]


def test_a_cgroup_limit_in_the_same_kernel_lines_names_no_node(tmp_path):
    """The same excerpt, the kill charged to the job's memory cgroup: the job's own limit, wherever it bit."""
    v = verdict_of_edited("host_oom-deepspeed-dmesg-T-pdsh-ip-f8b03",
                          lambda t: t.replace("Out of memory: Killed process", "Memory cgroup out of memory: Killed process"),
                          tmp_path)
    assert v.category == Category.HOST_OOM
    assert v.implicated.hosts == []


def test_a_cloud_preemption_notice_from_the_lost_node_is_a_preemption():
    v = verdict_of("preempted-azure-spot-scheduled-events-f8b10")
    assert v.category == Category.PREEMPTED
    assert v.implicated.hosts == []


def test_a_preemption_notice_from_another_node_leaves_the_node_failure(tmp_path):
    """The notice printed by ccw-gpu-2 while Slurm lost ccw-gpu-4: that node's failure stands."""
    v = verdict_of_edited("preempted-azure-spot-scheduled-events-f8b10",
                          lambda t: re.sub(r"(?m)^ccw-gpu-4: \[evtmon\]", "ccw-gpu-2: [evtmon]", t), tmp_path)
    assert v.category == Category.NODE_FAILURE
    assert v.implicated.hosts == ["ccw-gpu-4"]


def test_the_one_node_on_the_socket_transport_is_the_interconnect_culprit():
    v = verdict_of("interconnect-hca-not-initialized-ibstatus-f8a10")
    assert v.category == Category.INTERCONNECT
    assert (v.implicated.hosts, v.implicated.ranks) == (["cn045"], [2])


def test_every_node_on_sockets_is_no_culprit(tmp_path):
    """An Ethernet-only cluster: all nodes chose Socket; the timeout names nobody."""
    v = verdict_of_edited("interconnect-hca-not-initialized-ibstatus-f8a10",
                          lambda t: t.replace("Using network IB", "Using network Socket"), tmp_path)
    assert v.category == Category.NCCL_TIMEOUT
    assert v.implicated.hosts == []


def test_a_stall_watchdogs_words_in_a_running_job_are_a_hang():
    v = verdict_of("hang-ray-nccl-coll-opcount-lagging-worker-f8c14")
    assert v.category == Category.HANG


def test_a_stall_warning_that_training_got_over_is_no_hang(tmp_path):
    """Steps grow again after the warning (and past it): the job rode the stall out."""
    def resumed(text: str) -> str:
        head, _, _ = text.partition("$ ray exec")
        later = "".join(
            f"(RayTrainWorker pid=807, ip=10.88.2.14) 2024-04-13 18:2{2 + i}:40,118 INFO step {10871 + i} loss 2.1 "
            f"tokens/s 181000\n" for i in range(4))
        return head + later
    v = verdict_of_edited("hang-ray-nccl-coll-opcount-lagging-worker-f8c14", resumed, tmp_path)
    assert v.category == Category.NONE


def test_a_nic_tx_timeout_condemns_the_nic_over_the_soft_lockup_it_caused():
    v = verdict_of("interconnect-mlx5-tx-timeout-softlockup-f8a07")
    assert v.category == Category.INTERCONNECT
    assert v.implicated.hosts == ["gpu-c15"]


def test_the_soft_lockup_alone_stays_a_node_failure(tmp_path):
    v = verdict_of_edited("interconnect-mlx5-tx-timeout-softlockup-f8a07",
                          lambda t: "\n".join(l for l in t.splitlines() if "TX timeout" not in l) + "\n", tmp_path)
    assert v.category == Category.NODE_FAILURE
    assert v.implicated.hosts == ["gpu-c15"]


def test_the_rank_with_another_input_size_is_the_suspect_and_its_node_is_not_blamed():
    v = verdict_of("nccl_timeout-srun-label-size-mismatch-rank13-f8c03")
    assert v.category == Category.NCCL_TIMEOUT
    assert (v.implicated.hosts, v.implicated.ranks) == ([], [13])


def test_equal_sizes_single_out_no_rank(tmp_path):
    v = verdict_of_edited("nccl_timeout-srun-label-size-mismatch-rank13-f8c03",
                          lambda t: t.replace("NumelIn=10, NumelOut=10", "NumelIn=11, NumelOut=11"), tmp_path)
    assert v.category == Category.NCCL_TIMEOUT
    assert 13 not in v.implicated.ranks


def test_a_dataloader_workers_index_error_is_the_dataset_codes_bug():
    """'Caught IndexError in DataLoader worker process 3': the user's dataset class, not the data's storage."""
    v = verdict_of("app_error-horovod-tag-output-indexerror-rank5-f8c10")
    assert v.category == Category.APP_ERROR
    assert 5 in v.implicated.ranks


def test_a_dataloader_workers_os_error_stays_data_io(tmp_path):
    v = verdict_of_edited("app_error-horovod-tag-output-indexerror-rank5-f8c10",
                          lambda t: t.replace("IndexError: Caught IndexError", "OSError: Caught OSError")
                          .replace("IndexError: list index out of range", "OSError: [Errno 5] Input/output error"),
                          tmp_path)
    assert v.category == Category.DATA_IO
