"""DeleteRecords, DescribeCluster and DescribeLogDirs on a 3-broker local cluster:
the log start moves on every replica (followers take it from their fetches)
before the answer, confluent-kafka's AdminClient sees the brokers, and each
broker describes its own log dir."""

import pytest
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient

from tests.harness import describe_replica, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.shares_cluster]
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
    # the followers in the ISR first: a follower slow to start (a loaded machine) is out
    # of it, and with the preferred replica taken away too nobody could lead but it
    # (the partition offline, then the preferred elected again at a newer epoch)
    wait_until(lambda: len(partition_state(cluster, "elected", 0)["isr"]) == 3, timeout_s=TIMEOUT_S,
               what="every replica of elected in the ISR")
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


def test_elect_leader__no_broker_names_the_new_leader_before_it_is_told(cluster):
    """An election to a replica whose process is paused (SIGSTOP) is committed at
    once, yet for as long as its become_leader cannot be answered no broker's
    Metadata names it: a broker that did would send producers to a replica that
    answers their first batch NOT_LEADER_OR_FOLLOWER and writes their next one
    once it leads (the first's retry then refused OUT_OF_ORDER_SEQUENCE_NUMBER:
    `rafka verify`'s restart-cluster). Once it runs again the partition has a
    leader and every record acked before and after reads back."""
    import asyncio
    import time

    import ray

    from rafka.protocol.cluster_requests import metadata_answer, metadata_request
    from rafka.protocol.connection import Connection
    from tests.harness import TEST_CLUSTER_OPTIONS, partition_state, paused, read_back, wait_for_leader

    def leaders_named() -> dict[str, tuple[int, int]]:
        """Each broker's answer: (leader broker id, leader epoch) of handover-0."""
        async def ask(address: str):
            connection = await Connection.open(*address.rsplit(":", 1))
            try:
                partition, = metadata_answer(await connection.request(metadata_request(["handover"]))
                                             ).topics["handover"].partitions
                return partition.leader_node, partition.leader_epoch
            finally:
                await connection.close()
        async def ask_each(addresses: list[str]):
            return dict(zip(addresses, await asyncio.gather(*map(ask, addresses))))
        return asyncio.run(ask_each(cluster.bootstrap_servers.split(",")))

    admin = cluster.admin()
    admin.create_topic("handover", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    first = wait_for_leader(cluster, "handover", 0)
    wait_until(lambda: len(partition_state(cluster, "handover", 0)["isr"]) == 3, timeout_s=TIMEOUT_S,
               what="every replica of handover in the ISR")
    with cluster.producer(acks="all") as producer:
        acked = [producer.send("handover", b"before-%d" % i, partition=0).result(timeout=TIMEOUT_S).offset
                 for i in range(5)]
    target = next(r for r in first["replicas"] if r != first["leader"])
    target_broker = first["brokers"][first["replicas"].index(target)]
    with paused(describe_replica("handover", 0, target)["pid"]):
        election = cluster.controller.elect_leader.remote(
            "handover", 0, [r for r in first["replicas"] if r != target])
        wait_until(lambda: partition_state(cluster, "handover", 0)["leader"] == target, timeout_s=TIMEOUT_S,
                   what="the election committed")
        # its become_leader waits out leader_ping_timeout_ms: half of it is watched
        watched_until_s = time.monotonic() + TEST_CLUSTER_OPTIONS["leader_ping_timeout_ms"] / 2000
        answers = []
        while time.monotonic() < watched_until_s:
            answers.append(leaders_named())
        assert answers and all(leader != target_broker for answer in answers for leader, _ in answer.values()), \
            answers
    ray.get(election, timeout=TIMEOUT_S)
    wait_for_leader(cluster, "handover", 0, newer_than_epoch=first["leader_epoch"])
    with cluster.producer(acks="all") as producer:
        acked += [producer.send("handover", b"after-%d" % i, partition=0).result(timeout=TIMEOUT_S).offset
                  for i in range(5)]
    assert [offset for offset, _ in read_back(cluster, "handover")] == acked


def test_controller_mutation_rate__confluent_admin_through_a_broker__told_the_throttle_time(cluster):
    """KIP-599 as a client sees it: a client id's controller_mutation_rate of 0.1
    partitions a second (a bucket of one); confluent-kafka's AdminClient of that
    id creates a 2-partition topic through a broker (CreateTopics v4: Kafka's
    permissive quota, the topic is made), and the answer tells it to wait about
    the 10 s the bucket needs to refill (librdkafka's throttle_cb); another
    client id is not throttled."""
    import types
    from confluent_kafka.admin import NewTopic
    from rafka.cli_configs import cmd_configs

    args = types.SimpleNamespace(alter=True, describe=False, entities=[["clients", "mutator", True]],
                                 add_config="controller_mutation_rate=0.1", delete_config=None)
    assert cmd_configs(cluster.admin(), args, out=lambda line: None) == 0
    throttles: dict[str, list[float]] = {"mutator": [], "other": []}
    for client_id, topic in (("mutator", "mutated"), ("other", "unmutated")):
        client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "client.id": client_id,
                              "throttle_cb": lambda event, seen=throttles[client_id]: seen.append(event.throttle_time)})
        futures = client.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)],
                                       operation_timeout=TIMEOUT_S)
        futures[topic].result(timeout=TIMEOUT_S)   # made: the quota was permissive
        client.poll(1.0)
    assert throttles["mutator"] and 3.0 <= max(throttles["mutator"]) <= 10.0, throttles
    assert not any(throttles["other"]), throttles


