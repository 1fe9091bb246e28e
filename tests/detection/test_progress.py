"""Progress and checkpoint lines of each framework parse into the right numbers."""

from __future__ import annotations

import pytest

from activities.detection.progress import (
    ProgressSample,
    clean_line,
    latest_progress,
    parse_checkpoint_line,
    parse_progress_line,
)

# line -> (source, iteration, loss, throughput, iter_time_s)
PROGRESS_CASES = [
    (
        " iteration      100/   10000 | consumed samples:        51200 | elapsed time per iteration (ms): 512.3 | "
        "learning rate: 1.500E-04 | global batch size:   512 | lm loss: 6.100000E+00 | loss scale: 1.0 | "
        "grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |",
        ("megatron", 100, 6.1, None, 0.5123),
    ),
    (
        "[2024-05-01 12:00:00] iteration      200/  500000 | consumed samples:       102400 | elapsed time per "
        "iteration (ms): 498.1 | throughput per GPU (TFLOP/s/GPU): 401.2 | learning rate: 3.0E-04 | lm loss: 5.912E+00 |",
        ("megatron", 200, 5.912, 401.2, 0.4981),
    ),
    ("{'loss': 2.31, 'grad_norm': 1.05, 'learning_rate': 4.9e-05, 'epoch': 0.5}", ("hf", None, 2.31, None, None)),
    (
        "{'train_runtime': 1234.5, 'train_samples_per_second': 45.6, 'train_steps_per_second': 1.4, 'train_loss': 2.1, 'epoch': 3.0}",
        ("hf", None, 2.1, 45.6, None),
    ),
    ("  5%|▌         | 50/1000 [00:10<03:10,  5.00it/s]", ("tqdm", 50, None, 5.0, 0.2)),
    (" 12%|█▏        | 120/1000 [01:00<07:20,  2.00s/it]", ("tqdm", 120, None, 0.5, 2.0)),
    ("100it [00:10, 10.00it/s]", ("tqdm", 100, None, 10.0, 0.1)),
    (
        "Epoch 0:  45%|████▌     | 450/1000 [01:23<01:42,  5.38it/s, v_num=0, train_loss=2.310]",
        ("lightning", 450, 2.31, 5.38, 1 / 5.38),
    ),
    (  # epoch 2 of a 1000-batch epoch: the iteration keeps counting
        "Epoch 2:  10%|█         | 100/1000 [00:20<03:00,  5.00it/s, v_num=3, train_loss_step=1.90]",
        ("lightning", 2100, 1.9, 5.0, 0.2),
    ),
    (
        "Epoch 0: :  45%|████▌     | 450/1000 [01:23<01:42, reduced_train_loss=6.1, global_step=449.0, "
        "consumed_samples=230400.0, train_step_timing in s=0.512]",
        ("lightning", 449, 6.1, None, 0.512),
    ),
    (
        "Epoch 1/9 ━━━━━━━━━━━━━━ 450/1000 0:01:23 • 0:01:42 5.38it/s v_num: 0 train_loss: 2.310",
        ("lightning", 1450, 2.31, 5.38, 1 / 5.38),
    ),
    (
        "[2024-05-01 12:00:01,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=100, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]",
        ("deepspeed", 100, None, None, None),
    ),
    (
        "[2024-05-01 12:00:01,123] [INFO] [timer.py:260:stop] epoch=0/micro_step=200/global_step=100, "
        "RunningAvgSamplesPerSec=45.6, CurrSamplesPerSec=46.1, MemAllocated=12.3GB",
        ("deepspeed", 100, None, 46.1, None),
    ),
    (
        "[titan] 2024-05-01 12:00:00,000 - root - INFO - step: 10  loss:  9.4212  memory: 12.30GiB(15.60%)  "
        "tps: 1,234  tflops: 45.60  mfu: 12.30%",
        ("torchtitan", 10, 9.4212, 1234.0, None),
    ),
    (
        "\x1b[31mstep: 20  \x1b[32mloss:  8.1000  \x1b[33mmemory: 12.30GiB(15.60%)  \x1b[34mtps: 2,345\x1b[39m",
        ("torchtitan", 20, 8.1, 2345.0, None),
    ),
    ("step 100 | loss 2.345 | 1200.5 tokens/s", ("plain", 100, 2.345, 1200.5, None)),
    ("Step 100/1000, loss: 2.3, step_time: 250 ms", ("plain", 100, 2.3, None, 0.25)),
    ("0: [rank0]: global_step 42 loss=1.5", ("plain", 42, 1.5, None, None)),
    # a tqdm bar redrawn with \r: the last drawing counts
    ("  1%|  | 10/1000 [00:02<03:00, 5.00it/s]\r  2%|  | 20/1000 [00:04<03:00, 5.10it/s]\r", ("tqdm", 20, None, 5.1, 1 / 5.1)),
]

