"""Checks that a configuration fits the scheduler it drives, for the worker's start and a `jobmedic check`.

Each check is a pure function over settings and facts read from the
scheduler that returns the problems it finds, each saying what to change;
`warn_about_decision_timing` reads the facts and logs the problems.

decision_timing: jobmedic decides about a failed job while Slurm still shows
it FAILED (decide, then act) and requeues it only to restart it. slurmctld
forgets a finished job `MinJobAge` after its end (300 s by default), and a job
it forgot cannot be requeued. From the end to the requeue takes at most one
poll interval (detection), the decision deadline, and one attempt of the
requeue-hold (`activity_timeout_s`).
- error: those three add up to MinJobAge or more: a restart can come too late.
- warning: detection plus decision take more than half of MinJobAge (the
  decision does not sit "well inside" it: a slow scheduler or a retried
  activity eats the rest).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from loguru import logger

from adapters.errors import JobmedicError
from adapters.slurm.ctld_config import DEFAULT_MIN_JOB_AGE_S
from workers.settings import ClusterSettings


@dataclass(frozen=True)
class Problem:
    severity: Literal["error", "warning"]
    message: str


class _ReadsMinJobAge(Protocol):
    async def min_job_age_s(self) -> float: ...


def decision_timing(cluster: ClusterSettings, *, min_job_age_s: float) -> list[Problem]:
    """Whether a failed job is decided on and requeued well inside Slurm's MinJobAge (see the module docstring)."""
    w = cluster.watchdog
    detect_and_decide = cluster.poll_interval_s + w.decision_deadline_s
    to_requeue = detect_and_decide + w.activity_timeout_s
    where = f"clusters.{cluster.name}"
    if to_requeue >= min_job_age_s:
        return [
            Problem(
                "error",
                f"{where}: poll_interval_s ({cluster.poll_interval_s:g}) + watchdog.decision_deadline_s "
                f"({w.decision_deadline_s:g}) + watchdog.activity_timeout_s ({w.activity_timeout_s:g}) = "
                f"{to_requeue:g} s is not inside Slurm's MinJobAge ({min_job_age_s:g} s): a failed job can be "
                f"forgotten by slurmctld before jobmedic requeues it. Lower watchdog.decision_deadline_s to at most "
                f"{max(min_job_age_s / 2 - cluster.poll_interval_s, 0):g}, or raise MinJobAge in slurm.conf to at "
                f"least {2 * detect_and_decide:g}.",
            )
        ]
    if detect_and_decide > min_job_age_s / 2:
        return [
            Problem(
                "warning",
                f"{where}: poll_interval_s + watchdog.decision_deadline_s = {detect_and_decide:g} s is more than "
                f"half of Slurm's MinJobAge ({min_job_age_s:g} s); a slow decision leaves little time for the "
                f"requeue. Lower watchdog.decision_deadline_s to at most "
                f"{max(min_job_age_s / 2 - cluster.poll_interval_s, 0):g}, or raise MinJobAge in slurm.conf.",
            )
        ]
    return []


async def warn_about_decision_timing(cluster: ClusterSettings, slurm: _ReadsMinJobAge) -> list[Problem]:
    """Read MinJobAge from the cluster, log every timing problem, and return them."""
    try:
        age = await slurm.min_job_age_s()
    except JobmedicError as exc:
        age = DEFAULT_MIN_JOB_AGE_S
        logger.warning(
            "cluster {}: could not read MinJobAge ({}); checking the decision deadline against Slurm's default {:g} s",
            cluster.name, exc, age,
        )
    problems = decision_timing(cluster, min_job_age_s=age)
    for problem in problems:
        logger.warning("{}: {}", problem.severity, problem.message)
    return problems
