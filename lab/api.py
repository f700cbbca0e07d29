"""Python API of the lab, for tests and the CLI.

    info = lab_up(nodes=2, isolated_workers=False)   # idempotent, fast when already up
    lab_down(purge=False)
    set_image_variant(node) / restore_image()
    put_model(node, model, ...) / remove_model(node, model)   # the node's Hugging Face cache
    stop_sshd(node) / start_sshd(node) / stop_dockerd(node) / start_dockerd(node)
    set_fabric_link(node, up) / kill_dockerd(node)
    status() -> dict

Blocking (subprocess) by design: this is lab tooling, not the bot.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import (
    dockerd,
    fabric,
    hf_cache,
    image,
    meminfo,
    mountns,
    netns,
    node_boot,
    preflight,
    rdma,
    real_engine,
    sshd,
    state,
    tools,
    trust,
)
from . import topology as T
from .errors import LabError

__all__ = [
    "LabError",
    "LabInfo",
    "NodeInfo",
    "kill_dockerd",
    "lab_down",
    "lab_info",
    "lab_up",
    "node_memory",
    "put_lab_model",
    "put_model",
    "remove_model",
    "restore_image",
    "set_fabric_link",
    "set_fabric_mtu",
    "set_fabric_speed",
    "set_image_variant",
    "set_node_memory",
    "start_dockerd",
    "start_sshd",
    "status",
    "stop_dockerd",
    "stop_sshd",
]

LOCK_FILE = Path("/run/lock/spark-lab.lock")


@dataclass(frozen=True)
class NodeInfo:
    index: int
    name: str
    netns: str
    mgmt_ip: str | None  # None for an isolated worker
    fabric_ip: str
    ssh_host: str  # where to SSH to: mgmt IP, or fabric IP via the head
    docker_socket: str  # path on the node (reach it by SSH stream forwarding)
    docker_host: str  # unix://<docker_socket>
    bin_dir: str
    home: str = ""  # host path of the node's home, which the node sees as /root
    hf_cache: str = ""  # host path of the node's ~/.cache/huggingface
    mgmt_ifname: str = T.MGMT_IFNAME
    fabric_ifname: str = T.FABRIC_IFNAME


@dataclass(frozen=True)
class LabInfo:
    nodes: list[NodeInfo]
    isolated_workers: bool
    key_path: str
    known_hosts_path: str
    ssh_config_path: str  # for `ssh -F` by hand: Host spark-lab-<i>
    image_tag: str
    image_id: str | None  # the canonical image ID (node 0's)
    variant_node: int | None = None
    engine: str = "emulated"
    real_image_tag: str | None = None  # with engine "real": the real engine's node image
    real_venv: str | None = None  # ... its venv (mounted read-only at the same path)
    real_model: str | None = None  # ... and the tiny model directory
    ssh_user: str = T.SSH_USER
    ssh_port: int = T.SSH_PORT
    mgmt_host_ip: str = T.MGMT_HOST_IP
    mgmt_bridge: str = T.MGMT_BRIDGE
    fabric_bridge: str = T.FABRIC_BRIDGE
    extra: dict = field(default_factory=dict)

    @property
    def head(self) -> NodeInfo:
        return self.nodes[0]

    @property
    def workers(self) -> list[NodeInfo]:
        return self.nodes[1:]

    def to_dict(self) -> dict:
        return asdict(self)


# --- locking (one lab operation at a time, across processes) ---------------
_lock_depth = 0
_lock_fd: int | None = None
_tlock = threading.RLock()


@contextlib.contextmanager
def _locked():
    global _lock_depth, _lock_fd
    with _tlock:
        if _lock_depth == 0:
            LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
            _lock_fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(_lock_fd, fcntl.LOCK_EX)
        _lock_depth += 1
        try:
            yield
        finally:
            _lock_depth -= 1
            if _lock_depth == 0:
                fcntl.flock(_lock_fd, fcntl.LOCK_UN)
                os.close(_lock_fd)
                _lock_fd = None


def _node(index: int) -> T.Node:
    st = state.load()
    if not 0 <= index < max(st.nodes, 1):
        raise LabError(
            f"no node {index} in the lab (it has {st.nodes} nodes; run `python -m lab up`)"
        )
    return T.Node(index)


def lab_info() -> LabInfo:
    """Describe the lab as the last `up` left it (no system calls)."""
    st = state.load()
    infos = []
    for n in T.nodes(max(st.nodes, 1)) if st.nodes else []:
        mg = n.mgmt_ip if T.has_mgmt(n, st.isolated_workers) else None
        infos.append(
            NodeInfo(
                n.index,
                n.name,
                n.netns,
                mg,
                n.fabric_ip,
                mg or n.fabric_ip,
                str(n.docker_sock),
                n.docker_host,
                str(n.bin_dir),
                home=str(n.home),
                hf_cache=str(n.hf_cache),
            )
        )
    real = st.engine == "real"
    return LabInfo(
        infos,
        st.isolated_workers,
        str(T.CLIENT_KEY),
        str(T.KNOWN_HOSTS),
        str(T.SSH_CONFIG),
        T.IMAGE_TAG,
        st.canonical_image,
        st.variant_node,
        st.engine,
        real_engine.IMAGE_TAG if real else None,
        str(real_engine.VENV) if real else None,
        str(real_engine.MODEL) if real else None,
    )


# --- teardown ---------------------------------------------------------------
def _known_node_indexes() -> set[int]:
    idx = set(netns.lab_node_indexes())
    idx.update(range(state.load().nodes))
    for root in (T.RUN_ROOT,):
        if root.is_dir():
            idx.update(
                int(p.name[4:])
                for p in root.iterdir()
                if p.name.startswith("node") and p.name[4:].isdigit()
            )
    for name in netns.stale_host_links():
        if name[:3] in T.HOST_VETH_PREFIXES:
            idx.add(int(name[3:]))
    return idx


def _remove_node(node: T.Node) -> None:
    sshd.stop(node)
    dockerd.stop(node)
    dockerd.remove_cgroups(node)
    mountns.remove(node)
    netns.delete_node(node)
    shutil.rmtree(node.netns_etc, ignore_errors=True)
    shutil.rmtree(node.run_dir, ignore_errors=True)


def lab_down(purge: bool = False) -> None:
    """Remove namespaces, links, bridges, iptables rules, engines, sshds, sockets.
    Keeps the data-roots and the base tarball (fast next `up`) unless `purge`."""
    preflight.check()
    with _locked():
        idx = sorted(_known_node_indexes())
        with ThreadPoolExecutor(max_workers=max(len(idx), 1)) as ex:
            list(ex.map(_remove_node, [T.Node(i) for i in idx]))
        netns.delete_bridges()
        for name in netns.stale_host_links():
            netns.run(["ip", "link", "del", name], check=False)
        mountns.remove_dir()
        shutil.rmtree(T.RUN_ROOT, ignore_errors=True)
        st = state.load()
        st.nodes = 0
        st.variant_node = None
        state.save(st)
        if purge:
            shutil.rmtree(T.STATE_ROOT, ignore_errors=True)
            shutil.rmtree(T.CACHE_ROOT, ignore_errors=True)


# --- bring-up ---------------------------------------------------------------
def _bring_up_node(node: T.Node, wanted: list[T.Node], isolated: bool) -> bool:
    relinked = netns.ensure_node(node, T.has_mgmt(node, isolated))
    tools.ensure(node)
    mountns.ensure(node)
    sshd.ensure_key(node.ssh_key, f"root@{node.name}")
    trust.write_hosts(node, wanted, isolated)  # before sshd: `ip netns exec` binds it then
    sshd.start(node)
    rdma.ensure(node)
    meminfo.ensure(node)
    fabric.ensure(node)
    node_boot.ensure(node)
    if dockerd.start(node):
        dockerd.remove_all_containers(node)  # freshly started: containers are stale
    return relinked


ENGINES = ("emulated", "real")
# configs/lab.yaml's model, laid out by `lab up` on every node whose cache lacks it (preflight
# wants it complete everywhere): Qwen3.5-122B-A10B's attention in config.json and its weights'
# size in the index (the fit check's figures), small real shards.
LAB_MODEL = "Qwen/Qwen3.5-122B-A10B-FP8"
LAB_MODEL_CONFIG = {
    "text_config": {
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "full_attention_interval": 4,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 64,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 262144,
    }
}
LAB_MODEL_BYTES = 119_000_000_000


def put_lab_model(node: int) -> hf_cache.CachedModel:
    """configs/lab.yaml's model, complete, in the node's cache (as `lab up` leaves it)."""
    return put_model(node, LAB_MODEL, config=LAB_MODEL_CONFIG, total_size=LAB_MODEL_BYTES)


def lab_up(
    nodes: int = 2,
    isolated_workers: bool = False,
    variant_node: int | None = None,
    engine: str = "emulated",
) -> LabInfo:
    """Bring the lab to exactly `nodes` nodes (idempotent; < ~3 s when already up).
    `variant_node`: give that node a different image ID under the same tag.
    `engine`: "real" also puts the real engine's image on every node (the venv and model
    are built once and cached: minutes the first time) and gives each node its own core."""
    preflight.check()
    wanted = T.nodes(nodes)
    if variant_node is not None and not 1 <= variant_node < nodes:
        raise LabError(f"--variant-node must be a worker index 1..{nodes - 1}")
    if engine not in ENGINES:
        raise LabError(f"--engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    with _locked():
        removed = [i for i in sorted(_known_node_indexes()) if i >= nodes]
        for i in removed:
            _remove_node(T.Node(i))
        netns.ensure_bridges()
        mountns.ensure_dir()
        sshd.ensure_client_key()
        with ThreadPoolExecutor(max_workers=nodes) as ex:
            relinked = list(ex.map(lambda n: _bring_up_node(n, wanted, isolated_workers), wanted))
        if any(relinked) or removed:
            netns.flush_neighbours(wanted)
        sshd.write_known_hosts(wanted, isolated_workers)
        sshd.write_client_config(wanted, isolated_workers)
        trust.write(wanted, isolated_workers)
        canonical = image.ensure(wanted, variant_node)
        for n in wanted:
            if not (hf_cache.repo_dir(n.hf_cache, LAB_MODEL) / "refs" / "main").exists():
                hf_cache.write_model(
                    n.hf_cache, LAB_MODEL, config=LAB_MODEL_CONFIG, total_size=LAB_MODEL_BYTES
                )
        real_image = None
        if engine == "real":
            venv, _ = real_engine.ensure()
            real_image = image.ensure_real(wanted, venv)
        cores = os.cpu_count() or 1
        for n in wanted:  # vLLM binds its threads to the cores it is given: one per node
            dockerd.pin_cpus(n, str(n.index % cores) if engine == "real" else None)
        state.save(
            state.LabState(nodes, isolated_workers, variant_node, canonical, engine, real_image)
        )
        return lab_info()


# --- faults and variants ----------------------------------------------------
def set_image_variant(node: int) -> str:
    """Give `node` a different image ID under the same tag; returns the new ID."""
    with _locked():
        st = state.load()
        n = _node(node)
        if not st.canonical_image:
            raise LabError("the lab is not up")
        iid = image.make_variant(n, st.canonical_image)
        st.variant_node = node
        state.save(st)
        return iid


def restore_image() -> None:
    with _locked():
        st = state.load()
        if not st.canonical_image:
            raise LabError("the lab is not up")
        image.restore(T.nodes(st.nodes), st.canonical_image)
        st.variant_node = None
        state.save(st)


def put_model(node: int, model: str, **layout) -> hf_cache.CachedModel:
    """Lay out `model` in the node's Hugging Face cache (~/.cache/huggingface on the node) as the
    hub's client does, with small real safetensors shards; complete, or partial as a download
    cut short leaves it (`missing=`, `incomplete=`, `truncated=`: shard numbers from 1). Options:
    `hf_cache.write_model`. Replaces what the cache held of the model."""
    return hf_cache.write_model(_node(node).hf_cache, model, **layout)


def remove_model(node: int, model: str) -> None:
    hf_cache.remove_model(_node(node).hf_cache, model)


def stop_sshd(node: int) -> None:
    sshd.stop(_node(node))


def start_sshd(node: int) -> None:
    n = _node(node)
    sshd.start(n)
    rdma.ensure(n)
    meminfo.ensure(n)
    fabric.ensure(n)


def drop_ssh_sessions(node: int) -> int:
    """End every SSH session to the node (the client sees its connection closed); new ones
    are accepted."""
    return sshd.drop_sessions(_node(node))


def stop_dockerd(node: int, *, keep_containers: bool = False) -> None:
    """Stop the node's engine as a crash would leave it for a client (containers go too), or,
    with `keep_containers`, as a restart with live-restore does: the engine's API goes away,
    the containers keep running."""
    dockerd.stop(_node(node), remove_containers=False, keep_containers=keep_containers)


def kill_dockerd(node: int) -> None:
    """SIGKILL the node's engine (live-restore on: its containers keep running); bring it back
    with `start_dockerd(node, keep_containers=True)`."""
    dockerd.kill(_node(node))


def start_dockerd(node: int, *, keep_containers: bool = False) -> None:
    """Start the node's engine again; `keep_containers` restores those a
    `stop_dockerd(keep_containers=True)` left running."""
    dockerd.start(_node(node), keep_containers=keep_containers)


def set_fabric_link(node: int, up: bool) -> None:
    """Set the node's fabric interface (enp1s0f1np1) down, as a pulled cable, or up again."""
    n = _node(node)
    netns.set_link(n.netns, T.FABRIC_IFNAME, up)
    rdma.refresh(n)  # its sessions' /sys/class/infiniband: the port's state
    if up:
        netns.flush_neighbours([n])


def set_fabric_mtu(node: int, mtu: int) -> None:
    """The MTU of the node's fabric interface (9000 when the lab comes up)."""
    fabric.set_mtu(_node(node), mtu)


def set_fabric_speed(node: int, mbps: int) -> None:
    """The link speed the node's sysfs reports for its fabric interface (200000 Mb/s when the
    lab comes up): a link trained at less than its nominal speed."""
    fabric.set_speed(_node(node), mbps)


def set_second_subnet(node: int, on: bool) -> None:
    """NVIDIA's two-subnet layout on the node (the port's second logical interface,
    enP2p1s0f1np1, on 198.18.2.0/24), or the lab's default again (one interface, one subnet)."""
    n = _node(node)
    fabric.set_second_subnet(n, on)
    netns.flush_neighbours([n])


def set_cable_port(node: int, port: int) -> None:
    """The node's fabric cable in the Spark's port 0 (enp1s0f0np0 Up, no address: its netplan
    addresses port 1) or back in port 1, the lab's default."""
    if port not in (0, 1):
        raise LabError(f"a Spark has QSFP ports 0 and 1, not {port}")
    n = _node(node)
    fabric.set_cable_port(n, port)
    netns.flush_neighbours([n])


def reboot_node(node: int) -> str:
    """A new boot of the node: a new boot id, its uptime from a few seconds, an empty kernel
    log, its containers killed (lab/node_boot.py); returns the new boot id."""
    return node_boot.reboot(_node(node))


