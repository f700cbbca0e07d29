"""Preflight: before anything starts, prove every node is ready, all nodes at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field

from cluster.config import ClusterConfig
from cluster.diagnosis.failures import (
    FABRIC_LINK_DOWN,
    FABRIC_MTU_MISMATCH,
    FABRIC_OTHER_PORT,
    FABRIC_SUBNET_MISSING,
    FOREIGN_CONTAINER,
    IMAGE_DIFFERS,
    IMAGE_MISSING,
    IMAGE_NOT_BUILT_FOR_GPU,
    IMAGE_NOT_ON_HEAD,
    INTERFACES_UNEXPECTED,
    MEMORY_HELD,
    MEMORY_IN_USE,
    MEMORY_NOT_RETURNED,
    MEMORY_PAGE_CACHE,
    MEMORY_PAGE_CACHE_BY_HAND,
    MEMORY_SHORT,
    MODEL_DOES_NOT_FIT,
    MODEL_INCOMPLETE,
    MODEL_NOT_CACHED,
    PORT_TAKEN,
    SS_FAILED,
    STALE_CONTAINER,
    KnownFailure,
)
from cluster.errors import DockerRefused, InterfaceProblem, NodeTimedOut
from cluster.events import CheckpointPassed, Event, Failed, Progress
from cluster.nodes import ClusterConnection, NodeConnection, fabric_link, fabric_paths, node_home
from cluster.nodes.boot import Boot, boot_if_linux
from cluster.nodes.interfaces import (
    NodeInterfaces,
    Unresolved,
    resolve_interfaces,
    up_roce_devices,
)
from cluster.progress.checkpoints import BY_ID, Checkpoint
from cluster.progress.reporter import Reporter
from cluster.progress.steps import Step, run_steps
from cluster.resources.fit import (
    KV_BLOCK,
    LOW_HEADROOM,
    Fit,
    ModelFiles,
    ModelFilesProblem,
    estimate,
    hf_home,
    read_model_facts,
)
from cluster.resources.gpu_arch import AnswersByImage, ask_image, verdict
from cluster.resources.memory import GIB, MemoryBreakdown, parse_memory_breakdown
from cluster.resources.memory_return import (
    HOLDING,
    LastStop,
    credited,
    held_by,
    is_back,
    last_stop,
    memory_before,
    read_breakdown,
)
from cluster.resources.model_cache import ModelCheck, check_model
from cluster.resources.nccl_library import Library, ask_node, differ
from cluster.resources.startup_memory import StartupMemory, balance
from cluster.serving.containers import LABEL_CLUSTER
from cluster.serving.ray_memory_monitor import env_warning, launcher_warning

NO_INTERFACES = NodeInterfaces(eth_if="", ib_if=(), local_ip="")
MEMORY_WAIT_REPORT_S = 15.0  # while waiting for memory to come back, a word at least this often
REPLACING = "replace"  # the phase of the word said just before the leftovers are removed


async def detect_interfaces(
    node: NodeConnection, config: ClusterConfig
) -> NodeInterfaces | Unresolved:
    """The node's interfaces for NCCL, Gloo and Ray, from `ibdev2netdev` and its IPv4
    addresses (preflight's, and fabric-test's)."""
    ibdev, addrs = await asyncio.gather(
        node.run(["ibdev2netdev"], timeout=config.timeouts.preflight),
        node.run(["ip", "-o", "-f", "inet", "addr", "show"], timeout=config.timeouts.preflight),
    )
    if not ibdev.ok and config.network.ib_if == "auto":
        return Unresolved(
            f"`ibdev2netdev` failed (exit {ibdev.exit_status}): {ibdev.stderr.strip()[:200]}"
        )
    try:
        return resolve_interfaces(
            fabric_ip=node.config.fabric_ip,
            eth_choice=config.network.eth_if,
            ib_choice=config.network.ib_if,
            ibdev2netdev_output=ibdev.stdout,
            ip_addr_output=addrs.stdout,
        )
    except InterfaceProblem as problem:
        return Unresolved(str(problem), tuple(up_roce_devices(ibdev.stdout)))


def reachable(connection: ClusterConnection, reporter: Reporter) -> Event:
    """The `ssh` checkpoint: every node connected, or the first that is not."""
    for error in connection.errors.values():
        return reporter.unreachable(error, BY_ID[error.checkpoint])
    return reporter.passed(
        BY_ID["ssh"],
        "; ".join(
            f"{n.name}: connected in {n.connect_s * 1000:.0f} ms" for n in connection.ordered()
        ),
    )


NOT_OURS = ", not started by spark-bot"  # said after the state of a container that is not ours


@dataclass
class NodeFacts:
    docker_version: str = ""
    image_id: str | None = None
    interfaces: NodeInterfaces | None = None
    memory: MemoryBreakdown | None = None  # None: /proc/meminfo is not what Linux writes
    boot: Boot | None = None  # None: /proc's boot id or uptime is not what Linux writes
    home: str = "/root"
    stale_container: str | None = None
    stale_is_ours: bool = False  # labelled by spark-bot for this cluster
    # the MemAvailable the leftover's launch saw (its LABEL_MEMORY_BEFORE); None: no such label
    stale_memory_before: int | None = None

    @property
    def stale_holds_memory(self) -> bool:
        """The leftover's processes live: they hold their memory until it is removed."""
        state = self.stale_container
        return state is not None and state.removesuffix(NOT_OURS) in HOLDING


