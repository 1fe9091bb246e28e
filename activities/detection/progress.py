"""Training progress and checkpoint saves, parsed from single log lines.

Pure functions over strings. The screener (`screen.py`) finds candidate lines
with the cheap `PROGRESS_MARKERS` / `CHECKPOINT_MARKERS` expressions and hands
the newest ones here; each format is recognised by one anchored regular
expression, and the fields around it by small regexes or a split, so parsing a
line costs a few microseconds.

Formats: Megatron-LM / NeMo (Megatron core), HF Trainer / Accelerate (dict
lines and tqdm bars), PyTorch Lightning (classic tqdm and rich bars), DeepSpeed,
torchtitan and plain "step N" lines. Any other format is learned from the job
itself when a line template repeats with a growing number (`learn_progress`),
and a job can name its own progress line in its opt-in (`user_progress`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence

from pydantic import Field

from workflows.contracts import Contract, Progress

# --------------------------------------------------------------------------- model


class ProgressSample(Contract):
    """What one log line says about training progress or a checkpoint save.

    `throughput` is whatever rate the framework logs (samples, tokens or
    iterations per second); compare it only with samples of the same job.
    `checkpoint` is True for a completed (or, where the framework only logs the
    start, started) checkpoint save; `checkpoint_iteration` is None when the line
    does not name the iteration.
    """

    iteration: int | None = None
    loss: float | None = None
    throughput: float | None = None
    iter_time_s: float | None = None
    checkpoint_iteration: int | None = None
    checkpoint: bool = False
    line_no: int | None = None
    source: str = ""  # megatron | deepspeed | torchtitan | fairseq | mmengine | tqdm | lightning | hf | plain | checkpoint | learned | user_pattern
    finished: bool = False  # the line shows done == total (a finished bar: the next phase may print nothing we know)
    shown_iteration: int | None = None  # the number to show people when `iteration` is not comparable (learned)

    @property
    def rate(self) -> float | None:
        """Throughput as logged, else iterations per second derived from the iteration time."""
        if self.throughput is not None and self.throughput > 0:
            return self.throughput
        if self.iter_time_s is not None and self.iter_time_s > 0:
            return 1.0 / self.iter_time_s
        return None


# --------------------------------------------------------------------------- markers for the screener

# Cheap expressions (hyperscan- and Python-compatible, matched case-insensitively)
# that find lines worth parsing. A marker may over-match; the parsers decide.
PROGRESS_MARKERS: tuple[str, ...] = (
    r"iteration\s+[0-9]+\s*/\s*[0-9]+",  # Megatron / NeMo
    r"\bstep\s*[=:#]?\s*[0-9]",  # DeepSpeed step=, torchtitan step:, plain step N
    r"global_step\s*[=:]\s*[0-9]",  # DeepSpeed / NeMo key=value
    r"\|\s*[0-9]+/[0-9]+\s*\[",  # tqdm / Lightning bar
    r"[0-9]it\s*\[",  # tqdm without a total
    r"epoch\s+[0-9]+/[0-9]+\s",  # Lightning rich bar
    r"['\"](loss|eval_loss|train_runtime)['\"]\s*:",  # HF Trainer dict
    r"samplespersec=|samples/sec\s*=",  # DeepSpeed throughput timer
)

CHECKPOINT_MARKERS: tuple[str, ...] = (
    r"saved checkpoint (from|at) iteration",  # Megatron
    r"saving model checkpoint to ",  # HF Trainer
    r"saving model checkpoint: ",  # DeepSpeed
    r"saving model to .*step=[0-9]",  # Lightning ModelCheckpoint(verbose=True)
    r"checkpoint \S+ is ready now",  # DeepSpeed
    r"finished saving (the )?checkpoint",  # torchtitan
    r"(successfully saved|saved|wrote) (the |a )?(model )?checkpoint",
    r"checkpoint save for step [0-9]+ .*(finished|finalized|completed)",  # NeMo async save
    r"checkpoint[^\n]{0,80}\b(saved|written)\b",
)

# --------------------------------------------------------------------------- helpers

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_NUM = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?:nan|inf)"
_MAX_PARSE_CHARS = 4096


def clean_line(line: str) -> str:
    """The text a terminal would show last: ANSI codes removed, last `\\r` segment kept."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "\r" in line:
        segments = [s for s in line.split("\r") if s.strip()]
        line = segments[-1] if segments else ""
    if "\x00" in line:
        line = line.replace("\x00", "")
    return line[-_MAX_PARSE_CHARS:].strip()


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.replace(",", "").rstrip("%"))
    except ValueError:
        return None
    return value


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(float(text.replace(",", "")))
    except (ValueError, OverflowError):
        return None


