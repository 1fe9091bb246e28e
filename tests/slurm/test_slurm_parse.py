"""Parsers on real Slurm 22.05 output captured by tests/slurm/data/capture.sh."""

from __future__ import annotations

import json
import posixpath
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from adapters.errors import ParseError, SchedulerUnreachable
from adapters.slurm.client import same_job
from adapters.slurm.parse import (
    block_layout,
    expand_output_path,
    format_time_limit,
    job_from_json,
    node_from_json,
    parse_exit_code,
    parse_scontrol_record,
    parse_sinfo_json,
    parse_squeue_json,
)
from workflows.contracts import JobInfo, JobKey, JobState, Mode

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def squeue_text() -> str:
    return (DATA / "squeue.json").read_text()


def first_id() -> int:
    return min(int(line) for line in (DATA / "ids.txt").read_text().split() if line.isdigit())


def captured(squeue_text: str) -> list[JobInfo]:
    """The jobs capture.sh submitted (older fx-* jobs can still be in the listing)."""
    return [j for j in parse_squeue_json(squeue_text, cluster="lab")
            if j.name.startswith("fx-") and int(j.job_id.split("_", 1)[0]) >= first_id()]


@pytest.fixture(scope="module")
def jobs(squeue_text: str) -> dict[str, JobInfo]:
    """The fx-* jobs of the capture by name (names cut at the first ';')."""
    return {job.name.split(";")[0]: job for job in captured(squeue_text)}


def test_every_captured_job_parses(squeue_text: str) -> None:
    raw = json.loads(squeue_text)["jobs"]
    parsed = parse_squeue_json(squeue_text, cluster="lab")
    # a task of a job array is known as ARRAYJOBID_TASKID (parse.job_identity), any other job by its id
    assert [j.job_id for j in parsed] == [
        f"{r['array_job_id']}_{r['array_task_id']}" if r.get("array_job_id") else str(r["job_id"]) for r in raw
    ]
    assert all(j.cluster == "lab" for j in parsed)


def test_running_job(jobs: dict[str, JobInfo]) -> None:
    job = jobs["fx-run"]
    assert job.state is JobState.RUNNING and not job.held
    assert job.nodes and job.node_list == job.nodes[0] and job.batch_host == job.nodes[0]
    assert job.user == "root" and job.restarts == 0
    assert job.submit_time is not None and job.start_time is not None and job.end_time is None
    assert job.exit_code is None
    assert job.time_limit == "UNLIMITED"
    assert job.stdout_path == posixpath.join(job.work_dir, f"fx-run-{job.job_id}.out")
    assert job.stderr_path == posixpath.join(job.work_dir, f"fx-run-{job.job_id}.err")
    assert job.opt_in.opted_in and job.opt_in.opt_in is not None
    assert job.opt_in.opt_in.max_attempts == 4 and job.opt_in.opt_in.checkpoint_dir == "/ckpt/fx"
    assert job.requeue_allowed is True


def test_uneven_two_node_layout_maps_ranks_to_nodes(jobs: dict[str, JobInfo]) -> None:
    # -N2 -n3 on 2-CPU nodes: Slurm gave 2 CPUs on the first node and 1 on the second
    job = jobs["fx-uneven"]
    assert job.num_nodes == 2 and job.num_tasks == 3
    assert job.layout.nodes == job.nodes and job.layout.tasks_per_node == [2, 1]
    first, second = job.nodes
    assert [job.layout.node_of_rank(r) for r in range(4)] == [first, first, second, None]


def test_held_and_requeue_held_jobs(jobs: dict[str, JobInfo]) -> None:
    held = jobs["fx-held"]
    assert held.state is JobState.PENDING and held.held and held.reason == "JobHeldUser"
    assert held.nodes == [] and held.start_time is None and held.layout.nodes == []
    requeued = jobs["fx-rqhold"]
    assert requeued.state is JobState.PENDING and requeued.held and requeued.restarts == 1
    assert requeued.reason == "job_requeued_in_held_state"
    assert requeued.excluded_nodes == ["node1", "node2"]


