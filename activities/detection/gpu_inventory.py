"""Which GPU index is which PCI bus id, as inventory tools print it beside a failure.

Pure code, no I/O. A GPU named only by its index (`local_rank: 5`, `cuda:5`, an exporter's `gpu="5"`)
is the same device as the bus id a line of the same host ties to that index; the operator replaces the
device by its bus id, so the verdict names it that way. The rows read, as the tools print them:

- dcgm-exporter (2.x-4.x) series: `DCGM_FI_DEV_XID_ERRORS{gpu="5",UUID="GPU-…",pci_bus_id="00000000:9B:00.0",
  device="nvidia5",…,Hostname="h100-c018",…} 48` (labels in any order; `Hostname` when the exporter sets it).
- `nvidia-smi --query-gpu=index,…,pci.bus_id --format=csv[,noheader]`: `6, GPU-1d7c…, 00000000:BA:00.0, Yes`
  (the index first, the bus id in any later column).
- `nvidia-smi`'s table: `|   5  NVIDIA H100 80GB HBM3          On  |   00000000:9B:00.0 Off |                    0 |`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BUS = r"([0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\.[0-9]"
_DCGM_INDEX = re.compile(r'[{,]gpu="([0-9]{1,3})"')
_DCGM_BUS = re.compile(r'[{,]pci_bus_id="' + _BUS + '"')
_DCGM_HOST = re.compile(r'[{,][Hh]ostname="([A-Za-z0-9._-]{1,253})"')
_SMI_CSV = re.compile(r"^\s*([0-9]{1,3}),\s[^|]{0,300}?(?<![0-9A-Fa-f])" + _BUS + r"(?:,|\s*$)")
_SMI_TABLE = re.compile(r"^\|\s+([0-9]{1,3})\s+[^|]{1,120}\|\s+" + _BUS + r"\s")


@dataclass(frozen=True)
class GpuRow:
    """One inventory row: the GPU's index, its bus id (`dddd:bb:dd`, lower case) and the host, when the row says."""

    index: int
    pci: str
    host: str | None = None


def inventory_row(text: str) -> GpuRow | None:
    """The index-to-bus-id pairing one line states, if it is an inventory row."""
    if 'pci_bus_id="' in text:
        index, bus = _DCGM_INDEX.search(text), _DCGM_BUS.search(text)
        if index and bus:
            host = _DCGM_HOST.search(text)
            return GpuRow(int(index.group(1)), norm_pci(bus.group(1)), host.group(1) if host else None)
        return None
    m = _SMI_TABLE.match(text) or _SMI_CSV.match(text)
    return GpuRow(int(m.group(1)), norm_pci(m.group(2))) if m else None


def norm_pci(pci: str) -> str:
    """`00000000:3B:00.0` -> `0000:3b:00`: one spelling per GPU whatever tool printed it."""
    parts = pci.lower().split(".")[0].split(":")
    if len(parts) == 3 and len(parts[0]) == 8:
        parts[0] = parts[0][4:]
    return ":".join(parts)
