"""Culprits and causes in forms first met on batch b11's tune excerpts (tests/corpus/real/tune/).

- Ray Train's synchronization actor lists the ranks that reached `ray.train.report` ('{0: 60.03, 1: ...}')
  under 'has not been called by all 16 workers': the ranks missing from it are the ones the others wait for.
- Lightning announces each process as a member of the group ('initializing ddp: GLOBAL_RANK: 5, MEMBER: 6/12');
  a running job where some members never did, and nothing came after, waits for them (their node when they
  are one node's).
- Link errors from several nodes that all name one far end, whose own process failed of something else (a
  CUDA error): that failure is the cause, the links broke because the far end's process exited.
"""

from __future__ import annotations

from workflows.contracts import Category

from tests.detection.real_cases import expect, sidecar, verdict_of_edited


def test_ray_trains_report_barrier_names_the_rank_that_never_reported():
    expect("hang-ray-train-report-barrier-rank11-never-reports-m7a02", Category.HANG, ranks=[11])


def test_a_report_list_with_everyone_names_no_one(tmp_path):
    v = verdict_of_edited("hang-ray-train-report-barrier-rank11-never-reports-m7a02",
                          lambda t: t.replace(", 10: ", ", 11: 1.0, 10: "), tmp_path)
    assert 11 not in v.implicated.ranks


def test_lightning_members_that_never_joined_are_the_hang_and_their_node():
    expect("hang-lightning-ddp-init-third-node-members-never-join-m7a04", Category.HANG, hosts=["dgx-c16"], ranks=[8, 9, 10, 11])


def test_every_member_joined_is_no_hang(tmp_path):
    def all_joined(text: str) -> str:
        extra = "\n".join(f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/12" for r in range(8, 12))
        return text.replace("$ squeue", extra + "\n$ squeue")
    v = verdict_of_edited("hang-lightning-ddp-init-third-node-members-never-join-m7a04", all_joined, tmp_path)
    assert v.category != Category.HANG


def test_a_crash_at_the_far_end_of_every_failed_link_is_the_cause():
    expect("cuda_error-deepspeed-pdsh-cublas-exec-failed-rank21-below-ib-wall-k8a04", Category.CUDA_ERROR, hosts=[])


def test_without_the_far_ends_crash_the_links_are_the_cause(tmp_path):
    v = verdict_of_edited("cuda_error-deepspeed-pdsh-cublas-exec-failed-rank21-below-ib-wall-k8a04",
                          lambda t: "\n".join(l for l in t.splitlines() if "CUBLAS_STATUS" not in l), tmp_path)
    assert v.category != Category.CUDA_ERROR


def test_every_node_of_the_job_reporting_the_same_transport_error_blames_none():
    v = expect("interconnect-mpirun-nccl-tests-ucx-docker0-bridge-addr-refused-m7a09", Category.INTERCONNECT, hosts=[])
    assert "no node is singled out" in v.explanation


def test_one_process_alone_reporting_its_xla_rendezvous_stuck_is_where_the_job_stands_still():
    expect("hang-jax-xla-rendezvous-seven-of-eight-threads-process2-m7a03", Category.HANG, hosts=["a3-pp09"], ranks=[2])


def test_several_processes_reporting_it_single_none_out(tmp_path):
    def two_writers(text: str) -> str:
        lines = text.splitlines()
        out = []
        for l in lines:
            out.append(l)
            if "rendezvous.cc" in l and l.startswith("2: "):
                out.append("1: " + l[3:])
        return "\n".join(out)
    v = verdict_of_edited("hang-jax-xla-rendezvous-seven-of-eight-threads-process2-m7a03", two_writers, tmp_path)
    assert 2 not in v.implicated.ranks


def test_processes_that_would_not_die_after_the_oom_killer_are_a_host_oom():
    expect("host_oom-lightning-srun-dataloader-killed-oom-kill-step-kill-task-failed-k8a06", Category.HOST_OOM, hosts=[])


def test_processes_that_would_not_die_with_no_oom_before_are_the_nodes(tmp_path):
    name = "host_oom-lightning-srun-dataloader-killed-oom-kill-step-kill-task-failed-k8a06"
    side = {**sidecar(name), "job": {**sidecar(name)["job"], "state": "FAILED"}}
    v = verdict_of_edited(name, lambda t: "\n".join(l for l in t.splitlines() if "oom" not in l.lower()
                                                     and "Killed" not in l and "Out Of Memory" not in l),
                          tmp_path, side=side)
    assert v.category == Category.NODE_FAILURE
    assert v.implicated.hosts == ["gn-104"]


def test_the_drivers_xid_bus_id_names_the_gpu_before_a_rank_prefix_guess():
    expect("gpu_hardware-torchtitan-srun-l-nvlink-uncorrectable-rank19-fqdn-summary-xid74-p6a04", Category.GPU_HARDWARE, gpus=["titan-n03:0000:9d:00"])


def test_without_the_xid_lines_the_gpu_is_guessed_from_the_rank(tmp_path):
    v = verdict_of_edited("gpu_hardware-torchtitan-srun-l-nvlink-uncorrectable-rank19-fqdn-summary-xid74-p6a04",
                          lambda t: "\n".join(l for l in t.splitlines() if "NVRM: Xid" not in l), tmp_path)
    assert "titan-n03:0000:9d:00" not in v.implicated.gpus
