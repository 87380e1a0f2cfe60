"""DescribeTransactions v0: each transactional id's state at its coordinator
(KafkaApis.handleDescribeTransactionsRequest, TransactionCoordinator
.handleDescribeTransactions): NOT_COORDINATOR for an id not coordinated here,
TRANSACTIONAL_ID_NOT_FOUND for one the coordinator does not hold, INVALID_REQUEST
for an empty id, COORDINATOR_LOAD_IN_PROGRESS while its partition loads (an
error entry carries only its code and id). An Empty transaction's start time
is -1, as Kafka's (Java clients read it; the answer's schema is rafka's own,
protocol.describe_transactions_schema, as kio's reader refuses a negative time).
Caller: node_table, through `route(transactions)`.
"""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i32Timedelta, i64

from rafka.core.acl import AclOperation, ResourceType
from rafka.protocol.authorization import check_of, gate
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of
from rafka.protocol.handlers.txn_coordinator import NO_THROTTLE, TransactionHost, call, code_for

API_KEY = 65
MIN_VERSION, MAX_VERSION = 0, 0
# KafkaApis: DESCRIBE on each transactional id (refused: its own error), and the
# transaction's topics the caller may not DESCRIBE are left out
_DESCRIBE = check_of(API_KEY, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID)
_DESCRIBE_TOPIC = check_of(API_KEY, AclOperation.DESCRIBE, ResourceType.TOPIC)


def route(transactions: TransactionHost) -> Route:
    async def handle_describe_transactions(request, context: RequestContext):
        response_type = load_response_schema(API_KEY, context.api_version)
        module = module_of(response_type)
        states = []
        request_gate = gate(context)
        for transactional_id in request.transactional_ids:
            try:
                request_gate.require(_DESCRIBE, transactional_id)
                found = await call(transactions, transactional_id, "describe_transaction")
            except Exception as error:
                # only the code and the id: the other fields at Java's zero values, as Kafka's
                states.append(make(module.TransactionState, error_code=code_for(
                    error, api="DescribeTransactions", version=context.api_version),
                    transactional_id=transactional_id, transaction_state="",
                    transaction_timeout=i32Timedelta.parse(datetime.timedelta(0)), transaction_start_time=i64(0),
                    producer_id=i64(0), producer_epoch=i16(0), topics=()))
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(found.topic_partitions):
                if not request_gate.allows(_DESCRIBE_TOPIC, topic):   # KafkaApis leaves them out
                    continue
                by_topic.setdefault(topic, []).append(partition)
            states.append(make(
                module.TransactionState, error_code=ErrorCode.none, transactional_id=transactional_id,
                transaction_state=found.state,
                transaction_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=found.txn_timeout_ms)),
                transaction_start_time=i64(found.txn_start_timestamp_ms), producer_id=i64(found.producer_id),
                producer_epoch=i16(found.producer_epoch),
                topics=tuple(make(module.TopicData, topic=topic, partitions=tuple(i32(p) for p in partitions))
                             for topic, partitions in by_topic.items())))
        return make(response_type, throttle_time=NO_THROTTLE, transaction_states=tuple(states))
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_describe_transactions)
