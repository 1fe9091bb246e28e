"""`jobmedic audit` and `jobmedic timeline` as a user runs them, against a store filled beforehand."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from adapters.audit import AuditStore
from workflows.contracts import AuditEntry, EventType

Make = Callable[..., AuditEntry]
JOBMEDIC = str(Path(sys.executable).with_name("jobmedic"))
REQUIRED = {"event_type", "job_id", "timestamp", "action", "category", "implicated_nodes", "mode"}


def jobmedic(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([JOBMEDIC, *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def cli_store(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_entry: Make
) -> tuple[AuditStore, list[AuditEntry]]:
    """A store the CLI finds through the environment, with one recovery of job 4242 and some noise."""
    monkeypatch.delenv("JOBMEDIC_CONFIG", raising=False)
    monkeypatch.setenv("JOBMEDIC_DATA_DIR", str(tmp_path / "data"))
    if store_url.startswith("sqlite"):
        # the embedded default: <data_dir>/audit.db, no audit.url at all
        monkeypatch.delenv("JOBMEDIC_AUDIT__URL", raising=False)
        store_url = f"sqlite:///{tmp_path / 'data' / 'audit.db'}"
    else:
        monkeypatch.setenv("JOBMEDIC_AUDIT__URL", store_url)
    now = datetime.now(UTC).replace(microsecond=0)
    failed = now - timedelta(minutes=10)
    submit = now - timedelta(hours=1)
    steps = [
        (EventType.DETECTION, 0.0, {"category": "nccl_error", "fault_domain": "network", "implicated_nodes": ["node2"],
                                    "pattern_id": "nccl.remote", "line": "NCCL WARN peer node2 error 12"}),
        (EventType.ADVICE, 1.5, {"category": "nccl_error", "action": "restart_exclude", "rule": "hardware_exclude",
                                 "implicated_nodes": ["node2"]}),
        (EventType.ACTION_CONFIRMED, 5.7, {"action": "exclude_nodes", "outcome": "excluded node2",
                                           "implicated_nodes": ["node2"]}),
        (EventType.ALLOCATION_RESTART, 42.0, {"outcome": "running on node1,node3"}),
        (EventType.COMPLETED, 250.0, {"outcome": "COMPLETED"}),
    ]
    entries = [
        make_entry(cluster="lab", job_id="4242", submit_time=submit, attempt=1, mode="action",
                   workflow_id="jobmedic-lab-4242", event_type=kind,
                   timestamp=failed + timedelta(seconds=offset), **fields)
        for kind, offset, fields in steps
    ]
    noise = [
        make_entry(cluster="other", job_id="4242", event_type=EventType.INVALID_OPT_IN,
                   timestamp=now - timedelta(days=3), outcome="comment is not JSON", mode="observe"),
        make_entry(cluster="lab", job_id="77", event_type=EventType.ADVICE, timestamp=now - timedelta(minutes=1),
                   action="stop", rule="same_error_twice", mode="observe", category="app_error"),
    ]
    store = AuditStore(store_url)
    store.record_many(entries + noise)
    return store, entries


def test_audit_json_lists_the_entries_of_one_job(cli_store: tuple[AuditStore, list[AuditEntry]]) -> None:
    _, entries = cli_store
    done = jobmedic("audit", "--job", "4242", "--cluster", "lab", "--format", "json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert isinstance(listed, list) and len(listed) == len(entries)
    for item, entry in zip(listed, entries, strict=True):
        assert REQUIRED <= set(item)
        assert item["event_type"] == entry.event_type.value
        assert item["job_id"] == "4242"
        assert datetime.fromisoformat(item["timestamp"]) == entry.timestamp
        assert item["implicated_nodes"] == entry.implicated_nodes
        assert item["action"] == entry.action and item["category"] == entry.category and item["mode"] == "action"


def test_audit_filters_by_time_type_and_limit(cli_store: tuple[AuditStore, list[AuditEntry]]) -> None:
    def events(*args: str) -> list[tuple[str, str]]:
        done = jobmedic("audit", "--format", "json", *args)
        assert done.returncode == 0, done.stderr
        return [(e["cluster"], e["event_type"]) for e in json.loads(done.stdout)]

    assert len(events()) == 7
    assert ("other", "invalid_opt_in") not in events("--since", "2d")
    assert events("--since", "2m") == [("lab", "advice")]
    assert events("--type", "advice") == [("lab", "advice"), ("lab", "advice")]
    both = events("--type", "completed", "--type", "invalid_opt_in")
    assert both == [("other", "invalid_opt_in"), ("lab", "completed")]
    assert events("--limit", "2") == [("lab", "completed"), ("lab", "advice")]  # the newest two, oldest first
    since = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S")
    assert events("--since", since) == [("lab", "advice")]
    assert events("--job", "nope") == []


def test_audit_csv_has_a_header_and_one_row_per_entry(cli_store: tuple[AuditStore, list[AuditEntry]]) -> None:
    _, entries = cli_store
    done = jobmedic("audit", "--job", "4242", "--cluster", "lab", "--format", "csv")
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert len(rows) == len(entries)
    assert REQUIRED <= set(rows[0])
    assert [r["event_type"] for r in rows] == [e.event_type.value for e in entries]
    assert json.loads(rows[0]["implicated_nodes"]) == ["node2"]
    assert rows[0]["line"] == "NCCL WARN peer node2 error 12"


def test_audit_table_fits_in_100_columns(cli_store: tuple[AuditStore, list[AuditEntry]]) -> None:
    done = jobmedic("audit")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("TIME (UTC)")
    assert len(lines) == 1 + 7
    assert max(len(line) for line in lines) <= 100
    assert any("restart_exclude" in line and "node2" in line for line in lines)


def test_bad_since_is_a_usage_error(cli_store: tuple[AuditStore, list[AuditEntry]]) -> None:
    done = jobmedic("audit", "--since", "last tuesday")
    assert done.returncode == 2
    assert "time span" in done.stderr


def test_timeline_shows_deltas_between_steps(cli_store: tuple[AuditStore, list[AuditEntry]]) -> None:
    done = jobmedic("timeline", "4242", "--cluster", "lab")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "job 4242 on lab" in out
    assert "+1.5s" in out and "+4.2s" in out and "+36.3s" in out and "+3m28.0s" in out
    assert "5 entries over 4m10.0s" in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_timeline_json_has_deltas(cli_store: tuple[AuditStore, list[AuditEntry]]) -> None:
    done = jobmedic("timeline", "4242", "--cluster", "lab", "--format", "json")
    assert done.returncode == 0, done.stderr
    items = json.loads(done.stdout)
    assert [i["since_previous_s"] for i in items] == [0.0, 1.5, 4.2, 36.3, 208.0]
    assert [i["since_start_s"] for i in items] == [0.0, 1.5, 5.7, 42.0, 250.0]
    assert REQUIRED <= set(items[0])


def test_timeline_of_an_unknown_job_says_so(cli_store: tuple[AuditStore, list[AuditEntry]]) -> None:
    done = jobmedic("timeline", "999999")
    assert done.returncode == 1
    assert "no audit entries for job 999999" in done.stderr


def test_timeline_without_cluster_separates_job_incarnations(cli_store: tuple[AuditStore, list[AuditEntry]]) -> None:
    done = jobmedic("timeline", "4242")
    assert done.returncode == 0, done.stderr
    assert "job 4242 on lab" in done.stdout and "job 4242 on other" in done.stdout


@pytest.mark.mysql
def test_audit_against_unreachable_mysql_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, closed_port: int, tmp_path: Path
) -> None:
    monkeypatch.delenv("JOBMEDIC_CONFIG", raising=False)
    monkeypatch.setenv("JOBMEDIC_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("JOBMEDIC_AUDIT__URL", f"mysql+pymysql://root@127.0.0.1:{closed_port}/jobmedic")
    done = jobmedic("audit", "--format", "json")
    assert done.returncode == 1
    assert f"is MySQL running at 127.0.0.1:{closed_port}?" in done.stderr
    assert "Traceback" not in done.stderr
