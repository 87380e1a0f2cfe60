"""DescribeTopicPartitions (KIP-966) judged by kafka-python's KafkaAdminClient
(describe_topic_partitions), on the in-process node (no Ray): on the actors' nodes
and at a broker's edge, as Kafka's AdminClient pages through topics
(kafka-topics.sh --describe), with Kafka's cursor, error and authorization rules."""

import pytest

from rafka.core.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from rafka.protocol.sasl import SaslListener
from tests.core.protocol_node import ProtocolNode
from tests.core.test_sasl_scram import Users

pytestmark = pytest.mark.compat
TIMEOUT_S = 20
NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC, TOPIC_AUTHORIZATION_FAILED, INVALID_REQUEST = 0, 3, 17, 29, 42


@pytest.fixture(params=[False, True], ids=["actor-nodes", "broker-edge"])
def node(tmp_path, request):
    users = Users()
    users.add("alice", "alice-secret")
    with ProtocolNode(tmp_path, {"orders": 3, "facts": 2, "zeta": 1}, sasl=SaslListener(users.credential_for),
                      require_sasl=True, super_users=frozenset({"User:admin"}), edge=request.param) as node:
        node.call(node.create_acls([AclBinding(ResourceType.TOPIC, name, PatternType.LITERAL, "User:alice", "*",
                                               AclOperation.DESCRIBE, AclPermissionType.ALLOW)
                                    for name in ("orders", "facts", "nope", "bad name!")]))
        yield node


@pytest.fixture()
def alice(node):
    from kafka.admin import KafkaAdminClient
    client = KafkaAdminClient(bootstrap_servers=node.bootstrap, security_protocol="SASL_PLAINTEXT",
                              sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                              sasl_plain_password="alice-secret", request_timeout_ms=TIMEOUT_S * 1000)
    yield client
    client.close()


def pages(client, topics, limit):
    """Every page kafka-python gets, following next_cursor as Kafka's AdminClient does."""
    cursor, answered = None, []
    for _ in range(10):   # a cursor that does not move on fails here, rather than looping
        page = client.describe_topic_partitions(topics, response_partition_limit=limit, cursor=cursor)
        answered.append([(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]])
                         for t in page["topics"]])
        cursor = page["next_cursor"]
        if cursor is None:
            return answered
        cursor = {"topic_name": cursor["topic_name"], "partition_index": cursor["partition_index"]}
    raise AssertionError(f"still paging after 10 pages: {answered}")


def test_every_topic_it_may_describe__paged_by_the_cursor_in_name_order(node, alice):
    assert pages(alice, [], 2000) == [[("facts", NONE, [0, 1]), ("orders", NONE, [0, 1, 2])]]
    assert pages(alice, [], 2) == [[("facts", NONE, [0, 1])], [("orders", NONE, [0, 1])], [("orders", NONE, [2])]]
    assert pages(alice, [], 4) == [[("facts", NONE, [0, 1]), ("orders", NONE, [0, 1])], [("orders", NONE, [2])]]
    assert len(pages(alice, [], 0)) == 5   # a limit below 1 is 1 (Kafka's max(min(2000, limit), 1))


def test_named_topics__paged_by_the_cursor_from_the_cursors_topic_on(node, alice):
    """As Kafka's AdminClient pages a describeTopics: the named topics, the cursor
    taking the next page from its topic and partition (topics before it left out)."""
    assert pages(alice, ["orders", "facts"], 1) == [
        [("facts", NONE, [0])], [("facts", NONE, [1])], [("orders", NONE, [0])], [("orders", NONE, [1])],
        [("orders", NONE, [2])]]
    later = alice.describe_topic_partitions(["orders", "facts"], cursor={"topic_name": "orders", "partition_index": 1})
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in later["topics"]] == [
        ("orders", [1, 2])]


def test_named_topics__unknown_invalid_and_unauthorized_answered_as_kafka(node, alice):
    named = ["zeta", "orders", "nope", "bad name!", "orders", "secret"]   # she may describe all but two
    assert pages(alice, named, 2000) == [[
        ("bad name!", INVALID_TOPIC, []), ("nope", UNKNOWN_TOPIC_OR_PARTITION, []), ("orders", NONE, [0, 1, 2]),
        ("secret", TOPIC_AUTHORIZATION_FAILED, []), ("zeta", TOPIC_AUTHORIZATION_FAILED, [])]]
    # the refused ones last, whether they exist or not (their existence is not told)
    page = alice.describe_topic_partitions(["orders"])
    (orders,) = page["topics"]
    (described,) = alice.describe_topics(["orders"])   # Metadata, from the same node
    assert str(orders["topic_id"]) == str(described["topic_id"]) and orders["is_internal"] is False
    assert [(p["partition_index"], p["leader_id"], p["leader_epoch"], p["replica_nodes"], p["isr_nodes"],
             p["offline_replicas"]) for p in orders["partitions"]] == [
        (p["partition_index"], p["leader_id"], p["leader_epoch"], p["replica_nodes"], p["isr_nodes"],
         p["offline_replicas"]) for p in sorted(described["partitions"], key=lambda p: p["partition_index"])]
    # no eligible leader replicas (KIP-966's ELR is off): empty lists (kafka-python reads them as None)
    assert {(bool(p["eligible_leader_replicas"]), bool(p["last_known_elr"])) for p in orders["partitions"]} == {
        (False, False)}
    assert orders["topic_authorized_operations"] == 1 << int(AclOperation.DESCRIBE)


def test_a_cursor_kafka_refuses__invalid_request_on_every_topic_named(node, alice):
    for cursor in ({"topic_name": "facts", "partition_index": 0}, {"topic_name": "orders", "partition_index": -1}):
        page = alice.describe_topic_partitions(["orders", "zeta"], cursor=cursor)
        assert [(t["name"], t["error_code"], t["partitions"]) for t in page["topics"]] == [
            ("orders", INVALID_REQUEST, []), ("zeta", INVALID_REQUEST, [])]
