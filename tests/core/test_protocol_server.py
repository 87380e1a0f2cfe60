"""The asyncio protocol server and the client connection, on loopback: answers in
order per connection, bad bytes close only their own connection, connection and
idle bounds, and the client side's failure handling."""

import asyncio
import datetime
import socket
import struct

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from rafka.core.clock import FakeClock
from rafka.core.errors import NetworkException
from rafka.protocol.connection import Connection
from rafka.protocol.dispatch import DispatchTable, Dispatcher, Route
from rafka.protocol.handlers import api_versions
from rafka.protocol.server import ProtocolServer
from tests.core.test_protocol_dispatch import METADATA_KEY, metadata_stub, request_frame

pytestmark = pytest.mark.core

API_VERSIONS = ApiVersionsRequest(client_software_name="rafka-test", client_software_version="1.0")


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 30))


async def serving(**options) -> ProtocolServer:
    server = ProtocolServer(Dispatcher(DispatchTable([api_versions.ROUTE, *options.pop("routes", ())])),
                            host="127.0.0.1", **options)
    await server.start()
    return server


async def raw_exchange(port: int, payload: bytes) -> bytes:
    """Send bytes, read until the server closes or 2 s pass."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 2)
    finally:
        writer.close()


def test_api_versions__answered_over_tcp_with_the_table_it_serves():
    async def scenario():
        server = await serving(routes=[Route(METADATA_KEY, 10, 12, metadata_stub)])
        connection = await Connection.open("127.0.0.1", server.port)
        response = await connection.request(API_VERSIONS)
        await connection.close()
        await server.stop()
        return response
    response = run(scenario())
    assert isinstance(response, ApiVersionsResponse) and response.error_code == ErrorCode.none
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(3, 10, 12), (18, 0, 4)]


def test_pipelined_requests__answered_in_the_order_sent_though_the_first_is_slowest():
    finished = []

    async def slow_then_fast(request, context):
        await asyncio.sleep(0.3 if context.correlation_id == 0 else 0)
        finished.append(context.correlation_id)
        return await metadata_stub(request, context)

    async def scenario():
        server = await serving(routes=[Route(METADATA_KEY, 10, 12, slow_then_fast)])
        connection = await Connection.open("127.0.0.1", server.port)
        from kio.schema.metadata.v12.request import MetadataRequest
        request = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False)
        answers = await asyncio.gather(*(connection.request(request) for _ in range(4)))
        await connection.close()
        await server.stop()
        return answers
    answers = run(scenario())
    assert len(answers) == 4
    assert finished == [0, 1, 2, 3]   # one request at a time per connection, in order


def test_a_request_that_admits_the_next__the_next_starts_while_it_waits_and_answers_keep_their_order():
    """pipelining.admit_next: request 0 does its ordered part, admits the next and
    waits; requests 1 and 2 run meanwhile (1 also admits), yet the answers come
    0, 1, 2. With max_pipelined_requests=2, request 2 starts only once 0 or 1 is
    answered."""
    from rafka.protocol.pipelining import admit_next
    events = []
    release = {}

    async def admitting_handler(request, context):
        number = context.correlation_id
        events.append(f"start {number}")
        admit_next()
        release[number] = asyncio.get_running_loop().create_future()
        if number < 2:
            await release[number]
        events.append(f"end {number}")
        return await metadata_stub(request, context)

    async def scenario():
        server = await serving(routes=[Route(METADATA_KEY, 10, 12, admitting_handler)], max_pipelined_requests=2)
        connection = await Connection.open("127.0.0.1", server.port)
        from kio.schema.metadata.v12.request import MetadataRequest
        request = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False)
        answers = [asyncio.ensure_future(connection.request(request)) for _ in range(3)]
        while len(events) < 2:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        assert events == ["start 0", "start 1"]     # 1 started while 0 waits; 2 waits for a slot
        release[1].set_result(None)
        await asyncio.sleep(0.1)
        assert not answers[1].done()                # answered only after 0
        release[0].set_result(None)
        done = await asyncio.gather(*answers)
        await connection.close()
        await server.stop()
        return done
    assert len(run(scenario())) == 3
    assert events == ["start 0", "start 1", "end 1", "end 0", "start 2", "end 2"]


def ending_together(count: int, failing: int | None = None):
    """`count` requests that each admit the next and are held, then released to end
    in the same turn of the loop (request number `failing` with a handler error);
    then one more request on the same connection. Returns (each one's answer or
    error, the later one's answer or error, open connections, errors the loop's
    exception handler saw)."""
    from kio.schema.metadata.v12.request import MetadataRequest
    from rafka.protocol.pipelining import admit_next
    release = asyncio.Event()

    async def held_handler(request, context):
        admit_next()
        await release.wait()
        if context.correlation_id == failing:
            raise RuntimeError("a handler bug")
        return await metadata_stub(request, context)

    async def outcome(request):
        try:
            return await request
        except NetworkException as error:
            return error

    async def scenario():
        failures = []
        asyncio.get_running_loop().set_exception_handler(lambda _, context: failures.append(context))
        server = await serving(routes=[Route(METADATA_KEY, 10, 12, held_handler)], max_pipelined_requests=3)
        connection = await Connection.open("127.0.0.1", server.port)
        request = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False)
        together = [asyncio.ensure_future(connection.request(request)) for _ in range(count)]
        await asyncio.sleep(0.1)
        release.set()
        answers = [await outcome(r) for r in together]
        later = await outcome(connection.request(request))
        open_connections = server.connection_count
        await connection.close()
        await server.stop()
        return answers, later, open_connections, failures
    return run(scenario())


def test_pipelined_requests_finishing_together__all_answered_in_order_without_a_failure():
    """Requests that admitted the next and finish in the same turn of the loop: the
    first one's completion writes every answer that is ready, and the others'
    completions find nothing left to write (this used to fail the connection)."""
    answers, later, open_connections, failures = ending_together(3)
    assert not any(isinstance(a, Exception) for a in answers) and len(answers) == 3
    assert not isinstance(later, Exception) and open_connections == 1 and failures == []


def test_pipelined_requests_ending_together_one_failed__earlier_answer_written_then_closed():
    """Two requests that admitted the next end in the same turn of the loop, the
    second with an error: the first one's completion writes its answer and leaves
    the failed one to its own completion, which closes the connection (it used to
    take the failed one off the queue, raise in the callback and drop the first
    one's answer)."""
    (first, second), later, _, failures = ending_together(2, failing=1)
    assert not isinstance(first, Exception)
    assert isinstance(second, NetworkException) and isinstance(later, NetworkException) and failures == []


def test_bad_bytes__close_their_own_connection_only():
    async def scenario():
        server = await serving(socket_request_max_bytes=1_000)
        good = await Connection.open("127.0.0.1", server.port)
        assert (await good.request(API_VERSIONS)).error_code == ErrorCode.none
        oversized = await raw_exchange(server.port, struct.pack(">i", 1_001))
        garbage = await raw_exchange(server.port, struct.pack(">i", 3) + b"\xff\xff\xff")
        unknown_key = await raw_exchange(server.port, struct.pack(">i", 10) + request_frame(999, 0, header_version=1)[:10])
        still = await good.request(API_VERSIONS)
        closed = server.closed_for_bad_input
        await good.close()
        await server.stop()
        return oversized, garbage, unknown_key, still, closed
    oversized, garbage, unknown_key, still, closed = run(scenario())
    assert oversized == garbage == unknown_key == b""   # closed with no answer, as Kafka does
    assert still.error_code == ErrorCode.none and closed == 3


def test_a_handler_failure__closes_that_connection_and_the_server_goes_on():
    async def broken(request, context):
        raise RuntimeError("a bug")

    async def scenario():
        server = await serving(routes=[Route(METADATA_KEY, 12, 12, broken)])
        connection = await Connection.open("127.0.0.1", server.port)
        from kio.schema.metadata.v12.request import MetadataRequest
        with pytest.raises(NetworkException):
            await connection.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                     include_topic_authorized_operations=False))
        assert connection.closed
        other = await Connection.open("127.0.0.1", server.port)
        answer = await other.request(API_VERSIONS)
        await other.close()
        await server.stop()
        return answer
    assert run(scenario()).error_code == ErrorCode.none


