"""Users' SCRAM credentials managed as Kafka's tools manage them, judged by
confluent-kafka's AdminClient (librdkafka salts the password itself and sends
AlterUserScramCredentials / DescribeUserScramCredentials), on the in-process node
(no Ray): on the actors' nodes and through a broker's edge, which relays the
alteration to the controller in an envelope, as a cluster does.

The listener logs users in with the credentials of the node's image, as an
actor's does, so a user the AdminClient creates logs in at once and one it
deletes no longer can."""

import time

import pytest

from rafka.core.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from rafka.core.scram import CLUSTER_MECHANISM, CLUSTER_USER
from rafka.protocol.sasl import SaslListener
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.compat
TIMEOUT_S = 20


def sasl(node, mechanism: str, user: str, password: str, **more) -> dict:
    return {"bootstrap.servers": node.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password, **more}


def logs_in(node, mechanism: str, user: str, password: str) -> bool:
    """Whether librdkafka gets metadata as the user (a refused login: its
    authentication error, reported at once, not a timeout)."""
    from confluent_kafka import KafkaError, KafkaException, Producer
    refused = []
    producer = Producer(sasl(node, mechanism, user, password,
                             error_cb=lambda error: refused.append(error.code() == KafkaError._AUTHENTICATION)))
    deadline_s = time.monotonic() + TIMEOUT_S
    while not any(refused) and time.monotonic() < deadline_s:
        try:
            producer.list_topics(timeout=0.2)
            return True
        except KafkaException:
            producer.poll(0)
    return False


def outcome(future):
    """None, or the Kafka error name the future failed with."""
    from confluent_kafka import KafkaException
    try:
        future.result(TIMEOUT_S)
        return None
    except KafkaException as error:
        return error.args[0].name()


@pytest.fixture(params=[False, True], ids=["actor-nodes", "broker-edge"])
def node(tmp_path, request):
    nodes = []
    listener = SaslListener(lambda user, mechanism: nodes[0].image().scram_credential(user, mechanism))
    with ProtocolNode(tmp_path, {"orders": 1}, sasl=listener, require_sasl=True, edge=request.param) as node:
        nodes.append(node)
        yield node


@pytest.fixture()
def operator(node):
    from confluent_kafka.admin import AdminClient
    return AdminClient(sasl(node, CLUSTER_MECHANISM, CLUSTER_USER, node.cluster_login.password))


def test_upsert_describe_log_in_delete__kafkas_rules_and_only_the_salted_password_kept(node, operator):
    from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                       UserScramCredentialUpsertion)
    sha256, sha512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
    made = operator.alter_user_scram_credentials([
        UserScramCredentialUpsertion("alice", ScramCredentialInfo(sha256, 8192), b"alice-secret"),
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(sha512, 4096), b"bob-secret")])
    assert {user: outcome(f) for user, f in made.items()} == {"alice": None, "bob": None}
    assert "alice-secret" not in repr(node.metadata.scram_credentials)
    described = operator.describe_user_scram_credentials().result(TIMEOUT_S)
    assert {user: [(i.mechanism, i.iterations) for i in d.scram_credential_infos]
            for user, d in described.items()} == {"alice": [(sha256, 8192)], "bob": [(sha512, 4096)]}
    assert logs_in(node, "SCRAM-SHA-256", "alice", "alice-secret")
    assert not logs_in(node, "SCRAM-SHA-256", "alice", "wrong")
    assert not logs_in(node, "SCRAM-SHA-512", "alice", "alice-secret")   # no credential for that mechanism

    refused = operator.alter_user_scram_credentials([
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(sha256, 100), b"x"),         # too few iterations
        UserScramCredentialUpsertion("dave", ScramCredentialInfo(sha256, 4096), b"x"),
        UserScramCredentialUpsertion("dave", ScramCredentialInfo(sha512, 4096), b"x"),         # a user twice
        UserScramCredentialDeletion("bob", sha256)])                                             # not held
    assert {user: outcome(f) for user, f in refused.items()} == {
        "carol": "UNACCEPTABLE_CREDENTIAL", "dave": "DUPLICATE_RESOURCE", "bob": "RESOURCE_NOT_FOUND"}
    assert sorted(node.metadata.scram_credentials) == [(CLUSTER_USER, CLUSTER_MECHANISM), ("alice", "SCRAM-SHA-256"),
                                                       ("bob", "SCRAM-SHA-512")]
    assert outcome(operator.describe_user_scram_credentials(["nobody"])["nobody"]) == "RESOURCE_NOT_FOUND"

    deleted = operator.alter_user_scram_credentials([UserScramCredentialDeletion("alice", sha256)])
    assert outcome(deleted["alice"]) is None
    assert not logs_in(node, "SCRAM-SHA-256", "alice", "alice-secret")
    assert list(operator.describe_user_scram_credentials().result(TIMEOUT_S)) == ["bob"]


def test_authorization__alter_and_describe_need_alter_and_describe_on_the_cluster(node, operator):
    """alice (kafka-python's KafkaAdminClient), logged in without a binding, is
    refused CLUSTER_AUTHORIZATION_FAILED and nothing changes; bindings for ALTER
    and DESCRIBE on the cluster let her.

    The refused Describe is asked with kafka-python: librdkafka (2.16, and its
    source today) crashes on any top-level error of a DescribeUserScramCredentials
    answer, Kafka's as much as rafka's (rd_kafka_DescribeUserScramCredentialsResponse_parse
    keeps the error string on its stack, or a static one, and the result frees it)."""
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    from kafka.admin import KafkaAdminClient
    from kafka.admin import UserScramCredentialUpsertion as Upsertion
    from kafka.errors import ClusterAuthorizationFailedError
    upsert = [UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                           b"alice-secret")]
    assert outcome(operator.alter_user_scram_credentials(upsert)["alice"]) is None
    alice = KafkaAdminClient(bootstrap_servers=node.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                             sasl_plain_password="alice-secret", request_timeout_ms=TIMEOUT_S * 1000)
    try:
        eve = [Upsertion("eve", "SCRAM-SHA-256", "eve-secret")]
        refused = alice.alter_user_scram_credentials(eve)
        assert refused == {"eve": "Request User:alice ALTER on the cluster is not authorized."}
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.describe_user_scram_credentials()
        assert ("eve", "SCRAM-SHA-256") not in node.metadata.scram_credentials
        node.call(node.create_acls([AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL,
                                               "User:alice", "*", operation, AclPermissionType.ALLOW)
                                    for operation in (AclOperation.ALTER, AclOperation.DESCRIBE)]))
        assert alice.alter_user_scram_credentials(eve) == {"eve": None}
        assert sorted(alice.describe_user_scram_credentials()) == ["alice", "eve"]
        assert logs_in(node, "SCRAM-SHA-256", "eve", "eve-secret")
    finally:
        alice.close()
