"""Screening of log lines where they are read: the cluster watch's fresh lines and the evidence window.

A thin seam over the detection engine (`activities/detection/`): the fast
multi-pattern screener finds the flagged lines, each an `EvidenceLine` with its
file line number and stream. The watch keeps only the lines worth a signal
(benign look-alikes dropped) and the newest progress and checkpoint lines; the
evidence window keeps every flagged line, since the verdict weighs them all and
screens nothing again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workflows.contracts import EvidenceLine, Progress, Stream

# severities that make a line worth a signal to the job's workflow
SIGNAL_SEVERITIES = frozenset({"fatal", "error"})


@dataclass
class ScreenOutcome:
    hits: list[EvidenceLine] = field(default_factory=list)
    progress: Progress | None = None
    progress_line_no: int | None = None  # file line of the newest progress line
    checkpoint_line_nos: list[int] = field(default_factory=list)  # file lines of the checkpoint-save lines


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

    def screen(self, lines: list[str], *, first_line_no: int = 1, stream: Stream | None = None) -> ScreenOutcome:
        """Failure hits worth a signal, and the newest progress/checkpoint of `lines`."""
        from activities.detection.progress import latest_progress

        result = self._screener.scan_bytes(_encode(lines), first_line_no=first_line_no, progress="newest")
        hits = []
        for hit in result.hits:
            spec = self._patterns.get(hit.pattern_id) if hit.pattern_id is not None else None
            if spec is None or spec.benign or spec.severity not in SIGNAL_SEVERITIES:
                continue
            if self._catalogue.benign_line(hit.line):  # a known harmless look-alike on the same line
                continue
            hits.append(_flagged(hit, stream))
        samples = sorted([*result.progress, *result.checkpoints], key=lambda s: s.line_no or 0)
        return ScreenOutcome(
            hits=hits,
            progress=latest_progress(samples) if samples else None,
            progress_line_no=result.progress[-1].line_no if result.progress else None,
            checkpoint_line_nos=[c.line_no for c in result.checkpoints if c.line_no is not None],
        )

    def flag(self, lines: list[str], *, first_line_no: int = 1, stream: Stream | None = None) -> list[EvidenceLine]:
        """Every flagged line of `lines` (one per line and pattern, benign look-alikes too: the verdict counts them)."""
        result = self._screener.scan_bytes(_encode(lines), first_line_no=first_line_no, progress="none")
        return [_flagged(hit, stream) for hit in result.hits]


def _encode(lines: list[str]) -> bytes:
    return "\n".join(line.replace("\n", " ") for line in lines).encode("utf-8", "surrogateescape") + b"\n"


def _flagged(hit: EvidenceLine, stream: Stream | None) -> EvidenceLine:
    return EvidenceLine(source="log", line=hit.line[:2000], line_no=hit.line_no, pattern_id=hit.pattern_id,
                        stream=stream)
