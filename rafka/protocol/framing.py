"""Frames and headers of the Kafka wire protocol.

A frame is an int32 big-endian size, then that many bytes: a request (header, body)
or a response (header, body). Invariants:
  * FrameDecoder yields exactly the frames that were fed, in order, whatever the
    chunking; it holds at most one partial frame (<= socket_request_max_bytes + 4
    bytes plus the chunk being fed), and after an InvalidFrameSize it refuses all
    further input (the connection is to be closed, as Kafka's SocketServer does).
  * A request header is v1 (api_key, api_version, correlation_id, client_id) or v2
    (v1 plus tagged fields, for flexible versions); client_id is always a legacy
    nullable string (RequestHeader.json says so). A response header is v0
    (correlation_id) or v1 (plus tagged fields).

Callers: the actor's asyncio server (FrameDecoder, encode_frame), dispatch (the
header codecs), and clients and tests (the encoders).

The headers are kio's generated types (kio.schema.request_header.v1/v2,
kio.schema.response_header.v0/v1), read with kio's reader and packed here with
`struct` (kio's generic writer was a visible part of every request's cost). Request
headers v2 are read as v1 plus a tagged-field section skipped here, because kio's
reader raises on any tag it does not know while Kafka's RequestHeader.parse keeps
unknown tags and goes on.
"""

from __future__ import annotations

import ctypes
import functools
import struct

from kio.schema.request_header.v1 import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2 import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0 import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1 import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader
from kio.static.primitive import i16, i32

from rafka.protocol.bounds import KIO_DECODE_ERRORS, DeclaredSizeTooLarge, skip_tagged_fields
from rafka.protocol.errors import InvalidFrameSize, MalformedRequestHeader

_REQUEST_HEADER_FIXED = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_NULL_STRING = _I16.pack(-1)
_NO_TAGS = b"\x00"

SOCKET_REQUEST_MAX_BYTES_DEFAULT = 104_857_600     # Kafka's socket.request.max.bytes
SIZE_PREFIX_BYTES = 4
_SIZE = struct.Struct(">i")
_API_KEY_AND_VERSION = struct.Struct(">hh")

RequestHeader = RequestHeaderV1 | RequestHeaderV2
ResponseHeader = ResponseHeaderV0 | ResponseHeaderV1
REQUEST_HEADER_TYPES = {1: RequestHeaderV1, 2: RequestHeaderV2}
RESPONSE_HEADER_TYPES = {0: ResponseHeaderV0, 1: ResponseHeaderV1}


def encode_frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


# glibc's malloc tuned for frames, a node's or a client's (mallopt's M_TRIM_THRESHOLD and
# M_MMAP_THRESHOLD). As it comes, a block over 128 KiB may be mmapped and unmapped
# again when freed, and the free top of the event loop thread's arena is handed
# back to the kernel: every megabyte a request or answer allocates (the frame's
# chunks and join, the records kio reads, a fetch answer's read) then faults its
# pages in afresh. A 1 MB produce to a leader took 3.56 ms end to end, 2.25 ms
# with these (one partition, R1, acks=1; a 2-core VM, where a fault costs more).
# A consumer reading 1 MB fetch answers was as slow (1.17 ms to read one answer,
# 0.10 ms tuned), so a client's connection tunes it too.
# The cost: a process keeps up to TRIM_THRESHOLD_BYTES of freed memory per arena,
# and every replica is a process (issue 27). So the memory is kept only while it
# is used: a process that went quiet gives its freed pages back once
# (`release_freed_memory`, glibc's malloc_trim, which also returns free pages
# inside an arena that the trim threshold never would). A replica does so at its
# first maintenance tick without traffic (actors.replica): measured after 100 MB
# of 256 KiB produces, 2.1-2.5 MB per replica process; and once after its start,
# traffic or not (a replica at rest held 2.4 MB that malloc_trim gave back).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_BYTES = 16 << 20
TRIM_THRESHOLD_BYTES = 64 << 20


@functools.cache
def _glibc():
    """glibc, or None where the C library is another (nothing is tuned there)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt, libc.malloc_trim   # both present: glibc
        return libc
    except (OSError, AttributeError):
        return None


@functools.cache
def tune_malloc() -> bool:
    """Once per process; False where the C library is not glibc (nothing changed)."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                                     and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))


