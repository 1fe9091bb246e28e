"""Pure parsers of Slurm's machine-readable output.

Jobs come from `squeue --json` and nodes from `sinfo --json`: structured output
is the only form in which a job name or comment may hold any character (the
delimiter of a `squeue -o` format, newlines, quotes) without breaking the
record around it. Measured on the 4-node test cluster with Slurm 22.05:
`squeue --json` costs 17-90 ms for 0-200 jobs against 8-13 ms for a delimited
`squeue -o`; one query per poll makes that difference irrelevant.

The 22.05 schema (openapi v0.0.38) is what these parsers are tested on; the
helpers also accept the shapes newer releases print (numbers as
`{"set", "infinite", "number"}`, states as lists, exit codes as objects), so an
upgrade degrades to missing details, not to a crash.

Structural damage to the document (not JSON, no job list) raises `ParseError`
quoting the offending line; odd values inside a job become "unknown"
(`JobState.UNKNOWN`, `None`, empty strings) instead. One job record that cannot
be read at all (not an object, no id, a value that breaks the model) is
skipped by `parse_squeue_listing`, which says what it skipped: one bad record
must not blind the watch to every other job of the cluster.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from adapters.errors import ParseError, SchedulerUnreachable
from adapters.slurm import hostlist
from adapters.slurm.optin import parse_opt_in
from workflows.contracts import JobInfo, JobState, NodeInfo, TaskLayout

#: Slurm's NO_VAL / INFINITE sentinels as 32-bit numbers
NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF
#: what `%a` becomes in the output path of a job that is not an array task (observed, 22.05)
NON_ARRAY_TASK_ID = "4294967294"

_HELD_REASONS = {"JobHeldUser", "JobHeldAdmin", "job_requeued_in_held_state"}


# --------------------------------------------------------------------------- documents


def load_document(text: str, *, what: str, list_key: str) -> list[Any]:
    """Decode one JSON document and return its `list_key` list.

    Raises:
        ParseError: not JSON, or no list under `list_key`.
        SchedulerUnreachable: Slurm put errors into the document. squeue/sinfo
            --json exit 0 with `"errors": [...]` and nothing else when they
            cannot reach slurmctld (observed, 22.05), so that is what it means.
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        lineno = getattr(exc, "lineno", None)
        lines = text.splitlines()
        line = lines[lineno - 1] if lineno and 0 < lineno <= len(lines) else text[:200]
        raise ParseError(f"{what} did not print valid JSON ({exc})", line=line) from exc
    if not isinstance(data, dict):
        raise ParseError(f"{what} printed JSON that is not an object", line=text[:200])
    errors = data.get("errors") or []
    if errors:
        raise SchedulerUnreachable(
            f"{what} reported: {_describe_errors(errors)}; is slurmctld up and reachable? (`scontrol ping`)"
        )
    items = data.get(list_key)
    if not isinstance(items, list):
        raise ParseError(f"{what} printed no {list_key!r} list", line=text[:200])
    return items


def _describe_errors(errors: Iterable[Any]) -> str:
    parts = []
    for err in errors:
        if isinstance(err, dict):
            parts.append(str(err.get("description") or err.get("error") or err))
        else:
            parts.append(str(err))
    return "; ".join(parts)


# --------------------------------------------------------------------------- jobs


def parse_squeue_json(text: str, *, cluster: str = "", opt_in_max_bytes: int = 4096) -> list[JobInfo]:
    """Every job in the output of `squeue --json`, with opt-ins read (a record that cannot be read raises)."""
    return [
        job_from_json(raw, cluster=cluster, opt_in_max_bytes=opt_in_max_bytes)
        for raw in load_document(text, what="squeue --json", list_key="jobs")
    ]


@dataclass(frozen=True)
class SkippedRecord:
    """A job record of a listing that could not be read: why, an excerpt, and its job id when it has one."""

    reason: str
    excerpt: str
    job_id: str | None = None


@dataclass(frozen=True)
class SqueueListing:
    """The jobs of one `squeue --json`, and the records that were skipped."""

    jobs: list[JobInfo]
    skipped: list[SkippedRecord] = field(default_factory=list)


