"""What the corpus generators share: the expected-verdict sidecar and writing a split's files.

Each case is `<name>.log` (the lines) beside `<name>.expected.json` (category,
fault domain, implicated hosts and any context such as the job's state).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def expected(category: str, domain: str, hosts: list[str] | None = None, **ctx: object) -> dict:
    """The sidecar of one case: hosts sorted, so that a rewrite gives the same bytes."""
    return {"category": category, "fault_domain": domain, "hosts": sorted(hosts or []), **ctx}


def write_case(out: Path, name: str, lines: list[str], side: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.log").write_text("\n".join(lines) + "\n")
    (out / f"{name}.expected.json").write_text(json.dumps(side, indent=1) + "\n")


def start_afresh(out: Path) -> None:
    """Removes the split's old files, so that a renamed or dropped case leaves nothing behind."""
    if out.exists():
        shutil.rmtree(out)


class Split:
    """Cases collected by a generator module, written together by `write`."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.cases: list[tuple[str, list[str], dict]] = []

    def case(self, name: str, lines: list[str], category: str, domain: str, hosts: list[str] | None = None, **ctx: object) -> None:
        self.cases.append((name, lines, expected(category, domain, hosts, **ctx)))

    def write(self) -> None:
        start_afresh(self.out)
        self.out.mkdir(parents=True)
        for name, lines, side in self.cases:
            write_case(self.out, name, lines, side)
        print(f"wrote {len(self.cases)} cases to {self.out}")
