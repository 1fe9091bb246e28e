"""Culprits and causes in forms first met on batch b13's tune excerpts (tests/corpus/real/tune/).

- OpenMMLab's mmengine lines (`Iter(train) [ 20/400000]`, `Epoch(train) [3][ 50/1173]`) are progress; a bar that
  starts again each epoch is training going on, so an error a running job trained on after is survived.
- gdb / cuda-gdb attached to two processes of a job that was then cancelled, with an NCCL kernel still active
  and no progress after: the job hung and someone cancelled it.
- Gloo's `Connect timeout [ADDR]:PORT` is a transport failure naming its peer, not an application error.
- An abort after a collective timed out (`Fatal Python error: Aborted`) is the watchdog taking the process
  down; PyTorch 2.5's 'Received a dump signal ... Last enqueued NCCL work: N' says which rank is behind.
- A store-based barrier that timed out names the ranks that never said 'Added key ... for rank: R'.
- HPE PALS' 'ping failed on A: No reply from B after Ns' is node B lost.
- srun's 'task N: Killed' after another task exited with an error is srun ending the step, not the OOM killer;
  NCCL sockets closed from one node's end point at that node.
"""

from __future__ import annotations

from activities.detection.progress import parse_progress_line
from workflows.contracts import Category

from tests.detection.real_cases import expect, sidecar, verdict_of, verdict_of_edited

MM_ITER = ("02/14 10:21:44 - mmengine - INFO - Iter(train) [    20/400000]  lr: 1.0000e-04  eta: 31 days, 8:02:13  "
           "time: 2.4917  data_time: 0.0143  memory: 21087  loss: 0.7735")
MM_EPOCH = ("2023/01/01 12:00:00 - mmengine - INFO - Epoch(train)  [3][ 50/1173]  lr: 1e-3  eta: 1:00:00  "
            "time: 0.4312  data_time: 0.01  memory: 100  loss: 1.2034  loss_cls: 0.5")


def test_mmengine_lines_are_progress_counted_over_epochs():
    it = parse_progress_line(MM_ITER)
    assert it is not None and (it.iteration, it.loss, it.iter_time_s) == (20, 0.7735, 2.4917)
    ep = parse_progress_line(MM_EPOCH)
    assert ep is not None and ep.iteration == 2 * 1173 + 50
    assert parse_progress_line("Epoch(val) [3][ 50/100]  eta: 0:00:10") is None


def test_an_error_an_mmengine_job_trained_on_after_is_survived():
    expect("none-dynamo-wont-convert-rlock-suppressed-ddp-trains-on-t4a14", Category.NONE)


def test_an_oom_in_a_batch_size_search_with_epochs_after_it_is_survived():
    """YOLOv5's bar starts again each epoch (3627/3627, then 1342/3627): still training."""
    expect("none-yolov5-autobatch-oom-while-profiling-then-trains-t4a15", Category.NONE)


def test_without_the_epochs_after_it_the_oom_is_not(tmp_path):
    v = verdict_of_edited("none-yolov5-autobatch-oom-while-profiling-then-trains-t4a15",
                          lambda t: t.split("Starting training")[0], tmp_path)
    assert v.category == Category.GPU_OOM


def test_gdb_dumps_of_two_processes_before_a_cancel_are_a_hang():
    expect("hang-megatron-gdb-two-ranks-memcpy-sync-behind-nccl-kernel-cancelled-q1a03", Category.HANG,
           hosts=[], ranks=[])


def test_with_progress_after_the_dumps_the_cancel_is_nothing_of_ours(tmp_path):
    progress = (" [2024-08-14 22:40:41] iteration     {it}/   20000 | consumed samples:       343040 | elapsed time "
                "per iteration (ms): 2188.9 | lm loss: 2.738812E+00 |\n")
    v = verdict_of_edited(
        "hang-megatron-gdb-two-ranks-memcpy-sync-behind-nccl-kernel-cancelled-q1a03",
        lambda t: t.replace("$ scancel", progress.format(it=1350) + progress.format(it=1360) + "$ scancel"),
        tmp_path)
    assert v.category != Category.HANG


def test_a_gloo_connect_timeout_to_one_address_with_its_port_down_is_that_nodes_link():
    expect("interconnect-megatron-gloo-connect-timeout-ipoib-peer-ibstat-down-r2a07", Category.INTERCONNECT,
           hosts=["mg-n14"])


def test_the_watchdogs_abort_is_not_the_cause_and_the_rank_behind_is_named():
    expect("nccl_timeout-torchtitan-faulthandler-abort-rank3-last-enqueued-behind-q1a12", Category.NCCL_TIMEOUT,
           ranks=[3])


