"""Issue 30's scenario with clients nobody here wrote, on the in-process node with
SASL required, clients at a broker's node (protocol.edge) as in a cluster: alice
may produce to `orders` and read it in group `billing`, nothing else; bob may only
read it. Every forbidden request gets Kafka's error code and changes nothing,
every allowed one works, Metadata lists the granted topics only, and bindings
added and removed with `rafka acls` (over the wire, rafka's Admin logged in as a
super user) take effect at once."""

import pytest

from rafka.cli import build_parser
from rafka.cli_acls import cmd_acls
from rafka.client.admin import Admin
from rafka.protocol.connection import SaslLogin
from rafka.protocol.sasl import SaslListener
from tests.core.protocol_node import ProtocolNode
from tests.core.test_sasl_scram import Users

pytestmark = pytest.mark.compat
TIMEOUT_S = 20


class _Operator:
    """The control plane an Admin is handed: here only its login (a super user)."""

    def __init__(self, login: SaslLogin) -> None:
        async def log_in():
            return login
        self.login = log_in

    def call(self, method, *args):
        raise AssertionError(f"rafka acls goes over the wire, not to {method}")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    users = Users()
    for user in ("alice", "bob", "admin"):
        users.add(user, f"{user}-secret")
    with ProtocolNode(tmp_path_factory.mktemp("must-show"), {"orders": 1, "secret": 1}, edge=True,
                      sasl=SaslListener(users.credential_for), require_sasl=True,
                      super_users=frozenset({"User:admin"})) as node:
        node.admin = Admin(_Operator(SaslLogin("SCRAM-SHA-256", "admin", "admin-secret")),
                           bootstrap_servers=node.bootstrap, default_api_timeout_ms=TIMEOUT_S * 1000)
        for line in ("--add --allow-principal User:alice --operation Write --operation Read --topic orders",
                     "--add --allow-principal User:alice --allow-principal User:bob --operation Read --group billing",
                     "--add --allow-principal User:bob --operation Read --topic orders"):
            assert acls(node, line) == 0
        yield node


def acls(node, line: str, out=None) -> int:
    printed = []
    code = cmd_acls(node.admin, build_parser().parse_args(["acls", *line.split()]), out=printed.append)
    if out is not None:
        out.extend(printed)
    return code


