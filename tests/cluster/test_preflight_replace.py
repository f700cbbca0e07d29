"""Replacing a cluster that serves: preflight asks about the leftovers as soon as the docker
facts are known, judges a node whose leftover serves on the memory it gets back once that
leftover is gone (its launch's LABEL_MEMORY_BEFORE), removes the leftovers only after every check
passed, and waits for their memory to come back before the launch goes on.

The nodes are doubles answering what these steps ask (their engine's container and events, their
/proc/meminfo); the checks these tests are not about (image, GPU, NCCL, interfaces, model, fit,
ports) are stand-ins that record when they ran."""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import pytest

from cluster.config import ClusterConfig
from cluster.errors import FileUnreadable
from cluster.events import CheckpointPassed, Event, Failed, Progress
from cluster.nodes.base import CommandResult
from cluster.nodes.connect import ClusterConnection
from cluster.operations.preflight import REPLACING, Leftover, Preflight
from cluster.progress.checkpoints import BY_ID
from cluster.progress.reporter import Reporter
from cluster.resources.memory import MEMINFO
from cluster.resources.memory_return import LABEL_MEMORY_BEFORE
from cluster.serving.containers import LABEL_CLUSTER
from testkit.doubles import CLUSTER

pytestmark = pytest.mark.timeout(30)

GIB_KB = 1024 * 1024
NAME = CLUSTER.container.name
HEAD, WORKER = (n.name for n in CLUSTER.nodes)


def meminfo(free_gib: float) -> str:
    """A GB10's /proc/meminfo: idle at 117 GiB free (119.4 available), or held by a vLLM."""
    fields = {
        "MemTotal": int(121.63 * GIB_KB),
        "MemFree": int(free_gib * GIB_KB),
        "MemAvailable": int((free_gib + 2.4) * GIB_KB),
        "Buffers": int(0.2 * GIB_KB),
        "Cached": int(2.0 * GIB_KB),
        "Shmem": int(0.1 * GIB_KB),
        "SReclaimable": int(0.3 * GIB_KB),
    }
    return "".join(f"{key}: {value} kB\n" for key, value in fields.items())


IDLE, SERVING = meminfo(117.0), meminfo(11.8)  # 119.4 and 14.2 GiB available
IDLE_BYTES = int(119.4 * GIB_KB) * 1024  # what the serving launch's preflight saw


def serving(*, ours: bool = True, labelled: bool = True) -> dict[str, Any]:
    """The inspect answer of a running leftover under the launch's name."""
    labels = {LABEL_CLUSTER: CLUSTER.name} if ours else {"owner": "someone"}
    if labelled:
        labels[LABEL_MEMORY_BEFORE] = str(IDLE_BYTES)
    return {"Config": {"Labels": labels}, "State": {"Status": "running"}}


class Engine:
    """A node's Docker engine: one container under the launch's name, or none."""

    def __init__(self, node: Node, container: dict[str, Any] | None, past: list[dict[str, Any]]):
        self.node, self.container, self.past = node, container, past
        self.removed: list[str] = []

    async def version(self) -> dict[str, str]:
        return {"Version": "28.3.3", "ApiVersion": "1.51"}

    async def image_id(self, image: str) -> str:
        return "sha256:" + "e" * 64

    async def find_container(self, name: str) -> dict[str, Any] | None:
        return self.container

    async def remove(self, name: str) -> None:
        self.removed.append(name)
        self.container = None
        self.node.memory = self.node.after_removal

    async def past_events(self, *, within_s: float, filters: dict[str, Any]) -> list[dict]:
        return self.past


class Node:
    """A node's connection: its /proc/meminfo (after a removal, `after_removal` read by read,
    the last one kept), its engine, and `ps` showing the vLLM worker that held the memory."""

    def __init__(
        self,
        name: str,
        memory: str,
        container: dict[str, Any] | None = None,
        *,
        after_removal: tuple[str, ...] = (IDLE,),
        past: list[dict[str, Any]] | None = None,
    ):
        self.config = CLUSTER.node(name)
        self.connect_s = 0.01
        self.memory: tuple[str, ...] | str = memory
        self.after_removal = after_removal
        self.docker = Engine(self, container, past or [])
        self.meminfo_reads = 0

    @property
    def name(self) -> str:
        return self.config.name

    async def read_file(self, path: str, *, timeout: float, limit: int = 0) -> str:
        if path != MEMINFO:
            raise FileUnreadable(self.name, f"{path}: no such file", "none")
        self.meminfo_reads += 1
        if isinstance(self.memory, str):
            return self.memory
        text, *rest = self.memory
        if rest:
            self.memory = tuple(rest)
        return text

    async def home_dir(self, *, timeout: float) -> str:
        return "/root"

    async def run(self, argv: list[str], *, timeout: float, **_: Any) -> CommandResult:
        assert argv[0] == "ps", argv
        return CommandResult(0, " 110000000  4242 VLLM::Worker_TP\n    20000   812 sshd\n", "")


