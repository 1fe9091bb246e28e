"""Which node slows a straggling job: the node that is an outlier against the job's other nodes.

Pure and deterministic. Input: each node's GPU telemetry over the slow window
(`adapters.metrics.telemetry.NodeTelemetry`) and each node's pace from per-rank
timings (`activities.detection.rank_timing.NodeTiming`). The rules, in order:

1. A node's value for a signal is its worst GPU's (lowest clock, hottest, most
   throttled): in synchronous training one slow GPU sets the whole job's pace.
2. A node is an outlier on a signal when its value is worse than the median of
   the job's *other* nodes by at least the signal's material size (`min_abs`, or
   `min_rel` of that median) and by at least `Z_MIN` robust deviations (1.4826 x
   the MAD of the other nodes). The material size keeps noise from counting on a
   very uniform job (MAD 0); the MAD keeps a job whose nodes differ widely anyway
   from being flagged by a fixed threshold.
3. Slowness signals (SM clock low, per-rank step time high, utilisation low) and
   fault signals (harmful clock throttling for a larger share of the window, an
   Xid, uncorrectable ECC errors) make a node a culprit. Supporting signals
   (temperature high, power draw low, correctable ECC errors) never do alone;
   they are added to the reasons.
4. More than half of the compared nodes culprits: the job as a whole changed
   (input pipeline, a new phase, the file system), no node is named.
5. Fewer than two nodes with evidence: nothing to compare with, no culprit.

Every node's figures are in the evidence whatever the outcome, so the audit shows
why a node was, or was not, named.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from activities.detection.rank_timing import NodeTiming
from adapters.metrics.telemetry import NodeTelemetry
from workflows.contracts import EvidenceLine, StragglerFinding

Z_MIN = 3.5  # Iglewicz and Hoaglin's cut-off for the modified z-score
MAD_SCALE = 1.4826  # MAD -> standard deviation for normal data


@dataclass(frozen=True)
class Signal:
    key: str
    label: str
    unit: str
    worse: Literal["lower", "higher"]
    kind: Literal["slowness", "fault", "supporting"]
    min_abs: float = 0.0
    min_rel: float = 0.0


SIGNALS = (
    Signal("sm_clock", "SM clock", "MHz", "lower", "slowness", min_rel=0.10),
    Signal("step_time", "step time", "s", "higher", "slowness", min_rel=0.15),
    Signal("util", "GPU utilisation", "%", "lower", "slowness", min_abs=20.0),
    Signal("throttle", "time clock-throttled (HW slowdown/thermal/power brake)", "share", "higher", "fault",
           min_abs=0.25),
    Signal("temp", "GPU temperature", "C", "higher", "supporting", min_abs=10.0),
    Signal("power", "power draw", "W", "lower", "supporting", min_rel=0.20),
    Signal("ecc_sbe", "correctable ECC errors", "", "higher", "supporting", min_abs=10.0),
)
_GPU_FIELD = {
    "sm_clock": "sm_clock_mhz",
    "util": "util_pct",
    "throttle": "throttle_share",
    "temp": "temp_c",
    "power": "power_w",
    "ecc_sbe": "ecc_sbe_increase",
}


@dataclass(frozen=True)
class _Reading:
    value: float
    where: str  # which GPU or rank the value is from


def find_culprits(
    telemetry: Mapping[str, NodeTelemetry],
    timings: Mapping[str, NodeTiming],
    *,
    nodes: Sequence[str],
) -> StragglerFinding:
    """Name the node(s) slowing the job, with reasons, or none; see the module docstring."""
    nodes = list(dict.fromkeys(nodes)) or sorted(set(telemetry) | set(timings))
    readings = {n: _readings(telemetry.get(n), timings.get(n)) for n in nodes}
    compared = [n for n in nodes if readings[n]]
    evidence: list[EvidenceLine] = [
        EvidenceLine(source="metrics", line=f"{n}: no DCGM series and no per-rank timings in the window",
                     host=n, pattern_id="straggler.no_data")
        for n in nodes if not readings[n]
    ]
    if len(compared) < 2:
        evidence += [EvidenceLine(source="metrics", line=f"{n}: the only node with evidence [{_figures(readings[n])}]",
                                  host=n, pattern_id="straggler.alone") for n in compared]
        text = f"{len(compared)} node(s) with per-node evidence; nothing to compare with, no culprit named"
        return StragglerFinding(evidence=evidence, explanation=text, nodes_compared=len(compared))

    deviations: dict[str, list[tuple[Signal, str]]] = {n: [] for n in compared}
    for signal in SIGNALS:
        values = {n: readings[n][signal.key] for n in compared if signal.key in readings[n]}
        for node, reading in values.items():
            others = [r.value for n, r in values.items() if n != node]
            reason = _outlier(signal, reading, others)
            if reason is not None:
                deviations[node].append((signal, f"{reason} ({reading.where})" if reading.where else reason))
    with_xid = {n for n in compared if _xid_codes(telemetry.get(n))}
    for node in compared:
        # an Xid most other nodes share (a driver-wide event) does not single a node out
        shared = len(with_xid - {node}) * 2 >= len(compared) - 1
        deviations[node].extend(_faults(telemetry.get(node), xid_shared=shared))

    flagged = sorted(n for n in compared if any(s.kind != "supporting" for s, _ in deviations[n]))
    whole_job = len(flagged) * 2 > len(compared)
    culprits = [] if whole_job else flagged
    reasons = {n: [t for _, t in deviations[n]] for n in culprits}
    for node in compared:
        evidence.append(_node_line(node, readings[node], deviations[node], culprit=node in culprits,
                                   timing=timings.get(node)))
    if whole_job:
        text = (f"{len(flagged)} of {len(compared)} nodes deviate ({', '.join(flagged)}): the job as a whole "
                "changed, no single node is named")
        evidence.append(EvidenceLine(source="metrics", line=text, pattern_id="straggler.whole_job"))
    elif culprits:
        text = "; ".join(f"{n} is slower than the job's other nodes: {', '.join(reasons[n])}" for n in culprits)
    else:
        text = f"no node stands out among the job's {len(compared)} nodes"
    return StragglerFinding(culprits=culprits, reasons=reasons, evidence=evidence, explanation=text,
                            nodes_compared=len(compared))


def _readings(node: NodeTelemetry | None, timing: NodeTiming | None) -> dict[str, _Reading]:
    out: dict[str, _Reading] = {}
    if node is not None:
        for signal in SIGNALS:
            field = _GPU_FIELD.get(signal.key)
            if field is None:
                continue
            present = [(getattr(g, field), g) for g in node.gpus if getattr(g, field) is not None]
            if not present:
                continue
            pick = min if signal.worse == "lower" else max
            value, gpu = pick(present, key=lambda vg: vg[0])
            out[signal.key] = _Reading(float(value), gpu.label())
    if timing is not None:
        out["step_time"] = _Reading(timing.seconds, f"rank {timing.rank}, {timing.timer}")
    return out


def _outlier(signal: Signal, reading: _Reading, others: list[float]) -> str | None:
    """The reason text when `reading` is a robust outlier on the bad side of the others' median."""
    if not others:
        return None
    reference = statistics.median(others)
    mad = statistics.median(abs(v - reference) for v in others)
    delta = reference - reading.value if signal.worse == "lower" else reading.value - reference
    material = max(signal.min_abs, signal.min_rel * abs(reference))
    if delta <= 0 or delta < material or delta < Z_MIN * MAD_SCALE * mad:
        return None
    return (f"{signal.label} {_fmt(reading.value, signal.unit)} vs {_fmt(reference, signal.unit)} "
            f"median of the other {len(others)} node(s)")


