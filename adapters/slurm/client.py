"""What jobmedic sees of and does to one Slurm cluster.

Reading costs one command per call whatever the number of jobs: `squeue --json`
for jobs (it lists every job the controller still holds, finished ones for
`MinJobAge`), `sinfo --json` for nodes. Output is decoded in a worker thread
(`asyncio.to_thread`): 10,000 jobs are ~27 MB of JSON, seconds of parsing that
must not stall the event loop.

Actions and their confirmations read one job: `squeue --jobs ID --json`, and
only the records of that job are converted. Slurm 23.02+ applies `--jobs` to
`--json` output; 22.05 ignores it (observed here: `squeue --jobs 999999 --json`
lists every job and exits 0), so there the saving is the conversion, not the
query. `scontrol show job -o ID` is cheaper but not safe to read: it quotes
nothing, and a job name such as `x JobState=PENDING Restarts=3` forges fields
(`parse.parse_scontrol_record`).

Every action reads the current state first and does nothing when its effect is
already there (`ActionResult.changed` is False), so a retried or replayed
activity never applies it twice; afterwards it reads the state again until the
scheduler confirms the effect and returns that confirmed state. Actions name
the job by `JobKey`: a job id that now belongs to another job raises
`JobNotFound` (see `same_job`).

Ownership: every job action writes jobmedic's mark into the job's
AdminComment (`adapters.slurm.ownership`): the deployment, the action and
when, and whether jobmedic holds the job. A job marked by another deployment
is refused (`ActionRefused`); a hold is released only when the mark says this
deployment placed it.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from loguru import logger

from adapters.errors import ActionRefused, JobNotFound, SchedulerError, SchedulerUnreachable
from adapters.slurm.ctld_config import min_job_age_s, parse_show_config
from adapters.slurm.listing_decoder import ListingDecoder
from adapters.slurm.ownership import Mark, read_mark, valid_deployment, with_mark
from adapters.slurm.parse import (
    SqueueListing, array_of, is_array_remainder, parse_sinfo_json, parse_squeue_listing,
)
from adapters.slurm.runner import CommandResult, CommandRunner
from workflows.contracts import ActionKind, ActionResult, JobInfo, JobKey, JobState, NodeInfo

DRAIN_PREFIX = "jobmedic: "
MAX_REASON_CHARS = 200

_JOB_ID = re.compile(r"\d+(?:_\d+)?")
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# stderr of the Slurm commands when slurmctld (or the network to it) is the problem
_UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|Zero Bytes were transmitted"
    r"|Communication connection failure|Transport endpoint is not connected",
    re.IGNORECASE,
)
# states a job can be requeued from: still running, or ended and still in slurmctld's memory
_REQUEUEABLE = {
    JobState.RUNNING, JobState.SUSPENDED, JobState.CONFIGURING, JobState.STOPPED,
    JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT, JobState.NODE_FAIL, JobState.PREEMPTED,
    JobState.BOOT_FAIL, JobState.DEADLINE, JobState.OUT_OF_MEMORY,
}
_STARTED = {JobState.RUNNING, JobState.CONFIGURING, JobState.COMPLETING, JobState.SUSPENDED, JobState.STOPPED}
# the reason slurmctld gives a job that `scontrol requeuehold` put back in the queue (22.05, observed)
_REQUEUED_HELD = "job_requeued_in_held_state"


class ActionNotConfirmed(SchedulerError):
    """The command was accepted but the scheduler did not show its effect in time."""

    retryable = True


def same_job(key: JobKey, job: JobInfo) -> bool:
    """Whether `job` (as the scheduler shows it now) is the job `key` was taken from.

    Slurm 22.05 moves a job's submit time to the moment of every requeue
    (verified here), so equal submit times are not required: a later submit
    time is the same job when the job has been requeued (restarts > 0). A
    recycled id (controller state lost, or the id space wrapped) is a new job
    whose submit time is later and that has not been requeued; an earlier
    submit time is never the same job. Without a submit time in `key` only the
    id is compared.
    """
    if job.job_id != key.job_id or (key.cluster and job.cluster and key.cluster != job.cluster):
        return False
    if key.submit_time is None or job.submit_time is None:
        return True
    wanted = int(_utc(key.submit_time).timestamp())
    seen = int(_utc(job.submit_time).timestamp())
    if seen == wanted:
        return True
    return seen > wanted and job.restarts > 0


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class SlurmClient:
    """Reads and acts on one Slurm cluster through a `CommandRunner`.

    Args:
        runner: where the Slurm commands run (local or SSH).
        cluster: the cluster's name in jobmedic's settings; stamped on every job.
        timeout: seconds one Slurm command may take.
        confirm_timeout: seconds an action waits for the scheduler to show its effect.
        poll_interval: seconds between two reads while waiting for that.
        opt_in_max_bytes: larger comments are not read as opt-ins.
        deployment: this jobmedic deployment's name, written into the mark on every job it acts on.
        decode_in_child: decode whole listings in a child process (`listing_decoder`), so the event loop runs on
            while 10,000 jobs' JSON is read; False decodes them in a thread of this process.
    """

    def __init__(
        self,
        runner: CommandRunner,
        *,
        cluster: str,
        timeout: float = 30.0,
        confirm_timeout: float = 30.0,
        poll_interval: float = 0.3,
        opt_in_max_bytes: int = 4096,
        deployment: str = "jobmedic",
        decode_in_child: bool = False,
    ) -> None:
        if not valid_deployment(deployment):
            raise ValueError(f"{deployment!r} is not a deployment name (letters, digits, '.', '_', '-')")
        self.runner = runner
        self.deployment = deployment
        self.cluster = cluster
        self.timeout = timeout
        self.confirm_timeout = confirm_timeout
        self.poll_interval = poll_interval
        self.opt_in_max_bytes = opt_in_max_bytes
        # whole listings: the last one's conversions, reused for unchanged records, kept by the decoder's child
        self._listings = ListingDecoder(in_child=decode_in_child)

    async def close(self) -> None:
        self._listings.close()
        await self.runner.close()

    async def __aenter__(self) -> SlurmClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ----------------------------------------------------------------------- reading

    async def list_jobs(self, *, opted_in_only: bool = True) -> list[JobInfo]:
        """Every job the controller holds, in one `squeue --json` call (see `listing`)."""
        return (await self.listing(opted_in_only=opted_in_only)).jobs

    async def listing(self, *, opted_in_only: bool = True) -> SqueueListing:
        """Every job the controller holds, in one `squeue --json` call, and the records that were skipped.

        With `opted_in_only`, jobs that did not opt in are dropped; jobs whose
        opt-in is invalid are kept (`opt_in.invalid_reason` says why). A task
        of a job array is a job of its own, `ARRAYJOBID_TASKID`
        (`parse.job_identity`); with `opted_in_only` the one record of an
        array's tasks that have not started yet (`282_[2-5]`) is dropped too:
        it is no task to recover, and each task is listed on its own from the
        moment Slurm starts it. A record that cannot be read is skipped (and
        named in `skipped`): the rest of the cluster is still listed.
        """
        result = await self._run(["squeue", "--json"], what="squeue --json")
        found = await self._listings.decode(result.stdout, cluster=self.cluster, opt_in_max_bytes=self.opt_in_max_bytes)
        for record in found.skipped:
            logger.warning("squeue --json on {}: skipped a record ({}): {}", self.cluster, record.reason,
                           record.excerpt[:200])
        if opted_in_only:
            jobs = [
                job for job in found.jobs
                if (job.opt_in.opted_in or job.opt_in.invalid) and not is_array_remainder(job.job_id)
            ]
            return SqueueListing(jobs=jobs, skipped=found.skipped)
        return found

    async def _squeue(
        self, argv: list[str], *, what: str, only: Callable[[str], bool] | None = None
    ) -> SqueueListing:
        result = await self._run(argv, what=what)
        return await asyncio.to_thread(
            parse_squeue_listing, result.stdout, cluster=self.cluster, opt_in_max_bytes=self.opt_in_max_bytes,
            only=only,
        )

    async def array_tasks(self, job_id: str) -> list[JobInfo]:
        """Every record of the job array `job_id` is a task of (the remainder of tasks not started included),
        in one `squeue --jobs ARRAY --json`; empty for a job that is no array task."""
        array = array_of(_check_job_id(job_id))
        if array is None:
            return []
        found = await self._squeue(["squeue", "--jobs", array, "--json"], what=f"squeue --jobs {array} --json",
                                   only=lambda ident: array_of(ident) == array)
        return found.jobs

    async def get_job(self, job_id: str) -> JobInfo:
        """One job by id, whether or not it opted in, in one `squeue --jobs ID --json`.

        Raises:
            JobNotFound: the controller does not (or no longer) hold it.
        """
        job_id = _check_job_id(job_id)
        found = await self._squeue(["squeue", "--jobs", job_id, "--json"], what=f"squeue --jobs {job_id} --json",
                                   only=lambda ident: ident == job_id)
        for job in found.jobs:
            return job
        if found.skipped:
            raise SchedulerError(
                f"the scheduler record of job {job_id} on cluster {self.cluster!r} cannot be read "
                f"({found.skipped[0].reason}); `squeue --jobs {job_id} --json` shows it"
            )
        raise JobNotFound(
            f"job {job_id} is not known to the scheduler of cluster {self.cluster!r} "
            "(never submitted, or finished longer than MinJobAge ago)"
        )

    async def get_jobs(self, job_ids: Iterable[str]) -> list[JobInfo]:
        """The jobs of `job_ids` the controller still holds, opted in or not, in one `squeue --jobs A,B --json`
        (squeue refuses the whole list when it no longer holds one of them: then one call each). A job it no
        longer holds is left out. Slurm 22.05 prints every job whatever --jobs says: one call still reads once.
        """
        wanted = sorted({_check_job_id(j) for j in job_ids})
        if not wanted:
            return []
        listed = ",".join(wanted)
        try:
            found = await self._squeue(["squeue", "--jobs", listed, "--json"], what=f"squeue --jobs {listed} --json",
                                       only=set(wanted).__contains__)
        except JobNotFound:
            if len(wanted) == 1:
                return []
            return [job for job_id in wanted for job in await self.get_jobs([job_id])]
        return found.jobs

    async def job_for_key(self, key: JobKey) -> JobInfo:
        """The job `key` names, checking that its id was not recycled (see `same_job`)."""
        job = await self.get_job(key.job_id)
        if not same_job(key, job):
            raise JobNotFound(
                f"job id {key.job_id} now belongs to another job (submitted {job.submit_time}, "
                f"restarts {job.restarts}; expected the one submitted {key.submit_time})"
            )
        return job

    async def list_nodes(self) -> list[NodeInfo]:
        """Every node with its base state, flags (DRAIN, NOT_RESPONDING, ...) and reason."""
        result = await self._run(["sinfo", "--json"], what="sinfo --json")
        return parse_sinfo_json(result.stdout)

    async def min_job_age_s(self) -> float:
        """How long slurmctld keeps a finished job (`MinJobAge`, from `scontrol show config`)."""
        result = await self._scontrol(["show", "config"], what="scontrol show config")
        return min_job_age_s(parse_show_config(result.stdout))

    # ----------------------------------------------------------------------- ownership

    def owner_of(self, job: JobInfo) -> str | None:
        """The deployment whose mark the job carries; None when no jobmedic acted on it."""
        mark = read_mark(job.admin_comment)
        return mark.owner if mark else None

    def holds(self, job: JobInfo) -> bool:
        """Whether `job` is held and this deployment's mark says it placed the hold."""
        mark = read_mark(job.admin_comment)
        return job.held and mark is not None and mark.owner == self.deployment and mark.holding

    def _refuse_if_owned_elsewhere(self, job: JobInfo) -> None:
        owner = self.owner_of(job)
        if owner is not None and owner != self.deployment:
            raise ActionRefused(
                f"job {job.job_id} belongs to jobmedic deployment {owner!r} (AdminComment {job.admin_comment!r}); "
                f"this deployment ({self.deployment!r}) leaves it alone"
            )

    async def _mark(self, key: JobKey, job: JobInfo, kind: ActionKind, *, holding: bool) -> None:
        """Write this deployment's mark: what it did now and whether it holds the job."""
        mark = Mark(owner=self.deployment, action=kind.value, at=datetime.now(UTC), holding=holding)
        text = with_mark(job.admin_comment, mark)
        await self._scontrol(
            ["update", f"JobId={job.job_id}", f"AdminComment={text}"], what=f"mark job {job.job_id} (AdminComment)"
        )

    async def get_node(self, name: str) -> NodeInfo:
        name = _check_node(name)
        for node in await self.list_nodes():
            if node.name == name:
                return node
        raise ActionRefused(f"cluster {self.cluster!r} has no node named {name!r} (`sinfo -N` lists them)")

    # ----------------------------------------------------------------------- job actions

    async def requeue_hold(self, key: JobKey, *, expected_restarts: int | None = None) -> ActionResult:
        """Stop the job (if it runs) and leave it PENDING and held, same job id.

        Works on a running job and on one that ended (FAILED, CANCELLED,
        TIMEOUT, NODE_FAIL, ...) while slurmctld still holds it (`MinJobAge`);
        whether an ended job should come back is the caller's decision. A
        pending job is only held. Refused for COMPLETED jobs.

        No-op when the job is already pending and held, or when its restart
        count is above `expected_restarts` (it was requeued since the caller
        looked: by us in an earlier try, or by Slurm).

        The hold is marked as this deployment's (AdminComment) before the
        command for a job that is still alive, right after it for a job that
        ended (Slurm refuses updates to a finished job). A job held by someone
        else stays theirs: `changed` is False and the mark is not `holding`.
        """
        kind = ActionKind.REQUEUE_HOLD
        job = await self.job_for_key(key)
        self._refuse_if_owned_elsewhere(job)
        if job.state is JobState.COMPLETING:
            job = await self._wait_job(key, lambda j: j.state is not JobState.COMPLETING, what="the job to finish completing")
        if expected_restarts is not None and job.restarts > expected_restarts:
            if self._lost_own_mark(job, expected_restarts):
                await self._mark(key, job, kind, holding=True)
                job = await self.job_for_key(key)
                return self._unchanged(kind, job, "requeued and held by an earlier try of this action; marked now")
            return self._unchanged(kind, job, f"already requeued: restarts {job.restarts} > {expected_restarts}")
        if job.state is not JobState.PENDING:
            if job.state is JobState.COMPLETED:
                raise ActionRefused(f"job {job.job_id} COMPLETED; there is nothing to requeue")
            if job.state not in _REQUEUEABLE:
                raise ActionRefused(f"job {job.job_id} is {job.state.value}; jobmedic does not requeue from that state")
            before = job.restarts
            ended = job.state.finished
            if not ended:
                try:
                    await self._mark(key, job, kind, holding=True)  # the intent, on the job, before the act
                except ActionRefused:
                    job = await self.job_for_key(key)
                    if not job.state.finished:
                        raise
                    ended = True  # it ended meanwhile: marked after the requeue instead
            try:
                await self._scontrol(["requeuehold", job.job_id], what=f"requeue-hold job {job.job_id}")
            except ActionRefused:
                # Slurm may have requeued it itself (node failure) between our read and the command
                job = await self.job_for_key(key)
                if job.state is not JobState.PENDING:
                    raise
            else:
                confirmed = await self._wait_job(
                    key,
                    lambda j: j.state is JobState.PENDING and j.held and j.restarts > before,
                    what="PENDING held with one more restart",
                )
                if ended:
                    await self._mark(key, confirmed, kind, holding=True)
                    confirmed = await self.job_for_key(key)
                return self._changed(kind, confirmed, f"requeued from {job.state.value} and held")
        if job.held:
            if self.holds(job):
                return self._unchanged(kind, job, f"already pending and held by jobmedic:{self.deployment}")
            return self._unchanged(kind, job, "already pending and held, not by jobmedic: the hold stays its owner's")
        await self._mark(key, job, kind, holding=True)
        await self._scontrol(["hold", job.job_id], what=f"hold job {job.job_id}")
        confirmed = await self._wait_job(key, lambda j: j.state is JobState.PENDING and j.held, what="PENDING held")
        return self._changed(kind, confirmed, "job was pending: held it")

    def _lost_own_mark(self, job: JobInfo, expected_restarts: int) -> bool:
        """A requeue-hold of an ended job whose mark was lost between the command and the mark.

        Slurm refuses the mark on a finished job, so it is written just after
        `requeuehold`; a worker lost in between leaves an unmarked hold. Only
        the retry of that same action (same `expected_restarts`) takes it
        back: exactly one requeue since, held in the requeue-hold state, and no
        mark of another deployment or a newer hold.
        """
        mark = read_mark(job.admin_comment)
        return (
            job.state is JobState.PENDING
            and job.held
            and job.reason == _REQUEUED_HELD
            and job.restarts == expected_restarts + 1
            and (mark is None or (mark.owner == self.deployment and not mark.holding))
        )

    async def set_excluded_nodes(self, key: JobKey, nodes: list[str], *, readmit: list[str] | None = None) -> ActionResult:
        """Add `nodes` to the job's excluded nodes, and take `readmit` off them (only while it is pending)."""
        kind = ActionKind.EXCLUDE_NODES
        wanted = [_check_node(node) for node in nodes]
        back = {_check_node(node) for node in readmit or []} - set(wanted)
        job = await self.job_for_key(key)
        self._refuse_if_owned_elsewhere(job)
        union = [n for n in dict.fromkeys([*job.excluded_nodes, *wanted]) if n not in back]
        if set(union) == set(job.excluded_nodes):
            return self._unchanged(kind, job, "nodes already excluded")
        if job.state is not JobState.PENDING:
            raise ActionRefused(
                f"job {job.job_id} is {job.state.value}: Slurm changes excluded nodes only while a job is "
                "pending; requeue-hold it first"
            )
        value = ",".join(union)
        await self._scontrol(
            ["update", f"JobId={job.job_id}", f"ExcNodeList={value}"], what=f"exclude nodes of job {job.job_id}"
        )
        await self._mark(key, job, kind, holding=self.holds(job))
        confirmed = await self._wait_job(
            key, lambda j: set(union) <= set(j.excluded_nodes) and not back & set(j.excluded_nodes),
            what=f"ExcNodeList={value}",
        )
        given_back = sorted(back & set(job.excluded_nodes))
        return self._changed(kind, confirmed, f"excluded {value}" + (f"; let {','.join(given_back)} back in" if given_back else ""))

    async def release(self, key: JobKey, *, start_now: bool = True) -> ActionResult:
        """Release a held job; with `start_now`, also skip Slurm's wait after a requeue.

        After a requeue Slurm keeps the job from starting for the credential
        lifetime (`AuthInfo=cred_expire`, 120 s by default, shown as reason
        BeginTime); `StartTime=now` lets it start at the next scheduling pass.
        That is only done for a job that was requeued (restarts > 0): a job
        that never ran keeps the begin time its user asked for.

        Only a hold this deployment placed (its mark says `holding`) is
        released; anyone else's hold raises `ActionRefused` and stays.
        """
        kind = ActionKind.RELEASE
        job = await self.job_for_key(key)
        if job.state in _STARTED:
            return self._unchanged(kind, job, f"already {job.state.value}")
        if job.state is not JobState.PENDING:
            raise ActionRefused(f"job {job.job_id} is {job.state.value}; there is nothing to release")
        self._refuse_if_owned_elsewhere(job)
        steps = []
        if job.held:
            if not self.holds(job):
                raise ActionRefused(
                    f"job {job.job_id} is held, but not by jobmedic:{self.deployment} (reason {job.reason}, "
                    f"AdminComment {job.admin_comment!r}); jobmedic releases only its own holds"
                )
            await self._scontrol(["release", job.job_id], what=f"release job {job.job_id}")
            steps.append("released")
        if start_now and job.restarts > 0 and (job.held or job.reason == "BeginTime"):
            try:
                await self._scontrol(
                    ["update", f"JobId={job.job_id}", "StartTime=now"], what=f"start job {job.job_id} now"
                )
                steps.append("StartTime=now")
            except ActionRefused:
                # released jobs can start before this update lands; then there is nothing to skip
                if (await self.job_for_key(key)).state is JobState.PENDING:
                    raise
        if not steps:
            return self._unchanged(kind, job, "pending and not held")
        # after the release: a mark cleared first and a release lost would leave our hold unreleasable
        await self._mark(key, job, kind, holding=False)
        confirmed = await self._wait_job(key, lambda j: not (j.state is JobState.PENDING and j.held), what="not held")
        return self._changed(kind, confirmed, ", ".join(steps))

    async def cancel(self, key: JobKey) -> ActionResult:
        """Cancel the job and wait until Slurm shows it ended (scancel is silent about unknown ids)."""
        kind = ActionKind.CANCEL
        job = await self.job_for_key(key)
        if job.state.finished:
            return self._unchanged(kind, job, f"already {job.state.value}")
        self._refuse_if_owned_elsewhere(job)
        await self._mark(key, job, kind, holding=False)
        await self._run(["scancel", job.job_id], what=f"scancel {job.job_id}")
        confirmed = await self._wait_job(key, lambda j: j.state.finished, what="the job to end")
        return self._changed(kind, confirmed, f"cancelled while {job.state.value}")

    # ----------------------------------------------------------------------- node actions

    async def drain_node(self, node: str, reason: str) -> ActionResult:
        """Drain a node with the reason `jobmedic: <reason>`.

        Refuses (`ActionRefused`) a node that someone else drained or set down:
        their reason stays. No-op when jobmedic drained it already.
        """
        kind = ActionKind.DRAIN
        current = await self.get_node(node)
        if _ours(current) and current.drained:
            return ActionResult(action=kind, changed=False, node=current, detail="already drained by jobmedic")
        if current.drained or current.state in {"DOWN", "FAIL", "FAILING"}:
            raise ActionRefused(
                f"node {current.name} is {_node_state(current)} with reason {current.reason!r} "
                f"(set by {current.reason_user or 'unknown'}); jobmedic leaves nodes drained or downed by "
                "others alone"
            )
        text = DRAIN_PREFIX + _clean_reason(reason)
        await self._scontrol(
            ["update", f"NodeName={current.name}", "State=DRAIN", f"Reason={text}"], what=f"drain {current.name}"
        )
        confirmed = await self._wait_node(current.name, lambda n: n.drained and _ours(n), what="DRAIN by jobmedic")
        return ActionResult(action=kind, changed=True, node=confirmed, detail=text)

    async def resume_node(self, node: str) -> ActionResult:
        """Resume a node that jobmedic drained; refuses nodes drained or downed by others."""
        kind = ActionKind.RESUME_NODE
        current = await self.get_node(node)
        if not current.drained and current.state not in {"DOWN", "FAIL", "FAILING"}:
            return ActionResult(action=kind, changed=False, node=current, detail="not drained")
        if not _ours(current):
            raise ActionRefused(
                f"node {current.name} is {_node_state(current)} with reason {current.reason!r} "
                f"(set by {current.reason_user or 'unknown'}), not by jobmedic; resume it yourself if it is healthy"
            )
        await self._scontrol(["update", f"NodeName={current.name}", "State=RESUME"], what=f"resume {current.name}")
        confirmed = await self._wait_node(current.name, lambda n: not n.drained, what="not drained")
        return ActionResult(action=kind, changed=True, node=confirmed, detail="resumed")

    # ----------------------------------------------------------------------- plumbing

    def _unchanged(self, kind: ActionKind, job: JobInfo, detail: str) -> ActionResult:
        logger.debug("slurm {} job {} on {}: no-op ({})", kind.value, job.job_id, self.cluster, detail)
        return ActionResult(action=kind, changed=False, job=job, detail=detail)

    def _changed(self, kind: ActionKind, job: JobInfo, detail: str) -> ActionResult:
        logger.info("slurm {} job {} on {}: {} -> {}", kind.value, job.job_id, self.cluster, detail, job.state.value)
        return ActionResult(action=kind, changed=True, job=job, detail=detail)

    async def _wait_job(self, key: JobKey, done: Callable[[JobInfo], bool], *, what: str) -> JobInfo:
        deadline = time.monotonic() + self.confirm_timeout
        while True:
            job = await self.job_for_key(key)
            if done(job):
                return job
            if time.monotonic() >= deadline:
                raise ActionNotConfirmed(
                    f"job {key.job_id}: waited {self.confirm_timeout:g} s for {what}, the scheduler shows "
                    f"{job.state.value} (reason {job.reason}, held {job.held}, restarts {job.restarts})"
                )
            await asyncio.sleep(self.poll_interval)

    async def _wait_node(self, name: str, done: Callable[[NodeInfo], bool], *, what: str) -> NodeInfo:
        deadline = time.monotonic() + self.confirm_timeout
        while True:
            node = await self.get_node(name)
            if done(node):
                return node
            if time.monotonic() >= deadline:
                raise ActionNotConfirmed(
                    f"node {name}: waited {self.confirm_timeout:g} s for {what}, the scheduler shows "
                    f"{_node_state(node)} reason {node.reason!r}"
                )
            await asyncio.sleep(self.poll_interval)

    async def _run(self, argv: list[str], *, what: str) -> CommandResult:
        result = await self.runner.run(argv, timeout=self.timeout)
        if result.returncode != 0:
            self._raise_for(result, what=what)
        return result

    async def _scontrol(self, args: list[str], *, what: str) -> CommandResult:
        result = await self.runner.run(["scontrol", *args], timeout=self.timeout)
        if result.returncode != 0:
            self._raise_for(result, what=what)
        return result

    def _raise_for(self, result: CommandResult, *, what: str) -> None:
        message = " ".join(result.stderr.split()) or f"exit code {result.returncode}"
        where = f"{what} on cluster {self.cluster!r} ({self.runner.describe()})"
        if _UNREACHABLE.search(message):
            raise SchedulerUnreachable(f"{where}: {message}; is slurmctld up? (`scontrol ping`)")
        if "Invalid job id" in message:
            raise JobNotFound(f"{where}: {message}")
        if result.returncode == 127 or "command not found" in message:
            raise SchedulerError(f"{where}: {message}; are the Slurm client commands installed there?")
        raise ActionRefused(f"{where}: the scheduler refused: {message}")


def _check_job_id(job_id: str) -> str:
    job_id = str(job_id).strip()
    if not _JOB_ID.fullmatch(job_id):
        raise JobNotFound(f"{job_id!r} is not a Slurm job id")
    return job_id


def _check_node(name: str) -> str:
    if not isinstance(name, str) or not _NODE_NAME.fullmatch(name):
        raise ActionRefused(f"{name!r} is not a node name jobmedic acts on (letters, digits, '.', '_', '-')")
    return name


def _clean_reason(reason: str) -> str:
    # one line of printable text: Slurm shows reasons in tables and logs
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in reason).split())
    return (text or "drained")[:MAX_REASON_CHARS]


def _ours(node: NodeInfo) -> bool:
    return node.reason.startswith(DRAIN_PREFIX.strip())


def _node_state(node: NodeInfo) -> str:
    return "+".join([node.state, *node.flags])


__all__ = ["ActionNotConfirmed", "DRAIN_PREFIX", "SlurmClient", "same_job"]
