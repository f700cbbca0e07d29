"""A node's kernel log since the launch: the GPU driver's Xid errors, PCIe AER errors and the OOM
killer's lines.

Read over the node's connection, argv only: `journalctl -k -b 0` first (a user in the `adm` or
`systemd-journal` group may read it; Ubuntu, the base of DGX OS, puts its first user in `adm`),
else `dmesg` (it needs CAP_SYSLOG where `kernel.dmesg_restrict` is 1, Ubuntu's default). Both
print the kernel's monotonic timestamp, seconds since boot, in brackets
(`[ 1234.567890] ...`), which is how lines from before the launch are left out. journalctl run
by a user it will not show the system's messages to exits 0 with a hint on stderr ("You are
currently not seeing messages from other users and the system"): that is unreadable, not an
empty log. Only the lines that matter are kept as the output streams by (KEPT_LINES at most).

The formats: the driver's `NVRM: Xid (PCI:0000:01:00): 79, pid=..., GPU has fallen off the
bus.` (NVIDIA open-gpu-kernel-modules, as gpud's README quotes real lines); the kernel's AER
lines (torvalds/linux drivers/pci/pcie/aer.c at 02a06f5f1a6aa2e12b2046b51ed3462c2c340037,
pr_fmt "AER: "): `<driver> <bdf>: AER: PCIe Bus Error: severity=<s>, type=<layer>, (<agent>)`
and `<port> <bdf>: AER: <s> error received: <bdf>`, where <s> is `Correctable`,
`Uncorrectable (Non-Fatal)` or `Uncorrectable (Fatal)` (kernels before that commit wrote
`Corrected`, `Uncorrected (Non-Fatal)`, `Uncorrected (Fatal)`); the OOM killer's
`Out of memory: Killed process <pid> (<comm>) ...` (mm/oom_kill.c).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from cluster.errors import NodeError
from cluster.nodes import NodeConnection

JOURNAL_ARGV = ("journalctl", "-k", "-b", "0", "-o", "short-monotonic", "--no-pager", "-n", "5000")
DMESG_ARGV = ("dmesg",)
KEPT_LINES = 200  # of the lines that matter, the last this many

# `[ 1234.567890] host kernel: text` (journalctl short-monotonic) or `[ 1234.567890] text`
# (dmesg; `[    T123]` after it on kernels that print the caller)
_STAMPED = re.compile(
    r"^\[\s*(?P<seconds>\d+\.\d+)\]\s+(?:\[\s*[TC]\d+\]\s+)?(?:\S+ kernel: )?(?P<text>.*)$"
)
XID_LINE = re.compile(r"NVRM: Xid \((?P<device>[^)]*)\): (?P<code>\d+),\s*(?P<detail>.*)")
_SEVERITY = r"Correct(?:ed|able)|Uncorrect(?:ed|able) \((?:Non-)?Fatal\)"
AER_BUS_ERROR = re.compile(
    rf"(?P<device>[\w-]+ [0-9a-fA-F]{{4}}:[0-9a-fA-F]{{2}}:[0-9a-fA-F]{{2}}\.\d): (?:AER: )?"
    rf"PCIe Bus Error: severity=(?P<severity>{_SEVERITY}), type=(?P<type>[^,]+)"
)
AER_RECEIVED = re.compile(
    rf"AER: (?:Multiple )?(?P<severity>{_SEVERITY}) error (?:message )?received"
    rf"(?: from)?:? (?P<source>[0-9a-fA-F]{{4}}:[0-9a-fA-F]{{2}}:[0-9a-fA-F]{{2}}\.\d)"
)
OOM_LINE = re.compile(r"Out of memory|oom-kill|oom_reaper|Killed process", re.IGNORECASE)
_MATTERS = (XID_LINE, AER_BUS_ERROR, AER_RECEIVED, OOM_LINE)
_JOURNAL_WITHHELD = (
    "not seeing messages from other users and the system",
    "No journal files were opened due to insufficient permissions",
)


@dataclass(frozen=True)
class KernelLine:
    seconds: float  # since boot
    text: str


@dataclass(frozen=True)
class XidError:
    code: int
    device: str  # "PCI:0000:01:00"
    detail: str
    line: str


@dataclass(frozen=True)
class AerError:
    severity: str  # as the kernel wrote it
    device: str
    line: str

    @property
    def fatal(self) -> bool:
        return "Fatal" in self.severity and "Non-Fatal" not in self.severity

    @property
    def corrected(self) -> bool:
        return self.severity.startswith("Correct")


@dataclass
class KernelLog:
    """What was read: the lines that matter since `since_s`, and how (or why not)."""

    lines: list[KernelLine] = field(default_factory=list)
    source: str = ""  # "journalctl -k" or "dmesg"
    unreadable: str | None = None  # why neither could be read, in words

    def xids(self) -> list[XidError]:
        found = []
        for line in self.lines:
            match = XID_LINE.search(line.text)
            if match:
                found.append(
                    XidError(int(match["code"]), match["device"], match["detail"], line.text)
                )
        return found

    def aer(self) -> list[AerError]:
        found = []
        for line in self.lines:
            match = AER_BUS_ERROR.search(line.text) or AER_RECEIVED.search(line.text)
            if match:
                device = match.groupdict().get("device") or match["source"]
                found.append(AerError(match["severity"], device, line.text))
        return found

    def oom(self) -> list[str]:
        return [line.text for line in self.lines if OOM_LINE.search(line.text)]


class _Keeper:
    """Splits streamed output into lines and keeps the stamped ones that matter, after
    `since_s`: bounded whatever the log's size."""

    def __init__(self, since_s: float | None):
        self.since_s = since_s
        self.kept: deque[KernelLine] = deque(maxlen=KEPT_LINES)
        self._partial = ""

    def feed(self, chunk: str) -> None:
        text = self._partial + chunk
        *whole, self._partial = text.split("\n")
        self._partial = self._partial[-4096:]  # a line longer than this is no kernel line
        for line in whole:
            self._offer(line)

    def close(self) -> list[KernelLine]:
        self._offer(self._partial)
        self._partial = ""
        return list(self.kept)

    def _offer(self, raw: str) -> None:
        match = _STAMPED.match(raw.rstrip("\r"))
        if match is None:
            return
        if self.since_s is not None and float(match["seconds"]) <= self.since_s:
            return
        text = match["text"]
        if any(pattern.search(text) for pattern in _MATTERS):
            self.kept.append(KernelLine(float(match["seconds"]), text[:400]))


