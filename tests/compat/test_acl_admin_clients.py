"""ACLs through admin clients nobody here wrote, on the in-process node (no Ray):
confluent-kafka's and kafka-python's AdminClient create, describe and delete
bindings as against Kafka, at the actors' nodes and through a broker's node
(protocol.edge relays Create/DeleteAcls to the controller's node); and the
principal of a SASL login is the one the ACL APIs authorize."""

import asyncio

import pytest

from rafka.core.acl import AclBindingFilter, ResourceType
from rafka.protocol.connection import Connection, SaslLogin
from rafka.protocol.sasl import SaslListener
from tests.core.protocol_node import ProtocolNode
from tests.core.test_sasl_scram import Users

pytestmark = pytest.mark.compat
TIMEOUT_S = 20


@pytest.fixture(params=[False, True], ids=["actor-nodes", "broker-edge"])
def node(tmp_path, request):
    with ProtocolNode(tmp_path, {"orders": 1}, edge=request.param) as node:
        yield node


def confluent_bindings():
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType as CResourceType)
    return [
        AclBinding(CResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(CResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
        AclBinding(CResourceType.GROUP, "billing", ResourcePatternType.LITERAL, "User:alice", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(CResourceType.TOPIC, "ord", ResourcePatternType.PREFIXED, "User:bob", "*",
                   AclOperation.WRITE, AclPermissionType.DENY),
    ]


def test_confluent_kafka_admin__create_describe_delete_acls(node):
    from confluent_kafka.admin import (AclBindingFilter as CFilter, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType as CResourceType)
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    bindings = confluent_bindings()
    for future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        assert future.result(TIMEOUT_S) is None
    assert len(node.metadata.acl_bindings) == 4

    every = CFilter(CResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                    AclPermissionType.ANY)
    assert set(admin.describe_acls(every, request_timeout=TIMEOUT_S).result(TIMEOUT_S)) == set(bindings)
    applying = CFilter(CResourceType.TOPIC, "orders", ResourcePatternType.MATCH, None, None, AclOperation.ANY,
                       AclPermissionType.ANY)
    assert set(admin.describe_acls(applying, request_timeout=TIMEOUT_S).result(TIMEOUT_S)) == \
        {bindings[0], bindings[1], bindings[3]}

    alices = CFilter(CResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None, AclOperation.ANY,
                     AclPermissionType.ANY)
    (deleted,) = admin.delete_acls([alices], request_timeout=TIMEOUT_S).values()
    assert set(deleted.result(TIMEOUT_S)) == set(bindings[:3])
    assert set(admin.describe_acls(every, request_timeout=TIMEOUT_S).result(TIMEOUT_S)) == {bindings[3]}


def test_kafka_python_admin__create_describe_delete_acls(node):
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePattern, ResourcePatternFilter, ResourceType as KResourceType)
    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        acl = ACL(principal="User:alice", host="*", operation=ACLOperation.READ,
                  permission_type=ACLPermissionType.ALLOW,
                  resource_pattern=ResourcePattern(KResourceType.TOPIC, "ord", ACLResourcePatternType.PREFIXED))
        created = admin.create_acls([acl])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        acl_filter = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                               permission_type=ACLPermissionType.ANY,
                               resource_pattern=ResourcePatternFilter(KResourceType.TOPIC, "orders",
                                                                      ACLResourcePatternType.MATCH))
        described, error = admin.describe_acls(acl_filter)
        assert error.errno == 0
        assert [(a.principal, a.resource_pattern.resource_name, a.resource_pattern.pattern_type)
                for a in described] == [("User:alice", "ord", ACLResourcePatternType.PREFIXED)]
        ((_, matched, _),) = admin.delete_acls([acl_filter])
        assert len(matched) == 1
        assert node.metadata.acl_bindings == set()
    finally:
        admin.close()


# --- the principal of a login ------------------------------------------------------------

def test_sasl_login__the_users_principal_is_the_one_authorized(tmp_path):
    """A binding lets User:admin alter the cluster; alice, logged in, is refused
    CLUSTER_AUTHORIZATION_FAILED by confluent-kafka's AdminClient and nothing
    changes; admin, logged in over rafka's own connection, may."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType as CResourceType)
    users = Users()
    users.add("alice", "alice-secret")
    users.add("admin", "admin-secret")
    with ProtocolNode(tmp_path, {"orders": 1}, sasl=SaslListener(users.credential_for)) as node:
        admin_login = SaslLogin("SCRAM-SHA-256", "admin", "admin-secret")

        async def as_admin(*requests):
            connection = await Connection.open("127.0.0.1", node.port, sasl=admin_login)
            try:
                return [await connection.request(r) for r in requests]
            finally:
                await connection.close()
        node.call(node.create_acls([_cluster_alter("User:admin")]))

        alice = AdminClient({"bootstrap.servers": node.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
                             "sasl.password": "alice-secret"})
        binding = AclBinding(CResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                             AclOperation.ALL, AclPermissionType.ALLOW)
        (future,) = alice.create_acls([binding], request_timeout=TIMEOUT_S).values()
        with pytest.raises(KafkaException) as refused:
            future.result(TIMEOUT_S)
        assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        assert len(node.metadata.acl_bindings) == 1

        (answer,) = asyncio.run(as_admin(_create_request("orders")))
        assert [r.error_code for r in answer.results] == [0]
        assert len(node.metadata.acl_bindings) == 2
        assert len(node.image().acls.matching(AclBindingFilter(resource_type=ResourceType.TOPIC))) == 1


def _cluster_alter(principal):
    from rafka.core.acl import CLUSTER_NAME, AclBinding, AclOperation, AclPermissionType, PatternType
    return AclBinding(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, principal, "*", AclOperation.ALTER,
                      AclPermissionType.ALLOW)


def _create_request(topic):
    from kio.schema.create_acls.v3 import request as create_v3
    from kio.static.primitive import i8
    return create_v3.CreateAclsRequest(creations=(create_v3.AclCreation(
        resource_type=i8(2), resource_name=topic, resource_pattern_type=i8(3), principal="User:alice", host="*",
        operation=i8(3), permission_type=i8(3)),))