def test_connection_bounds__one_over_max_connections_and_idle_ones_are_closed():
    async def scenario():
        server = await serving(max_connections=2, connections_max_idle_ms=300)
        first = await Connection.open("127.0.0.1", server.port)
        second = await Connection.open("127.0.0.1", server.port)
        await first.request(API_VERSIONS)
        await second.request(API_VERSIONS)
        refused = await raw_exchange(server.port, b"")
        refused_count = server.refused_connections
        await asyncio.sleep(0.6)   # idle past connections_max_idle_ms
        idle_closed = server.connection_count
        with pytest.raises(NetworkException):
            await first.request(API_VERSIONS)
        await server.stop()
        return refused, refused_count, idle_closed
    refused, refused_count, idle_closed = run(scenario())
    assert refused == b"" and refused_count == 1 and idle_closed == 0


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_tls_listener__connections_in_their_handshake_count_against_max_connections_and_stop_ends_them(
        loop_kind, tmp_path):
    """Two clients connect to a TLS listener of max_connections=2 and say nothing:
    both are in their handshake, so a third is refused at once (never handshaken);
    stop() returns at once, the two silent ones closed."""
    from rafka.protocol import tls
    from tests.tls_files import make_tls_files
    files = make_tls_files(tmp_path)

    async def scenario():
        server = await serving(max_connections=2, tls=tls.server_context(files["certfile"], files["keyfile"]))
        silent = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
        while len(server._handshakes) < 2:
            await asyncio.sleep(0.005)
        refused = await raw_exchange(server.port, b"")
        refused_count = server.refused_connections
        loop = asyncio.get_running_loop()
        stopping_s = loop.time()
        await server.stop()
        stop_s = loop.time() - stopping_s
        closed = [await asyncio.wait_for(reader.read(), 2) for reader, _ in silent]
        for _, writer in silent:
            writer.close()
        return refused, refused_count, stop_s, closed, len(server._handshakes), server.started
    import uvloop
    with asyncio.Runner(loop_factory=uvloop.new_event_loop if loop_kind == "uvloop" else None) as runner:
        refused, refused_count, stop_s, closed, handshaking, started = runner.run(asyncio.wait_for(scenario(), 30))
    assert refused == b"" and refused_count == 1
    assert stop_s < 1.0 and closed == [b"", b""] and handshaking == 0 and not started


