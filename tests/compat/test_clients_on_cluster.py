"""Kafka clients nobody here wrote, against a local_cluster's actors on the wire:
the controller is the bootstrap address, each replica actor a Kafka node.
Records they write are read back by rafka's own client at the same offsets, and
the leaders kcat lists are those rafka's admin names."""

import asyncio
import datetime
import re
import shutil
import subprocess

import pytest
import ray
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce_v9
from kio.static.primitive import i16, i32, i32Timedelta, i64

from rafka.core.records import RecordInput, encode_batch
from rafka.core.structs import TopicPartition
from rafka.protocol.connection import Connection
from tests.harness import wait_until

pytestmark = [pytest.mark.compat, pytest.mark.cluster]


@pytest.fixture(scope="module")
def cluster():
    """Two network processes on each broker's port (SO_REUSEPORT, as Kafka's
    num.network.threads): every client here meets either, on any connection."""
    from tests.harness import embedded_cluster
    with embedded_cluster(network_processes=2) as embedded:
        yield embedded


@pytest.fixture(scope="module")
def bootstrap(cluster):
    return cluster.bootstrap_servers


def on_the_wire(host, port, request):
    """One request on a fresh connection to one node; its answer."""
    async def send():
        connection = await Connection.open(host, port)
        try:
            return await connection.request(request)
        finally:
            await connection.close()
    return asyncio.run(send())


def wire_ready(cluster, topic):
    """Every partition's leader has a Kafka endpoint, and every broker's Metadata
    answer says so: brokers learn a new topic from the controller's next image, and
    a client may ask any broker (Kafka's own tests wait the same way after creating
    a topic: TestUtils.waitForAllPartitionsMetadata)."""
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    described = cluster.admin().describe_topics([topic])[topic]["partitions"]
    if not all(p["leader_endpoint"] for p in described):
        return False
    request = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                              allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    leaders = {p["partition"]: p["leader_kafka_node"] for p in described}
    for broker in cluster.bootstrap_servers.split(","):
        host, port = broker.rsplit(":", 1)
        answer = on_the_wire(host, int(port), request)
        (listed,) = answer.topics
        if {int(p.partition_index): int(p.leader_id) for p in listed.partitions} != leaders:
            return False
    return True


def create(cluster, topic, partitions=2):
    cluster.admin().create_topic(topic, partitions=partitions, replication_factor=3,
                                 config={"min.insync.replicas": "2"})
    wait_until(lambda: wire_ready(cluster, topic), timeout_s=60, what=f"{topic}'s leaders serve the protocol")


def read_back(cluster, topic, partitions, count):
    consumer = cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    got = []
    wait_until(lambda: got.extend(consumer.poll(timeout=0.5)) or len(got) >= count, timeout_s=60,
               what=f"{count} records read back by rafka's consumer")
    consumer.close()
    return sorted((r.partition, r.offset, r.value) for r in got)


def listening_ports(broker_id, processes=(0, 1)):
    """The ports `processes` of the broker listen on; None while one has no listener."""
    from rafka.core.actor_names import broker_actor_name
    described = [ray.get(ray.get_actor(broker_actor_name(broker_id, k), namespace="rafka").describe.remote(),
                         timeout=10) for k in processes]
    return None if None in (d["endpoint"] for d in described) else {d["endpoint"][1] for d in described}


def test_bootstrap_servers__names_every_broker_once_and_metadata_lists_exactly_them(cluster, bootstrap):
    """Kafka's shape: one node per broker, node id = broker id, at its address;
    any broker bootstraps and each lists the same three. Both network processes of
    each broker listen at that one address (the controller creates them in one
    round: each once took a free port of its own)."""
    from kio.schema.metadata.v12.request import MetadataRequest

    brokers = [b.rsplit(":", 1) for b in bootstrap.split(",")]
    assert len(brokers) == 3 and len(set(map(tuple, brokers))) == 3
    for broker_id, (_, port) in enumerate(brokers):
        assert wait_until(lambda: listening_ports(broker_id), timeout_s=60,
                          what=f"broker {broker_id}'s two processes listening") == {int(port)}
    request = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    for host, port in brokers:
        answer = on_the_wire(host, int(port), request)
        assert sorted((int(b.node_id), b.host, int(b.port)) for b in answer.brokers) == sorted(
            (i, h, int(p)) for i, (h, p) in enumerate(brokers))
        assert int(answer.controller_id) in range(3)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by scripts/run.sh")
def test_kcat_list__shows_the_leaders_rafka_topics_describe_prints(cluster, bootstrap, capsys):
    from rafka.cli import main
    create(cluster, "kcat-listed", partitions=2)
    listing = subprocess.run(["kcat", "-L", "-b", bootstrap, "-t", "kcat-listed"], capture_output=True,
                             timeout=60, check=True).stdout.decode()
    leaders = {int(p): int(n) for p, n in re.findall(r"partition (\d+), leader (\d+)", listing)}
    capsys.readouterr()
    assert main(["topics", "--describe", "--topic", "kcat-listed"]) == 0
    printed = re.findall(r"Partition: (\d+)\t.*LeaderNode: (\d+)@(\S+)", capsys.readouterr().out)
    assert leaders == {int(p): int(node) for p, node, _ in printed} and len(leaders) == 2
    for _, node, endpoint in printed:
        assert f"broker {node} at {endpoint}" in listing


