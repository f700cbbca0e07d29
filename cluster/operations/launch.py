"""`up`: preflight, containers, (Ray), `vllm serve`, then every checkpoint to Ready.

Cancelling the iteration removes every container this launch started.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Collection
from contextlib import aclosing
from typing import Any

import httpx

from cluster.aio import finish_uncancelled
from cluster.bench.stream import sample_completion
from cluster.config import ClusterConfig, Secrets
from cluster.diagnosis.engine import LogDiagnoser, diagnose, explained_by
from cluster.diagnosis.failures import (
    API_UNEXPECTED,
    DOCKER_REFUSED,
    LAUNCH_IN_PROGRESS,
    LAUNCHER_CONTAINERS_MISSING,
    LAUNCHER_FAILED,
    LAUNCHER_KILLED,
    RAY_INCOMPLETE,
    STOPPED_ON_REQUEST,
    for_cluster,
)
from cluster.diagnosis.postmortem import amend, needs_probe, probe
from cluster.errors import DockerRefused, NodeError
from cluster.events import CheckpointPassed, Event, Failed, Progress, Ready
from cluster.logs.container_stream import ClusterMonitor
from cluster.nodes import ClusterConnection, NodeConnection
from cluster.nodes.boot import labels as boot_labels
from cluster.nodes.interfaces import NodeInterfaces
from cluster.operations.inventory import remove_container
from cluster.operations.launch_lease import STALE_S, LaunchLease, LeaseHeld
from cluster.operations.operator_launcher import Launcher, stop_launcher
from cluster.operations.preflight import ConfirmReplace, Preflight
from cluster.progress.checkpoint_follower import Expectation, LogFollower, must_see
from cluster.progress.checkpoints import BY_ID, RAY_RUNTIME_STARTED, launch_plan, spellings_for
from cluster.progress.reporter import Reporter
from cluster.progress.steps import Step, run_steps
from cluster.resources.fit import MemoryLogged, compare_with_logged
from cluster.resources.gpu_arch import AnswersByImage
from cluster.resources.memory_return import LABEL_MEMORY_BEFORE
from cluster.resources.nccl_library import (
    Library,
    NcclSeen,
    keep_launched,
    recorded,
    suspect_words,
)
from cluster.serving import api
from cluster.serving.containers import (
    Role,
    create_body,
    into_container_log,
    node_environment,
    ray_head_command,
    ray_worker_command,
    serve_command,
)
from cluster.serving.ray_status import parse_ray_status, shortfall

log = logging.getLogger(__name__)
RAY_STARTED = BY_ID["containers"]
HEALTH_PROBE_TIMEOUT_S = 5.0


class Launch:
    def __init__(
        self,
        config: ClusterConfig,
        secrets: Secrets,
        connection: ClusterConnection,
        *,
        replace: bool = False,
        replace_foreign: Collection[str] = (),
        sample_max_tokens: int = 128,
        reporter: Reporter | None = None,
        who: str = "spark-bot",
        take_over: bool = False,
        image_answers: AnswersByImage | None = None,
        confirm_replace: ConfirmReplace | None = None,
        nccl_answers: dict[str, Library] | None = None,
    ):
        self.config = config
        self.secrets = secrets
        self.connection = connection
        # the clock of the command, started before SSH connected (when the caller made it)
        self.reporter = reporter or Reporter()
        self.monitor = ClusterMonitor(
            config.container.name, secrets, config.log_tail_lines, matters=must_see(config)
        )
        self.follower = LogFollower(config, self.monitor, self.reporter)
        self.memory_logged = MemoryLogged()
        self.follower.observers.append(self.memory_logged.observe)
        self.nccl_seen = NcclSeen()
        self.follower.observers.append(self.nccl_seen.observe)
        self.preflight = Preflight(
            config,
            connection,
            self.reporter,
            replace=replace,
            replace_foreign=frozenset(replace_foreign),
            image_answers={} if image_answers is None else image_answers,
            confirm_replace=confirm_replace,
            nccl_answers={} if nccl_answers is None else nccl_answers,
        )
        self.sample_max_tokens = sample_max_tokens
        self.started: list[NodeConnection] = []
        self._in_flight: list[asyncio.Future[Any]] = []
        # node -> the container this launch started there (or saw its launcher start): the
        # cleanup removes those by Id, never another launch's under the same name (_remove)
        self._ids: dict[str, str] = {}
        self.launcher: Launcher | None = None  # the operator's script, once started
        self._launcher_end: asyncio.Task[Failed | None] | None = None
        self._table, _ = for_cluster(config)
        self.who = who  # whose launch this is, for the lease another launch would meet
        self.take_over = take_over  # take the lease from another live launch
        self.lease: LaunchLease | None = None

    async def run(self) -> AsyncGenerator[Event, None]:
        try:
            events = run_steps(self._steps(), self.reporter)
            if self.config.launcher is not None:
                events = self._supervised(events)
            async with aclosing(events) as stream:
                async for event in stream:
                    if (
                        isinstance(event, Failed)
                        and (self.started or self.launcher is not None)
                        and needs_probe(event, self._table)
                    ):
                        # A death the lines do not explain (Ray's "subprocesses exited", a
                        # silent phase), or one a node's hardware can be behind: ask the nodes
                        # why before reporting it, as watch does.
                        boots = {name: f.boot for name, f in self.preflight.facts.items()}
                        found = await probe(self.config, self.connection, boots=boots)
                        event = amend(event, found, self._table)
                    if isinstance(event, Failed) and self.started:
                        event = self._saying_what_is_left(event)
                    yield event
        except BaseException:
            # Cancelled or broken mid-launch: leave no container behind, even if cancelled again.
            await finish_uncancelled(self._remove_started())
            raise
        finally:
            if self._launcher_end is not None:
                self._launcher_end.cancel()
                await asyncio.gather(self._launcher_end, return_exceptions=True)
            if self.lease is not None:
                await finish_uncancelled(self.lease.release())
            await self.monitor.aclose()

    def _saying_what_is_left(self, failed: Failed) -> Failed:
        """A failed launch leaves the containers it started, for `logs` and `diag`: its failure
        says which, and what removes them."""
        name = self.config.container.name
        where = ", ".join(node.name for node in self.started)
        left = f"Left for `logs` and `diag`: `{name}` on {where}; `down` removes it."
        return failed.model_copy(update={"fix": f"{failed.fix} {left}".strip()})

    def _steps(self) -> list[Step]:
        if self.config.launcher is not None:
            containers = [
                Step(BY_ID["launcher"], self._start_launcher),
                Step(RAY_STARTED, self._launcher_containers),
            ]
            if self.config.serve.backend == "ray":
                containers.append(Step(BY_ID["ray_cluster"], self._ray_cluster))
        elif self.config.serve.backend == "ray":
            containers = [
                Step(RAY_STARTED, self._ray_head),
                Step(RAY_STARTED, self._ray_workers),
                Step(BY_ID["ray_cluster"], self._ray_cluster),
                Step(BY_ID["weights"], self._start_serve),
            ]
        else:
            containers = [Step(RAY_STARTED, self._mp_containers)]
        return [
            Step(BY_ID["no_stale_container"], self._take_lease),
            Step(BY_ID["ssh"], self._preflight),
            *containers,
            Step(BY_ID["weights"], self._logged_checkpoints),
            Step(BY_ID["health"], self._api_checks),
        ]

    async def _preflight(self) -> AsyncGenerator[Event, None]:
        async with aclosing(self.preflight.run()) as events:
            async for event in events:
                yield event
        homes = {name: facts.home for name, facts in self.preflight.facts.items()}
        await keep_launched(self.config, self.connection.ordered(), homes, self.preflight.nccl)
        if self.preflight.nccl_mismatch is not None:
            self.follower.learn(suspect_words(self.preflight.nccl_mismatch))

    async def _take_lease(self) -> AsyncGenerator[Event, None]:
        """The head's launch lease, before anything of the cluster changes: another live
        launch refuses this one (its containers are no leftovers for `replace`). A head not
        reached is preflight's to report."""
        head = self.connection.nodes.get(self.config.head.name)
        if head is None:
            return
        lease = LaunchLease(head, self.config.name, self.who, timeout=self.config.timeouts.connect)
        try:
            await lease.take(take_over=self.take_over)
        except LeaseHeld as held:
            values = {
                "cluster": self.config.name,
                "holder": held.holder.describe(),
                "stale": f"{STALE_S:g}",
            }
            yield self.reporter.known(
                BY_ID["no_stale_container"], LAUNCH_IN_PROGRESS, values, node=head.name
            )
            return
        except NodeError as error:
            log.warning("launching without the head's lease: %s", error)
            return
        self.lease = lease

    async def _logged_checkpoints(self) -> AsyncGenerator[Event, None]:
        plan = [c.id for c in launch_plan(self.config)]
        expectations = [self._expectation(cid) for cid in plan if BY_ID[cid].logged]
        # Silence is no failure when the server answers: the lines were worded differently
        # (or never printed), and the API proves the stages before it.
        async with aclosing(self.follower.expect(expectations, prove=self._api_health)) as logged:
            async for event in logged:
                if isinstance(event, CheckpointPassed) and event.checkpoint == "nccl":
                    event = recorded(
                        event, self.nccl_seen, self.preflight.nccl, self.preflight.nccl_mismatch
                    )
                    lines_differ = self.nccl_seen.differ()
                    if lines_differ is not None and self.preflight.nccl_mismatch is None:
                        self.follower.learn(suspect_words(lines_differ))
                yield event

    def _expectation(self, checkpoint_id: str) -> Expectation:
        checkpoint = BY_ID[checkpoint_id]
        count = self.config.serve.world_size if checkpoint.per_rank else 1
        return Expectation(
            checkpoint, spellings_for(checkpoint, self.config.knowledge), count=count
        )

    async def _api_health(self) -> str | None:
        """`GET /health -> 200` if the head's API answers so right now, else None."""
        try:
            base_url = await api_base_url(self.config, self.connection.head)
            async with api.api_client(
                base_url, read_timeout=HEALTH_PROBE_TIMEOUT_S, api_key=self.secrets.api_key
            ) as client:
                ok, detail = await api.health(client)
        except (NodeError, httpx.HTTPError, OSError):
            return None
        return detail if ok else None

    # -- containers -------------------------------------------------------------------------

    async def _start_container(self, node: NodeConnection, role: Role, command: list[str]) -> str:
        # Docker completes a create even when we stop waiting for it, so create+start runs
        # shielded from cancellation and the cleanup waits for it before removing by name.
        self.started.append(node)
        creation = asyncio.ensure_future(self._create_and_start(node, role, command))
        self._in_flight.append(creation)
        container_id = await asyncio.shield(creation)
        self.monitor.follow(node)
        return container_id

    async def _create_and_start(self, node: NodeConnection, role: Role, command: list[str]) -> str:
        facts = self.preflight.facts[node.name]
        assert facts.interfaces is not None
        env = node_environment(self.config, facts.interfaces, self.secrets)
        if self.preflight.model is not None:
            env.update(self.preflight.model.hub_offline())  # every node has the model
        # the memory before this launch, which the next `up` awaits after a stop (memory_return)
        labels = {LABEL_MEMORY_BEFORE: str(facts.memory.available)} if facts.memory else {}
        labels.update(boot_labels(facts.boot))  # which boot it runs in: a reboot is known later
        body = create_body(self.config, node.config, role, command, env, facts.home, labels)
        container_id = await node.docker.create_and_start(body, self.config.container.name)
        self._ids[node.name] = container_id  # recorded here: this part is never cancelled
        return container_id

    def _interfaces(self, node: str) -> NodeInterfaces:
        interfaces = self.preflight.facts[node].interfaces
        assert interfaces is not None  # the preflight's interfaces check passed
        return interfaces

    def _head_ip(self) -> str:
        return self._interfaces(self.config.head.name).local_ip

    async def _start_all(
        self, roles: list[tuple[NodeConnection, Role, list[str]]]
    ) -> dict[str, str]:
        """Start containers on several nodes at once; a NodeError names the first node that failed."""
        results = await asyncio.gather(
            *(self._start_container(n, r, c) for n, r, c in roles), return_exceptions=True
        )
        ids: dict[str, str] = {}
        for (node, _, _), result in zip(roles, results, strict=True):
            if isinstance(result, BaseException):
                raise result
            ids[node.name] = result
        return ids

    def _containers_failed(self, error: NodeError) -> Failed:
        node = error.node
        if isinstance(error, DockerRefused):
            return self.reporter.known(
                RAY_STARTED,
                DOCKER_REFUSED,
                {"node": node, "message": error.message},
                node=node,
                evidence=f"{error.status}: {error.message}",
            )
        return self.reporter.failed(
            RAY_STARTED,
            f"{node}: {error.problem}",
            cause=error.cause,
            fix=error.fix,
            node=node,
            evidence=error.problem,
        )

    async def _ray_head(self) -> AsyncGenerator[Event, None]:
        head = self.connection.head
        head_facts = self.preflight.facts[head.name]
        assert head_facts.interfaces is not None
        try:
            self._ids.update(
                await self._start_all(
                    [(head, "head", ray_head_command(self.config, head_facts.interfaces))]
                )
            )
        except NodeError as error:
            yield self._containers_failed(error)
            return
        yield Progress(
            elapsed_s=self.reporter.elapsed(),
            phase="containers",
            node=head.name,
            message=f"head container {self._ids[head.name][:12]} started: ray start --head",
        )
        ray_started = Expectation(
            BY_ID["containers"],
            RAY_RUNTIME_STARTED,
            count=1,
            nodes=frozenset({head.name}),
            node=head.name,
        )
        async for event in self.follower.expect([ray_started]):
            if isinstance(event, Failed):
                yield event
                return

    async def _ray_workers(self) -> AsyncGenerator[Event, None]:
        head = self.connection.head
        workers = [n for n in self.connection.ordered() if n is not head]
        roles: list[tuple[NodeConnection, Role, list[str]]] = [
            (
                w,
                "worker",
                ray_worker_command(self.config, self._interfaces(w.name), self._head_ip()),
            )
            for w in workers
        ]
        try:
            self._ids.update(await self._start_all(roles))
        except NodeError as error:
            yield self._containers_failed(error)
            return
        joined = [
            Expectation(
                BY_ID["containers"], RAY_RUNTIME_STARTED, nodes=frozenset({w.name}), node=w.name
            )
            for w in workers
        ]
        silent = None
        async with aclosing(self.follower.expect(joined)) as events:
            async for event in events:
                if isinstance(event, Failed):
                    if event.signature not in {"stalled", "phase_timeout"}:
                        yield event
                        return
                    silent = event
        if silent is not None:
            # A silent worker: `ray status` says who is missing better than the silence does;
            # if Ray has every node, the worker's start line was merely missed.
            async for ray_event in self._wait_for_ray_cluster(head, timeout=0):
                if isinstance(ray_event, Failed):
                    yield ray_event
                    return
        yield self.reporter.passed(
            RAY_STARTED,
            "\n".join(
                f"{name}: container {cid[:12]} up, Ray runtime started"
                for name, cid in self._ids.items()
            ),
            log_tail=self.monitor.tail(head.name),
        )

    async def _ray_cluster(self) -> AsyncGenerator[Event, None]:
        async for event in self._wait_for_ray_cluster(self.connection.head):
            yield event

    async def _start_serve(self) -> AsyncGenerator[Event, None]:
        head = self.connection.head
        serve = into_container_log(serve_command(self.config))
        await head.docker.exec_detached(self.config.container.name, serve)
        yield Progress(
            elapsed_s=self.reporter.elapsed(),
            phase="weights",
            node=head.name,
            message="vllm serve started on the head: " + " ".join(serve_command(self.config)),
        )

    async def _wait_for_ray_cluster(
        self, head: NodeConnection, *, timeout: float | None = None
    ) -> AsyncGenerator[Event, None]:
        """`ray status` until it shows every node and TP x PP GPUs.

        Every worker already printed "Ray runtime started."; registration with the GCS can lag
        that line by moments, so a few quick re-reads are allowed within the ray timeout.
        """
        want_nodes = len(self.config.nodes)
        want_gpus = self.config.serve.world_size
        timeout = self.config.timeouts.ray if timeout is None else timeout
        deadline = time.monotonic() + timeout
        delay = 0.2
        while True:
            output = await head.docker.exec_output(
                self.config.container.name, ["ray", "status"], timeout=self.config.timeouts.ray
            )
            state = parse_ray_status(output)
            lacking = shortfall(state, want_nodes, want_gpus)
            tail = output.splitlines()[-20:]
            if lacking is None:
                yield self.reporter.passed(
                    BY_ID["ray_cluster"], state.describe(), node=head.name, log_tail=tail
                )
                return
            if time.monotonic() + delay > deadline:
                yield self.reporter.known(
                    BY_ID["ray_cluster"],
                    RAY_INCOMPLETE,
                    lacking,
                    node=head.name,
                    evidence=state.describe(),
                    log_tail=tail,
                )
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _mp_containers(self) -> AsyncGenerator[Event, None]:
        head = self.connection.head
        head_ip = self._head_ip()
        nodes = self.connection.ordered()
        roles: list[tuple[NodeConnection, Role, list[str]]] = [
            (
                n,
                "head" if n is head else "worker",
                serve_command(self.config, rank=rank, head_ip=head_ip),
            )
            for rank, n in enumerate(nodes)
        ]
        rank_of = {n.name: rank for rank, n in enumerate(nodes)}
        # Headless ranks first, as vLLM's multi-node guide does; then rank 0.
        try:
            ids = await self._start_all([r for r in roles if r[0] is not head])
            ids.update(await self._start_all([r for r in roles if r[0] is head]))
        except NodeError as error:
            yield self._containers_failed(error)
            return
        yield self.reporter.passed(
            RAY_STARTED,
            "\n".join(
                f"{name}: container {ids[name][:12]} up, vllm serve rank {rank}"
                for name, rank in rank_of.items()
            ),
            log_tail=self.monitor.tail(head.name),
        )

    # -- the operator's launcher --------------------------------------------------------------

    async def _supervised(self, steps: AsyncGenerator[Event, None]) -> AsyncGenerator[Event, None]:
        """The steps' events, while the launcher is watched: its non-zero exit (or its death)
        before Ready ends the launch with its failure, whatever step was waiting; its exit 0 is
        said and nothing more (a script that starts its containers in the background and
        returns is normal)."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize=1)

        async def produce() -> None:
            # One task runs every step, as without a launcher; the queue keeps it at our pace.
            async with aclosing(steps):
                async for event in steps:
                    await queue.put(event)
            await queue.put(None)

        producer = asyncio.create_task(produce())
        plan = [c.id for c in launch_plan(self.config)]
        passed: set[str] = set()
        exit_said = False
        getting: asyncio.Future[Event | None] | None = None
        try:
            while True:
                getting = getting or asyncio.ensure_future(queue.get())
                waits: set[asyncio.Future[Any]] = {getting}
                if not producer.done():
                    waits.add(producer)
                end = self._launcher_end
                if end is not None and not exit_said:
                    waits.add(end)
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if getting.done():
                    event = getting.result()
                    getting = None
                    if event is None:
                        return
                    if isinstance(event, CheckpointPassed):
                        passed.add(event.checkpoint)
                    if isinstance(event, Failed):
                        yield await self._whose_stop(event)
                        return
                    yield event
                elif end is not None and end.done() and not exit_said:
                    exit_said = True
                    failure = end.result()
                    if failure is not None:
                        pending = next((c for c in plan if c not in passed), plan[-1])
                        yield failure.model_copy(
                            update={"checkpoint": pending, "title": BY_ID[pending].title}
                        )
                        return
                    assert self.launcher is not None
                    yield Progress(
                        elapsed_s=self.reporter.elapsed(),
                        phase="launcher",
                        node=self.config.head.name,
                        message=f"the launcher exited 0 after {self.launcher.total_lines} lines "
                        "of output: what it started runs on",
                    )
                elif producer.done():
                    producer.result()  # its error, if it failed; else its last event is queued
        finally:
            if getting is not None:
                getting.cancel()
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)

    async def _whose_stop(self, failed: Failed) -> Failed:
        """A stop of the containers is on request only when someone asked for it: a script
        whose own trap stopped them exits non-zero moments later (not by our SIGTERM), so a stop
        the launcher's failure follows within timeouts.down is the launcher's failure."""
        end, launcher = self._launcher_end, self.launcher
        if failed.signature != STOPPED_ON_REQUEST.id or end is None or launcher is None:
            return failed
        try:
            async with asyncio.timeout(self.config.timeouts.down):
                failure = await asyncio.shield(end)
        except TimeoutError:
            return failed
        if failure is None or launcher.stopped_by_us:
            return failed
        return failure.model_copy(
            update={
                "checkpoint": failed.checkpoint,
                "title": BY_ID[failed.checkpoint].title,
                "cause": f"{failure.cause} (it stopped its own containers first: "
                f"{failed.evidence})",
            }
        )

    async def _start_launcher(self) -> AsyncGenerator[Event, None]:
        head = self.connection.head
        home = self.preflight.facts[head.name].home
        # A run of this cluster's launcher still running belongs to no live launch (the lease
        # says so, or was taken over on purpose): a replaced launch's, or one a killed spark-bot
        # left. Stopped first, or it drives the new run's containers (its next `docker exec`).
        try:
            earlier = await stop_launcher(self.config, head, home)
        except NodeError as error:
            yield self.reporter.failed(
                BY_ID["launcher"],
                f"{head.name}: {error.problem}",
                cause=error.cause,
                fix=error.fix,
                node=head.name,
                evidence=error.problem,
            )
            return
        self.launcher = Launcher(
            self.config,
            self.secrets,
            head,
            home,
            on_line=lambda line: self.monitor.publish_output(head.name, line),
        )
        # Started shielded: a cancel meanwhile waits for its process group's id, then stops it.
        starting = asyncio.ensure_future(self.launcher.start())
        self._in_flight.append(starting)
        pgid = await asyncio.shield(starting)
        self._launcher_end = asyncio.create_task(self._launcher_ended())
        launcher = self.launcher
        yield self.reporter.passed(
            BY_ID["launcher"],
            f"`{launcher.command_text}` in {launcher.cwd} on {head.name}: its own session, "
            f"process group {pgid}; its output is followed in {launcher.run}/output"
            + (f" (an earlier run still ran, no launch's: {earlier})" if earlier else ""),
            node=head.name,
        )

    async def _launcher_ended(self) -> Failed | None:
        """Follow the launcher to its end: None when it exited 0, else its failure."""
        assert self.launcher is not None
        try:
            status = await self.launcher.follow()
        except NodeError as error:
            return self.reporter.unreachable(error, BY_ID["launcher"])
        log.info("the launcher ended (exit status %s) at %.1f s", status, self.reporter.elapsed())
        return None if status == 0 else self._launcher_failed(status)

    def _launcher_failed(self, status: int | None) -> Failed:
        """The launcher's failure: its last lines are the evidence; a row of the failure table
        that explains them gives the cause and the fix."""
        launcher = self.launcher
        assert launcher is not None
        head = self.config.head.name
        lines = list(launcher.lines)
        failed = self.reporter.known(
            BY_ID["launcher"],
            LAUNCHER_FAILED if status is not None else LAUNCHER_KILLED,
            {
                "command": launcher.command_text,
                "status": str(status),
                "node": head,
                "cwd": launcher.cwd,
                "container": self.config.container.name,
            },
            node=head,
            evidence=next((line for line in reversed(lines) if line.strip()), "(no output)"),
            log_tail=lines,
        )
        explained = diagnose(lines, *for_cluster(self.config))
        if explained is None or not explained.fatal:
            return failed
        return explained_by(failed, explained, with_lines=True)

    async def _launcher_containers(self) -> AsyncGenerator[Event, None]:
        """The containers the launcher starts, running on every node: asked of each engine
        with a growing interval (Docker has no event for a name not created yet), the script's
        newest line said meanwhile; then followed as spark-bot's own are."""
        launcher = self.launcher
        assert launcher is not None
        name, nodes, head = self.config.container.name, self.connection.ordered(), self.config.head
        limit = self.config.timeouts.containers
        deadline, delay, said = time.monotonic() + limit, 0.2, 0
        table, words = for_cluster(self.config)
        output = LogDiagnoser(table=table, words=words)
        read = 0  # of the launcher's lines, fed to `output`
        while True:
            found = await asyncio.gather(*(n.docker.find_container(name) for n in nodes))
            infos = dict(zip([n.name for n in nodes], found, strict=True))
            waiting = [
                n for n, info in infos.items() if not (info and info["State"].get("Running"))
            ]
            self._ids.update(
                {
                    n: info["Id"]
                    for n, info in infos.items()
                    if info and info["State"].get("Running")
                }
            )
            if not waiting:
                break
            # A script whose `docker run` failed may wait on for a container that never comes
            # (launch-cluster.sh does, to its own timeout): its output says why at once.
            for line in launcher.lines_after(read):
                output.feed(line)
            read = launcher.total_lines
            if output.failed:
                yield await self._launcher_output_failed(output)
                return
            if launcher.total_lines > said:
                said = launcher.total_lines
                yield Progress(
                    elapsed_s=self.reporter.elapsed(),
                    phase="containers",
                    node=head.name,
                    message=f"launcher: {launcher.tail(1)[0][:200]}",
                )
            if time.monotonic() + delay > deadline:
                ended = self._launcher_end
                status = "still running" if ended is None or not ended.done() else "exited 0"
                states = "; ".join(f"{n}: {_state(infos[n])}" for n in waiting)
                yield self.reporter.known(
                    RAY_STARTED,
                    LAUNCHER_CONTAINERS_MISSING,
                    {
                        "container": name,
                        "missing": ", ".join(waiting),
                        "limit": f"{limit:g}",
                        "status": status,
                    },
                    node=waiting[0],
                    evidence=states,
                    log_tail=launcher.tail(self.config.log_tail_lines),
                )
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        for node in nodes:
            self.monitor.follow(node)
        checked = self.preflight.facts[head.name].image_id
        others = {
            n: info["Image"] for n, info in infos.items() if info and info["Image"] != checked
        }
        warning = (
            "the launcher's containers run another image than the recipe's "
            f"{self.config.container.image} ({checked and checked[:19]}), which preflight "
            "checked on every node: "
            + "; ".join(f"{n}: {image[:19]}" for n, image in others.items())
            if others
            else None
        )
        yield self.reporter.passed(
            RAY_STARTED,
            "\n".join(
                f"{n}: {name} {info['Id'][:12]} running (image {info['Image'][:19]}), started by the launcher"
                for n, info in infos.items()
                if info
            ),
            log_tail=launcher.tail(self.config.log_tail_lines),
            warning=warning,
        )

    async def _launcher_output_failed(self, output: LogDiagnoser) -> Failed:
        """The failure the launcher's output shows while its containers are awaited; the
        launcher is stopped (it would only wait on, or start more), what it started is left for
        `logs` and `down`."""
        assert self.launcher is not None
        diagnosis = output.diagnosis
        assert diagnosis is not None
        head = self.config.head.name
        failed = self.follower.failure_from(diagnosis, RAY_STARTED, head)
        try:
            stopped = await self.launcher.stop()
        except NodeError as error:
            stopped = f"the launcher could not be stopped: {error.problem}"
        return failed.model_copy(update={"cause": f"{failed.cause} ({stopped}.)"})

    # -- API --------------------------------------------------------------------------------

    async def _api_checks(self) -> AsyncGenerator[Event, None]:
        head = self.connection.head
        base_url = await api_base_url(self.config, head)
        model = self.config.serve.api_model_name
        async with api.api_client(
            base_url, read_timeout=self.config.timeouts.api, api_key=self.secrets.api_key
        ) as client:
            ok, detail = await api.health(client)
            if not ok:
                yield self._api_failed("health", detail)
                return
            yield self._api_passed("health", detail)
            try:
                models = await api.served_models(client)
            except httpx.HTTPError as error:
                yield self._api_failed("models", f"GET /v1/models failed: {error}")
                return
            ids = [m.get("id") for m in models]
            if model not in ids:
                yield self._api_failed("models", f"GET /v1/models lists {ids}, not {model}")
                return
            yield self._api_passed("models", f"GET /v1/models -> {ids}")
            try:
                sample = await sample_completion(client, model, max_tokens=self.sample_max_tokens)
            except (httpx.HTTPError, ValueError) as error:
                yield self._api_failed("sample", f"test completion failed: {error}")
                return
            version = await api.vllm_version(client)
            rate = f"{sample.decode_tps:.1f} tok/s" if sample.decode_tps else "n/a"
            yield self._api_passed(
                "sample",
                f"{sample.completion_tokens} tokens, TTFT {sample.ttft_s * 1000:.0f} ms, decode {rate}",
            )
        yield Ready(
            elapsed_s=self.reporter.elapsed(),
            model=model,
            api_url=f"http://{self._head_ip()}:{self.config.serve.port}",
            sample=sample,
            vllm_version=version,
            recipe=self.config.recipe,
            memory=compare_with_logged(self.preflight.fit, self.memory_logged),
            not_verified=list(self.reporter.not_checked),
        )

    def _api_passed(self, checkpoint: str, evidence: str) -> CheckpointPassed:
        head = self.config.head.name
        return self.reporter.passed(
            BY_ID[checkpoint], evidence, node=head, log_tail=self.monitor.tail(head)
        )

    def _api_failed(self, checkpoint: str, evidence: str) -> Failed:
        head = self.config.head.name
        return self.reporter.known(
            BY_ID[checkpoint],
            API_UNEXPECTED,
            {"checkpoint": BY_ID[checkpoint].title, "evidence": evidence},
            node=head,
            evidence=evidence,
            log_tail=self.monitor.tail(head),
        )

    async def _remove_started(self) -> None:
        timeout = self.config.timeouts.down
        async with asyncio.timeout(timeout):
            await asyncio.gather(*self._in_flight, return_exceptions=True)
        if self.launcher is not None:
            await self._stop_launcher()
            return
        await self._remove(self.started, owner=self.config.name)

    async def _stop_launcher(self) -> None:
        """The launcher's process group stopped first (it would start more), then what it
        started removed on every node: the recipe names those containers."""
        assert self.launcher is not None
        try:
            log.info("%s", await self.launcher.stop())
        except NodeError as error:
            log.warning("could not stop the launcher after the launch stopped: %s", error)
        await self._remove(self.connection.ordered(), owner=None, scripted=True)

    async def _remove(
        self, nodes: list[NodeConnection], *, owner: str | None, scripted: bool = False
    ) -> None:
        """Remove this launch's container on each of `nodes`, by the Id it recorded there; by
        name where it recorded none (a create that failed half-way, a launcher's container not
        seen yet) and, for a launcher's (`scripted`: the script may have made its container
        again), on every node, but by name only while the head's lease is still this launch's:
        after `up --take-over`, a container by that name is the new launch's."""
        name, timeout = self.config.container.name, self.config.timeouts.down
        ids: dict[str, str | None] = {n.name: self._ids.get(n.name) for n in nodes}
        if any(cid is None for cid in ids.values()) or scripted:
            if self.lease is None or await self.lease.still_ours():
                if scripted:
                    ids = dict.fromkeys(ids)
            else:
                left = [n.name for n in nodes if ids[n.name] is None]
                if left:
                    log.warning(
                        "left %s on %s: another launch took the lease over (up --take-over), "
                        "so a container by that name there is its own",
                        name,
                        ", ".join(left),
                    )
                nodes = [n for n in nodes if ids[n.name] is not None]
        results = await asyncio.gather(
            *(
                remove_container(n, name, owner=owner, timeout=timeout, container_id=ids[n.name])
                for n in nodes
            ),
            return_exceptions=True,
        )
        for node, result in zip(nodes, results, strict=True):
            if isinstance(result, BaseException):
                log.warning(
                    "could not remove %s from %s after the launch stopped: %s",
                    name,
                    node.name,
                    result,
                )
            elif not result[0] and ids[node.name] is not None:
                log.info("%s", result[1])


def _state(info: dict[str, Any] | None) -> str:
    return "no such container" if info is None else str(info["State"].get("Status"))


async def api_base_url(config: ClusterConfig, head: NodeConnection) -> str:
    if config.api.access == "direct":
        return f"http://{config.api.host}:{config.serve.port}"
    return await head.api_base_url(config.serve.port)
