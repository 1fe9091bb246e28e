"""What the per-job recovery workflow remembers about one job across attempts.

The history is workflow state: it is carried through continue-as-new and
decoded from old workflow histories, so every field has a default and new
fields must get one too. Everything here is pure: methods that "record"
something return a new `JobHistory` and leave the old one untouched, so the
workflow writes `self.history = self.history.record_outcome(...)`.

Only the standard library, pydantic and `workflows.contracts` are imported:
the workflow sandbox re-imports this module.

Lifecycle, as the workflow drives it:

- `start_attempt(at=...)` when the job is seen running (first sight or an
  allocation restart); the attempt's checkpoint baseline is the last
  checkpoint seen so far.
- `note_checkpoint(iteration)` whenever the log shows a saved checkpoint.
- on an incident, `policy.decide(...)` reads `current` (the attempt that just
  failed, not yet in `attempts`) together with the closed `attempts`;
  then `record_outcome(verdict, advice, ended_at=...)` closes it.
- `note_excluded(nodes)` / `note_jobmedic_restart()` only once the scheduler
  confirmed the action (in observe mode nothing is excluded or restarted).
- `note_restart_count(job.restarts)` whenever Slurm's restart count is read.
- a node_failure verdict adds its hosts to `dead_nodes` (in `record_outcome`):
  the policy keeps them out of every later restart of the job.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone

from pydantic import Field

from workflows.contracts import Advice, AdviceAction, Category, Contract, FaultDomain, Verdict

# Advice that does not spend the job's attempt budget: the job did not get a
# restart from jobmedic (hold, preemption handled by Slurm, nothing wrong).
_OUTSIDE_BUDGET = frozenset({AdviceAction.HOLD, AdviceAction.LEAVE_TO_SLURM, AdviceAction.NOTHING})


def as_utc(moment: datetime) -> datetime:
    """`moment` as an aware UTC datetime; a naive one is taken to be UTC already.

    Workflow time is aware UTC, while parsed scheduler times may be naive;
    comparing the two would raise inside the workflow, so every comparison
    goes through here.
    """
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


class AttemptRecord(Contract):
    """One attempt of the job: from its start to the incident that ended it."""

    attempt: int = 0  # 1 for the first attempt jobmedic saw
    started_at: datetime | None = None
    ended_at: datetime | None = None
    category: Category | None = None
    fault_domain: FaultDomain | None = None
    signature: str | None = None  # Verdict.deterministic_signature
    implicated_hosts: list[str] = Field(default_factory=list)
    checkpoint_iteration_at_start: int | None = None
    checkpoint_iteration_at_end: int | None = None
    exit_code: int | None = None
    advice_action: AdviceAction | None = None
    rule: str | None = None

    @property
    def made_checkpoint(self) -> bool:
        """True when a checkpoint newer than the attempt's starting one was saved."""
        return _newer(self.checkpoint_iteration_at_end, than=self.checkpoint_iteration_at_start)

    @property
    def counts_toward_budget(self) -> bool:
        """False for attempts that ended in hold, leave-to-Slurm or nothing."""
        return self.advice_action not in _OUTSIDE_BUDGET

    def ended_within(self, *, now: datetime, window_s: float) -> bool:
        """True when the attempt ended (or, lacking an end, started) within `window_s` before `now`."""
        moment = self.ended_at or self.started_at
        if moment is None:
            # An attempt of unknown time counts: overcounting stops a job a
            # little early, undercounting could restart it forever.
            return True
        return (as_utc(now) - as_utc(moment)).total_seconds() <= window_s


