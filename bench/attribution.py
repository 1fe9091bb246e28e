"""Attribution quality on the labelled corpus: per-class precision/recall, macro-F1, benign FP rate.

Each case is `tests/corpus/<split>/<name>.log` with `<name>.expected.json` beside it:
the expected `category`, `fault_domain` and `hosts`, plus optional context the
scheduler would have given (`layout` as NODELIST:TASKS_PER_NODE, `job` fields,
`nodes`, `metric_facts`, `hang_suspected`, `straggler_hosts`, `node_failure_counts`).

Both splits are scored, the *tuning* split (the engine was developed against it)
and the *holdout* split (written in another style and never tuned on), each
against a baseline measured in the same run: "first fatal-or-error catalogue
match in the log wins, its category is the verdict" - what grepping for the
first scary line gives an engineer.

Usage: .venv/bin/python bench/attribution.py [--quick] [--split tuning|holdout|all] [--verbose]
The last line of output is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from activities.detection.analyze import evidence_for, parse_layout, scan_stream  # noqa: E402
from activities.detection.catalogue import Catalogue, load_catalogue  # noqa: E402
from activities.detection.verdict import attribute_lines  # noqa: E402
from workflows.contracts import Category, EvidenceLine, JobInfo, JobState, NodeInfo, Verdict  # noqa: E402

CORPUS = ROOT / "tests" / "corpus"
CATEGORIES = [c.value for c in Category]


def load_cases(split: str) -> list[tuple[Path, dict]]:
    """(log path, sidecar) for every case of a split, sorted by name."""
    folder = CORPUS / split
    cases = []
    for side in sorted(folder.glob("*.expected.json")):
        log = side.with_name(side.name.replace(".expected.json", ".log"))
        cases.append((log, json.loads(side.read_text())))
    return cases


def run_case(log: Path, side: dict, *, catalogue: Catalogue | None = None) -> Verdict:
    """The engine's verdict for one case, through the same streaming path as `jobmedic analyze`."""
    catalogue = catalogue or load_catalogue()
    layout = parse_layout(side["layout"]) if side.get("layout") else None
    job = None
    if side.get("job") is not None:
        raw = dict(side["job"])
        raw.setdefault("job_id", "corpus")
        if "state" in raw:
            raw["state"] = JobState.parse(raw["state"])
        job = JobInfo.model_validate(raw)
    with log.open("rb") as stream:
        scan = scan_stream(stream, catalogue=catalogue)
    evidence = evidence_for(scan, layout=layout, job=job)
    evidence.nodes = [NodeInfo.model_validate(n) for n in side.get("nodes", [])]
    evidence.metric_facts = [EvidenceLine.model_validate(m) for m in side.get("metric_facts", [])]
    evidence.hang_suspected = bool(side.get("hang_suspected", False))
    evidence.straggler_hosts = list(side.get("straggler_hosts", []))
    evidence.node_failure_counts = dict(side.get("node_failure_counts", {}))
    return attribute_lines(evidence, sorted(scan.lines.items()), catalogue=catalogue, hits=scan.hits)


def baseline_case(log: Path, catalogue: Catalogue) -> str:
    """First line matching a fatal- or error-severity pattern decides; nothing -> none."""
    from activities.detection.verdict import screener_for

    screener = screener_for(catalogue)
    specs = catalogue.by_id()
    result = screener.scan_bytes(log.read_bytes())  # type: ignore[attr-defined]
    for hit in sorted(result.hits, key=lambda h: h.line_no):
        spec = specs.get(hit.pattern_id)
        if spec is not None and spec.severity in ("fatal", "error") and not spec.benign:
            return spec.category.value
    return "none"


def score(pairs: list[tuple[str, str]]) -> dict:
    """Per-class precision/recall/F1, macro-F1 over classes present, benign false-positive rate."""
    classes = sorted({e for e, _ in pairs} | {p for _, p in pairs})
    per: dict[str, dict] = {}
    f1s = []
    for c in classes:
        tp = sum(1 for e, p in pairs if e == c and p == c)
        fp = sum(1 for e, p in pairs if e != c and p == c)
        fn = sum(1 for e, p in pairs if e == c and p != c)
        prec = tp / (tp + fp) if tp + fp else 0.0
        rec = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        per[c] = {"precision": round(prec, 3), "recall": round(rec, 3), "f1": round(f1, 3), "support": tp + fn}
        if tp + fn:  # classes with no expected case do not count toward macro-F1
            f1s.append(f1)
    benign = [p for e, p in pairs if e == "none"]
    fp_rate = sum(1 for p in benign if p != "none") / len(benign) if benign else 0.0
    accuracy = sum(1 for e, p in pairs if e == p) / len(pairs) if pairs else 0.0
    return {
        "per_class": per,
        "macro_f1": round(sum(f1s) / len(f1s), 4) if f1s else 0.0,
        "accuracy": round(accuracy, 4),
        "benign_fp_rate": round(fp_rate, 4),
        "cases": len(pairs),
    }


