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


def test_elect_leaders__preferred_election_moves_leadership_back__reassignment_listed_and_completes(cluster):
    """ElectLeaders through confluent-kafka's AdminClient: after a leader change
    (the controller's own election, as when it finds a leader gone), the preferred
    replica rejoins the ISR and a preferred election makes it lead again; then
    a reassignment started with kafka-python's AdminClient is listed while its
    new replica catches up, and completes with every acked record on the new
    replica set, its leader kept throughout (two new epochs, no election)."""
    import ray
    from confluent_kafka import ElectionType
    from kafka import KafkaAdminClient, TopicPartition as KTopicPartition
    from tests.harness import partition_state, read_back, wait_for_leader

    admin = cluster.admin()
    admin.create_topic("elected", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    first = wait_for_leader(cluster, "elected", 0)
    preferred = first["replicas"][0]
    assert first["leader"] == preferred
    ray.get(cluster.controller.elect_leader.remote("elected", 0, [preferred]), timeout=TIMEOUT_S)
    moved = wait_for_leader(cluster, "elected", 0, newer_than_epoch=first["leader_epoch"])
    assert moved["leader"] != preferred and preferred not in moved["isr"]
    with cluster.producer(acks="all") as producer:
        acked = [producer.send("elected", b"v-%d" % i, partition=0).result(timeout=TIMEOUT_S).offset
                 for i in range(20)]
    wait_until(lambda: preferred in partition_state(cluster, "elected", 0)["isr"], timeout_s=TIMEOUT_S,
               what="the preferred replica back in the ISR")

    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    tp = CTopicPartition("elected", 0)
    assert client.elect_leaders(ElectionType.PREFERRED, [tp]).result(TIMEOUT_S) == {
        tp: None}
    back = wait_for_leader(cluster, "elected", 0, newer_than_epoch=moved["leader_epoch"])
    assert back["leader"] == preferred and back["leader_epoch"] == moved["leader_epoch"] + 1
    (again,) = client.elect_leaders(ElectionType.PREFERRED, [tp]).result(TIMEOUT_S).values()
    assert again.name() == "ELECTION_NOT_NEEDED"   # confluent-kafka gives its KafkaError
    assert [offset for offset, _ in read_back(cluster, "elected")] == acked

    admin.create_topic("moved", partitions=1, replication_factor=2)
    before = admin.replica_brokers(["moved"])[("moved", 0)]
    spare = next(b for b in (0, 1, 2) if b not in before)
    target = [before[0], spare]
    with cluster.producer(acks="all") as producer:
        moved_acked = [producer.send("moved", b"m-%d" % i, partition=0).result(timeout=TIMEOUT_S).offset
                       for i in range(20)]
    leading = wait_for_leader(cluster, "moved", 0)
    kafka_admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        moving = KTopicPartition("moved", 0)
        assert kafka_admin.alter_partition_reassignments({moving: target}) == {moving: None}
        listed = kafka_admin.list_partition_reassignments()
        assert listed == {moving: {"replicas": target + [before[1]], "adding_replicas": [spare],
                                   "removing_replicas": [before[1]]}}
        wait_until(lambda: kafka_admin.list_partition_reassignments() == {}, timeout_s=TIMEOUT_S * 2,
                   what="the reassignment completed")
    finally:
        kafka_admin.close()
    assert admin.replica_brokers(["moved"])[("moved", 0)] == target
    # one new leader epoch as the move started, one as it completed, and no election
    # between: the watch loop leaves a partition alone until its new epoch is announced
    done = wait_for_leader(cluster, "moved", 0, newer_than_epoch=leading["leader_epoch"] + 1)
    assert (done["leader"], done["leader_epoch"]) == (leading["leader"], leading["leader_epoch"] + 2)
    assert [offset for offset, _ in read_back(cluster, "moved")] == moved_acked


def test_client_quotas__rafka_configs_through_a_broker__every_broker_throttles(cluster):
    """`rafka configs` alters a client id's producer_byte_rate over the wire (a
    broker relays AlterClientQuotas to the controller, which pushes the image
    before it answers) and describes it back; a confluent-kafka producer of that
    client id writing to partitions led by every broker is then throttled by
    each broker on its own (throttle_cb names the broker), under Kafka's default
    quota window."""
    import types
    from confluent_kafka import Producer
    from rafka.cli_configs import cmd_configs

    admin = cluster.admin()
    admin.create_topic("quoted", partitions=3, replication_factor=1)
    lines: list[str] = []
    args = types.SimpleNamespace(alter=True, describe=False, entities=[["clients", "slow", True]],
                                 add_config="producer_byte_rate=65536", delete_config=None)
    assert cmd_configs(admin, args, out=lines.append) == 0
    args = types.SimpleNamespace(alter=False, describe=True, entities=[["clients", "slow", True]])
    assert cmd_configs(admin, args, out=lines.append) == 0
    assert lines == ["Completed updating config for client slow.",
                     "Quota configs for client-id 'slow' are producer_byte_rate=65536.0"]

    throttled_by: set[int] = set()
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "slow", "acks": "all",
                         "linger.ms": 5, "throttle_cb": lambda event: event.throttle_time > 0 and
                         throttled_by.add(event.broker_id)})
    for partition in range(3):
        for _ in range(64):   # 1 MiB to each broker: past the window's 10 * 64 KiB allowance
            producer.produce("quoted", b"z" * 16384, partition=partition)
            producer.poll(0)
    assert producer.flush(60) == 0
    # three partitions of one replica each: Kafka's assignment puts one on each broker
    assert throttled_by == {0, 1, 2}
    print(f"throttled by brokers {sorted(throttled_by)}")
