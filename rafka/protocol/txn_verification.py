"""A partition leader asking a transaction coordinator whether partitions are in a
producer's open transaction before it appends the producer's first transactional
batch there (KIP-890 part 1; Kafka's AddPartitionsToTxnManager): an
AddPartitionsToTxn v5 with verify_only, sent as the cluster user (the request
needs CLUSTER_ACTION), to the coordinator of the transactional id as the leader's
cluster image names it.

What a Produce answers for a partition that did not verify is Kafka's
(ReplicaManager.handleProduceAppend, AddPartitionsToTxnManager), by
`produce_error`: a partition not in the transaction INVALID_TXN_STATE ("Partition
was not added to the transaction"; the coordinator answers TRANSACTION_ABORTABLE,
which Produce below v12 cannot carry), PRODUCER_FENCED INVALID_PRODUCER_EPOCH, and
a coordinator that could not answer now (loading, moving, not reachable, the
transaction completing) NOT_ENOUGH_REPLICAS, which every producer retries without
a metadata refresh.

Invariants: `verify` never raises: it answers every partition asked, None
(verified) or its error; one request per call, bounded as a whole by the
connections' request timeout (connecting and logging in included).
A TxnOffsetCommit asks the same question for the group's `__consumer_offsets`
partition before its coordinator decides it (core.coordinator_shard), and answers
what `verification_error` says.
Callers: protocol.handlers.produce (through its host's `verify_transaction`),
protocol.handlers.txn_offset_commit (`verification_error`), actors.replica,
actors.coordinator, tests.core.protocol_node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from kio.schema.add_partitions_to_txn.v5 import request as add_partitions_v5
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i64

from rafka.core.cluster_image import ClusterImage
from rafka.core.errors import (ConcurrentTransactions, CoordinatorLoadInProgress, CoordinatorNotAvailable,
                               InvalidProducerEpoch, InvalidTxnState, KafkaError, NetworkException,
                               NotCoordinator, NotEnoughReplicas, ProducerFenced, TransactionAbortable,
                               error_for_code)
from rafka.core.transaction_log import partition_for
from rafka.protocol.network import NodeConnections

TopicPartition = tuple[str, int]


def verify_request(transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: Iterable[TopicPartition]) -> add_partitions_v5.AddPartitionsToTxnRequest:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return add_partitions_v5.AddPartitionsToTxnRequest(transactions=(add_partitions_v5.AddPartitionsToTxnTransaction(
        transactional_id=transactional_id, producer_id=i64(producer_id), producer_epoch=i16(producer_epoch),
        verify_only=True, topics=tuple(add_partitions_v5.AddPartitionsToTxnTopic(
            name=topic, partitions=tuple(i32(p) for p in indexes)) for topic, indexes in by_topic.items())),))


def verify_answer(response, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, KafkaError | None]:
    """Each partition asked: None (in the transaction) or the coordinator's error;
    a top-level error is every partition's, and one the answer leaves out is
    UNKNOWN_SERVER_ERROR."""
    partitions = list(partitions)
    if response.error_code != ErrorCode.none:
        # the leader's own refusal is not the producer's to see (AddPartitionsToTxnManager)
        error = InvalidTxnState("the partition could not be verified") \
            if response.error_code == ErrorCode.cluster_authorization_failed \
            else error_for_code(response.error_code, "AddPartitionsToTxn (verify only)")
        return {tp: error for tp in partitions}
    answered: dict[TopicPartition, KafkaError | None] = {}
    for transaction in response.results_by_transaction:
        for topic in transaction.topic_results:
            for result in topic.results_by_partition:
                code = result.partition_error_code
                answered[(topic.name, int(result.partition_index))] = None if code == ErrorCode.none else \
                    error_for_code(code, f"verifying {topic.name}-{int(result.partition_index)}")
    return {tp: answered[tp] if tp in answered else error_for_code(-1, f"{tp[0]}-{tp[1]} not answered")
            for tp in partitions}


_RETRIABLE_HERE = (ConcurrentTransactions, NetworkException, CoordinatorLoadInProgress, CoordinatorNotAvailable,
                   NotCoordinator)


def produce_error(error: KafkaError) -> KafkaError:
    """What a Produce answers for a partition the coordinator did not verify."""
    if isinstance(error, (TransactionAbortable, InvalidTxnState)):
        return InvalidTxnState("Partition was not added to the transaction")
    if isinstance(error, ProducerFenced):
        return InvalidProducerEpoch(str(error))
    if isinstance(error, _RETRIABLE_HERE):
        return NotEnoughReplicas(f"Unable to verify the partition has been added to the transaction. "
                                 f"Underlying error: {error}")
    return error


def verification_error(error: BaseException, txn_offset_commit_version: int) -> BaseException:
    """What a TxnOffsetCommit answers for a transaction the coordinator did not
    verify (AddPartitionsToTxnManager for the group coordinator's writer): a
    fenced producer INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE as it is from v4
    (clients that abort on it) and INVALID_TXN_STATE below; anything else (other
    errors included) as it is."""
    if isinstance(error, ProducerFenced):
        return InvalidProducerEpoch(str(error))
    if isinstance(error, TransactionAbortable) and txn_offset_commit_version < 4:
        return InvalidTxnState(f"the offsets' partition was not added to the transaction: {error}")
    return error


class TransactionVerifier:
    """One process's AddPartitionsToTxn (verify only) to the coordinators: its
    `nodes` are its own connections, opened on the event loop that verifies."""

    def __init__(self, image: Callable[[], ClusterImage], nodes: NodeConnections) -> None:
        self._image = image
        self._nodes = nodes

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, KafkaError | None]:
        """Bounded as a whole (connecting and logging in included) by the
        connections' request timeout; any failure is the coordinator not
        answering: NETWORK_EXCEPTION, which the Produce answers retriable."""
        try:
            address = self._coordinator(transactional_id)
            response = await asyncio.wait_for(self._nodes.request(address, verify_request(
                transactional_id, producer_id, producer_epoch, partitions)),
                timeout=self._nodes.request_timeout_ms / 1000)
        except KafkaError as error:
            return {tp: error for tp in partitions}
        except Exception as error:   # out of time, the login's Ray call failed, an answer not read
            failed = NetworkException(f"verifying with the transaction coordinator failed: {error!r}")
            return {tp: failed for tp in partitions}
        return verify_answer(response, partitions)

    def _coordinator(self, transactional_id: str) -> tuple[str, int]:
        image = self._image()
        nodes = image.transaction_coordinator_nodes
        node = image.nodes.get(nodes[partition_for(transactional_id, len(nodes))]) if nodes else None
        if node is None:
            raise CoordinatorNotAvailable(f"the transaction coordinator of {transactional_id!r} has no endpoint")
        return node.host, node.port