def test_confluent_kafka__idempotent_acks_all_records_are_read_back_by_rafka_at_their_offsets(cluster, bootstrap):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CTopicPartition
    create(cluster, "librdkafka-written")
    delivered = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5})
    for i in range(40):
        producer.produce("librdkafka-written", value=f"r{i}".encode(), partition=i % 2,
                         on_delivery=lambda error, m: delivered.append((error, m.partition(), m.offset(), m.value())))
    assert producer.flush(60) == 0
    assert all(error is None for error, *_ in delivered)
    acked = sorted((p, o, v) for _, p, o, v in delivered)
    assert read_back(cluster, "librdkafka-written", 2, 40) == acked
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([CTopicPartition("librdkafka-written", p, 0) for p in range(2)])
    got = []
    while len(got) < 40:
        message = consumer.poll(30)
        assert message is not None and message.error() is None
        got.append((message.partition(), message.offset(), message.value()))
    assert sorted(got) == acked
    assert consumer.get_watermark_offsets(CTopicPartition("librdkafka-written", 0), timeout=30) == (0, 20)
    consumer.close()


def test_kafka_python__producer_and_consumer(cluster, bootstrap):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition
    create(cluster, "kafka-python-written")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    sent = [producer.send("kafka-python-written", value=f"k{i}".encode(), partition=i % 2) for i in range(20)]
    producer.flush()
    acked = sorted((f.get(30).partition, f.get(30).offset, f"k{i}".encode()) for i, f in enumerate(sent))
    producer.close()
    assert read_back(cluster, "kafka-python-written", 2, 20) == acked
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([KTopicPartition("kafka-python-written", p) for p in range(2)])
    got = []
    for _ in range(120):
        for records in consumer.poll(250).values():
            got += [(r.partition, r.offset, r.value) for r in records]
        if len(got) >= 20:
            break
    consumer.close()
    assert sorted(got) == acked


def test_produce_to_a_follower__not_leader_or_follower_and_nothing_written(cluster):
    create(cluster, "to-follower", partitions=1)
    described = cluster.admin().describe_topics(["to-follower"])["to-follower"]["partitions"][0]
    nodes = ray.get(cluster.controller.node_endpoints.remote())
    follower = next(r for r in described["replicas"] if r != described["leader"])
    host, port = nodes[described["actors"][follower]]
    request = produce_v9.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(produce_v9.TopicProduceData(name="to-follower", partition_data=(
            produce_v9.PartitionProduceData(index=i32(0), records=encode_batch([RecordInput(b"x")])),)),))

    answer = on_the_wire(host, port, request)
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.not_leader_or_follower
    after = cluster.admin().describe_topics(["to-follower"])["to-follower"]["partitions"][0]
    assert set(after["log_end_offsets"].values()) == {0}


def test_rafka_producer_with_zstd__librdkafka_reads_the_compressed_batches(cluster, bootstrap):
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition
    create(cluster, "rafka-zstd", partitions=1)
    values = [(f"z{i}-" + "payload " * 30).encode() for i in range(25)]
    with cluster.producer(acks="all", compression_type="zstd", linger_ms=20) as producer:
        futures = [producer.send("rafka-zstd", value=v, partition=0) for v in values]
        producer.flush()
    assert [f.result().offset for f in futures] == list(range(25))
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([CTopicPartition("rafka-zstd", 0, 0)])
    got = []
    while len(got) < 25:
        message = consumer.poll(30)
        assert message is not None and message.error() is None
        got.append(message.value())
    consumer.close()
    assert got == values


def test_confluent_kafka__assigned_consumer_commits_and_admin_reads_the_offsets_rafka_sees(cluster, bootstrap):
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition
    from confluent_kafka.admin import AdminClient
    from confluent_kafka import ConsumerGroupTopicPartitions
    create(cluster, "committed-on-wire", partitions=2)
    with cluster.producer(acks="all") as producer:
        for i in range(10):
            producer.send("committed-on-wire", value=b"x", partition=i % 2)
        producer.flush()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wire-committers", "enable.auto.commit": False})
    consumer.assign([CTopicPartition("committed-on-wire", p, 0) for p in range(2)])
    seen = 0
    while seen < 10:
        message = consumer.poll(30)
        assert message is not None and message.error() is None
        seen += 1
    committed = consumer.commit(offsets=[CTopicPartition("committed-on-wire", 0, 4),
                                         CTopicPartition("committed-on-wire", 1, 5)], asynchronous=False)
    assert all(tp.error is None for tp in committed)
    consumer.close()
    rafka_view = cluster.admin().list_consumer_group_offsets("wire-committers")
    assert {(tp.topic, tp.partition): offset for tp, offset in rafka_view.items()} == {
        ("committed-on-wire", 0): 4, ("committed-on-wire", 1): 5}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("wire-committers")])["wire-committers"]
    listed = {(tp.topic, tp.partition): tp.offset for tp in future.result(30).topic_partitions}
    assert listed == {("committed-on-wire", 0): 4, ("committed-on-wire", 1): 5}