@dataclass(frozen=True)
class Leftover:
    """A container under the launch's name found on a node: its state, and whether spark-bot
    started it for this cluster."""

    node: str
    state: str  # "running", or "exited, not started by spark-bot"
    ours: bool

    @property
    def status(self) -> str:
        """Docker's word for its state: "running", "exited", …"""
        return self.state.removesuffix(NOT_OURS)


# Asked, inside the launch (its lease held, its connections open), when leftovers would stop
# it: True removes every one listed (a chat's confirmation names them all), False leaves them
# and the launch fails as without consent.
ConfirmReplace = Callable[[tuple[Leftover, ...]], Awaitable[bool]]


@dataclass
class Preflight:
    """Runs the checks and keeps what it learnt for the launch."""

    config: ClusterConfig
    connection: ClusterConnection
    reporter: Reporter
    replace: bool = False
    # nodes where removing a same-named container spark-bot did not start was asked and confirmed
    replace_foreign: frozenset[str] = frozenset()
    facts: dict[str, NodeFacts] = field(default_factory=dict)
    fit: Fit | None = None  # the estimate, when the model's files allowed one
    model: ModelCheck | None = None  # the model's files on every node
    # node -> seconds waited for the last launch's memory to come back, where it was awaited
    memory_returned: dict[str, float] = field(default_factory=dict)
    # the image's CUDA architectures and the GPU's, by image ID (the controller's, to keep)
    image_answers: AnswersByImage = field(default_factory=dict)
    confirm_replace: ConfirmReplace | None = None
    # the NCCL each node's ranks load, by node and image (the controller's, to keep), and the
    # mismatch between the nodes this preflight found (None: the same NCCL, or not known)
    nccl_answers: dict[str, Library] = field(default_factory=dict)
    nccl: dict[str, Library] = field(default_factory=dict)
    nccl_mismatch: str | None = None

    def _passed(self, checkpoint: str, evidence: str, node: str | None = None) -> CheckpointPassed:
        return self.reporter.passed(BY_ID[checkpoint], evidence, node=node)

    def _failed(
        self,
        checkpoint: str,
        node: str | None,
        failure: KnownFailure,
        values: dict[str, str],
        evidence: str | None = None,
    ) -> Failed:
        return self.reporter.known(BY_ID[checkpoint], failure, values, node=node, evidence=evidence)

    async def run(self) -> AsyncGenerator[Event, None]:
        """One checkpoint per check; nothing after the first Failed. A node that stops
        answering in the middle fails the check in progress, naming the node and what to try."""
        steps = [
            Step(BY_ID["ssh"], self._reachable),
            Step(BY_ID["docker"], self._engines),
            # asked as soon as known, removed only once every check passed: a no ends the launch
            # before more work, and a check failing after a yes leaves what runs running
            Step(BY_ID["no_stale_container"], self._leftovers),
            Step(BY_ID["image"], self._same_image),
            Step(BY_ID["gpu_arch"], self._image_runs_on_gpu),
            Step(BY_ID["nccl_library"], self._same_nccl),
            Step(BY_ID["interfaces"], self._interfaces),
            Step(BY_ID["memory"], self._memory_returns),
            Step(BY_ID["memory"], self._memory),
            Step(BY_ID["model"], self._model),
            Step(BY_ID["fit"], self._fits),
            Step(BY_ID["no_stale_container"], self._replace),
            Step(BY_ID["api_port"], self._ports_free),
        ]
        async with aclosing(run_steps(steps, self.reporter)) as events:
            async for event in events:
                yield event

    @property
    def _nodes(self) -> list[NodeConnection]:
        return self.connection.ordered()

    async def _reachable(self) -> AsyncGenerator[Event, None]:
        yield reachable(self.connection, self.reporter)

    async def _engines(self) -> AsyncGenerator[Event, None]:
        nodes = self._nodes
        gathered = await asyncio.gather(*(self._inspect(node) for node in nodes))
        self.facts = {node.name: facts for node, facts in zip(nodes, gathered, strict=True)}
        yield self._passed(
            "docker",
            "; ".join(f"{n.name}: Docker {self.facts[n.name].docker_version}" for n in nodes),
        )

    async def _same_image(self) -> AsyncGenerator[Event, None]:
        nodes, image = self._nodes, self.config.container.image
        ids: dict[str, str] = {}
        missing: list[str] = []
        for n in nodes:
            image_id = self.facts[n.name].image_id
            if image_id is None:
                missing.append(n.name)
            else:
                ids[n.name] = image_id
        head = self.connection.head.name
        if head in missing:
            yield self._failed("image", head, IMAGE_NOT_ON_HEAD, {"image": image, "head": head})
            return
        if missing:
            yield self._failed(
                "image", missing[0], IMAGE_MISSING, {"image": image, "missing": ", ".join(missing)}
            )
            return
        if len(set(ids.values())) > 1:
            listing = "; ".join(f"{name}: {image_id[:19]}" for name, image_id in ids.items())
            yield self._failed(
                "image", None, IMAGE_DIFFERS, {"image": image, "listing": listing}, evidence=listing
            )
            return
        yield self._passed(
            "image",
            f"Docker image consistency check passed: {image} = {next(iter(ids.values()))[:19]} on every node",
        )

    async def _image_runs_on_gpu(self) -> AsyncGenerator[Event, None]:
        """The image's kernels against the head's GPU, before a load that would fail on them
        after minutes; every node holds the same image ID by now, and Sparks the same GPU."""
        head, image = self.connection.head, self.config.container.image
        image_id = self.facts[head.name].image_id
        assert image_id is not None  # the image check failed otherwise
        if not self.config.container.gpus:
            why = "the containers get no GPU (container.gpus is false)"
            yield self.reporter.unchecked(BY_ID["gpu_arch"], why, why, node=head.name)
            return
        try:
            asked = await ask_image(
                self.config, head, self.facts[head.name].home, image_id, self.image_answers
            )
        except (NodeTimedOut, DockerRefused) as error:
            why = f"the image could not be asked: {error.problem}"
            yield self.reporter.unchecked(BY_ID["gpu_arch"], why, why, node=head.name)
            return
        if isinstance(asked.answer, str):
            why = asked.answer
            yield self.reporter.unchecked(BY_ID["gpu_arch"], why, why, node=head.name)
            return
        found = verdict(asked.answer)
        evidence = f"{found.evidence} ({asked.how}: image {image_id[:19]})"
        if found.runs is None:
            yield self.reporter.unchecked(
                BY_ID["gpu_arch"], found.evidence, evidence, node=head.name
            )
        elif found.runs:
            yield self._passed("gpu_arch", evidence, head.name)
        else:
            yield self._failed(
                "gpu_arch",
                head.name,
                IMAGE_NOT_BUILT_FOR_GPU,
                {"image": image, "node": head.name, **found.words()},
                evidence=evidence,
            )

    async def _same_nccl(self) -> AsyncGenerator[Event, None]:
        """The libnccl a rank loads on each node (the same image ID everywhere by now, but a
        mount or the environment can bring a node's own): different files are a warning
        before the load, and the first suspect if a collective later times out."""
        checkpoint = BY_ID["nccl_library"]
        if not self.config.container.gpus:
            why = "the containers get no GPU (container.gpus is false)"
            yield self.reporter.unchecked(checkpoint, why, why)
            return
        nodes = self._nodes
        asked = await asyncio.gather(*(self._ask_nccl(node) for node in nodes))
        found: dict[str, Library] = {}
        said: list[str] = []
        unknown: list[str] = []
        for node, (answer, how) in zip(nodes, asked, strict=True):
            if isinstance(answer, str):
                unknown.append(f"{node.name}: {answer}")
                continue
            found[node.name] = answer
            said.append(f"{node.name}: {answer.describe()} ({how})")
            if answer.path is None:
                unknown.append(f"{node.name}: {answer.describe()}")
        self.nccl = found
        self.nccl_mismatch = differ(found)
        if unknown and self.nccl_mismatch is None:
            why = "which NCCL a rank loads is not known on every node: " + "; ".join(unknown)
            yield self.reporter.unchecked(checkpoint, why, "; ".join([*said, why]))
            return
        warning = None
        if self.nccl_mismatch is not None:
            warning = (
                f"{self.nccl_mismatch}: collectives between them may wedge under load "
                "(vllm-project/vllm#42354); make every node load the same libnccl.so.2"
            )
        yield self.reporter.passed(checkpoint, "; ".join(said), warning=warning)

    async def _ask_nccl(self, node: NodeConnection) -> tuple[Library | str, str]:
        facts = self.facts[node.name]
        assert facts.image_id is not None  # the image check failed otherwise
        try:
            return await ask_node(self.config, node, facts.home, facts.image_id, self.nccl_answers)
        except (NodeTimedOut, DockerRefused) as error:
            return f"the image could not be asked: {error.problem}", "asked"

    async def _interfaces(self) -> AsyncGenerator[Event, None]:
        nodes = self._nodes
        found = await asyncio.gather(*(detect_interfaces(n, self.config) for n in nodes))
        by_name = {node.name: result for node, result in zip(nodes, found, strict=True)}
        path = fabric_paths.missing_path(by_name)
        if path is not None:
            yield self._failed(
                "interfaces",
                path.node,
                FABRIC_OTHER_PORT if path.other_port else FABRIC_SUBNET_MISSING,
                path.values(),
                evidence="\n".join(
                    fabric_paths.describe(name, result)
                    if isinstance(result, NodeInterfaces)
                    else f"{name}: {result.problem} (Up: {', '.join(result.up_netdevs) or 'none'})"
                    for name, result in by_name.items()
                ),
            )
            return
        described: list[str] = []
        for node, result in zip(nodes, found, strict=True):
            if isinstance(result, Unresolved):
                yield self._failed(
                    "interfaces",
                    node.name,
                    INTERFACES_UNEXPECTED,
                    {"node": node.name, "problem": result.problem},
                )
                return
            self.facts[node.name].interfaces = result
            described += [
                f"{node.name}: {result.describe()}",
                fabric_paths.describe(node.name, result),
            ]
        links = await self._fabric_links()
        broken = fabric_link.down(links)
        if broken is not None:
            yield self._failed(
                "interfaces",
                broken.node,
                FABRIC_LINK_DOWN,
                {"interface": broken.interface, "node": broken.node, "state": broken.operstate},
                evidence=broken.describe(),
            )
            return
        listing = "; ".join(link.describe() for link in links)
        if fabric_link.mtu_mismatch(links):
            lower = min(links, key=lambda link: link.mtu or 0)
            yield self._failed(
                "interfaces",
                lower.node,
                FABRIC_MTU_MISMATCH,
                {"listing": listing, "interface": lower.interface, "lower": lower.node},
                evidence=listing,
            )
            return
        slower = fabric_link.warnings(links, self.config.network.link_speed_mbps)
        yield self.reporter.passed(
            BY_ID["interfaces"],
            "\n".join([*described, f"fabric: {listing}"]),
            warning="; ".join([*slower, *self._bare_ports(links)]) or None,
        )

    def _bare_ports(self, links: list[fabric_link.LinkFacts]) -> list[str]:
        """An Up RoCE port whose interface exists but holds no address: NCCL_IB_HCA lists it,
        and NCCL uses half the port without NVIDIA's second subnet."""
        existing = {(link.node, link.interface) for link in links}
        return [
            f"{bare.netdev} on {node.name} is Up (behind {bare.device}, in NCCL_IB_HCA) but "
            "holds no address: NVIDIA's two-subnet layout gives the port's second interface a "
            "subnet of its own (`enP2p1s0f1np1` 192.168.101.x/24 beside `enp1s0f1np1` "
            "192.168.100.x/24 in the netplan), for both halves of the port"
            for node in self._nodes
            for bare in fabric_paths.unaddressed(self.facts[node.name].interfaces or NO_INTERFACES)
            if (node.name, bare.netdev) in existing
        ]

    async def _fabric_links(self) -> list[fabric_link.LinkFacts]:
        """Every fabric netdev of every node that exists as an interface of its own."""
        wanted = [
            (node, netdev)
            for node in self._nodes
            for netdev in (self.facts[node.name].interfaces or NO_INTERFACES).netdevs
        ]
        timeout = self.config.timeouts.preflight
        found = await asyncio.gather(*(fabric_link.read_link(n, i, timeout) for n, i in wanted))
        return [link for link in found if link is not None]

    def _available_gib(self, node: str) -> float:
        memory = self.facts[node].memory
        return memory.available / GIB if memory else 0.0

    async def _memory_returns(self) -> AsyncGenerator[Event, None]:
        """After a stop of our containers (down, a failed launch, a restart), each node's unified
        memory back to its level before that launch, waited for up to memory.return_timeout."""
        memory = self.config.memory
        if not memory.unified:
            return
        # a leftover still holding memory makes its node's earlier stops moot: the node is
        # judged on what the leftover gives back, awaited once it is removed (_replace)
        nodes = [n for n in self._nodes if not self.facts[n.name].stale_holds_memory]
        stops = await asyncio.gather(
            *(last_stop(n, self.config.name, memory.return_window) for n in nodes)
        )
        found = {n.name: (n, stop) for n, stop in zip(nodes, stops, strict=True) if stop}
        async with aclosing(self._await_memory(found, "the last launch's")) as events:
            async for event in events:
                yield event

    async def _await_memory(
        self, stops: dict[str, tuple[NodeConnection, LastStop]], whose: str
    ) -> AsyncGenerator[Event, None]:
        """Each node of `stops` whose memory is below its stop's level waited for, up to
        memory.return_timeout; a node whose memory does not come back fails, its holders named."""
        memory = self.config.memory
        waiting: dict[str, tuple[NodeConnection, LastStop]] = {}
        for name, (node, stop) in stops.items():
            now = self.facts[name].memory
            if now is not None and not is_back(now, stop, memory.return_tolerance_gib):
                waiting[name] = (node, stop)
        if not waiting:
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline, told = started + memory.return_timeout, started
        yield self._memory_progress(
            f"waiting up to {memory.return_timeout:g} s for {whose} memory to come "
            f"back: {self._still_missing(waiting)}"
        )
        while waiting and (left := deadline - loop.time()) > 0:
            await asyncio.sleep(min(memory.return_poll, left))  # the poll's interval
            names = list(waiting)
            readings = await asyncio.gather(
                *(read_breakdown(waiting[n][0], self.config.timeouts.preflight) for n in names)
            )
            for name, reading in zip(names, readings, strict=True):
                if reading is None:
                    continue
                self.facts[name].memory = reading
                if is_back(reading, waiting[name][1], memory.return_tolerance_gib):
                    del waiting[name]
                    self.memory_returned[name] = loop.time() - started
                    yield self._memory_progress(
                        f"memory back on {name} after {self.memory_returned[name]:.1f} s: "
                        f"{reading.available / GIB:.1f} GiB available",
                        node=name,
                    )
            if waiting and loop.time() - told >= MEMORY_WAIT_REPORT_S:
                told = loop.time()
                yield self._memory_progress(f"still waiting: {self._still_missing(waiting)}")
        if not waiting:
            return
        name, (node, stop) = next(iter(waiting.items()))
        now = self.facts[name].memory
        assert now is not None
        missing = stop.available_before - now.available
        holders = await held_by(node, missing, self.config.timeouts.preflight)
        values = {
            "node": name,
            "waited": f"{memory.return_timeout:g}",
            "available": f"{now.available / GIB:.1f}",
            "before": f"{stop.available_before / GIB:.1f}",
            "holders": "; ".join(h.describe() for h in holders),
            "holder": holders[0].command if holders else "",
        }
        failure = MEMORY_HELD if holders else MEMORY_NOT_RETURNED
        yield self._failed("memory", name, failure, values, evidence=now.describe())

    def _still_missing(self, waiting: dict[str, tuple[NodeConnection, LastStop]]) -> str:
        return "; ".join(
            f"{name}: {self._available_gib(name):.1f} GiB available, "
            f"{stop.available_before / GIB:.1f} GiB before the last launch"
            for name, (_, stop) in waiting.items()
        )

    def _memory_progress(self, message: str, node: str | None = None) -> Progress:
        return Progress(
            elapsed_s=self.reporter.elapsed(), phase="memory", node=node, message=message
        )

    async def _memory(self) -> AsyncGenerator[Event, None]:
        nodes, need = self._nodes, self.config.serve.min_free_memory_gib
        short = [n.name for n in nodes if self._judged_gib(n.name) < need]
        memory = "; ".join(
            f"{n.name}: MemAvailable {self._judged_gib(n.name):.1f} GiB" for n in nodes
        ) + "".join(f"\n{note}" for note in self._credit_notes())
        if short:
            yield self._failed(
                "memory",
                short[0],
                MEMORY_SHORT,
                {"short": ", ".join(short), "memory": memory, "need": f"{need:g}"},
                evidence=memory,
            )
            return
        returned = "".join(
            f"\nmemory back on {name} after {waited:.1f} s"
            for name, waited in self.memory_returned.items()
        )
        head = self.connection.head
        ray_monitor = env_warning(self.config) or await launcher_warning(
            self.config, head, self.facts[head.name].home
        )
        if not self.config.memory.unified:
            evidence = memory + (f" (need {need:g} GiB)" if need else "") + returned
            yield self.reporter.passed(BY_ID["memory"], evidence, warning=ray_monitor)
            return
        startup = self._startup_memory()
        if isinstance(startup, str):
            warning = "; ".join(w for w in (f"not checked: {startup}", ray_monitor) if w)
            yield self.reporter.passed(BY_ID["memory"], memory + returned, warning=warning)
            return
        failure = self._startup_failure(startup)
        if failure is not None:
            yield failure
            return
        evidence = "\n".join([*(s.describe() for s in startup), *self._credit_notes()])
        yield self.reporter.passed(BY_ID["memory"], evidence + returned, warning=ray_monitor)

    def _judged(self, name: str) -> MemoryBreakdown | None:
        """The node's memory as the checks judge it: with what a leftover the launch replaces
        gives back once gone, where its launch recorded the level before it."""
        facts = self.facts[name]
        before = facts.stale_memory_before
        if facts.memory is None or not facts.stale_holds_memory or before is None:
            return facts.memory
        return credited(facts.memory, before)

    def _judged_gib(self, name: str) -> float:
        memory = self._judged(name)
        return memory.available / GIB if memory else 0.0

    def _credit_notes(self) -> list[str]:
        """Per node whose leftover holds memory: what is available now, and what once it is
        gone, or why its memory could not be counted."""
        name, notes = self.config.container.name, []
        for node in self._nodes:
            facts, judged = self.facts[node.name], self._judged(node.name)
            if facts.memory is None or judged is None or not facts.stale_holds_memory:
                continue
            now = f"{node.name}: {facts.memory.available / GIB:.1f} GiB available now"
            if facts.stale_memory_before is not None:
                notes.append(
                    f"{now}, {judged.available / GIB:.1f} GiB once the replaced {name} is gone "
                    "(its launch's reading)"
                )
                continue
            why = "its launch recorded none" if facts.stale_is_ours else "not started by spark-bot"
            notes.append(
                f"{now}; the memory the replaced {name} holds could not be credited ({why}): "
                "judged on what is available now"
            )
        return notes

    def _startup_memory(self) -> list[StartupMemory] | str:
        """Each node against what vLLM claims at start-up; why not, in words."""
        startup = []
        for node in self._nodes:
            memory = self._judged(node.name)
            if memory is None:
                return f"/proc/meminfo on {node.name} is not what Linux writes"
            startup.append(
                StartupMemory(
                    node.name,
                    memory,
                    self.config.serve.gpu_memory_utilization,
                    self._memory_gib(node),
                )
            )
        return startup

    def _startup_failure(self, startup: list[StartupMemory]) -> Failed | None:
        short = [s for s in startup if not s.fits]
        if not short:
            return None
        listing = "; ".join(s.describe() for s in startup)
        gap = balance(startup) if len(short) < len(startup) else ""
        values = {
            "short": ", ".join(s.node for s in short),
            "listing": listing + (f". {gap}" if gap else ""),
        }
        evidence = "\n".join([*(s.describe() for s in startup), *self._credit_notes()])
        if all(s.cache_in_the_way for s in short):
            command = self.config.memory.drop_caches
            values["command"] = " ".join(command or ())
            failure = MEMORY_PAGE_CACHE if command else MEMORY_PAGE_CACHE_BY_HAND
            return self._failed("memory", short[0].node, failure, values, evidence=evidence)
        held = next(s for s in short if not s.cache_in_the_way)
        values["utilization"] = f"{min(s.utilization_that_fits() for s in short):g}"
        return self._failed("memory", held.node, MEMORY_IN_USE, values, evidence=evidence)

    async def _model(self) -> AsyncGenerator[Event, None]:
        """The model's files complete on every node that serves it, before a load that would
        fail on a missing or short shard after minutes."""
        found = self.model = await check_model(
            self.config, self._nodes, {name: facts.home for name, facts in self.facts.items()}
        )
        failure = model_failure(found, self.reporter, BY_ID["model"], self.connection.head.name)
        if failure is not None:
            yield failure
            return
        unseen = [m for m in found.nodes if m.unseen is not None]
        evidence = f"{found.evidence()}\n{found.offline_note()}"
        if unseen and len(unseen) == len(found.nodes):  # seen nowhere: the check did not run
            yield self.reporter.unchecked(BY_ID["model"], unseen[0].unseen or "", evidence)
            return
        yield self.reporter.passed(
            BY_ID["model"],
            f"{found.evidence()}\n{found.offline_note()}",
            warning=f"the model's files are not checked on {', '.join(m.node for m in unseen)}: "
            f"{unseen[0].unseen}"
            if unseen
            else None,
        )

    def _memory_gib(self, node: NodeConnection) -> float:
        memory = self.facts[node.name].memory
        return node.config.memory_gib or (memory.total / GIB if memory else 0.0)

    def _head_model_files(self) -> ModelFiles | None:
        """What the model check read on the head, when it ran and found the files."""
        head = self.connection.head.name
        found = next((m for m in self.model.nodes if m.node == head), None) if self.model else None
        return found.files() if found is not None else None

    async def _fits(self) -> AsyncGenerator[Event, None]:
        """The memory arithmetic of one rank on the smallest node, from the model's files in the
        head's Hugging Face cache; files it cannot read make a warning, never a refusal."""
        config, head = self.config, self.connection.head
        smallest = min(self._nodes, key=self._memory_gib)
        try:
            facts = await read_model_facts(
                config, head, self.facts[head.name].home, self._head_model_files()
            )
            fit = estimate(facts, config.serve, self._memory_gib(smallest))
        except ModelFilesProblem as problem:
            yield self.reporter.unchecked(
                BY_ID["fit"],
                f"no fit estimate for {config.serve.model}: {problem}; the load is not checked "
                "before it starts",
                f"cannot estimate: {problem}",
                node=head.name,
            )
            return
        self.fit = fit
        if not fit.fits:
            yield self._failed(
                "fit",
                smallest.name,
                MODEL_DOES_NOT_FIT,
                {
                    "model": config.serve.model,
                    "node": smallest.name,
                    "max_model_len": str(fit.max_model_len),
                    "need": f"{fit.need_gib:.2f}",
                    "budget": f"{fit.kv_budget_gib:.2f}",
                    "weights": f"{fit.weights_gib:.2f}",
                    "remedy": _remedy(fit, config),
                },
                evidence=fit.arithmetic(),
            )
            return
        warning = None
        if fit.headroom < LOW_HEADROOM:
            warning = (
                f"little headroom: {fit.headroom:.0%} of the KV cache budget is left once one "
                f"sequence of {fit.max_model_len} tokens is held"
            )
        elif config.serve.max_num_seqs and fit.sequences_at_full_length < config.serve.max_num_seqs:
            warning = (
                f"only {fit.sequences_at_full_length} of max_num_seqs {config.serve.max_num_seqs} "
                f"sequences fit at the full {fit.max_model_len} tokens (shorter ones share it)"
            )
        yield self.reporter.passed(
            BY_ID["fit"],
            f"{smallest.name}: {fit.arithmetic()}",
            node=smallest.name,
            warning=warning,
        )

    def _stale(self) -> list[tuple[NodeConnection, str]]:
        return [(n, state) for n in self._nodes if (state := self.facts[n.name].stale_container)]

    async def _leftovers(self) -> AsyncGenerator[Event, None]:
        """The leftovers asked about as soon as they are known; without consent to remove every
        one, the launch ends here. Nothing is removed yet (_replace)."""
        name = self.config.container.name
        stale = self._stale()
        await self._confirm_replace(stale)
        foreign = next(
            (
                (n, state)
                for n, state in stale
                if not self.facts[n.name].stale_is_ours and n.name not in self.replace_foreign
            ),
            None,
        )
        if foreign is not None:
            node, state = foreign
            yield self._failed(
                "no_stale_container",
                node.name,
                FOREIGN_CONTAINER,
                {"container": name, "node": node.name, "state": state},
                evidence=f"{node.name}: {state}",
            )
            return
        if stale and not self.replace:
            listing = "; ".join(f"{n.name}: {state}" for n, state in stale)
            yield self._failed(
                "no_stale_container",
                stale[0][0].name,
                STALE_CONTAINER,
                {"container": name, "listing": listing},
                evidence=listing,
            )

    async def _replace(self) -> AsyncGenerator[Event, None]:
        """Every check passed: the consented leftovers removed, and the memory they held awaited
        back before anything starts."""
        name = self.config.container.name
        stale = self._stale()
        if not stale:
            yield self._passed("no_stale_container", f"no container named {name} on any node")
            return
        listing = ", ".join(f"{n.name} ({state})" for n, state in stale)
        yield Progress(
            elapsed_s=self.reporter.elapsed(),
            phase=REPLACING,
            message=f"every check passed: removing {name} on {listing}",
        )
        for node, _ in stale:
            await node.docker.remove(name)
        async with aclosing(self._replaced_memory_back(stale)) as events:
            async for event in events:
                yield event
                if isinstance(event, Failed):
                    return
        # only nodes whose leftover held memory are awaited here, never before (_memory_returns)
        returned = "".join(
            f"\nmemory back on {n.name} after {self.memory_returned[n.name]:.1f} s"
            for n, _ in stale
            if self.facts[n.name].stale_holds_memory and n.name in self.memory_returned
        )
        yield self._passed("no_stale_container", f"replaced: {listing}{returned}")

    async def _replaced_memory_back(
        self, stale: list[tuple[NodeConnection, str]]
    ) -> AsyncGenerator[Event, None]:
        """The memory the removed leftovers held, back to their launch's level (the label the
        checks credited); each node's reading after the removal is the one this launch keeps."""
        if not self.config.memory.unified:
            return
        nodes = [n for n, _ in stale]
        readings = await asyncio.gather(
            *(read_breakdown(n, self.config.timeouts.preflight) for n in nodes)
        )
        for node, reading in zip(nodes, readings, strict=True):
            if reading is not None:
                self.facts[node.name].memory = reading
        name = self.config.container.name
        stops = {
            n.name: (n, LastStop(n.name, name, before))
            for n in nodes
            if self.facts[n.name].stale_holds_memory
            and (before := self.facts[n.name].stale_memory_before) is not None
        }
        async with aclosing(self._await_memory(stops, f"the replaced {name}'s")) as events:
            async for event in events:
                yield event

    async def _confirm_replace(self, stale: list[tuple[NodeConnection, str]]) -> None:
        """Ask about the leftovers (when there is someone to ask) that would stop the launch:
        the facts the question shows are those the launch acts on."""
        ours = {n.name for n, _ in stale if self.facts[n.name].stale_is_ours}
        unconsented = [
            n
            for n, _ in stale
            if (n.name not in ours and n.name not in self.replace_foreign)
            or (n.name in ours and not self.replace)
        ]
        if not unconsented or self.confirm_replace is None:
            return
        leftovers = tuple(Leftover(n.name, state, n.name in ours) for n, state in stale)
        if await self.confirm_replace(leftovers):
            self.replace = True
            self.replace_foreign |= {n.name for n, _ in stale if n.name not in ours}

    async def _ports_free(self) -> AsyncGenerator[Event, None]:
        config = self.config
        head = self.connection.head
        ports = [config.serve.port]
        ports.append(
            config.serve.ray_port if config.serve.backend == "ray" else config.serve.master_port
        )
        query = ["ss", "-Htln", " or ".join(f"sport = :{p}" for p in ports)]
        sockets = await head.run(query, timeout=config.timeouts.preflight)
        if not sockets.ok:
            yield self._failed(
                "api_port",
                head.name,
                SS_FAILED,
                {
                    "node": head.name,
                    "status": str(sockets.exit_status),
                    "stderr": sockets.stderr.strip()[:200],
                },
            )
            return
        if sockets.stdout.strip():
            yield self._failed(
                "api_port",
                head.name,
                PORT_TAKEN,
                {"ports": ", ".join(map(str, ports)), "node": head.name},
                evidence=sockets.stdout.strip().splitlines()[0],
            )
            return
        yield self._passed(
            "api_port",
            f"nothing listens on ports {', '.join(map(str, ports))} on {head.name}",
            head.name,
        )

    async def _inspect(self, node: NodeConnection) -> NodeFacts:
        config = self.config
        facts = NodeFacts()
        # files and the home directory over SFTP: no process started on the node (each costs
        # a shell's start-up, 0.2-0.7 s on the lab)
        version, meminfo, home, facts.boot = await asyncio.gather(
            node.docker.version(),
            node.read_file("/proc/meminfo", timeout=config.timeouts.preflight),
            node_home(node, config.timeouts.preflight),
            boot_if_linux(node, timeout=config.timeouts.preflight),
        )
        facts.docker_version = f"{version.get('Version')} (API {version.get('ApiVersion')})"
        try:
            facts.memory = parse_memory_breakdown(meminfo)
        except ValueError:  # not Linux's /proc/meminfo: the memory check says 0 GiB
            facts.memory = None
        facts.home = home
        facts.image_id = await node.docker.image_id(config.container.image)
        info = await node.docker.find_container(config.container.name)
        if info is not None:
            labels = info["Config"].get("Labels") or {}
            labelled = labels.get(LABEL_CLUSTER) == config.name
            facts.stale_memory_before = memory_before(labels)
            # the operator's launcher's container: its recipe names it, that is the say-so
            facts.stale_is_ours = labelled or config.launcher is not None
            facts.stale_container = info["State"]["Status"] + (
                "" if facts.stale_is_ours else NOT_OURS
            )
        return facts


