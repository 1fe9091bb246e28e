"""NVIDIA Xid codes: what each one means and what an operator does about it.

Paraphrased from NVIDIA's public Xid catalogue (GPU deployment and management
documentation). The table answers the question the verdict asks: does this
Xid, on its own, say the GPU (and so the node) is bad? Application-level and
sympathetic Xids (a bad pointer in the user's kernel, a channel torn down
because some other error happened first) do not; they only corroborate.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class XidInfo:
    code: int
    name: str
    meaning: str
    action: str
    category: str  # a Category value
    fault_domain: str  # a FaultDomain value
    severity: str  # fatal | error | warning | info
    condemns: bool  # names a bad GPU/node on its own


_APP = "cuda_error", "application"
_HW = "gpu_hardware", "hardware"

XIDS: dict[int, XidInfo] = {
    x.code: x
    for x in (
        XidInfo(8, "GPU stopped processing", "a channel stopped making progress (usually the application or a driver hang)",
                "restart the application; look for other Xids on the same GPU before blaming hardware", *_APP, "warning", False),
        XidInfo(13, "Graphics engine exception", "a kernel faulted (out-of-range access, illegal instruction); almost always the application",
                "debug the application (compute-sanitizer); suspect the GPU only if unrelated jobs hit it too", *_APP, "warning", False),
        XidInfo(31, "GPU memory page fault", "an MMU fault: the application touched an address it does not own",
                "debug the application; the GPU is fine unless the fault repeats across different applications", *_APP, "warning", False),
        XidInfo(32, "Invalid or corrupted push buffer stream", "the command stream the driver sent was corrupted (PCIe, system memory or driver)",
                "check PCIe health and the companion Xids; reset the GPU if it repeats", *_HW, "warning", False),
        XidInfo(38, "Driver firmware error", "the driver detected a firmware error", "reset the GPU; update the driver if it repeats",
                *_HW, "error", True),
        XidInfo(43, "GPU stopped processing (reset channel verification error)", "the GPU stopped the offending application's channel; sympathetic to an application fault",
                "restart the application; the GPU remains usable", *_APP, "info", False),
        XidInfo(45, "Preemptive cleanup", "the driver cleaned up a channel because of earlier errors or because the process was killed",
                "no action of its own; look at the Xid that came before", *_APP, "info", False),
        XidInfo(48, "Double-bit ECC error", "an uncorrectable (double-bit) ECC error in GPU memory",
                "drain the node, reset the GPU; request a replacement if it recurs", *_HW, "fatal", True),
        XidInfo(61, "Internal micro-controller breakpoint/warning", "the GPU's internal micro-controller hit a breakpoint",
                "reset the GPU; report to the vendor if it repeats", *_HW, "error", True),
        XidInfo(62, "Internal micro-controller halt", "the GPU's internal micro-controller halted (firmware or thermal)",
                "drain the node and reset the GPU; check cooling", *_HW, "fatal", True),
        XidInfo(63, "ECC page retirement or row remapping event", "a memory row was marked for remapping; it takes effect at the next GPU reset",
                "reset the GPU when convenient; no action for the job", *_HW, "warning", False),
        XidInfo(64, "ECC page retirement or row remapping failure", "the GPU could not retire a page or remap a row (no spare rows left)",
                "drain the node; the GPU needs replacement", *_HW, "fatal", True),
        XidInfo(68, "Video processor exception", "the video decoder raised an exception (application or driver)",
                "restart the application", *_APP, "info", False),
        XidInfo(69, "Graphics engine class error", "an invalid method reached the graphics engine (application or driver)",
                "restart the application; update the driver if it repeats", *_APP, "warning", False),
        XidInfo(74, "NVLink error", "an NVLink link reported a fatal error",
                "drain the node; reset the GPUs on the link and check the NVLink/NVSwitch fabric", "interconnect", "hardware", "fatal", True),
        XidInfo(79, "GPU has fallen off the bus", "the GPU stopped answering on PCIe",
                "drain the node; reboot it, and replace the GPU if it happens again", *_HW, "fatal", True),
        XidInfo(92, "High single-bit ECC error rate", "correctable ECC errors at a high rate",
                "keep watching; schedule a reset and a diagnostic run", *_HW, "warning", False),
        XidInfo(94, "Contained ECC error", "an uncorrectable ECC error was contained to the application that hit it",
                "restart the application; reset the GPU when convenient to remap the row", *_HW, "error", False),
        XidInfo(95, "Uncontained ECC error", "an uncorrectable ECC error that may have corrupted every application on the GPU",
                "drain the node and reset the GPU before running anything on it", *_HW, "fatal", True),
        XidInfo(109, "Context switch timeout", "a context switch timed out (application or firmware)",
                "restart the application; reset the GPU if it repeats", *_HW, "warning", False),
        XidInfo(119, "GSP RPC timeout", "the GPU System Processor stopped answering the driver",
                "drain the node and reset the GPU; update the driver/firmware if it repeats", *_HW, "fatal", True),
        XidInfo(120, "GSP error", "the GPU System Processor reported an error",
                "drain the node and reset the GPU", *_HW, "fatal", True),
        XidInfo(121, "C2C link corrected error", "the chip-to-chip link corrected an error",
                "no action unless it repeats often", "interconnect", "hardware", "warning", False),
        XidInfo(140, "Unrecovered ECC error", "the GPU found an ECC error it could not recover from",
                "drain the node and reset the GPU; replace it if it recurs", *_HW, "fatal", True),
        *(XidInfo(code, f"NVLink error ({unit})", f"the NVLink {unit} unit reported an error on a link of this GPU",
                  "drain the node; reset the GPUs on the link and check the NVLink/NVSwitch fabric",
                  "interconnect", "hardware", "error", True)
          for code, unit in ((144, "SAW"), (145, "RLW"), (146, "TLW"), (147, "TREX"), (148, "NVLPW control"),
                             (149, "NETIR"), (150, "MSE"))),
        XidInfo(154, "GPU recovery action changed", "the driver says the GPU needs a recovery action (reset or node reboot)",
                "follow the named recovery action: drain the node and reset the GPU or reboot", *_HW, "error", True),
    )
}


def xid_info(code: int) -> XidInfo:
    """What Xid `code` means; an unknown code is a warning that condemns nothing."""
    known = XIDS.get(code)
    if known is not None:
        return known
    return XidInfo(code, f"Xid {code}", "an Xid code missing from jobmedic's table",
                   "look the code up in NVIDIA's Xid catalogue", "gpu_hardware", "hardware", "warning", False)


def condemning_xids() -> frozenset[int]:
    """Codes that on their own name a bad GPU."""
    return frozenset(code for code, info in XIDS.items() if info.condemns)
