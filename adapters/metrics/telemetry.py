"""Per-node GPU telemetry over a window, for naming the node that slows a straggling job.

One instant query per metric for all the job's nodes at once (never one per node),
evaluated at the end of the window over a range selector as long as the window:
`avg_over_time()` for SM clock, power, temperature and utilisation, `increase()`
for the ECC counters, `max_over_time(...) > 0` for the last Xid code, and the raw
samples of the throttle bitmask (PromQL has no bitwise operators, so the bits are
decoded here, and the share of samples with a harmful reason tells a sustained
slowdown from a blip). Series are matched to nodes through the client's host label
(the DCGM exporter's `Hostname` by default; short or fully qualified values).

DCGM field names (dcgm-exporter's default counters): DCGM_FI_DEV_SM_CLOCK (MHz),
DCGM_FI_DEV_POWER_USAGE (W), DCGM_FI_DEV_GPU_TEMP (C), DCGM_FI_DEV_GPU_UTIL (%),
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS / DCGM_FI_DEV_CLOCKS_EVENT_REASONS (NVML bits),
DCGM_FI_DEV_XID_ERRORS (last code), DCGM_FI_DEV_ECC_{SBE,DBE}_VOL_TOTAL (counters).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from adapters.metrics.prometheus import (
    ECC_DBE,
    GPU_UTIL,
    HARMFUL_THROTTLE,
    THROTTLE_METRICS,
    XID,
    _gpu_order,
    _requested_host,
    _sample_values,
    _value,
    decode_throttle,
)
from adapters.metrics.promql import host_matcher, window_seconds

SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
POWER = "DCGM_FI_DEV_POWER_USAGE"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
ECC_SBE = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"


class GpuTelemetry(BaseModel):
    """One GPU over the window; None means the series was absent (unknown, not zero)."""

    model_config = ConfigDict(extra="ignore")

    gpu: str
    pci_bus_id: str = ""
    sm_clock_mhz: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    util_pct: float | None = None
    throttle_reasons: list[str] = Field(default_factory=list)  # harmful reasons seen at least once
    throttle_share: float | None = None  # share of samples with a harmful reason set
    xid: int | None = None  # highest non-zero Xid code in the window
    ecc_sbe_increase: float | None = None
    ecc_dbe_increase: float | None = None

    def label(self) -> str:
        return f"GPU {self.gpu} ({self.pci_bus_id})" if self.pci_bus_id else f"GPU {self.gpu}"


class NodeTelemetry(BaseModel):
    """A node's GPUs over the window; no GPUs means DCGM said nothing about it."""

    model_config = ConfigDict(extra="ignore")

    host: str
    gpus: list[GpuTelemetry] = Field(default_factory=list)

    @property
    def has_data(self) -> bool:
        return bool(self.gpus)


def telemetry_queries(host_label: str, hosts: list[str], *, start: datetime, end: datetime) -> dict[str, str]:
    """The PromQL per metric (name -> expression), each selecting every host at once."""
    matcher = host_matcher(host_label, hosts)
    sel = "{" + matcher + "}"
    throttle_sel = "{" + matcher + ', __name__=~"' + "|".join(THROTTLE_METRICS) + '"}'
    w = f"[{window_seconds(start, end)}s]"
    return {
        "sm_clock": f"avg_over_time({SM_CLOCK}{sel}{w})",
        "power": f"avg_over_time({POWER}{sel}{w})",
        "temp": f"avg_over_time({TEMP}{sel}{w})",
        "util": f"avg_over_time({GPU_UTIL}{sel}{w})",
        "throttle": f"{throttle_sel}{w}",
        "xid": f"max_over_time({XID}{sel}{w}) > 0",
        "ecc_sbe": f"increase({ECC_SBE}{sel}{w})",
        "ecc_dbe": f"increase({ECC_DBE}{sel}{w})",
    }


def read_telemetry(
    hosts: list[str], answers: dict[str, list[dict[str, Any]]], *, host_label: str
) -> dict[str, NodeTelemetry]:
    """Fold the query results (name -> result list) into one entry per host asked for."""
    report = {h: NodeTelemetry(host=h) for h in hosts}
    found: dict[tuple[str, str], GpuTelemetry] = {}
    for name, result in answers.items():
        for series in result:
            metric = series.get("metric") or {}
            host = _requested_host(metric.get(host_label, ""), hosts)
            if host is None:
                continue
            gpu = metric.get("gpu") or metric.get("UUID") or metric.get("device") or "?"
            g = found.setdefault((host, gpu), GpuTelemetry(gpu=gpu, pci_bus_id=metric.get("pci_bus_id", "")))
            _apply(g, name, series)
    for (host, _), g in sorted(found.items(), key=lambda kv: (kv[0][0], _gpu_order(kv[0][1]))):
        report[host].gpus.append(g)
    return report


def _apply(g: GpuTelemetry, name: str, series: dict[str, Any]) -> None:
    if name == "throttle":
        samples = [int(v) for v in _sample_values(series)]
        if not samples:
            return
        harmful = [m for m in samples if any(r in HARMFUL_THROTTLE for r in decode_throttle(m))]
        mask = 0
        for m in samples:
            mask |= m
        # both metric names may exist for one GPU (exporter upgrade mid-window): keep the worse
        share = len(harmful) / len(samples)
        g.throttle_share = max(share, g.throttle_share or 0.0)
        g.throttle_reasons = sorted(
            set(g.throttle_reasons) | {r for r in decode_throttle(mask) if r in HARMFUL_THROTTLE}
        )
    elif name == "xid":
        g.xid = int(_value(series))
    else:
        setattr(g, _FIELDS[name], _value(series))


_FIELDS = {
    "sm_clock": "sm_clock_mhz",
    "power": "power_w",
    "temp": "temp_c",
    "util": "util_pct",
    "ecc_sbe": "ecc_sbe_increase",
    "ecc_dbe": "ecc_dbe_increase",
}
