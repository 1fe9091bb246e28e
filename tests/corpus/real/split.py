"""Split the real-format corpus once into tune and holdout, about 2:1, stratified by category.

`python tests/corpus/real/split.py` moves every case of `pool/` into `tune/` or `holdout/`:
within each category, cases are ordered by the SHA-256 of their name and every third goes
to holdout. The order depends on nothing but the names, so the split can be checked by
anyone (`--check` recomputes it for the cases already split and fails on any difference).
The split is made once, before the engine is tuned on `tune/`; README.md records its commit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPLITS = ("tune", "holdout")


def assign(names_by_category: dict[str, list[str]]) -> dict[str, str]:
    """Case name -> split: per category, by name hash, every third case to holdout."""
    out: dict[str, str] = {}
    for names in names_by_category.values():
        ordered = sorted(names, key=lambda n: hashlib.sha256(n.encode()).hexdigest())
        for i, name in enumerate(ordered):
            out[name] = "holdout" if i % 3 == 2 else "tune"
    return out


def cases(folder: Path) -> dict[str, str]:
    """Case name -> category for the sidecars in `folder`."""
    out = {}
    for side in sorted(folder.glob("*.expected.json")):
        out[side.name.removesuffix(".expected.json")] = json.loads(side.read_text())["category"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify the existing split, move nothing")
    args = parser.parse_args(argv)
    where: dict[str, Path] = {}
    by_cat: dict[str, list[str]] = defaultdict(list)
    for folder in [HERE / "pool", *(HERE / s for s in SPLITS)]:
        for name, category in cases(folder).items():
            where[name] = folder
            by_cat[category].append(name)
    plan = assign(by_cat)
    wrong = [n for n, s in plan.items() if where[n].name in SPLITS and where[n].name != s]
    if args.check:
        for name in wrong:
            print(f"{name}: in {where[name].name}, the split says {plan[name]}", file=sys.stderr)
        print(f"{len(plan)} cases, {len(wrong)} out of place")
        return 1 if wrong else 0
    if wrong:
        print(f"{len(wrong)} already split cases would move; refusing (the split is made once)", file=sys.stderr)
        return 1
    moved = 0
    for name, split in plan.items():
        if where[name].name != "pool":
            continue
        target = HERE / split
        target.mkdir(exist_ok=True)
        for suffix in (".log", ".expected.json"):
            (where[name] / f"{name}{suffix}").rename(target / f"{name}{suffix}")
        moved += 1
    counts = {s: sum(1 for v in plan.values() if v == s) for s in SPLITS}
    print(f"moved {moved} case(s); tune {counts['tune']}, holdout {counts['holdout']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
