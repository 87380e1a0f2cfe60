"""rafka's own transactional Producer and read_committed Consumer against the
in-process node's transaction coordinator (a real TransactionShard behind the
wire handlers): commits and aborts read back by rafka's Consumer at both
isolation levels and by confluent-kafka's read_committed consumer; zombie
fencing; send_offsets_to_transaction, its offsets committed with the transaction."""

import pytest

from rafka.client.consumer import Consumer
from rafka.client.producer import Producer
from rafka.core.errors import IllegalStateError, KafkaError, ProducerFenced, TransactionAborted
from rafka.core.producer_transaction import TransactionState
from rafka.core.structs import OffsetAndMetadata, TopicPartition
from tests.compat import confluent_reads
from tests.compat.test_transactions_in_process import settle, txn_states
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.compat


@pytest.fixture(params=["actor node", "broker edge"])
def node(tmp_path, request):
    with ProtocolNode(tmp_path, {"orders": 2}, edge=request.param == "broker edge") as node:
        yield node


def rafka_values(node, isolation_level, partitions=(0, 1)):
    """Every value rafka's Consumer at `isolation_level` reads from the start, by
    partition, up to the end offset it is given (the LSO read_committed)."""
    with Consumer(node.bootstrap, isolation_level=isolation_level, auto_offset_reset="earliest",
                  fetch_max_wait_ms=50) as consumer:
        tps = [TopicPartition("orders", p) for p in partitions]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        values = {p: [] for p in partitions}
        for _ in range(200):
            if all(consumer.position(tp) >= ends[tp] for tp in tps):
                break
            for record in consumer.poll(timeout=0.2):
                values[record.partition].append(record.value)
        assert all(consumer.position(tp) == ends[tp] for tp in tps), (values, ends)
        return values


def test_rafka_producer__commit_abort_commit__read_committed_sees_the_commits_only(node):
    producer = Producer(node.bootstrap, transactional_id="rk-txn", transaction_timeout_ms=30_000, linger_ms=0)
    try:
        producer.init_transactions()
        assert node.transactions.shard.metadata["rk-txn"].producer_epoch == 0
        assert producer.producer_id == node.transactions.shard.metadata["rk-txn"].producer_id

        producer.begin_transaction()
        for i in range(3):
            producer.send("orders", value=f"c{i}".encode(), partition=i % 2)
        producer.commit_transaction()
        settle(node, "rk-txn", "CompleteCommit")

        producer.begin_transaction()
        sent = producer.send("orders", value=b"a0", partition=0)
        producer.flush()
        assert sent.result().offset >= 0
        producer.abort_transaction()
        settle(node, "rk-txn", "CompleteAbort")

        producer.begin_transaction()
        producer.send("orders", value=b"c3", partition=1)
        producer.commit_transaction()
        settle(node, "rk-txn", "CompleteCommit")
    finally:
        producer.close()
    assert txn_states(node, "rk-txn") == [
        "Empty", "Ongoing", "PrepareCommit", "CompleteCommit",
        "Ongoing", "PrepareAbort", "CompleteAbort",
        "Ongoing", "PrepareCommit", "CompleteCommit"]
    committed = {0: [b"c0", b"c2"], 1: [b"c1", b"c3"]}
    assert rafka_values(node, "read_committed") == committed
    assert rafka_values(node, "read_uncommitted") == {0: [b"c0", b"c2", b"a0"], 1: [b"c1", b"c3"]}
    assert confluent_reads.read_values(node.bootstrap, "orders", "read_committed", timeout_s=30) == committed


