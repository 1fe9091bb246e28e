"""Node states, drain/resume and the foreign-drain refusal, on the real cluster."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from adapters.errors import ActionRefused
from adapters.slurm.client import SlurmClient
from workflows.contracts import NodeInfo

from .conftest import ensure_resumed, scontrol

pytestmark = pytest.mark.slurm


async def wait_node(client: SlurmClient, name: str, done: object, *, timeout: float, what: str) -> NodeInfo:
    deadline = time.monotonic() + timeout
    while True:
        node = await client.get_node(name)
        if done(node):  # type: ignore[operator]
            return node
        if time.monotonic() > deadline:
            pytest.fail(f"node {name} not {what} after {timeout} s: {node}")
        await asyncio.sleep(0.5)


@pytest.fixture
def drained_by_ops(slurm_cluster: object) -> Iterator[str]:
    node = slurm_cluster.nodes[-2]  # type: ignore[attr-defined]
    done = scontrol("update", f"NodeName={node}", "State=DRAIN", "Reason=ops: maintenance window")
    assert done.returncode == 0, done.stderr
    yield node
    ensure_resumed(node)


async def test_list_nodes_in_one_query(client: SlurmClient, slurm_cluster: object) -> None:
    nodes = await client.list_nodes()
    assert {n.name for n in nodes} >= set(slurm_cluster.nodes)  # type: ignore[attr-defined]
    assert all(n.state for n in nodes)


async def test_drain_and_resume(client: SlurmClient, drain_node_name: str) -> None:
    reason = f"xid 79 seen by test {uuid.uuid4().hex[:6]}"
    drained = await client.drain_node(drain_node_name, reason)
    assert drained.changed and drained.node is not None
    assert drained.node.drained and drained.node.drained_by_jobmedic
    assert drained.node.reason == f"jobmedic: {reason}"
    again = await client.drain_node(drain_node_name, "another reason")
    assert not again.changed and again.node is not None and again.node.reason == f"jobmedic: {reason}"

    resumed = await client.resume_node(drain_node_name)
    assert resumed.changed and resumed.node is not None and not resumed.node.drained
    assert not (await client.resume_node(drain_node_name)).changed


async def test_a_node_drained_by_someone_else_is_left_alone(client: SlurmClient, drained_by_ops: str) -> None:
    with pytest.raises(ActionRefused, match="ops: maintenance window"):
        await client.drain_node(drained_by_ops, "we think it is bad")
    with pytest.raises(ActionRefused, match="not by jobmedic"):
        await client.resume_node(drained_by_ops)
    node = await client.get_node(drained_by_ops)
    assert node.drained and node.reason == "ops: maintenance window"


async def test_unknown_node_is_refused(client: SlurmClient, slurm_cluster: object) -> None:
    with pytest.raises(ActionRefused, match="no node named"):
        await client.drain_node("node999", "x")
    with pytest.raises(ActionRefused, match="not a node name"):
        await client.drain_node("node1 State=DOWN", "x")


@pytest.fixture
async def killed_node(slurm_cluster: object, local_client: SlurmClient) -> AsyncIterator[str]:
    """An idle node whose slurmd is killed; started again and waited for afterwards."""
    nodes = await local_client.list_nodes()
    idle = [n.name for n in nodes if n.state == "IDLE" and not n.flags]
    victim = idle[-1] if idle else slurm_cluster.nodes[-1]  # type: ignore[attr-defined]
    node_ctl = str(slurm_cluster.node_ctl)  # type: ignore[attr-defined]
    subprocess.run([node_ctl, "kill", victim], check=True, capture_output=True, timeout=30)
    yield victim
    subprocess.run([node_ctl, "start", victim], check=True, capture_output=True, timeout=30)
    ensure_resumed(victim)  # in case a failed test left it drained
    await wait_node(local_client, victim, lambda n: n.state == "IDLE" and not n.flags, timeout=60,
                    what="idle again after slurmd restart")


async def test_a_killed_node_shows_not_responding_then_down(local_client: SlurmClient, killed_node: str) -> None:
    # Slurm first flags the node (idle*), then sets it DOWN with reason "Not responding"
    flagged = await wait_node(local_client, killed_node, lambda n: "NOT_RESPONDING" in n.flags, timeout=60,
                              what="NOT_RESPONDING")
    assert flagged.unhealthy
    down = await wait_node(local_client, killed_node, lambda n: n.state == "DOWN", timeout=60, what="DOWN")
    assert down.unhealthy and down.reason == "Not responding"
    # Slurm set it down: its reason is not jobmedic's to overwrite
    with pytest.raises(ActionRefused, match="Not responding"):
        await local_client.drain_node(killed_node, "dead")
