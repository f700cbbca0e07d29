"""The contract every node driver fulfils: run a command, drive the Docker engine, reach the API."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import aiodocker

from cluster.config import NodeConfig
from cluster.errors import NodeError


@dataclass(frozen=True)
class CommandResult:
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


def command_failed(node: str, argv: Sequence[str], timeout: float, error: BaseException) -> NodeError:
    """A command that could not run on the node (a timeout, a broken connection) as a NodeError."""
    if isinstance(error, TimeoutError):
        problem = f"`{argv[0]}` did not finish within {timeout:g} s"
    else:
        problem = f"`{argv[0]}` could not run ({type(error).__name__}: {error})"
    return NodeError(node, problem, f"check that {node} is responsive (load, disk, sshd) and try again")


class NodeConnection(ABC):
    """An open connection to one node; opened once per operation and always closed."""

    def __init__(self, config: NodeConfig, docker: aiodocker.Docker, connect_s: float):
        self.config = config
        self.docker = docker
        self.connect_s = connect_s

    @property
    def name(self) -> str:
        return self.config.name

    @abstractmethod
    async def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """Run a command on the node (not in a container). argv is quoted by the driver."""

    @abstractmethod
    async def api_base_url(self, port: int) -> str:
        """A URL on this machine that reaches `port` on the node's loopback."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close the Docker client and the transport."""
