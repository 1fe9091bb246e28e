"""The labelled corpus: every tuning case right; the held-out split above a macro-F1 floor."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from activities.detection.catalogue import load_catalogue

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_attribution", ROOT / "bench" / "attribution.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()
TUNING = BENCH.load_cases("tuning")
HOLDOUT = BENCH.load_cases("holdout")
BLIND = BENCH.load_cases("blind")
BLIND2 = BENCH.load_cases("blind2")


def test_corpus_is_large_and_covers_every_category():
    assert len(TUNING) >= 100
    assert len(HOLDOUT) >= 30
    for cases in (TUNING, HOLDOUT):
        cats = {side["category"] for _, side in cases}
        assert len(cats) == 14, sorted(cats)
    benign = [c for c in TUNING if c[1]["category"] == "none"]
    assert len(benign) >= 25


@pytest.mark.parametrize(("log", "side"), TUNING, ids=[p.stem for p, _ in TUNING])
def test_tuning_case(log, side):
    verdict = BENCH.run_case(log, side, catalogue=load_catalogue())
    assert verdict.category.value == side["category"], verdict.explanation
    assert verdict.fault_domain.value == side["fault_domain"], verdict.explanation
    assert sorted(verdict.implicated.hosts) == side["hosts"], verdict.explanation
    assert 0.0 <= verdict.confidence <= 1.0
    if side["category"] != "none":
        assert verdict.evidence, "a verdict must show its evidence"
        assert verdict.explanation.startswith("Root cause:")


@pytest.mark.parametrize("split", ["holdout", "blind", "blind2"])
def test_held_out_macro_f1_floor_and_benign_false_positives(split):
    catalogue = load_catalogue()
    cases = {"holdout": HOLDOUT, "blind": BLIND, "blind2": BLIND2}[split]
    pairs = [(side["category"], BENCH.run_case(log, side, catalogue=catalogue).category.value) for log, side in cases]
    figures = BENCH.score(pairs)
    assert figures["macro_f1"] >= 0.9, figures
    assert figures["benign_fp_rate"] <= 0.03, figures


def test_engine_beats_the_first_match_baseline():
    catalogue = load_catalogue()
    engine = [(s["category"], BENCH.run_case(p, s, catalogue=catalogue).category.value) for p, s in TUNING[::4]]
    base = [(s["category"], BENCH.baseline_case(p, catalogue)) for p, s in TUNING[::4]]
    assert BENCH.score(engine)["macro_f1"] > BENCH.score(base)["macro_f1"] + 0.1


def test_score_counts_precision_and_recall():
    figures = BENCH.score([("a", "a"), ("a", "b"), ("b", "b"), ("none", "a"), ("none", "none")])
    assert figures["per_class"]["a"] == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2}
    assert figures["benign_fp_rate"] == 0.5
