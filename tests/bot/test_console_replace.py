"""`spark-bot console`'s `/spark up` over what already runs: the launch's question in its thread is
a y/N prompt (yes with `--yes`), as the console's other confirmations are; N keeps what runs.
On the demo's embedded cluster (emulated Docker engines, no root)."""

from __future__ import annotations

import io

import aiodocker
import pytest

from bot.app import run_console
from bot.config import SparkBotConfig
from cluster.config import ClusterConfig
from cluster.serving.containers import LABEL_CLUSTER
from demo.cluster import embedded_cluster
from demo.machine import DEMO_IMAGE

pytestmark = pytest.mark.timeout(120)


async def lines(*texts: str):
    for text in texts:
        yield text + "\n"


async def ours_on_the_worker(config: ClusterConfig) -> str:
    async with aiodocker.Docker(url=f"unix://{config.nodes[1].docker_socket}") as docker:
        made = await docker.containers.create(
            {"Image": DEMO_IMAGE, "Cmd": ["true"], "Labels": {LABEL_CLUSTER: config.name}},
            name=config.container.name,
        )
        return made.id


async def console(config: ClusterConfig, tmp_path, *commands: str, assume_yes: bool) -> str:
    out = io.StringIO()
    bot_config = SparkBotConfig(
        cluster=config, store={"path": tmp_path / "console.db"}, jobs={"update_interval": 0}
    )
    await run_console(bot_config, {}, lines=lines(*commands), out=out, assume_yes=assume_yes)
    return out.getvalue()


async def test_the_console_asks_in_the_terminal_and_n_keeps_what_runs(tmp_path):
    async with embedded_cluster(nodes=2) as cluster:
        config = cluster.config
        await ours_on_the_worker(config)
        text = await console(
            config, tmp_path, "/spark up", "n", "/spark up", "y", "/spark status", assume_yes=False
        )
    asked = f"`{config.name}` is already running (`{config.nodes[1].name}` created). Replace it?"
    assert text.count(asked) == 2 and text.count("Replace? [y/N]") == 2, text
    assert f"✋ Not replaced: @console kept it; `{config.name}` was left as it was" in text
    assert "→ *Keep it*, answered by @console: nothing was changed" in text
    assert "→ *Replace*, answered by @console" in text
    assert "✅ Ready" in text and "vllm_demo: *running*" in text


async def test_yes_answers_the_question_in_the_thread(tmp_path):
    async with embedded_cluster(nodes=2) as cluster:
        config = cluster.config
        await ours_on_the_worker(config)
        text = await console(config, tmp_path, "/spark up", assume_yes=True)
    assert "is already running" in text and "[y/N]" not in text
    assert f"replaced: {config.nodes[1].name} (created)" in text and "✅ Ready" in text
