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


def test_the_wire__mechanism_types_refusals_and_bounds_as_kafka(node):
    """Raw requests (kio), as no client library sends them: mechanism types 0, 3
    and -1 are UNSUPPORTED_SASL_MECHANISM; a refused Describe of every user
    (null) answers its error at the top with no results; more than 10,000
    alterations in one request are INVALID_REQUEST for every user, nothing
    changed."""
    import asyncio
    from kio.schema.alter_user_scram_credentials.v0 import request as alter_v0
    from kio.schema.describe_user_scram_credentials.v0 import request as describe_v0
    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i8, i32
    from rafka.protocol import scram_requests
    from rafka.protocol.connection import Connection, SaslLogin

    def ask(request, login):
        async def run():
            connection = await Connection.open("127.0.0.1", node.port, sasl=login)
            try:
                return await connection.request(request)
            finally:
                await connection.close()
        return asyncio.run(run())
    operator = SaslLogin(CLUSTER_MECHANISM, CLUSTER_USER, node.cluster_login.password)
    unknown = ask(alter_v0.AlterUserScramCredentialsRequest(
        deletions=(alter_v0.ScramCredentialDeletion(name="a", mechanism=i8(0)),),
        upsertions=tuple(alter_v0.ScramCredentialUpsertion(name=user, mechanism=i8(number), iterations=i32(4096),
                                                           salt=b"s", salted_password=b"p")
                         for user, number in (("b", 3), ("c", -1)))), operator)
    assert {(r.user, r.error_code) for r in unknown.results} == {
        (user, ErrorCode.unsupported_sasl_mechanism) for user in "abc"}
    too_many = ask(alter_v0.AlterUserScramCredentialsRequest(deletions=(), upsertions=tuple(
        alter_v0.ScramCredentialUpsertion(name=f"u{n}", mechanism=i8(1), iterations=i32(4096), salt=b"s",
                                          salted_password=b"p") for n in range(10_001))), operator)
    assert len(too_many.results) == 10_001 and {r.error_code for r in too_many.results} == {ErrorCode.invalid_request}
    assert list(node.metadata.scram_credentials) == [(CLUSTER_USER, CLUSTER_MECHANISM)]
    made = ask(scram_requests.alter_request(upsertions=[("eve", "SCRAM-SHA-256", "eve-secret", 4096)]), operator)
    assert scram_requests.alter_answer(made) == {"eve": None}
    eve = SaslLogin("SCRAM-SHA-256", "eve", "eve-secret")   # no binding lets her describe the cluster
    refused = ask(describe_v0.DescribeUserScramCredentialsRequest(users=None), eve)
    assert (refused.error_code, refused.results) == (ErrorCode.cluster_authorization_failed, ())


def test_rafka_admin__refusals_it_can_see_change_nothing__one_request_per_mechanism(node):
    """rafka's Admin (`rafka users`) checks what Kafka would refuse before it sends
    anything, so a refusal leaves no mechanism half-set or half-deleted."""
    from rafka.client.admin import Admin
    from rafka.core.errors import ResourceNotFound, UnacceptableCredential, UnsupportedSaslMechanism
    from rafka.protocol.connection import SaslLogin
    from tests.compat.test_acl_clients_must_show import _Operator
    admin = Admin(_Operator(SaslLogin(CLUSTER_MECHANISM, CLUSTER_USER, node.cluster_login.password)),
                  bootstrap_servers=node.bootstrap, default_api_timeout_ms=TIMEOUT_S * 1000)
    with pytest.raises(UnacceptableCredential, match="Too many iterations"):
        admin.upsert_user("alice", "pw", iterations=16385)
    with pytest.raises(UnsupportedSaslMechanism):
        admin.upsert_user("alice", "pw", mechanisms=["SCRAM-SHA-256", "SCRAM-MD5"])
    assert admin.list_users() == {}
    admin.upsert_user("alice", "pw", mechanisms=["SCRAM-SHA-256", "SCRAM-SHA-512"])
    admin.delete_user("alice", ["SCRAM-SHA-512"])
    with pytest.raises(ResourceNotFound):
        admin.delete_user("alice", ["SCRAM-SHA-256", "SCRAM-SHA-512"])   # one not held: neither deleted
    assert admin.list_users() == {"alice": ["SCRAM-SHA-256"]}
    admin.delete_user("alice")
    assert admin.list_users() == {}
    with pytest.raises(ResourceNotFound):
        admin.delete_user("alice")