class ListingMemo:
    """The records of the previous listing and their conversions: a record equal to its previous self is not
    converted again (most of a listing is the same from one poll to the next; at 10,000 jobs converting every
    record took ~2 s a poll, comparing them ~0.1 s). Conversions are a pure function of the record."""

    def __init__(self) -> None:
        self.records: dict[str, tuple[Any, JobInfo]] = {}  # job identity -> (raw record, its conversion)
        self.converted: set[str] = set()  # identities the last listing converted anew (new or changed records)

    def convert(self, raw: Any, fresh: dict[str, tuple[Any, JobInfo]], *, cluster: str, opt_in_max_bytes: int) -> JobInfo:
        ident = raw_identity(raw) if isinstance(raw, dict) else ""
        known = self.records.get(ident) if ident else None
        if known is not None and known[0] == raw:
            job = known[1]
        else:
            job = job_from_json(raw, cluster=cluster, opt_in_max_bytes=opt_in_max_bytes)
            self.converted.add(ident)
        if ident:
            fresh[ident] = (raw, job)
        return job.model_copy()  # callers may set fields of theirs (the watch sets `cluster`)


def parse_squeue_listing(
    text: str,
    *,
    cluster: str = "",
    opt_in_max_bytes: int = 4096,
    only: Callable[[str], bool] | None = None,
    memo: ListingMemo | None = None,
) -> SqueueListing:
    """Every readable job of `squeue --json`; an unreadable record is skipped and named in `skipped`.

    `only`: keep just the records whose jobmedic id (`job_identity`) it accepts; the others are not
    even converted (a per-job read on a cluster whose squeue ignores `--jobs` costs one JSON decode).
    `memo`: the previous listing's conversions (kept up to date here), reused for unchanged records.

    Raises:
        ParseError: the document itself is broken (not JSON, no job list).
        SchedulerUnreachable: Slurm reported errors instead of jobs.
    """
    jobs: list[JobInfo] = []
    skipped: list[SkippedRecord] = []
    fresh: dict[str, tuple[Any, JobInfo]] = {}
    if memo is not None:
        memo.converted = set()
    for raw in load_document(text, what="squeue --json", list_key="jobs"):
        if only is not None and not only(raw_identity(raw)):
            continue
        try:
            if memo is not None:
                jobs.append(memo.convert(raw, fresh, cluster=cluster, opt_in_max_bytes=opt_in_max_bytes))
                continue
            jobs.append(job_from_json(raw, cluster=cluster, opt_in_max_bytes=opt_in_max_bytes))
        except (ParseError, ValueError, TypeError, OverflowError) as exc:  # pydantic's ValidationError is a ValueError
            job_id = number(raw.get("job_id")) if isinstance(raw, dict) else None
            skipped.append(SkippedRecord(
                reason=" ".join(str(exc).split())[:300], excerpt=_excerpt(raw), job_id=str(job_id) if job_id else None,
            ))
    if memo is not None:
        memo.records = fresh  # jobs that left the listing leave the memo
    return SqueueListing(jobs=jobs, skipped=skipped)


def job_from_json(raw: Any, *, cluster: str = "", opt_in_max_bytes: int = 4096) -> JobInfo:
    """One job record of `squeue --json` as a `JobInfo`."""
    if not isinstance(raw, dict):
        raise ParseError("squeue --json: a job entry is not an object", line=_excerpt(raw))
    job_id = number(raw.get("job_id"))
    if job_id is None or job_id <= 0:
        raise ParseError("squeue --json: a job entry has no job_id", line=_excerpt(raw))
    state = parse_state(raw.get("job_state"))
    name = _text(raw.get("name"))
    user = _text(raw.get("user_name"))
    comment = _text(raw.get("comment"))
    work_dir = _text(raw.get("current_working_directory"))
    batch_host = _text(raw.get("batch_host"))
    node_list = _text(raw.get("nodes"))
    nodes = hostlist.expand(node_list)
    array_job = number(raw.get("array_job_id")) or 0
    array_task = number(raw.get("array_task_id"))
    priority = number(raw.get("priority"))

    exit_code = exit_signal = None
    if state.finished:
        exit_code, exit_signal = parse_exit_code(raw.get("exit_code"))

    stdout_pattern = _text(raw.get("standard_output"))
    stderr_pattern = _text(raw.get("standard_error"))
    if not stdout_pattern:
        stdout_pattern = "slurm-%A_%a.out" if array_job else "slurm-%j.out"
    if not stderr_pattern:
        stderr_pattern = stdout_pattern  # Slurm writes both streams to one file then
    path_fields: dict[str, Any] = dict(job_id=job_id, array_job_id=array_job, array_task_id=array_task,
                       user=user, name=name, batch_host=batch_host, work_dir=work_dir)

    return JobInfo(
        cluster=cluster,
        job_id=job_identity(job_id, array_job, array_task, _text(raw.get("array_task_string"))),
        name=name,
        user=user,
        state=state,
        reason=parse_reason(raw),
        exit_code=exit_code,
        exit_signal=exit_signal,
        nodes=nodes,
        node_list=node_list,
        batch_host=batch_host,
        submit_time=epoch(raw.get("submit_time")),
        # for a pending job Slurm prints the expected (or the previous) start
        start_time=None if state is JobState.PENDING else epoch(raw.get("start_time")),
        # before the end Slurm prints the projected end (start + time limit)
        end_time=epoch(raw.get("end_time")) if state.finished else None,
        restarts=number(raw.get("restart_cnt")) or 0,
        # 22.05 prints null for an infinite limit (squeue -o %l says UNLIMITED)
        time_limit="UNLIMITED" if "time_limit" in raw and raw["time_limit"] is None
        else format_time_limit(raw.get("time_limit")),
        stdout_path=expand_output_path(stdout_pattern, **path_fields),
        stderr_path=expand_output_path(stderr_pattern, **path_fields),
        work_dir=work_dir,
        comment=comment,
        admin_comment=_text(raw.get("admin_comment")),
        num_tasks=number(raw.get("tasks")),
        num_nodes=number(raw.get("node_count")),
        layout=task_layout(raw, nodes),
        excluded_nodes=hostlist.expand(_text(raw.get("excluded_nodes"))),
        # a hold is priority 0 in Slurm, whatever else the job is doing
        held=priority == 0 and not state.finished,
        requeue_allowed=raw.get("requeue") if isinstance(raw.get("requeue"), bool) else None,
        opt_in=parse_opt_in(comment, max_bytes=opt_in_max_bytes),
    )


