"""jobmedic's mark on a Slurm job: which deployment acted on it, what it did last, when, and whether it holds it.

The mark lives in the job's `AdminComment`, which only operators (SlurmUser,
root, admins) can set, so a user cannot forge one. It is one segment of that
field, e.g.

    jobmedic:prod-a requeue_hold 2025-06-01T10:00:00Z holding

(`jobmedic:<deployment> <action> <UTC time>[ holding]`). Any other text an
operator keeps there stays: segments are separated by ` | ` and only the
jobmedic segment is replaced.

What jobmedic decides from it:
- it releases a hold only when the mark names its own deployment and says
  `holding` (never from restart counts or hold reasons);
- a job whose mark names another deployment is never acted on (the first
  deployment to act on a job owns it for the job's lifetime);
- an operator reads who holds a job, and since when, in `scontrol show job`.

Slurm behaviour relied on (22.05.8, observed on the local test cluster):
the AdminComment survives `scontrol requeuehold` and `release`, `squeue --json`
prints it as `admin_comment`, and `scontrol update` refuses it for a job that
has ended ("Job has already finished"): on such a job the mark is written
right after the requeue-hold, not before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

PREFIX = "jobmedic:"
SEPARATOR = " | "
DEPLOYMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_STAMP = "%Y-%m-%dT%H:%M:%SZ"
_MARK = re.compile(
    r"jobmedic:(?P<owner>[A-Za-z0-9][A-Za-z0-9_.-]{0,62}) (?P<action>[a-z_]{1,32}) "
    r"(?P<at>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)(?P<holding> holding)?"
)


@dataclass(frozen=True)
class Mark:
    """What one jobmedic deployment last did to a job."""

    owner: str
    action: str
    at: datetime
    holding: bool = False

    def text(self) -> str:
        return f"{PREFIX}{self.owner} {self.action} {self.at.astimezone(UTC).strftime(_STAMP)}" + (
            " holding" if self.holding else ""
        )


def read_mark(admin_comment: str) -> Mark | None:
    """The jobmedic segment of an AdminComment; None when there is none (or it is not well formed)."""
    found: Mark | None = None
    for segment in (admin_comment or "").split(SEPARATOR.strip()):
        match = _MARK.fullmatch(segment.strip())
        if match is None:
            continue
        at = datetime.strptime(match["at"], _STAMP).replace(tzinfo=UTC)
        found = Mark(owner=match["owner"], action=match["action"], at=at, holding=bool(match["holding"]))
    return found


def with_mark(admin_comment: str, mark: Mark) -> str:
    """`admin_comment` with its jobmedic segment replaced by `mark` (other segments kept, in order)."""
    others = [
        segment.strip()
        for segment in (admin_comment or "").split(SEPARATOR.strip())
        if segment.strip() and not segment.strip().startswith(PREFIX)
    ]
    return SEPARATOR.join([*others, mark.text()])


def valid_deployment(name: str) -> bool:
    return DEPLOYMENT_NAME.fullmatch(name) is not None
