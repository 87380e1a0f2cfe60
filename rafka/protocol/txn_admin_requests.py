"""ListTransactions (v1), DescribeTransactions (v0) and DescribeProducers (v0) as
rafka's Admin sends them, and their answers read into core's values and typed
errors (Kafka's AdminClient listTransactions, describeTransactions,
describeProducers). abortTransaction is protocol.txn_markers' WriteTxnMarkers
with one ABORT marker, sent to the partition's leader, as Kafka's admin sends it.

A refusal of the whole request (ListTransactions' top-level error) raises it;
per-item errors (a transactional id's, a partition's) are the caller's, read one
item at a time. Pure: builders and readers, no I/O.
Callers: rafka.client.admin (`rafka transactions`), tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from kio.schema.describe_producers.v0 import request as describe_producers_v0
from kio.schema.describe_transactions.v0 import request as describe_transactions_v0
from kio.schema.errors import ErrorCode
from kio.schema.list_transactions.v1 import request as list_transactions_v1
from kio.static.primitive import i32, i64

from rafka.core.errors import KafkaError, UnknownServerError, error_for_code
from rafka.core.producer_state import ActiveProducer
from rafka.core.transaction_shard import TransactionDescription, TransactionListing

TopicPartitionKey = tuple[str, int]


@dataclasses.dataclass(frozen=True)
class DescribedTransaction(TransactionDescription):
    """A DescribeTransactions answer with the broker whose coordinator gave it
    (Kafka's TransactionDescription.coordinatorId); its start time -1 when no
    transaction has started (Empty)."""
    coordinator_id: int = -1


def list_transactions_request(*, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                              duration_ms: int = -1) -> list_transactions_v1.ListTransactionsRequest:
    """Empty filters match every transaction; `duration_ms` >= 0 keeps those running
    longer than that (v1, KIP-994)."""
    return list_transactions_v1.ListTransactionsRequest(
        state_filters=tuple(states), producer_id_filters=tuple(i64(p) for p in producer_ids),
        duration_filter=i64(duration_ms))


def list_transactions_answer(response) -> list[TransactionListing]:
    if response.error_code != ErrorCode.none:
        raise error_for_code(int(response.error_code), "ListTransactions")
    return [TransactionListing(t.transactional_id, int(t.producer_id), t.transaction_state)
            for t in response.transaction_states]


def describe_transactions_request(transactional_ids: Iterable[str]):
    return describe_transactions_v0.DescribeTransactionsRequest(transactional_ids=tuple(transactional_ids))


def describe_transactions_answer(response, transactional_id: str, *, coordinator_id: int = -1
                                 ) -> DescribedTransaction:
    """The id's description, or its error raised (NOT_COORDINATOR and
    COORDINATOR_LOAD_IN_PROGRESS retriable; TRANSACTIONAL_ID_NOT_FOUND final)."""
    found = [s for s in response.transaction_states if s.transactional_id == transactional_id]
    if len(found) != 1:
        raise UnknownServerError(f"{len(found)} answers about transactional id {transactional_id!r}")
    state = found[0]
    if state.error_code != ErrorCode.none:
        raise error_for_code(int(state.error_code), f"DescribeTransactions of {transactional_id!r}")
    return DescribedTransaction(
        transactional_id, state.transaction_state, int(state.producer_id), int(state.producer_epoch),
        int(state.transaction_timeout.total_seconds() * 1000), int(state.transaction_start_time),
        frozenset((t.topic, int(p)) for t in state.topics for p in t.partitions), coordinator_id=coordinator_id)


def describe_producers_request(partitions: Iterable[TopicPartitionKey]
                               ) -> describe_producers_v0.DescribeProducersRequest:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return describe_producers_v0.DescribeProducersRequest(topics=tuple(
        describe_producers_v0.TopicRequest(name=topic, partition_indexes=tuple(i32(p) for p in indexes))
        for topic, indexes in by_topic.items()))


def describe_producers_answer(response, partitions: Iterable[TopicPartitionKey]
                              ) -> dict[TopicPartitionKey, list[ActiveProducer] | KafkaError]:
    """Each partition asked for: its active producers, or its typed error (one
    the answer leaves out: UNKNOWN_SERVER_ERROR)."""
    answered: dict[TopicPartitionKey, list[ActiveProducer] | KafkaError] = {}
    for topic in response.topics:
        for p in topic.partitions:
            key = (topic.name, int(p.partition_index))
            if p.error_code != ErrorCode.none:
                answered[key] = error_for_code(int(p.error_code), p.error_message
                                               or f"DescribeProducers of {key[0]}-{key[1]}")
                continue
            answered[key] = [ActiveProducer(int(s.producer_id), int(s.producer_epoch), int(s.last_sequence),
                                            int(s.last_timestamp), int(s.coordinator_epoch),
                                            int(s.current_txn_start_offset)) for s in p.active_producers]
    return {key: answered[key] if key in answered else UnknownServerError(
        f"no DescribeProducers answer for {key[0]}-{key[1]}") for key in partitions}
