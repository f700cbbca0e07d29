"""The SSH driver: asyncssh to the node, its Docker socket forwarded over that connection."""

from __future__ import annotations

import asyncio
import os
import shlex
import tempfile
import time
from collections.abc import AsyncGenerator, Callable, Sequence

import asyncssh

from cluster.config import NodeConfig
from cluster.errors import NodeError
from cluster.nodes.base import (
    READ_LIMIT,
    STREAM_CHUNK,
    CommandResult,
    FileBytes,
    NodeConnection,
    handed_on,
)
from cluster.nodes.docker_engine import DockerEngine
from cluster.nodes.seam import command_errors, file_errors, ssh_login_errors


class SSHNode(NodeConnection):
    def __init__(
        self,
        config: NodeConfig,
        docker: DockerEngine,
        connect_s: float,
        connection: asyncssh.SSHClientConnection,
        socket_dir: str,
    ):
        super().__init__(config, docker, connect_s)
        self.connection = connection
        self._socket_dir = socket_dir
        self._api_urls: dict[int, str] = {}
        # One SFTP session per connection and one handle per file read, kept open: each read
        # is then a single SFTP READ at offset 0 (one round trip, no process started on the
        # node; /proc and /sys files are generated afresh by a read from their start).
        self._sftp: asyncssh.SFTPClient | None = None
        self._files: dict[str, asyncssh.SFTPClientFile] = {}
        self._opening = asyncio.Lock()

    @classmethod
    async def connect(
        cls, config: NodeConfig, *, timeout: float, call_timeout: float, via: SSHNode | None = None
    ) -> SSHNode:
        started = time.monotonic()
        connection = await _open_ssh(config, timeout=timeout, via=via)
        socket_dir = tempfile.mkdtemp(prefix=f"spark-bot-{config.name}-")
        try:
            local_socket = os.path.join(socket_dir, "docker.sock")
            with command_errors(config.name, ["forward the Docker socket"], timeout):
                await connection.forward_local_path(local_socket, config.docker_socket)
            docker = await DockerEngine.open(
                config, f"unix://{local_socket}", connect_timeout=timeout, call_timeout=call_timeout
            )
        except BaseException:
            connection.close()
            _remove_socket_dir(socket_dir)
            raise
        return cls(config, docker, time.monotonic() - started, connection, socket_dir)

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        hang_up: bool = False,
        output: Callable[[str], None] | None = None,
    ) -> CommandResult:
        with command_errors(self.name, argv, timeout):
            async with asyncio.timeout(timeout):
                process = await self.connection.create_process(
                    shlex.join(argv), term_type="dumb" if hang_up else None, errors="replace"
                )
                # asyncssh's own run() leaves the channel open when it is cancelled or times
                # out: closing it is what hangs up a command on a terminal (and frees the channel)
                try:
                    stdout, stderr = await asyncio.gather(
                        _output(process.stdout, output), _output(process.stderr, None)
                    )
                    completed = await process.wait()
                finally:
                    process.close()
        status = completed.exit_status
        return CommandResult(status if status is not None else -1, stdout, stderr)

    async def stream(self, argv: Sequence[str], *, timeout: float) -> AsyncGenerator[str, None]:
        with command_errors(self.name, argv, timeout):
            async with asyncio.timeout(timeout):
                # On a terminal: sshd hangs the command up when the reader closes the channel
                # (without one, a quiet command would outlive it until it next writes).
                process = await self.connection.create_process(
                    shlex.join(argv), term_type="dumb", errors="replace"
                )
        try:
            with command_errors(self.name, argv, timeout):
                while chunk := await process.stdout.read(STREAM_CHUNK):
                    yield chunk
        finally:
            process.close()

    async def read_file(self, path: str, *, timeout: float, limit: int = READ_LIMIT) -> str:
        try:
            with file_errors(self.name, path, timeout):
                async with asyncio.timeout(timeout):
                    handle = await self._handle(path)
                    data = await handle.read(limit, 0)
        except NodeError:
            self._files.pop(path, None)
            raise
        return _text(data)

    async def home_dir(self, *, timeout: float) -> str:
        # The SFTP server starts in the login's home directory: asked over the SFTP session the
        # reads use, it costs a round trip instead of a shell started on the node (~0.2 s).
        with file_errors(self.name, "the home directory", timeout):
            async with asyncio.timeout(timeout):
                sftp = await self._sftp_client()
                return await sftp.realpath(".")

    async def read_bytes(self, path: str, *, timeout: float, offset: int, length: int) -> FileBytes:
        with file_errors(self.name, path, timeout):
            async with asyncio.timeout(timeout):
                sftp = await self._sftp_client()
                # the default block size: a long read is split into parallel requests
                async with sftp.open(path, "rb") as handle:
                    attrs = await handle.stat()
                    data = await handle.read(length, offset) if length else b""
        return FileBytes(data if isinstance(data, bytes) else data.encode(), attrs.size or 0)

    async def _sftp_client(self) -> asyncssh.SFTPClient:
        async with self._opening:
            if self._sftp is None:
                self._sftp = await self.connection.start_sftp_client()
            return self._sftp

    async def _handle(self, path: str) -> asyncssh.SFTPClientFile:
        sftp = await self._sftp_client()
        async with self._opening:
            if path not in self._files:
                # block_size 0: one READ request of the asked size, not parallel blocks
                self._files[path] = await sftp.open(path, "rb", block_size=0)
            return self._files[path]

    async def api_base_url(self, port: int) -> str:
        if port not in self._api_urls:
            with command_errors(self.name, [f"forward port {port}"], self.docker.call_timeout):
                listener = await self.connection.forward_local_port(
                    "127.0.0.1", 0, "127.0.0.1", port
                )
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
        # The node never gets the bot's agent, whatever an OpenSSH config says; such a config
        # is read only when the node's config names one.
        agent_forwarding=False,
        config=[str(ssh.config_file)] if ssh.config_file else None,
    )
    if ssh.key is not None:
        options["client_keys"] = [str(ssh.key)]
    missing = await asyncio.to_thread(_missing_local_file, config)
    if missing is not None:
        raise missing
    async with ssh_login_errors(config, where, timeout):
        connection = await asyncssh.connect(ssh.host, **options)
    _read_in_small_pieces(connection)
    return connection


