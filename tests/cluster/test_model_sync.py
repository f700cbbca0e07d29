"""`sync-model` (cluster/operations/sync_model.py) without the lab: each "node" is the `local` driver with its
own home; the rsync it runs on the source is the real rsync with the same flags, copying locally
(the `host:` of its destination and its `--rsh` dropped: SSH to the fabric is the lab's part)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable, Sequence
from contextlib import aclosing
from pathlib import Path

import pytest

from cluster.config import Mount, NodeConfig
from cluster.events import CheckpointPassed, Failed, Progress
from cluster.nodes import ClusterConnection, CommandResult
from cluster.nodes.local import LocalNode
from cluster.operations.sync_model import (
    RSYNC_PROGRESS,
    ModelSync,
    RsyncPosition,
    file_sizes,
    plan_copy,
)
from cluster.progress.reporter import Reporter
from cluster.resources.model_cache import check_model
from testkit.doubles import CLUSTER
from testkit.model_cache import COMMIT, cut_short, lay_out_model, repo_folder

pytestmark = pytest.mark.timeout(60)
MODEL = CLUSTER.serve.model
HEAD, WORKER = (node.name for node in CLUSTER.nodes)
SHARD_2 = "model-00002-of-00002.safetensors"


class Node(LocalNode):
    """A local node with its own home, whose rsync copies on this machine."""

    def __init__(self, name: str, home: Path, rsync_fails: str | None = None, bwlimit_kib: int = 0):
        super().__init__(NodeConfig(name=name, driver="local", fabric_ip="127.0.0.1"), None, 0.0)  # type: ignore[arg-type]
        self.home, self.rsync_fails, self.ran = home, rsync_fails, []
        self.bwlimit_kib = bwlimit_kib
        self.hung_up: list[tuple[str, bool]] = []  # (command, asked to end with its call)

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        hang_up: bool = False,
        output: Callable[[str], None] | None = None,
    ) -> CommandResult:
        self.ran.append(list(argv))
        self.hung_up.append((argv[0], hang_up))
        if argv[0] == "printenv":
            return CommandResult(0, f"{self.home}\n", "")
        if argv[0] == "rsync":
            if self.rsync_fails:
                return CommandResult(255, "", self.rsync_fails)
            local = [a for a in argv[:-1] if not a.startswith("--rsh=")]
            if self.bwlimit_kib:
                local.insert(1, f"--bwlimit={self.bwlimit_kib}")
            argv = [*local, argv[-1].partition(":")[2]]
        return await super().run(argv, timeout=timeout, hang_up=hang_up, output=output)


def cluster():
    mounts = [Mount(source="~/hf", target="/root/.cache/huggingface")]
    container = CLUSTER.container.model_copy(update={"mounts": mounts})
    return CLUSTER.model_copy(update={"container": container})


async def sync(tmp_path: Path, **head: object) -> tuple[list, Node, Node]:
    config = cluster()
    nodes = [Node(HEAD, tmp_path / "head", **head), Node(WORKER, tmp_path / "worker")]  # type: ignore[arg-type]
    connection = ClusterConnection(config, {n.name: n for n in nodes})
    events = [e async for e in ModelSync(config, connection, Reporter(), report_every_s=0.01).run()]
    return events, nodes[0], nodes[1]


async def test_a_worker_without_the_model_gets_the_heads_copy_in_the_hub_layout(tmp_path):
    lay_out_model(tmp_path / "head" / "hf", MODEL, shards=2, shard_bytes=300_000)
    events, head, worker = await sync(tmp_path)
    assert not [e for e in events if isinstance(e, Failed)], events
    passed = {e.checkpoint: e for e in events if isinstance(e, CheckpointPassed)}
    assert list(passed) == ["ssh", "model_source", "model_copied", "model_synced"]
    assert passed["model_source"].node == HEAD
    assert (
        f"{WORKER}: " in passed["model_copied"].evidence
        and "from " + HEAD in passed["model_copied"].evidence
    )
    assert "shards 2/2 at full size" in passed["model_synced"].evidence
    assert "HF_HUB_OFFLINE=1 in the containers" in passed["model_synced"].evidence
    [done] = [e for e in events if isinstance(e, Progress) and e.message.endswith("copied")]
    assert done.node == WORKER and done.transfer.bytes_done >= 600_000
    # a proper cache: the same blobs, the snapshot's symlinks into them, the ref
    repo = repo_folder(tmp_path / "worker" / "hf", MODEL)
    link = repo / "snapshots" / COMMIT / SHARD_2
    assert link.is_symlink() and os.readlink(link).startswith("../../blobs/")
    assert (repo / "refs" / "main").read_text() == COMMIT
    # rsync ran on the source with the flags that make it resumable, refs/main in a pass of its own
    rsyncs = [argv for argv in head.ran if argv[0] == "rsync"]
    assert (
        len(rsyncs) == 2 and "--exclude=/refs/" in rsyncs[0] and "--exclude=/refs/" not in rsyncs[1]
    )
    assert {"--partial", "--append-verify", "--protect-args"} <= set(rsyncs[0])
    assert ("rsync", True) in head.hung_up, "a cancelled copy must not outlive its channel"
    assert rsyncs[0][-1] == f"127.0.0.1:{repo}/"
    assert not [argv for argv in worker.ran if argv[0] == "rsync"]
    # progress is rsync's own: no command runs on a node while it copies
    assert set(RSYNC_PROGRESS) <= set(rsyncs[0])
    assert [argv[0] for argv in head.ran] == ["printenv", "find", "rsync", "rsync"]
    assert [argv[0] for argv in worker.ran] == ["printenv", "find", "mkdir"]


async def test_a_short_shard_on_the_worker_is_completed_and_nothing_is_copied_when_all_have_it(
    tmp_path,
):
    lay_out_model(tmp_path / "head" / "hf", MODEL, shards=2, shard_bytes=300_000)
    snapshot = lay_out_model(tmp_path / "worker" / "hf", MODEL, shards=2, shard_bytes=300_000)
    cut_short(snapshot, SHARD_2, 100_000)
    events, _, _ = await sync(tmp_path)
    assert isinstance(events[-1], CheckpointPassed) and events[-1].checkpoint == "model_synced"
    [done] = [e for e in events if isinstance(e, Progress) and e.message.endswith("copied")]
    missing = (snapshot / SHARD_2).resolve().stat().st_size - 100_000
    assert done.transfer.bytes_done == missing, "rsync went on, and the part there is not counted"
    events, head, _ = await sync(tmp_path)
    copied = next(e for e in events if getattr(e, "checkpoint", "") == "model_copied")
    assert "nothing copied" in copied.evidence
    assert not [argv for argv in head.ran if argv[0] == "rsync"]


async def test_no_complete_copy_anywhere_fails_before_copying_and_says_to_download(tmp_path):
    snapshot = lay_out_model(tmp_path / "head" / "hf", MODEL)
    cut_short(snapshot, SHARD_2, 100)
    events, head, _ = await sync(tmp_path)
    failed = events[-1]
    assert isinstance(failed, Failed) and failed.checkpoint == "model_source"
    assert failed.signature == "model_not_cached" and "hf download" in failed.fix
    assert not [argv for argv in head.ran if argv[0] == "rsync"]


async def test_rsync_failing_is_the_copys_failure_with_its_words(tmp_path):
    lay_out_model(tmp_path / "head" / "hf", MODEL)
    events, _, _ = await sync(tmp_path, rsync_fails="Host key verification failed.\r\n")
    failed = events[-1]
    assert isinstance(failed, Failed) and failed.signature == "rsync_failed"
    assert (
        failed.node == WORKER
        and "rsync exited 255: Host key verification failed." in failed.summary
    )
    assert "`ssh 127.0.0.1` must log in without a password" in failed.fix


async def test_a_cancel_mid_copy_leaves_a_worker_that_fails_the_check_and_a_rerun_goes_on(
    tmp_path,
):
    lay_out_model(tmp_path / "head" / "hf", MODEL, shards=2, shard_bytes=2_000_000)
    config = cluster()
    head = Node(HEAD, tmp_path / "head", bwlimit_kib=500)  # 4 MB at 500 KiB/s: ~8 s
    nodes = {HEAD: head, WORKER: Node(WORKER, tmp_path / "worker")}
    sync = ModelSync(config, ClusterConnection(config, nodes), Reporter(), report_every_s=0.05)
    async with aclosing(sync.run()) as events:
        async for event in events:
            if isinstance(event, Progress) and event.transfer.bytes_done > 500_000:
                break  # the job's cancel closes the operation here
    assert not await rsyncs_running(tmp_path), "the copy outlived its cancel"
    found = await check_model(
        config,
        list(nodes.values()),
        {HEAD: str(tmp_path / "head"), WORKER: str(tmp_path / "worker")},
    )
    assert not found.nodes[1].complete and "not in the cache" in found.nodes[1].defects()
    head.bwlimit_kib = 0
    events, _, _ = await sync_again(config, nodes)
    copied = next(e for e in events if getattr(e, "checkpoint", "") == "model_copied")
    assert isinstance(events[-1], CheckpointPassed), events[-1]
    [done] = [e for e in events if isinstance(e, Progress) and e.message.endswith("copied")]
    assert done.transfer.bytes_done < 4_000_000, "the second run went on, it did not start over"
    assert WORKER in copied.evidence


async def sync_again(config, nodes):
    connection = ClusterConnection(config, nodes)
    events = [e async for e in ModelSync(config, connection, Reporter(), report_every_s=0.01).run()]
    return events, nodes[HEAD], nodes[WORKER]


async def rsyncs_running(tmp_path: Path) -> bool:
    ps = await asyncio.create_subprocess_exec(
        "pgrep", "-f", f"rsync.*{tmp_path}", stdout=asyncio.subprocess.PIPE
    )
    out, _ = await ps.communicate()
    return bool(out.strip())


def test_rsyncs_own_progress_lines_say_how_far_it_is(tmp_path):
    """Real rsync output (the flags sync-model gives it), read in pieces that cut its lines: a
    file it appends to counts whole, a complete one not at all, so what it moves is its
    position less what the target had of the files it copied."""
    source, target = tmp_path / "source", tmp_path / "target"
    (source / "blobs").mkdir(parents=True)
    target.mkdir()
    for name, length in (("blobs/a", 300_000), ("blobs/b", 200_000), ("c", 1_000)):
        (source / name).write_bytes(os.urandom(length))
    subprocess.run(["rsync", "--archive", f"{source}/blobs/b", f"{target}/blobs/"], check=True)
    (target / "blobs" / "a").write_bytes((source / "blobs" / "a").read_bytes()[:100_000])
    node = Node(HEAD, tmp_path)
    sizes = {
        "source": asyncio.run(file_sizes(node, str(source), 10)),
        "target": asyncio.run(file_sizes(node, str(target), 10)),
    }
    assert sizes["source"] == {"blobs/a": 300_000, "blobs/b": 200_000, "c": 1_000}
    plan = plan_copy(sizes["source"], sizes["target"], lambda path: True)
    assert (plan.to_move, plan.already_there) == (201_000, 100_000)
    rsync = ["rsync", "--archive", "--partial", "--append-verify", *RSYNC_PROGRESS]
    said = subprocess.run(
        [*rsync, f"{source}/", f"{target}/"], check=True, capture_output=True
    ).stdout.decode()
    assert "\r" in said and "to-chk=0/" in said, said  # redrawn lines; the file list whole
    position = RsyncPosition()
    for start in range(0, len(said), 7):
        position.feed(said[start : start + 7])
    assert position.bytes == 301_000, said
    assert position.bytes - plan.already_there == plan.to_move


def test_what_rsync_says_besides_its_progress_is_kept_for_the_failure():
    """On a terminal rsync's redraws and its errors share one stream: the redraws must not push
    the error's cause out of the failure message."""
    position = RsyncPosition()
    position.feed("          32768   0%    0.00kB/s    0:00:00 (xfr#0, to-chk=3/5)\r")
    position.feed('rsync: [receiver] write failed on "/m/b": No space left on device (28)\n')
    for n in range(50):
        position.feed(
            f"  {65_536_000 + n}  12%   40.00MB/s    0:00:0{n % 10} (xfr#1, to-chk=2/5)\r"
        )
    position.feed("rsync error: error in file IO (code 11) at receiver.c(381)\n")
    assert list(position.said) == [
        'rsync: [receiver] write failed on "/m/b": No space left on device (28)',
        "rsync error: error in file IO (code 11) at receiver.c(381)",
    ]
    assert position.bytes == 65_536_049