def model_failure(
    found: ModelCheck, reporter: Reporter, checkpoint: Checkpoint, head: str
) -> Failed | None:
    """The failure of a node missing the model, or None: offers `sync-model` when a node has it
    complete to copy from, else says to download it once."""
    incomplete = found.incomplete
    if not incomplete:
        return None
    config = found.config
    defects = "; ".join(f"{m.node}: {m.defects()}" for m in incomplete)
    values = {"model": config.serve.model, "defects": defects}
    source = found.source
    if source is None:
        values |= {"head": head, "cache": hf_home(config)}
        return reporter.known(
            checkpoint, MODEL_NOT_CACHED, values, node=incomplete[0].node, evidence=found.evidence()
        )
    values |= {"nodes": ", ".join(m.node for m in incomplete), "source": source.node}
    return reporter.known(
        checkpoint, MODEL_INCOMPLETE, values, node=incomplete[0].node, evidence=found.evidence()
    )


def _remedy(fit: Fit, config: ClusterConfig) -> str:
    """What would fit: the largest max_model_len, else the gpu_memory_utilization, else neither."""
    longest = fit.largest_max_model_len()
    if longest >= KV_BLOCK:
        return (
            f"set serve.max_model_len to {longest} or less (`/spark up max_model_len={longest}` "
            f"where the config allows that override), or raise gpu_memory_utilization to "
            f"{fit.utilization_that_fits() or 1.0:g}"
        )
    share = fit.utilization_that_fits()
    if share is not None:
        return (
            f"raise serve.gpu_memory_utilization to {share:g} (the weights and overhead alone "
            f"take {fit.weights_gib + fit.overhead_gib:.2f} GiB of "
            f"{fit.gpu_memory_utilization * fit.memory_gib:.2f} GiB)"
        )
    return (
        f"the weights alone ({fit.weights_gib:.2f} GiB a rank) leave no room on "
        f"{fit.memory_gib:.2f} GiB: spread the model over more nodes (tensor_parallel_size > "
        f"{config.serve.tensor_parallel_size}) or use a smaller or more quantized checkpoint"
    )
