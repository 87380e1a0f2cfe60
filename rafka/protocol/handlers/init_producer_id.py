"""InitProducerId v0-4: a producer id for an idempotent producer, or for a
transactional one from its transaction coordinator.

What Kafka answers (KafkaApis.handleInitProducerIdRequest,
TransactionCoordinator.handleInitProducerId), and what this handler does:
  * no transactional id: a producer id never handed out before (the controller
    allocates them, as Kafka's ProducerIdManager takes blocks from the
    controller), epoch 0. A request that names its current producer id and
    epoch (v3+, KIP-360) gets a fresh id too, which Kafka's rules allow: the
    producer starts its sequences over.
  * a transactional id: its coordinator decides (core.transaction_shard
    .init_producer_id): NOT_COORDINATOR when it is not on this node,
    INVALID_REQUEST for an empty id or for a producer id without an epoch (or
    the reverse), INVALID_TRANSACTION_TIMEOUT past transaction.max.timeout.ms,
    CONCURRENT_TRANSACTIONS while an open transaction of the id is aborted,
    PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v4) for a stale producer.
    Any error answers producer id -1 and epoch -1.
  * authorization (KafkaApis): WRITE on the transactional id (refused:
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without one, IDEMPOTENT_WRITE on
    the cluster or WRITE on some topic (refused: CLUSTER_AUTHORIZATION_FAILED).
    A refused request is given no producer id.
Caller: node_table, through `route(allocate_producer_id, transactions)`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i64

from rafka.core.errors import InvalidRequest
from rafka.protocol.authorization import decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make
from rafka.protocol.handlers.partitions import error_code_of
from rafka.protocol.handlers.txn_coordinator import NO_THROTTLE, NoTransactions, TransactionHost, call, code_for

API_KEY = 22
MIN_VERSION, MAX_VERSION = 0, 4


def _expected(request) -> tuple[int, int] | None:
    """The producer's current (id, epoch), v3+ (KIP-360): none when both are -1."""
    producer_id, epoch = int(getattr(request, "producer_id", -1)), int(getattr(request, "producer_epoch", -1))
    if (producer_id, epoch) == (-1, -1):
        return None
    if producer_id == -1 or epoch == -1:
        raise InvalidRequest("a producer id needs its epoch, and an epoch its producer id")
    return producer_id, epoch


def route(allocate_producer_id: Callable[[], Awaitable[int]], transactions: TransactionHost | None = None) -> Route:
    transactions = transactions or NoTransactions()

    async def handle_init_producer_id(request, context: RequestContext):
        response_type = load_response_schema(API_KEY, context.api_version)
        refusal = decide(context, request).refusal
        if refusal is not None:
            producer_id, epoch, code = -1, -1, error_code_of(refusal)
        elif request.transactional_id is None:
            try:
                producer_id, epoch, code = await allocate_producer_id(), 0, ErrorCode.none
            except Exception as error:
                producer_id, epoch, code = -1, -1, error_code_of(error)
        else:
            try:
                timeout_ms = round(request.transaction_timeout.total_seconds() * 1000)
                producer_id, epoch = await call(transactions, request.transactional_id, "init_producer_id",
                                                txn_timeout_ms=timeout_ms, expected=_expected(request))
                code = ErrorCode.none
            except Exception as error:
                producer_id, epoch = -1, -1
                code = code_for(error, api="InitProducerId", version=context.api_version)
        return make(response_type, throttle_time=NO_THROTTLE, error_code=code, producer_id=i64(producer_id),
                    producer_epoch=i16(epoch))
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_init_producer_id)
