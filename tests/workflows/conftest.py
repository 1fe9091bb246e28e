"""Fixtures of the end-to-end tests: one jobmedic deployment per test on the real stack."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from workers.temporal_client import end_cluster_workflows

from tests.workflows.harness import Scenario, WorkerProcess, cancel, unique


async def terminate_cluster_workflows(address: str, cluster: str) -> None:
    """End the test's watch and job workflows so nothing keeps polling after the test."""
    try:
        client = await Client.connect(address, data_converter=pydantic_data_converter)
    except RuntimeError:
        return  # a test's private server, already gone
    await end_cluster_workflows(client, cluster, reason="test finished")


@pytest.fixture
async def scenario(tmp_path, slurm_cluster, temporal_server) -> AsyncIterator[Scenario]:
    sc = Scenario(
        tmp=tmp_path,
        cluster=unique("t"),
        environment=unique("env"),
        audit_url=f"sqlite:///{tmp_path / 'audit.db'}",
        temporal_address=temporal_server.address,
    )
    yield sc
    for job_id in sc.jobs:
        cancel(job_id)
    await terminate_cluster_workflows(sc.temporal_address, sc.cluster)


@pytest.fixture
def worker(scenario: Scenario, request) -> WorkerProcess:
    proc = WorkerProcess(scenario)
    yield proc
    proc.stop()
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        print(f"--- worker log ({proc.log}) ---\n{proc.tail(120)}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep
