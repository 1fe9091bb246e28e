"""GPU health from DCGM exporter series in Prometheus (HTTP API v1, through httpx).

Followed: Prometheus' HTTP API (`GET /api/v1/query` with `query` and `time`;
answers `{"status": "success", "data": {"resultType": "vector"|"matrix", "result":
[{"metric": {...}, "value": [t, "v"]} | {"metric": {...}, "values": [[t, "v"], ...]}]}}`,
errors `{"status": "error", "errorType": ..., "error": ...}` with 4xx/5xx) and the
DCGM exporter's default metric names and labels (`gpu`, `UUID`, `pci_bus_id`,
`device`, `modelName`, `Hostname`). Throttle bits follow NVML's
`nvmlClocksThrottleReasons` (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, renamed
DCGM_FI_DEV_CLOCKS_EVENT_REASONS in newer DCGM; both are read).

Every query is an instant query evaluated at the end of the window, over a range
selector as long as the window: `increase()` for error counters,
`max_over_time()` for the row-remap flag, `avg_over_time()` for utilisation, and
the raw samples for Xid codes and throttle bitmasks (each sample matters there).
Newer exporters' `DCGM_EXP_XID_ERRORS_COUNT{xid="79"}` adds the codes it counted.
"""

from __future__ import annotations

import asyncio
import math
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from adapters.errors import MetricsError
from adapters.metrics.promql import host_matcher, window_seconds
from workflows.contracts import EvidenceLine

if TYPE_CHECKING:
    from adapters.metrics.telemetry import NodeTelemetry

XID = "DCGM_FI_DEV_XID_ERRORS"
# newer dcgm-exporters also count Xids per code (label `xid`) over a sliding window
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
THROTTLE_METRICS = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
NVLINK_COUNTERS = {
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "CRC flit",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": "CRC data",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": "replay",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "recovery",
}

#: NVML clock throttle / clock event reason bits
THROTTLE_BITS = {
    0x1: "GPU idle",
    0x2: "applications clocks setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
    0x100: "display clock setting",
}
#: the reasons that point at a sick GPU or node, not at ordinary load or idling
HARMFUL_THROTTLE = {"HW slowdown", "SW thermal slowdown", "HW thermal slowdown", "HW power brake slowdown"}
_REPORTED_THROTTLE = HARMFUL_THROTTLE | {"SW power cap"}


def decode_throttle(mask: int) -> list[str]:
    """Names of the reasons set in an NVML throttle bitmask, lowest bit first."""
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit]


class GpuFinding(BaseModel):
    """What DCGM said about one GPU during the window."""

    model_config = ConfigDict(extra="ignore")

    gpu: str  # index as DCGM labels it
    pci_bus_id: str = ""
    uuid: str = ""
    model: str = ""
    xid_codes: list[int] = Field(default_factory=list)  # distinct non-zero codes, in order seen
    dbe_increase: float = 0.0
    dbe_total: float | None = None  # volatile double-bit count since the driver loaded
    row_remap_failure: bool = False
    nvlink_errors: dict[str, float] = Field(default_factory=dict)  # kind -> increase
    throttle_reasons: list[str] = Field(default_factory=list)  # seen at least once (SW power cap and worse)
    util_mean: float | None = None

    @property
    def harmful_throttle(self) -> list[str]:
        return [r for r in self.throttle_reasons if r in HARMFUL_THROTTLE]

    @property
    def healthy(self) -> bool:
        return not (
            self.xid_codes
            or self.dbe_increase > 0
            or (self.dbe_total or 0) > 0
            or self.row_remap_failure
            or any(v >= 1 for v in self.nvlink_errors.values())
            or self.harmful_throttle
        )

    def ref(self, host: str) -> str:
        """`host:pci` (or `host:index`), as `Implicated.gpus` names a GPU."""
        return f"{host}:{self.pci_bus_id or self.gpu}"

    def label(self) -> str:
        return f"GPU {self.gpu} ({self.pci_bus_id})" if self.pci_bus_id else f"GPU {self.gpu}"