def raw_identity(raw: Any) -> str:
    """The jobmedic id of a raw `squeue --json` record ("" when it has none), without converting the record."""
    if not isinstance(raw, dict):
        return ""
    job_id = number(raw.get("job_id"))
    if job_id is None:
        return ""
    return job_identity(job_id, number(raw.get("array_job_id")) or 0, number(raw.get("array_task_id")),
                        _text(raw.get("array_task_string")))


def job_identity(job_id: int, array_job_id: int, array_task_id: int | None, task_string: str = "") -> str:
    """The id jobmedic knows a job by: Slurm's job id, or `ARRAYJOBID_TASKID` for a task of a job array.

    Each task of an array is a job of its own in slurmctld (its own record,
    restart count, excluded nodes, AdminComment, here printed with its own
    `job_id` and the array's `array_job_id`/`array_task_id`); `scontrol
    requeuehold|hold|release|update JobId=`, `scancel` and `squeue` take
    `282_1` and act on that one task (verified on 22.05). The tasks not
    started yet are one record for all of them (the array's own id, no task
    id, `array_task_string` "2-5"): `282_[2-5]`, as squeue prints it; it is
    no task to recover (see `is_array_remainder`).
    """
    if not array_job_id:
        return str(job_id)
    if array_task_id is None or array_task_id in (NO_VAL, INFINITE):
        return f"{array_job_id}_[{task_string}]"
    return f"{array_job_id}_{array_task_id}"


def is_array_remainder(job_id: str) -> bool:
    """Whether `job_id` (see `job_identity`) is the one record of an array's tasks that have not started yet."""
    return job_id.endswith("]") and "_[" in job_id


def array_of(job_id: str) -> str | None:
    """The array job id of a task or remainder id (`282_1`, `282_[2-5]`); None for a job that is no array task."""
    head, sep, _ = job_id.partition("_")
    return head if sep else None


def array_task_count(task_string: str) -> int:
    """How many tasks an `array_task_string` ("2-5", "1,3,7-9", "0-9:2", "0-99%4") names; 0 when unreadable."""
    spec = task_string.split("%", 1)[0]
    count = 0
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        rng, _, step = part.partition(":")
        lo, _, hi = rng.partition("-")
        try:
            first, last, stride = int(lo), int(hi or lo), int(step or 1)
        except ValueError:
            return 0
        if last >= first and stride > 0:
            count += (last - first) // stride + 1
    return count


def parse_state(value: Any) -> JobState:
    """`"RUNNING"` (22.05) or `["PENDING", "REQUEUE_HOLD"]` (newer): the base state."""
    if isinstance(value, list):
        value = value[0] if value else ""
    if not isinstance(value, str):
        return JobState.UNKNOWN
    return JobState.parse(value)