def test_finished_jobs_exit_codes(jobs: dict[str, JobInfo]) -> None:
    failed = jobs["fx-fail"]
    assert failed.state is JobState.FAILED and failed.reason == "NonZeroExitCode"
    assert (failed.exit_code, failed.exit_signal) == (3, 0)
    assert failed.end_time is not None
    assert failed.stdout_path == failed.stderr_path == posixpath.join(failed.work_dir, f"slurm-{failed.job_id}.out")
    cancelled = jobs["fx-cancel"]
    assert cancelled.state is JobState.CANCELLED and (cancelled.exit_code, cancelled.exit_signal) == (0, 15)
    assert jobs["fx-ok"].state is JobState.COMPLETED and jobs["fx-ok"].exit_code == 0


def test_output_paths_are_the_files_slurm_created(jobs: dict[str, JobInfo]) -> None:
    created = set((DATA / "expected_files.txt").read_text().split())
    ours = {posixpath.basename(p) for j in jobs.values() for p in (j.stdout_path, j.stderr_path) if p != "/dev/null"}
    # fx-arr has two tasks; the capture keeps the newer one by name, so check the array paths apart
    assert ours - created == set()
    assert jobs["fx-relative"].stdout_path.endswith(f"/sub/slurm-{jobs['fx-relative'].job_id}.out")


def test_array_task_paths(squeue_text: str) -> None:
    created = set((DATA / "expected_files.txt").read_text().split())
    tasks = [j for j in captured(squeue_text) if j.name == "fx-arr"]
    names = {posixpath.basename(j.stdout_path) for j in tasks}
    assert len(names) == len(tasks) >= 2 and names <= created


def test_squeue_agrees_on_state_reason_and_time_limit(jobs: dict[str, JobInfo]) -> None:
    by_id = {j.job_id: j for j in jobs.values()}
    rows = [line.split("|") for line in (DATA / "squeue_fields.txt").read_text().splitlines()]
    checked = 0
    for job_id, state, limit, reason, _share in rows:
        if job_id in by_id:
            job = by_id[job_id]
            assert (job.state.value, job.time_limit, job.reason) == (state, limit, reason.replace(" ", "_")), job_id
            checked += 1
    assert checked >= 10


def test_scontrol_agrees_on_expanded_paths(jobs: dict[str, JobInfo]) -> None:
    text = (DATA / "scontrol_show_job.txt").read_text()
    records = [parse_scontrol_record(block) for block in text.split("\n\n") if block.strip()]
    by_id = {r["JobId"]: r for r in records}
    for name in ("fx-run", "fx-fail", "fx-relative", "fx-ok"):
        job = jobs[name]
        assert by_id[job.job_id]["StdOut"] == job.stdout_path, name
        assert by_id[job.job_id]["StdErr"] == job.stderr_path, name
        assert int(by_id[job.job_id]["Restarts"]) == job.restarts
    assert by_id[jobs["fx-fail"].job_id]["ExitCode"] == "3:0"


def test_one_line_scontrol_records_parse_too(jobs: dict[str, JobInfo]) -> None:
    lines = (DATA / "scontrol_show_job_o.txt").read_text().splitlines()
    records = [parse_scontrol_record(line) for line in lines if line.strip()]
    assert {r["JobId"] for r in records} >= {jobs["fx-run"].job_id, jobs["fx-fail"].job_id}
    assert all(r["JobState"] for r in records)


def test_opt_in_variants(jobs: dict[str, JobInfo]) -> None:
    nvidia = jobs["fx-nvidia"].opt_in
    assert nvidia.opted_in and nvidia.opt_in is not None
    assert (nvidia.opt_in.key, nvidia.opt_in.mode, nvidia.opt_in.environment) == ("nvidia-recovery", Mode.ACTION, "staging")
    assert "'observe' or 'action'" in (jobs["fx-invalid"].opt_in.invalid_reason or "")
    plain = jobs["fx-plain"].opt_in
    assert not plain.opted_in and not plain.invalid


