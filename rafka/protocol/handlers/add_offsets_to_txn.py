"""AddOffsetsToTxn v0-4: the consumer group's `__consumer_offsets` partition joins
the producer's transaction, so its TxnOffsetCommit records get the markers
(KafkaApis.handleAddOffsetsToTxnRequest; the coordinator decides:
core.transaction_shard.add_offsets). PRODUCER_FENCED is INVALID_PRODUCER_EPOCH
below v2. WRITE on the transactional id and READ on the group, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED and nothing
is asked of the coordinator (KafkaApis). Caller: node_table, through `route(transactions)`.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from rafka.protocol.authorization import decided_host
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make
from rafka.protocol.handlers.txn_coordinator import NO_THROTTLE, TransactionHost, call, code_for

API_KEY = 25
MIN_VERSION, MAX_VERSION = 0, 4


def route(transactions: TransactionHost) -> Route:
    async def handle_add_offsets_to_txn(request, context: RequestContext):
        try:
            await call(decided_host(transactions, context, request), request.transactional_id, "add_offsets",
                       producer_id=int(request.producer_id),
                       producer_epoch=int(request.producer_epoch), group_id=request.group_id)
            code = ErrorCode.none
        except Exception as error:
            code = code_for(error, api="AddOffsetsToTxn", version=context.api_version)
        return make(load_response_schema(API_KEY, context.api_version), throttle_time=NO_THROTTLE, error_code=code)
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_add_offsets_to_txn)
