"""TLS on the listener (protocol.tls), as clients nobody here wrote see it:
confluent-kafka and kafka-python produce and consume over SSL and SASL_SSL;
rafka's clients too; a client that does not trust the CA, or speaks plaintext to
a TLS listener, gets nothing and writes nothing."""

import pytest

from rafka.core.errors import SslAuthenticationFailed
from rafka.protocol import tls
from rafka.protocol.sasl import SaslListener
from tests.core.protocol_node import ProtocolNode
from tests.core.test_sasl_scram import Users, confluent_produce, rafka_produce_and_consume, written
from tests.tls_files import make_tls_files

pytestmark = pytest.mark.core


@pytest.fixture()
def files(tmp_path):
    return make_tls_files(tmp_path)


@pytest.fixture()
def tls_node(tmp_path, files):
    with ProtocolNode(tmp_path, {"orders": 1}, tls=tls.server_context(files["certfile"], files["keyfile"])) as node:
        yield node


@pytest.fixture()
def sasl_ssl_node(tmp_path, files):
    users = Users()
    users.add("alice", "alice-secret")
    with ProtocolNode(tmp_path, {"orders": 1}, sasl=SaslListener(users.credential_for),
                      tls=tls.server_context(files["certfile"], files["keyfile"])) as node:
        yield node


def test_confluent_kafka_over_ssl__produces_and_consumes(tls_node, files):
    from confluent_kafka import Consumer, TopicPartition
    over_tls = {"security.protocol": "SSL", "ssl.ca.location": files["cafile"]}
    error, reported = confluent_produce(tls_node, over_tls)
    assert error is None and written(tls_node) == 1, reported
    consumer = Consumer({"bootstrap.servers": tls_node.bootstrap, "group.id": "g", "enable.auto.commit": False,
                         **over_tls})
    consumer.assign([TopicPartition("orders", 0, 0)])
    message = consumer.poll(15)
    consumer.close()
    assert message is not None and message.error() is None and message.value() == b"v"


def test_confluent_kafka_over_sasl_ssl__logs_in_and_a_wrong_password_is_refused(sasl_ssl_node, files):
    login = {"security.protocol": "SASL_SSL", "ssl.ca.location": files["cafile"],
             "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice"}
    assert confluent_produce(sasl_ssl_node, {**login, "sasl.password": "alice-secret"})[0] is None
    error, reported = confluent_produce(sasl_ssl_node, {**login, "sasl.password": "guess"}, timeout_s=3)
    assert error is not None and any("Authentication failed" in str(e) for e in reported), reported
    assert written(sasl_ssl_node) == 1


def test_kafka_python_over_ssl__produces(tls_node, files):
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=tls_node.bootstrap, security_protocol="SSL",
                             ssl_cafile=files["cafile"], acks="all")
    producer.send("orders", b"kp", partition=0).get(timeout=15)
    producer.close()
    assert written(tls_node) == 1


def test_rafka_clients_over_sasl_ssl__produce_and_consume(sasl_ssl_node, files):
    rafka_produce_and_consume(sasl_ssl_node, dict(
        security_protocol="SASL_SSL", ssl_cafile=files["cafile"], sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="alice", sasl_plain_password="alice-secret"), b"sealed")


def test_a_client_that_does_not_trust_the_ca__refused_at_once_and_nothing_written(tls_node, tmp_path):
    from rafka.client.producer import Producer
    (tmp_path / "stranger").mkdir()
    stranger = make_tls_files(tmp_path / "stranger")   # another CA
    with pytest.raises(SslAuthenticationFailed, match="TLS handshake"):
        with Producer(tls_node.bootstrap, security_protocol="SSL", ssl_cafile=stranger["cafile"],
                      max_block_ms=20_000) as producer:
            producer.send("orders", b"x", partition=0).result(timeout=15)
    assert written(tls_node) == 0


def test_plaintext_to_a_tls_listener__nothing_written(tls_node):
    error, _ = confluent_produce(tls_node, {}, timeout_s=3)
    assert error is not None and written(tls_node) == 0


@pytest.mark.parametrize("options", [
    dict(security_protocol="PLAINTEXT", ssl_cafile="/tmp/ca.pem"),
    dict(security_protocol="SSL", sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="a", sasl_plain_password="b"),
    dict(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256"),
    dict(security_protocol="TLS"),
])
def test_client_tls_options__bad_ones_are_refused_before_anything_starts(options):
    from rafka.client.producer import Producer
    with pytest.raises(ValueError):
        Producer("127.0.0.1:9", **options)
