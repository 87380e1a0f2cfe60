"""DescribeCluster, DescribeLogDirs and DeleteRecords through admin clients
nobody here wrote, on the in-process node (no Ray), at the actors' nodes and
through a broker's node (protocol.edge routes DeleteRecords to each partition's
leader and answers the other two itself): confluent-kafka's AdminClient
describe_cluster and delete_records, kafka-python's describe_cluster and
describe_log_dirs, each as against Kafka; consumers then start at the new log
start; and what ACLs refuse."""

import pytest

from rafka.core.acl import (AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType,
                            user_principal)
from rafka.core.errors import ClusterAuthorizationFailed, InvalidTopic
from rafka.core.records import RecordInput, encode_batch
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.compat
TIMEOUT_S = 20


@pytest.fixture(params=[False, True], ids=["actor-nodes", "broker-edge"])
def node(tmp_path, request):
    with ProtocolNode(tmp_path, {"orders": 2, "facts": 1}, edge=request.param,
                      configs={"facts": {"cleanup.policy": "compact"}}) as node:
        yield node


def produce(node, topic, partition, values):
    hosted = node.endpoint(topic, partition)
    node.call(hosted.produce(encode_batch([RecordInput(v, b"k") for v in values]), acks=-1))


def test_confluent_kafka_admin__describe_cluster(node):
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    cluster = admin.describe_cluster(request_timeout=TIMEOUT_S, include_authorized_operations=True).result(TIMEOUT_S)
    image = node.view if node.with_edge else node.image()
    assert cluster.cluster_id == image.cluster_id
    assert cluster.controller.id == image.controller_node
    assert sorted((n.id, n.host, n.port) for n in cluster.nodes) == sorted(
        (n.node_id, n.host, n.port) for n in image.nodes.values())
    assert {op.name for op in cluster.authorized_operations} == {
        "CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"}


def test_confluent_kafka_admin__delete_records__consumers_start_at_new_log_start(node):
    from confluent_kafka import Consumer, TopicPartition as CTopicPartition
    from confluent_kafka.admin import AdminClient
    produce(node, "orders", 0, [b"0", b"1", b"2", b"3", b"4"])
    produce(node, "orders", 1, [b"a", b"b"])
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    futures = admin.delete_records([CTopicPartition("orders", 0, 3), CTopicPartition("orders", 1, -1)],
                                   request_timeout=TIMEOUT_S, operation_timeout=TIMEOUT_S)
    low = {(tp.topic, tp.partition): f.result(TIMEOUT_S).low_watermark for tp, f in futures.items()}
    assert low == {("orders", 0): 3, ("orders", 1): 2}
    assert node.endpoint("orders", 0).replica.log.log_start_offset == 3

    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "after-delete",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([CTopicPartition("orders", 0)])
        assert consumer.get_watermark_offsets(CTopicPartition("orders", 0), timeout=TIMEOUT_S) == (3, 5)
        values = []
        while len(values) < 2:
            message = consumer.poll(TIMEOUT_S)
            assert message is not None and message.error() is None
            values.append((message.offset(), message.value()))
        assert values == [(3, b"3"), (4, b"4")]
    finally:
        consumer.close()


def test_confluent_kafka_admin__delete_records__refusals_as_kafka(node):
    from confluent_kafka import KafkaError as CKafkaError, KafkaException, TopicPartition as CTopicPartition
    from confluent_kafka.admin import AdminClient
    produce(node, "orders", 0, [b"0", b"1"])
    produce(node, "facts", 0, [b"x"])
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    cases = {CTopicPartition("orders", 0, 3): CKafkaError.OFFSET_OUT_OF_RANGE,       # above the HW
             CTopicPartition("facts", 0, 1): CKafkaError.POLICY_VIOLATION}          # compact only
    for wanted, code in cases.items():
        (future,) = admin.delete_records([wanted], request_timeout=TIMEOUT_S,
                                         operation_timeout=TIMEOUT_S).values()
        with pytest.raises(KafkaException) as raised:
            future.result(TIMEOUT_S)
        assert raised.value.args[0].code() == code, wanted
    assert node.endpoint("orders", 0).replica.log.log_start_offset == 0


def test_delete_records__internal_topic__invalid_topic_and_rafka_admin_reads_it(node):
    from rafka.protocol import admin_requests
    from rafka.protocol.connection import Connection

    async def ask():
        connection = await Connection.open("127.0.0.1", node.port)
        try:
            return await connection.request(admin_requests.delete_records_request(
                topic="__consumer_offsets", partition=0, offset=0, timeout_ms=1000))
        finally:
            await connection.close()
    with pytest.raises(InvalidTopic):
        admin_requests.delete_records_answer(node.call(ask()), topic="__consumer_offsets", partition=0)


