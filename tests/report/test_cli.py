"""`jobmedic report` as a user runs it, against a SQLite audit store filled beforehand."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.audit import AuditStore
from workflows.contracts import AuditEntry

JOBMEDIC = str(Path(sys.executable).with_name("jobmedic"))


def jobmedic(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([JOBMEDIC, *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def filled_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario: list[AuditEntry]) -> Iterator[AuditStore]:
    url = f"sqlite:///{tmp_path}/a.db"
    monkeypatch.delenv("JOBMEDIC_CONFIG", raising=False)
    monkeypatch.setenv("JOBMEDIC_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("JOBMEDIC_AUDIT__URL", url)
    store = AuditStore(url)
    store.record_many(scenario)
    yield store
    store.close()


def report_json(*args: str) -> dict[str, Any]:
    done = jobmedic("report", "--format", "json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_json_report_of_the_whole_trail(filled_store: AuditStore) -> None:
    report = report_json()
    clusters = {c["cluster"]: c for c in report["clusters"]}
    assert set(clusters) == {"lab", "other"}
    lab = clusters["lab"]
    assert (lab["jobs"], lab["incidents"], lab["succeeded"], lab["failed"], lab["success_rate"]) == (3, 4, 2, 2, 0.5)
    assert lab["detection_latency"]["median_s"] == 10.0
    assert lab["detection_latency"]["p95_s"] == pytest.approx(28.0)
    assert lab["action_latency"] == {"count": 3, "median_s": 5.0, "p95_s": 5.0, "max_s": 5.0}
    assert lab["time_to_restore"]["median_s"] == 30.0
    assert lab["retries_stopped"] == {"same_error_twice": 1}
    assert clusters["other"]["retries_stopped"] == {"retry_budget": 1}
    assert clusters["other"]["outcomes"]["superseded"] == 1 and clusters["other"]["outcomes"]["open"] == 1

    jobs = {(j["cluster"], j["job_id"]): j for j in report["jobs"]}
    assert set(jobs) == {("lab", "100"), ("lab", "200"), ("lab", "300"), ("other", "400"), ("other", "500")}
    done = jobs["lab", "100"]  # ended: its figures do not depend on when the report runs
    assert (done["ended"], done["wall_s"], done["productive_s"]) == ("completed", 300.0, 197.0)
    assert done["ettr"] == 197.0 / 300.0
    assert [i["detection_latency_s"] for i in done["incidents"]] == [3.0, 30.0]
    assert [i["restore_s"] for i in done["incidents"]] == [25.0, 35.0]
    assert done["incidents"][0]["failure_at"] == "2026-11-29T12:00:07Z"
    # still followed: its span runs to now, long after the trail's last entry
    assert jobs["other", "500"]["ettr"] == 1.0
    assert jobs["other", "500"]["wall_s"] > 300.0


def test_filters(filled_store: AuditStore) -> None:
    only_job = report_json("--cluster", "lab", "--job", "200")
    assert [(j["cluster"], j["job_id"]) for j in only_job["jobs"]] == [("lab", "200")]
    assert only_job["clusters"][0]["outcomes"]["stopped"] == 1

    # from T0 + 120 s: job 100's first incident and job 200 are before it
    later = report_json("--since", "2026-11-29T12:02:00")
    assert later["since"] == "2026-11-29T12:02:00Z"
    jobs = {(j["cluster"], j["job_id"]): j for j in later["jobs"]}
    assert ("lab", "200") not in jobs
    assert [i["detection_latency_s"] for i in jobs["lab", "100"]["incidents"]] == [30.0]

    nothing = jobmedic("report", "--cluster", "nowhere")
    assert nothing.returncode == 0
    assert "nothing to report" in nothing.stdout


def test_table_report(filled_store: AuditStore) -> None:
    done = jobmedic("report")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["CLUSTER", "JOBS", "INCIDENTS"]
    lab = next(line for line in lines if line.startswith("lab "))
    assert lab.split()[1:5] == ["3", "4", "2/2/0", "0.500"]
    assert any(line.split()[:2] == ["lab", "100"] and line.split()[-1] == "0.657" for line in lines)


def test_bad_since_says_what_is_accepted(filled_store: AuditStore) -> None:
    done = jobmedic("report", "--since", "last tuesday")
    assert done.returncode == 2
    assert "neither a time span" in done.stderr
