"""DescribeQuorum judged by kafka-python's KafkaAdminClient
(describe_metadata_quorum: kafka-metadata-quorum.sh describe's request), on the
in-process node (no Ray): at the actors' nodes and through a broker's edge, which
relays it to the controller's node in an envelope, as Kafka's brokers forward it.
The node's stand-in for the controller tells the quorum as actors.controller does
(tests/core/protocol_node.py `quorum`); Kafka's refusals and errors on the wire."""

import asyncio

import pytest
from kio.schema.describe_quorum.v2 import request as v2
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from rafka.core.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from rafka.protocol.connection import Connection
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.compat
TIMEOUT_S = 20


@pytest.fixture(params=[False, True], ids=["actor-nodes", "broker-edge"])
def node(tmp_path, request):
    with ProtocolNode(tmp_path, {"orders": 1}, edge=request.param) as node:
        yield node


def on_the_wire(node, *topics):
    async def ask():
        connection = await Connection.open("127.0.0.1", node.port)
        try:
            return await connection.request(v2.DescribeQuorumRequest(topics=tuple(
                v2.TopicData(topic_name=name, partitions=tuple(v2.PartitionData(partition_index=i32(p))
                                                               for p in partitions)) for name, partitions in topics)))
        finally:
            await connection.close()
    return asyncio.run(ask())


def test_kafka_python__the_controller_the_one_voter_at_the_logs_end__brokers_observe(node):
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        quorum = admin.describe_metadata_quorum()
    finally:
        admin.close()
    image = node.image()
    controller = image.nodes[image.controller_node]
    ((topic),) = quorum["topics"]
    (partition,) = topic["partitions"]
    assert topic["topic_name"] == "__cluster_metadata" and partition["error"] is None
    assert (partition["partition_index"], partition["leader_id"], partition["leader_epoch"],
            partition["high_watermark"]) == (0, image.controller_node, 1, image.version)
    assert [(v["replica_id"], v["log_end_offset"]) for v in partition["current_voters"]] == [
        (image.controller_node, image.version)]
    assert [(o["replica_id"], o["log_end_offset"], o["last_fetch_timestamp"]) for o in partition["observers"]] == [
        (0, image.version, 900)]
    assert [(n["node_id"], [(l["name"], l["host"], l["port"]) for l in n["listeners"]]) for n in quorum["nodes"]] == [
        (image.controller_node, [("CONTROLLER", controller.host, controller.port)])]


def test_not_the_metadata_partition__unknown_topic_or_partition_on_each_named(node):
    answer = on_the_wire(node, ("orders", [0]), ("__cluster_metadata", [0]))
    assert answer.error_code == ErrorCode.none
    assert [(t.topic_name, [(int(p.partition_index), p.error_code) for p in t.partitions]) for t in answer.topics] == [
        ("orders", [(0, ErrorCode.unknown_topic_or_partition)]),
        ("__cluster_metadata", [(0, ErrorCode.unknown_topic_or_partition)])]
    (topic,) = on_the_wire(node, ("__cluster_metadata", [1])).topics
    assert [p.error_code for p in topic.partitions] == [ErrorCode.unknown_topic_or_partition]
    assert topic.partitions[0].error_message == "This server does not host this topic-partition."


def test_no_describe_on_the_cluster__the_top_level_cluster_authorization_failed(node):
    node.call(node.create_acls([AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL,
                                           "User:someone-else", "*", AclOperation.DESCRIBE,
                                           AclPermissionType.ALLOW)]))
    answer = on_the_wire(node, ("__cluster_metadata", [0]))
    assert (answer.error_code, answer.error_message, answer.topics) == (
        ErrorCode.cluster_authorization_failed, "Cluster authorization failed.", ())
