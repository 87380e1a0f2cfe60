"""Spark on the log's Ray cluster (RayDP): HW-bounded reads with Spark's Kafka
schema, snapshots, executors on different nodes, and Spark writing back."""

import os
import signal

import pytest
import ray

from rafka.core.structs import TopicPartition
from tests.harness import TEST_CLUSTER_OPTIONS, TEST_COORDINATOR_OPTIONS, describe_replica

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster():
    """A long replica lag time: a paused follower stays in the ISR for the whole
    test, so the HW stays where it was."""
    import rafka
    options = dict(TEST_CLUSTER_OPTIONS, replica_lag_time_max_ms=60_000)
    with rafka.local_cluster(nodes=3, coordinator_options=TEST_COORDINATOR_OPTIONS, **options) as embedded:
        yield embedded


@pytest.fixture(scope="module")
def known(cluster):
    """`known`: 3 partitions, 30 records each with a key, a header and a timestamp."""
    cluster.admin().create_topic("known", partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    sent = {}
    with cluster.producer(acks="all", linger_ms=2) as producer:
        futures = [(i, producer.send("known", value=b"value-%03d" % i, key=b"key-%03d" % i, partition=i % 3,
                                     timestamp_ms=1_700_000_000_000 + i, headers=[("h", b"%d" % i)]))
                   for i in range(90)]
        producer.flush()
        for i, future in futures:
            meta = future.result()
            sent[(meta.partition, meta.offset)] = i
    return sent


def test_executors_run_on_different_nodes(spark):
    from rafka.spark_bridge import executor_nodes
    assert len(executor_nodes(spark)) == 2


def test_app_master_runs_on_the_drivers_node__session_nodes_names_every_node_the_executors_need(spark):
    """RayDP's app master runs on the driver's node; the executors depend on the
    nodes they run on and on those of their owners: the Java app master actor
    and the Java driver that owns it, which attaches to the first node of this
    host in the GCS's order (any of a local_cluster's). session_nodes names all."""
    from ray._private.state import actors

    from rafka.spark_bridge import executor_nodes, session_nodes
    live = [info for info in actors().values() if info.get("State") == "ALIVE"]
    masters = {info["Address"]["NodeID"] for info in live if "RayDPSparkMaster" in (info.get("ActorClassName") or "")}
    assert masters == {ray.get_runtime_context().get_node_id()}
    java_masters = [info for info in live if (info.get("ActorClassName") or "").endswith("RayAppMaster")]
    assert len(java_masters) == 1
    nodes = session_nodes(spark)
    assert executor_nodes(spark) <= nodes
    assert {java_masters[0]["Address"]["NodeID"], java_masters[0]["OwnerAddress"]["NodeID"]} <= nodes
    assert len(nodes) <= 4


def test_read_topic__exactly_hw_minus_start_rows_per_partition_with_kafka_schema(spark, known):
    from rafka.spark_bridge import read_topic
    df = read_topic(spark, "known")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>")]
    rows = df.collect()
    assert {r.partition: r.end - r.start for r in df.offset_ranges} == {0: 30, 1: 30, 2: 30}
    assert len(rows) == 90
    for row in rows:
        i = known[(row.partition, row.offset)]
        assert (bytes(row.key), bytes(row.value), row.topic) == (b"key-%03d" % i, b"value-%03d" % i, "known")
        assert int(row.timestamp.timestamp() * 1000) == 1_700_000_000_000 + i and row.timestampType == 0
        assert [(h.key, bytes(h.value)) for h in row.headers] == [("h", b"%d" % i)]
    # offsets and a timestamp dict bound the read too
    part = read_topic(spark, "known", starting_offsets={0: 10}, ending_offsets={0: 20, 1: 0, 2: 0})
    assert sorted(r.offset for r in part.collect()) == list(range(10, 20))
    late = read_topic(spark, "known", starting_offsets={"timestamp": {0: 1_700_000_000_000 + 60}},
                      ending_offsets="latest")
    assert {r.partition: r.start for r in late.offset_ranges}[0] == 20


def test_read_topic__records_at_or_above_the_hw_are_not_read(cluster, spark):
    from rafka.spark_bridge import read_topic
    cluster.admin().create_topic("lagging", partitions=1, replication_factor=3)
    with cluster.producer(acks="all") as producer:
        for i in range(5):
            producer.send("lagging", b"replicated-%d" % i, partition=0).result(timeout=30)
    state = ray.get(cluster.controller.metadata_snapshot.remote())["topics"]["lagging"]["partitions"][0]
    pids = [describe_replica("lagging", 0, r)["pid"] for r in state["replicas"] if r != state["leader"]]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        with cluster.producer(acks=1) as producer:
            for i in range(3):
                producer.send("lagging", b"leader-only-%d" % i, partition=0).result(timeout=30)
        leader = describe_replica("lagging", 0, state["leader"])
        assert (leader["log_end_offset"], leader["high_watermark"]) == (8, 5)
        df = read_topic(spark, "lagging")
        assert sorted(bytes(r.value) for r in df.collect()) == [b"replicated-%d" % i for i in range(5)]
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def test_read__records_after_the_snapshot_are_left_for_the_next_read(cluster, spark):
    from rafka.spark_bridge import read_dataset, read_topic
    from rafka.spark_bridge.source import to_dataframe
    cluster.admin().create_topic("snap", partitions=1, replication_factor=1)
    with cluster.producer(acks="all") as producer:
        for i in range(10):
            producer.send("snap", b"first-%d" % i, partition=0)
        producer.flush()
        planned = read_dataset("snap")          # the snapshot is taken here
        for i in range(5):
            producer.send("snap", b"second-%d" % i, partition=0)
        producer.flush()
    assert planned.count == 10 and planned.dataset.count() == 10
    assert to_dataframe(spark, planned.ranges).count() == 10
    # blocks are cut by size (a Java array holds < 2 GiB): tiny blocks, same rows
    from rafka.spark_bridge.source import _kept_blocks, release
    small = to_dataframe(spark, planned.ranges, ipc_block_max_bytes=1)
    assert len(_kept_blocks[small.read_id]) > 1
    assert sorted(bytes(r.value) for r in small.collect()) == sorted(b"first-%d" % i for i in range(10))
    release(small)
    assert small.read_id not in _kept_blocks
    again = read_topic(spark, "snap")
    assert again.count() == 15 and [r.end for r in again.offset_ranges] == [15]


def test_write_topic__a_dataframe_produced_from_the_executors(cluster, spark, known):
    from rafka.spark_bridge import read_topic, write_topic
    cluster.admin().create_topic("copied", partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})
    source = read_topic(spark, "known").selectExpr("key", "value")
    assert write_topic(source, "copied") == 90
    copied = read_topic(spark, "copied").collect()
    assert sorted(bytes(r.value) for r in copied) == sorted(b"value-%03d" % i for i in range(90))
    with cluster.consumer(auto_offset_reset="earliest") as consumer:   # the same key -> the same partition
        consumer.assign([TopicPartition("copied", 0), TopicPartition("copied", 1)])
        assert sum(consumer.end_offsets(consumer.assignment()).values()) == 90
