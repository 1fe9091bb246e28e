"""A running job's own output showing it stands still: GPU snapshots and progress bars that stopped.

Pure code. Two kinds of evidence a person pastes or a job script prints at the end of a hung run:

- an `nvidia-smi` snapshot (the `--query-gpu=... --format=csv` table, or the default table's
  `| ... MiB / ... MiB | NN% ... |` rows): every GPU at 0 % with memory still allocated is a
  job blocked in a collective or waiting on the host; one GPU idle while the others spin at
  (near) 100 % is the one the rest wait for;
- a tqdm bar redrawn with the same count while its elapsed time grew far past the per-step time
  it shows (`1/1250 [01:48<..., 108.22s/it]` then `1/1250 [21:06<..., 108.22s/it]`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

IDLE_PCT = 5  # utilisation at or under which a GPU does nothing
BUSY_PCT = 90  # utilisation at or over which a GPU spins (NCCL kernels waiting spin at 100 %)
HELD_MIB = 1024  # memory a GPU must hold to be in use by the job at all
STALL_FACTOR = 5.0  # a bar that stood still for this many step times ...
STALL_MIN_S = 300.0  # ... and at least this long has stopped


@dataclass(frozen=True)
class GpuRow:
    line_no: int
    index: int
    util: int
    mem_mib: int | None


_CSV_HEADER = re.compile(r"utilization\.gpu \[%\]")
_CSV_NUMBER = re.compile(r"^\s*([0-9]{1,6}(?:\.[0-9]+)?)\s*(?:%|MiB|W|C)?\s*$")
_TABLE_GPU = re.compile(r"^\|\s{0,4}([0-9]{1,3})\s{1,8}[A-Za-z]")  # "|   0  NVIDIA A100-SXM4-80GB  On |"
_TABLE_USE = re.compile(r"\|\s{0,12}([0-9]{1,7})MiB\s{0,3}/\s{0,3}[0-9]{1,7}MiB\s{0,8}\|\s{0,8}([0-9]{1,3})%")


def gpu_snapshot(lines: Sequence[tuple[int, str]]) -> list[GpuRow]:
    """The GPUs of the last nvidia-smi snapshot in `lines` (text without prefixes), in order; [] when none."""
    snapshots: list[list[GpuRow]] = []
    columns: dict[str, int] | None = None
    current: list[GpuRow] = []
    table: list[GpuRow] | None = None  # the default table being read
    table_index: int | None = None
    for line_no, text in lines:
        if _CSV_HEADER.search(text):
            columns = {name.strip().split(" [")[0]: i for i, name in enumerate(text.split(","))}
            current = []
            snapshots.append(current)
            continue
        if columns is not None:
            row = _csv_row(line_no, text, columns, len(current))
            if row is not None:
                current.append(row)
                continue
            columns = None
        m = _TABLE_GPU.match(text)
        if m:
            table_index = int(m.group(1))
            if table_index == 0 or table is None:
                table = []
                snapshots.append(table)
            continue
        m = _TABLE_USE.search(text)
        if m and table_index is not None and table is not None:
            table.append(GpuRow(line_no, table_index, int(m.group(2)), int(m.group(1))))
            table_index = None
    return snapshots[-1] if snapshots else []


def _csv_row(line_no: int, text: str, columns: dict[str, int], position: int) -> GpuRow | None:
    cells = text.split(",")
    if len(cells) != len(columns):
        return None
    values: dict[str, float] = {}
    for name, i in columns.items():
        m = _CSV_NUMBER.match(cells[i])
        if m:
            values[name] = float(m.group(1))
        elif "[N/A]" not in cells[i] and "N/A" not in cells[i]:
            return None  # not a row of this table
    if "utilization.gpu" not in values:
        return None
    index = int(values["index"]) if "index" in values else position
    mem = int(values["memory.used"]) if "memory.used" in values else None
    return GpuRow(line_no, index, int(values["utilization.gpu"]), mem)


@dataclass(frozen=True)
class GpuStall:
    line_no: int  # the snapshot's first row
    all_idle: bool
    idle: tuple[int, ...]  # indices of the idle GPUs when the others spin
    gpus: int


def gpu_stall(rows: Sequence[GpuRow]) -> GpuStall | None:
    """What a snapshot says: every GPU idle with memory held, or a few idle while the rest spin."""
    if len(rows) < 2:
        return None
    idle = [r for r in rows if r.util <= IDLE_PCT]
    busy = [r for r in rows if r.util >= BUSY_PCT]
    if len(idle) == len(rows):
        held = [r for r in rows if r.mem_mib is not None and r.mem_mib >= HELD_MIB]
        if len(held) == len(rows):
            return GpuStall(rows[0].line_no, True, (), len(rows))
        return None
    if idle and len(idle) + len(busy) == len(rows) and len(idle) <= max(1, len(rows) // 4):
        return GpuStall(rows[0].line_no, False, tuple(r.index for r in idle), len(rows))
    return None


_TQDM = re.compile(
    r"(?P<n>[0-9]{1,9})/(?P<total>[0-9]{1,9}) \[(?P<elapsed>[0-9:]{4,12})<[0-9:?]{1,12},\s{0,3}"
    r"(?P<rate>[0-9.]{1,12})(?P<unit>s/it|it/s)"
)


def _seconds(clock: str) -> float:
    total = 0.0
    for part in clock.split(":"):
        total = total * 60 + float(part or 0)
    return total


@dataclass(frozen=True)
class BarStall:
    line_no: int
    step: int
    seconds: float  # how long the bar stood at `step`
    step_seconds: float


def bar_stall(lines: Sequence[tuple[int, str]]) -> BarStall | None:
    """The last tqdm bar stood still: its last redraws all show one count, with the elapsed time grown by more
    than STALL_FACTOR step times and STALL_MIN_S seconds, and no other bar moved meanwhile."""
    bars: list[tuple[int, int, int, float, float]] = []
    for line_no, text in lines:
        for m in _TQDM.finditer(text):
            rate = float(m.group("rate") or 0)
            step_s = rate if m.group("unit") == "s/it" else (1.0 / rate if rate > 0 else 0.0)
            bars.append((line_no, int(m.group("n")), int(m.group("total")), _seconds(m.group("elapsed")), step_s))
    if len(bars) < 2:
        return None
    line_no, n, total, elapsed, step_s = bars[-1]
    if n >= total:
        return None  # finished
    first_i = next((i for i, b in enumerate(bars) if b[1] == n and b[2] == total), len(bars) - 1)
    first = bars[first_i]
    if first is bars[-1] or any((b[1], b[2]) != (n, total) for b in bars[first_i:]):
        return None  # the bar (or another one: an eval loop) moved in between
    stood = elapsed - first[3]
    if stood >= STALL_MIN_S and step_s > 0 and stood >= STALL_FACTOR * step_s:
        return BarStall(line_no, n, stood, step_s)
    return None