def test_offset_commit_with_an_old_generation__illegal_generation_on_the_wire(cluster, bootstrap):
    from kio.schema.offset_commit.v8 import request as commit_v8
    from rafka.core.offsets_schema import partition_for_group
    create(cluster, "generations", partitions=1)
    member = cluster.consumer(group_id="fenced-on-wire", enable_auto_commit=False, session_timeout_ms=10_000,
                              heartbeat_interval_ms=500)
    member.subscribe(["generations"])
    wait_until(lambda: member.poll(timeout=0.1) is not None and member.assignment(), timeout_s=60,
               what="the member joined")
    identity = member.group_metadata()
    nodes = ray.get(cluster.controller.node_endpoints.remote())
    count = len(cluster.admin().describe_topics(["__consumer_offsets"])["__consumer_offsets"]["partitions"])
    host, port = nodes[f"coordinator:{partition_for_group('fenced-on-wire', count)}"]
    request = commit_v8.OffsetCommitRequest(
        group_id="fenced-on-wire", generation_id_or_member_epoch=i32(identity.generation_id - 1),
        member_id=identity.member_id, group_instance_id=None, topics=(commit_v8.OffsetCommitRequestTopic(
            name="generations", partitions=(commit_v8.OffsetCommitRequestPartition(
                partition_index=i32(0), committed_offset=i64(1), committed_leader_epoch=i32(-1),
                committed_metadata=""),)),))

    answer = on_the_wire(host, port, request)
    assert answer.topics[0].partitions[0].error_code == ErrorCode.illegal_generation
    assert cluster.admin().list_consumer_group_offsets("fenced-on-wire") == {}
    member.close()


def test_confluent_admin__lists_describes_and_deletes_groups_as_rafka_sees_them(cluster, bootstrap):
    from confluent_kafka.admin import AdminClient
    create(cluster, "admin-groups", partitions=2)
    member = cluster.consumer(group_id="described-on-wire", enable_auto_commit=False, session_timeout_ms=10_000,
                              heartbeat_interval_ms=500)
    member.subscribe(["admin-groups"])
    wait_until(lambda: member.poll(timeout=0.1) is not None and len(member.assignment()) == 2, timeout_s=60,
               what="the member owns both partitions")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(30)
    assert "described-on-wire" in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups(["described-on-wire"])["described-on-wire"].result(30)
    rafka_view = cluster.admin().describe_consumer_group("described-on-wire")
    assert described.state.name.lower() == rafka_view["state"].lower() == "stable"
    (wire_member,) = described.members
    assert wire_member.member_id in rafka_view["members"]
    assert sorted((tp.topic, tp.partition) for tp in wire_member.assignment.topic_partitions) == [
        ("admin-groups", 0), ("admin-groups", 1)]
    member.close()
    wait_until(lambda: cluster.admin().describe_consumer_group("described-on-wire")["state"] == "Empty",
               timeout_s=30, what="the group is empty")
    member_commit = cluster.consumer(group_id="described-on-wire", enable_auto_commit=False)
    member_commit.assign([TopicPartition("admin-groups", 0)])
    member_commit.commit_sync({TopicPartition("admin-groups", 0): 0})
    member_commit.close()
    admin.delete_consumer_groups(["described-on-wire"])["described-on-wire"].result(30)
    assert cluster.admin().list_consumer_group_offsets("described-on-wire") == {}


def test_confluent_admin__creates_and_deletes_topics_and_lists_offsets(cluster, bootstrap):
    from confluent_kafka import TopicPartition as CTopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics([NewTopic("made-on-wire", num_partitions=2, replication_factor=3,
                                            config={"min.insync.replicas": "2"})], request_timeout=120)
    created["made-on-wire"].result(120)
    described = cluster.admin().describe_topics(["made-on-wire"])["made-on-wire"]
    assert len(described["partitions"]) == 2 and described["config"]["min.insync.replicas"] in ("2", 2)
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS|already exists"):
        admin.create_topics([NewTopic("made-on-wire", num_partitions=1, replication_factor=1)])[
            "made-on-wire"].result(60)
    wait_until(lambda: wire_ready(cluster, "made-on-wire"), timeout_s=60, what="leaders serve the protocol")
    with cluster.producer(acks="all") as producer:
        for i in range(7):
            producer.send("made-on-wire", value=b"x", partition=0)
        producer.flush()
    listed = admin.list_offsets({CTopicPartition("made-on-wire", 0): OffsetSpec.latest(),
                                 CTopicPartition("made-on-wire", 1): OffsetSpec.earliest()})
    offsets = {tp.partition: future.result(60).offset for tp, future in listed.items()}
    assert offsets == {0: 7, 1: 0}
    admin.delete_topics(["made-on-wire"], request_timeout=120)["made-on-wire"].result(120)
    assert "made-on-wire" not in cluster.admin().list_topics()


