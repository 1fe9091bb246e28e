"""Split the real-format corpus into tune and holdout, about 2:1, stratified by category, once per batch.

`python tests/corpus/real/split.py [--batch NAME]` moves every case of `pool/` into `tune/` or
`holdout/`: within each category of the batch, cases are ordered by the SHA-256 of their name
and every third goes to holdout. `SPLIT.tsv` records every case's batch and split; a case once
split never moves, so a later batch never reshuffles an earlier one. `--check` recomputes each
batch's assignment from the names alone and fails on any difference with SPLIT.tsv or with where
the files are. Each batch is split before the engine is tuned on its `tune/` part; README.md
records the commits.
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
MANIFEST = HERE / "SPLIT.tsv"


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


def read_manifest() -> dict[str, tuple[str, str]]:
    """Case name -> (batch, split) as recorded."""
    if not MANIFEST.exists():
        return {}
    out = {}
    for line in MANIFEST.read_text().splitlines()[1:]:
        if line.strip():
            name, batch, split = line.split("\t")
            out[name] = (batch, split)
    return out


def write_manifest(rows: dict[str, tuple[str, str]]) -> None:
    lines = ["case\tbatch\tsplit"] + [f"{n}\t{b}\t{s}" for n, (b, s) in sorted(rows.items())]
    MANIFEST.write_text("\n".join(lines) + "\n")


def check() -> list[str]:
    recorded = read_manifest()
    where = {name: split for split in SPLITS for name in cases(HERE / split)}
    category = {name: cat for split in SPLITS for name, cat in cases(HERE / split).items()}
    problems = [f"{n}: in {where[n]}, not in SPLIT.tsv" for n in where if n not in recorded]
    problems += [f"{n}: in SPLIT.tsv, no files" for n in recorded if n not in where]
    by_batch: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for name, (batch, _) in recorded.items():
        if name in category:
            by_batch[batch][category[name]].append(name)
    for batch, by_cat in by_batch.items():
        for name, split in assign(by_cat).items():
            if recorded[name][1] != split:
                problems.append(f"{name}: SPLIT.tsv says {recorded[name][1]}, batch {batch}'s rule says {split}")
            if where.get(name) != recorded[name][1]:
                problems.append(f"{name}: in {where.get(name)}, SPLIT.tsv says {recorded[name][1]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify the recorded split, move nothing")
    parser.add_argument("--batch", default="b1", help="name of the batch the pool's cases form (default b1)")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        for p in problems:
            print(p, file=sys.stderr)
        print(f"{len(read_manifest())} cases, {len(problems)} out of place")
        return 1 if problems else 0
    recorded = read_manifest()
    pool = cases(HERE / "pool")
    if any(b == args.batch for b, _ in recorded.values()):
        print(f"batch {args.batch} was split already; name the new batch with --batch", file=sys.stderr)
        return 1
    clash = sorted(set(pool) & set(recorded))
    if clash:
        print(f"{len(clash)} pool case(s) already split (e.g. {clash[0]}); refusing", file=sys.stderr)
        return 1
    by_cat: dict[str, list[str]] = defaultdict(list)
    for name, category in pool.items():
        by_cat[category].append(name)
    plan = assign(by_cat)
    for name, split in plan.items():
        target = HERE / split
        target.mkdir(exist_ok=True)
        for suffix in (".log", ".expected.json"):
            (HERE / "pool" / f"{name}{suffix}").rename(target / f"{name}{suffix}")
        recorded[name] = (args.batch, split)
    write_manifest(recorded)
    counts = {s: sum(1 for v in plan.values() if v == s) for s in SPLITS}
    print(f"batch {args.batch}: moved {len(plan)} case(s); tune {counts['tune']}, holdout {counts['holdout']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
