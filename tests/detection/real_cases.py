"""The real-format tune excerpts as the detection tests read them: one loader for every test file.

`verdict_of(name)` runs a tune case through `bench/attribution.py`'s own `run_case` (the
benchmark's way of building the job's context from the sidecar), so a test and the
benchmark judge a case the same way. Holdout cases are never read here.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from activities.detection.catalogue import load_catalogue

ROOT = Path(__file__).resolve().parents[2]
TUNE = ROOT / "tests" / "corpus" / "real" / "tune"
_spec = importlib.util.spec_from_file_location("bench_attribution_cases", ROOT / "bench" / "attribution.py")
assert _spec is not None and _spec.loader is not None
BENCH = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(BENCH)
CATALOGUE = load_catalogue()


def sidecar(name: str) -> dict:
    return json.loads((TUNE / f"{name}.expected.json").read_text())


def verdict_of(name: str, *, log_only: bool = False):
    """The verdict on tune case `name`, with the job's Slurm facts (or, `log_only`, the log alone)."""
    return BENCH.run_case(TUNE / f"{name}.log", sidecar(name), catalogue=CATALOGUE, log_only=log_only)


def verdict_of_edited(name: str, edit, tmp_path: Path, *, side: dict | None = None):
    """The verdict on tune case `name` with its log text passed through `edit` (a variant a test needs: a line
    taken out, an id changed), judged against its own sidecar or `side`."""
    log = tmp_path / f"{name}.log"
    log.write_text(edit((TUNE / f"{name}.log").read_text()))
    return BENCH.run_case(log, side if side is not None else sidecar(name), catalogue=CATALOGUE)


def expect(name: str, category, *, hosts: list[str] | None = None, ranks: list[int] | None = None,
           gpus: list[str] | None = None):
    """The verdict on tune case `name`, checked: its category, and the hosts, ranks and GPUs given (those left
    out are not checked). Returns the verdict for further checks."""
    v = verdict_of(name)
    assert v.category == category, v.explanation
    if hosts is not None:
        assert v.implicated.hosts == hosts, v.explanation
    if ranks is not None:
        assert v.implicated.ranks == ranks, v.explanation
    if gpus is not None:
        assert v.implicated.gpus == gpus, v.explanation
    return v
