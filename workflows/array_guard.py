"""Recovery of a job array stops when its tasks fail the same way.

A job array (`sbatch --array`, the way sweeps run) is many runs of one
program. Each task is recovered on its own (its own workflow, attempts and
exclusions), except when most of the array's tasks fail the same way: then
the cause is shared (the program, its data, its environment, the sweep's
settings) and restarting each task would burn one attempt per task for
nothing. The rules, in order:

1. Only a restart of a task that ended is turned into a stop; any other advice stands.
2. A failure that names its own nodes (hardware, interconnect, node loss) is that node's: it stands.
3. A sibling task fails "the same way" when the audit trail's cluster-wide view has its
   recent verdict with the same category and no node named, or, not recorded there yet
   (it failed a moment ago), Slurm shows it ended in the same state with the same exit code.
4. Systemic when this task and the siblings that fail the same way are at least
   `MIN_TASKS` and more than `FRACTION` of the array's tasks Slurm knows (started or waiting).
5. Then the advice is to stop (rule `array_systemic`): the task keeps what Slurm gave it
   (its state, exit code and restart count), advice and reason are audited, and every later
   task of the array that fails the same way is stopped the same way.

Pure and deterministic: it runs inside the recovery workflow.
"""

from __future__ import annotations

from workflows.contracts import Advice, AdviceAction, JobInfo, Verdict
from workflows.messages import ArrayView, RecentFailure

FRACTION = 0.5  # "most tasks": more than half
MIN_TASKS = 3  # two failures alike are not yet a pattern
RULE = "array_systemic"
_RESTARTS = {AdviceAction.RESTART, AdviceAction.RESTART_EXCLUDE, AdviceAction.RESTART_DRAIN}


def array_guard(
    advice: Advice, verdict: Verdict, job: JobInfo, array: ArrayView, recent: list[RecentFailure]
) -> Advice:
    """`advice`, or a stop when the array's failures look systemic (module docstring)."""
    if advice.action not in _RESTARTS or not job.state.finished or verdict.implicated.hosts:
        return advice
    alike = same_way(verdict, job, array, recent)
    total = max(array.total, len(alike))
    if len(alike) < MIN_TASKS or len(alike) <= FRACTION * total:
        return advice
    return Advice(
        action=AdviceAction.STOP,
        rule=RULE,
        reason=(
            f"{len(alike)} of {total} tasks of job array {array.array_job_id} failed the same way "
            f"({verdict.category.value}, {job.state.value} exit code {job.exit_code}) with no node to blame: a "
            "shared cause, so recovery of the array stops (no restarts); fix the cause, then requeue or resubmit "
            f"the tasks (was: {advice.action.value} by {advice.rule})"
        ),
    )


def same_way(verdict: Verdict, job: JobInfo, array: ArrayView, recent: list[RecentFailure]) -> set[str]:
    """The tasks of the array (this one included) that failed the way `job` did."""
    prefix = f"{array.array_job_id}_"
    recorded: dict[str, RecentFailure] = {}
    for failure in recent:  # oldest first: the newest verdict of each task wins
        if failure.job_id.startswith(prefix):
            recorded[failure.job_id] = failure
    alike = {job.job_id}
    for task_id, failure in recorded.items():
        if failure.category == verdict.category.value and not failure.hosts:
            alike.add(task_id)
    for task in array.tasks:
        if task.job_id in recorded or task.job_id == job.job_id:
            continue  # its own verdict decides
        if task.state == job.state.value and task.exit_code == job.exit_code and task.exit_signal == job.exit_signal:
            alike.add(task.job_id)
    return alike
