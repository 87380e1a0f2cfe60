"""EndTxn v0-4: commit or abort the producer's transaction
(KafkaApis.handleEndTxnRequest). Answered once the PrepareCommit/PrepareAbort
record is written; the markers follow (core.transaction_shard.end_transaction).
Versions up to 4 are transaction version 0 (no epoch bump per transaction: v5,
KIP-890 part 2, is not served). PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below
v2. WRITE on the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
and nothing is asked of the coordinator (KafkaApis). Caller: node_table, through `route(transactions)`.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from rafka.protocol.authorization import decided_host
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make
from rafka.protocol.handlers.txn_coordinator import NO_THROTTLE, TransactionHost, call, code_for

API_KEY = 26
MIN_VERSION, MAX_VERSION = 0, 4


def route(transactions: TransactionHost) -> Route:
    async def handle_end_txn(request, context: RequestContext):
        try:
            await call(decided_host(transactions, context, request), request.transactional_id, "end_transaction",
                       producer_id=int(request.producer_id), producer_epoch=int(request.producer_epoch),
                       commit=bool(request.committed), transaction_version=0)
            code = ErrorCode.none
        except Exception as error:
            code = code_for(error, api="EndTxn", version=context.api_version)
        return make(load_response_schema(API_KEY, context.api_version), throttle_time=NO_THROTTLE, error_code=code)
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_end_txn)
