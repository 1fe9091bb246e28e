"""`scontrol show config` parsing and the decision-deadline check against MinJobAge."""

from __future__ import annotations

import pytest

from adapters.errors import ParseError
from adapters.slurm.ctld_config import min_job_age_s, parse_show_config
from workers.checks import decision_timing
from workers.settings import ClusterSettings

# the head of `scontrol show config` on the local cluster (Slurm 22.05.8)
SHOW_CONFIG = """Configuration data as of 2025-06-01T10:00:00
AccountingStorageBackupHost = (null)
AuthInfo                = cred_expire=10
MaxJobCount             = 10000
MinJobAge               = 600 sec
SlurmctldTimeout        = 120 sec

Cgroup Support Configuration:
"""


def test_min_job_age_from_show_config() -> None:
    config = parse_show_config(SHOW_CONFIG)
    assert config["AuthInfo"] == "cred_expire=10"
    assert min_job_age_s(config) == 600.0


def test_min_job_age_default_and_garbage() -> None:
    assert min_job_age_s({}) == 300.0
    with pytest.raises(ParseError, match="MinJobAge"):
        min_job_age_s({"MinJobAge": "soon"})


def _cluster(**watchdog: float) -> ClusterSettings:
    return ClusterSettings.model_validate({"name": "c1", "poll_interval_s": 15.0, "watchdog": watchdog})


def test_the_defaults_sit_well_inside_slurms_default_min_job_age() -> None:
    assert decision_timing(_cluster(), min_job_age_s=300.0) == []


def test_a_decision_deadline_past_half_of_min_job_age_warns() -> None:
    [problem] = decision_timing(_cluster(decision_deadline_s=200.0), min_job_age_s=300.0)
    assert problem.severity == "warning"
    assert "decision_deadline_s to at most 135" in problem.message


def test_a_requeue_that_can_come_after_min_job_age_is_an_error() -> None:
    [problem] = decision_timing(_cluster(decision_deadline_s=120.0, activity_timeout_s=60.0), min_job_age_s=180.0)
    assert problem.severity == "error"
    assert "MinJobAge (180 s)" in problem.message and "raise MinJobAge in slurm.conf to at least 270" in problem.message
