"""Producer, Consumer (assign mode) and Admin against a 3-broker local cluster."""

import pytest
import ray

from rafka.client.consumer import IllegalStateError
from rafka.core.errors import (InvalidConfig, InvalidReplicationFactor, InvalidTopic, NoOffsetForPartitionError,
                               RecordTooLarge, SerializationError, TopicAlreadyExists, UnknownTopicOrPartition)
from rafka.core.structs import OffsetAndTimestamp, TopicPartition
from tests.harness import describe_replica, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.shares_cluster]


@pytest.fixture(scope="module")
def events(cluster):
    """Topic `events`, 2 partitions R3, 40 records per partition, known timestamps."""
    cluster.admin().create_topic("events", partitions=2, replication_factor=3,
                                 config={"min.insync.replicas": "2"})
    with cluster.producer(acks="all", linger_ms=1) as producer:
        futures = [producer.send("events", b"e-%d-%d" % (p, i), partition=p, timestamp_ms=1_000 + i)
                   for p in range(2) for i in range(40)]
        metas = [f.result(timeout=30) for f in futures]
    return metas


def test_consumer__assign_poll__every_record_once_in_order_with_its_fields(cluster, events):
    tp0, tp1 = TopicPartition("events", 0), TopicPartition("events", 1)
    with cluster.consumer(auto_offset_reset="earliest", max_poll_records=7) as consumer:
        consumer.assign([tp0, tp1])
        got = {0: [], 1: []}
        wait_until(lambda: [got[r.partition].append(r) for r in consumer.poll(timeout=0.5)] is not None
                   and len(got[0]) + len(got[1]) == 80, what="80 records")
        assert consumer.position(tp0) == 40 and consumer.position(tp1) == 40
        assert consumer.poll(timeout=0.2) == []
    for p in range(2):
        assert [r.offset for r in got[p]] == list(range(40))
        assert [r.value for r in got[p]] == [b"e-%d-%d" % (p, i) for i in range(40)]
        assert [r.timestamp for r in got[p]] == [1_000 + i for i in range(40)]
        assert {(r.topic, r.partition, r.key) for r in got[p]} == {("events", p, None)}


def test_consumer__max_poll_records_bounds_each_poll(cluster, events):
    with cluster.consumer(auto_offset_reset="earliest", max_poll_records=5) as consumer:
        consumer.assign([TopicPartition("events", 0)])
        sizes = [len(consumer.poll(timeout=2.0)) for _ in range(3)]
    assert sizes == [5, 5, 5]


def test_consumer__seek_position_and_seek_to_beginning_end(cluster, events):
    tp = TopicPartition("events", 1)
    with cluster.consumer(auto_offset_reset="latest") as consumer:
        consumer.assign([tp])
        assert consumer.position(tp) == 40  # latest = the HW
        consumer.seek(tp, 37)
        assert [r.offset for r in consumer.poll(timeout=2.0)] == [37, 38, 39]
        consumer.seek_to_beginning(tp)
        assert consumer.position(tp) == 0
        assert consumer.poll(timeout=2.0)[0].offset == 0
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 40
        with pytest.raises(ValueError, match="seek offset must not be a negative number"):
            consumer.seek(tp, -1)
        assert consumer.position(tp) == 40  # bad input changed nothing
        with pytest.raises(IllegalStateError, match="No current assignment for partition events-0"):
            consumer.seek(TopicPartition("events", 0), 3)


def test_consumer__beginning_end_offsets_and_offsets_for_times(cluster, events):
    tps = [TopicPartition("events", 0), TopicPartition("events", 1)]
    with cluster.consumer() as consumer:
        assert consumer.beginning_offsets(tps) == {tps[0]: 0, tps[1]: 0}
        assert consumer.end_offsets(tps) == {tps[0]: 40, tps[1]: 40}
        found = consumer.offsets_for_times({tps[0]: 1_010, tps[1]: 10_000})
        assert found == {tps[0]: OffsetAndTimestamp(10, 1_010), tps[1]: None}
        with pytest.raises(ValueError, match="cannot be negative"):
            consumer.offsets_for_times({tps[0]: -5})


