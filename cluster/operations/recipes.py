"""The recipes of a config, each with what it needs (the fit estimate) and whether it runs now."""

from __future__ import annotations

import asyncio

from cluster.config import ClusterConfig
from cluster.events import RecipesReport, RecipeSummary
from cluster.nodes import ClusterConnection, NodeConnection, node_home
from cluster.operations.inventory import container_state
from cluster.operations.operator_launcher import launched_recipe
from cluster.progress.reporter import Reporter
from cluster.resources.fit import ModelFilesProblem, estimate, read_model_facts
from cluster.resources.memory import MEMINFO, parse_meminfo


async def _memory_gib(node: NodeConnection, config: ClusterConfig) -> float:
    if node.config.memory_gib:
        return node.config.memory_gib
    try:
        total, _ = parse_meminfo(await node.read_file(MEMINFO, timeout=config.timeouts.preflight))
    except ValueError:
        return 0.0
    return total / 1024**3


async def _needs(
    config: ClusterConfig, head: NodeConnection, home: str, memory: dict[str, float]
) -> tuple[str, bool | None]:
    """The estimate in a line: per rank weights + KV cache for one max_model_len sequence."""
    try:
        facts = await read_model_facts(config, head, home)
        smallest = min(memory.get(n.name, 0.0) for n in config.nodes)
        fit = estimate(facts, config.serve, smallest)
    except ModelFilesProblem as problem:
        return f"no estimate: {problem}", None
    verdict = (
        f"fits, {fit.kv_tokens:,} KV tokens"
        if fit.fits
        else f"does NOT fit (max_model_len {fit.largest_max_model_len()} would)"
    )
    return (
        f"{fit.weights_gib:.1f} GiB weights + {fit.need_gib:.1f} GiB KV cache "
        f"({fit.max_model_len} tokens) + {fit.overhead_gib:.1f} GiB overhead a rank, of "
        f"{fit.gpu_memory_utilization:g} x {fit.memory_gib:.1f} GiB: {verdict}"
    ), fit.fits


async def recipes_report(config: ClusterConfig, connection: ClusterConnection) -> RecipesReport:
    """Every recipe, its needs estimated from the model files in the head's Hugging Face cache
    (all at once), and the one the head's container was started with."""
    reporter = Reporter()
    timeout = config.timeouts.preflight
    unreachable = "; ".join(str(e) for e in connection.errors.values())
    head = connection.nodes.get(config.head.name)
    running = None
    summaries: list[RecipeSummary] = []
    memory: dict[str, float] = {}
    home = "/root"
    if head is not None:
        nodes = connection.ordered()
        sizes, state, home = await asyncio.gather(
            asyncio.gather(*(_memory_gib(n, config) for n in nodes)),
            container_state(head, config.container.name),
            node_home(head, timeout),
        )
        memory = {n.name: size for n, size in zip(nodes, sizes, strict=True)}
        running = state.recipe if state.running else None
        for container in config.launcher_containers:  # no label: its name, and the head's record
            if running is None and (await container_state(head, container)).running:
                running = await launched_recipe(config, head, home, container)
    chosen = {name: config.with_recipe(name) for name in config.recipes}
    if head is not None:
        needs = await asyncio.gather(
            *(_needs(setup, head, home, memory) for setup in chosen.values())
        )
    else:
        needs = [(f"no estimate: the head is unreachable ({unreachable})", None)] * len(chosen)
    for (name, setup), (line, fits) in zip(chosen.items(), needs, strict=True):
        recipe = config.recipes[name]
        summaries.append(
            RecipeSummary(
                name=name,
                description=recipe.description,
                model=setup.serve.model,
                served_model_name=setup.serve.served_model_name,
                nodes=[n.name for n in setup.nodes],
                tensor_parallel_size=setup.serve.tensor_parallel_size,
                pipeline_parallel_size=setup.serve.pipeline_parallel_size,
                backend=setup.serve.backend,
                image=setup.container.image,
                needs=line,
                fits=fits,
                running=name == running,
                default=name == config.recipe,
                sources=list(recipe.sources),
            )
        )
    return RecipesReport(
        elapsed_s=reporter.elapsed(),
        recipes=summaries,
        running=running,
        detail=f"unreachable: {unreachable}" if unreachable else "",
    )
