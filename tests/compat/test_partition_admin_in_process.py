"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments
through admin clients nobody here wrote, on the in-process node (no Ray), at the
actors' nodes and through a broker's node (protocol.edge forwards all three to
the controller's node): confluent-kafka's elect_leaders (it has no reassignment
calls), kafka-python's elect_leaders, alter_partition_reassignments and
list_partition_reassignments, each answered as Kafka answers; rafka's own Admin
and CLI the same way; and a principal without ALTER (or DESCRIBE) on the cluster
refused with CLUSTER_AUTHORIZATION_FAILED, nothing changed.

The node stands in for the controller with its metadata only: replicas neither
start nor stop, so a reassignment stays in progress until it is cancelled (the
cluster tier, tests/cluster/test_admin_apis.py, shows one complete) and every
RF=1 partition's leader is its preferred replica (an election that moves a
leader is shown there too)."""

import argparse
import json

import pytest

from rafka.core.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType, user_principal
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.compat
TIMEOUT_S = 20


@pytest.fixture(params=[False, True], ids=["actor-nodes", "broker-edge"])
def node(tmp_path, request):
    with ProtocolNode(tmp_path, {"orders": 2, "facts": 1}, edge=request.param, brokers=2) as node:
        yield node


def test_confluent_kafka_admin__elect_leaders__as_kafka_answers(node):
    from confluent_kafka import KafkaError as CKafkaError, TopicPartition as CTopicPartition
    from confluent_kafka import ElectionType
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    # no request_timeout: confluent-kafka 2.16.1's elect_leaders fails any keyword
    # argument (SystemError from its C binding); result(TIMEOUT_S) bounds the wait
    asked = [CTopicPartition("orders", 0), CTopicPartition("orders", 1), CTopicPartition("orders", 9),
             CTopicPartition("nope", 0)]
    for election in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        results = admin.elect_leaders(election, asked).result(TIMEOUT_S)
        codes = {(tp.topic, tp.partition): error.code() if error else None for tp, error in results.items()}
        assert codes == {("orders", 0): CKafkaError.ELECTION_NOT_NEEDED, ("orders", 1): CKafkaError.ELECTION_NOT_NEEDED,
                         ("orders", 9): CKafkaError.UNKNOWN_TOPIC_OR_PART,
                         ("nope", 0): CKafkaError.UNKNOWN_TOPIC_OR_PART}, election
    # every partition: those needing no election are left out of the answer
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(TIMEOUT_S) == {}
    assert all(p.leader_epoch == 0 for t in node.metadata.topics.values() for p in t.partitions)


def test_kafka_python_admin__reassignments_altered_listed_cancelled_as_kafka_answers(node):
    from kafka import KafkaAdminClient, TopicPartition as KTopicPartition
    from kafka.errors import (InvalidReplicationAssignmentError, NoReassignmentInProgressError,
                              UnknownTopicOrPartitionError)
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        orders0 = KTopicPartition("orders", 0)
        (broker,) = node.metadata.partition("orders", 0).brokers
        other = 1 - broker
        assert admin.list_partition_reassignments() == {}
        results = admin.alter_partition_reassignments({
            orders0: [other], KTopicPartition("orders", 1): [0, 0], KTopicPartition("orders", 7): [0],
            KTopicPartition("facts", 0): [5], KTopicPartition("nope", 0): None})
        assert results == {orders0: None, KTopicPartition("orders", 1): InvalidReplicationAssignmentError,
                           KTopicPartition("orders", 7): UnknownTopicOrPartitionError,
                           KTopicPartition("facts", 0): InvalidReplicationAssignmentError,
                           KTopicPartition("nope", 0): UnknownTopicOrPartitionError}
        moving = {"replicas": [other, broker], "adding_replicas": [other], "removing_replicas": [broker]}
        assert admin.list_partition_reassignments() == {orders0: moving}
        assert admin.list_partition_reassignments({"orders": [0, 1], "nope": [0]}) == {orders0: moving}
        assert admin.list_partition_reassignments([KTopicPartition("orders", 1)]) == {}

        assert admin.alter_partition_reassignments({orders0: None}) == {orders0: None}
        assert admin.list_partition_reassignments() == {}
        assert node.metadata.partition("orders", 0).brokers == (broker,)
        assert admin.alter_partition_reassignments({orders0: None}) == {orders0: NoReassignmentInProgressError}
    finally:
        admin.close()


def test_kafka_python_admin__elect_leaders__election_not_needed_is_no_error(node):
    from kafka import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        response = admin.elect_leaders(0, {"orders": [0, 1]})
        assert response.error_code == 0
        assert sorted((r.topic, p.partition_id, p.error_code) for r in response.replica_election_results
                      for p in r.partition_result) == [("orders", 0, 84), ("orders", 1, 84)]
    finally:
        admin.close()


def test_refused__no_alter_or_describe_on_the_cluster__cluster_authorization_failed_nothing_changes(tmp_path):
    from confluent_kafka import KafkaError as CKafkaError, KafkaException, TopicPartition as CTopicPartition
    from confluent_kafka import ElectionType
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient, TopicPartition as KTopicPartition
    from kafka.errors import ClusterAuthorizationFailedError
    with ProtocolNode(tmp_path, {"orders": 1}, edge=True, brokers=2) as node:
        # a binding on the cluster for alice only: the anonymous client may not alter or describe it
        node.call(node.create_acls([AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL,
                                               user_principal("alice"), "*", AclOperation.ALTER,
                                               AclPermissionType.ALLOW)]))
        before = dict(node.metadata.topics)
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        with pytest.raises(KafkaException) as raised:
            admin.elect_leaders(ElectionType.PREFERRED, [CTopicPartition("orders", 0)]).result(TIMEOUT_S)
        assert raised.value.args[0].code() == CKafkaError.CLUSTER_AUTHORIZATION_FAILED
        client = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
        try:
            with pytest.raises(ClusterAuthorizationFailedError):
                client.alter_partition_reassignments({KTopicPartition("orders", 0): [0, 1]})
            with pytest.raises(ClusterAuthorizationFailedError):
                client.list_partition_reassignments()
            with pytest.raises(ClusterAuthorizationFailedError):
                client.elect_leaders(1, {"orders": [0]})
        finally:
            client.close()
        assert node.metadata.topics == before


def test_rafka_admin_and_cli__leader_election_and_reassign_partitions_over_the_wire(tmp_path):
    """Through a broker's node, as in a cluster (its Metadata names replicas by broker id)."""
    with ProtocolNode(tmp_path / "node", {"orders": 2, "facts": 1}, edge=True, brokers=2) as node:
        check_rafka_admin_and_cli(tmp_path, node)


