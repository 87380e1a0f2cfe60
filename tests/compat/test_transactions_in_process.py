"""confluent-kafka's (librdkafka's) transactional producer against the in-process
node's transaction coordinator (a real TransactionShard behind the wire
handlers): FindCoordinator for the transactional id, InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn; zombie fencing; and the admin's
ListTransactions / DescribeTransactions; the markers the coordinator writes to the
partitions, read back by read_committed and read_uncommitted consumers."""

import time

import pytest

from rafka.core.transaction_log import decode_key, decode_value
from tests.compat import confluent_reads
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.compat


@pytest.fixture(params=["actor node", "broker edge"])
def node(tmp_path, request):
    """Clients at the actors' node, or at a broker's node in front of it (protocol.edge
    routes the transaction APIs to the transaction coordinator's node)."""
    with ProtocolNode(tmp_path, {"orders": 2}, edge=request.param == "broker edge") as node:
        yield node


def txn_states(node, transactional_id):
    """The states the coordinator wrote to __transaction_state for the id, in order."""
    return [None if value is None else decode_value(value).state.value
            for key, value in node.transactions.records if decode_key(key).transactional_id == transactional_id]


def settle(node, transactional_id, state, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if node.transactions.shard.metadata[transactional_id].state.value == state:
            return
        time.sleep(0.05)
    raise AssertionError(f"{transactional_id} never reached {state}: {txn_states(node, transactional_id)}")


def test_confluent_kafka__transactional_producer__commit_then_abort_then_commit(node):
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "ck-txn",
                         "transaction.timeout.ms": 30_000})
    producer.init_transactions(30)
    metadata = node.transactions.shard.metadata["ck-txn"]
    producer_id = metadata.producer_id
    assert (metadata.state.value, metadata.producer_epoch) == ("Empty", 0)

    producer.begin_transaction()
    for i in range(3):
        producer.produce("orders", value=f"c{i}".encode(), partition=i % 2)
    producer.commit_transaction(30)
    settle(node, "ck-txn", "CompleteCommit")

    producer.begin_transaction()
    producer.produce("orders", value=b"a0", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)
    settle(node, "ck-txn", "CompleteAbort")

    producer.begin_transaction()
    producer.produce("orders", value=b"c3", partition=1)
    producer.commit_transaction(30)
    settle(node, "ck-txn", "CompleteCommit")

    assert txn_states(node, "ck-txn") == [
        "Empty", "Ongoing", "PrepareCommit", "CompleteCommit",
        "Ongoing", "PrepareAbort", "CompleteAbort",
        "Ongoing", "PrepareCommit", "CompleteCommit"]
    # each partition holds its data and one marker per transaction that touched it
    assert read_values(node, "read_committed") == {0: [b"c0", b"c2"], 1: [b"c1", b"c3"]}
    assert read_values(node, "read_uncommitted") == {0: [b"c0", b"c2", b"a0"], 1: [b"c1", b"c3"]}


def read_values(node, isolation_level):
    return confluent_reads.read_values(node.bootstrap, "orders", isolation_level, timeout_s=30)


def test_confluent_kafka__send_offsets_to_transaction__offsets_partition_joins(node):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CTopicPartition
    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "ctp"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("orders", value=b"out", partition=0)
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "ctp-group", "enable.auto.commit": False})
    try:
        # AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator
        producer.send_offsets_to_transaction([CTopicPartition("orders", 0, 1)],
                                             consumer.consumer_group_metadata(), 10)
    finally:
        consumer.close()
    assert ("__consumer_offsets", 0) in node.transactions.shard.metadata["ctp"].topic_partitions


def test_confluent_kafka__second_producer_with_the_same_id_fences_the_first(node):
    from confluent_kafka import KafkaError, KafkaException, Producer
    config = {"bootstrap.servers": node.bootstrap, "transactional.id": "zombie"}
    first = Producer(config)
    first.init_transactions(30)
    first.begin_transaction()
    first.produce("orders", value=b"z0", partition=0)
    first.flush(30)
    second = Producer(config)
    second.init_transactions(30)        # aborts the first's open transaction, then bumps the epoch
    assert node.transactions.shard.metadata["zombie"].producer_epoch == 2
    assert "CompleteAbort" in txn_states(node, "zombie")
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(30)
    assert raised.value.args[0].code() == KafkaError._FENCED and raised.value.args[0].fatal()
    second.begin_transaction()
    second.produce("orders", value=b"s0", partition=1)
    second.commit_transaction(30)
    settle(node, "zombie", "CompleteCommit")


def exchange(node, *requests):
    from rafka.protocol.connection import Connection

    async def go():
        connection = await Connection.open("127.0.0.1", node.port)
        try:
            return [await connection.request(r) for r in requests]
        finally:
            await connection.close()
    return node.call(go())