def parse(output: str, since_s: float | None = None) -> list[KernelLine]:
    """The lines that matter in a whole output (tests, and the stand-ins held against it)."""
    keeper = _Keeper(since_s)
    keeper.feed(output)
    return keeper.close()


async def read_kernel_log(
    node: NodeConnection, *, since_s: float | None, timeout: float
) -> KernelLog:
    """This boot's kernel lines that matter, after `since_s` seconds from boot (all of this
    boot's when None). NodeError
    when the node does not answer at all."""
    journal = _Keeper(since_s)
    result = await node.run(list(JOURNAL_ARGV), timeout=timeout, output=journal.feed)
    withheld = next((hint for hint in _JOURNAL_WITHHELD if hint in result.stderr), None)
    if result.ok and withheld is None:
        return KernelLog(journal.close(), "journalctl -k")
    dmesg = _Keeper(since_s)
    fallback = await node.run(list(DMESG_ARGV), timeout=timeout, output=dmesg.feed)
    if fallback.ok:
        return KernelLog(dmesg.close(), "dmesg")
    why_journal = withheld or _said(result.stderr) or f"exit {result.exit_status}"
    why_dmesg = _said(fallback.stderr) or f"exit {fallback.exit_status}"
    return KernelLog(
        unreadable=f"journalctl -k: {why_journal}; dmesg: {why_dmesg}",
    )


def _said(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


async def try_read_kernel_log(
    node: NodeConnection, *, since_s: float | None, timeout: float
) -> KernelLog:
    try:
        return await read_kernel_log(node, since_s=since_s, timeout=timeout)
    except NodeError as error:
        return KernelLog(unreadable=f"not asked: {error.problem}")