def _xid_codes(node: NodeTelemetry | None) -> list[str]:
    return [f"Xid {g.xid} on {g.label()}" for g in (node.gpus if node else []) if g.xid]


_FAULT = Signal("fault", "fault", "", "higher", "fault")
_THROTTLE_NOTE = Signal("throttle_reasons", "throttle reasons", "", "higher", "supporting")


def _faults(node: NodeTelemetry | None, *, xid_shared: bool) -> list[tuple[Signal, str]]:
    """Xid and uncorrectable ECC faults (they name a culprit), and the throttle reasons seen (they support)."""
    out: list[tuple[Signal, str]] = []
    xids = _xid_codes(node)
    if xids and not xid_shared:
        out.append((_FAULT, ", ".join(xids)))
    for g in node.gpus if node else []:
        if g.ecc_dbe_increase and g.ecc_dbe_increase > 0:
            out.append((_FAULT, f"{_fmt(g.ecc_dbe_increase, '')} uncorrectable ECC error(s) on {g.label()}"))
        if g.throttle_reasons:
            out.append((_THROTTLE_NOTE, f"{g.label()} throttled by {', '.join(g.throttle_reasons)}"))
    return out


def _node_line(
    node: str,
    readings: dict[str, _Reading],
    deviations: list[tuple[Signal, str]],
    *,
    culprit: bool,
    timing: NodeTiming | None,
) -> EvidenceLine:
    figures = _figures(readings)
    if culprit:
        text = f"{node}: straggler culprit: {'; '.join(t for _, t in deviations)} [{figures}]"
        pattern = "straggler.culprit"
    elif deviations:
        text = f"{node}: not a culprit ({'; '.join(t for _, t in deviations)}) [{figures}]"
        pattern = "straggler.deviates"
    else:
        text = f"{node}: alike the job's other nodes [{figures}]"
        pattern = "straggler.peer"
    if culprit and timing is not None and any(s.key == "step_time" for s, _ in deviations):
        # the rank's own line is the evidence a human would look at first
        return EvidenceLine(source="log", line=f"{text} | {timing.line.strip()[:300]}", line_no=timing.line_no,
                            host=node, rank=timing.rank, pattern_id=pattern)
    return EvidenceLine(source="metrics", line=text, host=node, pattern_id=pattern)


def _figures(readings: dict[str, _Reading]) -> str:
    return ", ".join(f"{s.label} {_fmt(readings[s.key].value, s.unit)}" for s in SIGNALS if s.key in readings)


def _fmt(value: float, unit: str) -> str:
    if unit == "share":
        return f"{value:.0%}"
    if unit in {"MHz", "W"}:
        return f"{value:.0f} {unit}"
    if unit == "C":
        return f"{value:.0f} C"
    if unit == "%":
        return f"{value:.0f} %"
    if unit == "s":
        return f"{value:.3g} s"
    return f"{value:.3g}"

