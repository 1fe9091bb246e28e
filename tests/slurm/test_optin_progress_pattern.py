"""`progress_pattern` in the opt-in: a safe pattern is kept, anything else makes the opt-in invalid with a reason."""

from __future__ import annotations

import json

import pytest

from adapters.slurm.optin import MAX_PATTERN_CHARS, parse_opt_in


def _comment(pattern: object) -> str:
    return json.dumps({"jobmedic": {"environment": "prod", "mode": "action", "progress_pattern": pattern}})


@pytest.mark.parametrize(
    "pattern",
    [r"step (\d+)", r"shard (\d+) of (\d+) done", r"^\[rank0\] ok$", r"(?:step|iter)=(\d+)", r"(?:ab){2,5}c",
     r"(?P<it>\d+) samples", r"[a-z]+ (\d+)"],
)
def test_a_safe_pattern_is_kept(pattern: str) -> None:
    result = parse_opt_in(_comment(pattern))
    assert result.opted_in and not result.invalid and result.opt_in.progress_pattern == pattern


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a+)+$", "repeats a group that itself repeats"),  # exponential backtracking
        (r"(\w+\s?)*$", "repeats a group that itself repeats"),
        (r"(?:x\d+)*y", "repeats a group that itself repeats"),
        (r"(ab|a)*c", "repeats an alternation"),
        (r"(x)\1", "back-reference"),
        (r"(?=step)step (\d+)", "look-around"),
        (r"(?<!x)step", "look-around"),
        (r"(x)?(?(1)a|b)", "conditional"),
        (r"\d+\d+\d+x", "open-ended repeats"),  # polynomial: 13 s on a 512-digit line
        (r"step [", "does not compile"),
        ("s" * (MAX_PATTERN_CHARS + 1), "characters long"),
        (42, "must be a string"),
    ],
)
def test_an_unsafe_or_broken_pattern_makes_the_opt_in_invalid(pattern: object, reason: str) -> None:
    result = parse_opt_in(_comment(pattern))
    assert result.invalid and not result.opted_in
    assert reason in result.invalid_reason and "progress_pattern" in result.invalid_reason


def test_no_pattern_and_an_empty_pattern_mean_none() -> None:
    assert parse_opt_in(json.dumps({"jobmedic": {"environment": "prod"}})).opt_in.progress_pattern is None
    assert parse_opt_in(_comment("")).opt_in.progress_pattern is None
