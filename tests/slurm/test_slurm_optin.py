"""Opt-in parsing from job comments: opted in, not opted in, invalid with a reason; never raises."""

from __future__ import annotations

import json

import pytest

from adapters.slurm.optin import parse_opt_in
from workflows.contracts import Mode


@pytest.mark.parametrize(
    "comment",
    [None, "", "   ", "plain text", "run 7 for jobmedic demo", "[1, 2]", "42", '"jobmedic"',
     '{"other": {"mode": "action"}}', '{"note": "jobmedic: later"}', "not json {", "x" * 100_000],
)
def test_not_opted_in(comment: str | None) -> None:
    result = parse_opt_in(comment)
    assert (result.opted_in, result.invalid_reason, result.opt_in) == (False, None, None)


def test_full_jobmedic_opt_in() -> None:
    comment = json.dumps({"jobmedic": {"environment": "prod", "mode": "action", "max_attempts": 3,
                                        "checkpoint_dir": "/ckpt/run7", "future_field": [1]}})
    result = parse_opt_in(comment)
    assert result.opted_in and not result.invalid
    assert result.opt_in is not None
    assert (result.opt_in.key, result.opt_in.environment, result.opt_in.mode) == ("jobmedic", "prod", Mode.ACTION)
    assert (result.opt_in.max_attempts, result.opt_in.checkpoint_dir) == (3, "/ckpt/run7")


def test_nvidia_recovery_key_and_defaults() -> None:
    result = parse_opt_in('  {"nvidia-recovery": {}}\n')
    assert result.opted_in and result.opt_in is not None
    assert (result.opt_in.key, result.opt_in.environment, result.opt_in.mode) == ("nvidia-recovery", "", Mode.OBSERVE)
    assert result.opt_in.max_attempts is None and result.opt_in.checkpoint_dir is None


def test_mode_is_case_insensitive() -> None:
    result = parse_opt_in('{"jobmedic": {"mode": "Action"}}')
    assert result.opt_in is not None and result.opt_in.mode is Mode.ACTION


@pytest.mark.parametrize(
    ("comment", "reason_part"),
    [
        ('{"jobmedic": {"mode": "observe"', "not valid JSON"),
        ("jobmedic: {mode: action}", "not valid JSON"),
        ('{"jobmedic": "on"}', "must map to a JSON object"),
        ('{"jobmedic": {"mode": "yolo"}}', "'observe' or 'action'"),
        ('{"jobmedic": {"mode": 1}}', "mode must be a string"),
        ('{"jobmedic": {"environment": ["prod"]}}', "environment must be a string"),
        ('{"jobmedic": {"max_attempts": "3"}}', "max_attempts must be a whole number"),
        ('{"jobmedic": {"max_attempts": true}}', "max_attempts must be a whole number"),
        ('{"jobmedic": {"max_attempts": 2.5}}', "max_attempts must be a whole number"),
        ('{"jobmedic": {"max_attempts": NaN}}', "max_attempts must be a whole number"),
        ('{"jobmedic": {"max_attempts": -1}}', "0 or more"),
        ('{"jobmedic": {"checkpoint_dir": 7}}', "checkpoint_dir must be a string"),
        ('{"jobmedic": {}, "nvidia-recovery": {}}', "keep one"),
        ('{"jobmedic": {"environment": "' + "x" * 5000 + '"}}', "at most 4096 bytes"),
        ("[" * 3000 + '"jobmedic": 1' + "]" * 3000, "not valid JSON"),
    ],
)
def test_invalid_opt_in_has_a_reason(comment: str, reason_part: str) -> None:
    result = parse_opt_in(comment, max_bytes=100_000 if comment.startswith("[") else 4096)
    assert not result.opted_in and result.opt_in is None
    assert result.invalid and reason_part in (result.invalid_reason or "")


def test_one_megabyte_comment_is_invalid_not_a_crash() -> None:
    comment = json.dumps({"jobmedic": {"environment": "e" * (1 << 20), "mode": "observe"}})
    result = parse_opt_in(comment)
    assert result.invalid and "bytes" in (result.invalid_reason or "")
