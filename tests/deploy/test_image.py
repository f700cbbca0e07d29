"""The Dockerfile and compose.yaml, built and run for real on a lab node's Docker engine.

The image is built once for this module from the checkout as CI builds it without a registry
(offline_image.py: only the BASE and WHEELS build arguments differ from `docker build -t
spark-bot .`). The bot it holds connects over Socket Mode to a Slack stand-in on the lab's
management bridge; Docker's own health check must then report it healthy, started by hand and
started by docker-compose from compose.yaml.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import aiodocker
import pytest

from bot.cli import package_version
from lab import topology as T
from lab.api import LabInfo, exclusive_use
from testkit.slack_standin import SlackStandIn
from tests.conftest import bring_up_lab
from tests.deploy import offline_image

pytestmark = [pytest.mark.lab, pytest.mark.timeout(600)]
REPO = offline_image.REPO
STORE = "/var/lib/spark-bot/spark-bot.db"  # in the image's volume


@pytest.fixture(scope="module")
def built() -> Iterator[LabInfo]:
    offline_image.cached_wheelhouse()  # downloaded, if at all, before the lab is taken
    with exclusive_use():
        lab = bring_up_lab(nodes=2)
        offline_image.build(T.Node(0))
        yield lab


@pytest.fixture
def project(built: LabInfo) -> Iterator[Path]:
    """A folder for the deployment's files that node 0's engine sees at the same path (bind
    sources are resolved by the engine, and each node has a /tmp of its own)."""
    folder = Path(tempfile.mkdtemp(prefix="spark-bot-deploy-", dir=built.head.home))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _bot_config(lab: LabInfo, slack: SlackStandIn, directory: Path) -> Path:
    """The lab's config pointed at the stand-in, readable by the image's user, its store in
    the image's volume."""
    directory.chmod(0o755)
    config = directory / "spark-bot.yaml"
    config.write_text(
        (REPO / "configs" / "lab.yaml").read_text()
        + f"slack:\n  api_url: {slack.api_url}\nstore:\n  path: {STORE}\n"
    )
    config.chmod(0o644)
    return config


async def _health(docker: aiodocker.Docker, events, is_ours) -> str:
    """The first health status Docker reports for a container `is_ours` accepts."""
    async with asyncio.timeout(120):
        while True:
            event = await events.get()
            if (
                event
                and str(event.get("Action", "")).startswith("health_status")
                and is_ours(event)
            ):
                return str(event["Action"])


async def _run_cli(node: str, *argv: str) -> tuple[int, str]:
    docker = aiodocker.Docker(url=f"unix://{node}")
    container = await docker.containers.create({"Image": offline_image.TAG, "Cmd": list(argv)})
    try:
        await container.start()
        status = (await container.wait(timeout=60))["StatusCode"]
        return status, "".join(await container.log(stdout=True, stderr=True))
    finally:
        await container.delete(force=True)
        await docker.close()


async def test_the_image_holds_the_cli_with_its_version_and_every_command(built):
    status, out = await _run_cli(built.head.docker_socket, "--version")
    assert status == 0 and out.strip() == f"spark-bot {package_version()}", out
    status, out = await _run_cli(built.head.docker_socket, "help")
    assert status == 0 and "spark-bot up --config" in out and "/spark bench" in out, out


async def test_the_image_runs_as_non_root_and_reports_healthy(built, project):
    async with SlackStandIn(host=built.mgmt_host_ip) as slack:
        config = _bot_config(built, slack, project)
        docker = aiodocker.Docker(url=built.head.docker_host)
        events = docker.events.subscribe(filters=json.dumps({"event": ["health_status"]}))
        container = await docker.containers.create(
            {
                "Image": offline_image.TAG,
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
            health = await _health(docker, events, lambda event: event.get("id") == container.id)
            info = await container.show()
            assert health == "health_status: healthy", (
                await container.log(stdout=True, stderr=True)
            )[-20:]
            assert info["Config"]["User"] == "spark"
            assert info["Config"]["Healthcheck"]["Test"][-2:] == ["-m", "bot.healthcheck"]
            assert "/var/lib/spark-bot" in info["Config"]["Volumes"]
            assert slack.calls("apps.connections.open"), "the bot connected through Socket Mode"
        finally:
            await container.delete(force=True, v=True)
            await docker.events.stop()
            await docker.close()


def _compose(lab: LabInfo, project: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "docker-compose",
            "--project-directory",
            str(project),
            "--project-name",
            "sparkbotlab",
            "-f",
            str(REPO / "compose.yaml"),
            "-f",
            str(Path(__file__).with_name("compose.lab.yaml")),
            *argv,
        ],
        env=dict(os.environ, DOCKER_HOST=lab.head.docker_host),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _compose_project(lab: LabInfo, slack: SlackStandIn, project: Path) -> None:
    """A deployment as docs/deploy.md lays it out: .env, configs/sparks.yaml, ssh/."""
    (project / "configs").mkdir()
    _bot_config(lab, slack, project / "configs").rename(project / "configs" / "sparks.yaml")
    (project / "ssh").mkdir(mode=0o755)
    (project / ".env").write_text(
        f"SLACK_BOT_TOKEN={slack.bot_token}\nSLACK_APP_TOKEN={slack.app_token}\n"
    )


async def test_compose_validates_and_its_bot_turns_healthy(built, project):
    async with SlackStandIn(host=built.mgmt_host_ip) as slack:
        _compose_project(built, slack, project)
        config = _compose(built, project, "config")
        assert config.returncode == 0, config.stderr
        assert "spark-bot-data:/var/lib/spark-bot" in config.stdout.replace(" ", ""), config.stdout
        docker = aiodocker.Docker(url=built.head.docker_host)
        events = docker.events.subscribe(filters=json.dumps({"event": ["health_status"]}))
        try:
            up = _compose(built, project, "up", "-d", "--no-build")
            assert up.returncode == 0, up.stderr
            health = await _health(
                docker,
                events,
                lambda event: (
                    event.get("Actor", {}).get("Attributes", {}).get("com.docker.compose.project")
                    == "sparkbotlab"
                ),
            )
            logs = _compose(built, project, "logs", "--tail", "20").stdout
            assert health == "health_status: healthy", logs
            assert slack.calls("apps.connections.open"), "the bot connected through Socket Mode"
        finally:
            down = _compose(built, project, "down", "--volumes", "--timeout", "5")
            await docker.events.stop()
            await docker.close()
        assert down.returncode == 0, down.stderr