# asyncio reads up to 256 KiB from a socket at once, and asyncssh decrypts and passes on all of
# it in one callback: in a log flood that held the event loop for up to 50 ms of CPU a read and
# kept the bot's memory 40-120 MiB up after it (docs/performance.md, "Cost while waiting").
SSH_READ_BYTES = 32 * 1024


def _read_in_small_pieces(connection: asyncssh.SSHClientConnection) -> None:
    """Have the connection's socket read at most SSH_READ_BYTES at a time (a connection
    tunnelled through a jump host reads from a channel, which has no such size)."""
    transport = getattr(connection, "_transport", None)
    if transport is not None and hasattr(transport, "max_size"):
        transport.max_size = SSH_READ_BYTES


def _missing_local_file(config: NodeConfig) -> NodeError | None:
    ssh = config.ssh
    assert ssh is not None
    if ssh.key is not None and not ssh.key.is_file():
        return NodeError(
            config.name,
            f"the SSH key {ssh.key} does not exist on the bot's machine",
            "Point ssh.key at the private key whose public half is on the node.",
        )
    if not ssh.known_hosts.is_file():
        return NodeError(
            config.name,
            f"the known_hosts file {ssh.known_hosts} does not exist",
            f"Record the node's host key once from a trusted network (`ssh {ssh.user}@"
            f"{ssh.host}`, checking the fingerprint) or point ssh.known_hosts at yours",
        )
    return None


async def _output(stream: asyncssh.SSHReader[str], output: Callable[[str], None] | None) -> str:
    """What `stream` says: without `output`, all of it; with it, handed on as it comes, and its
    last OUTPUT_TAIL characters (as the local driver's)."""
    if output is None:
        return await stream.read()

    async def texts() -> AsyncGenerator[str, None]:
        while chunk := await stream.read(STREAM_CHUNK):
            yield chunk

    return await handed_on(texts(), output)


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _remove_socket_dir(path: str) -> None:
    for name in os.listdir(path):
        os.unlink(os.path.join(path, name))
    os.rmdir(path)