# --------------------------------------------------------------------------- Megatron-LM / NeMo

_MEGATRON = re.compile(r"\biteration\s+([0-9]+)\s*/\s*([0-9]+)\s*\|")


def _parse_megatron(line: str) -> ProgressSample | None:
    m = _MEGATRON.search(line)
    if m is None:
        return None
    sample = ProgressSample(iteration=int(m.group(1)), source="megatron")
    for part in line[m.end():].split("|"):
        key, sep, value = part.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        first = value.strip().split(" ", 1)[0] if value.strip() else ""
        number = _float(first)
        if number is None:
            continue
        if key.startswith("elapsed time per iteration"):
            sample.iter_time_s = number / 1000.0 if "(ms)" in key else number
        elif key.endswith("loss") and "scale" not in key and sample.loss is None:
            sample.loss = number
        elif sample.throughput is None and (
            "throughput" in key or "per second" in key or "/sec" in key or "/s" in key.split("(")[-1]
        ):
            sample.throughput = number
    return sample


# --------------------------------------------------------------------------- DeepSpeed

_DS_STEP = re.compile(r"\b(?:global_step|step)=([0-9]+)")
_DS_RATE = re.compile(r"(?:CurrSamplesPerSec|samples/sec)\s*=\s*(" + _NUM + ")")
_DS_AVG_RATE = re.compile(r"RunningAvgSamplesPerSec\s*=\s*(" + _NUM + ")")
_DS_LOSS = re.compile(r"\bloss\s*[=:]\s*(" + _NUM + ")", re.IGNORECASE)


def _parse_deepspeed(line: str) -> ProgressSample | None:
    step = _DS_STEP.search(line)
    rate = _DS_RATE.search(line) or _DS_AVG_RATE.search(line)  # the current rate over the running average
    if step is None and rate is None:
        return None
    loss = _DS_LOSS.search(line)
    return ProgressSample(
        iteration=int(step.group(1)) if step else None,
        throughput=_float(rate.group(1)) if rate else None,
        loss=_float(loss.group(1)) if loss else None,
        source="deepspeed",
    )


# --------------------------------------------------------------------------- torchtitan

_TITAN = re.compile(r"\bstep:\s*([0-9]+)\s+loss:\s*(" + _NUM + ")")
_TITAN_TPS = re.compile(r"\btps:\s*([0-9][0-9,]*(?:\.[0-9]+)?)")


def _parse_torchtitan(line: str) -> ProgressSample | None:
    m = _TITAN.search(line)
    if m is None:
        return None
    tps = _TITAN_TPS.search(line, m.end())
    return ProgressSample(
        iteration=int(m.group(1)),
        loss=_float(m.group(2)),
        throughput=_float(tps.group(1)) if tps else None,
        source="torchtitan",
    )


# --------------------------------------------------------------------------- mmengine (OpenMMLab)

# '... - mmengine - INFO - Iter(train) [  20/400000]  lr: 1.0e-04  eta: ...  time: 2.4917  data_time: ...  loss: 0.77'
# '... - mmengine - INFO - Epoch(train)  [3][ 50/1173]  lr: ...  time: 0.4312  ...  loss: 1.2034': the batch counter
# starts again each epoch, so the step is counted over epochs; validation lines (`Epoch(val)`) are no training
_MMENGINE = re.compile(r"\b(?:Iter|Epoch)\(train\)\s*(?:\[\s*([0-9]+)\s*\])?\s*\[\s*([0-9]+)\s*/\s*([0-9]+)\s*\]")
_MM_TIME = re.compile(r"(?:^|\s)time:\s*(" + _NUM + ")")
_MM_LOSS = re.compile(r"(?:^|\s)loss:\s*(" + _NUM + ")")


