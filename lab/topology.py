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
EMULATED_TOOLS = ("nvidia-smi", "ibdev2netdev")  # wrappers in each node's bin dir
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

    # per-node state (kept across `down`, removed by `down --purge`)
    @property
    def state_dir(self) -> Path:
        return STATE_ROOT / f"node{self.index}"

    @property
    def bin_dir(self) -> Path:
        return self.state_dir / "bin"

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

    # per-node runtime (removed by `down`)
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
