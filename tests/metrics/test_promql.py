"""PromQL building: outside values are escaped, never pasted."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from adapters.metrics.promql import host_matcher, re2_escape, string_literal, window_seconds


def test_re2_escape_matches_only_the_literal_text() -> None:
    for text in ["node1", "gpu-a.b", "x|y", "(a)*+?", "[z]{2}^$\\"]:
        # Python's re agrees with RE2 on these escapes
        assert re.fullmatch(re2_escape(text), text)
        assert not re.fullmatch(re2_escape(text), text + "x")


def test_string_literal_escapes_quotes_backslashes_and_newlines() -> None:
    assert string_literal('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'


def test_host_matcher_accepts_fqdn_and_rejects_bad_label_names() -> None:
    matcher = host_matcher("Hostname", ["node2", "node1"])
    assert matcher == 'Hostname=~"(?:node1|node2)(?:\\\\..*)?"'
    with pytest.raises(ValueError, match="label name"):
        host_matcher('Hostname"} or {x="', ["node1"])


def test_window_seconds_rounds_up_and_is_at_least_one() -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    assert window_seconds(t, t) == 1
    assert window_seconds(t, t + timedelta(seconds=90.2)) == 91