def test_connection_creation_rate__an_ips_quota__its_eleventh_connection_to_a_broker_not_served(cluster):
    """KIP-612 on a broker's listener: `rafka configs --entity-type ips` gives
    127.0.0.1 one connection a second (ten over Kafka's 10 s window);
    confluent-kafka clients bootstrapping from there get ten metadata answers,
    and the eleventh's connection is closed unanswered (it times out); the
    brokers' and actors' own connections, from the node's address, are not
    counted. The quota is removed at the end (the module's cluster goes on)."""
    import types
    from confluent_kafka import KafkaException
    from rafka.cli_configs import cmd_configs

    port = int(cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)[1])

    def alter(config: str, delete: bool = False) -> None:
        args = types.SimpleNamespace(alter=True, describe=False, entities=[["ips", "127.0.0.1", True]],
                                     add_config=None if delete else config, delete_config=config if delete else None)
        assert cmd_configs(cluster.admin(), args, out=lambda line: None) == 0

    alter("connection_creation_rate=1")
    try:
        outcomes = []
        for _ in range(11):
            client = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})
            try:
                client.list_topics(timeout=3)
                outcomes.append("answered")
            except KafkaException:
                outcomes.append("refused")
        assert outcomes == ["answered"] * 10 + ["refused"]
    finally:
        alter("connection_creation_rate", delete=True)


def test_scram_credentials__confluent_admin_through_a_broker__the_user_logs_in_on_every_broker(cluster):
    """AlterUserScramCredentials from confluent-kafka's AdminClient (librdkafka
    salts the password) reaches the controller through a broker in an envelope;
    once it is answered, every broker's listener logs the user in (the cluster
    is open: a client that starts a SASL exchange must finish it), and
    DescribeUserScramCredentials answers from any broker. Deleted at the end."""
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                       UserScramCredentialUpsertion)
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    sha512 = ScramMechanism.SCRAM_SHA_512
    made = client.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("carol", ScramCredentialInfo(sha512, 4096), b"carol-secret")])
    made["carol"].result(TIMEOUT_S)

    def logs_in(broker: str, password: str) -> bool:
        refused = []
        producer = Producer({"bootstrap.servers": broker, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol", "sasl.password": password,
                             "error_cb": lambda e: refused.append(e.code() == KafkaError._AUTHENTICATION)})
        for _ in range(TIMEOUT_S * 5):
            try:
                producer.list_topics(timeout=0.2)
                return True
            except KafkaException:
                if any(refused):
                    return False
        return False
    try:
        brokers = cluster.bootstrap_servers.split(",")
        assert len(brokers) == 3 and all(logs_in(broker, "carol-secret") for broker in brokers)
        assert not logs_in(brokers[0], "wrong")
        for broker in brokers:
            at_broker = AdminClient({"bootstrap.servers": broker})   # kept: the future dies with its client
            infos = at_broker.describe_user_scram_credentials(["carol"])["carol"].result(TIMEOUT_S).scram_credential_infos
            assert [(i.mechanism, i.iterations) for i in infos] == [(sha512, 4096)]
    finally:
        client.alter_user_scram_credentials([UserScramCredentialDeletion("carol", sha512)])["carol"].result(TIMEOUT_S)
    assert cluster.admin().list_users() == {}


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


