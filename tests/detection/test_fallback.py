"""The last layers of the verdict: an uncaught exception, a fatal signal, an explicit unknown."""

from __future__ import annotations

import pytest

from activities.detection.fallback import ends_in_exception, fatal_signal, unknown_failure
from workflows.contracts import Category, JobInfo, JobState


def _strip(line: str) -> str:
    return line.split("]: ", 1)[-1] if line.startswith("[rank") else line


def numbered(*lines: str) -> list[tuple[int, str]]:
    return list(enumerate(lines, start=100))


def test_traceback_ending_the_output_is_the_cause() -> None:
    tail = numbered(
        "iteration 10 | loss 2.1",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/work/train.py", line 88, in <module>',
        "[rank1]: RuntimeError: Error(s) in loading state_dict for GPT: size mismatch for wte.weight",
        "srun: error: gpu7: task 1: Exited with exit code 1",
    )
    found = ends_in_exception(tail, _strip)
    assert found is not None and found.category == Category.APP_ERROR
    assert found.line_no == 103 and found.signature_text == "RuntimeError"


def test_import_error_without_traceback_still_ends_the_job() -> None:
    found = ends_in_exception(numbered("ModuleNotFoundError: No module named 'apex'"), _strip)
    assert found is not None and found.signature_text == "ModuleNotFoundError"


@pytest.mark.parametrize(
    "lines",
    [
        ("MeanAbsoluteError: 0.360",),  # a metric
        ("ValueError: bad row skipped", "step 1", "step 2", "step 3", "step 4", "step 5", "step 6", "step 7"),  # training went on
        ("all good",),
    ],
)
def test_not_an_ending_exception(lines: tuple[str, ...]) -> None:
    assert ends_in_exception(numbered(*lines), _strip) is None


@pytest.mark.parametrize(
    ("line", "category"),
    [
        ("Segmentation fault (core dumped)", Category.APP_ERROR),
        ("/var/spool/slurmd/job42/slurm_script: line 9: 4242 Killed python train.py", Category.HOST_OOM),
        ("Bus error (core dumped)", Category.HOST_OOM),
        ("exitcode  : -11 (pid: 5151)", Category.APP_ERROR),
        ("Aborted (core dumped)", Category.APP_ERROR),
    ],
)
def test_fatal_signals(line: str, category: Category) -> None:
    found = fatal_signal(numbered(line), None, _strip)
    assert found is not None and found.category == category


def test_signal_from_the_scheduler_exit_code() -> None:
    job = JobInfo(job_id="7", state=JobState.FAILED, exit_code=139)
    found = fatal_signal(numbered("loading data"), job, _strip)
    assert found is not None and found.category == Category.APP_ERROR and "SIGSEGV" in found.note
    assert fatal_signal(numbered("loading data"), JobInfo(job_id="7", exit_code=1), _strip) is None


def test_unknown_names_exit_code_and_last_line() -> None:
    job = JobInfo(job_id="7", state=JobState.FAILED, exit_code=3)
    found = unknown_failure(numbered("step 5", "bye", ""), job, _strip)
    assert found.category == Category.UNKNOWN and "exit code 3" in found.note and found.line == "bye"
