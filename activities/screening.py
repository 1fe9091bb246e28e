"""Screening of freshly read log lines for the cluster watch: failure hits and training progress.

A thin seam over the detection engine (`activities/detection/`): the fast
multi-pattern screener finds candidate lines, benign look-alikes are dropped,
and the newest progress and checkpoint lines are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workflows.contracts import EvidenceLine, Progress

# severities that make a line worth a signal to the job's workflow
SIGNAL_SEVERITIES = frozenset({"fatal", "error"})


@dataclass
class ScreenOutcome:
    hits: list[EvidenceLine] = field(default_factory=list)
    progress: Progress | None = None


class LogScreen:
    """Screens batches of log lines with the pattern catalogue; build once per worker."""

    def __init__(self) -> None:
        from activities.detection.catalogue import load_catalogue
        from activities.detection.verdict import screener_for

        catalogue = load_catalogue()
        self._catalogue = catalogue
        self._patterns = {p.id: p for p in catalogue.patterns}
        # the same compiled screener the attribution uses (compiling it takes seconds)
        self._screener = screener_for(catalogue)

    def screen(self, lines: list[str], *, first_line_no: int = 1) -> ScreenOutcome:
        """Failure hits worth a signal, and the newest progress/checkpoint of `lines`."""
        from activities.detection.progress import latest_progress

        data = "\n".join(line.replace("\n", " ") for line in lines).encode("utf-8", "surrogateescape") + b"\n"
        result = self._screener.scan_bytes(data, first_line_no=first_line_no, progress="newest")
        hits = []
        for hit in result.hits:
            spec = self._patterns.get(hit.pattern_id)
            if spec is None or spec.benign or spec.severity not in SIGNAL_SEVERITIES:
                continue
            if self._catalogue.benign_line(hit.line):  # a known harmless look-alike on the same line
                continue
            hits.append(EvidenceLine(source="log", line=hit.line[:2000], line_no=hit.line_no, pattern_id=hit.pattern_id))
        samples = sorted([*result.progress, *result.checkpoints], key=lambda s: s.line_no or 0)
        return ScreenOutcome(hits=hits, progress=latest_progress(samples) if samples else None)