def test_incremental_alter_configs__retention_lowered__old_segments_deleted_on_every_replica(cluster):
    """confluent-kafka's incremental_alter_configs lowers retention.ms on an RF3
    topic holding two-hour-old records then new ones: the change applies on every
    replica at once (the image reaches them before the answer), each replica's
    retention deletes the old segments (their files gone from its broker's log
    dir), every replica's log starts at the same offset past the old records, and
    a consumer from the earliest offset starts there, as Kafka's."""
    import os
    import time

    from confluent_kafka import Consumer
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = cluster.admin()
    admin.create_topic("aging", partitions=1, replication_factor=3,
                       config={"min.insync.replicas": "2", "segment.bytes": "300"})
    old_ms = int(time.time() * 1000) - 2 * 3_600_000
    with cluster.producer(acks="all", linger_ms=0) as producer:   # one batch per record
        for i in range(10):
            producer.send("aging", b"old-%d" % i, partition=0, timestamp_ms=old_ms).result(timeout=TIMEOUT_S)
        for i in range(5):
            producer.send("aging", b"new-%d" % i, partition=0).result(timeout=TIMEOUT_S)
    log_dirs = {broker: dirs[0]["log_dir"] for broker, dirs in admin.describe_log_dirs().items()}

    def segments(broker):
        return sorted(int(name.removesuffix(".log"))
                      for name in os.listdir(os.path.join(log_dirs[broker], "aging-0")) if name.endswith(".log"))
    brokers = admin.replica_brokers(["aging"])[("aging", 0)]
    before = {broker: segments(broker) for broker in brokers}
    assert all(len(kept) > 2 and kept[0] == 0 for kept in before.values()), before   # 7 days: nothing old yet
    assert {describe_replica("aging", 0, r)["log_start_offset"] for r in range(3)} == {0}

    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    change = ConfigResource(ConfigResource.Type.TOPIC, "aging", incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    assert client.incremental_alter_configs([change])[change].result(TIMEOUT_S) is None
    described = client.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "aging")])
    assert next(iter(described.values())).result(TIMEOUT_S)["retention.ms"].value == "3600000"

    def starts():
        found = {describe_replica("aging", 0, r)["log_start_offset"] for r in range(3)}
        return found if len(found) == 1 and found != {0} else None
    (start,) = wait_until(starts, timeout_s=TIMEOUT_S, what="every replica's old segments deleted")
    assert 0 < start <= 10, "the new records outlive an hour's retention"
    for broker in brokers:
        kept = segments(broker)
        assert kept[0] == start and set(before[broker]) - set(kept) == {b for b in before[broker] if b < start}

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "aging-readers",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["aging"])
        first = wait_until(lambda: consumer.poll(0.5), timeout_s=TIMEOUT_S, what="a record from the earliest")
        assert first.error() is None and first.offset() == start
    finally:
        consumer.close()
    admin.delete_topic("aging")


