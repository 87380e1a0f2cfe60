"""rafka's connections to Kafka nodes: one Connection per node endpoint, opened on
first use, with Kafka's reconnect backoff.

`NodeConnections` is the asyncio core: it lives on one event loop (an actor's,
or a client's own). `ClientNetwork` runs it on an event loop of its own on a
daemon thread, for the blocking clients: requests submitted from any thread are
answered as concurrent.futures.Future.

Kafka's NetworkClient is the model:
  * one connection per node, opened on first use; a request waits for it;
  * a failed connection (refused, reset, timed out) fails every request on it with
    NETWORK_EXCEPTION (retriable: the caller refreshes metadata and retries), and
    the node is not dialled again before `reconnect_backoff_ms`, doubling up to
    `reconnect_backoff_max_ms` while it keeps failing (reconnect.backoff.ms and
    reconnect.backoff.max.ms);
  * requests to one node go out in the order they were submitted, at most
    `max_in_flight_requests` unanswered at a time: each holds its node's turn
    (`_turns`, a FIFO lock) from the call until its frame is written, the wait for
    a connection being opened included. Without the turn a request submitted just
    as the connection came up took it at once, ahead of those woken by the open:
    an idempotent producer's fourth batch was written before its first, which the
    leader then refused OUT_OF_ORDER_SEQUENCE_NUMBER (`rafka demo`, 1 run in 4).

Invariants: connections are touched only on the loop's thread; `close()` fails
what is pending and stops the thread; nothing here retries (the callers hold the
one retry rule, protocol.retry).

Callers: ClientNetwork: client.producer (Produce), client.consumer (Fetch), the
group and admin requests (client.membership, client.admin). NodeConnections:
actors.coordinator (its __consumer_offsets writes and loading) and
actors.replica (the follower's fetch loop). `login_options`:
actors.cluster_credential and spark_bridge.cluster_access.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import uvloop

from rafka.core.errors import NetworkException
from rafka.protocol import tls as tls_context
from rafka.protocol.connection import Connection, SaslLogin

Address = tuple   # (host, port), or (host, port, channel): a connection of its own to that node
SECURITY_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")


@dataclasses.dataclass(frozen=True)
class ClientSecurity:
    """How a client's connections are made: over TLS (`tls`) or not, logged in
    (`sasl`) or not."""
    sasl: SaslLogin | None = None
    tls: ssl.SSLContext | None = None


def client_security(security_protocol: str = "PLAINTEXT", sasl_mechanism: str | None = None,
                    sasl_plain_username: str | None = None, sasl_plain_password: str | None = None,
                    ssl_cafile: str | None = None, ssl_check_hostname: bool = True) -> ClientSecurity:
    """A client's security options as kafka-python names them: PLAINTEXT, SSL (TLS,
    the listener's certificate checked against `ssl_cafile`, else the system's
    roots), SASL_PLAINTEXT or SASL_SSL (a SCRAM-SHA-256 or -512 login)."""
    if security_protocol not in SECURITY_PROTOCOLS:
        raise ValueError(f"security_protocol must be one of {SECURITY_PROTOCOLS}, not {security_protocol!r}")
    uses_tls = security_protocol in ("SSL", "SASL_SSL")
    if not uses_tls and ssl_cafile is not None:
        raise ValueError(f"ssl_cafile given with security_protocol {security_protocol}: use SSL or SASL_SSL")
    tls = tls_context.client_context(ssl_cafile, check_hostname=ssl_check_hostname) if uses_tls else None
    if not security_protocol.startswith("SASL_"):
        if sasl_mechanism or sasl_plain_username or sasl_plain_password:
            raise ValueError(f"SASL options given with security_protocol {security_protocol}: "
                             "use SASL_PLAINTEXT or SASL_SSL")
        return ClientSecurity(None, tls)
    if not sasl_mechanism or sasl_plain_username is None or sasl_plain_password is None:
        raise ValueError(f"{security_protocol} needs sasl_mechanism, sasl_plain_username and sasl_plain_password")
    return ClientSecurity(SaslLogin(sasl_mechanism, sasl_plain_username, sasl_plain_password), tls)



def login_options(login: SaslLogin) -> dict:
    """Producer/Consumer options (kafka-python's names, read back by `client_security`)
    that log in with `login`, over TLS where this node's settings say so: how rafka's
    own clients log in as the cluster (actors.cluster_credential, spark_bridge)."""
    options = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": login.mechanism,
               "sasl_plain_username": login.username, "sasl_plain_password": login.password}
    certfile, _, cafile = tls_context.node_tls_settings()
    if certfile:
        options.update(security_protocol="SASL_SSL", ssl_cafile=cafile, ssl_check_hostname=False)
    return options

class NodeConnections:
    """Connections to nodes, on the event loop that uses them (touch from that loop only)."""

    def __init__(self, *, client_id: str, request_timeout_ms: int = 30_000, max_in_flight_requests: int = 5,
                 reconnect_backoff_ms: int = 50, reconnect_backoff_max_ms: int = 1_000,
                 sasl: SaslLogin | Callable[[], Awaitable[SaslLogin | None]] | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.client_id = client_id
        self.tls = tls     # protocol.tls.client_context: every connection is TLS
        # Every connection logs in with it (a refusal is SaslAuthenticationFailed, not
        # retried); a coroutine function is awaited at each connection
        # (actors.cluster_credential.cluster_login: a Ray call the first time).
        self.sasl = sasl
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight_requests = max_in_flight_requests
        self.reconnect_backoff_s = reconnect_backoff_ms / 1000
        self.reconnect_backoff_max_s = reconnect_backoff_max_ms / 1000
        self._connections: dict[Address, Connection] = {}
        self._opening: dict[Address, asyncio.Future] = {}
        self._turns: dict[Address, asyncio.Lock] = {}   # the order requests to a node are written in
        self._failures: dict[Address, tuple[int, float]] = {}   # address -> (failures in a row, not before)

    async def request(self, address: Address, request: Any, *, expect_response: bool = True,
                      timeout_ms: int | None = None) -> Any:
        """Send `request` (a kio request entity) to the node at `address`: its
        response entity (None when no response is expected); NetworkException if
        the connection could not be made or was lost, or no answer came within
        `timeout_ms` (default request_timeout_ms)."""
        address = tuple(address)
        turn = self._turns.get(address)
        if turn is None:
            turn = self._turns[address] = asyncio.Lock()
        await turn.acquire()
        written = False

        def next_turn() -> None:   # this request's frame is on the connection (or it failed)
            nonlocal written
            if not written:
                written = True
                turn.release()
        try:
            connection = await self._connection(address)
            try:
                return await connection.request(request, expect_response=expect_response, timeout_ms=timeout_ms,
                                                on_written=next_turn)
            except NetworkException:
                self._lost(address, connection)
                raise
        finally:
            next_turn()

    def backing_off(self, address: Address) -> bool:
        """Whether a connection to `address` failed lately and would not be dialled
        before its reconnect backoff ends (Kafka's "blacked out" node). A hint,
        readable from any thread: metadata lookups try other nodes first."""
        failure = self._failures.get(tuple(address))
        return failure is not None and failure[1] > time.monotonic()

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        opening, self._opening = list(self._opening.values()), {}
        for task in opening:
            task.cancel()
        await asyncio.gather(*(c.close() for c in connections), *opening, return_exceptions=True)

    async def _connection(self, address: Address) -> Connection:
        connection = self._connections.get(address)
        if connection is not None and not connection.closed:
            return connection
        opening = self._opening.get(address)
        if opening is None:
            opening = self._opening[address] = asyncio.get_running_loop().create_task(self._open(address))
            opening.add_done_callback(lambda _: self._opening.pop(address, None))
        return await asyncio.shield(opening)

    async def _open(self, address: Address) -> Connection:
        failures, not_before = self._failures.get(address, (0, 0.0))
        wait_s = not_before - time.monotonic()
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        login = await self.sasl() if callable(self.sasl) else self.sasl
        try:
            connection = await Connection.open(*address[:2], client_id=self.client_id,
                                               request_timeout_ms=self.request_timeout_ms,
                                               max_in_flight_requests=self.max_in_flight_requests, sasl=login,
                                               tls=self.tls)
        except NetworkException:
            backoff_s = min(self.reconnect_backoff_max_s, self.reconnect_backoff_s * (2 ** failures))
            self._failures[address] = (failures + 1, time.monotonic() + backoff_s)
            raise
        self._failures.pop(address, None)
        self._connections[address] = connection
        return connection

    def _lost(self, address: Address, connection: Connection) -> None:
        if self._connections.get(address) is connection:
            del self._connections[address]


def coordinator_channel(address: Address) -> Address:
    """Where group requests to the coordinator at `address` go: a connection of
    their own, as Kafka's clients keep (the Java consumer names the coordinator
    node Integer.MAX_VALUE - id; librdkafka has a logical coordinator broker). A
    broker answers a connection's requests in order, so a heartbeat or a commit
    never waits behind a Fetch parked on the same broker for fetch.max.wait.ms."""
    return (*address[:2], "coordinator")


class ClientNetwork:
    """NodeConnections on an event loop of its own, for callers on other threads."""

    def __init__(self, *, client_id: str, request_timeout_ms: int = 30_000, max_in_flight_requests: int = 5,
                 reconnect_backoff_ms: int = 50, reconnect_backoff_max_ms: int = 1_000,
                 sasl: SaslLogin | Callable[[], Awaitable[SaslLogin | None]] | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.client_id = client_id
        self.nodes = NodeConnections(client_id=client_id, request_timeout_ms=request_timeout_ms,
                                     max_in_flight_requests=max_in_flight_requests,
                                     reconnect_backoff_ms=reconnect_backoff_ms,
                                     reconnect_backoff_max_ms=reconnect_backoff_max_ms, sasl=sasl, tls=tls)
        self._loop = uvloop.new_event_loop()   # as Ray's actors run theirs (see pyproject)
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"rafka-network-{client_id}",
                                        daemon=True)
        self._thread.start()
        self._closed = False

    @property
    def thread(self) -> threading.Thread:
        """The thread the loop runs on: a blocking wait for an answer there would wait on itself."""
        return self._thread

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop `nodes` lives on: a caller may run its own callbacks there."""
        return self._loop

    def submit(self, address: Address, request: Any, *, expect_response: bool = True,
               timeout_ms: int | None = None) -> concurrent.futures.Future:
        """Send `request` (a kio request entity) to the node at `address`; a future of
        its response entity (None when no response is expected), or of the
        NetworkException that ended it (`timeout_ms`: see NodeConnections.request)."""
        if self._closed:
            raise RuntimeError("the client is closed")
        return asyncio.run_coroutine_threadsafe(
            self.nodes.request(address, request, expect_response=expect_response, timeout_ms=timeout_ms),
            self._loop)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _close(self) -> None:
        """Every connection closed, then every task still on the loop ended (a loop
        closed with pending tasks warns "Task was destroyed but it is pending")."""
        await self.nodes.close()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