def check_rafka_admin_and_cli(tmp_path, node):
    from rafka import cli_partitions
    from rafka.core.errors import ElectionNotNeeded, UnknownTopicOrPartition
    admin = node.wire_admin(default_api_timeout_ms=TIMEOUT_S * 1000)
    results = admin.elect_leaders(0, [("orders", 0), ("nope", 0)])
    assert {tp: type(e) for tp, e in results.items()} == {("orders", 0): ElectionNotNeeded,
                                                           ("nope", 0): UnknownTopicOrPartition}
    printed = []
    args = argparse.Namespace(election_type="PREFERRED", topic=None, partition=None, all_topic_partitions=False,
                              path_to_json_file=str(tmp_path / "elect.json"))
    (tmp_path / "elect.json").write_text(json.dumps({"partitions": [{"topic": "orders", "partition": 1},
                                                                    {"topic": "orders", "partition": 0}]}))
    assert cli_partitions.cmd_leader_election(lambda: admin, args, out=printed.append) == 0
    assert printed == ["Valid replica already elected for partitions orders-0, orders-1"]

    (broker,) = node.metadata.partition("facts", 0).brokers
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "facts", "partition": 0,
                                                              "replicas": [1 - broker]}]}))
    for action, code, lines in [
            ("execute", 0, ["Successfully started partition reassignment for facts-0"]),
            ("verify", 1, ["Status of partition reassignment:",
                           "Reassignment of partition facts-0 is still in progress."]),
            ("cancel", 0, ["Successfully cancelled partition reassignment for facts-0"]),
            ("verify", 1, ["Status of partition reassignment:",
                           f"There is no active reassignment of partition facts-0, but replica set is "
                           f"[{broker}] rather than [{1 - broker}]."]),
            ("cancel", 1, ["Error cancelling partition reassignment(s):",
                           "facts-0: NO_REASSIGNMENT_IN_PROGRESS: No partition reassignment is in progress."])]:
        printed = []
        flags = {name: name == action for name in ("execute", "verify", "cancel")}
        assert cli_partitions.cmd_reassign_partitions(
            admin, argparse.Namespace(reassignment_json_file=str(plan), **flags), out=printed.append) == code, action
        assert printed == lines, action


def test_elect_leaders__unknown_election_type__invalid_request_at_the_top_and_per_partition(node):
    from kio.schema.errors import ErrorCode
    from rafka.protocol import admin_requests
    from rafka.protocol.connection import Connection

    async def ask():
        connection = await Connection.open("127.0.0.1", node.port)
        try:
            return await connection.request(admin_requests.elect_leaders_request(
                5, [("orders", 0), ("orders", 1)], timeout_ms=1000))
        finally:
            await connection.close()
    answer = node.call(ask())
    assert answer.error_code == ErrorCode.invalid_request
    assert [(r.topic, int(p.partition_id), p.error_code, p.error_message) for r in answer.replica_election_results
            for p in r.partition_result] == [("orders", i, ErrorCode.invalid_request, "Unknown election type 5")
                                             for i in (0, 1)]