def _number_after(rx: re.Pattern[str], text: str) -> float | None:
    """The number `rx`'s first group finds in `text`, or None."""
    m = rx.search(text)
    return _float(m.group(1)) if m else None


def _parse_mmengine(line: str) -> ProgressSample | None:
    m = _MMENGINE.search(line)
    if m is None:
        return None
    step, total = int(m.group(2)), int(m.group(3))
    if m.group(1) is not None:  # epoch-based: the epochs before this one ran `total` batches each
        step += (max(1, int(m.group(1))) - 1) * total
    rest = line[m.end():]
    return ProgressSample(iteration=step, loss=_number_after(_MM_LOSS, rest), iter_time_s=_number_after(_MM_TIME, rest),
                          source="mmengine")


# --------------------------------------------------------------------------- fairseq

# '... | INFO | train_inner | epoch 004:   2200 / 6402 loss=4.266, ..., wps=198640, ..., num_updates=21399, ...':
# num_updates is the global step (the batch counter starts again each epoch)
_FAIRSEQ = re.compile(r"\bnum_updates=([0-9]+)")
_FAIRSEQ_LOSS = re.compile(r"(?:^|[ |])loss=(" + _NUM + ")")
_FAIRSEQ_WPS = re.compile(r"\bwps=(" + _NUM + ")")


def _parse_fairseq(line: str) -> ProgressSample | None:
    m = _FAIRSEQ.search(line)
    if m is None:
        return None
    return ProgressSample(
        iteration=int(m.group(1)),
        loss=_number_after(_FAIRSEQ_LOSS, line),
        throughput=_number_after(_FAIRSEQ_WPS, line),
        source="fairseq",
    )


# --------------------------------------------------------------------------- tqdm / Lightning

_BAR = re.compile(r"\|\s*([0-9]+)/([0-9]+)\s*\[([^\]]*)\]?")
_BAR_NO_TOTAL = re.compile(r"(?:^|\s)([0-9]+)it\s*\[([^\]]*)\]?")
_RICH = re.compile(r"\bEpoch\s+([0-9]+)/[0-9]+\s+\S*\s*([0-9]+)/([0-9]+)\s")
_EPOCH = re.compile(r"\bEpoch\s+([0-9]+)\b")
_RATE = re.compile(r"(" + _NUM + r")\s*(it/s|s/it)")
_KV = re.compile(r"([A-Za-z_][\w ./]{0,40}?)\s*[=:]\s*(" + _NUM + r")(?=[,\s\]]|$)")


def _apply_kv(sample: ProgressSample, text: str) -> None:
    for key, value in _KV.findall(text):
        key = key.strip().lower()
        number = _float(value)
        if number is None:
            continue
        if key == "global_step":
            sample.iteration = int(number)
        elif "loss" in key and "val" not in key and sample.loss is None:
            sample.loss = number
        elif key.startswith("train_step_timing"):
            sample.iter_time_s = number


def _apply_rate(sample: ProgressSample, text: str) -> None:
    rate = _RATE.search(text)
    if rate is None:
        return
    value = _float(rate.group(1))
    if value is None or value <= 0:
        return
    if rate.group(2) == "it/s":
        sample.throughput, sample.iter_time_s = value, 1.0 / value
    else:
        sample.throughput, sample.iter_time_s = 1.0 / value, value


def _parse_bar(line: str) -> ProgressSample | None:
    m = _BAR.search(line)
    epoch_match = _EPOCH.search(line, 0, m.start()) if m else None
    if m is not None:
        done, total, inside = int(m.group(1)), int(m.group(2)), m.group(3)
        source = "lightning" if epoch_match else "tqdm"
    else:
        rich = _RICH.search(line)
        if rich is not None:
            epoch_match = rich
            done, total, inside = int(rich.group(2)), int(rich.group(3)), line[rich.end():]
            source = "lightning"
        else:
            bare = _BAR_NO_TOTAL.search(line)
            if bare is None:
                return None
            done, total, inside, source = int(bare.group(1)), 0, bare.group(2), "tqdm"
    sample = ProgressSample(iteration=done, source=source, finished=bool(total) and done >= total)
    if epoch_match is not None and total:
        # batch index restarts every epoch; make the iteration monotonic
        sample.iteration = int(epoch_match.group(1)) * total + done
    _apply_rate(sample, inside)
    _apply_kv(sample, inside)
    return sample


