"""The asyncio server each actor runs: TCP connections in, frames to the
dispatcher, responses out.

Invariants:
  * Requests of a connection take effect in the order received and are answered
    in that order. A request holds its connection until it is answered (Kafka's
    SocketServer.Processor mutes a channel from a receive until its response is
    sent) unless it releases it earlier with pipelining.admit_next() (a Produce
    that has appended and waits for replication): then the next request is read
    and started while it waits. At most `max_pipelined_requests` requests of one
    connection are started and unanswered; more wait in the client's socket and
    our read buffer. So a connection holds at most that many parked requests, one
    read chunk and one partial frame (<= socket_request_max_bytes).
  * Bad bytes on a connection (ProtocolError: frame size, header, unknown API or
    version, body) close that connection only; nothing is answered, as Kafka does.
    A handler's own failure closes the connection too (logged with its traceback):
    the client reconnects and retries, and no other connection notices.
  * A connection is admitted or not on its accepted socket, before anything is
    read from it or a TLS handshake begins (Kafka's Acceptor decides before the
    Processor's handshake): a flood of connections costs no handshakes.
    At most `max_connections` connections are open or in their TLS handshake;
    one more is closed at once (Kafka's max.connections, enforced by its
    Acceptor). A connection with no request for `connections_max_idle_ms` is
    closed (connections.max.idle.ms).
  * On a client listener (`ip_connection_rates`: a broker's), a connection that
    takes its IP over its connection_creation_rate (KIP-612, the quotas of the
    dispatcher's image) is held as a bare socket, never read, and closed once
    its throttle time has passed, even if its client closed it first (Kafka's
    Acceptor holds it as a DelayedCloseSocket); at most `max_connections` are held.
  * Each request is dispatched with its connection's Session: the client's
    address, and the principal of its SASL login (protocol.sasl), ANONYMOUS
    until then or without one.
  * A connection the dispatcher mutes (`channel_mutes`: a throttled client,
    protocol.throttling) starts no request until the mute's deadline; its
    answers already due still go out (KIP-219: answer first, then mute), and
    reading pauses once a frame waits, as for any frame not started.
  * stop() closes the listening socket, every connection, those in their TLS
    handshake and those held, and returns once their tasks have ended.
  * Answers that are ready together go out in one write (a parked Produce's
    acks complete together when the HW moves); a client that stops reading
    stops being read (the transport's write buffer pauses reading). An answer
    is written from its request's done callback, not by the request itself:
    writing each follower's fetch answer the moment it was built (so the second
    of two fetches one append woke was built after the first went out) made a
    sync acks=all R3 produce slower, p50 1.0-1.36 ms -> 1.45-1.55 ms.

Built on asyncio.Protocol callbacks, not streams: a read costs no task and no
wait, a request costs one task (its handler), and the answers are written from
its done callback. (The streams version spent most of the broker's busy time in
asyncio's task and wait machinery.) Connections come from an accept loop of its
own (`loop.sock_accept`), not `loop.create_server`: asyncio's server calls
connection_made only after the TLS handshake, and a connection let in later by
`loop.start_tls` does not work on uvloop (it hands the bytes that came with the
connection, the ClientHello, to the protocol as data, reading paused or not).

Callers: the replica, coordinator and controller actors (one server each, on their
event loop); tests drive it on loopback with any Kafka client.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import itertools
import ssl
import logging
import socket

from rafka.core.acl import user_principal
from rafka.core.client_quotas import IpConnectionRateManager
from rafka.core.clock import SystemClock
from rafka.protocol.dispatch import ANONYMOUS_SESSION, Dispatcher, Session
from rafka.protocol.errors import ProtocolError
from rafka.protocol.framing import SOCKET_REQUEST_MAX_BYTES_DEFAULT, FrameDecoder
from rafka.protocol.pipelining import admitting
from rafka.protocol.sasl import SaslGate, SaslListener


logger = logging.getLogger(__name__)

MAX_CONNECTIONS_DEFAULT = 1_000
MAX_PIPELINED_REQUESTS_DEFAULT = 5   # Kafka's max.in.flight.requests.per.connection
CONNECTIONS_MAX_IDLE_MS_DEFAULT = 600_000       # Kafka's connections.max.idle.ms
LISTEN_BACKLOG = 100            # asyncio's create_server default
ACCEPT_RETRY_DELAY_S = 1.0      # asyncio's pause after a failed accept (constants.ACCEPT_RETRY_DELAY)
_ACCEPT_PAUSE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class ProtocolServer:
    def __init__(self, dispatcher: Dispatcher, *, host: str = "0.0.0.0", port: int = 0,
                 socket_request_max_bytes: int = SOCKET_REQUEST_MAX_BYTES_DEFAULT,
                 max_connections: int = MAX_CONNECTIONS_DEFAULT,
                 connections_max_idle_ms: int = CONNECTIONS_MAX_IDLE_MS_DEFAULT,
                 max_pipelined_requests: int = MAX_PIPELINED_REQUESTS_DEFAULT,
                 sasl: SaslListener | None = None, tls: ssl.SSLContext | None = None,
                 reuse_port: bool = False, ip_connection_rates: IpConnectionRateManager | None = None,
                 clock=None) -> None:
        """`clock` (core.clock; the system's if None): what connection rates are counted by."""
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {max_connections}")
        if connections_max_idle_ms <= 0:
            raise ValueError(f"connections_max_idle_ms must be positive, not {connections_max_idle_ms}")
        if max_pipelined_requests < 1:
            raise ValueError(f"max_pipelined_requests must be at least 1, not {max_pipelined_requests}")
        self.dispatcher = dispatcher
        self.host = host
        self.requested_port = port
        self.socket_request_max_bytes = socket_request_max_bytes
        self.max_connections = max_connections
        self.connections_max_idle_s = connections_max_idle_ms / 1000
        self.max_pipelined_requests = max_pipelined_requests
        self.sasl = sasl    # None: every connection is served at once (PLAINTEXT)
        self.tls = tls      # protocol.tls.server_context: every connection is TLS (SSL, SASL_SSL)
        self.reuse_port = reuse_port   # several processes share the port (SO_REUSEPORT): a broker's network processes
        self.ip_connection_rates = ip_connection_rates   # None: no connection_creation_rate here (not a client listener)
        self.clock = clock or SystemClock()
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task | None = None
        self._handshakes: set[asyncio.Task] = set()   # admitted, the transport not made yet (TLS: its handshake)
        self._connections: dict[str, _KafkaConnection] = {}
        self._connection_numbers = itertools.count()
        self._idle_checker: asyncio.TimerHandle | None = None
        self._closing: set[asyncio.Future] = set()   # dispatchers' connection_closed, held until done
        self._held: set[socket.socket] = set()   # throttled connections until their close (at most max_connections)
        self.refused_connections = 0
        self.closed_for_bad_input = 0

    @property
    def port(self) -> int:
        """The port listened on (the OS's choice when 0 was asked for)."""
        if self._listener is None:
            raise RuntimeError("the server is not started")
        return self._listener.getsockname()[1]

    @property
    def started(self) -> bool:
        """Listening: started and not stopped."""
        return self._listener is not None

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self) -> int:
        """Listen, on one address: the first `host` resolves to ("" or None: every
        IPv4 interface); returns the port."""
        loop = asyncio.get_running_loop()
        family, kind, proto, _, address = (await loop.getaddrinfo(
            self.host or "0.0.0.0", self.requested_port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE))[0]
        listener = socket.socket(family, kind, proto)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:   # "::" is IPv6 only, as asyncio's create_server makes it
                listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if self.reuse_port:
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            listener.bind(address)
            listener.listen(LISTEN_BACKLOG)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._accepting = loop.create_task(self._accept_loop())
        self._accepting.add_done_callback(self._accepting_ended)
        self._check_idle()
        return self.port

    async def stop(self) -> None:
        if self._idle_checker is not None:
            self._idle_checker.cancel()
        if self._accepting is not None:
            self._accepting.cancel()
            await asyncio.gather(self._accepting, return_exceptions=True)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        handshakes = list(self._handshakes)
        for handshake in handshakes:
            handshake.cancel()
        await asyncio.gather(*handshakes, return_exceptions=True)
        for sock in list(self._held):
            self._release(sock)
        connections = list(self._connections.values())
        for connection in connections:
            # TLS's close waits for the peer's close_notify (up to 30 s): a stopping
            # server does not wait for its clients
            connection.abort() if self.tls is not None else connection.close()
        await asyncio.gather(*(c.closed for c in connections), return_exceptions=True)

    async def _accept_loop(self) -> None:
        """Accept until stopped. As asyncio's own server: a connection its client
        gave up before the accept is skipped; out of descriptors or buffers, it
        waits a second (retrying at once would spin), logged."""
        loop = asyncio.get_running_loop()
        listener = self._listener
        while True:
            try:
                sock, peer = await loop.sock_accept(listener)
            except (ConnectionAbortedError, ConnectionResetError, InterruptedError):
                continue
            except OSError as error:
                if error.errno not in _ACCEPT_PAUSE_ERRNOS:
                    raise
                logger.warning("accepting a connection on port %d failed, pausing %.0f s: %s",
                               listener.getsockname()[1], ACCEPT_RETRY_DELAY_S, error)
                await asyncio.sleep(ACCEPT_RETRY_DELAY_S)
                continue
            try:
                self._admit(sock, peer)
            except Exception:   # a bug deciding on one connection: that one is closed, the rest served
                logger.exception("closing a connection from %s: admitting it failed", peer)
                self._held.discard(sock)
                sock.close()

    def _accepting_ended(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:   # nothing is accepted any more: say so loudly
            logger.error("the listener on port %s stopped accepting connections",
                         self.port if self._listener is not None else self.requested_port, exc_info=task.exception())

    def _admit(self, sock: socket.socket, peer) -> None:
        """Serve, refuse (closed now) or hold (closed after its throttle time) a
        connection just accepted, on its bare socket."""
        if len(self._connections) + len(self._handshakes) >= self.max_connections:
            self.refused_connections += 1
            sock.close()
            return
        loop = asyncio.get_running_loop()
        if self.ip_connection_rates is not None and self.dispatcher.table.image is not None:
            throttle_ms = self.ip_connection_rates.throttle_time_ms(
                self.dispatcher.table.image().client_quotas, str(peer[0]) if isinstance(peer, tuple) else "",
                self.clock.monotonic_ms())
            if throttle_ms > 0:   # never read; closed when the throttle time has passed
                if len(self._held) >= self.max_connections:   # held ones bounded apart (Kafka counts them not)
                    self.refused_connections += 1
                    sock.close()
                    return
                self._held.add(sock)
                loop.call_later(throttle_ms / 1000, self._release, sock)
                return
        sock.setblocking(False)
        handshake = loop.create_task(self._connect(sock))
        self._handshakes.add(handshake)
        handshake.add_done_callback(self._handshakes.discard)

    async def _connect(self, sock: socket.socket) -> None:
        """The transport for an admitted socket: TLS's handshake first on a TLS
        listener (bounded by asyncio's handshake timeout, 60 s); a client that
        fails it is closed, as Kafka closes a channel whose handshake fails."""
        try:
            await asyncio.get_running_loop().connect_accepted_socket(lambda: _KafkaConnection(self), sock,
                                                                     ssl=self.tls)
        except (OSError, ssl.SSLError, asyncio.TimeoutError) as error:   # the transport closed the socket
            logger.debug("a connection closed before it was served: %r", error)

    def _release(self, sock: socket.socket) -> None:
        self._held.discard(sock)
        sock.close()

    def _check_idle(self) -> None:
        """Close connections with no request for connections_max_idle_ms (checked
        every quarter of it: a timer for the server, not one per connection)."""
        now = asyncio.get_running_loop().time()
        for connection in list(self._connections.values()):
            if connection.idle_since(now) > self.connections_max_idle_s:
                logger.debug("closing idle connection %s", connection.connection_id)
                connection.close()
        self._idle_checker = asyncio.get_running_loop().call_later(self.connections_max_idle_s / 4,
                                                                   self._check_idle)

    def _opened(self, connection: _KafkaConnection, transport: asyncio.Transport) -> None:
        """An admitted connection's transport is made (`_admit`): it is served."""
        connection.connection_id = self._connection_id(transport)
        self._connections[connection.connection_id] = connection

    def _closed(self, connection: _KafkaConnection) -> None:
        self._connections.pop(connection.connection_id, None)
        closing = asyncio.ensure_future(self.dispatcher.connection_closed(connection.connection_id))
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    def _connection_id(self, transport: asyncio.Transport) -> str:
        """Kafka's form: local address:port-remote address:port-index."""
        local = transport.get_extra_info("sockname") or ("?", 0)
        remote = transport.get_extra_info("peername") or ("?", 0)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return f"{local[0]}:{local[1]}-{remote[0]}:{remote[1]}-{next(self._connection_numbers)}"


class _KafkaConnection(asyncio.Protocol):
    """One client connection. State, touched only from the loop's callbacks:
    `_frames` read but not started (at most one read's worth: reading pauses while
    any wait), `_started` requests started and not yet answered, in order (at most
    max_pipelined_requests), `_holder`: the newest started request while it has
    not let the next start (pipelining.admit_next) nor been answered."""

    def __init__(self, server: ProtocolServer) -> None:
        self.server = server
        self.connection_id = ""
        self.closed: asyncio.Future = asyncio.get_running_loop().create_future()
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(socket_request_max_bytes=server.socket_request_max_bytes)
        self._frames: collections.deque = collections.deque()
        self._started: collections.deque = collections.deque()
        self._holder: asyncio.Task | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._eof = False
        self._last_request_s = asyncio.get_running_loop().time()
        self._gate = None if server.sasl is None else SaslGate(server.sasl, server.dispatcher)
        self._unmute: asyncio.TimerHandle | None = None   # set while muted with a frame waiting
        self.session = ANONYMOUS_SESSION   # who is on this connection: its address once made, its login once done

    def idle_since(self, now_s: float) -> float:
        return 0.0 if self._started or self._frames else now_s - self._last_request_s

    # --- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.server._opened(self, transport)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and peer:
            self.session = Session(self.session.principal, str(peer[0]))

    def data_received(self, data: bytes) -> None:
        self._last_request_s = asyncio.get_running_loop().time()
        try:
            self._frames.extend(self._decoder.feed(data))
        except ProtocolError as error:
            self._bad_input(error)
            return
        self._start_next()

    def eof_received(self) -> bool:
        """The client closed its side: answer what it sent, then close."""
        self._eof = True
        self._close_when_done()
        return self.server.tls is None   # keep the transport open for the answers (TLS cannot half-close)

    def pause_writing(self) -> None:   # the client is not reading its answers
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def connection_lost(self, error: Exception | None) -> None:
        """`closed` is done once every request task of the connection has ended."""
        requests = list(self._started)
        if self._unmute is not None:
            self._unmute.cancel()
        for request in requests:
            request.cancel()
        self._started.clear()
        self._frames.clear()
        self.server._closed(self)
        ended = asyncio.gather(*requests, return_exceptions=True)
        ended.add_done_callback(lambda _: self.closed.done() or self.closed.set_result(None))

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    # --- requests -------------------------------------------------------------------------

    def _start_next(self) -> None:
        """Start the read frames that may start now: in order, one at a time until
        each admits the next or is answered, at most max_pipelined_requests unanswered, none while the connection is muted."""
        mutes = self.server.dispatcher.channel_mutes
        if mutes and self._frames and self._muted(mutes):
            self._update_reading()
            return
        while self._frames and self._holder is None and len(self._started) < self.server.max_pipelined_requests:
            frame = self._frames.popleft()
            request = self._holder = asyncio.get_running_loop().create_task(self._answer(frame))
            self._started.append(request)
            request.add_done_callback(self._answered)
        self._update_reading()

    async def _answer(self, frame: bytes):
        gate = self._gate
        if gate is not None and not gate.authenticated and not await gate.waives(frame):   # SASL first (protocol.sasl)
            answer = await gate.answer(frame, self.connection_id, self.session)
            if gate.user is not None:   # logged in: every request from now on is the user's
                self.session = Session(user_principal(gate.user), self.session.client_host)
            return answer
        admitting(self._admit_next)
        return await self.server.dispatcher.dispatch(frame, connection_id=self.connection_id, session=self.session)

    def _muted(self, mutes: dict[str, float]) -> bool:
        """Whether the dispatcher mutes this connection now; if so, a timer starts
        the waiting frames at the deadline."""
        until = mutes.get(self.connection_id)
        if until is None:
            return False
        loop = asyncio.get_running_loop()
        if loop.time() >= until:
            del mutes[self.connection_id]
            return False
        if self._unmute is None:
            self._unmute = loop.call_at(until, self._unmuted)
        return True

    def _unmuted(self) -> None:
        self._unmute = None
        self._start_next()

    def _admit_next(self) -> None:
        """The newest request let the next one start (it waits for replication)."""
        self._holder = None
        self._start_next()

    def _answered(self, request: asyncio.Task) -> None:
        if request.cancelled():
            return
        if request is self._holder:
            self._holder = None
        failure = request.exception()
        if failure is not None:
            if isinstance(failure, ProtocolError):
                self._bad_input(failure)
            else:   # a handler's bug: this connection only
                logger.error("closing connection %s after an unexpected error", self.connection_id,
                             exc_info=failure)
                self.close()
            return
        ready = []
        while self._started and self._started[0].done():
            oldest = self._started[0]
            if oldest.cancelled() or oldest.exception() is not None:
                break   # its own done callback closes the connection
            response = self._started.popleft().result()
            if response is not None:
                ready.append(response)
        if ready and self._transport is not None and not self._transport.is_closing():
            self._transport.write(ready[0] if len(ready) == 1 else b"".join(ready))
        if self._gate is not None and self._gate.close_after_answer:   # a refused login: answered, then closed
            self.close()
            return
        self._start_next()
        self._close_when_done()

    def _update_reading(self) -> None:
        """Read only while nothing read waits to start and the client reads its answers."""
        if self._transport is None or self._transport.is_closing():
            return
        pause = bool(self._frames) or self._writing_paused or self._eof
        if pause and not self._reading_paused:
            self._transport.pause_reading()
        elif not pause and self._reading_paused:
            self._transport.resume_reading()
        self._reading_paused = pause

    def _close_when_done(self) -> None:
        if self._eof and not self._frames and not self._started:
            self.close()

    def _bad_input(self, error: ProtocolError) -> None:
        self.server.closed_for_bad_input += 1
        logger.info("closing connection %s: %s", self.connection_id, error)
        self.close()
