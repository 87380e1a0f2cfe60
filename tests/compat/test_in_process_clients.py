"""Clients nobody here wrote, against the wire-protocol handlers on the in-process
node (no Ray): kafka-python, confluent-kafka (librdkafka) and kcat produce, read
back and list what rafka's own log holds. The same clients against a
local_cluster's actors are the next step of issue 14."""

import shutil
import subprocess
import time

import pytest

from rafka.core.records import decode_batches
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.compat


@pytest.fixture(params=[False, True], ids=["actor-nodes", "broker-edge"])
def node(tmp_path, request):
    """Each client test twice: at the actors' own nodes, and through a broker's
    node in front of them (protocol.edge), where a cluster's clients connect."""
    with ProtocolNode(tmp_path, {"orders": 2}, edge=request.param) as node:
        yield node


def log_values(node, partition):
    """What the partition's log holds, read by rafka's own decoder."""
    log = node.endpoints[("orders", partition)].replica.log
    records = log.read(0, 1 << 24, max_offset=log.high_watermark)
    return [(r.offset, r.value) for _, batch in decode_batches(records) for r in batch]


def test_confluent_kafka__fetch_out_of_range__earliest_reset_reads_the_records(node):
    """A committed offset past the LEO: the Fetch answer says OFFSET_OUT_OF_RANGE with
    an empty record set (a null one is unparseable to librdkafka, whose consumer then
    retried forever), so auto.offset.reset=earliest fires and the records are read."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all"})
    for i in range(3):
        producer.produce("orders", value=f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "reset", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("orders", 0, 100)], asynchronous=False)
    assert committed(node, "reset") == {("orders", 0): 100}
    consumer.assign([TopicPartition("orders", 0)])   # from the committed offset, 100 > the LEO (3)
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append((message.offset(), message.value()))
    consumer.close()
    assert got == [(0, b"r0"), (1, b"r1"), (2, b"r2")]


def test_confluent_kafka__keyless_record_to_a_compacted_topic__invalid_record_nothing_written(tmp_path):
    """KIP-467: the broker names the keyless records of the batch (record_errors), so
    librdkafka fails them with INVALID_RECORD and their keyed batch-mates with
    _INVALID_DIFFERENT_RECORD (without record_errors every record of the batch gets
    INVALID_RECORD; librdkafka tells them apart only when two or more records
    failed); nothing of the batch is written, and a keyed record after it is."""
    from confluent_kafka import KafkaError, Producer
    with ProtocolNode(tmp_path, {"facts": 1}, configs={"facts": {"cleanup.policy": "compact"}}) as node:
        reports = {}
        producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "linger.ms": 1000})
        for index, key in enumerate([b"a", None, b"c", None]):   # one batch: flush sends it
            producer.produce("facts", key=key, value=f"v{index}".encode(), partition=0,
                             on_delivery=lambda error, message, index=index: reports.update({index: error}))
        assert producer.flush(30) == 0
        assert {index: error.code() for index, error in reports.items()} == {
            0: KafkaError._INVALID_DIFFERENT_RECORD, 1: KafkaError.INVALID_RECORD,
            2: KafkaError._INVALID_DIFFERENT_RECORD, 3: KafkaError.INVALID_RECORD}
        log = node.endpoints[("facts", 0)].replica.log
        assert log.log_end_offset == 0
        delivered = []
        producer.produce("facts", key=b"k", value=b"keyed", partition=0,
                         on_delivery=lambda error, message: delivered.append((error, message.offset())))
        assert producer.flush(30) == 0
        assert delivered == [(None, 0)]
        records = log.read(0, 1 << 20, max_offset=log.high_watermark)
        assert [(r.offset, r.key, r.value) for _, batch in decode_batches(records) for r in batch] == [
            (0, b"k", b"keyed")]


def test_kafka_python__idempotent_producer_and_an_assigned_consumer(node):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    producer = KafkaProducer(bootstrap_servers=node.bootstrap, acks="all", linger_ms=1)
    sent = [producer.send("orders", value=f"v{i}".encode(), partition=i % 2) for i in range(10)]
    producer.flush()
    acked = [(f.get(10).partition, f.get(10).offset) for f in sent]
    producer.close()
    assert acked == [(i % 2, i // 2) for i in range(10)]
    assert log_values(node, 1) == [(i, f"v{2 * i + 1}".encode()) for i in range(5)]
    consumer = KafkaConsumer(bootstrap_servers=node.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    partitions = [TopicPartition("orders", 0), TopicPartition("orders", 1)]
    consumer.assign(partitions)
    got = []
    for _ in range(40):
        for records in consumer.poll(250).values():
            got += [(r.partition, r.offset, r.value) for r in records]
        if len(got) >= 10:
            break
    assert sorted(got) == sorted((i % 2, i // 2, f"v{i}".encode()) for i in range(10))
    assert consumer.end_offsets(partitions) == {tp: 5 for tp in partitions}
    assert consumer.beginning_offsets(partitions) == {tp: 0 for tp in partitions}
    consumer.close()


def test_confluent_kafka__idempotent_acks_all_producer_and_an_assigned_consumer(node):
    from confluent_kafka import Consumer, Producer, TopicPartition
    delivered = []
    producer = Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True, "acks": "all"})
    for i in range(6):
        producer.produce("orders", value=f"c{i}".encode(), partition=0,
                         on_delivery=lambda error, message: delivered.append((error, message.offset())))
    assert producer.flush(30) == 0
    assert delivered == [(None, i) for i in range(6)]
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition("orders", 0, 0)])
    got = []
    while len(got) < 6:
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        got.append((message.offset(), message.value()))
    assert got == log_values(node, 0)
    assert consumer.get_watermark_offsets(TopicPartition("orders", 0), timeout=10) == (0, 6)
    consumer.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by scripts/run.sh")
def test_kcat__lists_produces_consumes_and_queries_offsets(node):
    def kcat(*args, stdin=b""):
        done = subprocess.run(["kcat", "-b", node.bootstrap, *args], input=stdin, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.decode()
    listing = kcat("-L")
    assert 'topic "orders" with 2 partitions' in listing
    kcat("-P", "-t", "orders", "-p", "1", "-X", "enable.idempotence=true", stdin=b"a\nb\nc\n")
    assert log_values(node, 1) == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert kcat("-C", "-t", "orders", "-p", "1", "-o", "beginning", "-e", "-f", "%o %s\n") == "0 a\n1 b\n2 c\n"
    assert kcat("-Q", "-t", "orders:1:-1").strip() == "orders [1] offset 3"


# librdkafka enables LZ4 only when the broker advertises FindCoordinator v0 (its
# feature table): before that, it sent lz4 batches uncompressed.
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_confluent_kafka__compressed_batches_are_stored_as_sent_and_read_back(node, codec):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from rafka.core import compression
    from rafka.core.records import iter_batches
    values = [(f"{codec}-{i}-" + "payload " * 40).encode() for i in range(30)]
    producer = Producer({"bootstrap.servers": node.bootstrap, "enable.idempotence": True, "acks": "all",
                         "compression.type": codec, "linger.ms": 50})
    for value in values:
        producer.produce("orders", value=value, partition=0)
    assert producer.flush(30) == 0
    log = node.endpoints[("orders", 0)].replica.log
    stored = log.read(0, 1 << 24, max_offset=log.high_watermark)
    codecs = {header.attributes & 0x07 for _, header in iter_batches(stored)}
    assert codecs == {compression.CODECS[codec]}
    assert [v for _, v in log_values(node, 0)] == values
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition("orders", 0, 0)])
    got = []
    while len(got) < len(values):
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        got.append(message.value())
    consumer.close()
    assert got == values


def committed(node, group):
    return {tp: v[0] for tp, v in node.coordinator.shard.fetch_offsets(group).items() if v is not None}


def test_kafka_python__a_group_consumer_reads_everything_and_commits(node):
    from kafka import KafkaConsumer, KafkaProducer
    producer = KafkaProducer(bootstrap_servers=node.bootstrap, acks="all")
    for i in range(10):
        producer.send("orders", value=f"g{i}".encode(), partition=i % 2)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer("orders", bootstrap_servers=node.bootstrap, group_id="kp-group",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    got = []
    for _ in range(120):
        for records in consumer.poll(250).values():
            got += [(r.partition, r.offset) for r in records]
        if len(got) >= 10:
            break
    assert sorted(got) == [(p, o) for p in (0, 1) for o in range(5)]
    consumer.commit()
    consumer.close()
    assert committed(node, "kp-group") == {("orders", 0): 5, ("orders", 1): 5}


def test_confluent_kafka__two_group_members_split_the_partitions_commit_and_a_restart_resumes(node):
    from confluent_kafka import Consumer, Producer
    producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce("orders", value=f"c{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    config = {"bootstrap.servers": node.bootstrap, "group.id": "ck-group", "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}
    first, second = Consumer(config), Consumer(config)
    first.subscribe(["orders"])
    second.subscribe(["orders"])
    seen = {}
    import time
    deadline = time.monotonic() + 60
    while len(seen) < 20 and time.monotonic() < deadline:
        for consumer in (first, second):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen[(message.partition(), message.offset())] = consumer
    assert sorted(seen) == [(p, o) for p in (0, 1) for o in range(10)]
    owners = {id(c) for c in seen.values()}
    assert len(owners) == 2, "both members should own one partition after the rebalance"
    first.commit(asynchronous=False)
    second.commit(asynchronous=True)
    second.close()
    first.close()
    deadline = time.monotonic() + 30
    while committed(node, "ck-group") != {("orders", 0): 10, ("orders", 1): 10} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert committed(node, "ck-group") == {("orders", 0): 10, ("orders", 1): 10}
    for i in range(2):
        producer.produce("orders", value=b"after", partition=i)
    assert producer.flush(30) == 0
    restarted = Consumer(config)
    restarted.subscribe(["orders"])
    resumed = []
    deadline = time.monotonic() + 60
    while len(resumed) < 2 and time.monotonic() < deadline:
        message = restarted.poll(0.2)
        if message is not None and message.error() is None:
            resumed.append((message.partition(), message.offset(), message.value()))
    restarted.close()
    assert sorted(resumed) == [(0, 10, b"after"), (1, 10, b"after")]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by scripts/run.sh")
def test_kcat__consumes_in_a_group(node):
    subprocess.run(["kcat", "-P", "-b", node.bootstrap, "-t", "orders", "-p", "0"], input=b"a\nb\n", timeout=30,
                   check=True)
    done = subprocess.run(["kcat", "-b", node.bootstrap, "-G", "kcat-group", "-X", "auto.offset.reset=earliest",
                           "-e", "-q", "-f", "%p %o %s\n", "orders"], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "0 0 a\n0 1 b\n"


def test_confluent_admin__describes_a_topics_configs_with_their_sources(node):
    from confluent_kafka.admin import AdminClient, ConfigResource
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "orders")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["min.insync.replicas"].value == "1" and not configs["min.insync.replicas"].is_default
    assert configs["retention.ms"].value == "604800000" and configs["retention.ms"].is_default
    assert configs["unclean.leader.election.enable"].value == "false"
    missing = ConfigResource(ConfigResource.Type.TOPIC, "nope")
    with pytest.raises(Exception, match="UNKNOWN_TOPIC_OR_PART"):
        admin.describe_configs([missing])[missing].result(30)


def test_confluent_admin__alters_and_deletes_group_offsets_except_a_subscribed_topics(node):
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as CTopicPartition
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    partitions = [CTopicPartition("orders", 0, 3), CTopicPartition("orders", 1, 4)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("tidy", partitions)])["tidy"].result(30)
    assert committed(node, "tidy") == {("orders", 0): 3, ("orders", 1): 4}
    # confluent-kafka's AdminClient has no OffsetDelete; kafka-python's does
    from kafka import KafkaAdminClient, TopicPartition as KTopicPartition
    kafka_python_admin = KafkaAdminClient(bootstrap_servers=node.bootstrap)
    deleted = kafka_python_admin.delete_group_offsets("tidy", [KTopicPartition("orders", 0)])
    kafka_python_admin.close()
    assert all(error is None or getattr(error, "errno", 0) == 0 for error in deleted.values()), deleted
    assert committed(node, "tidy") == {("orders", 1): 4}


def test_confluent_kafka__commit_to_a_topic_that_does_not_exist__unknown_topic_or_partition(node):
    """librdkafka's 0030 (do_nonexist_commit): Kafka refuses each partition of an
    unknown topic, and of a known topic past its last partition; the known
    partition of the same commit is committed."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "nonexist-commit",
                         "enable.auto.commit": False})
    with pytest.raises(KafkaException) as refused:
        consumer.commit(offsets=[TopicPartition("no-such-topic", 0, 5)], asynchronous=False)
    assert refused.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    with pytest.raises(KafkaException) as partly:
        consumer.commit(offsets=[TopicPartition("orders", 1, 3), TopicPartition("orders", 7, 3)], asynchronous=False)
    assert partly.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    committed = consumer.committed([TopicPartition("orders", 1), TopicPartition("no-such-topic", 0)], timeout=10)
    assert [(tp.topic, tp.offset) for tp in committed] == [("orders", 3), ("no-such-topic", -1001)]
    consumer.close()