def test_acls__a_binding_added_then_removed__takes_effect_within_a_second_on_every_broker(cluster):
    """A DENY of everything on one topic for this cluster's clients (User:ANONYMOUS,
    no SASL here), created with confluent-kafka's AdminClient: within a second of
    the answer every broker hides the topic in Metadata and the leader's broker of
    each partition (one on each broker) refuses a Produce with
    TOPIC_AUTHORIZATION_FAILED, writing nothing; deleted, within a second every
    broker lists it and takes the Produce again."""
    import asyncio
    import datetime
    import time

    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)
    from kio.schema.errors import ErrorCode
    from kio.schema.metadata.v12 import request as metadata_v12
    from kio.schema.produce.v9 import request as produce_v9
    from kio.static.primitive import i16, i32, i32Timedelta

    from rafka.core.records import RecordInput, encode_batch
    from rafka.protocol.connection import Connection

    admin = cluster.admin()
    admin.create_topic("acl-probe", partitions=3, replication_factor=1)
    brokers = cluster.bootstrap_servers.split(",")
    assert len(brokers) == 3

    async def ask(address, request):
        host, port = address.rsplit(":", 1)
        connection = await Connection.open(host, int(port), request_timeout_ms=5_000)
        try:
            return await connection.request(request)
        finally:
            await connection.close()

    def metadata_codes():
        request = metadata_v12.MetadataRequest(
            topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name="acl-probe"),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        async def every_broker():
            return await asyncio.gather(*(ask(address, request) for address in brokers))
        answers = asyncio.run(every_broker())
        return {address: answer.topics[0].error_code for address, answer in zip(brokers, answers)}, answers[0]

    def produce_codes(leaders):
        """Each partition's Produce at its leader's broker: {partition: error code}."""
        async def one(partition, address):
            request = produce_v9.ProduceRequest(
                transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
                topic_data=(produce_v9.TopicProduceData(name="acl-probe", partition_data=(
                    produce_v9.PartitionProduceData(index=i32(partition),
                                                    records=encode_batch([RecordInput(b"v", None, 0)])),)),))
            answer = await ask(address, request)
            return answer.responses[0].partition_responses[0].error_code
        async def every_partition():
            return await asyncio.gather(*(one(p, address) for p, address in sorted(leaders.items())))
        codes = asyncio.run(every_partition())
        return dict(zip(sorted(leaders), codes))

    def log_ends():
        tps = [("acl-probe", p) for p in range(3)]
        return admin.end_offsets(tps)

    codes, described = wait_until(lambda: (lambda found: found if set(found[0].values()) == {ErrorCode.none}
                                           else None)(metadata_codes()), timeout_s=TIMEOUT_S,
                                  what="acl-probe listed by every broker")
    addresses = {b.node_id: f"{b.host}:{b.port}" for b in described.brokers}
    leaders = {p.partition_index: addresses[p.leader_id] for p in described.topics[0].partitions}
    assert len(set(leaders.values())) == 3, "one partition led on each broker"
    assert produce_codes(leaders) == {0: ErrorCode.none, 1: ErrorCode.none, 2: ErrorCode.none}

    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    deny = AclBinding(ResourceType.TOPIC, "acl-probe", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                      AclOperation.ALL, AclPermissionType.DENY)
    try:
        (created,) = client.create_acls([deny], request_timeout=TIMEOUT_S).values()
        created.result(TIMEOUT_S)
        answered_s = time.monotonic()
        wait_until(lambda: set(metadata_codes()[0].values()) == {ErrorCode.topic_authorization_failed},
                   timeout_s=1.0, what="every broker hiding acl-probe")
        ends = log_ends()
        assert produce_codes(leaders) == {p: ErrorCode.topic_authorization_failed for p in range(3)}
        print(f"denied everywhere {time.monotonic() - answered_s:.3f} s after the answer")
        assert log_ends() == ends
    finally:
        (deleted,) = client.delete_acls([AclBindingFilter(
            ResourceType.TOPIC, "acl-probe", ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
            AclPermissionType.ANY)], request_timeout=TIMEOUT_S).values()
        assert deleted.result(TIMEOUT_S) == [deny]
    answered_s = time.monotonic()
    wait_until(lambda: set(metadata_codes()[0].values()) == {ErrorCode.none}, timeout_s=1.0,
               what="every broker listing acl-probe again")
    assert produce_codes(leaders) == {0: ErrorCode.none, 1: ErrorCode.none, 2: ErrorCode.none}
    print(f"allowed everywhere {time.monotonic() - answered_s:.3f} s after the answer")
    admin.delete_topic("acl-probe")


def test_request_percentage__rafka_configs_through_a_broker__every_broker_throttles_that_client_only(cluster):
    """`rafka configs` gives client id `chatty` a request_percentage no request
    fits in (0.001: 10 us a second); each broker then answers its Metadata with a
    throttle time of the 1 s quota window (the bound of Kafka's request-time
    throttle), another client's with none; the quota deleted, none for chatty."""
    import asyncio
    import types

    from kio.schema.metadata.v12 import request as metadata_v12

    from rafka.cli_configs import cmd_configs
    from rafka.protocol.connection import Connection

    admin = cluster.admin()

    def configs(**change):
        args = types.SimpleNamespace(**{"alter": True, "describe": False, "entities": [["clients", "chatty", True]],
                                        "add_config": None, "delete_config": None, **change})
        assert cmd_configs(admin, args, out=lambda line: None) == 0

    metadata = metadata_v12.MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                            include_topic_authorized_operations=False)

    def throttle_s_by_broker(client_id):
        async def ask(address):
            host, port = address.rsplit(":", 1)
            connection = await Connection.open(host, int(port), client_id=client_id, request_timeout_ms=5_000)
            try:
                return (await connection.request(metadata)).throttle_time.total_seconds()
            finally:
                await connection.close()

        async def every_broker():
            return await asyncio.gather(*(ask(address) for address in cluster.bootstrap_servers.split(",")))
        return asyncio.run(every_broker())

    configs(add_config="request_percentage=0.001")
    try:
        assert throttle_s_by_broker("chatty") == [1.0, 1.0, 1.0]
        assert throttle_s_by_broker("quiet") == [0, 0, 0]
    finally:
        configs(delete_config="request_percentage")
    assert throttle_s_by_broker("chatty") == [0, 0, 0]