def test_kafka_python_admin__describe_log_dirs_and_cluster(node):
    from kafka.admin import KafkaAdminClient
    produce(node, "orders", 1, [b"a" * 100])
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        cluster = admin.describe_cluster()
        assert cluster["cluster_id"] == node.image().cluster_id
        answers = admin.describe_log_dirs()
        log_dirs = [d for answer in answers for d in answer["log_dirs"]]
        # the edge: one broker, one log dir; the actors' nodes here share one table and so one log dir
        assert {d["log_dir"] for d in log_dirs} == {str(node.directory.absolute())}
        assert len(log_dirs) == (1 if node.with_edge else len(node.servers))
        log_dir = log_dirs[0]
        sizes = {(t["name"], p["partition_index"]): p["partition_size"]
                 for t in log_dir["topics"] for p in t["partitions"]}
        assert sizes[("orders", 1)] == node.endpoint("orders", 1).replica.log.size_bytes > 100
        assert sizes[("orders", 0)] == 0
        assert log_dir["error_code"] == 0 and log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
        narrowed = admin.describe_log_dirs({"orders": [1]})
        assert {(t["name"], tuple(p["partition_index"] for p in t["partitions"]))
                for answer in narrowed for d in answer["log_dirs"] for t in d["topics"]} == {("orders", (1,))}
    finally:
        admin.close()


def test_kafka_python_admin__alter_replica_log_dirs__already_in_the_one_log_dir_or_kafkas_errors(node):
    """kafka-python's alter_replica_log_dirs (kafka-reassign-partitions.sh's log_dirs)
    to broker 0: its replica is already in the broker's one log dir (nothing
    moves); another path is LOG_DIR_NOT_FOUND; unknown partitions and a topic
    too long for Kafka's future log dir are answered as Kafka answers them."""
    from kafka import errors as kafka_errors
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartitionReplica as Replica
    produce(node, "orders", 0, [b"a", b"b"])
    here = str(node.directory.absolute())
    before = sorted(p.name for p in node.directory.iterdir())
    long_name = "t" * 214   # its future dir, "<name>-0.<32 hex>-future", would be 256 characters
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        answers = admin.alter_replica_log_dirs({
            Replica("orders", 0, 0): here, Replica("facts", 0, 0): here, Replica("orders", 1, 0): "/elsewhere",
            Replica("nope", 0, 0): here, Replica("orders", 7, 0): here, Replica(long_name, 0, 0): here,
            Replica("t" * 213, 0, 0): "/elsewhere"})
    finally:
        admin.close()
    assert answers == {
        Replica("orders", 0, 0): kafka_errors.NoError, Replica("facts", 0, 0): kafka_errors.NoError,
        Replica("orders", 1, 0): kafka_errors.LogDirNotFoundError,
        Replica("nope", 0, 0): kafka_errors.UnknownTopicOrPartitionError,
        Replica("orders", 7, 0): kafka_errors.UnknownTopicOrPartitionError,
        Replica(long_name, 0, 0): kafka_errors.InvalidTopicError,
        Replica("t" * 213, 0, 0): kafka_errors.LogDirNotFoundError}
    assert sorted(p.name for p in node.directory.iterdir()) == before
    assert node.endpoint("orders", 0).replica.log.log_end_offset == 2


def test_acls__delete_records_needs_delete_on_topic__log_dirs_describe_on_cluster(tmp_path):
    from confluent_kafka import KafkaError as CKafkaError, KafkaException, TopicPartition as CTopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient
    from rafka.protocol import admin_requests
    from rafka.protocol.connection import Connection
    with ProtocolNode(tmp_path, {"orders": 1}, edge=True) as node:
        produce(node, "orders", 0, [b"0", b"1"])
        anonymous, alice = user_principal("ANONYMOUS"), user_principal("alice")
        # bindings on the topic and the cluster: what they do not allow is refused (Kafka's rule)
        node.call(node.create_acls([
            AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, anonymous, "*", AclOperation.DESCRIBE,
                       AclPermissionType.ALLOW),
            AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, alice, "*",
                       AclOperation.DESCRIBE, AclPermissionType.ALLOW)]))
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        (future,) = admin.delete_records([CTopicPartition("orders", 0, 1)], request_timeout=TIMEOUT_S).values()
        with pytest.raises(KafkaException) as raised:
            future.result(TIMEOUT_S)
        assert raised.value.args[0].code() == CKafkaError.TOPIC_AUTHORIZATION_FAILED
        assert node.endpoint("orders", 0).replica.log.log_start_offset == 0

        cluster = admin.describe_cluster(request_timeout=TIMEOUT_S,
                                         include_authorized_operations=True).result(TIMEOUT_S)
        assert not cluster.authorized_operations   # no DESCRIBE on the cluster: the bitfield 0
        client = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
        try:
            assert [answer["log_dirs"] for answer in client.describe_log_dirs()] == [[]]
        finally:
            client.close()

        async def ask():
            connection = await Connection.open("127.0.0.1", node.port)
            try:
                return await connection.request(admin_requests.describe_log_dirs_request())
            finally:
                await connection.close()
        with pytest.raises(ClusterAuthorizationFailed):
            admin_requests.describe_log_dirs_answer(node.call(ask()))


