"""SSH and Docker helpers for the lab tests: asyncssh to a node (host-key checked),
aiodocker over an SSH-forwarded Docker socket."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile

import aiodocker
import asyncssh

from cluster.logs.logtext import LineSplitter
from cluster.nodes.docker_engine import DockerEngine
from cluster.serving.containers import create_body
from lab.api import LabInfo, NodeInfo

EMULATOR_READY = all(
    os.path.exists(os.path.join(os.path.dirname(__file__), "..", "..", "lab", "emulator", f))
    for f in ("__main__.py", "serve.py", "ray_cli.py", "gpu_tools.py")
)


async def connect(
    info: LabInfo,
    node: NodeInfo,
    *,
    known_hosts: str | None = None,
    tunnel=None,
    host: str | None = None,
) -> asyncssh.SSHClientConnection:
    return await asyncio.wait_for(
        asyncssh.connect(
            host or node.ssh_host,
            port=info.ssh_port,
            username=info.ssh_user,
            client_keys=[info.key_path],
            known_hosts=known_hosts or info.known_hosts_path,
            tunnel=tunnel,
            agent_path=None,
            config=None,
        ),
        15,
    )


@contextlib.asynccontextmanager
async def ssh_to(info: LabInfo, node: NodeInfo):
    """SSH to a node; an isolated worker (no management IP) is reached via the head."""
    if node.mgmt_ip is None:
        async with (
            await connect(info, info.head) as head,
            await connect(info, node, tunnel=head, host=node.fabric_ip) as conn,
        ):
            yield conn
    else:
        async with await connect(info, node) as conn:
            yield conn


@contextlib.asynccontextmanager
async def docker_over_ssh(conn: asyncssh.SSHClientConnection, node: NodeInfo):
    """aiodocker client for the node's engine through a forwarded unix socket."""
    with tempfile.TemporaryDirectory(prefix="lab-dock-") as d:
        local = os.path.join(d, "docker.sock")
        listener = await conn.forward_local_path(local, node.docker_socket)
        docker = aiodocker.Docker(url="unix://" + local)
        try:
            yield docker
        finally:
            await docker.close()
            listener.close()


async def wait_log_line(
    docker: aiodocker.Docker, container, needle: str, timeout: float = 30
) -> list[str]:
    """Follow a container's logs until a line contains `needle`; returns the lines seen.

    Followed through the controller's engine facade, not aiodocker's `log(follow=True)`: that
    one never releases its response when its reader stops early, closed or not (its request's
    context manager has no `finally`), so the connection is left to the collector, which
    warns of it whenever it gets there (at the end of whichever test is running then)."""
    seen: list[str] = []
    engine = DockerEngine("lab", docker, call_timeout=timeout)

    async def follow():
        lines = LineSplitter()
        stream = engine.follow_log(container.id, backlog="all", timestamps=False)
        async with contextlib.aclosing(stream) as chunks:
            async for chunk in chunks:
                for line in lines.feed(chunk):
                    seen.append(line)
                    if needle in line:
                        return

    try:
        await asyncio.wait_for(follow(), timeout)
    except TimeoutError:
        raise AssertionError(
            f"{needle!r} not in logs after {timeout}s:\n" + "\n".join(seen[-40:])
        ) from None
    return seen


async def run_container(
    docker: aiodocker.Docker,
    image: str,
    cmd: list[str],
    name: str,
    env: dict | None = None,
    host_config: dict | None = None,
):
    with contextlib.suppress(aiodocker.DockerError):
        old = await docker.containers.get(name)
        await old.delete(force=True)
    config = {
        "Image": image,
        "Cmd": cmd,
        "Env": [f"{k}={v}" for k, v in (env or {}).items()],
        "HostConfig": {"NetworkMode": "host", "IpcMode": "host", **(host_config or {})},
    }
    c = await docker.containers.create(config, name=name)
    await c.start()
    return c


async def exec_out(
    container, cmd: list[str] | str, timeout: float = 60, env: dict | None = None
) -> tuple[int, str]:
    """Run a command in a container; returns (exit code, stdout+stderr)."""
    if isinstance(cmd, str):
        cmd = ["sh", "-c", cmd]
    exe = await container.exec(cmd, stdout=True, stderr=True, environment=env)
    chunks: list[bytes] = []

    async def collect():
        async with exe.start(detach=False) as stream:
            while True:
                msg = await stream.read_out()
                if msg is None:
                    break
                chunks.append(msg.data)

    await asyncio.wait_for(collect(), timeout)
    info = await exe.inspect()
    return info["ExitCode"], b"".join(chunks).decode(errors="replace")


async def exec_detached(container, cmd: list[str], env: dict | None = None) -> None:
    exe = await container.exec(cmd, stdout=True, stderr=True, environment=env)
    await exe.start(detach=True)


async def bot_container(
    docker: aiodocker.Docker,
    config,
    index: int,
    cmd: list[str],
    env: dict[str, str],
    name: str = "lab-spark-like",
):
    """The container spark-bot creates on the node from a config (configs/lab.yaml: its GPU
    request and mounts too), as `<name>-<index>`."""
    node = config.nodes[index]
    body = create_body(config, node, "head" if index == 0 else "worker", cmd, env, "/root")
    name = f"{name}-{index}"
    for old in await docker.containers.list(all=True, filters={"name": [name]}):
        await old.delete(force=True)
    c = await docker.containers.create(body, name=name)
    await c.start()
    return c