def test_consumer__pause_resume(cluster, events):
    tp0, tp1 = TopicPartition("events", 0), TopicPartition("events", 1)
    with cluster.consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([tp0, tp1])
        consumer.pause(tp0)
        assert consumer.paused() == {tp0}
        seen = []
        wait_until(lambda: seen.extend(consumer.poll(timeout=0.3)) or len(seen) >= 40, what="tp1 drained")
        assert {r.partition for r in seen} == {1}
        consumer.resume(tp0)
        assert {r.partition for r in consumer.poll(timeout=3.0)} == {0}


def test_consumer__auto_offset_reset_none__no_offset_for_partition(cluster, events):
    with cluster.consumer(auto_offset_reset="none") as consumer:
        consumer.assign([TopicPartition("events", 0)])
        with pytest.raises(NoOffsetForPartitionError):
            consumer.poll(timeout=0.5)


def test_consumer__never_returns_a_record_at_or_above_the_hw(cluster):
    """acks=1 writes that the (paused) followers have not fetched stay invisible."""
    cluster.admin().create_topic("unreplicated", partitions=1, replication_factor=3)
    with cluster.producer(acks="all") as producer:
        producer.send("unreplicated", b"replicated", partition=0).result(timeout=30)
    state = ray.get(cluster.controller.metadata_snapshot.remote())["topics"]["unreplicated"]["partitions"][0]
    followers = [r for r in state["replicas"] if r != state["leader"]]
    import os, signal
    pids = [describe_replica("unreplicated", 0, r)["pid"] for r in followers]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        with cluster.producer(acks=1) as producer:
            producer.send("unreplicated", b"leader-only", partition=0).result(timeout=30)
        leader = describe_replica("unreplicated", 0, state["leader"])
        assert (leader["log_end_offset"], leader["high_watermark"]) == (2, 1)
        with cluster.consumer(auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("unreplicated", 0)])
            assert [r.value for r in consumer.poll(timeout=1.0)] == [b"replicated"]
            assert consumer.poll(timeout=0.5) == []
            assert consumer.end_offsets([TopicPartition("unreplicated", 0)]) == {
                TopicPartition("unreplicated", 0): 1}
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def test_admin__bad_topics__typed_errors_and_nothing_created(cluster):
    admin = cluster.admin()
    before = admin.list_topics()
    with pytest.raises(InvalidTopic):
        admin.create_topic("bad name!", partitions=1, replication_factor=1)
    with pytest.raises(InvalidReplicationFactor, match="larger than available brokers: 3"):
        admin.create_topic("too-wide", partitions=1, replication_factor=4)
    admin.create_topic("once", partitions=1, replication_factor=1)
    with pytest.raises(TopicAlreadyExists):
        admin.create_topic("once", partitions=1, replication_factor=1)
    with pytest.raises(UnknownTopicOrPartition):
        admin.describe_topics(["missing"])
    assert sorted(admin.list_topics()) == sorted(before + ["once"])


def test_producer__record_over_max_message_bytes__record_too_large_and_nothing_written(cluster):
    admin = cluster.admin()
    admin.create_topic("small", partitions=1, replication_factor=1, config={"max.message.bytes": "1000"})
    with cluster.producer(acks="all") as producer:
        with pytest.raises(RecordTooLarge):
            producer.send("small", b"x" * 5_000, partition=0).result(timeout=30)
        assert producer.send("small", b"ok", partition=0).result(timeout=30).offset == 0


