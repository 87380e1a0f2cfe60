"""InitProducerId v0-4: a producer id for an idempotent producer (Kafka's Java
producer, kafka-python 3 and librdkafka with enable.idempotence all ask first).

What Kafka answers (KafkaApis.handleInitProducerIdRequest,
TransactionCoordinator.handleInitProducerId), and what this handler does:
  * no transactional id: a producer id never handed out before (the controller
    allocates them, as Kafka's ProducerIdManager takes blocks from the
    controller), epoch 0. A request that names its current producer id and
    epoch (v3+, KIP-360) gets a fresh id too, which Kafka's rules allow: the
    producer starts its sequences over.
  * a transactional id: rafka has no transaction coordinator; the answer is
    INVALID_REQUEST, a non-retriable error, so the client fails at once
    instead of retrying.
Caller: dispatch, through `route(allocate_producer_id)`.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable

from rafka.protocol.entities import load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32Timedelta, i64

from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import make
from rafka.protocol.handlers.partitions import error_code_of

API_KEY = 22
MIN_VERSION, MAX_VERSION = 0, 4
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def route(allocate_producer_id: Callable[[], Awaitable[int]]) -> Route:
    async def handle_init_producer_id(request, context: RequestContext):
        response_type = load_response_schema(API_KEY, context.api_version)
        if request.transactional_id is not None:
            return make(response_type, throttle_time=_NO_THROTTLE, error_code=ErrorCode.invalid_request,
                        producer_id=i64(-1), producer_epoch=i16(-1))
        try:
            producer_id, code = await allocate_producer_id(), ErrorCode.none
        except Exception as error:
            producer_id, code = -1, error_code_of(error)
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=code, producer_id=i64(producer_id),
                    producer_epoch=i16(0 if producer_id >= 0 else -1))
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_init_producer_id)