def test_hostile_name_and_comment_are_kept_verbatim(squeue_text: str) -> None:
    evil = next(j for j in captured(squeue_text) if j.name.startswith("fx-evil"))
    assert evil.name == "fx-evil;$(touch /tmp/fx-marker)`id`\"'\nx|y"
    assert evil.comment.startswith('{"jobmedic": "x;$(touch /tmp/fx-marker)`id`')
    assert "\n" in evil.comment and "\x1f" in evil.comment
    assert evil.opt_in.invalid and not evil.opt_in.opted_in


def test_one_megabyte_comment_in_a_real_record(squeue_text: str) -> None:
    # Slurm itself refuses comments over 1024 bytes at sbatch time; a record that
    # carries one anyway (another release, an admin edit) must still parse
    raw = next(r for r in json.loads(squeue_text)["jobs"] if r["name"] == "fx-run")
    raw["comment"] = '{"jobmedic": {"environment": "' + "A" * (1 << 20) + '"}}'
    job = job_from_json(raw)
    assert job.opt_in.invalid and "bytes" in (job.opt_in.invalid_reason or "")
    assert len(job.comment) > 1 << 20


def test_nodes_from_real_sinfo() -> None:
    nodes = {n.name: n for n in parse_sinfo_json((DATA / "sinfo.json").read_text())}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    ours, foreign, dead = nodes["node2"], nodes["node3"], nodes["node4"]
    assert ours.drained and ours.drained_by_jobmedic and ours.reason.startswith("jobmedic: xid 79")
    assert foreign.drained and not foreign.drained_by_jobmedic and foreign.reason == "rma: bad DIMM; ticket #42"
    assert foreign.reason_user == "root" and isinstance(foreign.reason_time, datetime)
    assert dead.state == "DOWN" and "NOT_RESPONDING" in dead.flags and dead.reason == "Not responding"
    assert dead.unhealthy and not dead.drained
    assert not nodes["node1"].unhealthy


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"jobs": [\n  {"job_id": 1,\n  oops\n]}', "oops"),
        ("squeue: error: Unable to contact slurm controller", "Unable to contact"),
        ("[]", "not an object"),
        ('{"meta": {}}', "no 'jobs' list"),
        ('{"jobs": [42]}', "42"),
        ('{"jobs": [{"name": "no id"}]}', "no id"),
    ],
)
def test_malformed_output_raises_parse_error_with_the_line(text: str, message: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_squeue_json(text)
    assert message in str(caught.value)


def test_errors_reported_inside_the_document_mean_unreachable() -> None:
    # what squeue --json prints (exit code 0!) when slurmctld does not answer, 22.05
    text = json.dumps({"errors": [{"description": "Failed while looking for jobs", "error_number": -1,
                                   "error": "Unspecified error", "source": "slurm_load_jobs"}], "jobs": []})
    with pytest.raises(SchedulerUnreachable, match="Failed while looking for jobs") as caught:
        parse_squeue_json(text)
    assert caught.value.retryable
    with pytest.raises(SchedulerUnreachable, match="Unspecified error"):
        parse_sinfo_json(json.dumps({"errors": [{"error": "Unspecified error", "errno": -1}], "nodes": []}))


def test_unknown_state_is_a_state(squeue_text: str) -> None:
    raw = dict(json.loads(squeue_text)["jobs"][0], job_state="TELEPORTING")
    assert job_from_json(raw).state is JobState.UNKNOWN


def test_newer_schema_shapes() -> None:
    # hand-written in the shape Slurm 23.x prints (not captured here: this machine runs 22.05)
    raw: dict[str, Any] = {
        "job_id": 77, "name": "n", "job_state": ["PENDING", "REQUEUE_HOLD"],
        "priority": {"set": True, "infinite": False, "number": 0},
        "submit_time": {"set": True, "infinite": False, "number": 1_700_000_000},
        "time_limit": {"set": False, "infinite": True, "number": 0},
        "exit_code": {"status": ["EXITED"], "return_code": {"set": True, "number": 2}},
        "restart_cnt": 1, "nodes": "",
    }
    job = job_from_json(raw)
    assert job.state is JobState.PENDING and job.held and job.restarts == 1
    assert job.submit_time == datetime.fromtimestamp(1_700_000_000, tz=UTC)
    assert job.time_limit == "UNLIMITED"
    node = node_from_json({"name": "n1", "state": ["IDLE", "DRAIN"], "reason": "jobmedic: x"})
    assert node.state == "IDLE" and node.flags == ["DRAIN"] and node.drained_by_jobmedic


@pytest.mark.parametrize(
    ("status", "expected"), [(0, (0, 0)), (768, (3, 0)), (15, (0, 15)), (143 << 8, (143, 0)), (None, (None, None))]
)
def test_wait_status(status: int | None, expected: tuple[int | None, int | None]) -> None:
    assert parse_exit_code(status) == expected


@pytest.mark.parametrize(
    ("minutes", "text"), [(30, "00:30:00"), (90, "01:30:00"), (525600, "365-00:00:00"), (0xFFFFFFFF, "UNLIMITED"),
                          (None, "")]
)
def test_time_limit(minutes: int | None, text: str) -> None:
    assert format_time_limit(minutes) == text


@pytest.mark.parametrize(
    ("slots", "ntasks", "expected"),
    [([2, 1], 3, [2, 1]), ([2, 2], 2, [1, 1]), ([2, 2], 3, [2, 1]), ([4, 4, 4], 6, [4, 1, 1]), ([1, 1], 5, [3, 2])],
)
def test_block_layout(slots: list[int], ntasks: int, expected: list[int]) -> None:
    assert block_layout(slots, ntasks) == expected


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        # observed on Slurm 22.05 (see tests/slurm/data/capture.sh and the adapter docstring)
        ("p_%A_%a_%J_%s_%n_%t_%b_%5j_%%_%u_%x.out", "/w/p_2_4294967294_2_batch_0_0_%b_00002_%_root_my job.out"),
        ("bs\\_%j.out", "/w/bs_%j.out"),
        ("/abs/%N-%j.log", "/abs/node7-2.log"),
        ("rel/%x.log", "/w/rel/my job.log"),
    ],
)
def test_output_path_patterns(pattern: str, expected: str) -> None:
    assert expand_output_path(pattern, job_id=2, user="root", name="my job", batch_host="node7", work_dir="/w") == expected


