"""The bot's Docker image, built offline from the lab's local base, passes its own health check.

Built on the lab's node-0 engine (no registry is reachable: BASE is the lab's debootstrapped
Debian 12). The container runs as a non-root user in the node's network namespace and connects
over Socket Mode to a Slack stand-in listening on the lab's management bridge; Docker's own
HEALTHCHECK (the image's command, run every second here) must then report it healthy.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import aiodocker
import pytest

from tests.slack_standin import SlackStandIn

pytestmark = [pytest.mark.lab, pytest.mark.timeout(300)]
REPO = Path(__file__).resolve().parents[2]
TAG = "spark-bot:test"


@pytest.fixture
def image(lab, tmp_path):
    context = subprocess.run(
        ["sh", str(REPO / "scripts" / "docker-context.sh"), str(tmp_path / "ctx")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    engine = lab.nodes[0].docker_host
    subprocess.run(
        [
            "docker",
            "-H",
            engine,
            "build",
            "-q",
            "--build-arg",
            "BASE=spark-lab/base:bookworm",
            "-t",
            TAG,
            context,
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=240,
    )
    yield lab.nodes[0]
    subprocess.run(["docker", "-H", engine, "rmi", "-f", TAG], capture_output=True)


async def _run_cli(node, *argv: str) -> tuple[int, str]:
    docker = aiodocker.Docker(url=f"unix://{node.docker_socket}")
    container = await docker.containers.create({"Image": TAG, "Cmd": list(argv)})
    try:
        await container.start()
        status = (await container.wait(timeout=60))["StatusCode"]
        return status, "".join(await container.log(stdout=True, stderr=True))
    finally:
        await container.delete(force=True)
        await docker.close()


async def test_the_cli_starts_in_the_image_without_the_lab(image):
    status, out = await _run_cli(image, "--help")
    assert status == 0 and "run the Slack bot" in out, out
    status, out = await _run_cli(image, "run", "--help")
    assert status == 0 and "--config" in out, out
    status, out = await _run_cli(image, "demo", "--run", "/spark help")
    assert status == 2 and "the demo needs the repository checkout" in out, out


async def test_the_image_runs_as_non_root_and_reports_healthy(image, lab, tmp_path):
    async with SlackStandIn(host=lab.mgmt_host_ip) as slack:
        config = tmp_path / "spark-bot.yaml"
        lab_config = (REPO / "configs" / "lab.yaml").read_text()
        config.write_text(
            lab_config + f"slack:\n  api_url: {slack.api_url}\nstore:\n  path: /tmp/spark-bot.db\n"
        )
        config.chmod(0o644)
        tmp_path.chmod(0o755)
        docker = aiodocker.Docker(url=f"unix://{image.docker_socket}")
        events = docker.events.subscribe(filters=json.dumps({"event": ["health_status"]}))
        container = await docker.containers.create(
            {
                "Image": TAG,
                "Env": [f"SLACK_BOT_TOKEN={slack.bot_token}", f"SLACK_APP_TOKEN={slack.app_token}"],
                "Healthcheck": {"Interval": 1_000_000_000, "StartPeriod": 1_000_000_000},
                "HostConfig": {
                    "NetworkMode": "host",
                    "Binds": [f"{config}:/config/spark-bot.yaml:ro"],
                },
            },
            name="spark-bot-image-test",
        )
        try:
            await container.start()
            health = None
            async with asyncio.timeout(90):
                while health is None:
                    event = await events.get()
                    status = event["Action"] if event else None
                    if (
                        event
                        and event.get("id") == container.id
                        and status
                        and status.startswith("health_status")
                    ):
                        health = status
            info = await container.show()
            assert health == "health_status: healthy", (
                await container.log(stdout=True, stderr=True)
            )[-20:]
            assert info["Config"]["User"] == "spark"
            assert "http://127.0.0.1:3000/health" in " ".join(info["Config"]["Healthcheck"]["Test"])
            assert slack.calls("apps.connections.open"), "the bot connected through Socket Mode"
        finally:
            await container.delete(force=True)
            await docker.events.stop()
            await docker.close()