def node_boot_id(node: int) -> str:
    """The boot id the node's sessions read in /proc/sys/kernel/random/boot_id."""
    return node_boot.boot_id(_node(node))


def add_kernel_lines(node: int, *lines: str) -> float:
    """Kernel messages in the node's log, stamped after its uptime now; returns the stamp."""
    return node_boot.add_kernel_lines(_node(node), *lines)


def set_kernel_log_readable(node: int, readable: bool) -> None:
    """Whether the node's dmesg and journalctl -k show its kernel log to its SSH user."""
    node_boot.set_kernel_log_readable(_node(node), readable)


def set_gpu(node: int, **state: float) -> None:
    """What the node's nvidia-smi reports (clocks_sm, clocks_max_sm, reasons, temperature,
    power), over an idle GB10's; with nothing named, idle again."""
    node_boot.set_gpu(_node(node), **state)


def set_node_memory(node: int, **gib: float) -> None:
    """The node's /proc/meminfo in its sessions: idle, with the fields named changed (GiB):
    e.g. `Cached=80, MemFree=37` for the last model's page cache, `MemFree=20` alone for memory
    held by something (it is in no cache: `drop-caches` cannot free it). `lab_up` sets it idle."""
    meminfo.set_memory(_node(node), **gib)


def node_memory(node: int) -> dict[str, int]:
    """The node's /proc/meminfo figures now (kB), e.g. after its `drop-caches`."""
    return meminfo.read_memory(_node(node))


