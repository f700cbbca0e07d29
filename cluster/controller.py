"""The controller's public face: each operation opens the nodes, yields events, closes them.

It knows nothing of chat; every surface (CLI, Slack, console, tests) drives these.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Collection, Sequence
from contextlib import aclosing
from pathlib import Path

from cluster.bench.history import BenchHistory, History, cluster_fingerprint
from cluster.bench.runner import DEFAULT_PROMPT, BenchOptions, run_bench
from cluster.config import ClusterConfig, Secrets
from cluster.diagnosis.failures import CLUSTER_NOT_UP
from cluster.errors import NodeError
from cluster.events import DiagnosticsCollected, Event, LogTail, Progress, Removed, StatusReport
from cluster.nodes import ClusterConnection, NodeConnection, connect_cluster, node_home
from cluster.operations.diag_bundle import collect
from cluster.operations.drop_caches import drop_caches
from cluster.operations.fabric_report import FabricTestReport
from cluster.operations.fabric_test import DEFAULT_SECONDS, fabric_test
from cluster.operations.inventory import (
    container_state,
    container_states,
    read_log_tail,
    remove_container,
)
from cluster.operations.launch import Launch, api_base_url
from cluster.operations.operator_launcher import (
    launched_recipe,
    launcher_output_tail,
    stop_launcher,
)
from cluster.operations.preflight import ConfirmReplace, Preflight
from cluster.operations.recipes import recipes_report
from cluster.operations.sync_image import ImageSync
from cluster.operations.sync_model import ModelSync
from cluster.operations.verify import verify as verify_cluster
from cluster.operations.watch import watch as watch_cluster
from cluster.progress.checkpoints import BENCH
from cluster.progress.reporter import Reporter
from cluster.resources.gpu_arch import AnswersByImage
from cluster.resources.memory import nodes_memory
from cluster.resources.nccl_library import Library
from cluster.serving import api


class Controller:
    def __init__(self, config: ClusterConfig, secrets: Secrets, *, who: str = "spark-bot"):
        self.config = config
        self.secrets = secrets
        self.who = who  # the way in (the Slack bot, the console, the CLI), named in its lease
        # what each image said of its CUDA architectures: asked once per image ID
        self.image_answers: AnswersByImage = {}
        # the NCCL each node's ranks load: asked once per image (unless mounted)
        self.nccl_answers: dict[str, Library] = {}

    async def preflight(
        self, *, replace: bool = False, replace_foreign: Collection[str] = ()
    ) -> AsyncGenerator[Event, None]:
        reporter = Reporter()  # the clock starts with the command, not once SSH is up
        async with connect_cluster(self.config) as connection:
            preflight = Preflight(
                self.config,
                connection,
                reporter,
                replace=replace,
                replace_foreign=frozenset(replace_foreign),
                image_answers=self.image_answers,
                nccl_answers=self.nccl_answers,
            )
            async with aclosing(preflight.run()) as events:
                async for event in events:
                    yield event

    async def up(
        self,
        *,
        replace: bool = False,
        replace_foreign: Collection[str] = (),
        sample_max_tokens: int = 128,
        take_over: bool = False,
        confirm_replace: ConfirmReplace | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Launch; `replace` removes a leftover container spark-bot started, `replace_foreign`
        names the nodes where a user consented to removing one it did not start; `take_over`
        takes the cluster from another live launch (cluster/operations/launch_lease.py).
        `confirm_replace` asks about leftovers the launch found (over its one connection to
        each node, its lease held) instead of failing on them: a chat's question before
        replacing needs no connection and container check of its own."""
        reporter = Reporter()  # the clock starts with the command, not once SSH is up
        async with connect_cluster(self.config) as connection:
            launch = Launch(
                self.config,
                self.secrets,
                connection,
                replace=replace,
                replace_foreign=replace_foreign,
                sample_max_tokens=sample_max_tokens,
                reporter=reporter,
                who=self.who,
                take_over=take_over,
                image_answers=self.image_answers,
                confirm_replace=confirm_replace,
                nccl_answers=self.nccl_answers,
            )
            # Closed before the connections are: a cancelled launch cleans up over them.
            async with aclosing(launch.run()) as events:
                async for event in events:
                    yield event

    async def sync_image(self, *, report_every_s: float = 1.0) -> AsyncGenerator[Event, None]:
        """Stream the head's image into every node where it is missing or differs, then
        compare the IDs; progress (bytes, rate, time left) at most every `report_every_s`."""
        async with connect_cluster(self.config) as connection:
            sync = ImageSync(self.config, connection, Reporter(), report_every_s=report_every_s)
            # Closed before the connections are: a cancel aborts the streams over them.
            async with aclosing(sync.run()) as events:
                async for event in events:
                    yield event

    async def sync_model(self, *, report_every_s: float = 1.0) -> AsyncGenerator[Event, None]:
        """Copy the model from a node that has it complete to every node that does not (rsync
        over the fabric, resumable), then check every node again; progress at most every
        `report_every_s`."""
        async with connect_cluster(self.config) as connection:
            sync = ModelSync(self.config, connection, Reporter(), report_every_s=report_every_s)
            # Closed before the connections are: a cancel ends the copies over them.
            async with aclosing(sync.run()) as events:
                async for event in events:
                    yield event

    async def drop_caches(self) -> AsyncGenerator[Event, None]:
        """Drop every node's page cache with the config's command (memory.drop_caches); the
        memory each node gave back, or why it refused."""
        async with (
            connect_cluster(self.config) as connection,
            aclosing(drop_caches(self.config, connection, Reporter())) as events,
        ):
            async for event in events:
                yield event

    async def verify(self) -> AsyncGenerator[Event, None]:
        async with (
            connect_cluster(self.config) as connection,
            aclosing(verify_cluster(self.config, self.secrets, connection)) as events,
        ):
            async for event in events:
                yield event

    async def watch(self, *, health_interval: float = 30.0) -> AsyncGenerator[Event, None]:
        async with connect_cluster(self.config) as connection:
            watching = watch_cluster(
                self.config,
                self.secrets,
                connection,
                health_interval=health_interval,
            )
            async with aclosing(watching) as events:
                async for event in events:
                    yield event

    async def status(self) -> AsyncGenerator[Event, None]:
        reporter = Reporter()
        async with connect_cluster(self.config) as connection:
            states = await container_states(connection.ordered(), self.config.container.name)
            head = connection.nodes.get(self.config.head.name)
            for name in self.config.launcher_containers:
                if name == self.config.container.name:
                    continue
                present = [
                    s for s in await container_states(connection.ordered(), name) if s.present
                ]
                if not present:
                    continue
                # a launcher's, present: shown too, with the recipe that ran it (or why that is
                # not known: the rest of the status is shown all the same)
                recipe, unknown = None, None
                if head is None:
                    unknown = "the head, where its launcher's runs are recorded, is unreachable"
                else:
                    try:
                        home = await node_home(head, self.config.timeouts.launcher)
                        recipe = await launched_recipe(self.config, head, home, name)
                    except NodeError as error:
                        unknown = (
                            f"its launcher's runs on {head.name} could not be read: "
                            f"{error.problem}; {error.fix}"
                        )
                states += [
                    s.model_copy(update={"recipe": recipe, "recipe_unknown": unknown})
                    for s in present
                ]
            healthy, detail = (
                None,
                "not asked: the head is unreachable or its container is not running",
            )
            version = None
            head_running = any(s.running for s in states if s.node == self.config.head.name)
            if head_running:
                base_url = await api_base_url(self.config, connection.head)
                async with api.api_client(
                    base_url, read_timeout=10, api_key=self.secrets.api_key
                ) as client:
                    healthy, detail = await api.health(client)
                    version = await api.vllm_version(client) if healthy else None
            unreachable = "; ".join(str(e) for e in connection.errors.values())
            yield StatusReport(
                elapsed_s=reporter.elapsed(),
                containers=states,
                memory=await nodes_memory(connection.ordered(), self.config.timeouts.docker),
                api_healthy=healthy,
                api_detail=detail + (f"; unreachable: {unreachable}" if unreachable else ""),
                vllm_version=version,
            )

    async def recipes(self) -> AsyncGenerator[Event, None]:
        """The config's recipes: what each needs (the fit estimate) and which one runs."""
        async with connect_cluster(self.config) as connection:
            yield await recipes_report(self.config, connection)

    async def bench(
        self,
        *,
        concurrency: Sequence[int] = (),
        max_tokens: int = 128,
        runs: int = 3,
        prompt: str = DEFAULT_PROMPT,
        requests_per_level: int | None = None,
        depth: Sequence[int] = (),
        allow_busy: bool = False,
        history: BenchHistory | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Single stream (warm-up + median of `runs`), then a sweep over `concurrency`, then
        `runs` requests at each prompt length in `depth`; ends with BenchResult (compared with
        the last run of the same setup in `history`) or Failed."""
        reporter = Reporter()
        options = BenchOptions(
            prompt=prompt,
            max_tokens=max_tokens,
            runs=runs,
            concurrency=tuple(concurrency),
            requests_per_level=requests_per_level,
            depth=tuple(depth),
            allow_busy=allow_busy,
        )
        options.validate()
        async with connect_cluster(self.config) as connection:
            head = _reachable(connection, self.config.head.name)
            state = await container_state(head, self.config.container.name)
            if not state.running:
                yield reporter.known(
                    BENCH,
                    CLUSTER_NOT_UP,
                    {"container": self.config.container.name, "node": head.name},
                    node=head.name,
                    evidence=f"container status: {state.status}",
                )
                return
            base_url = await api_base_url(self.config, head)
            benchmark = run_bench(
                base_url,
                self.config.serve.api_model_name,
                options,
                cluster_fingerprint(self.config, state.image_id),
                history=history,
                reporter=reporter,
                api_key=self.secrets.api_key,
            )
            async with aclosing(benchmark) as events:
                async for event in events:
                    yield event

    async def fabric_test(
        self,
        *,
        seconds: int = DEFAULT_SECONDS,
        history: History[FabricTestReport] | None = None,
    ) -> AsyncGenerator[Event, None]:
        """The fabric's bandwidth between every pair of nodes, with the tool the nodes have
        (cluster/operations/fabric_test.py); ends with FabricTestResult, then Failed when a
        pair could not be measured."""
        reporter = Reporter()
        async with connect_cluster(self.config) as connection:
            measured = fabric_test(
                self.config, connection, reporter, seconds=seconds, history=history
            )
            async with aclosing(measured) as events:
                async for event in events:
                    yield event

    async def logs(self, node: str | None = None, lines: int = 50) -> AsyncGenerator[Event, None]:
        """The tail of the cluster's container's log on `node` (head when None): ours, else a
        launcher's that is there (a recipe names it)."""
        reporter = Reporter()
        name = node or self.config.head.name
        self.config.node(name)  # KeyError for an unknown node: callers validate first
        async with connect_cluster(self.config) as connection:
            target = _reachable(connection, name)
            container = self.config.container.name
            if not (await container_state(target, container)).present:
                for launched in self.config.launcher_containers:
                    if (await container_state(target, launched)).present:
                        container = launched
                        break
            text = await read_log_tail(target, container, lines, self.secrets)
            if (
                not text
                and container in self.config.launcher_containers
                and target is connection.head
            ):
                # vLLM in the script's foreground (`docker exec`): its lines are the script's
                home = await node_home(target, self.config.timeouts.launcher)
                text = await launcher_output_tail(self.config, self.secrets, target, home, lines)
            yield LogTail(
                elapsed_s=reporter.elapsed(),
                node=name,
                container=container,
                lines=text or [f"(no container {container} on {name})"],
            )

    async def diagnostics(
        self,
        output: Path,
        *,
        events: Sequence[str] = (),
        events_note: str = "",
        log_lines: int = 2000,
    ) -> AsyncGenerator[Event, None]:
        """Collect the diagnostics bundle from every node at once (cluster/operations/diag_bundle.py) and write it
        to `output`; `events`: the JSON lines of the job it is for."""
        reporter = Reporter()
        async with connect_cluster(self.config) as connection:
            yield Progress(
                elapsed_s=reporter.elapsed(),
                phase="diag",
                message=f"collecting from {len(connection.nodes)} node(s)",
            )
            result = await collect(
                self.config,
                self.secrets,
                connection,
                events=events,
                events_note=events_note,
                log_lines=log_lines,
            )
        await asyncio.to_thread(output.write_bytes, result.archive)
        yield DiagnosticsCollected(
            elapsed_s=reporter.elapsed(),
            path=str(output),
            size=len(result.archive),
            summary=result.summary,
            files=result.files,
            problems=result.problems,
        )

    async def down(self) -> AsyncGenerator[Event, None]:
        """Stop and remove our container on every node, and those the recipes' launchers start
        (a recipe naming them is the operator's say-so; they carry no label of ours), a
        launcher still running first; idempotent."""
        reporter = Reporter()
        name = self.config.container.name
        launched = self.config.launcher_containers
        # container -> the owner whose label it must carry (None: any, a recipe names it)
        owners: dict[str, str | None] = {name: None if name in launched else self.config.name}
        owners.update(dict.fromkeys(launched))
        async with connect_cluster(self.config) as connection:
            for unreachable, error in connection.errors.items():
                yield Removed(
                    elapsed_s=reporter.elapsed(),
                    node=unreachable,
                    container=name,
                    removed=False,
                    detail=f"not reachable, nothing removed: {error}",
                    failed=True,
                )
            head = connection.nodes.get(self.config.head.name)
            if launched and head is not None:
                home = await node_home(head, self.config.timeouts.launcher)
                stopped = await stop_launcher(self.config, head, home)
                if stopped is not None:
                    yield Progress(
                        elapsed_s=reporter.elapsed(),
                        phase="launcher",
                        node=head.name,
                        message=stopped,
                    )
            targets = [(n, c) for c in owners for n in connection.ordered()]
            results = await asyncio.gather(
                *(
                    remove_container(n, c, owner=owners[c], timeout=self.config.timeouts.down)
                    for n, c in targets
                ),
                return_exceptions=True,
            )
            for (node, container), result in zip(targets, results, strict=True):
                if container != name and isinstance(result, tuple) and not result[0]:
                    continue  # no such launcher container there: nothing to say
                if isinstance(result, BaseException):
                    if not isinstance(result, Exception):
                        raise result
                    removed, failed = False, True
                    detail = f"could not remove {container} from {node.name}: {result}"
                else:
                    failed = False
                    removed, detail = result
                    if removed and container in launched:
                        recipes = " or ".join(launched[container])
                        detail += f" (started by the launcher of recipe {recipes})"
                yield Removed(
                    elapsed_s=reporter.elapsed(),
                    node=node.name,
                    container=container,
                    removed=removed,
                    detail=detail,
                    failed=failed,
                )


def _reachable(connection: ClusterConnection, name: str) -> NodeConnection:
    if name in connection.errors:
        raise connection.errors[name]
    return connection.nodes[name]
