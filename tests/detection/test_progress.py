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


# --------------------------------------------------------------------------- generic progress: learned templates

from activities.detection.progress import (  # noqa: E402
    MAX_TEMPLATES,
    LearnedProgress,
    learn_progress,
    line_template,
    user_progress,
)

# line -> (progress numbers, totals); None: no number in a progress position
TEMPLATE_CASES = [
    ("[trainer] step 12 loss 2.31", ([12], [0])),
    ("2026-01-01 12:00:01 worker0 | iter: 7/500 | loss=0.3", ([7], [500])),
    ("Epoch [3/10] Batch 12", ([3, 12], [10, 0])),
    ("[12/500] loss=0.3 lr=1e-4", ([12], [500])),
    ("37%|███▋      | 37/100 [00:10<00:19, 3.2it/s]", ([37], [100])),
    ("100it [00:10, 10.00it/s]", ([100], [0])),
    ("samples: 1200 tokens 5", ([1200], [0])),
    ("processing batch 4 of 9", ([4], [9])),
    ("12:00:01 heartbeat ok 3", None),  # numbers, but none in a progress position
    ("GPU 3/8 ready", None),  # a fraction with no bracket, no bar, no progress word
    ("date 12/05/2026", None),
    ("", None),
]


@pytest.mark.parametrize(("line", "expected"), TEMPLATE_CASES)
def test_line_template_finds_numbers_in_progress_positions(line: str, expected) -> None:
    parsed = line_template(line)
    assert (parsed[1:] if parsed else None) == expected


def test_template_masks_numbers_and_the_bar() -> None:
    a = line_template("  5%|▌         | 5/100 [00:01<00:19, 5.0it/s]")
    b = line_template(" 37%|███▋      | 37/100 [00:10<00:19, 3.2it/s]")
    assert a is not None and b is not None and a[0] == b[0]
    assert line_template("2026-01-01 12:00:01 step 5 loss 2.3")[0] == line_template("2026-01-02 13:10:11 step 6 loss 1.9")[0]


def _learn(lines: list[str], state: LearnedProgress | None = None):
    """Feed lines one batch each; the samples that came out (None where none did)."""
    state = state or LearnedProgress()
    out = []
    for i, line in enumerate(lines):
        state, sample = learn_progress(state, [line], first_line_no=i + 1)
        out.append(sample)
    return state, out


# lines (one batch each) -> indexes of the lines that are progress
LEARN_CASES = [
    ([f"[trainer] batch {i} of 100 done" for i in (1, 2, 3, 4)], [2, 3]),  # learned at the third line
    (["[trainer] step 5 loss 2.0"], []),  # one line mentioning a step is no progress signal
    (["step 5 waiting for rank 3"] * 6, []),  # the same number again and again: a stuck rank, not progress
    (["step 3 x", "step 2 x", "step 4 x", "step 5 x"], [3]),  # a drop before learning starts the count again
    ([f" {p}%|#   | {p}/100 [00:0{p % 10}<00:01, 3.0it/s]" for p in (10, 20, 30, 40)], [2, 3]),  # tqdm bar
    (["epoch 1 step 9", "epoch 1 step 10", "epoch 2 step 1", "epoch 2 step 2"], [2, 3]),  # (epoch, step) grows
    ([f"12:00:0{i} heartbeat {i}" for i in range(6)], []),  # growing numbers outside progress positions
]


@pytest.mark.parametrize(("lines", "progress_at"), LEARN_CASES)
def test_learn_progress_table(lines: list[str], progress_at: list[int]) -> None:
    state, samples = _learn(lines)
    assert [i for i, s in enumerate(samples) if s is not None] == progress_at
    assert state.learned is bool(progress_at)


def test_a_learned_template_counts_a_reset_and_knows_a_finished_bar() -> None:
    state, _ = _learn([f"[eval] batch {i}/4" for i in (1, 2, 3)])
    state, sample = learn_progress(state, ["[eval] batch 4/4"], first_line_no=10)
    assert sample is not None and sample.finished and sample.line_no == 10 and sample.shown_iteration == 4
    state, sample = learn_progress(state, ["[eval] batch 1/4"], first_line_no=11)  # the next epoch's bar
    assert sample is not None and not sample.finished


def test_learn_progress_takes_a_whole_batch_and_reports_its_newest_line() -> None:
    lines = ["loading data", *[f"it {i} | loss 1.0" for i in range(1, 6)], "some other line"]
    state, sample = learn_progress(LearnedProgress(), lines, first_line_no=100)
    assert sample is not None and sample.line_no == 105 and sample.source == "learned"


def test_learned_state_is_bounded_and_round_trips() -> None:
    state = LearnedProgress()
    for i in range(50):
        state, _ = learn_progress(state, [f"kind{'x' * i} step {i}"])
    assert len(state.templates) == MAX_TEMPLATES
    assert LearnedProgress.model_validate_json(state.model_dump_json()) == state


USER_CASES = [
    (r"shard (\d+) done", ["shard 3 done", "noise", "shard 4 done"], (4, 3)),  # newest match, group = iteration
    (r"^\[rank0\] ok", ["[rank0] ok", "[rank1] ok"], (None, 1)),  # no group: the line itself
    (r"shard (\d+) done", ["nothing here"], None),
]


@pytest.mark.parametrize(("pattern", "lines", "expected"), USER_CASES)
def test_user_progress(pattern: str, lines: list[str], expected) -> None:
    import re

    sample = user_progress(re.compile(pattern), lines, first_line_no=1)
    if expected is None:
        assert sample is None
    else:
        assert sample is not None and (sample.iteration, sample.line_no) == (expected[0], expected[1])


def test_a_finished_recognised_bar_is_marked() -> None:
    assert parse_progress_line("100%|██████████| 100/100 [00:10<00:00, 9.9it/s]").finished
    assert not parse_progress_line(" 50%|█████     | 50/100 [00:05<00:05, 9.9it/s]").finished
