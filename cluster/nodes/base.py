"""The contract every node driver fulfils: run a command, drive the Docker engine, reach the API."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Sequence
from dataclasses import dataclass

from cluster.config import NodeConfig
from cluster.nodes.docker_engine import DockerEngine

READ_LIMIT = 32_768  # bytes of a file read on a node: /proc/meminfo is ~1.5 KB
STREAM_CHUNK = 65_536  # at most this much of a streamed command's output is read at a time
OUTPUT_TAIL = 4_096  # of a command whose output is handed on as it comes, what the result keeps


async def handed_on(chunks: AsyncIterable[str], output: Callable[[str], None] | None) -> str:
    """A command's output handed to `output` as it comes; its last OUTPUT_TAIL characters."""
    tail = ""
    async for chunk in chunks:
        if output is not None:
            output(chunk)
        tail = (tail + chunk)[-OUTPUT_TAIL:]
    return tail


@dataclass(frozen=True)
class FileBytes:
    """Some bytes of a file on a node, and the whole file's size (a symlink followed)."""

    data: bytes
    size: int


@dataclass(frozen=True)
class CommandResult:
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


class NodeConnection(ABC):
    """An open connection to one node; opened once per operation and always closed."""

    def __init__(self, config: NodeConfig, docker: DockerEngine, connect_s: float):
        self.config = config
        self.docker = docker
        self.connect_s = connect_s

    @property
    def name(self) -> str:
        return self.config.name

    @abstractmethod
    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        hang_up: bool = False,
        output: Callable[[str], None] | None = None,
    ) -> CommandResult:
        """Run a command on the node (not in a container). argv is quoted by the driver.
        NodeTimedOut after `timeout`; NodeUnreachable when it cannot run at all. `hang_up`: the
        command ends (SIGHUP) when the call is cancelled or times out, also one that writes
        nothing (over SSH: it runs on a terminal, and sshd hangs it up when the channel closes;
        its stderr then comes in stdout). `output`: stdout is handed to it chunk by chunk as
        the command prints it, and the result keeps only its last OUTPUT_TAIL characters (and
        stderr's)."""

    @abstractmethod
    def stream(self, argv: Sequence[str], *, timeout: float) -> AsyncGenerator[str, None]:
        """What a long-running command on the node (not in a container) prints, as it prints it,
        in chunks, until it exits (over SSH on a terminal: stderr comes in stdout, lines may end
        in \\r\\n). `timeout` bounds starting it; the command is stopped when the reader stops.
        NodeUnreachable when it cannot run or the connection breaks."""

    @abstractmethod
    async def read_file(self, path: str, *, timeout: float, limit: int = READ_LIMIT) -> str:
        """The first `limit` bytes of a file on the node (not in a container), read afresh on
        each call (for /proc and /sys files) without starting a process on the node.
        FileUnreadable when it does not exist or may not be read; NodeTimedOut after `timeout`."""

    async def home_dir(self, *, timeout: float) -> str:
        """The login user's home directory on the node ("" if it has none)."""
        return (await self.run(["printenv", "HOME"], timeout=timeout)).stdout.strip()

    @abstractmethod
    async def read_bytes(self, path: str, *, timeout: float, offset: int, length: int) -> FileBytes:
        """Up to `length` bytes of a file on the node from `offset` (fewer at its end), and its
        size, without starting a process on the node; the file is opened for this read alone.
        FileUnreadable when it does not exist or may not be read; NodeTimedOut after `timeout`."""

    @abstractmethod
    async def api_base_url(self, port: int) -> str:
        """A URL on this machine that reaches `port` on the node's loopback."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close the Docker client and the transport."""


async def node_home(node: NodeConnection, timeout: float) -> str:
    """The SSH user's home on the node: where a mount's `~` points (root's when it has none)."""
    return await node.home_dir(timeout=timeout) or "/root"