# --------------------------------------------------------------------------- HF Trainer dict lines

_HF_DICT = re.compile(r"""\{\s*['"](?:loss|eval_loss|train_runtime|[a-z_]*loss)['"]\s*:""")
_HF_FIELD = re.compile(r"""['"]([a-z_]+)['"]\s*:\s*['"]?(""" + _NUM + ")")


def _parse_hf_dict(line: str) -> ProgressSample | None:
    m = _HF_DICT.search(line)
    if m is None:
        return None
    sample = ProgressSample(source="hf")
    for key, value in _HF_FIELD.findall(line, m.start()):
        number = _float(value)
        if number is None:
            continue
        if key in {"loss", "train_loss"} and sample.loss is None:
            sample.loss = number
        elif key in {"step", "global_step"}:
            sample.iteration = int(number)
        elif key in {"train_samples_per_second", "samples_per_second"}:
            sample.throughput = number
    return sample


# --------------------------------------------------------------------------- plain "step N"

_PLAIN = re.compile(r"\b(?:global[ _])?step\s*[:=#]?\s*([0-9]+)(?:\s*/\s*[0-9]+)?\b", re.IGNORECASE)
_PLAIN_LOSS = re.compile(r"\bloss\b\s*[:=]?\s*(" + _NUM + ")", re.IGNORECASE)
_PLAIN_RATE = re.compile(
    r"(" + _NUM + r")\s*(?:tok(?:en)?s?/s(?:ec)?|samples?/s(?:ec)?|it/s)\b|\b(?:tps|throughput)\s*[:=]\s*(" + _NUM + ")",
    re.IGNORECASE,
)
_PLAIN_TIME = re.compile(
    r"\b(?:step[_ ]time|iter[_ ]time|time/iter|time per (?:step|iter(?:ation)?))\s*[:=]?\s*(" + _NUM + r")\s*(ms|s)?",
    re.IGNORECASE,
)


def _parse_plain(line: str) -> ProgressSample | None:
    m = _PLAIN.search(line)
    if m is None:
        return None
    sample = ProgressSample(iteration=int(m.group(1)), source="plain")
    loss = _PLAIN_LOSS.search(line)
    if loss:
        sample.loss = _float(loss.group(1))
    rate = _PLAIN_RATE.search(line)
    if rate:
        sample.throughput = _float(rate.group(1) or rate.group(2))
    took = _PLAIN_TIME.search(line)
    if took:
        value = _float(took.group(1))
        if value is not None:
            sample.iter_time_s = value / 1000.0 if took.group(2) == "ms" else value
    return sample


# --------------------------------------------------------------------------- checkpoints

_CKPT_ITER = (
    re.compile(r"saved checkpoint (?:from|at) iteration\s+([0-9]+)", re.IGNORECASE),
    re.compile(r"checkpoint[-_]([0-9]+)\b", re.IGNORECASE),
    re.compile(r"\bglobal[ _]?step[-_ =:]?([0-9]+)", re.IGNORECASE),
    re.compile(r"\bstep[-_=: ]([0-9]+)", re.IGNORECASE),
    re.compile(r"\biter(?:ation)?[-_=: ]+([0-9]+)", re.IGNORECASE),
)
_CKPT_LINE = re.compile("|".join(f"(?:{m})" for m in CHECKPOINT_MARKERS), re.IGNORECASE)
# words that turn a checkpoint line into a failure or a load, not a save
_CKPT_NOT_SAVE = re.compile(
    r"\b(fail(?:ed|ure)?|error|exception|unable|could not|cannot|not saved|load(?:ed|ing)?|resum(?:e|ed|ing))\b",
    re.IGNORECASE,
)


def parse_checkpoint_line(line: str, *, line_no: int | None = None) -> ProgressSample | None:
    """A checkpoint-save sample when `line` reports a save, else None."""
    text = clean_line(line)
    if _CKPT_LINE.search(text) is None or _CKPT_NOT_SAVE.search(text):
        return None
    iteration = None
    for rx in _CKPT_ITER:
        m = rx.search(text)
        if m is not None:
            iteration = int(m.group(1))
            break
    return ProgressSample(checkpoint=True, checkpoint_iteration=iteration, line_no=line_no, source="checkpoint")