def poll_for(consumers, seconds, until=lambda: False):
    """Poll every consumer (callbacks run in poll) for `seconds` or until `until()`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until():
        for consumer in consumers:
            consumer.poll(0.1)


def test_confluent_kafka__members_offering_only_cooperative_sticky__accepted_and_split_the_partitions(node):
    """librdkafka's incremental (KIP-429) rebalancing runs on the classic protocol:
    the coordinator takes cooperative-sticky by vote and relays the leader's
    assignment, as Kafka's does (rafka's coordinator refused it when it assigned)."""
    from confluent_kafka import Consumer
    config = {"bootstrap.servers": node.bootstrap, "group.id": "coop", "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
              "partition.assignment.strategy": "cooperative-sticky"}
    first, second = Consumer(config), Consumer(config)
    for consumer in (first, second):
        consumer.subscribe(["orders"])
    try:
        def split():
            owned = [{(tp.topic, tp.partition) for tp in c.assignment()} for c in (first, second)]
            return all(len(o) == 1 for o in owned) and owned[0] | owned[1] == {("orders", 0), ("orders", 1)}
        poll_for((first, second), 60, split)
        assert split(), [c.assignment() for c in (first, second)]
        described = node.coordinator.shard.describe_group("coop")
        assert (described["state"], described["protocol_type"], described["protocol"]) == (
            "Stable", "consumer", "cooperative-sticky")
    finally:
        first.close()
        second.close()


def test_confluent_kafka__static_member_restarted_within_its_session__same_partitions__the_other_not_rebalanced(
        node):
    """KIP-345: a member with group.instance.id closes without leaving (librdkafka
    sends no LeaveGroup for a static member) and a new process with the same
    instance id joins within session.timeout.ms: it takes the old member's place
    and partition; the group's generation does not move and the other member's
    assignment callback is not called again."""
    from confluent_kafka import Consumer

    def consumer(instance, assigned):
        c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "static", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                      "group.instance.id": instance})
        c.subscribe(["orders"], on_assign=lambda _, ps: assigned.append(sorted((p.topic, p.partition) for p in ps)))
        return c
    a_assigned, b_assigned, b_again_assigned = [], [], []
    a, b = consumer("host-a", a_assigned), consumer("host-b", b_assigned)
    b_again = None
    try:
        def split():
            return bool(a_assigned) and bool(b_assigned) and len(a_assigned[-1]) == len(b_assigned[-1]) == 1
        poll_for((a, b), 60, split)
        assert split(), (a_assigned, b_assigned)
        poll_for((a, b), 1)                        # settled: no further rebalance pending
        a_calls, b_partitions = len(a_assigned), b_assigned[-1]
        generation = node.coordinator.shard.describe_group("static")["generation"]
        b.close()
        b = None
        b_again = consumer("host-b", b_again_assigned)
        poll_for((a, b_again), 30, lambda: bool(b_again_assigned))
        assert b_again_assigned == [b_partitions]
        poll_for((a, b_again), 3)                  # longer than a's heartbeat interval: a would have heard
        assert len(a_assigned) == a_calls, f"the other member was rebalanced: {a_assigned}"
        described = node.coordinator.shard.describe_group("static")
        assert (described["state"], described["generation"]) == ("Stable", generation)
        assert sorted(m["group_instance_id"] for m in described["members"].values()) == ["host-a", "host-b"]
    finally:
        for c in (a, b, b_again):
            if c is not None:
                c.close()


class CooperativeMember:
    """A confluent-kafka consumer with cooperative-sticky (KIP-429): what it read, and
    its rebalance callbacks in order (librdkafka hands cooperative callbacks only
    the partitions that move)."""

    def __init__(self, bootstrap: str, name: str) -> None:
        from confluent_kafka import Consumer
        self.name = name
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "coop-three", "client.id": name,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                                  "partition.assignment.strategy": "cooperative-sticky"})
        self.events: list[tuple[str, frozenset]] = []
        self.read: set[tuple[int, int]] = set()

        def record(kind):
            def callback(_, partitions):
                if partitions:
                    self.events.append((kind, frozenset(p.partition for p in partitions)))
            return callback
        self.consumer.subscribe(["coop"], on_assign=record("assigned"), on_revoke=record("revoked"),
                                on_lost=record("lost"))

    def poll(self) -> None:
        """One poll, and an asynchronous commit of what it read: one thread polls
        every member, and a synchronous commit would wait behind this member's
        JoinGroup, parked until the others rejoin, which they do only when polled
        (librdkafka holds a commit behind a pending JoinGroup)."""
        message = self.consumer.poll(0.02)
        if message is not None and message.error() is None:
            self.read.add((message.partition(), message.offset()))
            self.consumer.commit(message=message, asynchronous=True)

    def commit_positions(self) -> None:
        """What it read of the partitions it owns, committed again (a commit refused
        mid-rebalance left a kept partition behind)."""
        from confluent_kafka import KafkaException
        try:
            self.consumer.commit(asynchronous=True)
        except KafkaException:   # nothing new to commit
            pass

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def revoked(self) -> list[frozenset]:
        return [partitions for kind, partitions in self.events if kind != "assigned"]


def test_confluent_kafka__cooperative_sticky__second_and_third_join_one_leaves__only_what_moves_revoked__all_read_and_committed(
        tmp_path):
    """KIP-429 with librdkafka's cooperative-sticky: members join one by one and
    one leaves while all consume and commit; a member that stays gives up only the
    partitions that move (6 -> 3 -> 2 of 6 partitions: 3, then 1 each; nothing when
    the leaver's partitions are shared out), is never told it lost any, and every
    record is read and committed."""
    from confluent_kafka import Producer
    with ProtocolNode(tmp_path, {"coop": 6}, edge=True) as node:
        producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all"})
        produced = 0

        def produce(count_per_partition: int) -> None:
            nonlocal produced
            for i in range(count_per_partition * 6):
                producer.produce("coop", value=f"r{produced + i}".encode(), partition=i % 6)
            assert producer.flush(30) == 0
            produced += count_per_partition * 6

        members: list[CooperativeMember] = []

        def run_until(condition) -> None:
            deadline = time.monotonic() + 60
            while not condition():
                assert time.monotonic() < deadline, {m.name: (m.owned(), m.events) for m in members}
                for m in members:
                    m.poll()
                owned = [p for m in members for p in m.owned()]
                assert len(owned) == len(set(owned)), {m.name: m.owned() for m in members}

        def split(*sizes) -> bool:
            return sorted(len(m.owned()) for m in members) == sorted(sizes) and \
                set().union(*(m.owned() for m in members)) == set(range(6))

        first = CooperativeMember(node.bootstrap, "first")
        members.append(first)
        produce(10)
        run_until(lambda: split(6))
        second = CooperativeMember(node.bootstrap, "second")
        members.append(second)
        produce(10)
        run_until(lambda: split(3, 3))
        assert [len(r) for r in first.revoked()] == [3]
        third = CooperativeMember(node.bootstrap, "third")
        members.append(third)
        produce(10)
        run_until(lambda: split(2, 2, 2))
        assert [len(r) for r in first.revoked()] == [3, 1] and [len(r) for r in second.revoked()] == [1]
        second.consumer.close()
        members.remove(second)
        produce(10)
        run_until(lambda: split(3, 3) and len(set().union(first.read, second.read, third.read)) == produced)
        assert [len(r) for r in first.revoked()] == [3, 1] and third.revoked() == []
        assert all(kind != "lost" for m in (first, second, third) for kind, _ in m.events)
        assert set().union(first.read, second.read, third.read) == {(p, o) for p in range(6)
                                                                     for o in range(produced // 6)}
        # the partitions the first member never gave up: it read every record of them, across every rebalance
        kept = set(range(6)) - set().union(*first.revoked())
        assert len(kept) == 2 and {(p, o) for p in kept for o in range(produced // 6)} <= first.read

        def all_committed() -> bool:
            for m in (first, third):
                m.commit_positions()
            return committed(node, "coop-three") == {("coop", p): produced // 6 for p in range(6)}
        run_until(all_committed)
        for m in (first, third):
            m.consumer.close()


def test_confluent_kafka__a_second_process_with_the_same_group_instance_id__the_first_fenced(tmp_path):
    """KIP-345: a second librdkafka consumer with the first one's group.instance.id
    takes its place (and its partitions); the first is told FENCED_INSTANCE_ID, a
    fatal error, at its next heartbeat."""
    from confluent_kafka import Consumer, KafkaError
    with ProtocolNode(tmp_path, {"orders": 2}, edge=True) as node:
        config = {"bootstrap.servers": node.bootstrap, "group.id": "static-twice", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                  "group.instance.id": "host-a"}
        first = Consumer(config)
        first.subscribe(["orders"])
        errors = []

        def poll_first() -> None:
            message = first.poll(0.05)
            if message is not None and message.error() is not None:
                errors.append(message.error())
        poll_for([], 60, lambda: poll_first() or len(first.assignment()) == 2)
        assert len(first.assignment()) == 2
        second = Consumer(config)
        second.subscribe(["orders"])
        try:
            poll_for([second], 60, lambda: poll_first() or (len(second.assignment()) == 2 and errors))
            assert len(second.assignment()) == 2
            # librdkafka's words for FENCED_INSTANCE_ID, raised as its fatal error
            assert [e.code() for e in errors] == [KafkaError._FATAL]
            assert "Static consumer fenced by other consumer with same group.instance.id" in errors[0].str()
        finally:
            second.close()
            first.close()
