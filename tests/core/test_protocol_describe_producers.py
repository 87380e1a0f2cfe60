"""DescribeProducers on the wire (kafka-transactions.sh's view of a partition's
producers), and the WriteTxnMarkers an operator's abort sends, through a broker's
node (protocol.edge) in front of the in-process node's replicas: each producer's
epoch, last sequence, last timestamp, coordinator epoch and open transaction;
Kafka's errors for what is not there or not hosted here; the edge sending the
partition to this broker's replica, a follower too, and a marker to the
partition's leader. Authorization is in test_protocol_authorization's table."""

import random

import pytest
from kio.schema.describe_producers.v0 import request as describe_producers_v0
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from rafka.core.actor_names import broker_actor_name
from rafka.core.cluster_image import build_image
from rafka.core.metadata import ClusterMetadata
from rafka.core.producer_state import ActiveProducer
from rafka.core.records import ATTR_TRANSACTIONAL, RecordInput, encode_batch
from rafka.core.transaction_shard import TxnMarker
from rafka.protocol.edge import EdgeDispatcher
from rafka.protocol.node_table import node_table
from rafka.protocol.txn_admin_requests import describe_producers_answer, describe_producers_request
from rafka.protocol.txn_markers import write_txn_markers_answers, write_txn_markers_request
from tests.core.helpers import assign_shells
from tests.core.protocol_node import ProtocolNode
from tests.core.test_protocol_edge import exchange, node  # noqa: F401 (node: the edge's fixture, "orders": 2)
from tests.core.test_protocol_partitions import produce_request

pytestmark = pytest.mark.core


def producer_batch(producer_id, epoch, sequence, *timestamps_ms, transactional=False):
    return encode_batch([RecordInput(b"v%d" % t, b"k", t) for t in timestamps_ms], producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence,
                        attributes=ATTR_TRANSACTIONAL if transactional else 0)


def described(node, *partitions):
    (answer,) = exchange(node, describe_producers_request(partitions))
    return answer, describe_producers_answer(answer, partitions)


def test_each_producer__epoch_last_sequence_timestamp_coordinator_epoch_and_its_open_transaction(node):
    (idempotent,) = exchange(node, produce_request(producer_batch(1000, 0, 0, 5_000, 5_007)))
    assert [p.error_code for r in idempotent.responses for p in r.partition_responses] == [ErrorCode.none]
    # a transactional batch no coordinator knows of (a hanging transaction's stand-in)
    assert node.append_unverified("orders", 0, producer_batch(2000, 3, 0, 6_000, transactional=True)) == 2
    answer, found = described(node, ("orders", 0), ("orders", 1))
    assert found == {("orders", 0): [ActiveProducer(1000, 0, 1, 5_007, -1, -1), ActiveProducer(2000, 3, 0, 6_000, -1, 2)],
                     ("orders", 1): []}
    assert node.edge.split_requests == 1   # two actors: one request each, merged into one topic entry
    assert [t.name for t in answer.topics] == ["orders"]

    # the operator's abort: an ABORT marker at the leader, through the broker's node
    marker = TxnMarker("orders", 0, 2000, 3, 5, commit=False)
    (written,) = exchange(node, write_txn_markers_request([marker]))
    assert write_txn_markers_answers(written, [marker]) == {("orders", 0): None}
    _, found = described(node, ("orders", 0))
    (_, aborted), = [(p.producer_id, p) for p in found[("orders", 0)] if p.producer_id == 2000]
    assert (aborted.coordinator_epoch, aborted.current_txn_start_offset) == (5, -1)
    assert node.endpoints[("orders", 0)].replica.log.last_stable_offset == 4   # past the marker at 3