class GpuHealth(BaseModel):
    """DCGM's view of one host's GPUs during the window; `has_data=False` means unknown, not healthy."""

    model_config = ConfigDict(extra="ignore")

    host: str
    has_data: bool = False
    gpus: list[GpuFinding] = Field(default_factory=list)

    @property
    def status(self) -> Literal["healthy", "unhealthy", "unknown"]:
        if not self.has_data:
            return "unknown"
        return "healthy" if all(g.healthy for g in self.gpus) else "unhealthy"

    @property
    def healthy(self) -> bool:
        return self.status == "healthy"

    def gpu(self, index: str | int) -> GpuFinding | None:
        return next((g for g in self.gpus if g.gpu == str(index)), None)

    def facts(self) -> list[EvidenceLine]:
        """Readable findings (source="metrics", host set), one line each, for the verdict."""
        def fact(text: str, pattern_id: str) -> EvidenceLine:
            return EvidenceLine(source="metrics", line=text, host=self.host, pattern_id=pattern_id)

        if not self.has_data:
            return [fact(f"{self.host}: no DCGM metrics in the window (GPU health unknown)", "metrics.no_data")]
        out: list[EvidenceLine] = []
        for g in self.gpus:
            where = f"{self.host} {g.label()}"
            for code in g.xid_codes:
                out.append(fact(f"{where}: Xid {code} reported by DCGM", "metrics.xid"))
            if g.dbe_increase > 0:
                out.append(fact(
                    f"{where}: {_count(g.dbe_increase)} double-bit (uncorrectable) ECC error(s) in the window",
                    "metrics.ecc_dbe",
                ))
            elif (g.dbe_total or 0) > 0:
                out.append(fact(
                    f"{where}: {_count(g.dbe_total or 0)} double-bit ECC error(s) since the driver loaded",
                    "metrics.ecc_dbe",
                ))
            if g.row_remap_failure:
                out.append(fact(f"{where}: row remapping failed (DCGM_FI_DEV_ROW_REMAP_FAILURE)", "metrics.row_remap_failure"))
            nvlink = [f"{_count(v)} {kind}" for kind, v in g.nvlink_errors.items() if v >= 1]
            if nvlink:
                out.append(fact(f"{where}: NVLink errors in the window: {', '.join(nvlink)}", "metrics.nvlink"))
            if g.harmful_throttle:
                out.append(fact(f"{where}: clocks throttled by {', '.join(g.harmful_throttle)}", "metrics.throttle"))
        if not out:
            out.append(fact(f"{self.host}: {len(self.gpus)} GPU(s), no DCGM error in the window", "metrics.healthy"))
        return out


def _count(value: float) -> str:
    return str(round(value)) if value >= 1 else f"{value:.2g}"


