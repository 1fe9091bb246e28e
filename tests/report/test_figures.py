"""Table tests of `workers.report` over the hand-built trail of conftest.py (figures worked out by hand)."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from workers.report import (
    build_report,
    first_recovery_figures,
    job_figures,
    parse_time,
    percentile,
    summarize,
)
from workflows.contracts import AuditEntry, EventType

from .conftest import NOW, T0, Make, at

# (cluster, job): (first_seen, span_end, ended, wall_s, productive_s, [incident outcomes], stragglers, retries_stopped)
JOBS = {
    ("lab", "100"): (0, 300, "completed", 300.0, 197.0, ["restored", "restored"], 0, {}),
    ("lab", "200"): (50, 55, "stopped", 5.0, 0.0, ["stopped"], 0, {"same_error_twice": 1}),
    ("lab", "300"): (190, 400, None, 210.0, 50.0, ["watchdog"], 0, {}),
    ("other", "400"): (8, 400, None, 392.0, 0.0, ["superseded", "open"], 0, {"retry_budget": 1}),
    ("other", "500"): (100, 400, None, 300.0, 300.0, [], 1, {}),
}

# (cluster, job, n): detection, action, action kind, action->running, restore, downtime
INCIDENTS = {
    ("lab", "100", 0): (3.0, 5.0, "release", 5.0, 25.0, 33.0),
    ("lab", "100", 1): (30.0, 5.0, "release", 15.0, 35.0, 70.0),
    ("lab", "200", 0): (None, 4.0, "cancel", None, None, 5.0),
    ("lab", "300", 0): (10.0, None, None, None, None, 160.0),
    ("other", "400", 0): (2.0, 2.0, "release", 2.0, None, 392.0),
    ("other", "400", 1): (1.0, None, None, None, None, 381.0),
}


def _jobs(entries: list[AuditEntry], **kw):
    return {(j.cluster, j.job_id): j for j in job_figures(entries, **kw)}


@pytest.mark.parametrize("key", list(JOBS), ids=lambda k: "-".join(k))
def test_job_figures(scenario: list[AuditEntry], key: tuple[str, str]) -> None:
    first, end, ended, wall, productive, outcomes, stragglers, stops = JOBS[key]
    job = _jobs(scenario, now=NOW)[key]
    assert job.first_seen == at(first)
    assert job.span_end == at(end)
    assert job.ended == ended
    assert job.wall_s == wall
    assert job.productive_s == productive
    assert job.ettr == productive / wall
    assert [i.outcome for i in job.incidents] == outcomes
    assert job.stragglers == stragglers
    assert job.retries_stopped == stops


@pytest.mark.parametrize("key", list(INCIDENTS), ids=lambda k: "-".join(map(str, k)))
def test_incident_figures(scenario: list[AuditEntry], key: tuple[str, str, int]) -> None:
    detection, action, kind, running, restore, downtime = INCIDENTS[key]
    incident = _jobs(scenario, now=NOW)[key[:2]].incidents[key[2]]
    assert incident.detection_latency_s == detection
    assert incident.action_latency_s == action
    assert incident.action == kind
    assert incident.action_to_running_s == running
    assert incident.restore_s == restore
    assert incident.downtime_s == downtime


def test_invalid_opt_ins_are_no_job(scenario: list[AuditEntry]) -> None:
    assert ("lab", "9") not in _jobs(scenario, now=NOW)
    assert set(_jobs(scenario, now=NOW)) == set(JOBS)


def test_cluster_figures(scenario: list[AuditEntry]) -> None:
    report = build_report(scenario, now=NOW)
    lab, other = report.clusters
    assert (lab.cluster, other.cluster) == ("lab", "other")

    assert (lab.jobs, lab.incidents, lab.stragglers) == (3, 4, 0)
    assert lab.outcomes == {"restored": 2, "completed": 0, "stopped": 1, "watchdog": 1, "superseded": 0, "open": 0}
    assert (lab.succeeded, lab.failed, lab.open, lab.success_rate) == (2, 2, 0, 0.5)
    assert lab.detection_latency.count == 3
    assert lab.detection_latency.median_s == 10.0
    assert lab.detection_latency.p95_s == pytest.approx(28.0)  # 10 + 0.9 * (30 - 10)
    assert lab.detection_latency.max_s == 30.0
    assert (lab.action_latency.count, lab.action_latency.median_s, lab.action_latency.p95_s) == (3, 5.0, 5.0)
    assert (lab.action_to_running.median_s, lab.action_to_running.p95_s) == (10.0, pytest.approx(14.5))
    assert lab.time_to_restore.count == 2
    assert (lab.time_to_restore.median_s, lab.time_to_restore.p95_s) == (30.0, pytest.approx(34.5))
    assert lab.retries_stopped == {"same_error_twice": 1}
    assert lab.retries_stopped_total == 1
    assert (lab.wall_s, lab.productive_s) == (515.0, 247.0)
    assert lab.ettr == 247.0 / 515.0  # ratio of sums, not the mean of 0.657, 0, 0.238

    assert (other.jobs, other.incidents, other.stragglers) == (2, 2, 1)
    assert (other.succeeded, other.failed, other.open, other.success_rate) == (0, 1, 1, 0.0)
    assert (other.detection_latency.median_s, other.detection_latency.p95_s) == (1.5, pytest.approx(1.95))
    assert other.action_latency.count == 1
    assert other.time_to_restore.count == 0 and other.time_to_restore.median_s is None
    assert other.retries_stopped == {"retry_budget": 1}
    assert (other.wall_s, other.productive_s, other.ettr) == (692.0, 300.0, 300.0 / 692.0)


def test_without_now_jobs_end_at_their_last_entry(scenario: list[AuditEntry]) -> None:
    jobs = _jobs(scenario)
    assert (jobs["lab", "300"].span_end, jobs["lab", "300"].wall_s, jobs["lab", "300"].productive_s) == (at(350), 160.0, 0.0)
    assert (jobs["other", "400"].wall_s, jobs["other", "400"].productive_s) == (13.0, 0.0)
    assert (jobs["other", "500"].wall_s, jobs["other", "500"].ettr) == (100.0, 1.0)
    # ended jobs do not depend on now
    assert jobs["lab", "100"].wall_s == 300.0


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_entry_order_does_not_matter(scenario: list[AuditEntry], seed: int) -> None:
    shuffled = list(scenario)
    random.Random(seed).shuffle(shuffled)
    assert shuffled != scenario
    assert build_report(shuffled, now=NOW) == build_report(scenario, now=NOW)


def test_ties_follow_the_recovery_order(make: Make) -> None:
    """Entries with the same timestamp are read detection, advice, action, ..., completed."""
    same = [
        make("lab", "7", EventType.PROGRESS_RESTORED, 10),
        make("lab", "7", EventType.ACTION_CONFIRMED, 10, action="release"),
        make("lab", "7", EventType.DETECTION, 10, detail={"incident": "failed", "failure_at": at(9).isoformat()}),
    ]
    (job,) = job_figures(same)
    (incident,) = job.incidents
    assert (incident.outcome, incident.action_latency_s, incident.restore_s) == ("restored", 0.0, 0.0)


def test_a_job_without_incident_has_ettr_one(make: Make) -> None:
    (job,) = job_figures([make("lab", "8", EventType.COMPLETED, 30)])
    assert (job.wall_s, job.ettr, job.incidents) == (0.0, 1.0, [])
    (job,) = job_figures([make("lab", "8", EventType.CHECKPOINT_SAVED, 30)], now=at(90))
    assert (job.wall_s, job.productive_s, job.ettr) == (60.0, 60.0, 1.0)


def test_a_recycled_job_id_is_another_job(make: Make) -> None:
    old = make("lab", "5", EventType.COMPLETED, 10)
    new = make("lab", "5", EventType.COMPLETED, 20, submit_time=T0)
    assert [j.submit_time for j in job_figures([new, old])] == [old.submit_time, T0]


def test_unreadable_failure_time_is_skipped(make: Make) -> None:
    entries = [
        make("lab", "6", EventType.DETECTION, 10, detail={"incident": "failed", "failure_at": "yesterday"}),
        make("lab", "6", EventType.DETECTION, 20, detail={"incident": "failed", "failure_at": None}),
        make("lab", "6", EventType.DETECTION, 30, detail=None),
    ]
    (job,) = job_figures(entries)
    assert [i.detection_latency_s for i in job.incidents] == [None, None, None]
    assert [i.outcome for i in job.incidents] == ["superseded", "superseded", "open"]
    # downtime from the first detection to the end of the trail
    assert (job.wall_s, job.productive_s) == (20.0, 0.0)


def test_naive_times_are_utc(make: Make) -> None:
    naive = T0.replace(tzinfo=None)
    entries = [
        make("lab", "3", EventType.DETECTION, 0, timestamp=naive + timedelta(seconds=10),
             detail={"incident": "failed", "failure_at": (naive + timedelta(seconds=4)).isoformat()}),
        make("lab", "3", EventType.ACTION_CONFIRMED, 12, action="release"),
    ]
    (job,) = job_figures(entries)
    assert job.incidents[0].detection_latency_s == 6.0
    assert job.incidents[0].action_latency_s == 2.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-29T12:00:07+00:00", at(7)),
        ("2026-11-29T12:00:07Z", at(7)),
        ("2026-11-29T13:00:07+01:00", at(7)),
        ("2026-11-29T12:00:07", at(7)),
        ("", None),
        ("Unknown", None),
        (None, None),
        (1234, None),
    ],
)
def test_parse_time(text: object, expected: object) -> None:
    assert parse_time(text) == expected


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 50, None),
        ([4.0], 95, 4.0),
        ([1.0, 2.0], 50, 1.5),
        ([3.0, 1.0, 2.0], 50, 2.0),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 100, 5.0),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 95, 4.8),
    ],
)
def test_percentile(values: list[float], q: float, expected: float | None) -> None:
    assert percentile(values, q) == (pytest.approx(expected) if expected is not None else None)


def test_summarize_ignores_missing_values() -> None:
    summary = summarize([None, 2.0, None, 6.0])
    assert (summary.count, summary.median_s, summary.max_s) == (2, 4.0, 6.0)
    assert summarize([None]).count == 0


def test_first_recovery_figures_keep_the_demo_keys(scenario: list[AuditEntry]) -> None:
    job = [e for e in scenario if e.job_id == "100"]
    assert first_recovery_figures(job) == {
        "failure_to_detection_s": 3.0,
        "detection_to_action_confirmed_s": 5.0,
        "action_to_running_s": 5.0,
        "action_to_progress_s": 25.0,
    }
    assert first_recovery_figures([]) == dict.fromkeys(first_recovery_figures(job))


def test_downtime_ends_at_the_first_sign_of_training(make: Make) -> None:
    """A checkpoint after an incident ends its downtime even when a later incident has a progress_restored."""
    entries = [
        make("lab", "4", EventType.DETECTION, 10, mode="observe", detail={"incident": "failed", "failure_at": at(8).isoformat()}),
        make("lab", "4", EventType.CHECKPOINT_SAVED, 50, detail={"iteration": 5}),
        make("lab", "4", EventType.DETECTION, 100, detail={"incident": "failed", "failure_at": at(95).isoformat()}),
        make("lab", "4", EventType.ACTION_CONFIRMED, 105, action="release"),
        make("lab", "4", EventType.PROGRESS_RESTORED, 130),
        make("lab", "4", EventType.COMPLETED, 200),
    ]
    (job,) = job_figures(entries)
    assert [i.downtime_s for i in job.incidents] == [42.0, 35.0]
    # the first incident's job trained again, but nothing restored it: only Slurm's own requeue did
    assert [i.outcome for i in job.incidents] == ["superseded", "restored"]
    assert (job.wall_s, job.productive_s) == (192.0, 115.0)