def test_an_abort_before_any_timeout_is_still_the_crash(tmp_path):
    """The same abort with the watchdog's lines taken out: nothing timed out before it, so it is the crash."""
    v = verdict_of_edited("nccl_timeout-torchtitan-faulthandler-abort-rank3-last-enqueued-behind-q1a12",
                          lambda t: "".join(l for l in t.splitlines(keepends=True) if "ProcessGroupNCCL" not in l),
                          tmp_path)
    assert v.category == Category.APP_ERROR


def test_a_store_barrier_names_the_rank_that_never_added_its_key():
    expect("hang-metaseq-store-barrier-15-of-16-rank8-never-added-key-q1a07", Category.HANG, ranks=[8])


def test_pals_ping_without_reply_is_the_silent_node():
    expect("node_failure-pals-ping-no-reply-fqdn-pbsnodes-hbm-s3a01", Category.NODE_FAILURE,
           hosts=["x2203c4s3b0n0"])


def test_srun_killing_the_rest_is_no_oom_and_the_far_end_of_the_closed_sockets_is_named():
    expect("nccl_error-socket-broken-pipe-two-nodes-same-peer-ip-llamafactory-r2a08", Category.NCCL_ERROR,
           hosts=["lf-g03"])


def test_a_killed_task_before_any_other_exit_is_still_the_oom_killers(tmp_path):
    def kill_first(text: str) -> str:
        lines = text.splitlines(keepends=True)
        killed = [l for l in lines if "task 2: Killed" in l]
        rest = [l for l in lines if "task 2: Killed" not in l]
        at = next(i for i, l in enumerate(rest) if "Exited with exit code" in l)
        return "".join(rest[:at] + killed + rest[at:])

    v = verdict_of_edited("nccl_error-socket-broken-pipe-two-nodes-same-peer-ip-llamafactory-r2a08", kill_first,
                          tmp_path)
    assert v.category == Category.HOST_OOM


def test_the_log_alone_sees_training_go_on_after_an_error_too():
    """`jobmedic analyze FILE` has no job state: three growing progress lines after the error still say so."""
    assert verdict_of("none-yolov5-autobatch-oom-while-profiling-then-trains-t4a15", log_only=True).category == (
        Category.NONE)
    assert verdict_of("none-mlx5-single-link-flap-recovered-training-continues-e7b23", log_only=True).category == (
        Category.NONE)


def test_the_log_alone_keeps_a_failure_whose_output_ends_in_a_death_report():
    """Progress after the OOM line on other ranks, but torchrun's failure summary and srun's exit codes end it."""
    assert verdict_of("gpu_oom-accelerate-host-localrank-prefix-f8c09", log_only=True).category == Category.GPU_OOM


def test_an_exception_python_ignored_does_not_end_the_job():
    """'Exception ignored in: <function ...__del__>' / 'Error in atexit._run_exitfuncs:' above a traceback: the
    interpreter printed it and went on, so the log alone does not call the finished run a failure."""
    for name in ("none-dataloader-del-assertion-at-end-completed-g9a12",
                 "none-swift-sft-atexit-tracker-traceback-f8c06"):
        assert verdict_of(name, log_only=True).category == Category.NONE, name


def test_the_same_traceback_without_the_ignored_line_is_the_crash(tmp_path):
    v = verdict_of_edited("none-dataloader-del-assertion-at-end-completed-g9a12",
                          lambda t: t.replace("Exception ignored in: ", "Called: ").rsplit("100%|", 1)[0], tmp_path,
                          side={**sidecar("none-dataloader-del-assertion-at-end-completed-g9a12"), "job": None})
    assert v.category == Category.APP_ERROR


def test_the_log_alone_ending_in_the_runs_own_success_word_is_fine():
    """torchelastic's 'worker group successfully finished' / 'SUCCEEDED', Lightning's fit reaching max_epochs,
    a pytest summary with nothing failed: as good as Slurm's COMPLETED when `analyze` has only the file."""
    for name in ("none-torchelastic-restart-after-peer-reset-recovered-e5a44",
                 "none-torchelastic-dataloader-reset-restart-completed-v9a03",
                 "none-pytest-killed-worker-fault-injection-passed-z4a15"):
        assert verdict_of(name, log_only=True).category == Category.NONE, name


def test_a_failure_report_after_the_success_word_still_counts(tmp_path):
    name = "none-torchelastic-restart-after-peer-reset-recovered-e5a44"
    v = verdict_of_edited(name, lambda t: t + "srun: error: pt-n02: task 1: Exited with exit code 1\n"
                          "Fatal Python error: Segmentation fault\n", tmp_path, side={**sidecar(name), "job": None})
    assert v.category != Category.NONE
