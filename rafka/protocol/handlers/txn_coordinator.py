"""What the transaction APIs' handlers share: finding the transaction coordinator
of a transactional id on this node, calling it, and Kafka's error codes for what
it raises (PRODUCER_FENCED as INVALID_PRODUCER_EPOCH to clients too old for it).

The coordinator endpoint is core.transaction_shard.TransactionShard or anything
with its calls (an actor's proxy may make every call awaitable).
Callers: handlers.init_producer_id, add_partitions_to_txn, add_offsets_to_txn,
end_txn, describe_transactions, list_transactions.
"""

from __future__ import annotations

import datetime
import inspect
from typing import Any, Protocol

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from rafka.core.errors import NotCoordinator, ProducerFenced
from rafka.core.transaction_state import fenced_error_for
from rafka.protocol.handlers.partitions import error_code_of

NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


class TransactionHost(Protocol):
    def transaction_coordinator_for(self, transactional_id: str) -> Any | None:
        """The coordinator of the id's __transaction_state partition if this node
        hosts it, else None (NOT_COORDINATOR)."""

    def transaction_coordinators(self) -> list[Any]:
        """Every transaction coordinator this node hosts (ListTransactions)."""


class NoTransactions:
    """A node that hosts no transaction coordinator."""

    def transaction_coordinator_for(self, transactional_id: str):
        return None

    def transaction_coordinators(self) -> list:
        return []


async def result_of(value):
    """A coordinator call's value, awaited if it is awaitable."""
    return await value if inspect.isawaitable(value) else value


async def call(host: TransactionHost, transactional_id: str, method: str, **kwargs) -> Any:
    """The coordinator's answer; raises NOT_COORDINATOR when it is not here."""
    coordinator = host.transaction_coordinator_for(transactional_id)
    if coordinator is None:
        raise NotCoordinator(f"the coordinator of {transactional_id!r} is not on this node")
    return await result_of(getattr(coordinator, method)(transactional_id, **kwargs))


def code_for(error: BaseException, *, api: str, version: int) -> ErrorCode:
    """Kafka's code for `error` in `api` at `version`."""
    if isinstance(error, ProducerFenced):
        return ErrorCode(fenced_error_for(api, version).code)
    return error_code_of(error)
