"""The slow node is the robust outlier against the job's other nodes; a job that changed as a whole has none."""

from __future__ import annotations

import pytest

from activities.detection.culprit import find_culprits
from activities.detection.rank_timing import NodeTiming
from adapters.metrics.telemetry import GpuTelemetry, NodeTelemetry

NODES = ["n1", "n2", "n3", "n4"]
# healthy figures with the small spread real nodes have
CLOCK = {"n1": 1980.0, "n2": 1965.0, "n3": 1972.0, "n4": 1980.0, "n5": 1975.0, "n6": 1970.0}
TEMP = {"n1": 61.0, "n2": 63.0, "n3": 60.0, "n4": 62.0, "n5": 61.0, "n6": 64.0}


def node(host: str, *, gpus: int = 2, bad: dict | None = None, **every_gpu) -> NodeTelemetry:
    """A node whose GPUs look healthy; `every_gpu` changes all of them, `bad` only GPU 1."""
    base = {"sm_clock_mhz": CLOCK.get(host, 1975.0), "temp_c": TEMP.get(host, 62.0), "power_w": 690.0,
            "util_pct": 96.0, "throttle_share": 0.0, "ecc_sbe_increase": 0.0, "ecc_dbe_increase": 0.0}
    base.update(every_gpu)
    out = []
    for i in range(gpus):
        fields = dict(base, **(bad or {})) if i == 1 else dict(base)
        out.append(GpuTelemetry(gpu=str(i), pci_bus_id=f"00000000:{0x18 + i:02X}:00.0", **fields))
    return NodeTelemetry(host=host, gpus=out)


def job(**special: NodeTelemetry) -> dict[str, NodeTelemetry]:
    return {h: special.get(h) or node(h) for h in NODES}


DEGRADED = {"sm_clock_mhz": 1410.0, "temp_c": 87.0, "power_w": 520.0, "throttle_share": 1.0,
            "throttle_reasons": ["HW slowdown", "HW thermal slowdown"]}


@pytest.mark.parametrize(
    ("name", "telemetry", "timings", "nodes", "culprits"),
    [
        ("all alike", job(), {}, NODES, []),
        ("one GPU degraded: low clock, hot, throttled", job(n3=node("n3", bad=DEGRADED)), {}, NODES, ["n3"]),
        ("low SM clock alone", job(n2=node("n2", bad={"sm_clock_mhz": 1600.0})), {}, NODES, ["n2"]),
        ("a small clock dip is not material", job(n2=node("n2", bad={"sm_clock_mhz": 1900.0})), {}, NODES, []),
        ("hot but not slow: supporting only", job(n4=node("n4", temp_c=80.0)), {}, NODES, []),
        ("low power alone: supporting only", job(n4=node("n4", power_w=400.0)), {}, NODES, []),
        ("sustained harmful throttling", job(n1=node("n1", bad={"throttle_share": 0.6,
                                                                "throttle_reasons": ["HW power brake slowdown"]})),
         {}, NODES, ["n1"]),
        ("throttled everywhere: the facility, not a node",
         {h: node(h, throttle_share=0.9, throttle_reasons=["HW power brake slowdown"]) for h in NODES},
         {}, NODES, []),
        ("low utilisation: a node starving its GPUs", job(n2=node("n2", util_pct=55.0)), {}, NODES, ["n2"]),
        ("Xid on one node", job(n2=node("n2", bad={"xid": 79})), {}, NODES, ["n2"]),
        ("Xid on every node: not one node's", {h: node(h, xid=31) for h in NODES}, {}, NODES, []),
        ("uncorrectable ECC on one node", job(n4=node("n4", bad={"ecc_dbe_increase": 2.0})), {}, NODES, ["n4"]),
        ("most nodes slow: the job changed", job(n1=node("n1", sm_clock_mhz=1400.0), n2=node("n2", sm_clock_mhz=1400.0),
                                                 n3=node("n3", sm_clock_mhz=1400.0)), {}, NODES, []),
        ("two nodes: the slow one", {"n1": node("n1"), "n2": node("n2", sm_clock_mhz=1200.0)}, {}, ["n1", "n2"],
         ["n2"]),
        ("one node: nothing to compare with", {"n1": node("n1", sm_clock_mhz=900.0)}, {}, ["n1"], []),
        ("no data for a node never makes it the culprit",
         {**job(), "n4": NodeTelemetry(host="n4")}, {}, NODES, []),
    ],
)
def test_find_culprits_table(name: str, telemetry: dict, timings: dict, nodes: list[str], culprits: list[str]) -> None:
    finding = find_culprits(telemetry, timings, nodes=nodes)
    assert finding.culprits == culprits, (name, finding.explanation)
    # every node is in the audit either way
    assert {e.host for e in finding.evidence if e.host} == set(nodes), name