def test_confluent_admin__creates_a_topic_with_kafkas_cleaner_configs_and_describes_them(cluster, bootstrap):
    """Issue 26: librdkafka's suite creates topics with configs Kafka defines and
    rafka refused ("Unknown topic config name(s)"); each is kept and described as
    the topic's own (DYNAMIC_TOPIC_CONFIG), every other Kafka name as a default."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tuned = {"min.cleanable.dirty.ratio": "0.01", "max.compaction.lag.ms": "5000", "file.delete.delay.ms": "1000",
             "cleanup.policy": "compact,delete"}
    admin.create_topics([NewTopic("tuned-cleaner", num_partitions=1, replication_factor=3, config=tuned)],
                        request_timeout=120)["tuned-cleaner"].result(120)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "tuned-cleaner")
    described = admin.describe_configs([resource])[resource].result(60)
    assert {name: described[name].value for name in tuned} == tuned
    assert all(ConfigSource(described[name].source) == ConfigSource.DYNAMIC_TOPIC_CONFIG for name in tuned)
    assert described["segment.jitter.ms"].value == "0" and described["segment.jitter.ms"].is_default
    assert described["remote.storage.enable"].value == "false"
    with pytest.raises(Exception, match="INVALID_CONFIG|must be no more than 1"):
        admin.create_topics([NewTopic("too-dirty", num_partitions=1, replication_factor=1,
                                      config={"min.cleanable.dirty.ratio": "1.5"})])["too-dirty"].result(60)
    admin.delete_topics(["tuned-cleaner"], request_timeout=120)["tuned-cleaner"].result(120)


def rafka_describe_offsets(group, capsys):
    """{(topic, partition): (CURRENT-OFFSET, LOG-END-OFFSET, LAG)} as `rafka consumer-groups --describe` prints them
    (run in this driver: its `connect` joins the Ray cluster the fixture started)."""
    from rafka.cli import main
    capsys.readouterr()
    assert main(["consumer-groups", "--describe", "--group", group]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip()]
    header = next(i for i, cells in enumerate(lines) if cells[:1] == ["GROUP"])
    assert lines[header][:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    return {(cells[1], int(cells[2])): tuple(int(c) for c in cells[3:6]) for cells in lines[header + 1:]}


def produce_alternating(bootstrap, topic, prefix, count):
    """`count` records f"{prefix}{i}" over partitions 0 and 1 in turn, acked by all; the producer."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, value=f"{prefix}{i}".encode(), partition=i % 2)
    assert producer.flush(60) == 0
    return producer


def poll_group(consumers, count, timeout_s=90):
    """Poll every member in turn until `count` records came; {(partition, offset): (member index, value)}."""
    import time
    seen = {}
    deadline = time.monotonic() + timeout_s
    while len(seen) < count and time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                key = (message.partition(), message.offset())
                assert key not in seen, f"{key} read twice"
                seen[key] = (index, message.value())
    return seen


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_confluent_kafka__idempotent_compressed_producer__records_read_back_once_at_rafkas_offsets(cluster, bootstrap,
                                                                                                    codec):
    from confluent_kafka import Producer
    topic = f"librdkafka-{codec}"
    create(cluster, topic)
    delivered = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "compression.type": codec, "linger.ms": 20})
    for i in range(60):
        producer.produce(topic, value=(f"{codec}-{i} " + "payload " * 20).encode(), partition=i % 2,
                         on_delivery=lambda error, m: delivered.append((error, m.partition(), m.offset(), m.value())))
    assert producer.flush(60) == 0
    assert all(error is None for error, *_ in delivered)
    acked = sorted((p, o, v) for _, p, o, v in delivered)
    assert [o for p, o, _ in acked if p == 0] == list(range(30))
    assert read_back(cluster, topic, 2, 60) == acked