STAND_INS = {  # Preflight's method -> the checkpoint it proves
    "_same_image": "image",
    "_image_runs_on_gpu": "gpu_arch",
    "_same_nccl": "nccl_library",
    "_interfaces": "interfaces",
    "_model": "model",
    "_fits": "fit",
    "_ports_free": "api_port",
}


@dataclass
class Recorded(Preflight):
    """The preflight with stand-ins for the checks these tests are not about: each records its
    name (and how many containers were removed by then) when it runs; `failing` fails one."""

    ran: list[tuple[str, int]] = field(default_factory=list)
    failing: str | None = None

    def _stand_in(self, checkpoint: str) -> AsyncGenerator[Event, None]:
        async def run() -> AsyncGenerator[Event, None]:
            removed = sum(len(n.docker.removed) for n in self._nodes)  # type: ignore[attr-defined]
            self.ran.append((checkpoint, removed))
            if checkpoint == self.failing:
                yield self.reporter.failed(
                    BY_ID[checkpoint], f"{checkpoint} fails", cause="c", fix="f"
                )
                return
            yield self._passed(checkpoint, f"{checkpoint}: stand-in")

        return run()

    def __post_init__(self) -> None:
        for method, checkpoint in STAND_INS.items():
            setattr(self, method, functools.partial(self._stand_in, checkpoint))


def lab_cluster(**memory: float) -> ClusterConfig:
    fast = CLUSTER.memory.model_copy(update={"return_timeout": 2, "return_poll": 0.01, **memory})
    return CLUSTER.model_copy(update={"memory": fast})


def preflight(
    *nodes: Node, config: ClusterConfig | None = None, **options: Any
) -> tuple[Recorded, list[Event]]:
    config = config or lab_cluster()
    connection = ClusterConnection(config, nodes={n.name: n for n in nodes})  # type: ignore[misc]
    seen: list[Event] = []
    return Recorded(config, connection, Reporter(), **options), seen


async def run(found: Recorded, seen: list[Event]) -> list[Event]:
    async for event in found.run():
        seen.append(event)
    return seen


def passed(events: list[Event], checkpoint: str) -> CheckpointPassed:
    [found] = [e for e in events if isinstance(e, CheckpointPassed) and e.checkpoint == checkpoint]
    return found


def checkpoints(events: list[Event]) -> list[str]:
    return [e.checkpoint for e in events if isinstance(e, CheckpointPassed | Failed)]


def a_serving_cluster(**serving_options: bool) -> tuple[Node, Node]:
    return (
        Node(HEAD, SERVING, serving(**serving_options)),
        Node(WORKER, SERVING, serving(**serving_options)),
    )


async def test_the_question_is_asked_right_after_the_docker_facts_before_the_memory_check():
    asked_after: list[list[str]] = []
    found, seen = preflight(*a_serving_cluster())

    async def confirm(leftovers: tuple[Leftover, ...]) -> bool:
        asked_after.append(checkpoints(seen))
        assert leftovers == (Leftover(HEAD, "running", True), Leftover(WORKER, "running", True))
        return True

    found.confirm_replace = confirm
    events = await run(found, seen)
    assert asked_after == [["ssh", "docker"]], "asked once, before any other check"
    assert isinstance(events[-1], CheckpointPassed), events[-1]


async def test_a_declined_replace_ends_the_launch_at_once_removing_nothing():
    head, worker = a_serving_cluster()
    found, seen = preflight(head, worker)

    async def decline(leftovers: tuple[Leftover, ...]) -> bool:
        return False

    found.confirm_replace = decline
    events = await run(found, seen)
    failure = events[-1]
    assert isinstance(failure, Failed), failure
    assert (failure.checkpoint, failure.signature) == ("no_stale_container", "stale_container")
    assert checkpoints(events) == ["ssh", "docker", "no_stale_container"], "no memory check"
    assert found.ran == [], "no image, model or fit work after a no"
    assert (head.docker.removed, worker.docker.removed) == ([], [])
    assert (head.meminfo_reads, worker.meminfo_reads) == (1, 1), "only the docker facts' read"


async def test_a_yes_judges_the_memory_on_what_the_replaced_container_gives_back():
    found, seen = preflight(*a_serving_cluster(), replace=True)
    events = await run(found, seen)
    memory = passed(events, "memory")
    for node in (HEAD, WORKER):
        assert (
            f"{node}: 14.2 GiB available now, 119.4 GiB once the replaced {NAME} is gone "
            "(its launch's reading)"
        ) in memory.evidence, memory.evidence
    assert "vLLM claims 109.5 GiB free at start-up" in memory.evidence
    assert f"{HEAD}: 117.0 GiB free" in memory.evidence, "the credited memory, counted free"


