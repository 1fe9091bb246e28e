"""Host lists: pure expansion/compression, cross-checked against Slurm's own scontrol."""

from __future__ import annotations

import random
import subprocess

import pytest

from adapters.errors import ParseError
from adapters.slurm.hostlist import MAX_HOSTS, compress, expand


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("", []),
        ("(null)", []),
        ("node1", ["node1"]),
        ("node[1-3,7]", ["node1", "node2", "node3", "node7"]),
        ("gpu-a[01-02]-b", ["gpu-a01-b", "gpu-a02-b"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("n[9-10]", ["n9", "n10"]),
        ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
        ("x[1-2],y,z[5]", ["x1", "x2", "y", "z5"]),
        (" node1 , node2 ", ["node1", "node2"]),
        ("rack1-n[1-2],rack2-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ],
)
def test_expand(text: str, names: list[str]) -> None:
    assert expand(text) == names


@pytest.mark.parametrize("bad", ["node[1-3", "node1-3]", "node[3-1]", "node[a-b]", "n[[1]]", "n[1-]"])
def test_expand_rejects_malformed_lists_quoting_them(bad: str) -> None:
    with pytest.raises(ParseError) as caught:
        expand(bad)
    assert bad in str(caught.value)


def test_expand_refuses_lists_that_would_not_fit_in_memory() -> None:
    with pytest.raises(ParseError, match="more than"):
        expand(f"n[0-{MAX_HOSTS * 10}]")
    with pytest.raises(ParseError, match="more than"):
        expand("n[0-999]m[0-999]")


@pytest.mark.parametrize(
    ("names", "text"),
    [
        ([], ""),
        (["node1"], "node1"),
        (["node1", "node2", "node3", "node7"], "node[1-3,7]"),
        (["node3", "node1", "node2", "node2"], "node[1-3]"),
        (["gpu-a01-b", "gpu-a02-b"], "gpu-a01-b,gpu-a02-b"),
        (["gpu-a01-b1", "gpu-a01-b2"], "gpu-a01-b[1-2]"),
        (["n08", "n09", "n10"], "n[08-10]"),
        (["n9", "n10"], "n[9-10]"),
        (["n8", "n08"], "n[8,08]"),
        (["login", "node1", "node2"], "login,node[1-2]"),
    ],
)
def test_compress(names: list[str], text: str) -> None:
    assert compress(names) == text


def test_compress_then_expand_gives_the_same_names() -> None:
    rng = random.Random(7)
    for _ in range(300):
        names = {
            f"{rng.choice(['n', 'gpu-', 'r1-n'])}{str(rng.randint(0, 120)).zfill(rng.choice([1, 3]))}"
            f"{rng.choice(['', '-ib'])}"
            for _ in range(rng.randint(1, 30))
        }
        assert sorted(expand(compress(names))) == sorted(names)


@pytest.mark.slurm
@pytest.mark.parametrize(
    "text",
    ["node[1-3,7]", "gpu-a[01-02]-b[1-2],x[8-10],y", "n[08-10,9]", "rack[1-2]-n[001-003]", "a,b,c[1-2]", "n[9-10]"],
)
def test_expand_matches_scontrol_show_hostnames(slurm_cluster: object, text: str) -> None:
    real = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True, text=True, check=True)
    assert expand(text) == real.stdout.split()


@pytest.mark.slurm
def test_compress_reads_back_the_same_in_scontrol(slurm_cluster: object) -> None:
    names = ["node1", "node2", "node3", "node7", "gpu-a01-b", "gpu-a02-b", "n09", "n10", "login", "r1-n8", "r1-n08"]
    real = subprocess.run(["scontrol", "show", "hostnames", compress(names)], capture_output=True, text=True, check=True)
    assert sorted(real.stdout.split()) == sorted(names)
