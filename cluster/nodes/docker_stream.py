"""A container's log stream as Docker sends it, decoded a read at a time.

Without a TTY, Docker multiplexes stdout and stderr: each frame is an 8-byte header (the
stream, three zero bytes, the payload's length, big-endian) and the payload, one frame per log
line. aiodocker's reader awaits twice per frame (header, payload) and hands on one line at a
time: at a flood's 100,000 lines a second that was a third of the bot's CPU. Here each read
(whatever has arrived, as much as aiohttp buffers) gives one text: the payloads of every frame
it holds, joined. Only a header cut by a read is held over, so memory stays bounded however
long a frame claims to be.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncGenerator

import aiohttp

from cluster.nodes.seam import stream_ends_when_cut

HEADER_BYTES = 8


class Demultiplexer:
    """Frames in, payloads out, whatever the cut between reads."""

    def __init__(self) -> None:
        self._header = bytearray()
        self._left = 0  # payload bytes of the current frame still to come

    def feed(self, data: bytes) -> bytes:
        payloads = []
        at, size = 0, len(data)
        while at < size:
            if self._left:
                piece = data[at : at + self._left]
                payloads.append(piece)
                self._left -= len(piece)
                at += len(piece)
                continue
            need = HEADER_BYTES - len(self._header)
            self._header += data[at : at + need]
            at += need
            if len(self._header) == HEADER_BYTES:
                self._left = int.from_bytes(self._header[4:], "big")
                self._header.clear()
        return b"".join(payloads)


async def log_texts(response: aiohttp.ClientResponse, *, tty: bool) -> AsyncGenerator[str, None]:
    """The log's text, one piece per read of the response (lines may span pieces)."""
    demultiplexer = None if tty else Demultiplexer()
    # a character cut between reads is completed by the next; bytes that are not UTF-8 are
    # dropped, as the log's other control bytes are cleaned
    decoder = codecs.getincrementaldecoder("utf-8")(errors="ignore")
    with stream_ends_when_cut():
        async for data in response.content.iter_any():
            payload = data if demultiplexer is None else demultiplexer.feed(data)
            if text := decoder.decode(payload):
                yield text
    if rest := decoder.decode(b"", final=True):
        yield rest