# --------------------------------------------------------------------------- entry points

_PARSERS = (_parse_megatron, _parse_torchtitan, _parse_fairseq, _parse_mmengine, _parse_bar, _parse_deepspeed, _parse_hf_dict, _parse_plain)


def parse_progress_line(line: str, *, line_no: int | None = None) -> ProgressSample | None:
    """The progress sample `line` reports, or None when it is not a progress line."""
    text = clean_line(line)
    if not text:
        return None
    for parse in _PARSERS:
        sample = parse(text)
        if sample is not None:
            sample.line_no = line_no
            return sample
    return None


def latest_progress(samples: Iterable[ProgressSample]) -> Progress:
    """Fold samples (oldest first) into the newest known value of each field.

    Frameworks spread progress over several lines (HF prints the loss in a dict
    and the step in the bar), so each field comes from the newest sample that
    has it. The iteration is the newest one seen (a restart from a checkpoint
    moves it back, and that is what the job is doing now).
    """
    progress = Progress()
    for sample in samples:
        if not sample.checkpoint:
            progress.finished = sample.finished
        if sample.iteration is not None:
            progress.iteration = sample.iteration
        if sample.loss is not None:
            progress.loss = sample.loss
        if sample.throughput is not None:
            progress.throughput = sample.throughput
        if sample.iter_time_s is not None:
            progress.iter_time_s = sample.iter_time_s
        if sample.checkpoint and sample.checkpoint_iteration is not None:
            progress.checkpoint_iteration = sample.checkpoint_iteration
    return progress


# --------------------------------------------------------------------------- generic progress: learned line templates

# A line whose format no parser above knows is still progress when the same line
# template keeps coming back with a growing number in a progress position: after
# a progress word (step, it, iter, iteration, batch, epoch, samples), in front of
# `it` (tqdm without a total), or as `done/total` in brackets or before a tqdm
# `[`. A template is the line with every number masked, the bar of a tqdm line
# dropped and whitespace collapsed; it is learned once MIN_TEMPLATE_GROWTHS
# growths in a row were seen (three lines), so one line mentioning "step 5" is
# never a progress signal. Numbers elsewhere (timestamps, losses, ranks) are
# masked into the template and never count as progress.

MIN_TEMPLATE_GROWTHS = 2  # three lines of one template, each with a larger progress number
MAX_TEMPLATES = 8  # candidate templates remembered per job (they travel in the watch's heartbeat)
MAX_LEARN_LINES = 400  # newest lines of a batch examined (progress lines repeat; older ones add nothing)

_WORD = r"(?:global[ _]?step|steps?|it|iter(?:ation)?s?|batch(?:es)?|epochs?|samples?)"
_POSITIONS = re.compile(
    # the lookahead (every alternative starts with one of these characters) lets the engine skip the other
    # positions of a line at once: twice as fast over the real corpus's lines, the same matches
    r"(?=[\[0-9bBeEgGiIsS])(?:"
    r"\b" + _WORD + r"\b\s*[:=#]?\s*[\[(]?\s*([0-9]+)(?:\s*(?:/|of)\s*([0-9]+))?"  # step 12, epoch [3/10], batch 4 of 9
    r"|\[\s*([0-9]+)\s*/\s*([0-9]+)\s*\]"  # [12/500]
    r"|(?<![\w./])([0-9]+)\s*/\s*([0-9]+)\s*\["  # tqdm: 37/100 [00:10<00:19, ...]
    r"|(?<![\w.])([0-9]+)it\b)",  # tqdm without a total: 100it [00:10, ...]
    re.IGNORECASE,
)
_BAR_BODY = re.compile(r"%\s*\|[^|]{0,200}\|")
_ANY_NUMBER = re.compile(r"0x[0-9a-fA-F]+|[0-9]+(?:[.,][0-9]+)*(?:[eE][-+]?[0-9]+)?")
_SPACES = re.compile(r"\s+")


