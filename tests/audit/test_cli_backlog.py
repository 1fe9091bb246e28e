"""`jobmedic audit` says when the store is behind: the lines it prints from the running recoveries' backlog."""

from __future__ import annotations

from workers.commands.audit import Backlog, format_behind, format_doubt


def test_nothing_behind_says_nothing() -> None:
    assert format_behind(Backlog(asked=3)) is None
    assert format_doubt(Backlog(asked=3)) is None


def test_behind_names_the_jobs_most_first() -> None:
    line = format_behind(Backlog(entries=7, jobs=[("c", "17_2", 5), ("c", "18", 2)], asked=4))
    assert line is not None and line.startswith("BEHIND: 7 audit entries of 2 running recoveries not in the store")
    assert line.endswith(": 17_2 (5), 18 (2)")


def test_one_entry_of_one_recovery_and_a_long_list_cut() -> None:
    assert "1 audit entry of 1 running recovery" in (format_behind(Backlog(entries=1, jobs=[("c", "9", 1)])) or "")
    many = Backlog(entries=12, jobs=[("c", str(i), 1) for i in range(12)])
    assert (format_behind(many, shown=10) or "").endswith("… 2 more")


def test_doubts_are_said() -> None:
    assert "could not ask Temporal" in (format_doubt(Backlog(error="refused")) or "")
    assert "2 running recoveries did not answer" in (format_doubt(Backlog(asked=5, unanswered=2)) or "")
