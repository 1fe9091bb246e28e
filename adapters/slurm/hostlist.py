"""Slurm host lists: `node[1-3,7]` <-> `["node1", "node2", "node3", "node7"]`.

Pure functions, no Slurm needed. The syntax follows Slurm's own: a comma list
of names, each name may hold one or more bracket groups of numbers and ranges
(several groups expand as a cartesian product, as `scontrol show hostnames`
does); a range keeps the zero padding of its lower bound (`[08-10]`).
`expand` also reads a bracket followed by plain text (`gpu-a[01-02]-b`),
which some Slurm releases print and 22.05 does not.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

from adapters.errors import ParseError

#: a hostile or broken list must not make us allocate millions of names
MAX_HOSTS = 100_000

_EMPTY = {"", "(null)", "None", "n/a"}
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def expand(hostlist: str) -> list[str]:
    """Expand a Slurm host list into host names, in Slurm's order.

    Raises:
        ParseError: the list is malformed (unbalanced brackets, a bad range) or
            expands to more than `MAX_HOSTS` names.
    """
    text = hostlist.strip()
    if text in _EMPTY:
        return []
    names: list[str] = []
    for item in _split_top_level(text):
        names.extend(_expand_one(item, hostlist))
        if len(names) > MAX_HOSTS:
            raise ParseError(f"host list expands to more than {MAX_HOSTS} names", line=hostlist)
    return names


def compress(names: Iterable[str]) -> str:
    """Fold host names into a compact Slurm host list.

    Names that differ only in the number they end with share brackets; other
    names are kept as they are (Slurm 22.05 rejects `gpu-a[01-02]-b`, a
    bracket followed by more text, so compress never writes one, while
    `expand` reads it). Duplicates are dropped; groups appear in the
    order of their first name, numbers within a group ascending.
    `expand(compress(x))` has exactly the names of `x`.
    """
    groups: dict[tuple[str, str], set[str]] = {}
    plain: list[str] = []
    order: list[tuple[str, str] | str] = []
    for name in names:
        name = name.strip()
        if not name:
            continue
        match = re.fullmatch(r"(.*?)(\d+)()", name)
        if match is None:
            if name not in plain:
                plain.append(name)
                order.append(name)
            continue
        key = (match.group(1), match.group(3))
        if key not in groups:
            groups[key] = set()
            order.append(key)
        groups[key].add(match.group(2))
    parts = []
    for entry in order:
        if isinstance(entry, str):
            parts.append(entry)
            continue
        prefix, suffix = entry
        runs = _runs(groups[entry])
        if len(runs) == 1 and "-" not in runs[0]:
            parts.append(f"{prefix}{runs[0]}{suffix}")
        else:
            parts.append(f"{prefix}[{','.join(runs)}]{suffix}")
    return ",".join(parts)


def _runs(numbers: set[str]) -> list[str]:
    """Consecutive numbers with the same zero padding become `lo-hi`."""
    ordered = sorted(numbers, key=lambda s: (int(s), len(s)))
    runs: list[list[str]] = []
    for text in ordered:
        if runs:
            run = runs[-1]
            lo, last = run[0], run[-1]
            if int(text) == int(last) + 1 and text == str(int(text)).zfill(len(lo)):
                run.append(text)
                continue
        runs.append([text])
    return [run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs]


def _split_top_level(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ParseError("nested '[' in host list", line=text)
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ParseError("unbalanced ']' in host list", line=text)
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise ParseError("unbalanced '[' in host list", line=text)
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _expand_one(item: str, whole: str) -> list[str]:
    # "gpu-a[01-02]-b[1-2]" -> ["gpu-a", "01-02", "-b", "1-2", ""]
    pieces = re.split(r"\[([^\]]*)\]", item)
    choices: list[list[str]] = []
    total = 1
    for i, piece in enumerate(pieces):
        if i % 2 == 0:
            choices.append([piece])
            continue
        values = _expand_ranges(piece, whole)
        total *= len(values)
        if total > MAX_HOSTS:
            raise ParseError(f"host list expands to more than {MAX_HOSTS} names", line=whole)
        choices.append(values)
    return ["".join(combo) for combo in itertools.product(*choices)]


def _expand_ranges(body: str, whole: str) -> list[str]:
    values: list[str] = []
    for part in body.split(","):
        part = part.strip()
        match = _RANGE.fullmatch(part)
        if match is None:
            raise ParseError(f"bad range {part!r} in host list", line=whole)
        lo_text, hi_text = match.group(1), match.group(2)
        if hi_text is None:
            values.append(lo_text)
            continue
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise ParseError(f"range {part!r} runs backwards in host list", line=whole)
        if hi - lo + 1 > MAX_HOSTS:
            raise ParseError(f"host list expands to more than {MAX_HOSTS} names", line=whole)
        width = len(lo_text)
        values.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return values