# --- status -----------------------------------------------------------------
def status() -> dict:
    """Per node: namespace, addresses, sshd, dockerd + version, image ID; 'ok' overall."""
    st = state.load()
    report: dict = {
        "nodes": [],
        "isolated_workers": st.isolated_workers,
        "canonical_image": st.canonical_image,
        "variant_node": st.variant_node,
    }
    ok = st.nodes > 0
    for n in T.nodes(st.nodes) if st.nodes else []:
        with_mgmt = T.has_mgmt(n, st.isolated_workers)
        engine = dockerd.alive(n)
        iid = image.image_id(n) if engine else None
        entry = {
            "name": n.name,
            "netns": n.netns,
            "netns_present": n.netns in netns.list_netns(),
            "addresses": netns.addrs(n.netns) if n.netns in netns.list_netns() else {},
            "network_ok": netns.node_ok(n, with_mgmt),
            "sshd_alive": sshd.alive(n),
            "dockerd_alive": engine,
            "dockerd_version": dockerd.version(n) if engine else None,
            "docker_socket": str(n.docker_sock),
            "image_id": iid,
            # its sshd and dockerd see the node's home as /root
            "own_home": all(
                p is not None and mountns.sees_home(p, n) for p in (sshd.pid(n), dockerd.pid(n))
            ),
        }
        want_image = iid is not None and (iid == st.canonical_image or st.variant_node == n.index)
        node_ok = all(
            [entry["network_ok"], entry["sshd_alive"], engine, want_image, entry["own_home"]]
        )
        entry["ok"] = node_ok
        ok = ok and node_ok
        report["nodes"].append(entry)
    report["forwarding_ok"] = netns.forwarding_ok()
    report["ok"] = ok and report["forwarding_ok"]
    return report


# --- exclusive use ------------------------------------------------------------
USE_LOCK_FILE = Path("/run/lock/spark-lab-use.lock")
_use_depth = 0


@contextlib.contextmanager
def exclusive_use():
    """Hold the lab for one user (a test, a benchmark) so others wait instead of
    launching or removing containers under it. Re-entrant within a process."""
    global _use_depth
    if _use_depth:
        _use_depth += 1
        try:
            yield
        finally:
            _use_depth -= 1
        return
    USE_LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(USE_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _use_depth = 1
        try:
            yield
        finally:
            _use_depth = 0
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
