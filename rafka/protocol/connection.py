"""A client's connection to one Kafka node: typed request in, typed response out.

Invariants: requests go out in the order `request` is called and the server
answers in that order (Kafka's per-connection guarantee), so responses are matched
to a FIFO of pending requests and checked by correlation id; a mismatch, a closed
socket or a timeout fails every pending request with a retriable NetworkException
and closes the connection (it is not reusable after that). At most
`max_in_flight_requests` are outstanding (Kafka's
max.in.flight.requests.per.connection); a further `request` waits for a slot.
A request whose type Kafka answers with nothing (Produce with acks=0) is sent
with `expect_response=False`. With a SaslLogin, `open` logs in (SCRAM) before it
returns: no request of the caller's goes out on a connection that has not.

Callers: protocol.network (every rafka client and actor that sends requests), tests.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import ssl
import struct
from collections.abc import Callable
from typing import Any

from rafka.protocol.entities import load_response_schema
from kio.serial import entity_reader

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2 import request as sasl_authenticate_v2
from kio.schema.sasl_handshake.v1 import request as sasl_handshake_v1

from rafka.core.errors import (NetworkException, SaslAuthenticationFailed, SslAuthenticationFailed,
                               UnsupportedSaslMechanism)
from rafka.core.scram import ScramClient, check_mechanism
from rafka.protocol.errors import ProtocolError
from rafka.protocol.framing import FrameDecoder, decode_response_header, pack_request_header, tune_malloc
from rafka.protocol.hot_writers import body_pieces

_SIZE = struct.Struct(">i")
# A client reads whatever size of answer it asked for (Kafka's clients read
# responses with no size limit; fetch.max.bytes bounds what a broker sends).
RESPONSE_MAX_BYTES = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class SaslLogin:
    """A client's SASL/SCRAM credentials (kafka-python's sasl_mechanism,
    sasl_plain_username, sasl_plain_password)."""
    mechanism: str
    username: str
    password: str = dataclasses.field(repr=False)

    def __post_init__(self) -> None:
        check_mechanism(self.mechanism)
        if not self.username:
            raise ValueError("a SASL login needs a username")


class Connection(asyncio.Protocol):
    """asyncio.Protocol callbacks, not streams, as the server's connections: an
    answer is matched and its future resolved in data_received, with no reader task
    woken per answer (the streams version's readexactly wake-ups were a tenth of a
    follower's fetch loop)."""

    def __init__(self, *, client_id: str, request_timeout_ms: int, max_in_flight_requests: int) -> None:
        tune_malloc()   # once per process: answers of a megabyte, read without faulting their pages in afresh
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        self._slots = asyncio.Semaphore(max_in_flight_requests)
        self._correlation_ids = itertools.count()
        # (correlation id, response type, future) in send order
        self._pending: collections.deque = collections.deque()
        self._decoder = FrameDecoder(socket_request_max_bytes=RESPONSE_MAX_BYTES)
        self._transport: asyncio.Transport | None = None
        self._writable: asyncio.Future | None = None   # while the transport's buffer is full
        self._closed = asyncio.get_running_loop().create_future()
        self._failure: NetworkException | None = None

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str = "rafka", request_timeout_ms: int = 30_000,
                   max_in_flight_requests: int = 5, sasl: SaslLogin | None = None,
                   tls: ssl.SSLContext | None = None, connect_timeout_ms: int | None = None) -> Connection:
        """Connected (over TLS with `tls`: SslAuthenticationFailed if its handshake
        fails), and, with `sasl`, logged in (SaslAuthenticationFailed if refused).
        The connect waits `connect_timeout_ms` (default: `request_timeout_ms`)."""
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(loop.create_connection(
                lambda: cls(client_id=client_id, request_timeout_ms=request_timeout_ms,
                            max_in_flight_requests=max_in_flight_requests), host, port,
                ssl=tls, server_hostname=host if tls is not None else None),
                (request_timeout_ms if connect_timeout_ms is None else connect_timeout_ms) / 1000)
        except ssl.SSLError as error:   # before OSError, whose subclass it is: no retry clears it
            raise SslAuthenticationFailed(f"TLS handshake with {host}:{port} failed: {error}") from None
        except (OSError, asyncio.TimeoutError) as error:
            raise NetworkException(f"could not connect to {host}:{port}: {error}") from None
        if sasl is not None:
            try:
                await connection._log_in(sasl)
            except BaseException:
                await connection.close()
                raise
        return connection

    async def _log_in(self, login: SaslLogin) -> None:
        """SaslHandshake v1, then SCRAM's messages in SaslAuthenticate v2 (Kafka's
        SaslClientAuthenticator): the server's signature is checked too."""
        handshake = await self.request(sasl_handshake_v1.SaslHandshakeRequest(mechanism=login.mechanism))
        if handshake.error_code != ErrorCode.none:
            raise UnsupportedSaslMechanism(f"the node does not enable {login.mechanism}: it offers "
                                           f"{list(handshake.mechanisms)}")
        scram = ScramClient(login.mechanism, login.username, login.password)
        server_first = await self._authenticate(scram.first_message())
        scram.check_server_final(await self._authenticate(scram.final_message(server_first)))

    async def _authenticate(self, auth_bytes: bytes) -> bytes:
        answer = await self.request(sasl_authenticate_v2.SaslAuthenticateRequest(auth_bytes=auth_bytes))
        if answer.error_code != ErrorCode.none:
            raise SaslAuthenticationFailed(answer.error_message or answer.error_code.name)
        return bytes(answer.auth_bytes)

    @property
    def closed(self) -> bool:
        return self._failure is not None

    async def request(self, body: Any, *, expect_response: bool = True, timeout_ms: int | None = None,
                      on_written: Callable[[], None] | None = None) -> Any:
        """Send one request (a kio request entity); its response entity, or None.
        `timeout_ms`: this request's own limit (a JoinGroup parks up to the rebalance
        timeout), else the connection's request timeout. Frames go out in call
        order: each is queued on the transport synchronously once it has a slot
        (the slots are FIFO); `on_written()` then, when it is."""
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
            self._transport.write(frame)
            if on_written is not None:   # its place on the connection is taken
                on_written()
            if self._writable is not None:   # the node is not reading: wait until it does
                await asyncio.shield(self._writable)
            if not expect_response:
                if self._failure is not None:
                    raise self._failure
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

    async def relay(self, frame, *, expect_response: bool = True,
                    on_written: Callable[[], None] | None = None) -> memoryview | None:
        """Forward a request frame as a client sent it (without its size prefix)
        under this connection's next correlation id; the response frame (without
        its size prefix; its first four bytes, the correlation id, are the caller's
        to restore), or None. No timer: the request may wait as long as its client
        allowed it (a Fetch's max_wait, a JoinGroup's rebalance timeout); the
        connection's loss fails it. A caller cancelled while waiting abandons it:
        its answer is read and dropped. (protocol.edge forwards this way.)"""
        async with self._slots:
            if self._failure is not None:
                raise self._failure
            correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
            frame = memoryview(frame)
            future = None
            if expect_response:
                future = asyncio.get_running_loop().create_future()
                self._pending.append((correlation_id, None, future))
            self._transport.write(b"".join((_SIZE.pack(len(frame)), frame[:4], _SIZE.pack(correlation_id),
                                            frame[8:])))
            if self._writable is not None:
                await asyncio.shield(self._writable)
            if on_written is not None:   # in order on this connection: what follows may go
                on_written()
            if future is None:
                if self._failure is not None:
                    raise self._failure
                return None
            return await future

    @property
    def unanswered(self) -> int:
        """Requests sent and not answered, abandoned ones included."""
        return len(self._pending)

    @property
    def waited_on(self) -> bool:
        """Some request sent here still has a caller waiting for its answer."""
        return any(not future.done() for _, _, future in self._pending)

    def _timed_out(self, future: asyncio.Future, correlation_id: int, timeout_s: float) -> None:
        if not future.done():
            self._fail(NetworkException(f"no response to correlation id {correlation_id} within {timeout_s} s"))
            if not future.done():   # no longer pending (its answer was being read): it fails too
                future.set_exception(self._failure)

    async def close(self) -> None:
        self._fail(NetworkException("connection closed"))
        await asyncio.shield(self._closed)

    def _frame(self, body: Any, correlation_id: int) -> bytes:
        header = pack_request_header(header_version=body.__header_schema__.__version__, api_key=body.__api_key__,
                                     api_version=body.__version__, correlation_id=correlation_id,
                                     client_id=self.client_id)
        pieces = body_pieces(body)
        return b"".join((_SIZE.pack(len(header) + sum(map(len, pieces))), header, *pieces))

    # --- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as error:
            self._fail(NetworkException(f"unreadable response: {error}"))
            return
        for frame in frames:
            if not self._pending:
                self._fail(NetworkException("a response with no request pending"))
                return
            correlation_id, response_type, future = self._pending.popleft()
            if response_type is None:   # relayed: the frame as it came
                if _SIZE.unpack_from(frame)[0] != correlation_id:
                    self._fail(NetworkException(f"correlation id {_SIZE.unpack_from(frame)[0]} in a relayed "
                                                f"response, {correlation_id} expected"))
                    return
                if not future.done():
                    future.set_result(frame)
                continue
            try:
                header, offset = decode_response_header(frame, header_version=response_type.__header_schema__.__version__)
                if header.correlation_id != correlation_id:
                    raise NetworkException(f"correlation id {header.correlation_id} in a response, "
                                           f"{correlation_id} expected")
                body, _ = entity_reader(response_type)(frame, offset)
            except Exception as error:   # this request's answer is unreadable: it fails with the connection
                failure = error if isinstance(error, NetworkException) else NetworkException(
                    f"unreadable response: {type(error).__name__}: {error}")
                if not future.done():
                    future.set_exception(failure)
                self._fail(failure)
                return
            if not future.done():
                future.set_result(body)

    def eof_received(self) -> bool:
        self._fail(NetworkException("connection lost: the node closed it"))
        return False

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def connection_lost(self, error: Exception | None) -> None:
        self._fail(NetworkException(f"connection lost: {type(error).__name__ if error else 'closed'}"))
        self.resume_writing()
        if not self._closed.done():
            self._closed.set_result(None)

    def _fail(self, error: NetworkException) -> None:
        if self._failure is None:
            self._failure = error
        while self._pending:
            _, _, future = self._pending.popleft()
            if not future.done():
                future.set_exception(self._failure)
        if self._transport is not None:
            self._transport.close()
