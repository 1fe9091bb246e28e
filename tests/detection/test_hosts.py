"""NodeMap: every spelling of a node (name, FQDN, address, address with port, cloud form) -> its name."""

from __future__ import annotations

import pytest

from activities.detection.hosts import NodeMap, mentioned_ips, strip_port
from workflows.contracts import NodeInfo

NODES = NodeMap.build(
    ["gpu-b16"],
    [
        NodeInfo(name="gpu-b16", addr="10.20.1.16", hostname="gpu-b16.hpc.example.org"),
        NodeInfo(name="gpu-b17", addr="10.20.1.17", hostname="gpu-b17.hpc.example.org"),
        NodeInfo(name="ip-10-0-3-44"),
        NodeInfo(name="lab1", addr="localhost", hostname="localhost"),
    ],
)


@pytest.mark.parametrize(
    ("token", "node"),
    [
        ("gpu-b17", "gpu-b17"),
        ("gpu-b17.hpc.example.org", "gpu-b17"),
        ("gpu-b17.hpc.example.org.", "gpu-b17"),
        ("GPU-B17", "gpu-b17"),
        ("10.20.1.17", "gpu-b17"),
        ("10.20.1.17:29500", "gpu-b17"),
        ("10.20.1.17<45123>", "gpu-b17"),
        ("[10.20.1.16]:22", "gpu-b16"),
        ("10.0.3.44", "ip-10-0-3-44"),
        ("ip-10-0-3-44.ec2.internal", "ip-10-0-3-44"),
        ("gpu-b18", None),
        ("10.20.1.18", None),
        ("localhost", None),  # a lab's shared loopback names no node
    ],
)
def test_resolve(token: str, node: str | None) -> None:
    assert NODES.resolve(token) == node


def test_mentioned_in_prose_in_order() -> None:
    line = "GPU 3 on instance gpu-b17.hpc.example.org is unhealthy; peer 10.20.1.16<51234> closed, retrying gpu-b17"
    assert NODES.mentioned(line) == ["gpu-b17", "gpu-b16"]


def test_unknown_names_stay_as_written() -> None:
    assert NODES.normalise("node42") == "node42"
    assert NODES.normalise("10.9.9.9:1234") == "10.9.9.9"
    assert NodeMap().mentioned("gpu-b17 died") == []


def test_offline_ips() -> None:
    text = "connection closed by remote peer 10.1.2.3<55004>, local 10.1.2.4:29500, version 2.18.1.0, 127.0.0.1"
    assert mentioned_ips(text) == ["10.1.2.3", "10.1.2.4"]


@pytest.mark.parametrize(("raw", "bare"), [("10.0.0.5:29500", "10.0.0.5"), ("h1<77>", "h1"), ("node1", "node1")])
def test_strip_port(raw: str, bare: str) -> None:
    assert strip_port(raw) == bare
