"""`sync-model`: the model copied from a node that has it complete to every node that does not,
never from the hub.

rsync runs on the source node and copies over SSH to the target's fabric address (node-to-node
SSH, as launchers use it), so the bytes cross the fabric once and never pass through the bot.
It copies the hub layout whole (blobs, snapshot symlinks, the tree listing), so the target's
cache is a proper cache; `refs/main` goes last, in a second pass: a copy that stops midway
leaves no ref, and the model check (cluster/resources/model_cache.py), like vLLM, finds no model there
rather than a half one. A copy goes on from where an earlier one stopped (`--partial
--append-verify`: a short file is appended to, then its whole checksum compared). Progress is
rsync's own (`--info=progress2`, read from its output as it prints it), less what the target
already had of the files it copies (both sides' file sizes listed once, before). A copy stops
when no byte arrives for `timeouts.model_stall` (rsync's own `--timeout` too) or when
cancelled: rsync runs on a terminal, which sshd hangs up (SIGHUP) when the call's channel
closes, so it ends with it (a command without one would go on copying). The model check runs
again at the end; a short shard never passes it.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing, suppress
from dataclasses import dataclass, field
from typing import Any

from cluster.config import ClusterConfig
from cluster.diagnosis.failures import (
    MODEL_CACHE_UNSEEN,
    MODEL_STILL_INCOMPLETE,
    RSYNC_FAILED,
)
from cluster.errors import NodeError
from cluster.events import Event, Failed, Progress, Transfer
from cluster.logs.logtext import LineSplitter
from cluster.nodes import ClusterConnection, CommandResult, NodeConnection, node_home
from cluster.operations.preflight import model_failure, reachable
from cluster.operations.transfer import TransferMeter, describe, duration, size
from cluster.progress.checkpoints import SYNC_MODEL
from cluster.progress.reporter import Reporter
from cluster.progress.steps import Step, run_steps
from cluster.resources.model_cache import ModelCheck, ModelOnNode, check_model

_BY_ID = {checkpoint.id: checkpoint for checkpoint in SYNC_MODEL}
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/~+-]{1,4000}$")
RSH = "ssh -o BatchMode=yes -o ConnectTimeout=10"  # never a password prompt; host keys checked
# The whole copy's progress, a line a second, the file list built first so it is whole, the
# figures plain digits (no separators, whatever the node's locale).
RSYNC_PROGRESS = ["--info=progress2", "--no-inc-recursive", "--no-human-readable"]
COPY_S = 7 * 86_400  # the SSH call's own bound: the stall bound ends a stuck copy long before


@dataclass
class ModelSync:
    config: ClusterConfig
    connection: ClusterConnection
    reporter: Reporter
    report_every_s: float = 1.0
    homes: dict[str, str] = field(default_factory=dict)
    before: ModelCheck | None = None
    copied: list[str] = field(default_factory=list)

    async def run(self) -> AsyncGenerator[Event, None]:
        steps = [
            Step(_BY_ID["ssh"], self._reachable),
            Step(_BY_ID["model_source"], self._source),
            Step(_BY_ID["model_copied"], self._copy),
            Step(_BY_ID["model_synced"], self._complete),
        ]
        async with aclosing(run_steps(steps, self.reporter)) as events:
            async for event in events:
                yield event

    @property
    def model(self) -> str:
        return self.config.serve.model

    async def _reachable(self) -> AsyncGenerator[Event, None]:
        yield reachable(self.connection, self.reporter)

    async def _check(self) -> ModelCheck:
        nodes = self.connection.ordered()
        if not self.homes:
            timeout = self.config.timeouts.preflight
            found = await asyncio.gather(*(node_home(n, timeout) for n in nodes))
            self.homes = {n.name: home for n, home in zip(nodes, found, strict=True)}
        return await check_model(self.config, nodes, self.homes)

    async def _source(self) -> AsyncGenerator[Event, None]:
        found = self.before = await self._check()
        unseen = next((m for m in found.nodes if m.unseen is not None), None)
        if unseen is not None:
            yield self.reporter.known(
                _BY_ID["model_source"],
                MODEL_CACHE_UNSEEN,
                {"model": self.model, "unseen": f"{unseen.node}: {unseen.unseen}"},
                node=unseen.node,
            )
            return
        source = found.source
        if source is None:
            failure = model_failure(
                found, self.reporter, _BY_ID["model_source"], self.connection.head.name
            )
            assert failure is not None  # nothing complete and nothing unseen: all incomplete
            yield failure
            return
        yield self.reporter.passed(_BY_ID["model_source"], source.describe(), node=source.node)

    async def _copy(self) -> AsyncGenerator[Event, None]:
        assert self.before is not None and self.before.source is not None
        source, targets = self.before.source, self.before.incomplete
        if not targets:
            yield self.reporter.passed(
                _BY_ID["model_copied"], "every node already has it complete: nothing copied"
            )
            return
        nodes = self.connection.nodes
        progress: asyncio.Queue[Progress] = asyncio.Queue(maxsize=64)
        copies = {
            asyncio.create_task(
                self._copy_to(nodes[source.node], source, nodes[t.node], t, progress),
                name=f"sync-model to {t.node}",
            ): t.node
            for t in targets
        }
        results: dict[str, str] = {}
        told: asyncio.Task[Progress] | None = None
        try:
            pending = set(copies)
            while pending:
                told = asyncio.create_task(progress.get())
                done, _ = await asyncio.wait([*pending, told], return_when=asyncio.FIRST_COMPLETED)
                if told in done:
                    yield told.result()
                else:
                    told.cancel()
                for task in [t for t in pending if t in done]:
                    pending.discard(task)
                    outcome = task.result()  # a node's error ends the step
                    if isinstance(outcome, Failed):
                        yield outcome  # rsync failed: its failure
                        return
                    results[copies[task]] = outcome
                while not progress.empty():
                    yield progress.get_nowait()
        finally:
            waiting: list[asyncio.Task[Any]] = [*copies, *([told] if told else [])]
            for task in waiting:
                task.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)
        self.copied = [t.node for t in targets]
        yield self.reporter.passed(
            _BY_ID["model_copied"], "\n".join(results[t.node] for t in targets)
        )

    async def _copy_to(
        self,
        source_node: NodeConnection,
        source: ModelOnNode,
        target_node: NodeConnection,
        target: ModelOnNode,
        progress: asyncio.Queue[Progress],
    ) -> str | Failed:
        timeout = self.config.timeouts.preflight
        src = source.repo or source.snapshot
        dst = target.repo or target.snapshot
        if not (src and dst and _SAFE_PATH.match(src) and _SAFE_PATH.match(dst)):
            raise NodeError(
                target.node,
                f"refusing to copy between {src!r} and {dst!r}: not a plain absolute path",
                "check the config's mounts and the SSH user's home on each node",
            )
        source_files, target_files = await asyncio.gather(
            file_sizes(source_node, src, timeout), file_sizes(target_node, dst, timeout)
        )
        passes = [_REFS_LATER, _REFS] if source.repo else [_EVERYTHING]  # refs/main last
        plans = [plan_copy(source_files, target_files, included) for included, _ in passes]
        meter = TransferMeter(sum(plan.to_move for plan in plans), every_s=self.report_every_s)
        ssh = target_node.config.ssh
        address = (
            f"{ssh.user}@{target_node.config.fabric_ip}" if ssh else target_node.config.fabric_ip
        )
        mkdir = await target_node.run(["mkdir", "-p", dst], timeout=timeout)
        if not mkdir.ok:
            return self._rsync_failed(source, target, address, mkdir.exit_status, mkdir.stderr)
        stall = self.config.timeouts.model_stall
        copying: asyncio.Task[CommandResult] | None = None
        try:
            for (_, extra), plan in zip(passes, plans, strict=True):
                argv = [
                    "rsync",
                    "--archive",
                    "--partial",
                    "--append-verify",
                    "--protect-args",
                    f"--timeout={int(stall)}",
                    f"--rsh={RSH}",
                    *RSYNC_PROGRESS,
                    *extra,
                    f"{src}/",
                    f"{address}:{dst}/",
                ]
                position = RsyncPosition()
                copying = asyncio.create_task(
                    source_node.run(argv, timeout=COPY_S, hang_up=True, output=position.feed)
                )
                seen, counted = 0, 0
                still_since = asyncio.get_running_loop().time()
                while not copying.done():
                    await asyncio.wait([copying], timeout=self.report_every_s)
                    clock = asyncio.get_running_loop().time()
                    if position.bytes > seen:
                        seen, still_since = position.bytes, clock
                    elif clock - still_since > stall + self.report_every_s and not copying.done():
                        raise NodeError(
                            target.node,
                            f"no byte of {self.model} arrived for {stall:g} s",
                            f"check the fabric between {source.node} and {target.node} and their "
                            "disks; if merely slow, raise timeouts.model_stall; sync-model goes "
                            "on from where it stopped",
                        )
                    moved = max(0, seen - plan.already_there)
                    if moved > counted:
                        if meter.add(moved - counted) or copying.done():
                            with suppress(asyncio.QueueFull):
                                progress.put_nowait(self._progress(target.node, meter.figures()))
                        counted = moved
                result = copying.result()
                if not result.ok:
                    said = " ".join(position.said) or result.stderr + result.stdout
                    return self._rsync_failed(source, target, address, result.exit_status, said)
        finally:
            if copying is not None and not copying.done():
                copying.cancel()
                await asyncio.gather(copying, return_exceptions=True)
        with suppress(asyncio.QueueFull):
            progress.put_nowait(self._progress(target.node, meter.final(), "copied"))
        took = max(meter.clock() - meter.started, 1e-6)
        return (
            f"{target.node}: {size(meter.done)} from {source.node} over the fabric "
            f"({address}) in {duration(took)} ({size(meter.done / took)}/s) into {dst}"
        )

    def _rsync_failed(
        self, source: ModelOnNode, target: ModelOnNode, address: str, status: int, stderr: str
    ) -> Failed:
        return self.reporter.known(
            _BY_ID["model_copied"],
            RSYNC_FAILED,
            {
                "model": self.model,
                "source": source.node,
                "node": target.node,
                "target": address,
                "status": str(status),
                "stderr": " ".join(stderr.split())[-300:] or "(nothing on stderr)",
            },
            node=target.node,
        )

    def _progress(self, node: str, figures: Transfer, then: str = "") -> Progress:
        return Progress(
            elapsed_s=self.reporter.elapsed(),
            phase="sync-model",
            node=node,
            message=f"{self.model} to {node}: {describe(figures)}" + (f", {then}" if then else ""),
            transfer=figures,
        )

    async def _complete(self) -> AsyncGenerator[Event, None]:
        found = await self._check()
        incomplete = found.incomplete
        if incomplete:
            yield self.reporter.known(
                _BY_ID["model_synced"],
                MODEL_STILL_INCOMPLETE,
                {
                    "model": self.model,
                    "nodes": ", ".join(m.node for m in incomplete),
                    "defects": "; ".join(f"{m.node}: {m.defects()}" for m in incomplete),
                },
                node=incomplete[0].node,
                evidence=found.evidence(),
            )
            return
        yield self.reporter.passed(
            _BY_ID["model_synced"], f"{found.evidence()}\n{found.offline_note()}"
        )


class RsyncPosition:
    """How far rsync is, from its `--info=progress2` lines as they come (RSYNC_PROGRESS): each
    starts with the bytes of the files it has handled so far, the current one up to where it
    is. A file it appends to counts whole, the part already there too; a file it skips (already
    complete) does not count."""

    _LINE = re.compile(r"^\s*(\d+)\s+\d{1,3}%\s")

    def __init__(self) -> None:
        self.bytes = 0
        self._lines = LineSplitter(limit=200)
        # what rsync said besides its progress (on a terminal both share one stream, and the
        # redraws would push an error's cause out of the failure message)
        self.said: deque[str] = deque(maxlen=20)

    def feed(self, chunk: str) -> None:
        for line in self._lines.feed(chunk.replace("\r", "\n")):  # a line a \r, as it redraws
            match = self._LINE.match(line)
            if match:
                self.bytes = max(self.bytes, int(match[1]))
            elif line.strip():
                self.said.append(line.strip())


@dataclass(frozen=True)
class CopyPlan:
    """What one rsync pass copies: the bytes it moves, and what the target already has of the
    files it copies (rsync's position counts those too: --append-verify goes on from there)."""

    to_move: int
    already_there: int


def plan_copy(
    source: dict[str, int], target: dict[str, int], included: Callable[[str], bool]
) -> CopyPlan:
    """The pass over the files `included` says it copies: with --append-verify rsync skips a
    file the target has at least as long, and appends to a shorter one."""
    copied = [
        (size, target.get(path, 0))
        for path, size in source.items()
        if included(path) and target.get(path, 0) < size
    ]
    return CopyPlan(sum(s - there for s, there in copied), sum(there for _, there in copied))


_REFS_LATER: tuple[Callable[[str], bool], list[str]] = (
    lambda path: not path.startswith("refs/"),
    ["--exclude=/refs/"],
)
_REFS: tuple[Callable[[str], bool], list[str]] = (lambda path: path.startswith("refs/"), [])
_EVERYTHING: tuple[Callable[[str], bool], list[str]] = (lambda path: True, [])


async def file_sizes(node: NodeConnection, path: str, timeout: float) -> dict[str, int]:
    """The size of each file under `path` on the node, by its path below it (none when `path`
    is not there); symlinks are not files here, as rsync's progress does not count them."""
    result = await node.run(["find", path, "-type", "f", "-printf", "%s %P\\0"], timeout=timeout)
    sizes = {}
    for entry in result.stdout.split("\0"):
        length, _, name = entry.partition(" ")
        if length.isdigit() and name:
            sizes[name] = int(length)
    return sizes
