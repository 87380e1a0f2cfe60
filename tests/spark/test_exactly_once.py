"""Spark over transactions (issue 28): read_topic / read_dataset at both isolation
levels on a topic holding a committed, an aborted and an open transaction; and a
stream topic to topic whose output and input offsets go in one transaction per
input partition, its sink task killed between sending and committing."""

import pytest

from rafka.core.structs import TopicPartition

pytestmark = [pytest.mark.spark, pytest.mark.shares_cluster]

MIXED = "txn-mixed"


def send_all(producer, prefix: str, count: int) -> list[bytes]:
    values = [b"%s-%02d" % (prefix.encode(), i) for i in range(count)]
    for i, value in enumerate(values):
        producer.send(MIXED, value=value, partition=i % 2)
    producer.flush()
    return values


@pytest.fixture(scope="module")
def mixed(cluster):
    """`txn-mixed`, 2 partitions: plain records, a committed transaction, an aborted
    one, then an open one (left open for the module) and plain records after it.
    Yields {kind: values} and the producer holding the open transaction."""
    cluster.admin().create_topic(MIXED, partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})
    sent = {}
    with cluster.producer(acks="all") as plain:
        sent["plain"] = send_all(plain, "plain", 4)
    with cluster.producer(transactional_id="mixed-writer", linger_ms=0) as writer:
        writer.init_transactions()
        writer.begin_transaction()
        sent["committed"] = send_all(writer, "committed", 6)
        writer.commit_transaction()
        writer.begin_transaction()
        sent["aborted"] = send_all(writer, "aborted", 6)
        writer.abort_transaction()
    holder = cluster.producer(transactional_id="mixed-open", linger_ms=0, transaction_timeout_ms=600_000)
    holder.init_transactions()
    holder.begin_transaction()
    sent["open"] = send_all(holder, "open", 4)
    with cluster.producer(acks="all") as plain:
        sent["after-open"] = send_all(plain, "after-open", 4)
    yield sent
    holder.abort_transaction()
    holder.close()


def lso_and_hw(cluster) -> tuple[dict[int, int], dict[int, int]]:
    from rafka.core.isolation import IsolationLevel
    admin = cluster.admin()
    tps = [TopicPartition(MIXED, p) for p in (0, 1)]
    committed = admin.end_offsets(tps, isolation_level=IsolationLevel.READ_COMMITTED)
    return {tp.partition: committed[tp] for tp in tps}, {tp.partition: o for tp, o in admin.end_offsets(tps).items()}


def test_read_topic__read_committed__exactly_the_committed_records_stopping_below_the_open_transaction(
        cluster, spark, mixed):
    from rafka.spark_bridge import read_topic
    lso, hw = lso_and_hw(cluster)
    df = read_topic(spark, MIXED, isolation_level="read_committed")
    assert {r.partition: r.end for r in df.offset_ranges} == lso
    assert all(lso[p] < hw[p] for p in hw)   # the open transaction holds the LSO back
    rows = df.collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(mixed["plain"] + mixed["committed"])
    assert all(r.offset < lso[r.partition] for r in rows)


def test_read_topic__read_uncommitted__every_record_up_to_the_hw_and_no_marker(cluster, spark, mixed):
    from rafka.spark_bridge import read_topic
    _, hw = lso_and_hw(cluster)
    df = read_topic(spark, MIXED)
    assert {r.partition: r.end for r in df.offset_ranges} == hw
    # markers hold offsets (two per partition: the commit and the abort) but are no rows
    assert sorted(bytes(r.value) for r in df.collect()) == sorted(v for values in mixed.values() for v in values)
    assert sum(hw.values()) == sum(len(values) for values in mixed.values()) + 4


def test_read_dataset__read_committed__the_committed_records_and_a_counted_dataset(cluster, mixed):
    from rafka.spark_bridge import read_dataset
    read = read_dataset(MIXED, isolation_level="read_committed")
    assert read.dataset.count() == len(mixed["plain"]) + len(mixed["committed"])   # not the offsets planned
    assert sorted(row["value"] for row in read.dataset.take_all()) == sorted(mixed["plain"] + mixed["committed"])
    with pytest.raises(ValueError, match="isolation_level must be"):
        read_dataset(MIXED, isolation_level="committed")


