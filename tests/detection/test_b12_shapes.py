"""Culprits and causes in forms first met on batch b12's tune excerpts (tests/corpus/real/tune/).

- fairseq's `train_inner` lines are progress (`num_updates=` is the global step): an OOM fairseq recovered
  from, with training going on after it, is survived.
- NCCL's 'comm 0x... rank R nranks N ... commId C - Init START' lines announce the members of a communicator:
  a running job where some ranks never started the init of a communicator no rank finished waits for them.
  Their node is named only when none of its processes joined.
"""

from __future__ import annotations

from activities.detection.progress import parse_progress_line
from workflows.contracts import Category

from tests.detection.real_cases import expect, verdict_of_edited

FAIRSEQ = ("2025-07-28 02:14:24 | INFO | train_inner | epoch 004:   2200 / 6402 loss=4.266, nll_loss=2.598, ppl=6.05, "
           "wps=198640, ups=2.41, wpb=82377.0, bsz=2871.8, num_updates=21399, lr=0.000432279, gnorm=0.318")


def test_fairseq_train_inner_lines_are_progress():
    sample = parse_progress_line(FAIRSEQ)
    assert sample is not None
    assert (sample.iteration, sample.loss, sample.throughput) == (21399, 4.266, 198640.0)


def test_an_oom_fairseq_recovered_from_is_survived():
    expect("none-fairseq-oom-recovered-batch-skipped-continues-h6a14", Category.NONE)


def test_an_oom_with_no_training_after_it_is_not(tmp_path):
    v = verdict_of_edited("none-fairseq-oom-recovered-batch-skipped-continues-h6a14",
                          lambda t: "\n".join(l for l in t.splitlines() if "train_inner" not in l
                                              or "2100 / 6402" in l), tmp_path)
    assert v.category == Category.GPU_OOM


def test_a_rank_that_never_started_the_communicators_init_is_the_hang():
    expect("hang-ray-megatron-actor-weight-sync-rank5-never-inits-t2a08", Category.HANG, hosts=[], ranks=[5])


def test_a_communicator_that_completed_its_init_is_no_hang(tmp_path):
    v = verdict_of_edited("hang-ray-megatron-actor-weight-sync-rank5-never-inits-t2a08",
                          lambda t: t.replace("$ ray list actors", "(MegatronActor pid=30411, ip=10.128.4.11) rlhf-w0:"
                                              "30411:31907 [0] NCCL INFO comm 0x7f76cba0 rank 0 nranks 8 cudaDev 0 "
                                              "nvmlDev 0 busId 18000 commId 0x9e41c07d2b5a18f3 - Init COMPLETE\n"
                                              "$ ray list actors"), tmp_path)
    assert 5 not in v.implicated.ranks


def test_a_cudnn_status_error_is_a_cuda_error():
    expect("cuda_error-cudnn-status-not-supported-d2-spawn-process1-u4a11", Category.CUDA_ERROR, ranks=[1])


def test_nccls_socket_message_truncated_is_an_nccl_error_not_the_app():
    expect("nccl_error-socket-message-truncated-buffsize-mismatch-horovod-n5a12", Category.NCCL_ERROR, hosts=[])


def test_nvidia_smi_showing_hw_thermal_slowdown_active_names_that_node_and_gpu():
    expect("gpu_hardware-hw-thermal-slowdown-straggler-rank22-megatron-submitit-u4a08", Category.GPU_HARDWARE, hosts=["h100-b08"], gpus=["h100-b08:0000:ba:00"])


def test_hw_slowdown_not_active_is_nothing(tmp_path):
    v = verdict_of_edited("gpu_hardware-hw-thermal-slowdown-straggler-rank22-megatron-submitit-u4a08",
                          lambda t: t.replace("Slowdown           : Active", "Slowdown           : Not Active")
                          .replace("HW Slowdown                       : Active", "HW Slowdown                       : Not Active"),
                          tmp_path)
    assert v.category != Category.GPU_HARDWARE