def test_a_connection_that_fails_its_admission__is_closed__and_the_listener_serves_the_next():
    class Rates:   # the quota lookup fails once, as a bug would
        calls = 0

        def throttle_time_ms(self, *args):
            Rates.calls += 1
            if Rates.calls == 1:
                raise RuntimeError("a bug")
            return 0

    async def scenario():
        server = ProtocolServer(Dispatcher(DispatchTable([api_versions.ROUTE], image=lambda: EMPTY_IMAGE)),
                                host="127.0.0.1", ip_connection_rates=Rates())
        await server.start()
        first = await raw_exchange(server.port, b"")
        connection = await Connection.open("127.0.0.1", server.port)
        answer = await connection.request(API_VERSIONS)
        await connection.close()
        await server.stop()
        return first, answer
    from rafka.core.cluster_image import EMPTY_IMAGE
    first, answer = run(scenario())
    assert first == b"" and answer.error_code == ErrorCode.none and Rates.calls == 2


def test_stop__closes_every_connection_and_the_port():
    async def scenario():
        server = await serving()
        connection = await Connection.open("127.0.0.1", server.port)
        await connection.request(API_VERSIONS)
        port = server.port
        await server.stop()
        with pytest.raises(NetworkException):
            await connection.request(API_VERSIONS)
        with pytest.raises(NetworkException):
            await Connection.open("127.0.0.1", port)
    run(scenario())