def test_confluent_kafka__two_members_rebalance_commit_and_resume__lag_as_rafka_describes_it(cluster, bootstrap,
                                                                                            capsys):
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as CTopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec
    create(cluster, "group-on-wire", partitions=2)
    producer = produce_alternating(bootstrap, "group-on-wire", "g", 40)
    config = {"bootstrap.servers": bootstrap, "group.id": "wire-group", "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": 10_000, "heartbeat.interval.ms": 300}
    first = Consumer(config)
    first.subscribe(["group-on-wire"])
    second = Consumer(config)
    second.subscribe(["group-on-wire"])     # joins after the first: the group rebalances to two members
    seen = poll_group([first, second], 40)
    assert sorted(seen) == [(p, o) for p in (0, 1) for o in range(20)]
    owners = {p: {index for (q, _), (index, _) in seen.items() if q == p} for p in (0, 1)}
    assert owners[0] | owners[1] == {0, 1} and all(len(o) == 1 for o in owners.values()), owners
    first.commit(asynchronous=False)
    second.commit(asynchronous=True)
    second.close()      # close waits for the asynchronous commit
    first.close()
    assert {(tp.topic, tp.partition): o for tp, o in cluster.admin().list_consumer_group_offsets(
        "wire-group").items()} == {("group-on-wire", 0): 20, ("group-on-wire", 1): 20}

    for i in range(5):      # lag: 3 records behind on partition 0, 2 on partition 1
        producer.produce("group-on-wire", value=f"late{i}".encode(), partition=0 if i < 3 else 1)
    assert producer.flush(60) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("wire-group")])["wire-group"]
    committed = {(tp.topic, tp.partition): tp.offset for tp in committed.result(30).topic_partitions}
    ends = admin.list_offsets({CTopicPartition("group-on-wire", p): OffsetSpec.latest() for p in (0, 1)})
    ends = {(tp.topic, tp.partition): future.result(30).offset for tp, future in ends.items()}
    wire_view = {tp: (committed[tp], ends[tp], ends[tp] - committed[tp]) for tp in committed}
    assert wire_view == {("group-on-wire", 0): (20, 23, 3), ("group-on-wire", 1): (20, 22, 2)}
    assert rafka_describe_offsets("wire-group", capsys) == wire_view

    restarted = Consumer(config)
    restarted.subscribe(["group-on-wire"])
    resumed = poll_group([restarted], 5)
    restarted.close()
    assert sorted((p, o, v) for (p, o), (_, v) in resumed.items()) == [
        (0, 20, b"late0"), (0, 21, b"late1"), (0, 22, b"late2"), (1, 20, b"late3"), (1, 21, b"late4")]