def confluent(node, user, **config):
    return {"bootstrap.servers": node.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": f"{user}-secret", **config}


def log_end(node, topic):
    return node.endpoints[(topic, 0)].replica.log.log_end_offset


def produce_error(node, user, topic, **config):
    """The delivery report's error of one record (None: delivered)."""
    from confluent_kafka import Producer
    producer = Producer(confluent(node, user, **{"message.timeout.ms": 10_000, **config}))
    reports = []
    producer.produce(topic, b"v", on_delivery=lambda error, message: reports.append(error))
    producer.flush(TIMEOUT_S)
    assert len(reports) == 1
    return reports[0]


def consume(node, user, group, topic, *, commit=True):
    """(the values read, the first error) of a consumer in `group` reading `topic`."""
    from confluent_kafka import Consumer
    consumer = Consumer(confluent(node, user, **{"group.id": group, "auto.offset.reset": "earliest",
                                                 "enable.auto.commit": False}))
    values, error = [], None
    try:
        consumer.subscribe([topic])
        for _ in range(40):
            message = consumer.poll(0.5)
            if message is None:
                if values:
                    break
                continue
            if message.error():
                error = message.error()
                break
            values.append(message.value())
        if values and commit:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values, error


# --- confluent-kafka (librdkafka) -----------------------------------------------------------

def test_alice__produces_to_orders_and_reads_it_in_billing(node):
    from confluent_kafka import TopicPartition
    before = log_end(node, "orders")
    assert produce_error(node, "alice", "orders") is None
    assert log_end(node, "orders") == before + 1
    values, error = consume(node, "alice", "billing", "orders")
    assert error is None and values
    committed = node.call(node.coordinator.fetch_offsets("billing"))
    assert committed[("orders", 0)][0] == log_end(node, "orders")
    del TopicPartition


def test_forbidden_produce__topic_authorization_failed__nothing_written(node):
    from confluent_kafka import KafkaError
    secret, orders = log_end(node, "secret"), log_end(node, "orders")
    assert produce_error(node, "alice", "secret").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(node, "bob", "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert (log_end(node, "secret"), log_end(node, "orders")) == (secret, orders)


def test_forbidden_fetch_join_and_commit__kafkas_codes__no_offsets(node):
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
    values, error = consume(node, "alice", "billing", "secret")
    assert not values and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    values, error = consume(node, "alice", "other", "orders")
    assert not values and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    # bob may find the coordinator of `audit` (DESCRIBE), not commit in it (READ)
    assert acls(node, "--add --allow-principal User:bob --operation Describe --group audit") == 0
    consumer = Consumer(confluent(node, "bob", **{"group.id": "audit"}))
    try:
        with pytest.raises(KafkaException) as refused:
            consumer.commit(offsets=[TopicPartition("orders", 0, 1)], asynchronous=False)
        assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()
    groups = {g["group"] for g in node.call(node.coordinator.list_groups())}
    assert "other" not in groups and "audit" not in groups


def test_forbidden_admin__create_delete_describe_configs__refused_and_nothing_changes(node):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
    admin = AdminClient(confluent(node, "alice"))
    (created,) = admin.create_topics([NewTopic("invoices", 1, 1)], request_timeout=TIMEOUT_S).values()
    with pytest.raises(KafkaException) as refused:
        created.result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    (deleted,) = admin.delete_topics(["orders"], request_timeout=TIMEOUT_S).values()
    with pytest.raises(KafkaException) as refused:
        deleted.result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    (described,) = admin.describe_configs([ConfigResource("topic", "secret")], request_timeout=TIMEOUT_S).values()
    with pytest.raises(KafkaException) as refused:
        described.result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert set(node.metadata.topics) >= {"orders", "secret"} and "invoices" not in node.metadata.topics


def test_forbidden_list_offsets_and_transactional_id(node):
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
    consumer = Consumer(confluent(node, "bob", **{"group.id": "billing"}))
    try:
        with pytest.raises(KafkaException) as refused:
            consumer.get_watermark_offsets(TopicPartition("secret", 0), timeout=TIMEOUT_S)
        # librdkafka asks Metadata first, which refuses the topic (TOPIC_AUTHORIZATION_FAILED,
        # no partitions): it never sends the ListOffsets and says the partition is unknown
        # (the ListOffsets refusal itself: tests/core/test_protocol_authorization.py)
        assert refused.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
        low, high = consumer.get_watermark_offsets(TopicPartition("orders", 0), timeout=TIMEOUT_S)
        assert high == log_end(node, "orders")
    finally:
        consumer.close()
    producer = Producer(confluent(node, "alice", **{"transactional.id": "t1"}))
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert node.transactions.records == []


def test_metadata__lists_only_granted_topics(node):
    from confluent_kafka.admin import AdminClient
    assert set(AdminClient(confluent(node, "bob")).list_topics(timeout=TIMEOUT_S).topics) == {"orders"}
    assert {"orders", "secret"} <= set(AdminClient(confluent(node, "admin")).list_topics(timeout=TIMEOUT_S).topics)


def test_rafka_acls__added_and_removed__take_effect_at_once(node):
    from confluent_kafka import KafkaError
    printed = []
    assert acls(node, "--add --allow-principal User:bob --operation Write --topic ord --resource-pattern-type "
                      "prefixed", printed) == 0
    assert "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=ord, patternType=PREFIXED)`: " \
        in printed
    assert produce_error(node, "bob", "orders") is None
    listed = []
    assert acls(node, "--list --topic orders --resource-pattern-type match", listed) == 0
    assert " \t(principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW) " in listed
    assert acls(node, "--add --deny-principal User:bob --operation Write --topic orders") == 0   # deny wins
    assert produce_error(node, "bob", "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert acls(node, "--remove --deny-principal User:bob --operation Write --topic orders") == 0
    assert produce_error(node, "bob", "orders") is None
    assert acls(node, "--remove --topic ord --resource-pattern-type prefixed") == 0
    assert produce_error(node, "bob", "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


# --- kafka-python ---------------------------------------------------------------------------

def kafka_python(node, user, **config):
    return dict(bootstrap_servers=node.bootstrap, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user, sasl_plain_password=f"{user}-secret",
                request_timeout_ms=TIMEOUT_S * 1000, **config)


def test_kafka_python__allowed_works__forbidden_refused(node):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
    producer = KafkaProducer(**kafka_python(node, "alice", retries=0, max_block_ms=10_000))
    try:
        before = log_end(node, "orders")
        producer.send("orders", b"kp").get(TIMEOUT_S)
        assert log_end(node, "orders") == before + 1
    finally:
        producer.close()
    bob = KafkaConsumer(**kafka_python(node, "bob", group_id="billing", auto_offset_reset="earliest",
                                       enable_auto_commit=False, consumer_timeout_ms=5000))
    try:
        assert bob.topics() == {"orders"}
        bob.assign([TopicPartition("orders", 0)])
        assert list(bob)   # reads what alice wrote
        bob.commit()
        # as librdkafka, kafka-python asks Metadata before ListOffsets: the topic is
        # refused there ("Topic secret is not authorized for this client")
        try:
            found = bob.partitions_for_topic("secret")
        except TopicAuthorizationFailedError:
            found = None
        assert not found
    finally:
        bob.close()
    stranger = KafkaConsumer(**kafka_python(node, "bob", group_id="other", enable_auto_commit=False))
    try:
        stranger.assign([TopicPartition("orders", 0)])
        with pytest.raises(GroupAuthorizationFailedError):
            stranger.commit({TopicPartition("orders", 0): __import__("kafka").OffsetAndMetadata(1, "", -1)})
    finally:
        stranger.close()
    admin = KafkaAdminClient(**kafka_python(node, "alice"))
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            admin.create_topics([NewTopic("invoices", 1, 1)])
        with pytest.raises(TopicAuthorizationFailedError):
            admin.delete_topics(["orders"])
    finally:
        admin.close()
    assert "invoices" not in node.metadata.topics and "orders" in node.metadata.topics


def changeable(node):
    """What a refused request could have changed: logs, topics, groups and their
    offsets, transactional state, bindings."""
    groups = node.call(node.coordinator.list_groups())
    return ({k: e.replica.log.log_end_offset for k, e in node.endpoints.items()}, set(node.metadata.topics),
            sorted((g["group"], g["state"]) for g in groups),
            {g["group"]: node.call(node.coordinator.fetch_offsets(g["group"])) for g in groups},
            list(node.transactions.records), set(node.metadata.acl_bindings))


def test_kafka_python__every_forbidden_request__kafkas_error__nothing_changes(node):
    """Produce, fetch, join, list offsets, describe configs, a transactional id and
    a group deletion, each refused with Kafka's code through kafka-python, and
    nothing anywhere changed by them."""
    import kafka.errors as errors
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.protocol.admin import DescribeConfigsRequest
    before = changeable(node)

    def produce(user, topic):
        producer = KafkaProducer(**kafka_python(node, user, retries=0, max_block_ms=10_000))
        try:
            producer.send(topic, b"refused").get(TIMEOUT_S)
        finally:
            producer.close()
    with pytest.raises(errors.TopicAuthorizationFailedError):
        produce("bob", "orders")          # read only
    with pytest.raises(errors.TopicAuthorizationFailedError):
        produce("alice", "secret")        # nothing granted

    def consumer(user, group):
        return KafkaConsumer(**kafka_python(node, user, group_id=group, auto_offset_reset="earliest",
                                            enable_auto_commit=False))
    alice = consumer("alice", "billing")
    try:
        alice.assign([TopicPartition("secret", 0)])
        with pytest.raises(errors.TopicAuthorizationFailedError):   # its committed offset, refused
            alice.poll(TIMEOUT_S * 1000)
    finally:
        alice.close()
    stranger = consumer("alice", "other")
    try:
        stranger.subscribe(["orders"])
        with pytest.raises(errors.GroupAuthorizationFailedError):
            stranger.poll(TIMEOUT_S * 1000)
    finally:
        stranger.close()
    bob = consumer("bob", "billing")
    try:
        with pytest.raises(errors.TopicAuthorizationFailedError):
            bob.end_offsets([TopicPartition("secret", 0)])
        assert bob.end_offsets([TopicPartition("orders", 0)]) == {TopicPartition("orders", 0): log_end(node, "orders")}
    finally:
        bob.close()

    admin = KafkaAdminClient(**kafka_python(node, "bob"))
    try:
        # kafka-python's describe_configs drops each resource's error code: the answer
        # itself, read through its own connection, carries Kafka's
        async def describe_configs():
            return await admin._manager.send(DescribeConfigsRequest(
                resources=[(2, "secret", None), (2, "orders", None)], include_synonyms=False))
        answer = admin._manager.run(describe_configs)
        assert {(r.resource_name, r.error_code, len(r.configs)) for r in answer.results} == {
            ("secret", errors.TopicAuthorizationFailedError.errno, 0),
            ("orders", errors.TopicAuthorizationFailedError.errno, 0)}   # read is not describe_configs
        assert dict(admin.delete_groups(["billing"])) == {"billing": "GroupAuthorizationFailedError"}
    finally:
        admin.close()

    producer = KafkaProducer(**kafka_python(node, "alice", transactional_id="t1", max_block_ms=10_000))
    try:
        with pytest.raises(errors.TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
    finally:
        producer.close()
    assert changeable(node) == before


def test_prefixed_deny__wins_over_a_literal_allow__and_goes_with_its_removal(node):
    """Kafka's rule: any matching DENY refuses, whatever pattern allows; bob's
    literal READ on orders is overridden by a prefixed DENY on `ord`, alice's
    grants untouched; once removed, bob reads again."""
    from confluent_kafka import KafkaError
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import TopicAuthorizationFailedError
    tp = TopicPartition("orders", 0)

    def bob_reads():
        """kafka-python, no group: the records from offset 0 (a refused Fetch raises)."""
        bob = KafkaConsumer(**kafka_python(node, "bob", group_id=None, enable_auto_commit=False))
        try:
            # READ denied leaves the DESCRIBE his literal READ implies (a DENY implies
            # nothing, as Kafka's): he still finds the partition and its offsets
            assert bob.end_offsets([tp]) == {tp: log_end(node, "orders")}
            bob.assign([tp])
            bob.seek(tp, 0)
            return bob.poll(TIMEOUT_S * 1000).get(tp, [])
        finally:
            bob.close()
    assert produce_error(node, "alice", "orders") is None
    assert acls(node, "--add --deny-principal User:bob --operation Read --topic ord --resource-pattern-type "
                      "prefixed") == 0
    try:
        values, error = consume(node, "bob", "billing", "orders", commit=False)
        assert not values and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        with pytest.raises(TopicAuthorizationFailedError):
            bob_reads()
        assert produce_error(node, "alice", "orders") is None   # alice's grants stand
    finally:
        assert acls(node, "--remove --deny-principal User:bob --operation Read --topic ord "
                          "--resource-pattern-type prefixed") == 0
    assert bob_reads()