def release_freed_memory() -> bool:
    """Give every arena's free pages back to the kernel (malloc_trim(0)); for a
    process that went quiet, never on a request's path (the next large frame
    faults its pages in again). False where the C library is not glibc."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


class FrameDecoder:
    """Incremental: feed it whatever the socket gave, get back the complete frames.

    The size check happens as soon as the 4 prefix bytes are in, before any of the
    frame is buffered, so a client cannot make the server hold more than
    socket_request_max_bytes of one frame (Kafka's NetworkReceive.readFrom)."""

    def __init__(self, *, socket_request_max_bytes: int = SOCKET_REQUEST_MAX_BYTES_DEFAULT) -> None:
        if not 0 <= socket_request_max_bytes <= 2**31 - 1:
            raise ValueError(f"socket_request_max_bytes {socket_request_max_bytes} is not an int32 >= 0")
        self.socket_request_max_bytes = socket_request_max_bytes
        # Bytes of an unfinished frame, as the chunks came: joined once, when the frame
        # is complete (a 1 MB produce arrives in dozens of reads; copying what was
        # buffered at each one made the decoder a third of a leader's busy time).
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._needed = SIZE_PREFIX_BYTES     # bytes that complete the frame in progress (or its prefix)
        self._failed: InvalidFrameSize | None = None

    @property
    def buffered_bytes(self) -> int:
        return self._buffered

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[memoryview]:
        """The frames completed by `chunk` (without their size prefix), as read-only
        views of the bytes received."""
        if self._failed is not None:
            raise self._failed
        if not chunk:
            return []
        self._chunks.append(bytes(chunk))
        self._buffered += len(chunk)
        if self._buffered < self._needed:
            return []
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        view = memoryview(data)   # frames are views of it: a 1 MB produce is not copied again
        frames: list[memoryview] = []
        position = 0
        buffered = len(data)
        while buffered - position >= SIZE_PREFIX_BYTES:
            (frame_bytes,) = _SIZE.unpack_from(data, position)
            if frame_bytes < 0 or frame_bytes > self.socket_request_max_bytes:
                self._chunks, self._buffered = [], 0
                self._failed = InvalidFrameSize(
                    f"Invalid receive (size = {frame_bytes}"
                    + (")" if frame_bytes < 0 else f" larger than {self.socket_request_max_bytes})"))
                raise self._failed
            end = position + SIZE_PREFIX_BYTES + frame_bytes
            if end > buffered:
                self._needed = end - position
                break
            frames.append(view[position + SIZE_PREFIX_BYTES:end])
            position = end
        else:
            self._needed = SIZE_PREFIX_BYTES
        rest = data[position:] if position else data
        self._chunks = [rest] if rest else []
        self._buffered = len(rest)
        return frames


def peek_api_key_and_version(frame: bytes | memoryview) -> tuple[int, int]:
    """The first two fields of every request header, read before its version is
    known (Kafka's RequestHeader.parse does the same)."""
    if len(frame) < _API_KEY_AND_VERSION.size:
        raise MalformedRequestHeader(f"Error parsing request header: {len(frame)} bytes")
    return _API_KEY_AND_VERSION.unpack_from(frame, 0)


def decode_request_header(frame: bytes | memoryview, *, header_version: int) -> tuple[RequestHeader, int]:
    """(header, offset of the body). Raises MalformedRequestHeader on bad bytes."""
    if header_version not in REQUEST_HEADER_TYPES:
        raise ValueError(f"request header version {header_version} is not 1 or 2")
    try:
        fixed, offset = entity_reader(RequestHeaderV1)(frame, 0)
        if header_version == 1:
            return fixed, offset
        offset = skip_tagged_fields(frame, offset, len(frame))
    except (DeclaredSizeTooLarge, *KIO_DECODE_ERRORS) as error:
        raise MalformedRequestHeader(f"Error parsing request header v{header_version}: {error}") from None
    return RequestHeaderV2(request_api_key=fixed.request_api_key,
                           request_api_version=fixed.request_api_version,
                           correlation_id=fixed.correlation_id, client_id=fixed.client_id), offset


def encode_request_header(header: RequestHeader) -> bytes:
    return pack_request_header(header_version=type(header).__version__, api_key=header.request_api_key,
                               api_version=header.request_api_version, correlation_id=header.correlation_id,
                               client_id=header.client_id)


def pack_request_header(*, header_version: int, api_key: int, api_version: int, correlation_id: int,
                        client_id: str | None) -> bytes:
    """A request header v1 (api key, version, correlation id, client id as a legacy
    nullable string) or v2 (and an empty tagged-field section), packed directly:
    every request a client sends starts with one (the bytes kio writes)."""
    fixed = _REQUEST_HEADER_FIXED.pack(api_key, api_version, correlation_id)
    if client_id is None:
        client = _NULL_STRING
    else:
        data = client_id.encode()
        client = _I16.pack(len(data)) + data
    return fixed + client + (_NO_TAGS if header_version >= 2 else b"")


def request_header(*, header_version: int, api_key: int, api_version: int,
                   correlation_id: int, client_id: str | None) -> RequestHeader:
    return REQUEST_HEADER_TYPES[header_version](
        request_api_key=i16(api_key), request_api_version=i16(api_version),
        correlation_id=i32(correlation_id), client_id=client_id)


def encode_response_header(*, header_version: int, correlation_id: int) -> bytes:
    """v0: the correlation id; v1: and an empty tagged-field section (the bytes kio writes)."""
    return _I32.pack(correlation_id) + (_NO_TAGS if header_version >= 1 else b"")


def decode_response_header(frame: bytes | memoryview, *, header_version: int) -> tuple[ResponseHeader, int]:
    """(header, offset of the body); kio's own reader (responses are ours or a
    broker's, and a v1 response header defines no tags)."""
    return entity_reader(RESPONSE_HEADER_TYPES[header_version])(frame, 0)