def test_rafka_producer__open_transaction__read_committed_stops_at_the_lso(node):
    producer = Producer(node.bootstrap, transactional_id="open", linger_ms=0)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("orders", value=b"c", partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send("orders", value=b"open", partition=0).result(timeout=10)
        assert rafka_values(node, "read_committed", partitions=(0,)) == {0: [b"c"]}
        assert rafka_values(node, "read_uncommitted", partitions=(0,)) == {0: [b"c", b"open"]}
        producer.abort_transaction()
    finally:
        producer.close()


def test_rafka_producer__abort__unsent_records_fail_transaction_aborted(node):
    producer = Producer(node.bootstrap, transactional_id="unsent", linger_ms=60_000, batch_size=1 << 20)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        lingering = producer.send("orders", value=b"never", partition=1)
        producer.abort_transaction()
        assert isinstance(lingering.exception(timeout=10), TransactionAborted)
        assert producer._txn.state is TransactionState.READY
        assert "Ongoing" not in txn_states(node, "unsent")   # nothing reached the coordinator: no EndTxn
    finally:
        producer.close()
    assert rafka_values(node, "read_uncommitted", partitions=(1,)) == {1: []}


def test_rafka_producer__calls_out_of_order__illegal_state(node):
    producer = Producer(node.bootstrap, transactional_id="order")
    try:
        with pytest.raises(IllegalStateError, match="init_transactions"):
            producer.send("orders", value=b"x", partition=0)
        producer.init_transactions()
        with pytest.raises(IllegalStateError, match="READY"):
            producer.send("orders", value=b"x", partition=0)
        with pytest.raises(IllegalStateError, match="READY"):
            producer.commit_transaction()
        with pytest.raises(IllegalStateError, match="Cannot send offsets"):
            producer.send_offsets_to_transaction({TopicPartition("orders", 0): 1}, "g")
    finally:
        producer.close()
    with Producer(node.bootstrap) as plain, pytest.raises(IllegalStateError, match="non-transactional"):
        plain.begin_transaction()


def test_rafka_producer__second_producer_with_the_same_id__fences_the_first(node):
    first = Producer(node.bootstrap, transactional_id="zombie", linger_ms=0)
    second = Producer(node.bootstrap, transactional_id="zombie", linger_ms=0)
    try:
        first.init_transactions()
        first.begin_transaction()
        first.send("orders", value=b"z0", partition=0).result(timeout=10)
        second.init_transactions()          # aborts the first's open transaction, then bumps the epoch
        assert node.transactions.shard.metadata["zombie"].producer_epoch == 2
        assert "CompleteAbort" in txn_states(node, "zombie")
        with pytest.raises(ProducerFenced):
            first.commit_transaction()
        assert first._txn.state is TransactionState.FATAL_ERROR
        with pytest.raises(ProducerFenced):
            first.begin_transaction()
        second.begin_transaction()
        second.send("orders", value=b"s0", partition=1)
        second.commit_transaction()
        settle(node, "zombie", "CompleteCommit")
    finally:
        first.close()
        second.close()
    assert rafka_values(node, "read_committed") == {0: [], 1: [b"s0"]}
    assert rafka_values(node, "read_uncommitted") == {0: [b"z0"], 1: [b"s0"]}


def test_rafka_producer__send_offsets_to_transaction__the_offsets_are_the_groups_with_the_commit(node):
    """AddOffsetsToTxn puts the group's __consumer_offsets partition in the
    transaction; TxnOffsetCommit's offsets stay pending (a read_committed
    consumer's committed() would wait) until the commit's marker."""
    consumer = Consumer(node.bootstrap, group_id="eos-group", enable_auto_commit=False)
    producer = Producer(node.bootstrap, transactional_id="eos", linger_ms=0, max_block_ms=3_000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("orders", value=b"out", partition=0)
        offsets = {TopicPartition("orders", 1): OffsetAndMetadata(7, "meta")}
        producer.send_offsets_to_transaction(offsets, consumer.group_metadata(), timeout=3)
        assert ("__consumer_offsets", 0) in node.transactions.shard.metadata["eos"].topic_partitions
        assert consumer.committed([TopicPartition("orders", 1)]) == {TopicPartition("orders", 1): None}
        producer.commit_transaction()
        settle(node, "eos", "CompleteCommit")
        assert consumer.committed([TopicPartition("orders", 1)])[TopicPartition("orders", 1)].offset == 7
    finally:
        producer.close()
        consumer.close()


def test_rafka_consumer__read_committed__committed_waits_for_a_pending_transaction_offset(node):
    """KIP-447's require_stable: a read_committed consumer's committed() (and so
    the position a new owner of the partition starts from) is not answered while
    a transaction's offset is pending; read_uncommitted gets the last stable one
    at once. After the commit both read the transaction's offset."""
    stable = Consumer(node.bootstrap, group_id="eos-stable", enable_auto_commit=False,
                      isolation_level="read_committed", default_api_timeout_ms=1_000)
    plain = Consumer(node.bootstrap, group_id="eos-stable", enable_auto_commit=False)
    producer = Producer(node.bootstrap, transactional_id="eos-stable", linger_ms=0, max_block_ms=3_000)
    tp = TopicPartition("orders", 0)
    try:
        plain.commit_sync({tp: 3})
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({tp: 9}, stable.group_metadata(), timeout=3)
        with pytest.raises(KafkaError, match="UNSTABLE_OFFSET_COMMIT|pending"):
            stable.committed([tp])
        assert plain.committed([tp])[tp].offset == 3
        producer.commit_transaction()
        settle(node, "eos-stable", "CompleteCommit")
        assert stable.committed([tp])[tp].offset == 9
        assert plain.committed([tp])[tp].offset == 9
    finally:
        producer.close()
        plain.close()
        stable.close()


def test_rafka_producer__a_batch_failed_for_good__abort_bumps_the_epoch__the_next_commit_on_that_partition_is_whole(
        tmp_path):
    """A batch the broker refuses for good (larger than the topic's
    max.message.bytes) makes the transaction abortable with an epoch bump
    (KIP-360). The next transaction, sent to the same partition, must add it to
    the transaction again: skipped, its records would get no commit marker and
    stay in an open transaction, holding read_committed back (issue found by
    `rafka verify` as torn transactions and aborted reads)."""
    with ProtocolNode(tmp_path, {"orders": 2}, configs={"orders": {"max.message.bytes": "2000"}}) as node:
        producer = Producer(node.bootstrap, transactional_id="bumped", linger_ms=0)
        try:
            producer.init_transactions()
            first_epoch = producer.producer_epoch
            producer.begin_transaction()
            producer.send("orders", value=b"aborted", partition=0).result(timeout=10)
            refused = producer.send("orders", value=b"x" * 5000, partition=0)
            with pytest.raises(KafkaError):
                refused.result(timeout=10)
            producer.abort_transaction()
            assert producer.producer_epoch > first_epoch   # the abort bumped it
            producer.begin_transaction()
            producer.send("orders", value=b"committed", partition=0)
            producer.commit_transaction()
        finally:
            producer.close()
        assert rafka_values(node, "read_committed", partitions=(0,)) == {0: [b"committed"]}
