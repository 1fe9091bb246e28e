"""Replay checked-in workflow histories: a change that would break running workflows fails here.

The histories under `histories/` were recorded from real runs (`jobmedic demo`
and the end-to-end scenarios) with `temporal workflow show -w ID -o json`;
`tests/workflows/record_history.py` records a new one. When a change to a
workflow is intended to be incompatible, version it (`workflow.patched`) and
add a history of the new version instead of editing an old one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.cluster_watch import ClusterWatchWorkflow
from workflows.job_recovery import JobRecoveryWorkflow
from workflows.systemic_guard import SystemicGuardWorkflow
from workflows.messages import JobObservation, JobRecoveryInput

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_there_are_histories_to_replay() -> None:
    kinds = {p.name.split("-")[0] for p in HISTORIES}
    assert {"job_recovery", "cluster_watch"} <= kinds, HISTORIES


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays_without_nondeterminism(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(
        workflows=[JobRecoveryWorkflow, ClusterWatchWorkflow, SystemicGuardWorkflow], data_converter=pydantic_data_converter
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"


@workflow.defn(name="JobRecovery", sandboxed=False)
class _ChangedRecovery:
    """Same workflow name, different commands: starts a timer where the real one runs an activity."""

    @workflow.signal(name="observe")
    def observe(self, obs: JobObservation) -> None:
        pass

    @workflow.run
    async def run(self, inp: JobRecoveryInput) -> None:
        await workflow.sleep(1)


async def test_a_changed_workflow_fails_replay() -> None:
    """The replay test can fail: a workflow that issues different commands is caught."""
    path = next(p for p in HISTORIES if p.name.startswith("job_recovery"))
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(workflows=[_ChangedRecovery], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is not None


def _patch_ids(module) -> set[str]:
    """The ids a workflow module passes to `workflow.patched`, read from its source (names bound to strings)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(module))
    names = {
        t.id: node.value.value
        for node in tree.body if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for t in node.targets if isinstance(t, ast.Name)
    }
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "patched" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Name) and arg.id in names:
                used.add(names[arg.id])
            elif isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                used.add(arg.value)
    return used


def test_every_patch_of_the_recovery_workflow_is_in_a_checked_in_history() -> None:
    """A versioned change is only proven safe for running workflows by a history that took its new branch."""
    import workflows.job_recovery as recovery

    recorded = "\n".join(p.read_text() for p in HISTORIES if p.name.startswith("job_recovery"))
    import base64
    import re

    ids = set()
    for data in re.findall(r'"data":\s*"([A-Za-z0-9+/=]+)"', recorded):
        try:
            text = base64.b64decode(data).decode()
        except (ValueError, UnicodeDecodeError):
            continue
        ids.update(re.findall(r'"id":\s*"([a-z0-9-]+)"', text))
    patches = _patch_ids(recovery)
    assert len(patches) >= 8, patches  # the reader finds them
    assert patches <= ids, f"no history records the new branch of {sorted(patches - ids)}"
