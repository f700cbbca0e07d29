"""Preflight: before anything starts, prove every node is ready, all nodes at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field

from cluster.checkpoints import BY_ID, Checkpoint
from cluster.config import ClusterConfig
from cluster.containers import LABEL_CLUSTER
from cluster.errors import InterfaceProblem
from cluster.events import CheckpointPassed, Event, Failed
from cluster.failures import (
    FOREIGN_CONTAINER,
    IMAGE_DIFFERS,
    IMAGE_MISSING,
    IMAGE_NOT_ON_HEAD,
    INTERFACES_UNEXPECTED,
    MEMORY_SHORT,
    MODEL_DOES_NOT_FIT,
    MODEL_INCOMPLETE,
    MODEL_NOT_CACHED,
    PORT_TAKEN,
    SS_FAILED,
    STALE_CONTAINER,
    KnownFailure,
)
from cluster.fit import (
    KV_BLOCK,
    LOW_HEADROOM,
    Fit,
    ModelFiles,
    ModelFilesProblem,
    estimate,
    hf_home,
    read_model_facts,
)
from cluster.interfaces import NodeInterfaces, resolve_interfaces
from cluster.memory import parse_meminfo
from cluster.modelcache import ModelCheck, check_model
from cluster.nodes import ClusterConnection, NodeConnection, node_home
from cluster.reporter import Reporter
from cluster.steps import Step, run_steps


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


@dataclass
class NodeFacts:
    docker_version: str = ""
    image_id: str | None = None
    interfaces: NodeInterfaces | None = None
    mem_available_gib: float = 0.0
    mem_total_gib: float = 0.0
    home: str = "/root"
    stale_container: str | None = None
    stale_is_ours: bool = False  # labelled by spark-bot for this cluster


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
            Step(BY_ID["image"], self._same_image),
            Step(BY_ID["interfaces"], self._interfaces),
            Step(BY_ID["memory"], self._memory),
            Step(BY_ID["model"], self._model),
            Step(BY_ID["fit"], self._fits),
            Step(BY_ID["no_stale_container"], self._no_stale_container),
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

    async def _interfaces(self) -> AsyncGenerator[Event, None]:
        nodes = self._nodes
        found = await asyncio.gather(*(self._node_interfaces(n) for n in nodes))
        described: list[str] = []
        for node, result in zip(nodes, found, strict=True):
            if isinstance(result, str):
                yield self._failed(
                    "interfaces",
                    node.name,
                    INTERFACES_UNEXPECTED,
                    {"node": node.name, "problem": result},
                )
                return
            self.facts[node.name].interfaces = result
            described.append(f"{node.name}: {result.describe()}")
        yield self._passed("interfaces", "\n".join(described))

    async def _node_interfaces(self, node: NodeConnection) -> NodeInterfaces | str:
        config = self.config
        ibdev, addrs = await asyncio.gather(
            node.run(["ibdev2netdev"], timeout=config.timeouts.preflight),
            node.run(["ip", "-o", "-f", "inet", "addr", "show"], timeout=config.timeouts.preflight),
        )
        if not ibdev.ok and config.network.ib_if == "auto":
            return f"`ibdev2netdev` failed (exit {ibdev.exit_status}): {ibdev.stderr.strip()[:200]}"
        try:
            return resolve_interfaces(
                fabric_ip=node.config.fabric_ip,
                eth_choice=config.network.eth_if,
                ib_choice=config.network.ib_if,
                ibdev2netdev_output=ibdev.stdout,
                ip_addr_output=addrs.stdout,
            )
        except InterfaceProblem as problem:
            return str(problem)

    async def _memory(self) -> AsyncGenerator[Event, None]:
        nodes, need = self._nodes, self.config.serve.min_free_memory_gib
        short = [n.name for n in nodes if self.facts[n.name].mem_available_gib < need]
        memory = "; ".join(
            f"{n.name}: MemAvailable {self.facts[n.name].mem_available_gib:.1f} GiB" for n in nodes
        )
        if short:
            yield self._failed(
                "memory",
                short[0],
                MEMORY_SHORT,
                {"short": ", ".join(short), "memory": memory, "need": f"{need:g}"},
                evidence=memory,
            )
            return
        yield self._passed("memory", memory + (f" (need {need:g} GiB)" if need else ""))

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
        return node.config.memory_gib or self.facts[node.name].mem_total_gib

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

    async def _no_stale_container(self) -> AsyncGenerator[Event, None]:
        name = self.config.container.name
        stale = [(n, state) for n in self._nodes if (state := self.facts[n.name].stale_container)]
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
            return
        for node, _ in stale:
            await node.docker.remove(name)
        yield self._passed(
            "no_stale_container",
            "replaced: " + ", ".join(f"{n.name} ({state})" for n, state in stale)
            if stale
            else f"no container named {name} on any node",
        )

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
        version, meminfo, home = await asyncio.gather(
            node.docker.version(),
            node.read_file("/proc/meminfo", timeout=config.timeouts.preflight),
            node_home(node, config.timeouts.preflight),
        )
        facts.docker_version = f"{version.get('Version')} (API {version.get('ApiVersion')})"
        try:
            total, available = parse_meminfo(meminfo)
        except ValueError:  # not Linux's /proc/meminfo: the memory check says 0 GiB
            total = available = 0
        facts.mem_available_gib = available / 1024**3
        facts.mem_total_gib = total / 1024**3
        facts.home = home
        facts.image_id = await node.docker.image_id(config.container.image)
        info = await node.docker.find_container(config.container.name)
        if info is not None:
            labelled = (info["Config"].get("Labels") or {}).get(LABEL_CLUSTER) == config.name
            # the operator's launcher's container: its recipe names it, that is the say-so
            facts.stale_is_ours = labelled or config.launcher is not None
            facts.stale_container = info["State"]["Status"] + (
                "" if facts.stale_is_ours else ", not started by spark-bot"
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
