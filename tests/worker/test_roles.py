"""`jobmedic worker --role`: the two halves of a deployment together are what one process runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from workers.settings import Settings
from workers.worker import build_workers


def settings(tmp_path: Path, address: str) -> Settings:
    return Settings.model_validate({
        "data_dir": str(tmp_path),
        "temporal": {"address": address, "task_queue": "jobmedic-roles-main"},
        "audit": {"url": f"sqlite:///{tmp_path / 'audit.db'}"},
        "clusters": [{"name": "roles-lab", "environment": "lab"}],
    })


async def test_the_workflows_and_clusters_roles_split_the_task_queues_of_one_worker(
    tmp_path: Path, temporal_server, slurm_cluster
) -> None:
    s = settings(tmp_path, temporal_server.address)

    async def client() -> Client:  # one per process (a client refuses a second worker on the same queue)
        return await Client.connect(temporal_server.address, namespace=temporal_server.namespace,
                                    data_converter=pydantic_data_converter)

    queues = {role: sorted(w.task_queue for w in await build_workers(s, await client(), role=role))
              for role in ("all", "workflows", "clusters")}
    assert queues["workflows"] == ["jobmedic-roles-main"]
    assert queues["clusters"] == [s.clusters[0].task_queue]
    assert queues["all"] == sorted(queues["workflows"] + queues["clusters"])
    with pytest.raises(ValueError, match="unknown worker role"):
        await build_workers(s, await client(), role="everything")