def parse_reason(raw: dict[str, Any]) -> str:
    """The reason as `scontrol show job` prints it: the description when there is one."""
    description = _text(raw.get("state_description"))
    if description:
        return description.replace(" ", "_")
    return _text(raw.get("state_reason"))


def parse_exit_code(value: Any) -> tuple[int | None, int | None]:
    """(exit code, signal) from squeue's raw wait status or a newer exit-code object."""
    if isinstance(value, dict):
        code = number(value.get("return_code"))
        signal = value.get("signal")
        sig = number(signal.get("id")) if isinstance(signal, dict) else number(signal)
        return code, sig
    status = number(value)
    if status is None:
        return None, None
    if status & 0x7F:  # killed by a signal
        return 0, status & 0x7F
    return (status >> 8) & 0xFF, 0


def task_layout(raw: dict[str, Any], nodes: list[str]) -> TaskLayout:
    """Which node runs which global rank, from the allocation (empty before it runs).

    Ranks are placed the way Slurm's default block distribution does it:
    one task per node first, then each node filled up to its CPUs (divided by
    cpus-per-task), then round-robin; `--ntasks-per-node` fixes the count.
    """
    if not nodes:
        return TaskLayout()
    ntasks = number(raw.get("tasks")) or len(nodes)
    per_node = number(raw.get("tasks_per_node")) or 0
    if per_node > 0:
        counts = [0] * len(nodes)
        left = ntasks
        for i in range(len(nodes)):
            counts[i] = min(per_node, left)
            left -= counts[i]
        return TaskLayout(nodes=list(nodes), tasks_per_node=counts)
    cpus = _allocated_cpus(raw.get("job_resources"), nodes)
    if cpus is None:
        return TaskLayout(nodes=list(nodes))
    per_task = number(raw.get("cpus_per_task")) or 1
    return TaskLayout(nodes=list(nodes), tasks_per_node=block_layout([c // per_task for c in cpus], ntasks))


def block_layout(slots: list[int], ntasks: int) -> list[int]:
    """Tasks per node for `ntasks` tasks over nodes with `slots` task slots each."""
    counts = [0] * len(slots)
    left = ntasks
    for i, free in enumerate(slots):  # one task on each node
        if left and counts[i] < free:
            counts[i] += 1
            left -= 1
    for i, free in enumerate(slots):  # then fill nodes in order
        take = min(free - counts[i], left)
        if take > 0:
            counts[i] += take
            left -= take
    while left and counts:  # oversubscribed: spread the rest
        for i in range(len(counts)):
            if not left:
                break
            counts[i] += 1
            left -= 1
    return counts


def _allocated_cpus(resources: Any, nodes: list[str]) -> list[int] | None:
    if not isinstance(resources, dict):
        return None
    allocated = resources.get("allocated_nodes")
    if not isinstance(allocated, list):
        return None
    by_name: dict[str, int] = {}
    for entry in allocated:
        if isinstance(entry, dict) and isinstance(entry.get("nodename"), str):
            cpus = number(entry.get("cpus_used"))
            if cpus is not None:
                by_name[entry["nodename"]] = cpus
    if set(by_name) != set(nodes):
        return None
    return [by_name[node] for node in nodes]


# --------------------------------------------------------------------------- output paths

_PATTERN = re.compile(r"%(\d*)([%AabJjNnstux])")


def expand_output_path(
    pattern: str,
    *,
    job_id: int,
    array_job_id: int = 0,
    array_task_id: int | None = None,
    user: str = "",
    name: str = "",
    batch_host: str = "",
    work_dir: str = "",
) -> str:
    """The file a batch job writes for an `--output`/`--error` pattern (Slurm 22.05 rules).

    `%j` job id, `%x` name, `%u` user, `%A`/`%a` array job/task (the job id and
    4294967294 outside arrays), `%J` job id, `%s` "batch", `%n`/`%t` 0,
    `%N` the batch host (Slurm writes the host's short name, which equals the
    node name on nearly every cluster), `%%` a percent sign, a number after `%`
    pads with zeros (`%5j`); a backslash anywhere turns all of that off (and is
    dropped). `%b` is not expanded by 22.05 and is kept. A value that is not
    known yet (`%N` before the job runs) stays as it is. Relative paths are
    taken from the job's working directory.
    """
    if "\\" in pattern:
        path = pattern.replace("\\", "")
    else:
        values = {
            "j": str(job_id),
            "J": str(job_id),
            "A": str(array_job_id or job_id),
            "a": str(array_task_id) if array_job_id and array_task_id is not None else NON_ARRAY_TASK_ID,
            "u": user,
            "x": name,
            "s": "batch",
            "n": "0",
            "t": "0",
            "N": batch_host,
        }

        def replace(match: re.Match[str]) -> str:
            width, key = match.group(1), match.group(2)
            if key == "%":
                return "%"
            value = values.get(key, "")
            if not value:  # %b, or not known yet
                return match.group(0)
            if width and value.isdigit():
                return value.zfill(int(width))
            return value

        path = _PATTERN.sub(replace, pattern)
    if work_dir and not path.startswith("/"):
        path = posixpath.join(work_dir, path)
    return path


# --------------------------------------------------------------------------- nodes


def parse_sinfo_json(text: str) -> list[NodeInfo]:
    """Every node in the output of `sinfo --json`, each once."""
    nodes: dict[str, NodeInfo] = {}
    for raw in load_document(text, what="sinfo --json", list_key="nodes"):
        node = node_from_json(raw)
        nodes.setdefault(node.name, node)
    return list(nodes.values())


def node_from_json(raw: Any) -> NodeInfo:
    """One node record of `sinfo --json` as a `NodeInfo`."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
        raise ParseError("sinfo --json: a node entry has no name", line=_excerpt(raw))
    state = raw.get("state")
    flags = [str(f).upper() for f in raw.get("state_flags") or [] if isinstance(f, str)]
    if isinstance(state, list):  # newer releases: ["IDLE", "DRAIN"]
        words = [str(s).upper() for s in state if isinstance(s, str)]
        base = words[0] if words else "UNKNOWN"
        flags = words[1:] + [f for f in flags if f not in words]
    elif isinstance(state, str) and state:
        base = state.upper()
    else:
        base = "UNKNOWN"
    return NodeInfo(
        name=raw["name"],
        state=base,
        flags=flags,
        reason=_text(raw.get("reason")),
        reason_user=_text(raw.get("reason_set_by_user")),
        reason_time=epoch(raw.get("reason_changed_at")),
        addr=_text(raw.get("address")),
        hostname=_text(raw.get("hostname")),
    )


# --------------------------------------------------------------------------- scontrol text


def parse_scontrol_record(text: str) -> dict[str, str]:
    """`Key=Value` pairs of one `scontrol show job|node` record (plain or `-o`).

    Only for values Slurm formats itself (StdOut, ExitCode, Restarts, ...):
    scontrol does not quote, so a free-text value (job name, comment, reason)
    containing ` Key=` or a newline cannot be told apart from the next field.
    That is why jobmedic reads jobs and nodes from `--json`.
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        for match in re.finditer(r"(?:^|\s)([A-Za-z][A-Za-z0-9/:_]*)=(\S*(?:\s(?![A-Za-z][A-Za-z0-9/:_]*=)\S+)*)", line):
            fields.setdefault(match.group(1), match.group(2))
    return fields


# --------------------------------------------------------------------------- values


def number(value: Any) -> int | None:
    """An int from 22.05's plain numbers or newer `{"set", "infinite", "number"}` objects."""
    if isinstance(value, dict):
        if value.get("infinite"):
            return INFINITE
        if value.get("set") is False:
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def epoch(value: Any) -> datetime | None:
    """A UTC datetime from Unix seconds; 0, NO_VAL and INFINITE mean "not set"."""
    seconds = number(value)
    if seconds is None or seconds <= 0 or seconds in (NO_VAL, INFINITE):
        return None
    try:
        return datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def format_time_limit(value: Any) -> str:
    """Minutes as Slurm prints them (`1-02:03:00`, `00:30:00`, `UNLIMITED`); "" if unknown."""
    minutes = number(value)
    if minutes is None or minutes == NO_VAL:
        return ""
    if minutes == INFINITE:
        return "UNLIMITED"
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    clock = f"{hours:02d}:{mins:02d}:00"
    return f"{days}-{clock}" if days else clock


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _excerpt(value: Any) -> str:
    try:
        return json.dumps(value)[:300]
    except (TypeError, ValueError):
        return repr(value)[:300]


__all__ = [
    "SkippedRecord", "SqueueListing", "parse_squeue_listing", "raw_identity",
    "array_of", "array_task_count", "block_layout", "epoch", "is_array_remainder", "job_identity", "expand_output_path", "format_time_limit", "job_from_json", "load_document",
    "node_from_json", "number", "parse_exit_code", "parse_reason", "parse_scontrol_record", "parse_sinfo_json",
    "parse_squeue_json", "parse_state", "task_layout",
]
