"""The scorecard's three forms: the table, JSON, and one self-contained HTML page; and the command itself."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from adapters.audit import AuditStore
from workers.commands.scorecard import format_html, format_json, format_table
from workers.scorecard import build_scorecard
from tests.scorecard.test_checks import NOW, RESTART, STOP, at, ckpt, det, done, entry, shot, sjob, snode
from workflows.contracts import EventType, JobState

JOBMEDIC = str(Path(sys.executable).with_name("jobmedic"))
EVIL = '<script>alert("x")</script>'


def _entries() -> list:
    return [
        *RESTART, ckpt(60, 1),
        *[e.model_copy(update={"job_id": "2", "idempotency_key": e.idempotency_key + "-2"}) for e in STOP],
        ckpt(5, 0, job="3"), done(90, job="3"),
        det(9, job=EVIL), entry(EventType.ADVICE, 10, job=EVIL, action="restart", rule=EVIL, category=EVIL),
    ]


def _card():
    snapshot = shot(sjob("2", JobState.FAILED, restarts=1),
                    nodes=(snode("node2", flags=("DRAIN",), reason=EVIL, reason_time=at(100)),))
    return build_scorecard(_entries(), [snapshot], now=NOW)


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.scripts += tag == "script"
        self.refs += [v or "" for k, v in attrs if k in {"src", "href"}]


def test_html_is_one_page_with_an_inline_chart_and_nothing_to_fetch() -> None:
    page = format_html(_card())
    parser = _Page()
    parser.feed(page)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "svg" in parser.tags and parser.tags.count("rect") >= 4
    assert parser.refs == [] and parser.scripts == 0  # job-supplied text is escaped, nothing is linked
    assert "&lt;script&gt;" in page
    assert "<link" not in page and "url(" not in page and "@import" not in page
    assert "hardware_exclude" in page and "same_app_error_twice" in page


def test_json_carries_every_check_and_tally() -> None:
    doc = json.loads(format_json(_card()))
    lab = doc["clusters"][0]
    assert {t["group"]: t["jobs"] for t in lab["by_kind"]}["restart"] == {"agree": ["1"], "untested": [EVIL]}
    assert {(c["kind"], c["job_id"], c["result"]) for c in lab["checks"]} >= {
        ("restart", "1", "agree"), ("stop", "2", "agree"), ("healthy", "3", "agree"), ("node", "1", "agree"),
    }


def test_table_shows_tallies_then_checks() -> None:
    text = format_table(_card())
    assert text.splitlines()[0].startswith("CLUSTER lab: 5 checks, agreement 1.00 (Slurm read 2026-11-29 13:00:00 UTC)")
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}
    assert rows["restart"][1:7] == ["1", "0", "0", "1", "1.00", "agree:"]
    assert "agree: 1; untested: <script>" in text
    assert "drained: <script>" in text  # a table is plain text: shown as is, on one line
    assert format_table(build_scorecard([], [])) == "no audit entries match: nothing to score"


@pytest.fixture
def store_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AuditStore:
    url = f"sqlite:///{tmp_path}/a.db"
    monkeypatch.delenv("JOBMEDIC_CONFIG", raising=False)
    monkeypatch.setenv("JOBMEDIC_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("JOBMEDIC_AUDIT__URL", url)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "no-slurm.conf"))  # this scheduler cannot be read
    store = AuditStore(url)
    store.record_many(_entries())
    yield store
    store.close()


def test_the_command_scores_the_trail_alone_when_the_scheduler_cannot_be_read(store_env: AuditStore) -> None:
    cluster = _entries()[0].cluster
    done_ = subprocess.run([JOBMEDIC, "scorecard", "--format", "json"], capture_output=True, text=True, timeout=120)
    assert done_.returncode == 0, done_.stderr
    doc = json.loads(done_.stdout)
    assert [c["cluster"] for c in doc["clusters"]] == [cluster]
    assert doc["clusters"][0]["snapshot_error"]  # "not a configured cluster" or the scheduler's own error
    html = subprocess.run([JOBMEDIC, "scorecard", "--format", "html", "--since", "2026-11-29"],
                          capture_output=True, text=True, timeout=120)
    assert html.returncode == 0 and "<svg" in html.stdout, html.stderr
    unknown = subprocess.run([JOBMEDIC, "scorecard", "--cluster", "nope"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 1 and "no cluster named 'nope'" in unknown.stderr