def test_wide_spread_raises_the_bar_median_mad_not_a_fixed_threshold() -> None:
    # nodes whose clocks differ widely anyway (mixed SKUs, power caps): 12 % below the median is not an outlier
    clocks = {"n1": 1980.0, "n2": 1500.0, "n3": 1990.0, "n4": 1520.0, "n5": 1985.0, "n6": 1510.0, "n7": 1540.0}
    telemetry = {h: node(h, sm_clock_mhz=c) for h, c in clocks.items()}
    assert find_culprits(telemetry, {}, nodes=list(clocks)).culprits == []
    # the same node on a uniform job is named
    uniform = {h: node(h) for h in ["n1", "n2", "n3", "n4", "n5", "n6"]} | {"n7": node("n7", sm_clock_mhz=1540.0)}
    assert find_culprits(uniform, {}, nodes=list(uniform)).culprits == ["n7"]


def test_reasons_and_evidence_name_the_figures_and_the_gpu() -> None:
    finding = find_culprits(job(n3=node("n3", bad=DEGRADED)), {}, nodes=NODES)
    reasons = finding.reasons["n3"]
    assert any(r.startswith("SM clock 1410 MHz vs 1980 MHz median of the other 3 node(s) (GPU 1 (00000000:19:00.0))")
               for r in reasons), reasons
    assert any(r.startswith("time clock-throttled") and "100%" in r for r in reasons), reasons
    assert any(r.startswith("GPU temperature 87 C") for r in reasons), reasons  # supporting, reported too
    assert "GPU 1 (00000000:19:00.0) throttled by HW slowdown, HW thermal slowdown" in reasons
    lines = {e.host: e for e in finding.evidence}
    assert lines["n3"].pattern_id == "straggler.culprit" and lines["n3"].source == "metrics"
    assert {lines[h].pattern_id for h in ["n1", "n2", "n4"]} == {"straggler.peer"}
    assert finding.nodes_compared == 4 and finding.explanation.startswith("n3 is slower than the job's other nodes")


def test_hot_node_is_audited_as_deviating_but_not_named() -> None:
    finding = find_culprits(job(n4=node("n4", temp_c=80.0)), {}, nodes=NODES)
    n4 = next(e for e in finding.evidence if e.host == "n4")
    assert n4.pattern_id == "straggler.deviates" and "GPU temperature 80 C" in n4.line
    assert finding.explanation == "no node stands out among the job's 4 nodes"


def test_per_rank_timings_alone_name_the_slow_node_with_its_line() -> None:
    def timing(n: str, seconds: float, rank: int) -> NodeTiming:
        return NodeTiming(node=n, seconds=seconds, rank=rank, timer="forward-compute", line_no=100 + rank,
                          line=f"     rank {rank:2d}: {seconds * 1000:.2f}")

    timings = {"n1": timing("n1", 0.40, 1), "n2": timing("n2", 0.41, 3), "n3": timing("n3", 0.72, 5),
               "n4": timing("n4", 0.40, 7)}
    finding = find_culprits({}, timings, nodes=NODES)
    assert finding.culprits == ["n3"]
    line = next(e for e in finding.evidence if e.host == "n3")
    assert (line.source, line.rank, line.line_no) == ("log", 5, 105)
    assert "step time 0.72 s vs 0.4 s median" in line.line and "rank  5: 720.00" in line.line


def test_whole_job_change_is_audited() -> None:
    # three of four nodes with a fault each: not one node's problem
    finding = find_culprits(job(n1=node("n1", bad={"xid": 79}), n2=node("n2", bad={"ecc_dbe_increase": 1.0}),
                                n3=node("n3", bad={"ecc_dbe_increase": 4.0})), {}, nodes=NODES)
    assert finding.culprits == [] and finding.reasons == {}
    assert any(e.pattern_id == "straggler.whole_job" and "3 of 4 nodes" in e.line for e in finding.evidence)