def read_values(spark, topic: str, isolation_level: str) -> list[bytes]:
    from rafka.spark_bridge import read_topic, release
    df = read_topic(spark, topic, isolation_level=isolation_level)
    try:
        return sorted(bytes(r.value) for r in df.collect())
    finally:
        release(df)


def test_stream_topic__topic_sink_task_killed_after_sending__output_holds_every_input_once_offsets_at_the_end(
        cluster, spark):
    """Every batch's task of input partition 0 dies (its Python worker exits) on its
    first attempt, after its records are sent and its offsets added, before the
    commit; Spark retries it and the retry fences that attempt."""
    from rafka.spark_bridge import TopicSink, stream_topic
    admin = cluster.admin()
    admin.create_topic("eos-in", partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})
    admin.create_topic("eos-out", partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})
    with cluster.producer(acks="all") as producer:
        for i in range(60):
            producer.send("eos-in", value=b"in-%02d" % i, key=b"k-%02d" % i, partition=i % 2)
        producer.flush()

    def crash_first_attempt(offset_range, attempt):
        import os
        if offset_range.partition == 0 and attempt == 0:
            os._exit(3)   # the task's Python worker dies with its transaction open

    sink = TopicSink("eos-out", transform=lambda df: df.selectExpr("key", "concat(X'2A', value) AS value"),
                     before_commit=crash_first_attempt)
    batches = stream_topic(spark, "eos-in", "eos-query", sink, trigger_interval_s=0.1, max_records_per_batch=40,
                           stop_when_idle=True)
    assert batches == 2   # 40 then 20 records
    expected = sorted(b"*in-%02d" % i for i in range(60))
    assert read_values(spark, "eos-out", "read_committed") == expected
    uncommitted = read_values(spark, "eos-out", "read_uncommitted")
    # the killed attempts' records were written, then aborted when their retries fenced them
    assert set(uncommitted) == set(expected) and len(uncommitted) == 60 + 20 + 10
    ends = admin.end_offsets([TopicPartition("eos-in", 0), TopicPartition("eos-in", 1)])
    assert admin.list_consumer_group_offsets("eos-query", require_stable=True) == ends


def test_topic_sink__stale_plan_fails_with_commit_failed_writing_nothing__range_already_committed_writes_nothing(
        cluster, spark):
    """A batch planned from an offset the group has since left (another run of the
    query moved it) fails its task with COMMIT_FAILED and writes nothing; one whose
    range the group already passed (an attempt that committed, then was lost)
    writes nothing and succeeds."""
    from rafka.core.offset_ranges import OffsetRange
    from rafka.spark_bridge import TopicSink
    from rafka.spark_bridge.source import release, to_dataframe
    admin = cluster.admin()
    admin.create_topic("stale-in", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    admin.create_topic("stale-out", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    with cluster.producer(acks="all") as producer:
        for i in range(10):
            producer.send("stale-in", value=b"in-%02d" % i, partition=0)
        producer.flush()
    input_tp, output_tp = TopicPartition("stale-in", 0), TopicPartition("stale-out", 0)
    admin.alter_consumer_group_offsets("stale-query", {input_tp: 4})
    sink = TopicSink("stale-out")

    ranges = [OffsetRange("stale-in", 0, 0, 10)]   # planned when the group had no offset
    df = to_dataframe(spark, ranges, one_partition_per_range=True)
    try:
        with pytest.raises(Exception, match="CommitFailed"):
            sink.write(df, ranges, group_id="stale-query", committed={})
    finally:
        release(df)
    assert admin.end_offsets([output_tp]) == {output_tp: 0}
    assert admin.list_consumer_group_offsets("stale-query", require_stable=True) == {input_tp: 4}

    admin.alter_consumer_group_offsets("stale-query", {input_tp: 10})
    ranges = [OffsetRange("stale-in", 0, 4, 10)]   # planned from 4; the group is at its end already
    df = to_dataframe(spark, ranges, one_partition_per_range=True)
    try:
        assert sink.write(df, ranges, group_id="stale-query", committed={0: 4}) == 0
    finally:
        release(df)
    assert admin.end_offsets([output_tp]) == {output_tp: 0}
    assert read_values(spark, "stale-out", "read_uncommitted") == []
