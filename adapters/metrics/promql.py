"""Building PromQL safely: every value from outside (host names) is escaped, never pasted."""

from __future__ import annotations

import json
import math
from datetime import datetime

# characters with a meaning in RE2 (Prometheus regex matchers are RE2, fully anchored)
_RE2_SPECIAL = set("\\.+*?()|[]{}^$-")


def string_literal(value: str) -> str:
    """`value` as a PromQL double-quoted string (Go escapes; JSON's escapes are a subset)."""
    return json.dumps(value, ensure_ascii=False)


def re2_escape(value: str) -> str:
    """`value` as an RE2 pattern that matches exactly that text."""
    return "".join("\\" + ch if ch in _RE2_SPECIAL else ch for ch in value)


def host_matcher(label: str, hosts: list[str]) -> str:
    """A matcher for `label` that selects these hosts, short or fully qualified (`node3.example`)."""
    if not label.replace("_", "a").isalnum() or label[0].isdigit():
        raise ValueError(f"{label!r} is not a Prometheus label name")
    alternatives = "|".join(re2_escape(h) for h in sorted(set(hosts)))
    pattern = "(?:" + alternatives + r")(?:\..*)?"
    return f"{label}=~{string_literal(pattern)}"


def window_seconds(start: datetime, end: datetime) -> int:
    """Whole seconds from start to end (at least 1), for a range selector."""
    return max(1, math.ceil((end - start).total_seconds()))