def test_errors__unknown_topic_and_partition__illegal_name__each_partition_as_listed(node):
    request = describe_producers_v0.DescribeProducersRequest(topics=(
        describe_producers_v0.TopicRequest(name="orders", partition_indexes=(i32(7), i32(0))),
        describe_producers_v0.TopicRequest(name="nope", partition_indexes=(i32(0),)),
        describe_producers_v0.TopicRequest(name="bad name!", partition_indexes=(i32(0), i32(1)))))
    (answer,) = exchange(node, request)
    assert [(t.name, int(p.partition_index), p.error_code) for t in answer.topics for p in t.partitions] == [
        ("orders", 7, ErrorCode.unknown_topic_or_partition), ("orders", 0, ErrorCode.none),
        ("nope", 0, ErrorCode.unknown_topic_or_partition),
        ("bad name!", 0, ErrorCode.invalid_topic_exception), ("bad name!", 1, ErrorCode.invalid_topic_exception)]
    assert "illegal" in answer.topics[2].partitions[0].error_message


def test_partition_on_another_broker__not_leader_or_follower(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 4}, edge=True, brokers=2) as node:
        on_broker = {p.partition: p.replica_brokers[0] for p in node.image().topics["orders"].partitions}
        elsewhere = next(p for p, b in on_broker.items() if b == 1)
        here = next(p for p, b in on_broker.items() if b == 0)
        _, found = described(node, ("orders", elsewhere), ("orders", here))
        assert found[("orders", elsewhere)].kafka_name == "NOT_LEADER_OR_FOLLOWER"
        assert found[("orders", here)] == []


def test_marker_spanning_two_actors__split_and_answered_as_one_producer_and_topic(node):
    markers = [TxnMarker("orders", p, 3000, 0, 0, commit=True) for p in (0, 1)]
    (answer,) = exchange(node, write_txn_markers_request(markers))
    (result,) = answer.markers
    (topic,) = result.topics
    assert (int(result.producer_id), topic.name) == (3000, "orders")
    assert sorted((int(p.partition_index), p.error_code) for p in topic.partitions) == [
        (0, ErrorCode.none), (1, ErrorCode.none)]
    assert [node.endpoints[("orders", p)].replica.log.log_end_offset for p in (0, 1)] == [1, 1]


def test_edge__describe_producers_goes_to_this_brokers_follower__produce_and_markers_only_to_a_leader():
    """Broker 0 holds a follower of a partition led on broker 1: DescribeProducers
    is relayed to that follower (Kafka answers it from any replica's log), Produce
    and WriteTxnMarkers are answered here (NOT_LEADER_OR_FOLLOWER)."""
    metadata = ClusterMetadata()
    apply = lambda records: [metadata.replay(r) for r in records]   # noqa: E731
    apply(metadata.handle_start())
    apply(metadata.handle_create_topic("orders", 2, 2, None, [0, 1], rng=random.Random(0))[0])
    assign_shells(metadata, "orders")
    for port, (p, state) in enumerate(enumerate(metadata.topics["orders"].partitions), start=9100):
        for r in state.replicas:
            apply(metadata.handle_register_node(metadata.replica_actor("orders", p, r), "127.0.0.1",
                                                port * 10 + r, str(state.broker_of(r)))[0])
    apply(metadata.handle_register_node(broker_actor_name(0), "127.0.0.1", 9000)[0])
    image = build_image(metadata, version=1)
    (p, state), = [(p, s) for p, s in enumerate(image.topics["orders"].partitions) if s.leader_broker == 1]
    follower_here = next(image.nodes[n] for n in state.replica_nodes if image.nodes[n].rack == "0")
    edge = EdgeDispatcher(node_table(image=lambda: image, allocate_producer_id=None), broker_id=0,
                          image=lambda: image, view=lambda: image)
    assert edge._partition_targets(61, describe_producers_request([("orders", p)])) == {
        (follower_here.host, follower_here.port): describe_producers_request([("orders", p)])}
    assert list(edge._partition_targets(0, produce_request(b"", partition=p))) == [None]
    assert list(edge._marker_targets(write_txn_markers_request([TxnMarker("orders", p, 1, 0, 0, False)]))) == [None]
