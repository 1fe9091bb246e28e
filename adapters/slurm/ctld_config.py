"""The controller settings jobmedic depends on, read from `scontrol show config`.

`MinJobAge` is the one that matters: slurmctld forgets a finished job that
long after it ended (300 s by default; printed as `MinJobAge = 300 sec`,
22.05). jobmedic decides about a failed job while it stays FAILED and
requeues it only when the decision is a restart, so that decision and the
requeue must both land inside MinJobAge; a job forgotten before them cannot
be requeued any more (it ends as Slurm ended it, which is safe but is not a
restart).
"""

from __future__ import annotations

import re

from adapters.errors import ParseError

DEFAULT_MIN_JOB_AGE_S = 300.0
_LINE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9_]*)\s*=\s*(?P<value>.*?)\s*$")
_SECONDS = re.compile(r"^(?P<n>\d+)(?:\s*(?:sec|secs|s))?$")


def parse_show_config(text: str) -> dict[str, str]:
    """`Key = Value` lines of `scontrol show config` (headers and blank lines skipped)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            values.setdefault(match["key"], match["value"])
    return values


def min_job_age_s(config: dict[str, str]) -> float:
    """MinJobAge in seconds; Slurm's default when the key is missing.

    Raises:
        ParseError: the value is there but is not a number of seconds.
    """
    raw = config.get("MinJobAge")
    if raw is None:
        return DEFAULT_MIN_JOB_AGE_S
    match = _SECONDS.match(raw.strip())
    if match is None:
        raise ParseError("scontrol show config: MinJobAge is not a number of seconds", line=f"MinJobAge = {raw}")
    return float(match["n"])
