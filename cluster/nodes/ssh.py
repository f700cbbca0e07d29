"""The SSH driver: asyncssh to the node, its Docker socket forwarded over that connection."""

from __future__ import annotations

import asyncio
import os
import shlex
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import asyncssh

from cluster.config import NodeConfig
from cluster.errors import HostKeyMismatch, NodeError
from cluster.nodes.base import CommandResult, NodeConnection, command_failed
from cluster.nodes.docker_client import open_docker


class SSHNode(NodeConnection):
    def __init__(self, config, docker, connect_s, connection, socket_dir):
        super().__init__(config, docker, connect_s)
        self.connection: asyncssh.SSHClientConnection = connection
        self._socket_dir = socket_dir
        self._api_urls: dict[int, str] = {}

    @classmethod
    async def connect(
        cls, config: NodeConfig, *, timeout: float, via: SSHNode | None = None
    ) -> SSHNode:
        started = time.monotonic()
        connection = await _open_ssh(config, timeout=timeout, via=via)
        socket_dir = tempfile.mkdtemp(prefix=f"spark-bot-{config.name}-")
        try:
            local_socket = os.path.join(socket_dir, "docker.sock")
            await connection.forward_local_path(local_socket, config.docker_socket)
            docker = await open_docker(config, f"unix://{local_socket}", timeout=timeout)
        except BaseException:
            connection.close()
            _remove_socket_dir(socket_dir)
            raise
        return cls(config, docker, time.monotonic() - started, connection, socket_dir)

    async def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        try:
            result = await self.connection.run(shlex.join(argv), check=False, timeout=timeout)
        except (asyncssh.Error, OSError, TimeoutError) as error:
            raise command_failed(self.name, argv, timeout, error) from error
        return CommandResult(
            result.exit_status if result.exit_status is not None else -1,
            _text(result.stdout),
            _text(result.stderr),
        )

    async def api_base_url(self, port: int) -> str:
        if port not in self._api_urls:
            listener = await self.connection.forward_local_port("127.0.0.1", 0, "127.0.0.1", port)
            self._api_urls[port] = f"http://127.0.0.1:{listener.get_port()}"
        return self._api_urls[port]

    async def aclose(self) -> None:
        try:
            await self.docker.close()
        finally:
            self.connection.close()
            await self.connection.wait_closed()
            _remove_socket_dir(self._socket_dir)


async def _open_ssh(
    config: NodeConfig, *, timeout: float, via: SSHNode | None
) -> asyncssh.SSHClientConnection:
    ssh = config.ssh
    assert ssh is not None
    where = f"{ssh.user}@{ssh.host}:{ssh.port}" + (f" (through {via.name})" if via else "")
    options = dict(
        port=ssh.port,
        username=ssh.user,
        known_hosts=str(ssh.known_hosts),
        connect_timeout=timeout,
        keepalive_interval=ssh.keepalive_interval,
        tunnel=via.connection if via else (),
    )
    if ssh.key is not None:
        options["client_keys"] = [str(ssh.key)]
    missing = await asyncio.to_thread(_missing_local_file, config)
    if missing is not None:
        raise missing
    try:
        return await asyncssh.connect(ssh.host, **options)
    except asyncssh.HostKeyNotVerifiable as exc:
        if not await asyncio.to_thread(_is_known, ssh.known_hosts, ssh.host, ssh.port):
            raise HostKeyMismatch(
                config.name,
                f"{ssh.host} is not in {ssh.known_hosts}, so its host key cannot be checked",
                f"Record it once from a trusted network: `ssh -p {ssh.port} {ssh.user}@{ssh.host}` "
                f"(compare the fingerprint with `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` "
                f"on the node) or `ssh-keyscan -p {ssh.port} {ssh.host} >> {ssh.known_hosts}`",
            ) from exc
        raise HostKeyMismatch(
            config.name,
            f"SSH host key of {ssh.host} is not the one recorded in {ssh.known_hosts}, so the "
            f"connection was refused ({exc.reason})",
            "If the node was reinstalled, compare its "
            f"key out of band (on the node: `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`; "
            f"here: `ssh-keygen -F {ssh.host} -lf {ssh.known_hosts}`) and update known_hosts. "
            "Host key checking stays on.",
        ) from exc
    except asyncssh.PermissionDenied as exc:
        key = ssh.key or "the SSH agent's keys"
        raise NodeError(
            config.name,
            f"SSH login as {where} was refused with {key}",
            f"Add its public key to ~{ssh.user}/.ssh/authorized_keys on the node.",
        ) from exc
    except (OSError, asyncssh.Error, TimeoutError) as exc:
        reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or type(exc).__name__
        raise NodeError(
            config.name,
            f"cannot reach sshd at {where} ({reason})",
            "Is the node up and sshd running? "
            f"Try `ssh -p {ssh.port} {ssh.user}@{ssh.host}` from the bot's machine.",
        ) from exc


def _missing_local_file(config: NodeConfig) -> NodeError | None:
    ssh = config.ssh
    assert ssh is not None
    if ssh.key is not None and not ssh.key.is_file():
        return NodeError(config.name, f"the SSH key {ssh.key} does not exist on the bot's machine",
                         "Point ssh.key at the private key whose public half is on the node.")
    if not ssh.known_hosts.is_file():
        return NodeError(config.name, f"the known_hosts file {ssh.known_hosts} does not exist",
                         f"Record the node's host key once from a trusted network (`ssh {ssh.user}@"
                         f"{ssh.host}`, checking the fingerprint) or point ssh.known_hosts at yours")
    return None


def _is_known(known_hosts: Path, host: str, port: int) -> bool:
    return bool(asyncssh.read_known_hosts(str(known_hosts)).match(host, host, port)[0])


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _remove_socket_dir(path: str) -> None:
    for name in os.listdir(path):
        os.unlink(os.path.join(path, name))
    os.rmdir(path)