def test_describe_and_list_transactions__an_open_confluent_transaction(node):
    from confluent_kafka import Producer
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
    from kio.schema.errors import ErrorCode
    from kio.schema.list_transactions.v1.request import ListTransactionsRequest
    from kio.static.primitive import i64
    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "listed",
                         "transaction.timeout.ms": 45_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("orders", value=b"x", partition=1)
    producer.flush(30)
    producer_id = node.transactions.shard.metadata["listed"].producer_id
    described, listed, filtered = exchange(
        node, DescribeTransactionsRequest(transactional_ids=("listed", "nobody")),
        ListTransactionsRequest(state_filters=(), producer_id_filters=(), duration_filter=i64(-1)),
        ListTransactionsRequest(state_filters=("CompleteCommit", "Bogus"), producer_id_filters=(),
                                duration_filter=i64(-1)))
    found, missing = described.transaction_states
    assert (found.error_code, found.transaction_state, found.producer_id, found.producer_epoch) == (
        ErrorCode.none, "Ongoing", producer_id, 0)
    assert found.transaction_timeout.total_seconds() == 45
    assert [(t.topic, tuple(t.partitions)) for t in found.topics] == [("orders", (1,))]
    assert missing.error_code == ErrorCode.transactional_id_not_found
    assert [(t.transactional_id, t.producer_id, t.transaction_state) for t in listed.transaction_states] == [
        ("listed", producer_id, "Ongoing")]
    assert filtered.transaction_states == () and filtered.unknown_state_filters == ("Bogus",)
    producer.abort_transaction(30)


# --- offsets in transactions: TxnOffsetCommit, the markers at the group coordinator, require_stable ---

def offsets_consumer(node, group, **config):
    from confluent_kafka import Consumer
    return Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "enable.auto.commit": False,
                     **config})


def committed(consumer, partitions, timeout_s=10):
    from confluent_kafka import TopicPartition
    return {tp.partition: tp.offset for tp in consumer.committed([TopicPartition("orders", p) for p in partitions],
                                                                 timeout=timeout_s)}


def send_offsets(producer, consumer, offsets):
    from confluent_kafka import TopicPartition
    producer.send_offsets_to_transaction([TopicPartition("orders", p, o) for p, o in offsets.items()],
                                         consumer.consumer_group_metadata(), 30)


def test_confluent_kafka__send_offsets_to_transaction__visible_on_commit_never_on_abort(node):
    from confluent_kafka import OFFSET_INVALID, Producer
    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "ck-offsets"})
    producer.init_transactions(30)
    consumer = offsets_consumer(node, "eos-group")
    try:
        producer.begin_transaction()
        producer.produce("orders", value=b"out-1", partition=0)
        send_offsets(producer, consumer, {0: 5, 1: 7})
        # written, pending until the marker: OffsetFetch does not see them
        assert node.coordinator.shard.fetch_offsets("eos-group", [("orders", 0), ("orders", 1)]) == {
            ("orders", 0): None, ("orders", 1): None}
        assert node.coordinator.shard.offsets.pending_partitions("eos-group") == {("orders", 0), ("orders", 1)}
        producer.commit_transaction(30)
        settle(node, "ck-offsets", "CompleteCommit")
        assert committed(consumer, [0, 1]) == {0: 5, 1: 7}

        producer.begin_transaction()
        producer.produce("orders", value=b"out-2", partition=0)
        send_offsets(producer, consumer, {0: 9})
        producer.abort_transaction(30)
        settle(node, "ck-offsets", "CompleteAbort")
        assert committed(consumer, [0, 1]) == {0: 5, 1: 7}   # the aborted 9 never shows
        assert node.coordinator.shard.offsets.pending_partitions("eos-group") == set()

        producer.begin_transaction()
        send_offsets(producer, offsets_consumer(node, "fresh-group"), {1: 3})
        producer.abort_transaction(30)
        settle(node, "ck-offsets", "CompleteAbort")
        assert committed(offsets_consumer(node, "fresh-group"), [1]) == {1: OFFSET_INVALID}
    finally:
        consumer.close()


def test_confluent_kafka__read_committed_consumer__committed_waits_while_the_offset_is_pending(node):
    """librdkafka's read_committed consumer asks OffsetFetch with require_stable:
    UNSTABLE_OFFSET_COMMIT while the transaction is open, which it retries; it
    gets the offset once the transaction commits."""
    import threading
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "ck-stable"})
    producer.init_transactions(30)
    writer = offsets_consumer(node, "stable-group")
    reader = offsets_consumer(node, "stable-group", **{"isolation.level": "read_committed"})
    plain = offsets_consumer(node, "stable-group", **{"isolation.level": "read_uncommitted"})
    try:
        producer.begin_transaction()
        send_offsets(producer, writer, {0: 11})
        assert committed(plain, [0]) == {0: -1001}   # no require_stable: the last stable answer, none
        answers = {}

        def ask():
            started = time.monotonic()
            answers["offsets"] = committed(reader, [0], timeout_s=30)
            answers["waited_s"] = time.monotonic() - started
        asking = threading.Thread(target=ask)
        asking.start()
        time.sleep(1.5)
        assert asking.is_alive(), f"answered while the offset was pending: {answers}"
        producer.commit_transaction(30)
        asking.join(30)
        assert answers["offsets"] == {0: 11}
        assert answers["waited_s"] >= 1.4
    finally:
        for consumer in (writer, reader, plain):
            consumer.close()