def test_connection__a_silent_server_times_the_request_out_and_fails_what_is_pending():
    async def scenario():
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        connection = await Connection.open("127.0.0.1", port, request_timeout_ms=200)
        results = await asyncio.gather(connection.request(API_VERSIONS), connection.request(API_VERSIONS),
                                       return_exceptions=True)
        listener.close()
        return results
    results = run(scenario())
    assert all(isinstance(r, NetworkException) and r.retriable for r in results)


def test_throttle_time_is_zero():   # rafka has no quotas: every answer says so
    async def scenario():
        server = await serving()
        connection = await Connection.open("127.0.0.1", server.port)
        response = await connection.request(API_VERSIONS)
        await connection.close()
        await server.stop()
        return response
    assert run(scenario()).throttle_time == i32Timedelta.parse(datetime.timedelta(0))


async def rechunking_proxy(server_port: int, chunk_bytes: int):
    """A loopback proxy that passes the client's bytes on as they come and hands the
    server's answers back only once it has all of them, in `chunk_bytes` pieces:
    answers split across many reads, and several answers in one read."""
    async def handle(client_reader, client_writer):
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", server_port)

        async def upstream():
            while data := await client_reader.read(65536):
                server_writer.write(data)
        pumping = asyncio.create_task(upstream())
        answers = b""
        while len(answers) < handle.expected_bytes:
            answers += await server_reader.read(65536)
        for start in range(0, len(answers), chunk_bytes):
            client_writer.write(answers[start:start + chunk_bytes])
            await client_writer.drain()
        await client_reader.read()   # until the client closes
        pumping.cancel()
        server_writer.close()
        client_writer.close()
    proxy = await asyncio.start_server(handle, "127.0.0.1", 0)
    return proxy, handle


def test_connection__answers_split_over_reads_and_joined_in_one__each_request_gets_its_own():
    async def scenario():
        server = await serving(routes=[Route(METADATA_KEY, 10, 12, metadata_stub)])
        alone = await Connection.open("127.0.0.1", server.port)
        expected = await alone.request(API_VERSIONS)
        await alone.close()
        answers = []
        for chunk_bytes in (1, 7, 1 << 16):
            proxy, handle = await rechunking_proxy(server.port, chunk_bytes)
            handle.expected_bytes = 3 * (4 + 4 + len(b"".join(_kio_bytes(expected))))   # size, header, body
            connection = await Connection.open("127.0.0.1", proxy.sockets[0].getsockname()[1])
            answers.append(await asyncio.gather(*(connection.request(API_VERSIONS) for _ in range(3))))
            await connection.close()
            proxy.close()
        await server.stop()
        return expected, answers
    expected, answers = run(scenario())
    assert answers == [[expected] * 3] * 3


def _kio_bytes(entity) -> list:
    from rafka.protocol.hot_writers import body_pieces
    return body_pieces(entity)


def test_connection__the_server_closes__every_pending_request_fails_retriable_and_no_more_go_out():
    async def scenario():
        async def hang_up(reader, writer):
            await reader.readexactly(4)
            writer.close()
        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        connection = await Connection.open("127.0.0.1", server.sockets[0].getsockname()[1])
        results = await asyncio.gather(connection.request(API_VERSIONS), connection.request(API_VERSIONS),
                                       return_exceptions=True)
        with pytest.raises(NetworkException):
            await connection.request(API_VERSIONS)
        server.close()
        return results, connection.closed
    results, closed = run(scenario())
    assert closed and all(isinstance(r, NetworkException) and r.retriable for r in results)


