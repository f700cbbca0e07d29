"""The error seam: the one place where asyncssh, aiohttp and aiodocker errors are caught.

Every remote call of the drivers runs inside one of these context managers, which turn the
libraries' exceptions into `cluster.errors`' tree (as httpx maps its transport's errors in one
place), so nothing above the drivers catches a library error or tests a status code.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import aiodocker
import aiohttp
import asyncssh

from cluster.config import NodeConfig
from cluster.errors import (
    ContainerMissing,
    DockerRefused,
    DockerUnavailable,
    FileUnreadable,
    HostKeyMismatch,
    ImageMissing,
    NodeError,
    NodeTimedOut,
    NodeUnreachable,
)

AIODOCKER_CANNOT_CONNECT = 900  # aiodocker's status when the engine's socket does not answer
_DOCKER_ERRORS = (aiodocker.DockerError, aiohttp.ClientError, OSError, TimeoutError)
_SSH_ERRORS = (asyncssh.Error, OSError, TimeoutError)


@contextmanager
def stream_ends_when_cut() -> Iterator[None]:
    """A followed stream whose connection drops just ends, as aiodocker's own readers do; the
    caller looks at the container to say why."""
    try:
        yield
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.IncompleteReadError):
        return


def docker_error(
    node: str,
    doing: str,
    error: BaseException,
    *,
    timeout: float | None,
    container: str | None = None,
    image: str | None = None,
    stalled: bool = False,
) -> NodeError:
    """What a library error met while `doing` something with `node`'s Docker engine means;
    `stalled`: the timeout bounds a stream's silence, not the whole call."""
    if isinstance(error, TimeoutError) and stalled:
        return NodeTimedOut(
            node,
            f"the Docker engine moved no byte for {timeout:g} s while {doing}",
            f"check that dockerd on {node} is responsive (`docker info`, `journalctl -u docker`) "
            f"and that its disk is not full (`df -h /var/lib/docker`); if the node is merely slow, "
            "raise timeouts.image_stall in the config",
        )
    if isinstance(error, TimeoutError):
        return NodeTimedOut(
            node,
            f"the Docker engine did not finish {doing} within {timeout:g} s",
            f"check that dockerd on {node} is responsive (`docker info`, `journalctl -u docker`); "
            "if the node is merely slow, raise timeouts.docker in the config",
        )
    if isinstance(error, aiodocker.DockerError) and error.status != AIODOCKER_CANNOT_CONNECT:
        if error.status == 404 and container is not None:
            return ContainerMissing(node, container)
        if error.status == 404 and image is not None:
            return ImageMissing(node, image)
        return DockerRefused(
            node,
            f"the Docker engine refused {doing}: {error.message}",
            f"check `docker info` and `journalctl -u docker` on {node}, then try again",
            status=error.status,
            message=str(error.message),
        )
    return DockerUnavailable(
        node,
        f"lost the connection to the Docker engine while {doing} ({_reason(error)})",
        f"check `systemctl status docker` and SSH on {node}, then try again",
    )


@contextmanager
def docker_errors(
    node: str,
    doing: str,
    *,
    timeout: float | None,
    container: str | None = None,
    image: str | None = None,
    stalled: bool = False,
) -> Iterator[None]:
    """Run a Docker API call about `container` or `image`; its library errors leave as
    NodeErrors (see `docker_error`)."""
    try:
        yield
    except _DOCKER_ERRORS as error:
        raise docker_error(
            node,
            doing,
            error,
            timeout=timeout,
            container=container,
            image=image,
            stalled=stalled,
        ) from error


def engine_unavailable(config: NodeConfig, error: BaseException) -> DockerUnavailable:
    return DockerUnavailable(
        config.name,
        f"the Docker engine at {config.docker_socket} does not answer ({_reason(error)})",
        "Is dockerd running on the node (`systemctl status docker`), and may this user "
        "use its socket (member of the docker group)?",
    )


@contextmanager
def opening_engine(config: NodeConfig) -> Iterator[None]:
    """Open a node's engine: any failure, a refusal included, is an engine that does not answer."""
    try:
        yield
    except _DOCKER_ERRORS as error:
        raise engine_unavailable(config, error) from error


