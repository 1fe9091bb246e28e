"""The systemic guard's failure domains from `scontrol show partition -o` and `scontrol show topology`."""

from __future__ import annotations

from activities.systemic import parse_partitions, parse_topology

PARTITIONS = (
    "PartitionName=gpu AllowGroups=ALL Nodes=node[1-3] State=UP TotalNodes=3\n"
    "PartitionName=empty AllowGroups=ALL Nodes=(null) State=UP TotalNodes=0\n"
)
TOPOLOGY = (
    "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-2]\n"
    "SwitchName=spine Level=1 LinkSpeed=1 Switches=leaf[1-2]\n"
)


def test_partitions_and_switches_with_nodes_become_domains() -> None:
    assert parse_partitions(PARTITIONS) == {"partition:gpu": ["node1", "node2", "node3"]}
    assert parse_topology(TOPOLOGY) == {"switch:leaf1": ["node1", "node2"]}
    assert parse_partitions("") == {} and parse_topology("") == {}
