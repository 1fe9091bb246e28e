"""The policy runs where it is meant to: inside Temporal's workflow sandbox.

The sandbox re-imports workflow code and rejects modules with side effects
(loguru, httpx, ...) and non-deterministic calls. A static check keeps the
policy modules' imports to the standard library, pydantic and the contracts;
a live check decides inside a sandboxed workflow on the dev server and must
agree with a decision made outside.
"""

from __future__ import annotations

import ast
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from workflows.contracts import (
    Advice,
    AdviceAction,
    Category,
    Contract,
    Implicated,
    JobInfo,
    PolicyConfig,
    Verdict,
)
from workflows.history import JobHistory

REPO = Path(__file__).resolve().parents[2]
ALLOWED_PROJECT_MODULES = {"workflows.contracts", "workflows.history", "workflows.systemic"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_policy_modules_import_only_what_the_sandbox_allows() -> None:
    for name in ("policy.py", "history.py", "systemic.py"):
        for module in _imports(REPO / "workflows" / name):
            top = module.split(".", 1)[0]
            allowed = (
                module == "__future__"
                or top in sys.stdlib_module_names
                or top == "pydantic"
                or module in ALLOWED_PROJECT_MODULES
            )
            assert allowed, f"workflows/{name} imports {module}, which the workflow sandbox must not load"


class DecideInput(Contract):
    verdict: Verdict
    job: JobInfo
    history: JobHistory
    config: PolicyConfig
    now: datetime


@workflow.defn(sandboxed=True)
class DecideWorkflow:
    @workflow.run
    async def run(self, given: DecideInput) -> Advice:
        # Imported here, so that the sandbox imports the policy afresh under its restrictions.
        from workflows import policy

        advice = policy.decide(given.verdict, given.job, given.history, given.config, now=given.now)
        # Record the outcome in workflow state too, as the recovery workflow will.
        given.history.record_outcome(given.verdict, advice, ended_at=workflow.now())
        return advice


# Importing the policy inside `run` (so the sandbox loads it under its restrictions)
# makes the sandbox note that it came after the initial workflow load; that is intended.
@pytest.mark.filterwarnings(r"ignore:Module workflows(\.\w+)? was imported after initial workflow load:UserWarning")
async def test_decide_inside_a_sandboxed_workflow(temporal_server) -> None:
    """A policy that imports loguru or reads the clock makes the workflow task fail and this time out."""
    client = await Client.connect(
        temporal_server.address, namespace=temporal_server.namespace, data_converter=pydantic_data_converter
    )
    now = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
    history = JobHistory().start_attempt(at=now - timedelta(hours=1)).note_checkpoint(300)
    given = DecideInput(
        verdict=Verdict(category=Category.GPU_HARDWARE, implicated=Implicated(hosts=["node3", "node1"])),
        job=JobInfo(cluster="lab", job_id="4242", exit_code=1),
        history=history,
        config=PolicyConfig(drain_nodes=True),
        now=now,
    )
    from workflows.policy import decide

    outside = decide(given.verdict, given.job, given.history, given.config, now=now)
    # Only this test module passes through (it is not importable by name under
    # pytest's importlib mode); the policy itself is imported inside the sandbox.
    runner = SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules(__name__))
    queue = f"policy-sandbox-{uuid.uuid4().hex}"
    async with Worker(client, task_queue=queue, workflows=[DecideWorkflow], workflow_runner=runner):
        inside = await client.execute_workflow(
            DecideWorkflow.run,
            given,
            id=f"policy-sandbox-{uuid.uuid4().hex}",
            task_queue=queue,
            result_type=Advice,
            execution_timeout=timedelta(seconds=20),
        )
    assert inside == outside
    assert inside.action == AdviceAction.RESTART_DRAIN
    assert inside.exclude_nodes == ["node1", "node3"]