def test_connection__an_answer_with_the_wrong_correlation_id__fails_the_connection():
    async def scenario():
        async def confused(reader, writer):
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            await reader.readexactly(size)
            writer.write(struct.pack(">ii", 4, 12345))   # an answer of correlation id 12345 (expected 0)
            await reader.read()
        server = await asyncio.start_server(confused, "127.0.0.1", 0)
        connection = await Connection.open("127.0.0.1", server.sockets[0].getsockname()[1])
        with pytest.raises(NetworkException, match="correlation id 12345"):
            await connection.request(API_VERSIONS)
        server.close()
        return connection.closed
    assert run(scenario())


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_client_listener__a_connection_over_its_ips_connection_creation_rate__never_served_closed_after_throttle(
        loop_kind, listener, tmp_path):
    """KIP-612 on a client listener: the default IP may open 5 connections a
    second (over Kafka's 10 s window: 50); the 51st is held unread and closed
    after its throttle time ((5.1 - 5) / 5 * 10 s = 200 ms), the others answered.
    On a TLS listener the held connection's handshake never starts (decided on
    the accepted socket, as Kafka's Acceptor decides): its client's ClientHello
    is never answered. On uvloop too (the actors' loop)."""
    import ssl
    from rafka.core.client_quotas import IP, IP_CONNECTION_RATE, ClientQuotas, IpConnectionRateManager
    from rafka.core.cluster_image import EMPTY_IMAGE
    from rafka.protocol import tls
    from tests.tls_files import make_tls_files
    import dataclasses
    image = dataclasses.replace(EMPTY_IMAGE, client_quotas=ClientQuotas(
        by_entity={frozenset({(IP, None)}): {IP_CONNECTION_RATE: 5.0}}))
    server_tls = client_tls = None
    if listener == "SSL":
        files = make_tls_files(tmp_path)
        server_tls = tls.server_context(files["certfile"], files["keyfile"])
        client_tls = tls.client_context(files["cafile"], check_hostname=False)

    class Rates(IpConnectionRateManager):   # remembers the throttle time it gave
        throttle_ms = 0

        def throttle_time_ms(self, *args):
            throttle_ms = super().throttle_time_ms(*args)
            self.throttle_ms = max(self.throttle_ms, throttle_ms)
            return throttle_ms

    async def scenario():
        rates = Rates()
        server = ProtocolServer(Dispatcher(DispatchTable([api_versions.ROUTE], image=lambda: image)),
                                host="127.0.0.1", ip_connection_rates=rates, tls=server_tls,
                                clock=FakeClock())   # the 51 opened at one instant, however slow the machine
        await server.start()
        taken = [await Connection.open("127.0.0.1", server.port, tls=client_tls) for _ in range(50)]
        answers = [await c.request(API_VERSIONS) for c in taken]
        loop = asyncio.get_running_loop()
        opened_s = loop.time()
        if client_tls is None:
            frame = request_frame(18, 3, API_VERSIONS)
            try:   # closed with our request unread: a reset
                throttled = await raw_exchange(server.port, struct.pack(">i", len(frame)) + frame)
            except ConnectionResetError:
                throttled = b""
        else:   # the handshake fails when the server closes the socket, never having answered
            with pytest.raises((ssl.SSLError, ConnectionResetError)):
                await asyncio.open_connection("127.0.0.1", server.port, ssl=client_tls,
                                              ssl_handshake_timeout=5)
            throttled = b""
        held_s = loop.time() - opened_s
        served = server.connection_count   # the held one is not served
        for connection in taken:
            await connection.close()
        await server.stop()
        return answers, throttled, held_s, rates, served
    import uvloop
    with asyncio.Runner(loop_factory=uvloop.new_event_loop if loop_kind == "uvloop" else None) as runner:
        answers, throttled, held_s, rates, served = runner.run(asyncio.wait_for(scenario(), 30))
    assert all(a.error_code == ErrorCode.none for a in answers)
    assert throttled == b"" and rates.throttled_connections == 1 and served == 50
    # 51 at one instant, over Kafka's shortest window (10 full samples of 1 s): 5.1 a second
    assert rates.throttle_ms == 200 and 0.2 - 0.02 <= held_s < 2.0   # held its throttle time
