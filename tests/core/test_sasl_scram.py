"""SASL/SCRAM: the exchange itself (core.scram, against RFC 7677's example), and a
listener that asks for it (protocol.sasl on the in-process node) as clients nobody
here wrote see it: confluent-kafka and kafka-python log in and work; no
credentials, a wrong password and a deleted user are refused with Kafka's error
and nothing is written."""

import asyncio
import base64

import pytest

from rafka.core.errors import NetworkException, SaslAuthenticationFailed
from rafka.core.scram import ScramClient, ScramCredential, ScramServer, make_credential
from rafka.protocol.connection import Connection
from rafka.protocol.sasl import SaslListener
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.core


# --- the exchange ---------------------------------------------------------------------

def test_scram_sha_256__rfc_7677_example_proof_and_server_signature():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = make_credential("SCRAM-SHA-256", "pencil", salt=salt, iterations=4096)
    server = ScramServer("SCRAM-SHA-256", {"user": credential}.get, nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=lambda: "rOprNGfwEbeRWgbNEkqO")
    server_first = server.respond(client.first_message())
    assert server_first == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    client_final = client.final_message(server_first)
    assert client_final.endswith(b",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    server_final = server.respond(client_final)
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    client.check_server_final(server_final)
    assert server.authenticated and server.user == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram__wrong_password_and_unknown_user_are_refused_alike(mechanism):
    users = {"alice": make_credential(mechanism, "right")}
    messages = []
    for user, password in (("alice", "wrong"), ("mallory", "right")):
        server = ScramServer(mechanism, users.get)
        client = ScramClient(mechanism, user, password)
        with pytest.raises(SaslAuthenticationFailed) as refused:
            server.respond(client.final_message(server.respond(client.first_message()))
                           if user in users else client.first_message())
        messages.append(str(refused.value))
        assert not server.authenticated
    assert messages[0] == messages[1]   # nothing says which users exist


def test_scram__a_replayed_or_altered_final_message_is_refused():
    credential = make_credential("SCRAM-SHA-256", "pw")
    client = ScramClient("SCRAM-SHA-256", "u", "pw")
    first = ScramServer("SCRAM-SHA-256", {"u": credential}.get)
    final = client.final_message(first.respond(client.first_message()))
    again = ScramServer("SCRAM-SHA-256", {"u": credential}.get)   # a new exchange: a new server nonce
    again.respond(client.first_message())
    with pytest.raises(SaslAuthenticationFailed):
        again.respond(final)
    with pytest.raises(SaslAuthenticationFailed):
        first.respond(final.replace(b"c=biws", b"c=eSws"))


def test_scram__a_client_refuses_a_server_that_does_not_know_the_password():
    impostor = ScramServer("SCRAM-SHA-256", lambda user: make_credential("SCRAM-SHA-256", "other"))
    client = ScramClient("SCRAM-SHA-256", "u", "pw")
    with pytest.raises(SaslAuthenticationFailed):
        impostor.respond(client.final_message(impostor.respond(client.first_message())))


def test_scram__credentials_need_4096_iterations_and_keep_no_password():
    with pytest.raises(ValueError):
        make_credential("SCRAM-SHA-256", "pw", iterations=1000)
    with pytest.raises(ValueError):
        make_credential("SCRAM-MD5", "pw")
    credential = make_credential("SCRAM-SHA-512", "pw")
    assert ScramCredential.from_dict(credential.to_dict()) == credential
    assert b"pw" not in repr(credential).encode()


# --- a listener that asks for SCRAM -------------------------------------------------

class Users:
    """The node's user store (the controller's records, later)."""

    def __init__(self) -> None:
        self.credentials: dict[tuple[str, str], ScramCredential] = {}

    def add(self, user: str, password: str) -> None:
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            self.credentials[user, mechanism] = make_credential(mechanism, password)

    def delete(self, user: str) -> None:
        self.credentials = {key: c for key, c in self.credentials.items() if key[0] != user}

    def credential_for(self, user: str, mechanism: str):
        return self.credentials.get((user, mechanism))


@pytest.fixture()
def secured(tmp_path):
    users = Users()
    users.add("alice", "alice-secret")
    with ProtocolNode(tmp_path, {"orders": 1}, sasl=SaslListener(users.credential_for)) as node:
        yield node, users


def written(node) -> int:
    return node.endpoints[("orders", 0)].replica.log.log_end_offset


def confluent_produce(node, extra: dict, timeout_s: float = 10.0):
    """Produce one record; (delivery error or None, errors the client reported)."""
    from confluent_kafka import Producer
    reported, delivered = [], []
    producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "message.timeout.ms": int(timeout_s * 1000),
                         "error_cb": reported.append, **extra})
    producer.produce("orders", b"v", partition=0, on_delivery=lambda error, message: delivered.append(error))
    producer.flush(timeout_s + 5)
    return (delivered[0] if delivered else "undelivered"), reported


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_kafka_with_scram__produces_and_consumes(secured, mechanism):
    from confluent_kafka import Consumer, TopicPartition
    node, _ = secured
    login = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
             "sasl.username": "alice", "sasl.password": "alice-secret"}
    error, _ = confluent_produce(node, login)
    assert error is None and written(node) == 1
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "g", "enable.auto.commit": False, **login})
    consumer.assign([TopicPartition("orders", 0, 0)])
    message = consumer.poll(15)
    consumer.close()
    assert message is not None and message.error() is None and message.value() == b"v"


