"""The lab's fixed contract as pure data: names, addresses, paths.

Nothing here touches the system. Other parts of spark-bot (configs/lab.yaml,
tests) code against these values, so change them only together with the contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# --- networks -------------------------------------------------------------
MGMT_BRIDGE = "sblab-mgmt"
MGMT_HOST_IP = "198.18.0.1"
MGMT_PREFIX = "198.18.0."
FABRIC_BRIDGE = "sblab-fab"  # no address on the host
FABRIC_PREFIX = "198.18.1."
PREFIXLEN = 24
MGMT_IFNAME = "enP7s7"  # inside the node's namespace
FABRIC_IFNAME = "enp1s0f1np1"  # the real Spark RoCE netdev name
# NVIDIA's two-subnet layout (lab/fabric.py set_second_subnet): the port's second logical
# interface, on a subnet of its own
SECOND_FABRIC_IFNAME = "enP2p1s0f1np1"
SECOND_FABRIC_PREFIX = "198.18.2."
OTHER_PORT_IFNAME = "enp1s0f0np0"  # the Spark's other QSFP port (lab/fabric.py set_cable_port)
HOST_VETH_PREFIXES = ("sbm", "sbf", "sbs", "sbo")  # mgmt, fabric, second subnet, other port
NETNS_PREFIX = "sblab"
MAX_NODES = 16

# --- paths ------------------------------------------------------------------
STATE_ROOT = Path("/var/lib/spark-lab")
RUN_ROOT = Path("/run/spark-lab")
CACHE_ROOT = Path("/var/cache/spark-lab")
SSH_DIR = STATE_ROOT / "ssh"
CLIENT_KEY = SSH_DIR / "id_ed25519"
AUTHORIZED_KEYS = SSH_DIR / "authorized_keys"
KNOWN_HOSTS = SSH_DIR / "known_hosts"
SSH_CONFIG = SSH_DIR / "config"  # `ssh -F` this: Host spark-lab-<i>
STATE_FILE = STATE_ROOT / "state.json"
# Each node's mount namespace (its own /root and /tmp, shared by its sshd and dockerd) is kept
# alive by a bind mount of its nsfs file here, as `ip netns` keeps network namespaces.
MOUNT_NS_DIR = RUN_ROOT / "mntns"
NODE_ROOT_HOME = "/root"  # root's home on every node: the node's own directory bound there
BASE_TARBALL = CACHE_ROOT / "base-bookworm.tar"  # see image.base_tarball(): named by its packages

# --- images -----------------------------------------------------------------
BASE_IMAGE = "spark-lab/base:bookworm"
IMAGE_TAG = "spark-lab/vllm-emu:latest"
IMAGE_HASH_LABEL = "spark-lab.source-hash"
IMAGE_VARIANT_LABEL = "spark-lab.variant"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# libnuma1: the real engine's vLLM CPU kernels (vllm/_C_AVX2) link it.
BASE_PACKAGES = ("python3", "procps", "iproute2", "libnuma1")
BASE_PACKAGES_LABEL = "spark-lab.base-packages"

SSH_PORT = 22
SSH_USER = "root"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# wrappers in each node's bin dir (ib_write_bw: perftest, as `apt install perftest` puts it
# there; mpirun and all_reduce_perf: Open MPI and nccl-tests on the PATH; dmesg and journalctl:
# the node's own kernel log)
EMULATED_TOOLS = (
    "nvidia-smi",
    "ibdev2netdev",
    "drop-caches",
    "ib_write_bw",
    "mpirun",
    "all_reduce_perf",
    "dmesg",
    "journalctl",
)
# dockerd registers its "nvidia" device driver (`--gpus`, DeviceRequests with driver nvidia) only
# when this is on its PATH (moby daemon/nvidia_linux.go); the lab's stand-in lives in the bin dir.
NVIDIA_HOOK = "nvidia-container-runtime-hook"
IMAGE_TOOLS = ("vllm", "ray", "nvidia-smi", "ibdev2netdev")  # wrappers in the image


@dataclass(frozen=True)
class Node:
    """One emulated Spark. Index 0 is the head."""

    index: int

    @property
    def name(self) -> str:
        return f"spark-lab-{self.index}"

    @property
    def netns(self) -> str:
        return f"{NETNS_PREFIX}{self.index}"

    @property
    def netns_path(self) -> str:
        return f"/var/run/netns/{self.netns}"

    @property
    def mgmt_ip(self) -> str:
        return f"{MGMT_PREFIX}{10 + self.index}"

    @property
    def fabric_ip(self) -> str:
        return f"{FABRIC_PREFIX}{10 + self.index}"

    # host-side veth ends (<= 15 chars)
    @property
    def mgmt_veth(self) -> str:
        return f"sbm{self.index}"

    @property
    def fabric_veth(self) -> str:
        return f"sbf{self.index}"

    @property
    def second_fabric_veth(self) -> str:
        return f"sbs{self.index}"

    @property
    def other_port_veth(self) -> str:
        return f"sbo{self.index}"

    @property
    def second_fabric_ip(self) -> str:
        return f"{SECOND_FABRIC_PREFIX}{10 + self.index}"

    # per-node state (kept across `down`, removed by `down --purge`)
    @property
    def state_dir(self) -> Path:
        return STATE_ROOT / f"node{self.index}"

    @property
    def bin_dir(self) -> Path:
        return self.state_dir / "bin"

    @property
    def lib_dir(self) -> Path:
        """The emulator package the bin dir's tools run (a copy of the repo's)."""
        return self.state_dir / "lib"

    @property
    def data_root(self) -> Path:
        return self.state_dir / "docker"

    @property
    def dockerd_log(self) -> Path:
        return self.state_dir / "dockerd.log"

    @property
    def dockerd_config(self) -> Path:
        return self.state_dir / "daemon.json"

    @property
    def sshd_config(self) -> Path:
        return self.state_dir / "sshd_config"

    @property
    def sshd_log(self) -> Path:
        return self.state_dir / "sshd.log"

    @property
    def host_key(self) -> Path:
        return self.state_dir / "ssh_host_ed25519_key"

    @property
    def home(self) -> Path:
        """Bound over /root in the node's mount namespace: its sessions' and containers' /root."""
        return self.state_dir / "home"

    @property
    def tmp(self) -> Path:
        """Bound over /tmp in the node's mount namespace (emptied when the namespace is made)."""
        return self.state_dir / "tmp"

    @property
    def ssh_key(self) -> Path:
        """The node's own root key (~/.ssh/id_ed25519 on the node), host path."""
        return self.home / ".ssh" / "id_ed25519"

    @property
    def hf_cache(self) -> Path:
        """The node's Hugging Face cache (~/.cache/huggingface on the node), host path."""
        return self.home / ".cache" / "huggingface"

    # per-node runtime (removed by `down`)
    @property
    def mount_ns(self) -> Path:
        return MOUNT_NS_DIR / f"node{self.index}"

    @property
    def run_dir(self) -> Path:
        return RUN_ROOT / f"node{self.index}"

    @property
    def exec_root(self) -> Path:
        return self.run_dir / "exec"

    @property
    def docker_sock(self) -> Path:
        return self.run_dir / "docker.sock"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.docker_sock}"

    @property
    def meminfo(self) -> Path:
        """Bound over /proc/meminfo in the node's SSH sessions (lab/meminfo.py)."""
        return self.run_dir / "meminfo"

    @property
    def boot_id_file(self) -> Path:
        """Bound over /proc/sys/kernel/random/boot_id in its SSH sessions (lab/node_boot.py)."""
        return self.run_dir / "boot_id"

    @property
    def uptime_file(self) -> Path:
        """Bound over /proc/uptime in its SSH sessions (lab/node_boot.py)."""
        return self.run_dir / "uptime"

    @property
    def kernel_log_file(self) -> Path:
        """What the node's `dmesg` and `journalctl -k` print (lab/emulator/kernel_log.py)."""
        return self.run_dir / "kernel.log"

    @property
    def kernel_log_restricted(self) -> Path:
        """When it exists, the node's kernel log is not readable by its SSH user."""
        return self.run_dir / "kernel-log-restricted"

    @property
    def gpu_state_file(self) -> Path:
        """The node's GPU as its nvidia-smi shows it (lab/emulator/gpu_tools.py)."""
        return self.run_dir / "gpu.json"

    @property
    def fabric_speed_file(self) -> Path:
        """Bound over the fabric interface's sysfs `speed` in its SSH sessions (lab/fabric.py)."""
        return self.run_dir / "fabric-speed"

    @property
    def second_fabric_speed_file(self) -> Path:
        """The same over the second subnet's interface's `speed`, while it exists."""
        return self.run_dir / "second-fabric-speed"

    @property
    def docker_pidfile(self) -> Path:
        return self.run_dir / "docker.pid"

    @property
    def sshd_pidfile(self) -> Path:
        return self.run_dir / "sshd.pid"

    @property
    def cgroup_parent(self) -> str:
        return f"spark-lab-node{self.index}"

    @property
    def netns_etc(self) -> Path:
        """Files here are bind-mounted over /etc by `ip netns exec` (sshd's sessions)."""
        return Path("/etc/netns") / self.netns

    def ssh_names(self, isolated_workers: bool) -> list[str]:
        """What another node or the bot calls this node by: management IP (if it has one),
        fabric IP, hostname."""
        return ([self.mgmt_ip] if has_mgmt(self, isolated_workers) else []) + [
            self.fabric_ip,
            self.name,
        ]

    @property
    def remote_path(self) -> str:
        return f"{self.bin_dir}:{SYSTEM_PATH}"


def nodes(n: int) -> list[Node]:
    if not 1 <= n <= MAX_NODES:
        raise ValueError(f"node count must be 1..{MAX_NODES}, got {n}")
    return [Node(i) for i in range(n)]


def has_mgmt(node: Node, isolated_workers: bool) -> bool:
    """With isolated workers only the head has a management interface."""
    return node.index == 0 or not isolated_workers
