"""Docker's multiplexed log stream read a read at a time (cluster.nodes.docker_stream): every
frame's payload, whatever the cuts between reads, and text decoded across them."""

from __future__ import annotations

import itertools

import aiohttp
from hypothesis import given
from hypothesis import strategies as st

from cluster.nodes.docker_stream import Demultiplexer, log_texts


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