def test_confluent_kafka__wrong_password_is_refused_with_kafkas_error_and_nothing_written(secured):
    node, _ = secured
    error, reported = confluent_produce(node, {"security.protocol": "SASL_PLAINTEXT",
                                               "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
                                               "sasl.password": "guess"}, timeout_s=3)
    assert error is not None
    assert any("Authentication failed" in str(e) for e in reported), reported
    assert written(node) == 0


def test_confluent_kafka__a_deleted_user_can_no_longer_log_in(secured):
    node, users = secured
    login = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.username": "alice", "sasl.password": "alice-secret"}
    assert confluent_produce(node, login)[0] is None
    users.delete("alice")
    error, reported = confluent_produce(node, login, timeout_s=3)
    assert error is not None and any("Authentication failed" in str(e) for e in reported), reported
    assert written(node) == 1


def test_no_credentials__the_listener_closes_a_connection_that_skips_sasl_and_nothing_is_written(secured):
    node, _ = secured
    error, _ = confluent_produce(node, {}, timeout_s=3)   # PLAINTEXT: straight to Metadata, Produce
    assert error is not None and written(node) == 0

    async def metadata_without_login():
        from rafka.protocol import cluster_requests
        connection = await Connection.open("127.0.0.1", node.port, request_timeout_ms=5_000)
        with pytest.raises(NetworkException):
            await connection.request(cluster_requests.metadata_request(None))
    asyncio.run(metadata_without_login())


def test_kafka_python_with_scram__produces(secured):
    from kafka import KafkaProducer
    node, _ = secured
    producer = KafkaProducer(bootstrap_servers=node.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                             sasl_plain_password="alice-secret", acks="all")
    producer.send("orders", b"kp", partition=0).get(timeout=15)
    producer.close()
    assert written(node) == 1


def rafka_produce_and_consume(node, options: dict, value: bytes) -> None:
    """rafka's Producer writes `value` at offset 0 and its Consumer reads it back."""
    from rafka.client.consumer import Consumer
    from rafka.client.producer import Producer
    from rafka.core.structs import TopicPartition
    with Producer(node.bootstrap, **options) as producer:
        assert producer.send("orders", value, partition=0).result(timeout=15).offset == 0
    consumer = Consumer(node.bootstrap, auto_offset_reset="earliest", **options)
    consumer.assign([TopicPartition("orders", 0)])
    records = []
    while not records:
        records = consumer.poll(timeout=10)
    consumer.close()
    assert [r.value for r in records] == [value]


def test_rafka_clients_with_scram__produce_and_consume(secured):
    node, _ = secured
    rafka_produce_and_consume(node, dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                                         sasl_plain_username="alice", sasl_plain_password="alice-secret"), b"mine")


def test_rafka_producer_with_a_wrong_password__refused_at_once_and_nothing_written(secured):
    from rafka.client.producer import Producer
    node, _ = secured
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
        with Producer(node.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                      sasl_plain_username="alice", sasl_plain_password="guess", max_block_ms=20_000) as producer:
            producer.send("orders", b"x", partition=0).result(timeout=15)
    assert written(node) == 0


@pytest.mark.parametrize("options", [
    dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_plain_username="a", sasl_plain_password="b"),
    dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256"),
    dict(sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="a", sasl_plain_password="b"),
])
def test_client_security_options__bad_ones_are_refused_before_anything_starts(options):
    from rafka.client.producer import Producer
    with pytest.raises(ValueError):
        Producer("127.0.0.1:9", **options)


# --- a listener where the login is optional (an open rafka cluster) ------------------

@pytest.fixture()
def open_listener(tmp_path):
    users = Users()
    users.add("alice", "alice-secret")
    with ProtocolNode(tmp_path, {"orders": 1},
                      sasl=SaslListener(users.credential_for, required=lambda: False)) as node:
        yield node


def test_optional_login__clients_without_sasl_are_served_and_those_that_log_in_too(open_listener):
    node = open_listener
    assert confluent_produce(node, {})[0] is None   # PLAINTEXT, as on a listener without SASL
    login = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.username": "alice", "sasl.password": "alice-secret"}
    assert confluent_produce(node, login)[0] is None
    assert written(node) == 2


def test_optional_login__a_login_begun_must_succeed(open_listener):
    from rafka.client.producer import Producer
    node = open_listener
    with pytest.raises(SaslAuthenticationFailed):
        with Producer(node.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                      sasl_plain_username="alice", sasl_plain_password="guess", max_block_ms=20_000) as producer:
            producer.send("orders", b"x", partition=0).result(timeout=15)
    assert written(node) == 0


def test_scram_matches__a_credential_and_the_password_it_was_made_from():
    from rafka.core.scram import matches
    credential = make_credential("SCRAM-SHA-512", "s3cret")
    assert matches(credential, "s3cret") and not matches(credential, "s3cret ")
