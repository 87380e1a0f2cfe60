"""A broker's client quotas at its edge, where every client request arrives
(protocol.edge): Kafka's produce and fetch byte-rate quotas (KafkaApis
handleProduceRequest / handleFetchRequest over ClientQuotaManager) and its
request-time quota (ClientRequestQuotaManager), per broker.

  * Produce: the request's size (its frame, as Kafka's request.sizeInBytes) is
    recorded for the client (its user and client id, core.client_quotas) when
    it arrives; over its producer_byte_rate, the answer carries the throttle
    time in throttle_time_ms and the connection is muted for it.
  * Fetch from a consumer: max_bytes is capped to what the quota window allows
    (Kafka's getMaxValueInQuotaWindow: more could never pass); the answer's size
    is recorded; over consumer_byte_rate, the size is taken back and the client
    gets an empty answer with the throttle time (Kafka's throttled fetch), and
    the connection is muted.
  * Request time (request_percentage): every request but the exempt ones
    (REQUEST_QUOTA_EXEMPT_APIS, a Produce with acks=0 and a follower's Fetch, as
    Kafka's) records the time this node spent handling it, as a percentage of a
    second (`HandlingTime`: the time its steps ran on the event loop from the
    frame's parse to its answer, not the time it waited on an actor, a
    replication or a long poll, as Kafka's requestThreadTimeNanos leaves out
    purgatory); over its request_percentage, the answer carries the throttle
    time (at most one quota window), the connection is muted for it, and a
    consumer's Fetch is answered empty as for its byte rate. With a byte-rate
    quota on the same request the larger throttle time goes out, as Kafka's.
  * Muting (KIP-219): the answer goes out at once; the server starts no further
    request of that connection until the throttle time has passed
    (`channel_mutes`, read by protocol.server), so other connections, and other
    clients, are not slowed.

Hot path: with no quota of a type anywhere in the image nothing is measured
(one lookup a request); with quotas, one sensor update a request, sized by the
request or answer frame, never by its records (and, with request quotas, two
clock reads a step of the request's coroutine). An answer is decoded and
re-encoded only when throttled. Bounded: sensors (core.client_quotas.MAX_SENSORS),
one mute per open connection (dropped when it closes or expires).

Per broker as Kafka's, with one network process per broker (rafka up's
default): a broker run with several (SO_REUSEPORT) measures in each process the
connections the kernel gave it, so a client spread over k of them may get up to
k times its quota. Request time is this node's own: the time the actors behind
it (replicas, coordinators, the controller) spend on a relayed request is not
charged. controller_mutation_rate is the controller's to enforce (KIP-599, as
KRaft's controller does: protocol.handlers.topic_admin, on the requests brokers
relay to it in envelopes); the ip connection_creation_rate is the server's
(protocol.server, on a broker's listener, as each new connection arrives).

Rates use the injected clock (milliseconds, and nanoseconds for handling time);
mutes are deadlines on the event loop's clock, where the server's timers run.
Callers: protocol.edge (EdgeDispatcher.dispatch), tests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from rafka.core.client_quotas import (CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, QUOTA_WINDOW_NUM_DEFAULT,
                                      QUOTA_WINDOW_SIZE_S_DEFAULT, REQUEST_PERCENTAGE, ClientQuotaManager,
                                      request_percentage_of, user_of_principal)
from rafka.core.clock import SystemClock
from rafka.protocol.dispatch import FETCH_KEY, PRODUCE_KEY, ParsedRequest, encode_response, read_answer, request_frame
from rafka.protocol.entities import load_response_schema, make

QUOTA_APIS = frozenset({PRODUCE_KEY, FETCH_KEY})
# Answered without a request-time charge, as Kafka's: SaslHandshake and
# SaslAuthenticate (its authenticator answers them before KafkaApis), WriteTxnMarkers
# (sendResponseExemptThrottle, a cluster action)
REQUEST_QUOTA_EXEMPT_APIS = frozenset({17, 27, 36})

Route = Callable[[ParsedRequest, bytes, str], Awaitable["bytes | None"]]


class HandlingTime:
    """The time a request's handling ran: `run(coroutine)` drives the coroutine
    and adds to `busy_ns` the time each of its steps took, not the time it was
    suspended (waiting on a future, another connection's answer, a timer).
    `started_ns`: when the handling began (the frame's parse), on `clock`."""

    def __init__(self, clock, started_ns: int | None = None) -> None:
        self.clock = clock
        self.busy_ns = 0 if started_ns is None else max(0, clock.monotonic_ns() - started_ns)

    def run(self, coroutine) -> Awaitable:
        return _Stepped(self, coroutine)


class _Stepped:
    __slots__ = ("_timing", "_coroutine")

    def __init__(self, timing: HandlingTime, coroutine) -> None:
        self._timing = timing
        self._coroutine = coroutine

    def __await__(self):
        coroutine, timing, clock = self._coroutine, self._timing, self._timing.clock
        value, error = None, None
        while True:
            step_ns = clock.monotonic_ns()
            try:
                suspended_on = coroutine.send(value) if error is None else coroutine.throw(error)
            except StopIteration as done:
                return done.value
            finally:
                timing.busy_ns += clock.monotonic_ns() - step_ns
            value, error = None, None
            try:
                value = yield suspended_on
            except GeneratorExit:   # the awaiting task is closed: so is the coroutine
                coroutine.close()
                raise
            except BaseException as thrown:   # a cancellation, or the awaited future's error: the coroutine's
                error = thrown


class EdgeQuotas:
    """`channel_mutes`: connection id -> the loop time until which it is muted
    (the dispatcher's, which the server reads); `clock`: core.clock's."""

    def __init__(self, channel_mutes: dict[str, float], *, clock=None,
                 quota_window_num: int = QUOTA_WINDOW_NUM_DEFAULT,
                 quota_window_size_s: int = QUOTA_WINDOW_SIZE_S_DEFAULT) -> None:
        self.channel_mutes = channel_mutes
        self.clock = clock or SystemClock()
        window = dict(quota_window_num=quota_window_num, quota_window_size_s=quota_window_size_s)
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, **window)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, **window)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, **window)

    def times(self, api_key: int, image) -> bool:
        """Whether requests of `api_key` may be timed on `image` (before their
        parse): some client has a request_percentage and the API is not exempt."""
        return (image is not None and api_key not in REQUEST_QUOTA_EXEMPT_APIS
                and image.client_quotas.enabled(REQUEST_PERCENTAGE))

    def applies(self, parsed: ParsedRequest) -> bool:
        """Whether this request is measured: a Produce or a consumer's Fetch while
        some quota of its type exists, or any request that is timed."""
        return self._bytes_measured(parsed) or self._time_measured(parsed)

    def _bytes_measured(self, parsed: ParsedRequest) -> bool:
        image = parsed.context.image
        if image is None or parsed.context.api_key not in QUOTA_APIS:
            return False
        if parsed.context.api_key == PRODUCE_KEY:
            return image.client_quotas.enabled(PRODUCER_BYTE_RATE)
        return image.client_quotas.enabled(CONSUMER_BYTE_RATE) and int(parsed.body.replica_id) < 0

    def _time_measured(self, parsed: ParsedRequest) -> bool:
        context = parsed.context
        if not self.times(context.api_key, context.image) or parsed.is_unsupported_api_versions:
            return False
        if context.api_key == PRODUCE_KEY:
            return int(parsed.body.acks) != 0
        return context.api_key != FETCH_KEY or int(parsed.body.replica_id) < 0

    async def serve(self, parsed: ParsedRequest, frame: bytes, connection_id: str, route: Route, *,
                    started_ns: int | None = None) -> bytes | None:
        """The request served through `route` under its client's quotas;
        `started_ns`: when its handling began (on `clock`), before its parse."""
        context = parsed.context
        quotas = context.image.client_quotas
        user = user_of_principal(context.principal)
        timed = self._time_measured(parsed)
        handling = HandlingTime(self.clock, started_ns)
        bytes_measured = self._bytes_measured(parsed)
        byte_throttle_ms = 0
        consumer_fetch = context.api_key == FETCH_KEY and int(parsed.body.replica_id) < 0
        if context.api_key == PRODUCE_KEY and bytes_measured:
            byte_throttle_ms = self.produce.record_and_get_throttle_time_ms(
                quotas, user, context.client_id, len(frame), self.clock.monotonic_ms())
            if byte_throttle_ms > 0:
                self.mute(connection_id, byte_throttle_ms)
        elif consumer_fetch and bytes_measured:
            cap = self.fetch.max_value_in_quota_window(quotas, user, context.client_id)
            if cap is not None and int(parsed.body.max_bytes) > cap:
                parsed = dataclasses.replace(parsed, body=dataclasses.replace(parsed.body, max_bytes=i32(int(cap))))
                frame = request_frame(parsed.context, parsed.body)
        answer = await handling.run(route(parsed, frame, connection_id))
        now_ms = self.clock.monotonic_ms()
        request_throttle_ms = self.request.record_and_get_throttle_time_ms(
            quotas, user, context.client_id, request_percentage_of(handling.busy_ns), now_ms) if timed else 0
        if answer is None:
            if request_throttle_ms > 0:
                self.mute(connection_id, request_throttle_ms)
            return None
        if consumer_fetch:
            if bytes_measured:
                byte_throttle_ms = self.fetch.record_and_get_throttle_time_ms(quotas, user, context.client_id,
                                                                              len(answer), now_ms)
            throttle_ms = max(byte_throttle_ms, request_throttle_ms)
            if throttle_ms <= 0:
                return answer
            if bytes_measured:   # the answer goes out empty: its size is not the client's
                self.fetch.unrecord(quotas, user, context.client_id, len(answer), now_ms)
            self.mute(connection_id, throttle_ms)
            return encode_response(context.correlation_id, throttled_fetch_answer(context.api_version, throttle_ms))
        if request_throttle_ms > 0:
            self.mute(connection_id, request_throttle_ms)
        throttle_ms = max(byte_throttle_ms, request_throttle_ms)
        return answer if throttle_ms <= 0 else _with_throttle(parsed, answer, throttle_ms)

    def mute(self, connection_id: str, throttle_ms: int) -> None:
        """No request of the connection starts for `throttle_ms` (KIP-219's mute)."""
        until = asyncio.get_running_loop().time() + throttle_ms / 1000.0
        self.channel_mutes[connection_id] = max(until, self.channel_mutes.get(connection_id, 0.0))


def throttled_fetch_answer(version: int, throttle_ms: int):
    """Kafka's throttled Fetch answer (FullFetchContext.getThrottledResponse): no
    partitions, no session, the throttle time."""
    return make(load_response_schema(FETCH_KEY, version), throttle_time=_ms(throttle_ms), error_code=ErrorCode.none,
                session_id=i32(0), responses=(), node_endpoints=())


def _ms(milliseconds: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=milliseconds))


def _with_throttle(parsed: ParsedRequest, answer: bytes, throttle_ms: int) -> bytes:
    """`answer` (a size-prefixed response frame) with its throttle_time at least
    `throttle_ms` (Kafka's maybeSetThrottleTimeMs: an answer without the field, as
    ApiVersions v0's, goes out as it is; a controller's relayed answer keeps its
    own if larger, as Kafka's sendForwardedResponse)."""
    entity = read_answer(parsed.context, answer[4:])
    held = getattr(entity, "throttle_time", None)
    if held is None:
        return answer
    throttle = max(int(held.total_seconds() * 1000), throttle_ms)
    return encode_response(parsed.context.correlation_id, dataclasses.replace(entity, throttle_time=_ms(throttle)))