def test_confluent_kafka__kip848_consumer_group_on_the_cluster__split_read_committed_as_rafka_describes_it(
        cluster, bootstrap, capsys):
    """KIP-848 through the brokers' edges to the coordinator actor: two members with
    group.protocol=consumer are assigned by the coordinator, read every record once
    between them and commit (by member epoch); `rafka consumer-groups --describe`
    (ConsumerGroupDescribe behind DescribeGroups' Dead) shows the offsets and lag."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition
    create(cluster, "kip848-on-wire", partitions=2)
    config = {"bootstrap.servers": bootstrap, "group.id": "kip848-group", "group.protocol": "consumer",
              "auto.offset.reset": "earliest", "enable.auto.commit": False}
    first, second = Consumer(config), Consumer(config)
    for consumer in (first, second):
        consumer.subscribe(["kip848-on-wire"])
    # Split first, records after: a partition that moves before its reader commits
    # is read again by the next owner (at-least-once, in Kafka too), so read-once is
    # asserted only over a settled split (CI once saw (0, 0) read twice otherwise).
    wait_until(lambda: [c.poll(0.1) for c in (first, second)] and all(len(c.assignment()) == 1
                                                                     for c in (first, second)),
               timeout_s=60, what="each member owns one partition")
    produce_alternating(bootstrap, "kip848-on-wire", "k", 40)
    seen = poll_group([first, second], 40)
    assert sorted(seen) == [(p, o) for p in (0, 1) for o in range(20)]
    for consumer in (first, second):   # each commits what it owns (its member epoch is checked)
        consumer.commit(offsets=[CTopicPartition(tp.topic, tp.partition, 20) for tp in consumer.assignment()],
                        asynchronous=False)
    described = cluster.admin().describe_consumer_group("kip848-group")
    assert (described["state"], described["assignor"], len(described["members"])) == ("Stable", "uniform", 2)
    owned = sorted(tp for member in described["members"].values() for tp in member["assignment"])
    assert owned == [("kip848-on-wire", 0), ("kip848-on-wire", 1)]
    assert rafka_describe_offsets("kip848-group", capsys) == {("kip848-on-wire", 0): (20, 20, 0),
                                                             ("kip848-on-wire", 1): (20, 20, 0)}
    first.close()
    second.close()


def test_kafka_python__group_consumer_and_admin_client(cluster, bootstrap):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import NewTopic, OffsetSpec
    from kafka.structs import OffsetAndMetadata
    creator = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
    creator.create_topics([NewTopic("kp-admin", num_partitions=2, replication_factor=3)])
    creator.close()
    wait_until(lambda: wire_ready(cluster, "kp-admin"), timeout_s=60, what="kp-admin's leaders serve the protocol")
    # A second admin: kafka-python's KafkaAdminClient sends to a partition's leader
    # by a broker list it refreshes only every metadata.max.age.ms, and each rafka
    # replica actor is its own node, so a new topic's leaders are nodes the first
    # admin has not heard of (UnknownBrokerIdError). Kafka's brokers do not come
    # with topics; one listener per broker (DESIGN "where this is going") ends this.
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
    assert len(cluster.admin().describe_topics(["kp-admin"])["kp-admin"]["partitions"]) == 2
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(12):
        producer.send("kp-admin", value=f"p{i}".encode(), partition=i % 2)
    producer.flush()
    producer.close()

    consumer = KafkaConsumer("kp-admin", bootstrap_servers=bootstrap, group_id="kp-wire-group",
                             auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=10_000,
                             heartbeat_interval_ms=500)
    got = []
    for _ in range(240):
        for records in consumer.poll(250).values():
            got += [(r.partition, r.offset, r.value) for r in records]
        if len(got) >= 12:
            break
    assert sorted(got) == sorted((i % 2, i // 2, f"p{i}".encode()) for i in range(12))
    consumer.commit()
    assert "kp-wire-group" in {g["group_id"] for g in admin.list_groups()}
    described = admin.describe_groups(["kp-wire-group"])["kp-wire-group"]
    assert described["group_state"] == "Stable" and len(described["members"]) == 1
    consumer.close()

    partitions = [KTopicPartition("kp-admin", p) for p in (0, 1)]
    listed = admin.list_group_offsets({"kp-wire-group": None})["kp-wire-group"]
    assert {tp: o.offset for tp, o in listed.items()} == {tp: 6 for tp in partitions}
    ends = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in partitions})
    assert {tp: o.offset for tp, o in ends.items()} == {tp: 6 for tp in partitions}
    rafka_view = cluster.admin().list_consumer_group_offsets("kp-wire-group")
    assert {(tp.topic, tp.partition): o for tp, o in rafka_view.items()} == {("kp-admin", 0): 6, ("kp-admin", 1): 6}

    altered = admin.alter_group_offsets("kp-wire-group", {partitions[0]: OffsetAndMetadata(2, "", -1)})
    assert all(error.errno == 0 for error in altered.values()), altered
    admin.delete_group_offsets("kp-wire-group", [partitions[1]])
    rafka_view = cluster.admin().list_consumer_group_offsets("kp-wire-group")
    assert {(tp.topic, tp.partition): o for tp, o in rafka_view.items()} == {("kp-admin", 0): 2}
    admin.delete_groups(["kp-wire-group"])
    assert cluster.admin().list_consumer_group_offsets("kp-wire-group") == {}
    admin.delete_topics(["kp-admin"])
    assert "kp-admin" not in cluster.admin().list_topics()
    admin.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by scripts/run.sh")
def test_kcat__produces_and_consumes_in_a_group(cluster, bootstrap):
    create(cluster, "kcat-group-topic", partitions=2)
    lines = "".join(f"k{i}\n" for i in range(6)).encode()
    subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", "kcat-group-topic", "-X", "acks=all"], input=lines,
                   timeout=60, check=True)
    done = subprocess.run(["kcat", "-b", bootstrap, "-G", "kcat-wire-group", "-X", "auto.offset.reset=earliest",
                           "-e", "-q", "-f", "%p %o %s\n", "kcat-group-topic"], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    consumed = sorted(line.split() for line in done.stdout.decode().splitlines())
    assert sorted(value for _, _, value in consumed) == [f"k{i}" for i in range(6)]
    by_partition = {}
    for partition, offset, _ in consumed:
        by_partition.setdefault(int(partition), []).append(int(offset))
    assert all(sorted(offsets) == list(range(len(offsets))) for offsets in by_partition.values())
    assert sorted((p, v) for (p, _, v) in read_back(cluster, "kcat-group-topic", 2, 6)) == sorted(
        (int(p), v.encode()) for p, _, v in consumed)
    wait_until(lambda: {(tp.partition, o) for tp, o in cluster.admin().list_consumer_group_offsets(
        "kcat-wire-group").items()} == {(p, len(o)) for p, o in by_partition.items()}, timeout_s=30,
        what="kcat's group committed its position")


def test_create_topics__minus_one__the_clusters_num_partitions_and_default_replication_factor(cluster, bootstrap):
    """Kafka's num.partitions and default.replication.factor stand for -1 (the
    test cluster sets 2 and 3); the answer and the topic both have them."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from tests.harness import TEST_CLUSTER_OPTIONS
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("broker-defaults", num_partitions=-1, replication_factor=-1)],
                        request_timeout=120)["broker-defaults"].result(120)
    described = cluster.admin().describe_topics(["broker-defaults"])["broker-defaults"]["partitions"]
    assert len(described) == TEST_CLUSTER_OPTIONS["num_partitions"] == 2
    assert all(len(p["replicas"]) == TEST_CLUSTER_OPTIONS["default_replication_factor"] == 3 for p in described)
    cluster.admin().delete_topic("broker-defaults")


def test_create_topic__the_bootstrap_node_keeps_answering_metadata_while_replicas_start(cluster, bootstrap):
    """The controller serves the bootstrap node on the loop that creates topics;
    a blocking Ray call there held every Metadata answer (3.5 s while a
    4-partition RF3 topic was created, 15 s for 10 partitions). Every answer
    asked for during a 6-partition creation comes back within 5 s, the wait the
    issue called a stall, or within 40% of the creation when a loaded machine
    makes it long (starting 18 replica processes takes this 2-core machine
    seconds; in a full CI run one answer took 6.4 s, behind the processes being
    started): a node held by the creation would answer only after most of it."""
    import time

    from tests.harness import MetadataProbe
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with MetadataProbe(host, int(port)) as probe:
        started_s = time.monotonic()
        cluster.admin().create_topic("metadata-while-creating", partitions=6, replication_factor=3)
        created_s = time.monotonic()
    latencies = probe.latencies_ms(started_s, created_s)
    assert len(latencies) >= 10, f"only {len(latencies)} answers in {created_s - started_s:.1f} s of creation"
    creation_ms = (created_s - started_s) * 1000
    assert max(latencies) < max(5_000, 0.4 * creation_ms), \
        f"Metadata waited {max(latencies):.0f} ms during the creation ({creation_ms:.0f} ms)"
    cluster.admin().delete_topic("metadata-while-creating")


