"""What each emulated node's host looks like, as files: the image's tools, the host commands the
preflight runs, and the RoCE interface in a private /sys/class/net.

Node i's fabric IP is 127.0.0.(10+i) (Linux routes all of 127/8 to lo, so every node has its
own address without root). Its host tool dir (first on PATH for the `local` driver's commands)
holds:

- `ibdev2netdev`: the emulator's, looking at the node's own /sys/class/net, where
  `enp1s0f1np1` is up: `rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)` and its twin on the second
  PCIe link, `roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Up)`, as on a Spark.
- `ip`: this machine's `ip` cannot show 127.0.0.(10+i) on an interface, so a shim prints the
  node's addresses for the one form the preflight runs, `ip -o -f inet addr show`.
- `ss`: a shim answering `ss -Htln 'sport = :P or ...'` from /proc/net/tcp{,6}, so the port
  check works where iproute2 is not installed (all nodes share this machine's ports, as they
  share its loopback).
"""

from __future__ import annotations

import hashlib
import shlex
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import lab.emulator
from demo.engine import Image

DEMO_IMAGE = "spark-lab/vllm-emu:latest"  # the lab's image name: the same emulator inside
EMULATED_TOOLS = ("vllm", "ray", "nvidia-smi", "ibdev2netdev")
FABRIC_IF = "enp1s0f1np1"
_EMULATOR_DIR = Path(lab.emulator.__file__).resolve().parent
_STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def fabric_ip(index: int) -> str:
    return f"127.0.0.{10 + index}"


def _write(path: Path, text: str, mode: int = 0o755) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _emulator_tool(tool: str, env: dict[str, str] | None = None) -> str:
    exports = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in (env or {}).items())
    return (
        f"#!/bin/sh\n# spark-bot demo: emulated {tool}\n{exports}"
        f'export PYTHONPATH={shlex.quote(str(_EMULATOR_DIR.parent))}"${{PYTHONPATH:+:$PYTHONPATH}}"\n'
        f'exec {shlex.quote(sys.executable)} -m emulator {tool} "$@"\n'
    )


def build_image(root: Path) -> Image:
    """The emulator image: its tools in `root/bin`, its ID a hash of the emulator's sources, so
    every node holds the same image ID."""
    for tool in EMULATED_TOOLS:
        _write(root / "bin" / tool, _emulator_tool(tool))
    digest = hashlib.sha256()
    for source in sorted(_EMULATOR_DIR.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    env = (
        f"PATH={root / 'bin'}:{_STANDARD_PATH}",
        f"PYTHONPATH={_EMULATOR_DIR.parent}",
        "PYTHONUNBUFFERED=1",
        "PYTHONDONTWRITEBYTECODE=1",
        "LANG=C.UTF-8",
    )
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return Image(
        DEMO_IMAGE, "sha256:" + digest.hexdigest(), env, {"spark-bot.demo": "emulator"}, created
    )


_IP_SHIM = """#!/bin/sh
# spark-bot demo, {node}: this node's addresses, for the one form the preflight runs
if [ "$*" != "-o -f inet addr show" ]; then
    echo "ip (spark-bot demo shim): only 'ip -o -f inet addr show' is emulated" >&2
    exit 2
fi
cat <<'EOF'
1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: {iface}    inet {ip}/8 scope global {iface}\\       valid_lft forever preferred_lft forever
EOF
"""

_SS_SHIM = """#!{python}
# spark-bot demo: `ss -Htln 'sport = :P or sport = :Q'` from /proc/net/tcp{{,6}} (LISTEN sockets)
import re, sys

args = sys.argv[1:]
if not args or args[0] != "-Htln":
    sys.exit("ss (spark-bot demo shim): only 'ss -Htln [sport = :P or ...]' is emulated")
ports = {{int(p) for p in re.findall(r"sport = :(\\d+)", " ".join(args[1:]))}}
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = open(table).read().splitlines()[1:]
    except OSError:
        continue
    for row in rows:
        fields = row.split()
        address, port = fields[1].rsplit(":", 1)
        if fields[3] == "0A" and (not ports or int(port, 16) in ports):
            shown = "*" if set(address) == {{"0"}} else address
            print(f"LISTEN 0      4096   {{shown}}:{{int(port, 16)}}   *:*")
"""


@dataclass(frozen=True)
class NodeMachine:
    index: int
    root: Path

    @property
    def name(self) -> str:
        return f"spark-demo-{self.index}"

    @property
    def ip(self) -> str:
        return fabric_ip(self.index)

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def home(self) -> Path:
        """The node's home folder: what spark-bot keeps on a node (the launch lease) stays in
        this demo's folder, apart from another demo's on the same machine."""
        return self.root / "home"

    @property
    def sys_class_net(self) -> Path:
        return self.root / "sys" / "class" / "net"

    @property
    def docker_socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def engine_root(self) -> Path:
        return self.root / "engine"

    def build(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        link = self.sys_class_net / FABRIC_IF
        _write(link / "operstate", "up\n", 0o644)
        _write(link / "flags", "0x1003\n", 0o644)
        env = {"SPARK_EMU_SYS_CLASS_NET": str(self.sys_class_net)}
        _write(self.bin_dir / "ibdev2netdev", _emulator_tool("ibdev2netdev", env))
        _write(self.bin_dir / "ip", _IP_SHIM.format(node=self.name, iface=FABRIC_IF, ip=self.ip))
        _write(self.bin_dir / "ss", _SS_SHIM.format(python=sys.executable))
        self.engine_root.mkdir(parents=True, exist_ok=True)
