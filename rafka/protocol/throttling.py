"""A broker's client quotas at its edge, where every client request arrives
(protocol.edge): Kafka's produce and fetch byte-rate quotas (KafkaApis
handleProduceRequest / handleFetchRequest over ClientQuotaManager), per broker.

  * Produce: the request's size (its frame, as Kafka's request.sizeInBytes) is
    recorded for the client (its user and client id, core.client_quotas) when
    it arrives; over its producer_byte_rate, the answer carries the throttle
    time in throttle_time_ms and the connection is muted for it.
  * Fetch from a consumer: max_bytes is capped to what the quota window allows
    (Kafka's getMaxValueInQuotaWindow: more could never pass); the answer's size
    is recorded; over consumer_byte_rate, the size is taken back and the client
    gets an empty answer with the throttle time (Kafka's throttled fetch), and
    the connection is muted.
  * Muting (KIP-219): the answer goes out at once; the server starts no further
    request of that connection until the throttle time has passed
    (`channel_mutes`, read by protocol.server), so other connections, and other
    clients, are not slowed.

Hot path: with no quota of a type anywhere in the image nothing is measured
(one lookup a request); with quotas, one sensor update a request, sized by the
request or answer frame, never by its records. An answer is decoded and
re-encoded only when throttled. Bounded: sensors (core.client_quotas.MAX_SENSORS),
one mute per open connection (dropped when it closes or expires).

Per broker as Kafka's, with one network process per broker (rafka up's
default): a broker run with several (SO_REUSEPORT) measures in each process the
connections the kernel gave it, so a client spread over k of them may get up to
k times its quota. Not enforced here (yet): request_percentage (Kafka's request
time quota), controller_mutation_rate and the ip connection_creation_rate; they
are stored, validated and described.

Rates use the injected clock (milliseconds); mutes are deadlines on the event
loop's clock, where the server's timers run.
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
                                      QUOTA_WINDOW_SIZE_S_DEFAULT, ClientQuotaManager, user_of_principal)
from rafka.core.clock import SystemClock
from rafka.protocol.dispatch import FETCH_KEY, PRODUCE_KEY, ParsedRequest, encode_response, read_answer, request_frame
from rafka.protocol.entities import load_response_schema, make

QUOTA_APIS = frozenset({PRODUCE_KEY, FETCH_KEY})

Route = Callable[[ParsedRequest, bytes, str], Awaitable["bytes | None"]]


class EdgeQuotas:
    """`channel_mutes`: connection id -> the loop time until which it is muted
    (the dispatcher's, which the server reads); `clock`: core.clock's."""

    def __init__(self, channel_mutes: dict[str, float], *, clock=None,
                 quota_window_num: int = QUOTA_WINDOW_NUM_DEFAULT,
                 quota_window_size_s: int = QUOTA_WINDOW_SIZE_S_DEFAULT) -> None:
        self.channel_mutes = channel_mutes
        self.clock = clock or SystemClock()
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, quota_window_num=quota_window_num,
                                          quota_window_size_s=quota_window_size_s)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, quota_window_num=quota_window_num,
                                        quota_window_size_s=quota_window_size_s)

    def applies(self, parsed: ParsedRequest) -> bool:
        """Whether this request is measured: a Produce or a consumer's Fetch while
        some quota of its type exists."""
        image = parsed.context.image
        if image is None:
            return False
        if parsed.context.api_key == PRODUCE_KEY:
            return image.client_quotas.enabled(PRODUCER_BYTE_RATE)
        return image.client_quotas.enabled(CONSUMER_BYTE_RATE) and int(parsed.body.replica_id) < 0

    async def serve(self, parsed: ParsedRequest, frame: bytes, connection_id: str, route: Route) -> bytes | None:
        """The request served through `route` under its client's quota."""
        context = parsed.context
        quotas = context.image.client_quotas
        user = user_of_principal(context.principal)
        if context.api_key == PRODUCE_KEY:
            throttle_ms = self.produce.record_and_get_throttle_time_ms(quotas, user, context.client_id, len(frame),
                                                                       self.clock.monotonic_ms())
            if throttle_ms > 0:
                self._mute(connection_id, throttle_ms)
            answer = await route(parsed, frame, connection_id)
            return answer if answer is None or throttle_ms <= 0 else _with_throttle(parsed, answer, throttle_ms)
        cap = self.fetch.max_value_in_quota_window(quotas, user, context.client_id)
        if cap is not None and int(parsed.body.max_bytes) > cap:
            parsed = dataclasses.replace(parsed, body=dataclasses.replace(parsed.body, max_bytes=i32(int(cap))))
            frame = request_frame(parsed.context, parsed.body)
        answer = await route(parsed, frame, connection_id)
        if answer is None:
            return None
        now_ms = self.clock.monotonic_ms()
        throttle_ms = self.fetch.record_and_get_throttle_time_ms(quotas, user, context.client_id, len(answer), now_ms)
        if throttle_ms <= 0:
            return answer
        self.fetch.unrecord(quotas, user, context.client_id, len(answer), now_ms)
        self._mute(connection_id, throttle_ms)
        return encode_response(context.correlation_id, throttled_fetch_answer(context.api_version, throttle_ms))

    def _mute(self, connection_id: str, throttle_ms: int) -> None:
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
    """`answer` (a size-prefixed response frame) with its throttle_time set (every
    Produce and Fetch version the edge serves has the field)."""
    entity = read_answer(parsed.context, answer[4:])
    return encode_response(parsed.context.correlation_id, dataclasses.replace(entity, throttle_time=_ms(throttle_ms)))