def test_rafka_admin_and_cli__delete_records_and_log_dirs_as_kafka_tools(tmp_path):
    import argparse
    import json
    from rafka import cli_records
    with ProtocolNode(tmp_path / "node", {"orders": 2}, edge=True) as node:
        produce(node, "orders", 0, [b"0", b"1", b"2"])
        admin = node.wire_admin(default_api_timeout_ms=TIMEOUT_S * 1000)
        cluster = admin.describe_cluster(include_authorized_operations=True)
        assert [b["node_id"] for b in cluster["brokers"]] == [0] and cluster["cluster_id"] == node.view.cluster_id
        offsets = tmp_path / "offsets.json"
        offsets.write_text(json.dumps({"partitions": [{"topic": "orders", "partition": 0, "offset": 2},
                                                      {"topic": "orders", "partition": 1, "offset": 5}],
                                       "version": 1}))
        printed = []
        assert cli_records.cmd_delete_records(admin, argparse.Namespace(offset_json_file=str(offsets)),
                                              out=printed.append) == 0
        assert printed[:2] == ["Executing records delete operation", "Records delete operation completed:"]
        assert printed[2] == "partition: orders-0\tlow_watermark: 2"
        assert printed[3].startswith("partition: orders-1\terror: OFFSET_OUT_OF_RANGE")
        assert admin.beginning_offsets([("orders", 0)]) == {("orders", 0): 2}

        printed = []
        assert cli_records.cmd_log_dirs(admin, argparse.Namespace(topic_list="orders", broker_list=""),
                                        out=printed.append) == 0
        assert printed[:2] == ["Querying brokers for log directories information",
                               "Received log directory information from brokers 0"]
        (broker,) = json.loads(printed[2])["brokers"]
        (log_dir,) = broker["logDirs"]
        assert log_dir["logDir"] == str((tmp_path / "node").absolute()) and log_dir["error"] is None
        assert {p["partition"] for p in log_dir["partitions"]} == {"orders-0", "orders-1"}


def test_cli_records__offset_json_file_refused_as_kafka():
    from rafka import cli_records
    from rafka.cluster_errors import UsageError
    with pytest.raises(UsageError, match="Offset json file contains duplicate topic partitions: t-0"):
        cli_records.parse_offset_json('{"partitions": [{"topic": "t", "partition": 0, "offset": 1},'
                                      ' {"topic": "t", "partition": 0, "offset": 2}], "version": 1}')
    with pytest.raises(UsageError, match="Not supported version field value 2"):
        cli_records.parse_offset_json('{"partitions": [], "version": 2}')


def test_describe_cluster__controllers_endpoint_type__mismatched(node):
    from kio.schema.describe_cluster.v2 import request as describe_cluster_v2
    from kio.static.primitive import i8
    from rafka.core.errors import KafkaError
    from rafka.protocol import admin_requests
    from rafka.protocol.connection import Connection

    async def ask(endpoint_type):
        connection = await Connection.open("127.0.0.1", node.port)
        try:
            return await connection.request(describe_cluster_v2.DescribeClusterRequest(
                include_cluster_authorized_operations=False, endpoint_type=i8(endpoint_type),
                include_fenced_brokers=False))
        finally:
            await connection.close()
    for endpoint_type, kafka_name in ((2, "MISMATCHED_ENDPOINT_TYPE"), (7, "UNSUPPORTED_ENDPOINT_TYPE")):
        answer = node.call(ask(endpoint_type))
        assert answer.error_code.name.upper() == kafka_name and answer.brokers == ()
        with pytest.raises(KafkaError):
            admin_requests.describe_cluster_answer(answer)