class PrometheusClient:
    """Reads DCGM exporter series from Prometheus.

    Args:
        url: Prometheus base URL, e.g. `http://prometheus:9090`.
        host_label: the label holding the node name (the DCGM exporter's `Hostname`).
        timeout_s: bound on every HTTP request.
        bearer_token: sent as `Authorization: Bearer ...` when set.
        transport: an httpx transport (tests, proxies); the default opens real connections.
    """

    def __init__(
        self,
        url: str,
        *,
        host_label: str = "Hostname",
        timeout_s: float = 10.0,
        bearer_token: str | SecretStr | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.host_label = host_label
        self.timeout_s = timeout_s
        token = bearer_token.get_secret_value() if isinstance(bearer_token, SecretStr) else bearer_token
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._transport = transport

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=self.timeout_s, headers=self._headers, transport=self._transport)

    async def query(
        self, expr: str, *, at: datetime, client: httpx.AsyncClient | None = None
    ) -> tuple[str, list[dict[str, Any]]]:
        """Run one instant query; returns (resultType, result)."""
        if client is None:
            async with self._client() as own:
                return await self.query(expr, at=at, client=own)
        params = {"query": expr, "time": f"{at.timestamp():.3f}", "timeout": f"{self.timeout_s:g}s"}
        try:
            response = await client.get(f"{self.url}/api/v1/query", params=params)
        except httpx.HTTPError as exc:
            raise MetricsError(f"Prometheus at {self.url} did not answer ({type(exc).__name__}: {exc}); check metrics.prometheus_url") from exc
        try:
            body = response.json()
        except ValueError as exc:
            raise MetricsError(f"Prometheus at {self.url} answered HTTP {response.status_code} with non-JSON: {response.text[:200]!r}") from exc
        if not isinstance(body, dict) or body.get("status") != "success":
            detail = body.get("error") if isinstance(body, dict) else None
            raise MetricsError(f"Prometheus rejected the query {expr!r} (HTTP {response.status_code}): {detail or response.text[:200]}")
        data = body.get("data") or {}
        result = data.get("result")
        if not isinstance(result, list):
            raise MetricsError(f"Prometheus answered without a result list for {expr!r}")
        return str(data.get("resultType", "")), result

    async def gpu_health(self, hosts: list[str], *, start: datetime, end: datetime) -> dict[str, GpuHealth]:
        """Each host's GPU findings over [start, end]; every host asked for gets an entry."""
        report = {h: GpuHealth(host=h) for h in hosts}
        if not hosts:
            return report
        sel = "{" + host_matcher(self.host_label, hosts) + "}"
        throttle_sel = "{" + host_matcher(self.host_label, hosts) + ", __name__=~" + '"' + "|".join(THROTTLE_METRICS) + '"}'
        w = f"[{window_seconds(start, end)}s]"
        queries = {
            "xid": f"{XID}{sel}{w}",
            "xid_count": f"max_over_time({XID_COUNT}{sel}{w}) > 0",
            "dbe_increase": f"increase({ECC_DBE}{sel}{w})",
            "dbe_total": f"last_over_time({ECC_DBE}{sel}{w})",
            "row_remap": f"max_over_time({ROW_REMAP_FAILURE}{sel}{w})",
            "throttle": f"{throttle_sel}{w}",
            "util": f"avg_over_time({GPU_UTIL}{sel}{w})",
            **{f"nvlink:{name}": f"increase({name}{sel}{w})" for name in NVLINK_COUNTERS},
        }
        async with self._client() as client:
            answers = await asyncio.gather(*(self.query(q, at=end, client=client) for q in queries.values()))
        findings: dict[tuple[str, str], GpuFinding] = {}

        def finding(metric: dict[str, str]) -> GpuFinding | None:
            host = _requested_host(metric.get(self.host_label, ""), hosts)
            if host is None:
                return None
            gpu = metric.get("gpu") or metric.get("UUID") or metric.get("device") or "?"
            key = (host, gpu)
            if key not in findings:
                findings[key] = GpuFinding(
                    gpu=gpu,
                    pci_bus_id=metric.get("pci_bus_id", ""),
                    uuid=metric.get("UUID", ""),
                    model=metric.get("modelName", ""),
                )
                report[host].has_data = True
            return findings[key]

        for name, (_, result) in zip(queries, answers):
            for series in result:
                g = finding(series.get("metric") or {})
                if g is None:
                    continue
                if name == "xid":
                    for code in _sample_values(series):
                        if code > 0 and int(code) not in g.xid_codes:
                            g.xid_codes.append(int(code))
                elif name == "xid_count":
                    code = (series.get("metric") or {}).get("xid", "")
                    if code.isdigit() and int(code) and int(code) not in g.xid_codes:
                        g.xid_codes.append(int(code))
                elif name == "throttle":
                    mask = 0
                    for value in _sample_values(series):
                        mask |= int(value)
                    g.throttle_reasons = [r for r in decode_throttle(mask) if r in _REPORTED_THROTTLE]
                elif name == "dbe_increase":
                    g.dbe_increase = _value(series)
                elif name == "dbe_total":
                    g.dbe_total = _value(series)
                elif name == "row_remap":
                    g.row_remap_failure = _value(series) > 0
                elif name == "util":
                    g.util_mean = _value(series)
                elif name.startswith("nvlink:"):
                    g.nvlink_errors[NVLINK_COUNTERS[name.split(":", 1)[1]]] = _value(series)
        for (host, _), g in sorted(findings.items(), key=lambda kv: (kv[0][0], _gpu_order(kv[0][1]))):
            report[host].gpus.append(g)
        return report

    async def utilization_by_host(self, hosts: list[str], *, start: datetime, end: datetime) -> dict[str, float]:
        """Mean GPU utilisation (percent) per host over the window; hosts without data are left out."""
        if not hosts:
            return {}
        sel = "{" + host_matcher(self.host_label, hosts) + "}"
        expr = f"avg by ({self.host_label}) (avg_over_time({GPU_UTIL}{sel}[{window_seconds(start, end)}s]))"
        _, result = await self.query(expr, at=end)
        out: dict[str, float] = {}
        for series in result:
            host = _requested_host((series.get("metric") or {}).get(self.host_label, ""), hosts)
            if host is not None:
                out[host] = _value(series)
        return out

    async def node_telemetry(self, hosts: list[str], *, start: datetime, end: datetime) -> dict[str, "NodeTelemetry"]:
        """Per-GPU clock, power, temperature, utilisation, throttling, Xid and ECC of each host over the window.

        One query per metric for all hosts (adapters/metrics/telemetry.py); every host asked for gets an
        entry, without GPUs when DCGM said nothing about it.
        """
        from adapters.metrics.telemetry import read_telemetry, telemetry_queries

        if not hosts:
            return {}
        queries = telemetry_queries(self.host_label, hosts, start=start, end=end)
        async with self._client() as client:
            answers = await asyncio.gather(*(self.query(q, at=end, client=client) for q in queries.values()))
        return read_telemetry(hosts, {name: result for name, (_, result) in zip(queries, answers)},
                              host_label=self.host_label)


def _requested_host(label_value: str, hosts: list[str]) -> str | None:
    """The host asked for that this label value names (exactly, or as `host.domain`)."""
    if label_value in hosts:
        return label_value
    short = label_value.split(".", 1)[0]
    return short if short in hosts else None


def _gpu_order(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)


def _value(series: dict[str, Any]) -> float:
    try:
        return float(series["value"][1])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise MetricsError(f"Prometheus returned a sample without a value: {series!r:.200}") from exc


def _sample_values(series: dict[str, Any]) -> list[float]:
    values = series.get("values")
    if values is None and "value" in series:
        values = [series["value"]]
    try:
        samples = [float(v) for _, v in values or []]
    except (TypeError, ValueError) as exc:
        raise MetricsError(f"Prometheus returned malformed samples: {series!r:.200}") from exc
    return [v for v in samples if math.isfinite(v)]
