"""DeleteRecords, DescribeCluster and DescribeLogDirs on a 3-broker local cluster:
the log start moves on every replica (followers take it from their fetches)
before the answer, confluent-kafka's AdminClient sees the brokers, and each
broker describes its own log dir."""

import pytest
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient

from tests.harness import describe_replica, wait_until

pytestmark = pytest.mark.cluster
TIMEOUT_S = 30


def test_delete_records__every_replica_moves__consumers_start_there__log_dirs_per_broker(cluster):
    admin = cluster.admin()
    admin.create_topic("trimmed", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    with cluster.producer(acks="all") as producer:
        for i in range(10):
            producer.send("trimmed", b"v-%d" % i, partition=0).result(timeout=TIMEOUT_S)

    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    described = client.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    assert sorted(n.id for n in described.nodes) == [0, 1, 2]

    (future,) = client.delete_records([CTopicPartition("trimmed", 0, 6)], request_timeout=TIMEOUT_S,
                                      operation_timeout=TIMEOUT_S).values()
    assert future.result(TIMEOUT_S).low_watermark == 6
    # answered once the ISR had it: every replica's log starts at 6 already
    assert [describe_replica("trimmed", 0, r)["log_start_offset"] for r in range(3)] == [6, 6, 6]
    assert admin.beginning_offsets([("trimmed", 0)]) == {("trimmed", 0): 6}
    assert admin.delete_records({("trimmed", 0): -1}) == {("trimmed", 0): 10}

    log_dirs = admin.describe_log_dirs()
    assert sorted(log_dirs) == [0, 1, 2]
    for broker, dirs in log_dirs.items():
        (log_dir,) = dirs
        assert log_dir["error"] is None and log_dir["log_dir"].endswith(f"broker-{broker}")
        assert ("trimmed", 0) in {(p["topic"], p["partition"]) for p in log_dir["partitions"]}