def test_describe_quorum__kafka_python_through_a_broker__the_controller_leads_the_brokers_observe(cluster):
    """kafka-metadata-quorum.sh's request, from kafka-python through a broker (which
    relays it to the controller, as Kafka's brokers forward it), told as a combined
    mode Kafka cluster: the voter and leader is broker 0, the controller Metadata
    names, at the controller epoch, with the controller's node as its CONTROLLER
    listener; the high watermark is the metadata log's end; brokers 1 and 2
    observe it, each at most that far, each seen by the controller's last round."""
    import time

    import ray
    from kafka.admin import KafkaAdminClient
    image = ray.get(cluster.controller.cluster_image.remote())
    epoch = ray.get(cluster.controller.metadata_snapshot.remote())["controller_epoch"]
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        asked_ms = time.time() * 1000
        quorum = client.describe_metadata_quorum()
        named_controller = client.describe_cluster()["controller_id"]
    finally:
        client.close()
    (topic,) = quorum["topics"]
    (partition,) = topic["partitions"]
    assert (topic["topic_name"], partition["error"], partition["leader_id"], partition["leader_epoch"]) == (
        "__cluster_metadata", None, named_controller, epoch)
    assert named_controller == 0
    high_watermark = partition["high_watermark"]
    assert high_watermark >= image.version > 0
    (voter,) = partition["current_voters"]
    assert (voter["replica_id"], voter["log_end_offset"]) == (0, high_watermark)
    observers = {o["replica_id"]: o for o in partition["observers"]}
    assert sorted(observers) == [1, 2]
    assert all(0 < o["log_end_offset"] <= high_watermark
               and asked_ms - 60_000 < o["last_fetch_timestamp"] <= asked_ms + 5_000
               and o["last_caught_up_timestamp"] <= o["last_fetch_timestamp"] for o in observers.values()), observers
    controller = image.nodes[image.controller_node]
    assert quorum["nodes"] == [{"node_id": 0, "listeners": [
        {"name": "CONTROLLER", "host": controller.host, "port": controller.port}]}]


def test_kafka_python_update_features__through_a_broker__group_version_0_turns_kip848_off_on_every_broker(cluster):
    """kafka-features.sh's requests from kafka-python through a broker (which relays
    UpdateFeatures to the controller): `group.version` 0 is answered once every node
    has the new image, so every broker then answers a KIP-848 heartbeat
    UNSUPPORTED_VERSION, and describes no finalized group.version; 1 turns it back
    on (the coordinator's broker answers the member, the others NOT_COORDINATOR)."""
    import asyncio
    import datetime

    from kafka.admin import KafkaAdminClient, UpdateFeatureType
    from kio.schema.consumer_group_heartbeat.v0 import request as heartbeat_v0
    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i32, i32Timedelta

    from rafka.protocol.connection import Connection

    def heartbeat_codes():
        async def ask(host, port):
            connection = await Connection.open(host, int(port))
            try:
                answer = await connection.request(heartbeat_v0.ConsumerGroupHeartbeatRequest(
                    group_id="features-g", member_id="", member_epoch=i32(0),
                    rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                    subscribed_topic_names=("features-t",), server_assignor=None, topic_partitions=()))
                if answer.error_code == ErrorCode.none:   # leave at once: the group is left empty
                    await connection.request(heartbeat_v0.ConsumerGroupHeartbeatRequest(
                        group_id="features-g", member_id=answer.member_id, member_epoch=i32(-1),
                        topic_partitions=None))
                return answer.error_code
            finally:
                await connection.close()
        return sorted(asyncio.run(ask(*address.split(":"))) for address in cluster.bootstrap_servers.split(","))

    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        assert client.describe_features()["group.version"]["finalized"] == (1, 1)
        assert heartbeat_codes() == [ErrorCode.none, ErrorCode.not_coordinator, ErrorCode.not_coordinator]
        try:
            assert client.update_features({"group.version": (UpdateFeatureType.SAFE_DOWNGRADE, 0)}) == {
                "group.version": "OK"}
            assert heartbeat_codes() == [ErrorCode.unsupported_version] * 3
            assert "finalized" not in client.describe_features()["group.version"]
        finally:   # the cluster is shared: back on whatever happened
            enabled_again = client.update_features({"group.version": 1})
        assert enabled_again == {"group.version": "OK"}
        assert heartbeat_codes() == [ErrorCode.none, ErrorCode.not_coordinator, ErrorCode.not_coordinator]
    finally:
        client.close()
