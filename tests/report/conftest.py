"""A hand-built audit trail with known figures: two clusters, five jobs, every kind of outcome.

Offsets are seconds after T0. The figures each test expects are worked out by
hand in tests/report/test_figures.py.

cluster "lab":
  job 100 (action mode): checkpoint at 0; failed at 7, detected 10, held 11, advice 12,
      excluded 13, released 15, running 20, progress 40; checkpoint 60; hang: last progress 100,
      detected 130, released 135, running 150, progress 170; completed 300.
  job 200: detected 50 without failure_at, advice stop (same_error_twice) 52, cancel confirmed 54,
      stopped 55.
  job 300: failed 190, detected 200, watchdog (fail-open release) 320, checkpoint 350; still followed.
  job 9: an invalid opt-in only (no monitored job).
cluster "other":
  job 400 (observe mode): failed 8, detected 10, released 12, running 14; failed again 19, detected 20;
      advice stop (retry_budget, observe) 21; still followed.
  job 500: checkpoints at 100 and 200, a straggler detection at 150; no incident.
NOW (the end of jobs still followed) is T0 + 400 s.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.ports import free_port
from workflows.contracts import AuditEntry, EventType

REPO = Path(__file__).resolve().parents[2]

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
NOW = T0 + timedelta(seconds=400)
SUBMIT = T0 - timedelta(hours=1)

Make = Callable[..., AuditEntry]


def at(offset: float) -> datetime:
    return T0 + timedelta(seconds=offset)


@pytest.fixture
def make() -> Make:
    """`make(cluster, job, event, offset, **fields)`: one entry with a fresh idempotency key."""
    counter = itertools.count(1)

    def build(cluster: str, job_id: str, event: EventType, offset: float, **fields: Any) -> AuditEntry:
        values: dict[str, Any] = {
            "idempotency_key": f"report-test-{cluster}-{job_id}-{next(counter)}",
            "timestamp": at(offset),
            "cluster": cluster,
            "job_id": job_id,
            "submit_time": SUBMIT,
            "workflow_id": f"jobmedic-{cluster}-{job_id}",
            "event_type": event,
            "mode": "action",
        }
        values.update(fields)
        return AuditEntry(**values)

    return build


def failed(offset: float, kind: str = "failed") -> dict[str, Any]:
    return {"incident": kind, "failure_at": at(offset).isoformat(), "observed_at": None}


@pytest.fixture
def scenario(make: Make) -> list[AuditEntry]:
    """The whole trail of the module docstring, in write order."""
    E = EventType
    lab100 = [
        make("lab", "100", E.CHECKPOINT_SAVED, 0, detail={"iteration": 10}),
        make("lab", "100", E.DETECTION, 10, detail=failed(7)),
        make("lab", "100", E.ACTION_CONFIRMED, 11, action="requeue_hold"),
        make("lab", "100", E.ADVICE, 12, action="restart_exclude", rule="hardware_exclude"),
        make("lab", "100", E.ACTION_REQUESTED, 12.5, action="exclude_nodes"),
        make("lab", "100", E.ACTION_CONFIRMED, 13, action="exclude_nodes"),
        make("lab", "100", E.ACTION_REQUESTED, 14, action="release"),
        make("lab", "100", E.ACTION_CONFIRMED, 15, action="release"),
        make("lab", "100", E.ALLOCATION_RESTART, 20, attempt=1),
        make("lab", "100", E.PROGRESS_RESTORED, 40, attempt=1),
        make("lab", "100", E.CHECKPOINT_SAVED, 60, attempt=1, detail={"iteration": 20}),
        # a hang: failure_at is the last progress line's time
        make("lab", "100", E.DETECTION, 130, attempt=1, detail=failed(100, "hang")),
        make("lab", "100", E.ADVICE, 131, action="restart", rule="hang_restart"),
        make("lab", "100", E.ACTION_CONFIRMED, 133, action="requeue_hold"),
        make("lab", "100", E.ACTION_CONFIRMED, 135, action="release"),
        make("lab", "100", E.ALLOCATION_RESTART, 150, attempt=2),
        make("lab", "100", E.PROGRESS_RESTORED, 170, attempt=2),
        make("lab", "100", E.COMPLETED, 300, attempt=2),
    ]
    lab200 = [
        make("lab", "200", E.DETECTION, 50, detail={"incident": "failed"}),  # no failure_at
        make("lab", "200", E.ADVICE, 52, action="stop", rule="same_error_twice"),
        make("lab", "200", E.ACTION_CONFIRMED, 54, action="cancel"),
        make("lab", "200", E.STOPPED, 55, action="stop", rule="same_error_twice"),
    ]
    lab300 = [
        make("lab", "300", E.DETECTION, 200, detail=failed(190)),
        make("lab", "300", E.WATCHDOG, 320, action="release", outcome="attribute did not finish"),
        make("lab", "300", E.CHECKPOINT_SAVED, 350, detail={"iteration": 5}),
    ]
    invalid = [make("lab", "9", E.INVALID_OPT_IN, 5, outcome="comment is not JSON", submit_time=None)]
    other400 = [
        make("other", "400", E.DETECTION, 10, mode="observe", detail=failed(8)),
        make("other", "400", E.ACTION_CONFIRMED, 12, action="release"),
        make("other", "400", E.ALLOCATION_RESTART, 14, attempt=1),
        make("other", "400", E.DETECTION, 20, attempt=1, mode="observe", detail=failed(19)),
        make("other", "400", E.ADVICE, 21, action="stop", rule="retry_budget", mode="observe"),
    ]
    other500 = [
        make("other", "500", E.CHECKPOINT_SAVED, 100, detail={"iteration": 1}),
        make("other", "500", E.DETECTION, 150, detail={"incident": "straggler"}, implicated_nodes=["node3"]),
        make("other", "500", E.CHECKPOINT_SAVED, 200, detail={"iteration": 2}),
    ]
    return [*lab100, *lab200, *lab300, *invalid, *other400, *other500]


# --------------------------------------------------------------------------- a Prometheus of one test


@pytest.fixture
def private_prometheus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Environment for a Prometheus of this test only (its own directory and port); stopped afterwards."""
    directory = tmp_path / "prometheus"
    monkeypatch.setenv("JOBMEDIC_PROMETHEUS_DIR", str(directory))
    monkeypatch.setenv("JOBMEDIC_PROMETHEUS_PORT", str(free_port()))
    yield directory
    subprocess.run([str(REPO / "deploy/prometheus/down.sh")], env=dict(os.environ), capture_output=True, timeout=60, check=False)


async def start_prometheus(directory: Path, port: int) -> str:
    """Start the private Prometheus (deploy/prometheus/up.sh) scraping 127.0.0.1:`port` every second; its URL."""
    up = await asyncio.to_thread(
        subprocess.run,
        [str(REPO / "deploy/prometheus/up.sh"), f"127.0.0.1:{port}"],
        env=dict(os.environ), capture_output=True, text=True, timeout=300, check=False,
    )
    assert up.returncode == 0, up.stdout + up.stderr
    return json.loads((directory / "prometheus.json").read_text())["url"]
