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


def on_the_wire(node, *topics, request=None):
    async def ask():
        connection = await Connection.open("127.0.0.1", node.port)
        try:
            return await connection.request(request or v2.DescribeQuorumRequest(topics=tuple(
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
            partition["high_watermark"]) == (0, 0, 1, image.version)
    assert [(v["replica_id"], v["log_end_offset"]) for v in partition["current_voters"]] == [(0, image.version)]
    assert [(o["replica_id"], o["log_end_offset"], o["last_fetch_timestamp"], o["last_caught_up_timestamp"])
            for o in partition["observers"]] == [(1, image.version - 1, 900, 800)]
    assert [(n["node_id"], [(l["name"], l["host"], l["port"]) for l in n["listeners"]]) for n in quorum["nodes"]] == [
        (0, [("CONTROLLER", controller.host, controller.port)])]


@pytest.mark.parametrize("version", [0, 1])
def test_versions_0_and_1__the_same_quorum_without_the_node_list(node, version):
    """Kafka 3.3-3.8's tools ask v0 or v1 (no error messages, no nodes; v0 no timestamps)."""
    import importlib
    request = importlib.import_module(f"kio.schema.describe_quorum.v{version}.request")
    answer = on_the_wire(node, request=request.DescribeQuorumRequest(topics=(request.TopicData(
        topic_name="__cluster_metadata", partitions=(request.PartitionData(partition_index=i32(0)),)),)))
    (topic,) = answer.topics
    (partition,) = topic.partitions
    assert (answer.error_code, partition.error_code, partition.leader_id, partition.high_watermark) == (
        ErrorCode.none, ErrorCode.none, 0, node.image().version)
    assert [int(o.replica_id) for o in partition.observers] == [1] and not hasattr(answer, "nodes")


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


@pytest.mark.parametrize("quorum, error, top_level", [
    (None, ErrorCode.not_leader_or_follower, False),   # an actor's internal node: not the quorum's leader
    ("unreachable", ErrorCode.request_timed_out, True)])   # a broker that could not relay it to the controller
def test_a_node_without_the_quorum__kafkas_answer(quorum, error, top_level):
    from rafka.protocol.dispatch import RequestContext
    from rafka.protocol.handlers.describe_quorum import CONTROLLER_UNREACHABLE, describe_quorum
    context = RequestContext(api_key=55, api_version=2, correlation_id=1, client_id="tool", connection_id="c",
                             supported_api_versions=())
    body = v2.DescribeQuorumRequest(topics=(v2.TopicData(topic_name="__cluster_metadata",
                                                         partitions=(v2.PartitionData(partition_index=i32(0)),)),))
    answer = describe_quorum(CONTROLLER_UNREACHABLE if quorum == "unreachable" else None, body, context)
    if top_level:
        assert (answer.error_code, answer.topics) == (error, ())
    else:
        ((partition,),) = [t.partitions for t in answer.topics]
        assert (answer.error_code, partition.error_code) == (ErrorCode.none, error)