class TemplateState(Contract):
    """One candidate line template: its digest, the progress numbers of its newest line, growths in a row."""

    digest: str
    last: list[int] = Field(default_factory=list)
    growths: int = 0
    learned: bool = False


class LearnedProgress(Contract):
    """What the generic learner remembers of one job between batches (bounded, newest template last)."""

    templates: list[TemplateState] = Field(default_factory=list)

    @property
    def learned(self) -> bool:
        return any(t.learned for t in self.templates)


def line_template(line: str) -> tuple[str, list[int], list[int]] | None:
    """(template, progress numbers, totals) of a cleaned line, or None when no number sits in a progress position.

    Totals are 0 where the line gives none.
    """
    done: list[int] = []
    totals: list[int] = []
    for m in _POSITIONS.finditer(line):
        groups = m.groups()
        for i in (0, 2, 4):
            if groups[i] is not None:
                done.append(int(groups[i]))
                totals.append(int(groups[i + 1]) if groups[i + 1] is not None else 0)
                break
        else:
            done.append(int(groups[6]))
            totals.append(0)
    if not done:
        return None
    masked = _ANY_NUMBER.sub("#", _BAR_BODY.sub("%|", line))
    return _SPACES.sub(" ", masked).strip()[:400], done, totals


def _digest(template: str) -> str:
    return hashlib.blake2b(template.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def learn_progress(
    state: LearnedProgress, lines: Sequence[str], *, first_line_no: int = 1
) -> tuple[LearnedProgress, ProgressSample | None]:
    """Feed a batch of raw lines (oldest first); the new state and the newest progress of a learned template.

    A learned template's line counts as progress whenever its numbers change:
    they grow, or go back (a new epoch's bar, a restart from a checkpoint). The
    same numbers again (a rank repeating "waiting at step 37") are no progress.
    The sample has no iteration (templates are not comparable with each other);
    its `line_no` says which line it is, `finished` whether it shows done == total.
    """
    templates = [t.model_copy() for t in state.templates]
    newest: ProgressSample | None = None
    start = max(0, len(lines) - MAX_LEARN_LINES)
    for offset in range(start, len(lines)):
        text = clean_line(lines[offset])
        parsed = line_template(text) if text else None
        if parsed is None:
            continue
        template, done, totals = parsed
        digest = _digest(template)
        found = next((t for t in templates if t.digest == digest), None)
        if found is None:
            found = TemplateState(digest=digest, last=done)
            templates.append(found)
            del templates[: -MAX_TEMPLATES]
            continue
        templates.remove(found)
        templates.append(found)  # newest last: the least recently seen is dropped first
        if done == found.last:
            continue
        grew = done > found.last
        found.last = done
        if not found.learned:
            found.growths = found.growths + 1 if grew else 0
            found.learned = found.growths >= MIN_TEMPLATE_GROWTHS
            if not found.learned:
                continue
        newest = ProgressSample(
            line_no=first_line_no + offset,
            source="learned",
            finished=bool(totals[-1]) and done[-1] >= totals[-1],
            shown_iteration=done[-1],
        )
    return LearnedProgress(templates=templates), newest


# --------------------------------------------------------------------------- the job's own progress pattern

USER_LINE_CHARS = 512  # a user pattern sees at most this much of a line (see adapters/slurm/optin.py)


def user_progress(pattern: re.Pattern[str], lines: Sequence[str], *, first_line_no: int = 1) -> ProgressSample | None:
    """The newest line of the batch that the job's own `progress_pattern` matches, as a progress sample.

    The pattern was checked when the opt-in was read (bounded length, no nested
    or repeated alternation, at most two open-ended repeats). When it has a
    group, the first group is the iteration (a repeat of the same number is no
    progress); otherwise every new matching line is progress.
    """
    start = max(0, len(lines) - MAX_LEARN_LINES)
    for offset in range(len(lines) - 1, start - 1, -1):
        text = clean_line(lines[offset])[:USER_LINE_CHARS]
        m = pattern.search(text) if text else None
        if m is None:
            continue
        iteration = _int(m.group(1)) if pattern.groups and m.group(1) is not None else None
        return ProgressSample(
            iteration=iteration, line_no=first_line_no + offset, source="user_pattern", shown_iteration=iteration
        )
    return None
