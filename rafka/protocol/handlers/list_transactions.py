"""ListTransactions v0-1: the transactions of every coordinator on this node,
filtered by state, producer id and (v1) how long they have run
(KafkaApis.handleListTransactionsRequest, TransactionStateManager
.listTransactionStates): a node with none answers an empty list; while any of
its partitions loads, COORDINATOR_LOAD_IN_PROGRESS; state filters that name no
state come back in unknown_state_filters. Admin clients ask every broker.
Caller: node_table, through `route(transactions)`.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.static.primitive import i64

from rafka.core.transaction_state import TxnState
from rafka.core.acl import AclOperation, ResourceType
from rafka.protocol.authorization import check_of, gate
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of
from rafka.protocol.handlers.partitions import error_code_of
from rafka.protocol.handlers.txn_coordinator import NO_THROTTLE, TransactionHost, result_of

API_KEY = 66
MIN_VERSION, MAX_VERSION = 0, 1
_DESCRIBE = check_of(API_KEY, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID)


def route(transactions: TransactionHost) -> Route:
    async def handle_list_transactions(request, context: RequestContext):
        response_type = load_response_schema(API_KEY, context.api_version)
        module = module_of(response_type)
        listings, code = [], ErrorCode.none
        try:
            for coordinator in transactions.transaction_coordinators():
                found, _ = await result_of(coordinator.list_transactions(
                    states=tuple(request.state_filters), producer_ids=tuple(int(p) for p in request.producer_id_filters),
                    duration_ms=int(getattr(request, "duration_filter", -1))))
                request_gate = gate(context)   # the ids the caller may DESCRIBE only (KafkaApis)
                listings += [t for t in found if request_gate.allows(_DESCRIBE, t.transactional_id)]
        except Exception as error:
            code, listings = error_code_of(error), []
        unknown = () if code != ErrorCode.none else set(request.state_filters) - {s.value for s in TxnState}
        return make(response_type, throttle_time=NO_THROTTLE, error_code=code, unknown_state_filters=tuple(
            sorted(unknown)), transaction_states=tuple(
            make(module.TransactionState, transactional_id=t.transactional_id, producer_id=i64(t.producer_id),
                 transaction_state=t.state) for t in listings))
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_list_transactions)
