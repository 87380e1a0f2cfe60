"""A client's connection to one Kafka node: typed request in, typed response out.

Invariants: requests go out in the order `request` is called and the server
answers in that order (Kafka's per-connection guarantee), so responses are matched
to a FIFO of pending requests and checked by correlation id; a mismatch, a closed
socket or a timeout fails every pending request with a retriable NetworkException
and closes the connection (it is not reusable after that). At most
`max_in_flight_requests` are outstanding (Kafka's
max.in.flight.requests.per.connection); a further `request` waits for a slot.
A request whose type Kafka answers with nothing (Produce with acks=0) is sent
with `expect_response=False`.

Callers: client.network (every rafka client and actor that sends requests), tests.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import struct
from typing import Any

from rafka.protocol.entities import load_response_schema
from kio.serial import entity_reader

from rafka.core.errors import NetworkException
from rafka.protocol.framing import SIZE_PREFIX_BYTES, decode_response_header, pack_request_header
from rafka.protocol.hot_writers import body_pieces

_SIZE = struct.Struct(">i")
# The StreamReader's buffer limit. At asyncio's default (64 KiB) the reader paused
# and resumed the socket every 128 KiB of a frame, a dozen times per 1 MB fetch
# answer: 1.7-1.9 ms for a 1 MB fetch on loopback, 0.9-1.2 ms with this limit (a
# frame is read whole either way; this only stops the stop-and-go).
READ_BUFFER_LIMIT_BYTES = 8 << 20


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, client_id: str,
                 request_timeout_ms: int, max_in_flight_requests: int) -> None:
        self._reader = reader
        self._writer = writer
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        self._slots = asyncio.Semaphore(max_in_flight_requests)
        self._correlation_ids = itertools.count()
        # (correlation id, response type, future) in send order
        self._pending: collections.deque = collections.deque()
        self._receiver = asyncio.get_running_loop().create_task(self._receive())
        self._failure: NetworkException | None = None

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str = "rafka", request_timeout_ms: int = 30_000,
                   max_in_flight_requests: int = 5) -> Connection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, limit=READ_BUFFER_LIMIT_BYTES), request_timeout_ms / 1000)
        except (OSError, asyncio.TimeoutError) as error:
            raise NetworkException(f"could not connect to {host}:{port}: {error}") from None
        return cls(reader, writer, client_id=client_id, request_timeout_ms=request_timeout_ms,
                   max_in_flight_requests=max_in_flight_requests)

    @property
    def closed(self) -> bool:
        return self._failure is not None

    async def request(self, body: Any, *, expect_response: bool = True, timeout_ms: int | None = None) -> Any:
        """Send one request (a kio request entity); its response entity, or None.
        `timeout_ms`: this request's own limit (a JoinGroup parks up to the rebalance
        timeout), else the connection's request timeout. Frames go out in call
        order: each is queued on the transport synchronously, before any await."""
        timeout_s = self.request_timeout_s if timeout_ms is None else timeout_ms / 1000
        async with self._slots:
            if self._failure is not None:
                raise self._failure
            correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
            frame = self._frame(body, correlation_id)
            loop = asyncio.get_running_loop()
            if expect_response:
                future = loop.create_future()
                response_type = load_response_schema(body.__api_key__, body.__version__)
                self._pending.append((correlation_id, response_type, future))
            self._writer.write(frame)
            try:
                await self._writer.drain()
            except ConnectionError as error:
                self._fail(NetworkException(f"connection lost: {error}"))
            if not expect_response:
                return None
            # One timer, not wait_for (a task per request, and in Python 3.11 it can
            # swallow a cancellation). A caller cancelled while waiting cancels
            # `future` with it: the answer, or the connection's failure, is then
            # dropped, never left unretrieved.
            timer = loop.call_later(timeout_s, self._timed_out, future, correlation_id, timeout_s)
            try:
                return await future
            finally:
                timer.cancel()

    def _timed_out(self, future: asyncio.Future, correlation_id: int, timeout_s: float) -> None:
        if not future.done():
            self._fail(NetworkException(f"no response to correlation id {correlation_id} within {timeout_s} s"))
            if not future.done():   # no longer pending (its answer was being read): it fails too
                future.set_exception(self._failure)

    async def close(self) -> None:
        self._fail(NetworkException("connection closed"))
        self._receiver.cancel()
        await asyncio.gather(self._receiver, return_exceptions=True)

    def _frame(self, body: Any, correlation_id: int) -> bytes:
        header = pack_request_header(header_version=body.__header_schema__.__version__, api_key=body.__api_key__,
                                     api_version=body.__version__, correlation_id=correlation_id,
                                     client_id=self.client_id)
        pieces = body_pieces(body)
        return b"".join((_SIZE.pack(len(header) + sum(map(len, pieces))), header, *pieces))

    async def _receive(self) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await self._reader.readexactly(SIZE_PREFIX_BYTES))
                frame = await self._reader.readexactly(size)
                if not self._pending:
                    raise NetworkException("a response with no request pending")
                correlation_id, response_type, future = self._pending.popleft()
                try:
                    header_version = response_type.__header_schema__.__version__
                    header, offset = decode_response_header(frame, header_version=header_version)
                    if header.correlation_id != correlation_id:
                        raise NetworkException(f"correlation id {header.correlation_id} in a response, "
                                               f"{correlation_id} expected")
                    body, _ = entity_reader(response_type)(frame, offset)
                except Exception as error:   # this request's answer is unreadable: it fails with the connection
                    if not future.done():
                        future.set_exception(error if isinstance(error, NetworkException) else NetworkException(
                            f"unreadable response: {type(error).__name__}: {error}"))
                    raise
                if not future.done():
                    future.set_result(body)
        except asyncio.CancelledError:
            raise
        except NetworkException as error:
            self._fail(error)
        except (ConnectionError, asyncio.IncompleteReadError) as error:
            self._fail(NetworkException(f"connection lost: {type(error).__name__}"))
        except Exception as error:   # an unreadable response
            self._fail(NetworkException(f"unreadable response: {type(error).__name__}: {error}"))

    def _fail(self, error: NetworkException) -> None:
        if self._failure is None:
            self._failure = error
        while self._pending:
            _, _, future = self._pending.popleft()
            if not future.done():
                future.set_exception(self._failure)
        self._writer.close()