def test_output_path_of_an_array_task_and_of_a_pending_job() -> None:
    assert expand_output_path("a-%A_%a-%j.out", job_id=6, array_job_id=3, array_task_id=3) == "a-3_3-6.out"
    assert expand_output_path("/o/%N.out", job_id=6) == "/o/%N.out"  # host not known before it runs


def test_same_job_follows_requeues_but_not_recycled_ids() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    key = JobKey(cluster="lab", job_id="5", submit_time=t0)
    assert same_job(key, JobInfo(cluster="lab", job_id="5", submit_time=t0))
    # Slurm moves the submit time to the requeue
    assert same_job(key, JobInfo(cluster="lab", job_id="5", submit_time=t0 + timedelta(minutes=3), restarts=1))
    # same id, later submit, never requeued: a new job with a recycled id
    assert not same_job(key, JobInfo(cluster="lab", job_id="5", submit_time=t0 + timedelta(days=2)))
    assert not same_job(key, JobInfo(cluster="lab", job_id="5", submit_time=t0 - timedelta(days=2), restarts=3))
    assert not same_job(key, JobInfo(cluster="lab", job_id="6", submit_time=t0))
    naive = JobKey(cluster="lab", job_id="5", submit_time=t0.replace(tzinfo=None))
    assert same_job(naive, JobInfo(cluster="lab", job_id="5", submit_time=t0))