class JobHistory(Contract):
    """Attempts, implicated and excluded nodes, checkpoint progress and restart counts of one job."""

    attempts: list[AttemptRecord] = Field(default_factory=list)  # closed attempts, oldest first
    current: AttemptRecord = Field(default_factory=lambda: AttemptRecord(attempt=1))
    excluded_nodes: list[str] = Field(default_factory=list)  # confirmed by the scheduler, sorted
    implicated_counts: dict[str, int] = Field(default_factory=dict)  # node -> attempts it was implicated in
    # nodes that died under the job (node_failure verdicts): kept out of every later restart, whoever
    # requeued the job (Slurm itself or jobmedic), across attempts and later failures
    dead_nodes: list[str] = Field(default_factory=list)
    categories_seen: list[Category] = Field(default_factory=list)  # in order of first appearance
    restarts_by_jobmedic: int = 0  # restarts the scheduler confirmed for jobmedic
    slurm_restarts_seen: int = 0  # highest restart count Slurm reported for the job
    last_checkpoint_iteration: int | None = None

    # ------------------------------------------------------------------ recording

    def start_attempt(self, *, at: datetime, checkpoint_iteration: int | None = None) -> JobHistory:
        """Mark the current attempt as running since `at`.

        Args:
            at: when the attempt started (the job's start time, or workflow time).
            checkpoint_iteration: the checkpoint the attempt resumed from, when
                known; the baseline is the newer of it and the last one seen.
        """
        # Progress means passing the best checkpoint ever seen, so an attempt
        # that resumed from an older one must pass the newest to count.
        baseline = _max_iteration(self.last_checkpoint_iteration, checkpoint_iteration)
        current = self.current.model_copy(update={"started_at": at, "checkpoint_iteration_at_start": baseline})
        return self.model_copy(update={"current": current, "last_checkpoint_iteration": baseline})

    def note_checkpoint(self, iteration: int) -> JobHistory:
        """Remember a saved checkpoint; an older iteration than the last one changes nothing."""
        last = _max_iteration(self.last_checkpoint_iteration, iteration)
        return self.model_copy(update={"last_checkpoint_iteration": last})

    def record_outcome(
        self,
        verdict: Verdict,
        advice: Advice,
        *,
        ended_at: datetime,
        exit_code: int | None = None,
    ) -> JobHistory:
        """Close the current attempt with the verdict and advice of its incident, and open the next."""
        hosts = sorted(set(verdict.implicated.hosts))
        closed = self.current.model_copy(
            update={
                "ended_at": ended_at,
                "category": verdict.category,
                "fault_domain": verdict.fault_domain,
                "signature": verdict.deterministic_signature,
                "implicated_hosts": hosts,
                "checkpoint_iteration_at_end": self.last_checkpoint_iteration,
                "exit_code": exit_code,
                "advice_action": advice.action,
                "rule": advice.rule,
            }
        )
        counts = dict(self.implicated_counts)
        for host in hosts:
            counts[host] = counts.get(host, 0) + 1
        seen = list(self.categories_seen)
        if verdict.category not in seen:
            seen.append(verdict.category)
        dead = set(self.dead_nodes)
        if verdict.category is Category.NODE_FAILURE:
            dead.update(hosts)
        following = AttemptRecord(
            attempt=closed.attempt + 1,
            checkpoint_iteration_at_start=self.last_checkpoint_iteration,
        )
        return self.model_copy(
            update={
                "attempts": [*self.attempts, closed],
                "current": following,
                "implicated_counts": dict(sorted(counts.items())),
                "categories_seen": seen,
                "dead_nodes": sorted(dead),
            }
        )

    def note_excluded(self, nodes: Iterable[str]) -> JobHistory:
        """Remember nodes the scheduler confirmed as excluded from the job."""
        return self.model_copy(update={"excluded_nodes": sorted({*self.excluded_nodes, *nodes})})

    def note_readmitted(self, nodes: Iterable[str]) -> JobHistory:
        """Forget exclusions jobmedic gave back (the scheduler confirmed them off the job's list)."""
        back = set(nodes)
        return self.model_copy(update={"excluded_nodes": [n for n in self.excluded_nodes if n not in back]})

    def exclusion_order(self) -> list[str]:
        """jobmedic's exclusions, oldest first: in the order of the attempts whose failure implicated them."""
        order: list[str] = []
        for attempt in self.attempts:
            order += [h for h in attempt.implicated_hosts if h in self.excluded_nodes and h not in order]
        return order + [h for h in sorted(self.excluded_nodes) if h not in order]

    def note_jobmedic_restart(self) -> JobHistory:
        """Count one restart that jobmedic asked for and the scheduler confirmed."""
        return self.model_copy(update={"restarts_by_jobmedic": self.restarts_by_jobmedic + 1})

    def note_restart_count(self, restarts: int) -> JobHistory:
        """Remember Slurm's restart count for the job (it only ever grows)."""
        return self.model_copy(update={"slurm_restarts_seen": max(self.slurm_restarts_seen, restarts)})

    # ------------------------------------------------------------------ questions

    @property
    def slurm_own_restarts(self) -> int:
        """Restarts Slurm did by itself (for example `--requeue` after a node failure)."""
        return max(0, self.slurm_restarts_seen - self.restarts_by_jobmedic)

    @property
    def current_made_checkpoint(self) -> bool:
        """True when the current attempt saved a checkpoint newer than the one it started from."""
        return _newer(self.last_checkpoint_iteration, than=self.current.checkpoint_iteration_at_start)

    def recent_attempts(self, *, now: datetime, window_s: float) -> int:
        """Closed attempts that spent the budget and ended within `window_s` before `now`."""
        return sum(
            1 for a in self.attempts if a.counts_toward_budget and a.ended_within(now=now, window_s=window_s)
        )

    def recent_unproductive_attempts(self, *, now: datetime, window_s: float) -> int:
        """Like `recent_attempts`, counting only the attempts that saved no new checkpoint."""
        return sum(
            1 for a in self.attempts
            if a.counts_toward_budget and not a.made_checkpoint and a.ended_within(now=now, window_s=window_s)
        )

    def attempts_without_checkpoint(self) -> int:
        """How many of the latest closed attempts in a row saved no new checkpoint.

        Attempts outside the budget (held, preempted, nothing wrong) neither
        count nor break the run: they say nothing about training progress.
        """
        run = 0
        for attempt in reversed(self.attempts):
            if not attempt.counts_toward_budget:
                continue
            if attempt.made_checkpoint:
                break
            run += 1
        return run

    def signature_count(self, signature: str | None) -> int:
        """Closed attempts that ended with the deterministic error `signature` (None matches nothing)."""
        if signature is None:
            return 0
        return sum(1 for a in self.attempts if a.signature == signature)

    def category_count(self, *categories: Category, unattributed_only: bool = False) -> int:
        """Closed attempts whose category is one of `categories` (optionally: that named no host)."""
        wanted = set(categories)
        return sum(
            1
            for a in self.attempts
            if a.category in wanted and not (unattributed_only and a.implicated_hosts)
        )

    @property
    def previous(self) -> AttemptRecord | None:
        """The latest closed attempt, if any."""
        return self.attempts[-1] if self.attempts else None


def _max_iteration(a: int | None, b: int | None) -> int | None:
    present = [x for x in (a, b) if x is not None]
    return max(present) if present else None


def _newer(iteration: int | None, *, than: int | None) -> bool:
    if iteration is None:
        return False
    return than is None or iteration > than
