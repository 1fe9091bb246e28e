"""Per-rank step timings, parsed from the lines a job prints, and summarised per node.

Pure functions over strings. Formats (one table test each in tests/detection/test_straggler_ranks.py):

* Megatron-LM / NeMo timers with `--timing-log-option all`: a block printed by one
  rank, `times across ranks (ms):`, then `  <timer>:` and one `     rank  N: 1234.56`
  line per rank (megatron/core/timers.py, `_get_all_ranks_time_string`).
* DeepSpeed's wall-clock breakdown: `[Rank N] time (ms) | fwd: 12.34 | bwd: ... | step: ...`
  (`SynchronizedWallClockTimer.log` through `log_dist`, which adds `[Rank N]`).
* A progress line that names its rank and an iteration time, as when every rank
  prints it: `[rank3]: step 120 | loss 2.31 | step_time 0.48s` (PyTorch's per-rank
  prefix), `[Rank 3] iteration 10/100 | ... | elapsed time per iteration (ms): 1234.5 |`,
  `rank 3: ...`; the progress part is read by `activities.detection.progress`.

Launcher decorations are handled: srun's `--label` prefix (`  3: `) is the Slurm task
id and is kept (`task`), since the task layout maps tasks to nodes exactly; torchrun's
`[default3]:` tag is a *local* rank and is dropped. Lines without a timing give nothing.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence

from activities.detection.progress import clean_line, parse_progress_line
from workflows.contracts import Contract, TaskLayout

MAX_TIMINGS = 512  # per job, newest kept (they travel in the watch's heartbeat)
MAX_LINE_CHARS = 300  # of the source line kept with each timing

# the compute part of a step first: in synchronous training the fast ranks wait for the
# slow one inside communication, so whole-step times differ less than compute times
TIMER_PREFERENCE = (
    "forward-compute",
    "backward-compute",
    "fwd",
    "forward",
    "fwd_microstep",
    "forward_microstep",
    "iteration",
    "forward-backward",
    "train_batch",
    "step",
)


class RankTiming(Contract):
    """One timing of one rank: `seconds` spent in `timer` during one step."""

    rank: int
    task: int | None = None  # Slurm task id from srun's --label prefix, when the line had one
    timer: str = "iteration"
    seconds: float
    line_no: int | None = None
    line: str = ""


class NodeTiming(Contract):
    """A node's pace: the slowest of its ranks (median over that rank's samples)."""

    node: str
    seconds: float
    rank: int
    timer: str
    line_no: int | None = None
    line: str = ""


_SRUN_LABEL = re.compile(r"^\s*(\d+):\s")
_LOCAL_TAG = re.compile(r"^\[(?!rank)[A-Za-z_]*\d+\]:", re.IGNORECASE)  # torchrun: [{role}{local_rank}]:
_BLOCK_HEADER = re.compile(r"times across ranks \(ms\):\s*$")
_BLOCK_TIMER = re.compile(r"^\s*([A-Za-z][\w\-/.]*(?: [\w\-/.]+)*):\s*$")
_BLOCK_RANK = re.compile(r"^\s*rank\s+(\d+):\s*([0-9]+(?:\.[0-9]*)?)\s*$")
_RANK_BRACKET = re.compile(r"\[\s*rank\s*[:=#]?\s*(\d+)\s*\]:?", re.IGNORECASE)
_RANK_START = re.compile(r"^rank\s*[:=#]?\s*(\d+)\s*[:|,]", re.IGNORECASE)
_DS_TIMERS = re.compile(r"\btime \(ms\)\s*((?:\|\s*[\w\-/.]+\s*:\s*[0-9.]+\s*)+)")
_DS_PAIR = re.compile(r"\|\s*([\w\-/.]+)\s*:\s*([0-9]+(?:\.[0-9]*)?)")


def _strip_launcher(line: str) -> tuple[str, int | None]:
    """The line without srun's label and torchrun's local tag, and the srun task id if any."""
    task = None
    m = _SRUN_LABEL.match(line)
    if m:
        task = int(m.group(1))
        line = line[m.end():]
    line = line.lstrip()
    m = _LOCAL_TAG.match(line)
    if m:
        line = line[m.end():].lstrip()
    return line, task


def parse_rank_timings(lines: Iterable[str], *, first_line_no: int = 1) -> list[RankTiming]:
    """Every per-rank timing in `lines` (oldest first), in line order."""
    out: list[RankTiming] = []
    block_timer: str | None = None
    in_block = False
    for offset, raw in enumerate(lines):
        line_no = first_line_no + offset
        text, task = _strip_launcher(clean_line(raw))
        if _BLOCK_HEADER.search(text):
            in_block, block_timer = True, None
            continue
        if in_block:
            m = _BLOCK_RANK.match(text)
            if m and block_timer is not None:
                out.append(RankTiming(rank=int(m.group(1)), timer=block_timer, seconds=float(m.group(2)) / 1000.0,
                                      line_no=line_no, line=raw[:MAX_LINE_CHARS]))
                continue
            m = _BLOCK_TIMER.match(text)
            if m:
                block_timer = m.group(1)
                continue
            in_block, block_timer = False, None
        out.extend(_rank_line(text, task, line_no, raw))
    return out


def _rank_line(text: str, task: int | None, line_no: int, raw: str) -> list[RankTiming]:
    m = _RANK_BRACKET.search(text) or _RANK_START.match(text)
    if m is None:
        return []
    rank = int(m.group(1))
    rest = text[m.end():]
    ds = _DS_TIMERS.search(rest)
    if ds:
        return [
            RankTiming(rank=rank, task=task, timer=name, seconds=float(value) / 1000.0, line_no=line_no,
                       line=raw[:MAX_LINE_CHARS])
            for name, value in _DS_PAIR.findall(ds.group(1))
        ]
    sample = parse_progress_line(rest)
    if sample is None or sample.iter_time_s is None or sample.iter_time_s <= 0:
        return []
    return [RankTiming(rank=rank, task=task, timer="iteration", seconds=sample.iter_time_s, line_no=line_no,
                       line=raw[:MAX_LINE_CHARS])]


def keep_recent(kept: Sequence[RankTiming], new: Sequence[RankTiming], *, limit: int = MAX_TIMINGS) -> list[RankTiming]:
    """`kept` followed by `new`, the newest `limit` only (for state carried between polls)."""
    return (list(kept) + list(new))[-limit:]


def node_timings(timings: Sequence[RankTiming], layout: TaskLayout) -> dict[str, NodeTiming]:
    """Each node's pace over one timer (the first of TIMER_PREFERENCE seen, else the most common).

    A rank maps to its node through the task layout (the srun task id when the line had
    one); ranks that map to no node are left out.
    """
    if not timings:
        return {}
    names = {t.timer for t in timings}
    timer = next((n for n in TIMER_PREFERENCE if n in names), None)
    if timer is None:
        timer = max(sorted(names), key=lambda n: sum(1 for t in timings if t.timer == n))
    per_rank: dict[tuple[str, int], list[RankTiming]] = {}
    for t in timings:
        if t.timer != timer or t.seconds <= 0:
            continue
        node = layout.node_of_rank(t.task if t.task is not None else t.rank)
        if node is not None:
            per_rank.setdefault((node, t.rank), []).append(t)
    out: dict[str, NodeTiming] = {}
    for (node, rank), samples in sorted(per_rank.items()):
        seconds = statistics.median(s.seconds for s in samples)
        if node not in out or seconds > out[node].seconds:
            last = samples[-1]
            out[node] = NodeTiming(node=node, seconds=seconds, rank=rank, timer=timer, line_no=last.line_no,
                                   line=last.line)
    return out