def test_brokers__no_client_sees_a_refused_connection__topics_churn_and_a_replica_coordinator_and_broker_restart(
        cluster, bootstrap):
    """Kafka's shape at the edge: clients see the brokers only, at addresses that
    outlive every actor behind them. While a topic is deleted and created again
    and a replica, the group coordinator and one of broker 1's two network
    processes are killed (SIGKILL; Ray restarts each), every Metadata answer names
    exactly the three brokers at their first addresses, none of them ever refuses
    a connection (broker 1's other process holds its port), and a librdkafka
    producer writing all along logs no "Connection refused" (librdkafka reports
    one as a transport failure, which applications treat as an error) and gets
    every record acked. The killed process listens at its broker's address again."""
    import logging
    import os
    import signal

    from confluent_kafka import Producer as CProducer

    from rafka.core.actor_names import broker_actor_name, coordinator_actor_name
    from tests.harness import MetadataProbe
    brokers = {(h, int(p)) for h, p in (b.rsplit(":", 1) for b in bootstrap.split(","))}
    create(cluster, "steady")
    logs, delivered = [], []

    class Kept(logging.Handler):
        def emit(self, record):
            logs.append(record.getMessage())
    librdkafka_log = logging.getLogger("librdkafka-churn")
    librdkafka_log.addHandler(Kept())
    librdkafka_log.setLevel(logging.DEBUG)
    producer = CProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "logger": librdkafka_log,
                          "error_cb": lambda error: logs.append(str(error))})
    host, port = bootstrap.split(",")[0].rsplit(":", 1)   # broker 0's: its process is not killed
    port = int(port)

    def write(n: int) -> None:
        for i in range(n):
            producer.produce("steady", value=b"v", partition=i % 2,
                             on_delivery=lambda error, m: delivered.append(error))
        producer.poll(0)

    def kill(name: str) -> None:
        actor = ray.get_actor(name, namespace="rafka")
        ask = actor.ping if name.startswith("coordinator") else actor.describe   # each says its pid
        pid = ray.get(ask.remote())["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: ray.get(ask.remote(), timeout=5)["pid"] != pid, timeout_s=60,
                   what=f"{name} restarted")
        producer.poll(0)

    with MetadataProbe(host, port, interval_ms=100, check_endpoints=True) as probe:
        for _ in range(2):
            create(cluster, "churn")
            write(20)
            cluster.admin().delete_topic("churn")
        create(cluster, "churn")
        leader = cluster.admin().describe_topics(["churn"])["churn"]["partitions"][0]["leader"]
        leader_actor = ray.get(cluster.controller.replica_actor.remote("churn", 0, leader))
        for name in (leader_actor, coordinator_actor_name(0), broker_actor_name(1, 0)):
            kill(name)
            write(20)
        wait_until(lambda: wire_ready(cluster, "churn"), timeout_s=60, what="churn's leaders back")
        answered = len(probe.answers)
        wait_until(lambda: len(probe.answers) > answered + 2, timeout_s=10, what="answers after the restarts")
    assert producer.flush(60) == 0 and len(delivered) == 100 and not any(delivered), \
        [e for e in delivered if e][:3]
    assert probe.named_after_refusal == []
    assert {frozenset(nodes.values()) for _, _, nodes in probe.answers} == {frozenset(brokers)}
    assert not [line for line in logs if "refused" in line.lower()], logs
    assert set(cluster.bootstrap_servers.split(",")) == set(bootstrap.split(",")), "a broker's address changed"
    cluster.admin().delete_topic("churn")