@pytest.mark.parametrize(
    ("ours", "why"), [(True, "its launch recorded none"), (False, "not started by spark-bot")]
)
async def test_a_leftover_without_its_launchs_reading_is_not_credited_and_the_check_says_so(
    ours: bool, why: str
):
    """The bug's own case: without the credit, the memory the leftover holds fails the check
    (ours from an older spark-bot, or another's consented for removal)."""
    head = Node(HEAD, IDLE)
    worker = Node(WORKER, SERVING, serving(ours=ours, labelled=False))
    found, seen = preflight(head, worker, replace=True, replace_foreign=frozenset({WORKER}))
    events = await run(found, seen)
    failure = events[-1]
    assert isinstance(failure, Failed) and failure.signature == "memory_in_use", failure
    assert (
        f"{WORKER}: 14.2 GiB available now; the memory the replaced {NAME} holds could not be "
        f"credited ({why}): judged on what is available now"
    ) in failure.evidence, failure.evidence
    assert found.ran[-1][0] == "interfaces" and worker.docker.removed == [], "nothing removed"


async def test_the_removal_comes_after_every_check_and_before_the_ports():
    head, worker = a_serving_cluster()
    found, seen = preflight(head, worker, replace=True)
    events = await run(found, seen)
    assert found.ran == [
        ("image", 0),
        ("gpu_arch", 0),
        ("nccl_library", 0),
        ("interfaces", 0),
        ("model", 0),
        ("fit", 0),
        ("api_port", 2),
    ], "nothing removed before the fit check passed; both before the ports check"
    assert checkpoints(events)[-5:] == ["memory", "model", "fit", "no_stale_container", "api_port"]
    [removing] = [e for e in events if isinstance(e, Progress) and e.phase == REPLACING]
    assert events.index(removing) > events.index(passed(events, "fit"))
    assert removing.message == (
        f"every check passed: removing {NAME} on {HEAD} (running), {WORKER} (running)"
    )
    assert (head.docker.removed, worker.docker.removed) == ([NAME], [NAME])
    assert passed(events, "no_stale_container").evidence.startswith(
        f"replaced: {HEAD} (running), {WORKER} (running)"
    )


async def test_a_later_check_failing_after_a_yes_leaves_the_old_containers_running():
    head, worker = a_serving_cluster()
    found, seen = preflight(head, worker, failing="model")

    async def consent(leftovers: tuple[Leftover, ...]) -> bool:
        return True

    found.confirm_replace = consent
    events = await run(found, seen)
    failure = events[-1]
    assert isinstance(failure, Failed) and failure.checkpoint == "model", failure
    assert (head.docker.removed, worker.docker.removed) == ([], []), "what serves goes on"
    assert not [e for e in events if isinstance(e, Progress) and e.phase == REPLACING]


async def test_after_the_removal_the_launch_waits_for_the_memory_to_come_back():
    head = Node(HEAD, SERVING, serving())
    worker = Node(WORKER, SERVING, serving(), after_removal=(SERVING, SERVING, IDLE))
    found, seen = preflight(head, worker, replace=True)
    events = await run(found, seen)
    assert isinstance(events[-1], CheckpointPassed), events[-1]
    progress = [e.message for e in events if isinstance(e, Progress) and e.phase == "memory"]
    assert progress[0] == (
        f"waiting up to 2 s for the replaced {NAME}'s memory to come back: {WORKER}: 14.2 GiB "
        "available, 119.4 GiB before the last launch"
    ), progress
    assert progress[1].startswith(f"memory back on {WORKER} after "), progress
    replaced = passed(events, "no_stale_container").evidence
    assert (
        f"\nmemory back on {WORKER} after " in replaced and HEAD not in replaced.split("\n", 1)[1]
    )
    assert [c for c, _ in found.ran][-1] == "api_port", "the ports checked once it came back"
    memory = found.facts[WORKER].memory
    assert memory is not None and memory.available == int((117.0 + 2.4) * GIB_KB) * 1024, (
        "the reading the new containers record is the one after the removal"
    )


async def test_memory_that_does_not_come_back_after_the_removal_fails_naming_its_holder():
    head = Node(HEAD, SERVING, serving())
    worker = Node(WORKER, SERVING, serving(), after_removal=(SERVING,))
    found, seen = preflight(head, worker, replace=True)
    events = await run(found, seen)
    failure = events[-1]
    assert isinstance(failure, Failed), failure
    assert (failure.checkpoint, failure.node, failure.signature) == (
        "memory",
        WORKER,
        "memory_held",
    )
    assert "VLLM::Worker_TP (pid 4242" in failure.summary, failure.summary
    assert "api_port" not in [c for c, _ in found.ran], "no launch on memory not back"


async def test_an_earlier_stop_is_not_awaited_on_a_node_whose_leftover_still_serves():
    """The serving launch's own predecessor stopped within memory.return_window: its destroy
    event is no reason to wait before the checks (the serving leftover holds the memory)."""
    earlier = {
        "Actor": {"Attributes": {"name": NAME, LABEL_MEMORY_BEFORE: str(IDLE_BYTES)}},
    }
    head = Node(HEAD, SERVING, serving(), past=[earlier])
    worker = Node(WORKER, SERVING, serving(), past=[earlier])
    found, seen = preflight(head, worker, replace=True)
    events = await run(found, seen)
    assert isinstance(events[-1], CheckpointPassed), events[-1]
    memory_at = events.index(passed(events, "memory"))
    assert not [e for e in events[:memory_at] if isinstance(e, Progress)], events[:memory_at]