def evaluate(split: str, *, quick: bool, verbose: bool, catalogue: Catalogue) -> dict:
    cases = load_cases(split)
    if quick:
        cases = cases[::3] if split == "tuning" else cases
    engine_pairs, base_pairs = [], []
    host_ok = domain_ok = 0
    misses = []
    t0 = time.perf_counter()
    for log, side in cases:
        verdict = run_case(log, side, catalogue=catalogue)
        expected = side["category"]
        engine_pairs.append((expected, verdict.category.value))
        base_pairs.append((expected, baseline_case(log, catalogue)))
        if sorted(verdict.implicated.hosts) == sorted(side.get("hosts", [])):
            host_ok += 1
        if verdict.fault_domain.value == side.get("fault_domain"):
            domain_ok += 1
        if verdict.category.value != expected or sorted(verdict.implicated.hosts) != sorted(side.get("hosts", [])):
            misses.append((log.name, expected, verdict.category.value, side.get("hosts", []), verdict.implicated.hosts))
    elapsed = time.perf_counter() - t0
    engine, base = score(engine_pairs), score(base_pairs)
    n = max(1, len(cases))
    engine["host_exact_match"] = round(host_ok / n, 4)
    engine["fault_domain_accuracy"] = round(domain_ok / n, 4)
    print(f"\n== split: {split}  ({len(cases)} cases, {elapsed:.2f}s)")
    print(f"{'class':<14}{'prec':>7}{'rec':>7}{'f1':>7}{'n':>5}   baseline f1")
    for c in CATEGORIES:
        if c in engine["per_class"] or c in base["per_class"]:
            e = engine["per_class"].get(c, {"precision": 0, "recall": 0, "f1": 0, "support": 0})
            b = base["per_class"].get(c, {"f1": 0})
            print(f"{c:<14}{e['precision']:>7.2f}{e['recall']:>7.2f}{e['f1']:>7.2f}{e['support']:>5}   {b['f1']:.2f}")
    print(f"engine:   macro-F1 {engine['macro_f1']:.3f}  accuracy {engine['accuracy']:.3f}  benign FP {engine['benign_fp_rate']:.3f}"
          f"  hosts exact {engine['host_exact_match']:.3f}  domain {engine['fault_domain_accuracy']:.3f}")
    print(f"baseline (first fatal/error match wins): macro-F1 {base['macro_f1']:.3f}  accuracy {base['accuracy']:.3f}"
          f"  benign FP {base['benign_fp_rate']:.3f}")
    if verbose and misses:
        print("misses (case, expected, got, expected hosts, got hosts):")
        for m in misses:
            print("  ", *m)
    return {"engine": {k: v for k, v in engine.items() if k != "per_class"},
            "baseline": {k: v for k, v in base.items() if k != "per_class"},
            "per_class_f1": {c: v["f1"] for c, v in engine["per_class"].items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a third of the tuning split (whole holdout); seconds")
    parser.add_argument("--split", choices=["tuning", "holdout", "blind", "blind2", "all"], default="all")
    parser.add_argument("--verbose", action="store_true", help="list the cases the engine gets wrong")
    args = parser.parse_args(argv)
    catalogue = load_catalogue()
    splits = ["tuning", "holdout", "blind", "blind2"] if args.split == "all" else [args.split]
    figures: dict = {"catalogue_version": catalogue.version, "quick": args.quick,
                     "baseline": "first fatal/error-severity catalogue match wins"}
    for split in splits:
        if not (CORPUS / split).is_dir():
            print(f"split {split} missing under {CORPUS}", file=sys.stderr)
            continue
        figures[split] = evaluate(split, quick=args.quick, verbose=args.verbose, catalogue=catalogue)
    summary = {}
    for split in splits:
        if split in figures:
            summary[f"{split}_macro_f1"] = figures[split]["engine"]["macro_f1"]
            summary[f"{split}_benign_fp_rate"] = figures[split]["engine"]["benign_fp_rate"]
            summary[f"{split}_baseline_macro_f1"] = figures[split]["baseline"]["macro_f1"]
    figures.update(summary)
    print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
