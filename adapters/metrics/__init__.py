"""GPU metrics: DCGM exporter series read from Prometheus."""

from adapters.metrics.prometheus import GpuFinding, GpuHealth, PrometheusClient, decode_throttle

__all__ = ["GpuFinding", "GpuHealth", "PrometheusClient", "decode_throttle"]
