"""Culprits and causes in forms first met on batch b10's tune excerpts (tests/corpus/real/tune/).

- A barrier that timed out names who never arrived: PyTorch's monitored barrier ('Rank 11 failed to pass
  monitoredBarrier'), JAX's coordination service ('Barrier timed out ... Timed out task names:' and the
  '/job:jax_worker/replica:0/task:N' lines below it). That is a hang of those ranks, on their node; the
  exceptions the waiting ranks raise about it ('successfully reached monitoredBarrier, but received errors',
  'DEADLINE_EXCEEDED: Barrier timed out') are its victims, not application bugs.
- py-spy dumps collected through pdsh carry their node in the prefix: 'gpu-c12: Process 30918: ...
  --local_rank=1' is local rank 1 of gpu-c12, a global rank through the layout.
"""

from __future__ import annotations

import json
from pathlib import Path

from workflows.contracts import Category

from tests.detection.real_cases import expect, BENCH, CATALOGUE, verdict_of_edited


def test_a_monitored_barrier_names_the_stuck_rank_and_the_victims_exceptions_are_not_bugs():
    expect("hang-gloo-monitored-barrier-rank11-victims-blame-rank0-x2a04", Category.HANG, hosts=["mb-02"], ranks=[11])


def test_without_the_barrier_report_the_rank_is_not_named(tmp_path):
    def no_report(text: str) -> str:
        return "\n".join(l for l in text.splitlines() if "failed to pass monitoredBarrier" not in l)
    v = verdict_of_edited("hang-gloo-monitored-barrier-rank11-victims-blame-rank0-x2a04", no_report, tmp_path)
    assert 11 not in v.implicated.ranks
    assert "mb-02" not in v.implicated.hosts


def test_a_jax_barrier_timeout_names_the_task_listed_below_it():
    expect("hang-jax-coordination-barrier-timed-out-task2-x2a02", Category.HANG, hosts=["jx-g03"], ranks=[2])


def test_a_jax_barrier_task_list_is_read_only_right_below_the_timeout(tmp_path):
    # the same task line far from any barrier timeout says nothing about who is stuck
    def moved(text: str) -> str:
        lines = [l for l in text.splitlines() if "/task:2" not in l]
        return "\n".join(lines[:3] + ["0: /job:jax_worker/replica:0/task:2"] + lines[3:])
    v = verdict_of_edited("hang-jax-coordination-barrier-timed-out-task2-x2a02", moved, tmp_path)
    assert 2 not in v.implicated.ranks


def test_a_watchdog_timeout_beside_a_monitored_barrier_takes_its_suspect():
    # a generated-corpus shape (code paths, not accuracy): NCCL timeouts on every rank and a barrier naming rank 13
    case = Path(__file__).resolve().parents[1] / "corpus" / "tuning" / "nccl_timeout_03"
    side = json.loads(case.with_suffix(".expected.json").read_text())
    v = BENCH.run_case(case.with_suffix(".log"), side, catalogue=CATALOGUE)
    assert v.category == Category.NCCL_TIMEOUT
    assert v.implicated.hosts == ["gpu-a100-004"]


def test_pdsh_prefixed_py_spy_dumps_are_the_prefix_nodes_processes():
    expect("hang-pyspy-deepspeed-init-rank5-stuck-in-to-device-x2a03", Category.HANG, hosts=["gpu-c12"], ranks=[5])


def test_without_the_prefix_the_local_rank_is_not_placed(tmp_path):
    v = verdict_of_edited("hang-pyspy-deepspeed-init-rank5-stuck-in-to-device-x2a03",
                          lambda t: "\n".join(l.split(": ", 1)[1] if l.startswith("gpu-c1") else l
                                              for l in t.splitlines()), tmp_path)
    assert "gpu-c12" not in v.implicated.hosts


def test_srun_says_where_a_task_ran_whatever_the_layout_arithmetic():
    # 'srun -l' task 2 runs torchrun on the third node; the layout is given in ranks (8 a node), so task 2 by
    # arithmetic would be the first node: srun's own 'ndv4-0007: task 2: Exited' line says otherwise
    expect("gpu_hardware-nvlink-s-inactive-links-megatron-srun-w1a02", Category.GPU_HARDWARE, hosts=["ndv4-0007"])


def test_without_srun_task_lines_the_layout_places_the_task(tmp_path):
    v = verdict_of_edited("gpu_hardware-nvlink-s-inactive-links-megatron-srun-w1a02",
                          lambda t: "\n".join(l for l in t.splitlines() if not l.startswith("srun: error:")), tmp_path)
    assert v.implicated.hosts != ["ndv4-0007"]


def test_kubernetes_losing_a_node_is_a_node_failure_on_the_node_described():
    expect("node_failure-k8s-kubelet-stopped-posting-pytorchjob-w1a11", Category.NODE_FAILURE, hosts=["gpu-node-07"])


def test_a_pod_name_beside_the_node_it_ran_on_is_not_blamed():
    expect("node_failure-aks-vmss-node-rebooted-mpijob-horovod-w1a12", Category.NODE_FAILURE, hosts=["aks-ndv5-31662058-vmss000004"])


def test_one_node_alone_failing_its_efa_event_queue_is_that_nodes_fabric():
    expect("interconnect-efa-rxr-eq-enomem-one-instance-memlock-srun-y3a04", Category.INTERCONNECT, hosts=["ip-10-1-7-88"])


def test_torch_multiprocessing_spawn_names_the_process_that_failed():
    expect("cuda_error-mp-spawn-cublas-execution-failed-process1-z4a08", Category.CUDA_ERROR, ranks=[1])


def test_without_spawns_report_no_rank_is_taken_from_it(tmp_path):
    v = verdict_of_edited("cuda_error-mp-spawn-cublas-execution-failed-process1-z4a08",
                          lambda t: t.replace("-- Process 1 terminated", "-- A process terminated"), tmp_path)
    assert 1 not in v.implicated.ranks


def test_p2p_disabled_between_nvlink_connected_gpus_is_hardware_not_a_benign_p2p_note():
    expect("gpu_hardware-nccl-p2p-disabled-nvlink-pair-torchrun-w1a01", Category.GPU_HARDWARE, hosts=["gpu-b07"])


def test_p2p_disabled_for_another_reason_stays_benign(tmp_path):
    v = verdict_of_edited("gpu_hardware-nccl-p2p-disabled-nvlink-pair-torchrun-w1a01",
                          lambda t: t.replace("P2P is disabled between NVLINK connected GPUs 1 and 0",
                                              "P2P is disabled by NCCL_P2P_DISABLE for GPUs 1 and 0"), tmp_path)
    assert v.category != Category.GPU_HARDWARE


def test_stack_dumps_of_a_running_job_with_no_progress_after_them_are_a_hang():
    expect("hang-pyspy-stage3-partition-grads-all-i3h05", Category.HANG)


def test_stack_dumps_followed_by_progress_are_not(tmp_path):
    def progress_after(text: str) -> str:
        steps = [f"[2024-09-18 14:0{5 + i}:11,805] [INFO] [logging.py:96:log_dist] [Rank 0] step={3811 + i}, skipped=0, "
                 "lr=[1.93e-05], mom=[(0.9, 0.999)]" for i in range(3)]
        return text.rstrip("\n") + "\n" + "\n".join(steps) + "\n"
    v = verdict_of_edited("hang-pyspy-stage3-partition-grads-all-i3h05", progress_after, tmp_path)
    assert v.category != Category.HANG
