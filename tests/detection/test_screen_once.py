"""One shape for a flagged line, screened once: from the log reader through the evidence to the verdict.

The evidence window is numbered with file line numbers (from the watch's read
position) and keeps each line's stream; its lines are screened where they are
read, and the verdict cites them as they are in the file without screening
them again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from activities.detection import verdict as verdict_module
from activities.detection.verdict import attribute
from activities.scheduler import SchedulerActivities, _merged_hits
from activities.screening import LogScreen
from adapters.logs.models import LogChunk
from workflows.contracts import (
    Category,
    EvidenceLine,
    JobEvidence,
    JobInfo,
    JobKey,
    JobState,
    LogCursor,
    Stream,
    TaskLayout,
)
from workflows.messages import CollectEvidenceInput

XID = "Nov 29 12:00:01 gpu02 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."
WATCHDOG = ("[rank0]:[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600021 "
            "milliseconds before timing out.")


def failed_job(**kw) -> JobInfo:
    return JobInfo(job_id="7", state=JobState.FAILED, exit_code=1, nodes=["gpu01", "gpu02"],
                   layout=TaskLayout(nodes=["gpu01", "gpu02"], tasks_per_node=[1, 1]), **kw)


@dataclass
class Files:
    """A log reader over in-memory files (the LogSource interface the scheduler activities use)."""

    files: dict[str, list[str]] = field(default_factory=dict)

    async def read(self, cursor: LogCursor, *, max_bytes: int | None = None, final: bool = False) -> LogChunk:
        lines = self.files[cursor.path]
        return LogChunk(lines=lines[cursor.line_no:], first_line_no=cursor.line_no + 1,
                        cursor=cursor.model_copy(update={"line_no": len(lines), "offset": len(lines)}))

    async def tail_window(self, cursor_or_path, *, max_lines: int, max_bytes: int) -> list[str]:
        cursor = cursor_or_path
        return self.files[cursor.path][: cursor.line_no][-max_lines:]


def test_the_verdict_cites_file_lines_and_streams_without_screening_again(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = LogScreen()
    out = [f"step {n}" for n in range(1, 1001)] + [WATCHDOG]
    err = ["warming up", XID]
    window = [EvidenceLine(line=t, line_no=n, stream=Stream.STDOUT) for n, t in enumerate(out, 1)][-400:]
    window += [EvidenceLine(line=t, line_no=n, stream=Stream.STDERR) for n, t in enumerate(err, 1)]
    hits = screen.flag(out[-400:], first_line_no=602, stream=Stream.STDOUT)
    hits += screen.flag(err, first_line_no=1, stream=Stream.STDERR)

    def no_second_screen(*a, **kw):
        raise AssertionError("the verdict screened lines that came screened")

    monkeypatch.setattr(verdict_module, "screener_for", no_second_screen)
    v = attribute(JobEvidence(job=failed_job(stdout_path="/o", stderr_path="/e"), window=window, hits=hits))
    assert v.category is Category.GPU_HARDWARE and v.implicated.hosts == ["gpu02"]
    cited = {(e.line_no, e.stream) for e in v.evidence if e.source == "log"}
    assert (2, Stream.STDERR) in cited  # the Xid: line 2 of stderr, not line 403 of a window
    assert "line 2 of stderr" in v.explanation


def test_raw_lines_are_screened_by_the_verdict_once() -> None:
    v = attribute(JobEvidence(job=failed_job(), log_lines=["step 1", XID], log_first_line_no=51))
    assert v.category is Category.GPU_HARDWARE
    assert [e.line_no for e in v.evidence if e.source == "log"][:1] == [52]


async def test_the_evidence_window_is_numbered_from_the_watchs_position() -> None:
    logs = Files({"/o": [f"step {n}" for n in range(1, 501)] + [WATCHDOG], "/e": ["warming up", XID]})
    acts = SchedulerActivities(slurm=None, logs=logs, screen=LogScreen())  # type: ignore[arg-type]
    job = failed_job(stdout_path="/o", stderr_path="/e")
    watched_to = LogCursor(path="/o", offset=490, line_no=490)  # the watch read 490 lines; 11 came after
    earlier = EvidenceLine(line="an error the watch saw", line_no=3, pattern_id="x", stream=Stream.STDOUT)
    inp = CollectEvidenceInput(key=JobKey(cluster="c", job_id="7"), log_window_lines=100, log_cursors=[watched_to],
                               hits=[earlier])
    window, hits = await acts._log_window(job, inp)
    out = [w for w in window if w.stream is Stream.STDOUT]
    assert (out[0].line_no, out[-1].line_no, out[-1].line) == (402, 501, WATCHDOG)
    assert [(w.line_no, w.line) for w in window if w.stream is Stream.STDERR] == [(1, "warming up"), (2, XID)]
    assert {(h.line_no, h.stream) for h in hits} >= {(501, Stream.STDOUT), (2, Stream.STDERR)}
    merged = _merged_hits(inp.hits, hits, window)
    assert merged[0] is earlier  # before the window: kept; the window's own lines are screened there
