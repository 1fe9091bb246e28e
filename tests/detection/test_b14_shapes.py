"""Culprits and causes in forms first met on batch b14's tune excerpts (tests/corpus/real/tune/).

- A job that ran out of time after someone dumped the stacks of two or more of its processes (py-spy), with no
  progress after the dumps, hung; XLA's older 'This thread has been waiting for 5000ms for and may be stuck'
  is the same rendezvous warning as the newer one.
- sysfs port state ('/sys/class/infiniband/mlx5_4/ports/1/state:1: DOWN') and mlx5's 'Port: 1 Link DOWN' are a
  port down on the node that printed them.
- slurmstepd's 'CANCELLED ... DUE TO NODE FAILURE' comes from the batch host; a launcher that names the node it
  lost (Open MPI's 'Remote daemon: ... on node X') says which node failed.
- `ssh NODE df -h PATH` showing a node-local device full names that node for 'No space left on device'.
- A job cancelled after its output stood still for half an hour hung; the `srun -l` task that went quiet first
  is where.
"""

from __future__ import annotations

from workflows.contracts import Category

from tests.detection.real_cases import expect, verdict_of_edited


def test_stack_dumps_then_the_time_limit_is_a_hang():
    expect("hang-deepspeed-zero3-save-pyspy-all-ranks-same-gather-a1b02", Category.HANG)


def test_without_the_dumps_it_is_the_time_limit(tmp_path):
    v = verdict_of_edited("hang-deepspeed-zero3-save-pyspy-all-ranks-same-gather-a1b02",
                          lambda t: "".join(l for l in t.splitlines(keepends=True)
                                            if "Process " not in l and "Thread " not in l), tmp_path)
    assert v.category == Category.TIME_LIMIT


def test_the_older_xla_rendezvous_warning_names_the_waiting_process():
    expect("hang-jax-xla-rendezvous-ordinal2-missing-process1-a1b07", Category.HANG, ranks=[1])


def test_sysfs_port_state_down_names_the_node():
    expect("interconnect-srun-nccl-init-hang-vf-port-down-perfquery-b2b02", Category.INTERCONNECT,
           hosts=["vm-h200-032"])


def test_the_node_the_launcher_lost_beats_the_batch_hosts_notice():
    expect("node_failure-ompi5-prterun-lost-remote-daemon-node-failure-c3b11", Category.NODE_FAILURE,
           hosts=["cn-g104"])


def test_df_on_the_node_names_the_full_local_disk():
    expect("data_io-hf-trainer-srun-l-enospc-node-local-cache-tr-n03-d4b12", Category.DATA_IO, hosts=["tr-n03"])


def test_without_df_a_full_disk_names_no_node(tmp_path):
    v = verdict_of_edited("data_io-hf-trainer-srun-l-enospc-node-local-cache-tr-n03-d4b12",
                          lambda t: t.split("$ ssh tr-n03 df")[0], tmp_path)
    assert v.category == Category.DATA_IO
    assert v.implicated.hosts == []


def test_a_job_cancelled_after_half_an_hour_of_silence_hung_where_a_task_went_quiet_first():
    expect("hang-torchtitan-node2-ranks-never-past-dataset-prep-a1b04", Category.HANG, hosts=["gh-n023"],
           ranks=list(range(16, 24)))


def test_a_cancel_soon_after_the_last_line_is_no_hang(tmp_path):
    v = verdict_of_edited("hang-torchtitan-node2-ranks-never-past-dataset-prep-a1b04",
                          lambda t: t.replace("CANCELLED AT 2025-06-12T11:09:02", "CANCELLED AT 2025-06-12T10:24:02"),
                          tmp_path)
    assert v.category != Category.HANG