NOT_PROGRESS = [
    "Traceback (most recent call last):",
    "optimizer.step() failed",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "node1:12:13 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    "",
    "\x00\x00\x00",
]


@pytest.mark.parametrize(("line", "expected"), PROGRESS_CASES, ids=[c[1][0] + str(i) for i, c in enumerate(PROGRESS_CASES)])
def test_progress_line(line: str, expected: tuple) -> None:
    source, iteration, loss, throughput, iter_time = expected
    sample = parse_progress_line(line, line_no=7)
    assert sample is not None
    assert (sample.source, sample.iteration, sample.line_no) == (source, iteration, 7)
    assert sample.loss == (pytest.approx(loss) if loss is not None else None)
    assert sample.throughput == (pytest.approx(throughput) if throughput is not None else None)
    assert sample.iter_time_s == (pytest.approx(iter_time) if iter_time is not None else None)
    assert not sample.checkpoint


@pytest.mark.parametrize("line", NOT_PROGRESS)
def test_not_progress(line: str) -> None:
    assert parse_progress_line(line) is None


CHECKPOINT_CASES = [
    ("  successfully saved checkpoint from iteration     200 to /ckpt [ t 1/8, p 1/1 ]", 200),
    ("saved checkpoint at iteration 300", 300),
    ("Saving model checkpoint to /out/checkpoint-500", 500),
    ("[Rank 0] Saving model checkpoint: /ckpt/global_step100/mp_rank_00_model_states.pt", 100),
    ("[Torch] Checkpoint global_step100 is ready now!", 100),
    ("Epoch 0, global step 500: 'val_loss' reached 0.12345 (best 0.12345), saving model to '/ckpt/epoch=0-step=500.ckpt' as top 1", 500),
    ("[titan] Finished saving the checkpoint (or staging if async is enabled)in 3.21 seconds.", None),
    ("Async checkpoint save for step 700 (/ckpt/step=700.ckpt) finalized successfully.", 700),
]

NOT_A_SAVE = [
    "Failed to save checkpoint at iteration 200",
    "loading checkpoint from iteration 200",
    "saving checkpoint at iteration     200 to /ckpt",  # started, not finished (Megatron logs both)
    "Epoch 1, global step 1000: 'val_loss' was not in top 1",
    "RuntimeError: Error(s) in loading state_dict: checkpoint saved with a different model",
]


@pytest.mark.parametrize(("line", "iteration"), CHECKPOINT_CASES)
def test_checkpoint_line(line: str, iteration: int | None) -> None:
    sample = parse_checkpoint_line(line, line_no=3)
    assert sample is not None and sample.checkpoint
    assert (sample.checkpoint_iteration, sample.line_no) == (iteration, 3)


@pytest.mark.parametrize("line", NOT_A_SAVE)
def test_not_a_checkpoint_save(line: str) -> None:
    assert parse_checkpoint_line(line) is None


def test_latest_progress_takes_each_field_from_the_newest_sample_that_has_it() -> None:
    samples = [
        ProgressSample(iteration=10, throughput=5.0, iter_time_s=0.2),
        ProgressSample(loss=2.5),  # an HF dict line: loss only
        ProgressSample(checkpoint=True, checkpoint_iteration=10),
        ProgressSample(iteration=20, throughput=4.0),
    ]
    progress = latest_progress(samples)
    assert (progress.iteration, progress.loss, progress.throughput, progress.iter_time_s) == (20, 2.5, 4.0, 0.2)
    assert progress.checkpoint_iteration == 10
    assert latest_progress([]).iteration is None


def test_rate_prefers_logged_throughput() -> None:
    assert ProgressSample(throughput=3.0, iter_time_s=0.5).rate == 3.0
    assert ProgressSample(iter_time_s=0.5).rate == 2.0
    assert ProgressSample().rate is None


def test_clean_line_bounds_work_on_huge_lines() -> None:
    text = clean_line("x" * 1_000_000 + " step 5 loss 1.0")
    assert len(text) <= 4096 and text.endswith("step 5 loss 1.0")
    assert parse_progress_line("x" * 1_000_000 + " step 5 loss 1.0").iteration == 5