def test_producer__batches_waiting_behind_the_one_in_flight_go_in_one_request__offsets_in_send_order(cluster):
    """With one request in flight, closed batches queue behind it; the next request
    carries all of them (up to max.message.bytes): far fewer requests than batches,
    and every record at the offset its send order gives, read back in that order."""
    cluster.admin().create_topic("merged", partitions=1, replication_factor=3,
                                 config={"max.message.bytes": "200000"})
    values = [b"m-%05d-" % i + b"x" * 1000 for i in range(2_000)]
    with cluster.producer(acks="all", batch_size=16_384, max_in_flight_requests_per_connection=1) as producer:
        futures = [producer.send("merged", value, partition=0) for value in values]
        producer.flush(timeout=60)
        offsets = [f.result(timeout=30).offset for f in futures]
        requests = producer.metrics()["request-total"]
    batches = len(values) * 1_016 // 16_384   # at least this many 16 KiB batches were closed
    assert offsets == list(range(len(values)))
    assert requests < batches // 2, (requests, batches)
    with cluster.consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("merged", 0)])
        got = []
        wait_until(lambda: got.extend(consumer.poll(timeout=0.5)) or len(got) >= len(values), what="every record")
    assert [(r.offset, r.value) for r in got] == list(enumerate(values))

def test_admin__delete_topic__gone_from_metadata_actors_and_disk(cluster):
    admin = cluster.admin()
    admin.create_topic("doomed", partitions=1, replication_factor=3)
    with cluster.producer() as producer:
        producer.send("doomed", b"x", partition=0).result(timeout=30)
    actors = set(admin.describe_topics(["doomed"])["doomed"]["partitions"][0]["actors"].values())
    admin.delete_topic("doomed")
    assert "doomed" not in admin.list_topics()
    names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}
    assert len(actors) == 3 and not actors & names
    with pytest.raises(UnknownTopicOrPartition):
        admin.delete_topic("doomed")
    admin.create_topic("doomed", partitions=1, replication_factor=3)  # the name is free again
    with cluster.consumer(auto_offset_reset="earliest") as consumer:
        assert consumer.end_offsets([TopicPartition("doomed", 0)]) == {TopicPartition("doomed", 0): 0}


def test_producer__acks_0__fire_and_forget_offset_unknown_record_still_written(cluster):
    cluster.admin().create_topic("fire", partitions=1, replication_factor=3)
    with cluster.producer(acks=0) as producer:
        metas = [producer.send("fire", b"f-%d" % i, partition=0).result(timeout=30) for i in range(5)]
    assert {m.offset for m in metas} == {-1}  # as Kafka: no ack, so no offset
    tp = TopicPartition("fire", 0)
    with cluster.consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        got = []
        wait_until(lambda: got.extend(consumer.poll(timeout=0.5)) or len(got) == 5, what="5 records")
    assert sorted(r.value for r in got) == [b"f-%d" % i for i in range(5)]  # acks=0: no order promised
    with pytest.raises(ValueError, match="Must set acks to all in order to use the idempotent producer."):
        cluster.producer(acks=0, enable_idempotence=True)


def test_producer_consumer__not_bytes_or_bad_sizes__typed_error_at_the_call_and_later_calls_work(cluster):
    """A str value used to kill the sender thread (every later future hung); a
    0-byte fetch size made poll return nothing, forever."""
    cluster.admin().create_topic("typed", partitions=1, replication_factor=3)
    tp = TopicPartition("typed", 0)
    with cluster.producer(acks="all") as producer:
        for bad in (dict(value="a str"), dict(value=b"v", key="a str"), dict(value=b"v", partition="0"),
                    dict(value=b"v", headers=[("h", "a str")]), dict(value=b"v", timestamp_ms=1.5)):
            with pytest.raises(SerializationError):
                producer.send("typed", **bad)
        assert producer.send("typed", b"ok", partition=0).result(timeout=30).offset == 0
        assert producer.send("typed", bytearray(b"ok-2"), key=memoryview(b"k"), partition=0,
                             headers=[("h", b"1")]).result(timeout=30).offset == 1
    with pytest.raises(InvalidConfig, match="Invalid value 0 for configuration max.partition.fetch.bytes"):
        cluster.consumer(max_partition_fetch_bytes=0)
    with cluster.consumer(auto_offset_reset="earliest", max_partition_fetch_bytes=1) as consumer:
        consumer.assign([tp])   # 1 byte still fetches a whole batch: the consumer progresses
        got = []
        wait_until(lambda: got.extend(consumer.poll(timeout=0.5)) or len(got) >= 2, what="2 records")
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == [(0, None, b"ok", ()),
                                                                      (1, b"k", b"ok-2", (("h", b"1"),))]
