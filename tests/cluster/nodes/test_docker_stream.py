"""Docker's multiplexed log stream read a read at a time (cluster.nodes.docker_stream): every
frame's payload, whatever the cuts between reads, and text decoded across them."""

from __future__ import annotations

import asyncio
import itertools

import aiodocker
import aiohttp
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from cluster.nodes.docker_stream import Demultiplexer, log_texts
from testkit.docker_standin import docker_standin
from tests.lab.helpers import wait_log_line


def frame(payload: bytes, stream: int = 1) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def cut(data: bytes, at: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(p % (len(data) + 1) for p in at)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@given(
    st.lists(st.tuples(st.binary(max_size=40), st.sampled_from([1, 2])), max_size=12),
    st.lists(st.integers(min_value=0), max_size=20),
)
def test_the_payloads_whatever_the_cuts_between_reads(frames, cuts):
    wire = b"".join(frame(payload, stream) for payload, stream in frames)
    demultiplexer = Demultiplexer()
    out = b"".join(demultiplexer.feed(chunk) for chunk in cut(wire, cuts))
    assert out == b"".join(payload for payload, _ in frames)


def test_a_read_of_many_frames_is_one_piece_and_an_empty_frame_nothing():
    demultiplexer = Demultiplexer()
    assert demultiplexer.feed(frame(b"a\n") + frame(b"") + frame(b"b\n", 2)) == b"a\n" + b"b\n"


def test_a_long_frame_passes_through_as_it_comes_nothing_held_but_a_header():
    demultiplexer = Demultiplexer()
    assert demultiplexer.feed(bytes([1, 0, 0, 0]) + (2**31).to_bytes(4, "big") + b"abc") == b"abc"
    assert demultiplexer.feed(b"x" * 1000) == b"x" * 1000
    assert len(demultiplexer._header) == 0


class Content:
    def __init__(self, reads: list[bytes], then: Exception | None = None):
        self.reads, self.then = reads, then

    async def iter_any(self):
        for data in self.reads:
            yield data
        if self.then is not None:
            raise self.then


class Response:
    def __init__(self, content: Content):
        self.content = content


async def texts(reads: list[bytes], *, tty: bool = False, then=None) -> list[str]:
    return [t async for t in log_texts(Response(Content(reads, then)), tty=tty)]  # type: ignore[arg-type]


async def test_a_character_cut_between_reads_is_whole_and_bad_bytes_are_dropped():
    wire = frame("größe ✓\n".encode()) + frame(b"\xffok\n")
    assert "".join(await texts(cut(wire, [11, 12, 13]))) == "größe ✓\nok\n"


async def test_a_tty_stream_has_no_frames():
    assert await texts([b"plain ", b"text\n"], tty=True) == ["plain ", "text\n"]


async def test_a_dropped_connection_ends_the_stream_with_what_came():
    reads = [frame(b"one\n"), frame(b"tw")[:-1]]
    assert "".join(await texts(reads, then=aiohttp.ClientPayloadError("cut"))) == "one\nt"


async def test_a_lab_log_follow_stopped_at_its_line_gives_its_connection_back(tmp_path):
    """The lab's wait_log_line stops at its needle while the log goes on: the connection of
    its follow is given back at once, never left to the collector (aiodocker's own
    `log(follow=True)` keeps it, closed or not: a ResourceWarning whenever the collector runs).
    With a pool of one connection, the next call gets it, or waits for ever."""
    following = asyncio.Event()

    async def engine(request: web.Request) -> web.StreamResponse:
        if request.path.endswith("/json"):
            return web.json_response({"Id": "c" * 64, "Config": {"Tty": False}})
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(frame(b"starting\n") + frame(b"LAB-READY\n"))
        following.set()
        await asyncio.Event().wait()  # the log goes on: nothing more, no end
        return response

    async with docker_standin(tmp_path / "docker.sock", engine) as socket:
        connector = aiohttp.UnixConnector(path=str(socket), limit=1)
        docker = aiodocker.Docker(url="http://localhost", connector=connector)
        try:
            probe = docker.containers.container("lab-probe")
            assert await wait_log_line(docker, probe, "LAB-READY", timeout=5) == [
                "starting",
                "LAB-READY",
            ]
            assert following.is_set()
            async with asyncio.timeout(5):
                assert (await docker.version())["ApiVersion"], "the pool's one connection"
        finally:
            await docker.close()
            await connector.close()