def command_error(
    node: str, argv: Sequence[str], timeout: float, error: BaseException
) -> NodeError:
    """A command that could not run on the node (a timeout, a broken connection)."""
    if isinstance(error, TimeoutError):
        return NodeTimedOut(
            node,
            f"`{argv[0]}` did not finish within {timeout:g} s",
            f"check that {node} is responsive (load, disk, sshd) and try again",
        )
    return NodeUnreachable(
        node,
        f"`{argv[0]}` could not run ({_reason(error)})",
        f"check that {node} is responsive (load, disk, sshd) and try again",
    )


@contextmanager
def command_errors(node: str, argv: Sequence[str], timeout: float) -> Iterator[None]:
    """Run a command on a node (over SSH, or locally); failures to run it leave as NodeErrors."""
    try:
        yield
    except _SSH_ERRORS as error:
        raise command_error(node, argv, timeout, error) from error


_UNREADABLE = (
    asyncssh.SFTPNoSuchFile,
    asyncssh.SFTPPermissionDenied,
    FileNotFoundError,
    PermissionError,
    IsADirectoryError,
)


@contextmanager
def file_errors(node: str, path: str, timeout: float) -> Iterator[None]:
    """Read a file on a node (over SFTP, or locally): a missing or forbidden file is
    FileUnreadable; a timeout or a broken connection as for a command."""
    try:
        yield
    except _UNREADABLE as error:
        raise FileUnreadable(
            node,
            f"cannot read {path} ({_reason(error)})",
            f"check that {path} exists on {node} and that the SSH user may read it",
        ) from error
    except _SSH_ERRORS as error:
        raise command_error(node, [f"read {path}"], timeout, error) from error


AGENT_TIMEOUT_S = 5.0  # asking the local SSH agent which keys it holds


async def agent_keys_text() -> str:
    """What the SSH agent offered for a login with no ssh.key: no agent, an agent with no
    key, or its keys."""
    socket = os.environ.get("SSH_AUTH_SOCK")
    if not socket:
        return "no key: no ssh.key is set and there is no SSH agent (SSH_AUTH_SOCK is not set)"
    try:
        async with asyncio.timeout(AGENT_TIMEOUT_S):
            async with asyncssh.connect_agent(socket) as agent:
                keys = await agent.get_keys()
    except (OSError, asyncssh.Error, TimeoutError) as error:
        return f"no key: the SSH agent at {socket} does not answer ({_reason(error)})"
    if not keys:
        return f"no key: the SSH agent at {socket} holds none (`ssh-add -l`)"
    return f"the SSH agent's {len(keys)} key(s) (at {socket})"


@asynccontextmanager
async def ssh_login_errors(
    config: NodeConfig, where: str, connect_timeout: float
) -> AsyncIterator[None]:
    """Open an SSH connection; a refused host key, login or route leaves as a NodeError."""
    ssh = config.ssh
    assert ssh is not None
    try:
        yield
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
        key = ssh.key or await agent_keys_text()
        raise NodeUnreachable(
            config.name,
            f"SSH login as {where} was refused with {key}",
            "Set ssh.key, or load a key into the agent (`ssh-add`), and add its public key to "
            f"~{ssh.user}/.ssh/authorized_keys on the node."
            if not ssh.key
            else f"Add its public key to ~{ssh.user}/.ssh/authorized_keys on the node.",
        ) from exc
    except TimeoutError as exc:
        raise NodeUnreachable(
            config.name,
            f"sshd at {where} did not answer within {connect_timeout:g} s (timeouts.connect)",
            "Is the node up and sshd running? If it is only slow to answer (busy, far away), "
            f"raise timeouts.connect. Try `ssh -p {ssh.port} {ssh.user}@{ssh.host}` from the "
            "bot's machine.",
        ) from exc
    except _SSH_ERRORS as exc:
        raise NodeUnreachable(
            config.name,
            f"cannot reach sshd at {where} ({_reason(exc)})",
            "Is the node up and sshd running? "
            f"Try `ssh -p {ssh.port} {ssh.user}@{ssh.host}` from the bot's machine.",
        ) from exc


def _is_known(known_hosts: Path, host: str, port: int) -> bool:
    return bool(asyncssh.read_known_hosts(str(known_hosts)).match(host, host, port)[0])


def _reason(error: BaseException) -> str:
    return (
        getattr(error, "strerror", None)
        or getattr(error, "reason", None)
        or str(error)
        or type(error).__name__
    )
