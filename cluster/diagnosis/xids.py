"""NVIDIA's Xid codes as data: what the GPU driver's `NVRM: Xid (PCI:...): N, ...` kernel line
means, and what to do.

Derived from NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)
as leptonai/gpud mirrors it (commit 4a8de33a3f02e207f39e9023d67125592d599731,
components/accelerator/nvidia/xid/catalog_generated.go, generated 2025-10-29): the mnemonic, the
description and the catalog's immediate resolution bucket, for the codes a GPU serving a model
meets. `kind` is ours, from that bucket: `hardware` (reset the GPU, restart the machine, a
memory error workflow), `application` (RESTART_APP: the program's fault or a symptom of one) or
`informational` (IGNORE). A code not listed is named with its number and the catalog's address.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

XidKind = Literal["hardware", "application", "informational"]
CATALOG = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


@dataclass(frozen=True)
class Xid:
    code: int
    mnemonic: str
    description: str
    resolution: str  # the catalog's immediate action bucket
    kind: XidKind


# fmt: off
XIDS: dict[int, Xid] = {x.code: x for x in (
    Xid(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP", "application"),
    Xid(13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", "RESTART_APP", "application"),
    Xid(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP", "application"),
    Xid(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE", "informational"),
    Xid(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors", "WORKFLOW_XID_45", "informational"),
    Xid(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "RESET_GPU", "hardware"),
    Xid(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48", "hardware"),
    Xid(62, "PMU_HALT_ERROR", "Internal micro-controller halt", "RESET_GPU", "hardware"),
    Xid(63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE", "informational"),
    Xid(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU", "hardware"),
    Xid(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP", "application"),
    Xid(74, "NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR", "hardware"),
    Xid(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM", "hardware"),
    Xid(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE", "informational"),
    Xid(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", "RESTART_APP", "application"),
    Xid(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU", "hardware"),
    Xid(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", "RESET_GPU", "hardware"),
    Xid(119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU", "hardware"),
    Xid(120, "GSP_ERROR", "GSP Error", "RESET_GPU", "hardware"),
    Xid(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", "RESET_GPU", "hardware"),
    Xid(143, "GPU_INIT_ERROR", "GPU Initialization Error", "RESET_GPU", "hardware"),
    Xid(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", "XID_154", "hardware"),
)}
# fmt: on


def xid(code: int) -> Xid:
    """The catalog's entry, or one that says only the number (a code this table lacks is
    treated as hardware: the operator reads the catalog before trusting the GPU again)."""
    return XIDS.get(code) or Xid(code, "", f"Xid {code} (see {CATALOG})", "", "hardware")