def test_kafka_python__broker_loggers__a_level_set_on_broker_1_reaches_its_processes_and_no_others(
        cluster, bootstrap):
    """kafka-configs.sh --entity-type broker-loggers, through kafka-python: DEBUG
    set on broker 1's rafka.core.replica holds in each of broker 1's processes
    (its replica of a topic, both network processes), not in broker 0's replica;
    DescribeConfigs on broker 1 shows it; a delete gives the logger back its level."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    from rafka.core.actor_names import broker_actor_name
    create(cluster, "logged", partitions=1)
    state = ray.get(cluster.controller.metadata_snapshot.remote())["topics"]["logged"]["partitions"][0]
    replica_on = {broker: state["actors"][replica] for replica, broker in zip(state["replicas"], state["brokers"])}
    processes = {broker: [replica_on[broker]] + [broker_actor_name(broker, k) for k in range(2)] for broker in (0, 1)}

    def levels(broker):
        return [ray.get(ray.get_actor(name, namespace="rafka").__ray_call__.remote(
            lambda self: __import__("logging").getLogger("rafka.core.replica").level), timeout=10)
            for name in processes[broker]]
    before = levels(1)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60_000)
    try:
        resource = ConfigResource(ConfigResourceType.BROKER_LOGGER, "1", {"rafka.core.replica": "DEBUG"})
        assert admin.alter_configs([resource]) == {"broker_logger": {"1": "OK"}}
        assert wait_until(lambda: levels(1) == [10, 10, 10], timeout_s=30, what="DEBUG in broker 1's processes")
        assert 10 not in levels(0)
        described = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER_LOGGER, "1",
                                                           {"rafka.core.replica": None})])
        assert described["broker_logger"]["1"]["rafka.core.replica"]["value"] == "DEBUG"
        admin.reset_configs([ConfigResource(ConfigResourceType.BROKER_LOGGER, "1", {"rafka.core.replica": None})])
        assert wait_until(lambda: levels(1) == before, timeout_s=30, what="broker 1's processes back as they were")
    finally:
        admin.close()
        cluster.admin().delete_topic("logged")


def test_controller_restarted__a_brokers_lost_process_comes_back_at_its_port_while_the_other_hangs(cluster,
                                                                                                  bootstrap):
    """Each broker's port is kept in the metadata log (brokers sharing a host take
    free ports): a restarted controller recreates broker 2's killed process 0 on
    it while broker 2's process 1, which also holds that port, is stopped and
    answers nothing (SIGSTOP). Before the port was kept, the successor learned
    it only from a live process's ping and made no process 0 meanwhile."""
    import os
    import signal

    from rafka.core.actor_names import broker_actor_name
    from tests.harness import wait_for_controller_epoch_after
    port = int(bootstrap.split(",")[2].rsplit(":", 1)[1])
    controller = cluster.controller
    # no watch round of the old controller remakes process 0 before the kill
    ray.get(controller.__ray_call__.remote(lambda self: setattr(self, "watch_interval_ms", 600_000)))
    stopped = ray.get(ray.get_actor(broker_actor_name(2, 1), namespace="rafka").describe.remote())["pid"]
    os.kill(stopped, signal.SIGSTOP)
    try:
        ray.kill(ray.get_actor(broker_actor_name(2, 0), namespace="rafka"), no_restart=True)
        epoch = ray.get(controller.ping.remote())
        ray.kill(controller, no_restart=False)
        wait_for_controller_epoch_after(controller, epoch)
        assert wait_until(lambda: listening_ports(2, processes=(0,)), timeout_s=30,
                          what="broker 2's process 0 made again while process 1 is stopped") == {port}
    finally:
        os.kill(stopped, signal.SIGCONT)
    assert wait_until(lambda: listening_ports(2), timeout_s=60, what="both of broker 2's processes") == {port}
    assert set(cluster.bootstrap_servers.split(",")) == set(bootstrap.split(",")), "a broker's address changed"


def test_confluent_admin__incremental_alter_configs_compacts_an_r3_topic__keyless_records_invalid_record_at_once(
        cluster, bootstrap):
    """librdkafka's test 0011 (test_message_single_partition_record_fail): APPEND
    compact to cleanup.policy, then keyless records fail with INVALID_RECORD
    (KIP-467) while keyed ones are written; SUBTRACT it and keyless records are
    written again. The change applies on the topic's replicas when the answer
    comes, and DescribeConfigs (on any node) shows it."""
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
    create(cluster, "made-compacted", partitions=1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "made-compacted")

    def alter(operation):
        change = ConfigResource(ConfigResource.Type.TOPIC, "made-compacted", incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=operation)])
        admin.incremental_alter_configs([change])[change].result(60)

    def produce(key):
        """Five records in one batch to partition 0: each one's delivery error code (None: written)."""
        delivered = []
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 50})
        for i in range(5):
            producer.produce("made-compacted", value=b"v%d" % i, key=key, partition=0,
                             on_delivery=lambda error, m: delivered.append(None if error is None else error.code()))
        assert producer.flush(60) == 0
        return delivered

    def cleanup_policy():
        entry = admin.describe_configs([resource])[resource].result(60)["cleanup.policy"]
        return entry.value, ConfigSource(entry.source)

    assert produce(None) == [None] * 5
    alter(AlterConfigOpType.APPEND)
    assert cleanup_policy() == ("delete,compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert produce(None) == [KafkaError.INVALID_RECORD] * 5
    assert produce(b"k") == [None] * 5
    alter(AlterConfigOpType.SUBTRACT)
    assert cleanup_policy() == ("delete", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert produce(None) == [None] * 5
    assert cluster.admin().describe_topics(["made-compacted"])["made-compacted"]["config"] == {
        "min.insync.replicas": "2", "cleanup.policy": "delete"}
    cluster.admin().delete_topic("made-compacted")
