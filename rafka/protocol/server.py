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
  * At most `max_connections` connections are open; one more is closed at once
    (Kafka's max.connections, enforced by its Acceptor). A connection with no
    request for `connections_max_idle_ms` is closed (connections.max.idle.ms).
  * stop() closes the listening socket and every connection, and returns once
    their tasks have ended.

Callers: the replica, coordinator and controller actors (one server each, on their
event loop); tests drive it on loopback with any Kafka client.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket

from rafka.protocol.dispatch import Dispatcher
from rafka.protocol.errors import ProtocolError
from rafka.protocol.framing import SOCKET_REQUEST_MAX_BYTES_DEFAULT, FrameDecoder
from rafka.protocol.pipelining import admitting

logger = logging.getLogger(__name__)

READ_CHUNK_BYTES = 65_536
MAX_CONNECTIONS_DEFAULT = 1_000
MAX_PIPELINED_REQUESTS_DEFAULT = 5   # Kafka's max.in.flight.requests.per.connection
CONNECTIONS_MAX_IDLE_MS_DEFAULT = 600_000       # Kafka's connections.max.idle.ms


class ProtocolServer:
    def __init__(self, dispatcher: Dispatcher, *, host: str = "0.0.0.0", port: int = 0,
                 socket_request_max_bytes: int = SOCKET_REQUEST_MAX_BYTES_DEFAULT,
                 max_connections: int = MAX_CONNECTIONS_DEFAULT,
                 connections_max_idle_ms: int = CONNECTIONS_MAX_IDLE_MS_DEFAULT,
                 max_pipelined_requests: int = MAX_PIPELINED_REQUESTS_DEFAULT) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {max_connections}")
        if connections_max_idle_ms <= 0:
            raise ValueError(f"connections_max_idle_ms must be positive, not {connections_max_idle_ms}")
        self.dispatcher = dispatcher
        self.host = host
        self.requested_port = port
        self.socket_request_max_bytes = socket_request_max_bytes
        self.max_connections = max_connections
        self.connections_max_idle_s = connections_max_idle_ms / 1000
        if max_pipelined_requests < 1:
            raise ValueError(f"max_pipelined_requests must be at least 1, not {max_pipelined_requests}")
        self.max_pipelined_requests = max_pipelined_requests
        self._server: asyncio.Server | None = None
        self._connections: dict[str, asyncio.Task] = {}
        self._connection_numbers = itertools.count()
        self.refused_connections = 0
        self.closed_for_bad_input = 0

    @property
    def port(self) -> int:
        """The port listened on (the OS's choice when 0 was asked for)."""
        if self._server is None:
            raise RuntimeError("the server is not started")
        return self._server.sockets[0].getsockname()[1]

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self) -> int:
        """Listen; returns the port."""
        self._server = await asyncio.start_server(self._accept, self.host, self.requested_port,
                                                  reuse_address=True, limit=READ_CHUNK_BYTES)
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        tasks = list(self._connections.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= self.max_connections:
            self.refused_connections += 1
            writer.close()
            return
        connection_id = self._connection_id(writer)
        self._connections[connection_id] = asyncio.current_task()
        try:
            await self._serve(connection_id, reader, writer)
        except ProtocolError as error:
            self.closed_for_bad_input += 1
            logger.info("closing connection %s: %s", connection_id, error)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass   # the client went away
        except asyncio.CancelledError:
            pass   # stop()
        except Exception:   # a handler's bug: this connection only
            logger.exception("closing connection %s after an unexpected error", connection_id)
        finally:
            del self._connections[connection_id]
            writer.close()

    async def _serve(self, connection_id: str, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        """Read frames and start each request's task, in order; a writer task sends
        the answers in the same order. A failure in either ends the connection."""
        decoder = FrameDecoder(socket_request_max_bytes=self.socket_request_max_bytes)
        answers: asyncio.Queue = asyncio.Queue()   # started requests, in order; at most `slots` of them
        slots = asyncio.Semaphore(self.max_pipelined_requests)
        writing = asyncio.create_task(self._write_answers(answers, writer, slots))
        try:
            while True:
                reading = asyncio.ensure_future(asyncio.wait_for(reader.read(READ_CHUNK_BYTES),
                                                                 self.connections_max_idle_s))
                await asyncio.wait({reading, writing}, return_when=asyncio.FIRST_COMPLETED)
                if writing.done():
                    reading.cancel()
                    return writing.result()   # raises what ended the writer
                try:
                    chunk = reading.result()
                except asyncio.TimeoutError:
                    logger.debug("closing idle connection %s", connection_id)
                    return
                if not chunk:   # the client closed its side: answer what it sent, then close
                    answers.put_nowait(None)
                    return await writing
                for frame in decoder.feed(chunk):
                    if slots.locked():   # max_pipelined_requests unanswered: wait for one (or a failure)
                        slot = asyncio.ensure_future(slots.acquire())
                        await asyncio.wait({slot, writing}, return_when=asyncio.FIRST_COMPLETED)
                        if writing.done():
                            slot.cancel()
                            return writing.result()
                    else:
                        await slots.acquire()   # free: taken at once, no task on the hot path
                    admitted = asyncio.get_running_loop().create_future()
                    request = asyncio.create_task(self._answer(frame, connection_id, admitted))
                    answers.put_nowait(request)
                    await asyncio.wait({admitted, request, writing}, return_when=asyncio.FIRST_COMPLETED)
                    if writing.done():
                        return writing.result()
                    if request.done() and request.exception() is not None:
                        raise request.exception()   # bad bytes or a handler's bug: close
        finally:
            writing.cancel()
            while not answers.empty():
                answers.get_nowait().cancel()

    async def _answer(self, frame, connection_id: str, admitted: asyncio.Future):
        admitting(admitted)
        try:
            return await self.dispatcher.dispatch(frame, connection_id=connection_id)
        finally:
            if not admitted.done():
                admitted.set_result(None)

    @staticmethod
    async def _write_answers(answers: asyncio.Queue, writer: asyncio.StreamWriter,
                             slots: asyncio.Semaphore) -> None:
        while True:
            request = await answers.get()
            if request is None:
                return
            response = await request
            if response is not None:
                writer.write(response)
                await writer.drain()   # a client that does not read stops being read
            slots.release()

    def _connection_id(self, writer: asyncio.StreamWriter) -> str:
        """Kafka's form: local address:port-remote address:port-index."""
        local = writer.get_extra_info("sockname") or ("?", 0)
        remote = writer.get_extra_info("peername") or ("?", 0)
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return f"{local[0]}:{local[1]}-{remote[0]}:{remote[1]}-{next(self._connection_numbers)}"
