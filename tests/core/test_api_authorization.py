"""KAFKA_API_AUTHORIZATION: every API the node serves has Kafka's checks named,
and the waivers (`unless`) decide as KafkaApis does."""

import pytest

from rafka.core.acl import AclOperation as Op, ResourceType as Type
from rafka.core.api_authorization import KAFKA_API_AUTHORIZATION, Scope, permits
from rafka.core.cluster_image import EMPTY_IMAGE
from rafka.core.errors import (ClusterAuthorizationFailed, GroupAuthorizationFailed, TopicAuthorizationFailed,
                               TransactionalIdAuthorizationFailed)
from rafka.protocol.node_table import node_table

pytestmark = pytest.mark.core


async def _no_producer_ids():
    return 0


def test_table__every_served_api_has_an_entry():
    served = {r.api_key for r in node_table(image=lambda: EMPTY_IMAGE,
                                            allocate_producer_id=_no_producer_ids).supported_api_versions}
    assert served - set(KAFKA_API_AUTHORIZATION) == set()


def test_table__only_apis_before_authentication_check_nothing():
    unchecked = {a.name for a in KAFKA_API_AUTHORIZATION.values() if not a.checks}
    assert unchecked == {"ApiVersions", "SaslHandshake", "SaslAuthenticate"}


def test_table__errors_follow_the_resource_type():
    by_type = {Type.TOPIC: TopicAuthorizationFailed, Type.GROUP: GroupAuthorizationFailed,
               Type.CLUSTER: ClusterAuthorizationFailed, Type.TRANSACTIONAL_ID: TransactionalIdAuthorizationFailed}
    for api in KAFKA_API_AUTHORIZATION.values():
        for check in api.checks:
            if check.scope == Scope.FILTER:
                assert check.error is None, api.name
            elif (api.name, check.resource_type) != ("Fetch", Type.CLUSTER):   # a follower's: per partition
                assert check.error is by_type[check.resource_type], api.name


@pytest.mark.parametrize("api_key, operation, resource_type, error", [
    (0, Op.WRITE, Type.TOPIC, TopicAuthorizationFailed),
    (0, Op.WRITE, Type.TRANSACTIONAL_ID, TransactionalIdAuthorizationFailed),
    (1, Op.READ, Type.TOPIC, TopicAuthorizationFailed),
    (1, Op.CLUSTER_ACTION, Type.CLUSTER, TopicAuthorizationFailed),
    (3, Op.DESCRIBE, Type.TOPIC, TopicAuthorizationFailed),
    (8, Op.READ, Type.GROUP, GroupAuthorizationFailed),
    (8, Op.READ, Type.TOPIC, TopicAuthorizationFailed),
    (11, Op.READ, Type.GROUP, GroupAuthorizationFailed),
    (14, Op.READ, Type.GROUP, GroupAuthorizationFailed),
    (12, Op.READ, Type.GROUP, GroupAuthorizationFailed),
    (13, Op.READ, Type.GROUP, GroupAuthorizationFailed),
    (19, Op.CREATE, Type.TOPIC, TopicAuthorizationFailed),
    (20, Op.DELETE, Type.TOPIC, TopicAuthorizationFailed),
    (22, Op.WRITE, Type.TRANSACTIONAL_ID, TransactionalIdAuthorizationFailed),
    (22, Op.IDEMPOTENT_WRITE, Type.CLUSTER, ClusterAuthorizationFailed),
    (29, Op.DESCRIBE, Type.CLUSTER, ClusterAuthorizationFailed),
    (30, Op.ALTER, Type.CLUSTER, ClusterAuthorizationFailed),
    (31, Op.ALTER, Type.CLUSTER, ClusterAuthorizationFailed),
    (32, Op.DESCRIBE_CONFIGS, Type.TOPIC, TopicAuthorizationFailed),
    (44, Op.ALTER_CONFIGS, Type.TOPIC, TopicAuthorizationFailed),
    (42, Op.DELETE, Type.GROUP, GroupAuthorizationFailed),
])
def test_table__kafkas_checks(api_key, operation, resource_type, error):
    checks = KAFKA_API_AUTHORIZATION[api_key].checks
    assert any((c.operation, c.resource_type, c.error) == (operation, resource_type, error) for c in checks)


def allowing(*granted):
    """An authorizer stand-in that allows exactly `granted` (operation, type, name) triples."""
    return lambda operation, resource_type, name: (operation, resource_type, name) in granted


def test_permits__create_on_the_cluster_waives_create_on_each_topic():
    create = KAFKA_API_AUTHORIZATION[19].checks[0]
    assert permits(create, allowing((Op.CREATE, Type.CLUSTER, "kafka-cluster")), "orders")
    assert permits(create, allowing((Op.CREATE, Type.TOPIC, "orders")), "orders")
    assert not permits(create, allowing((Op.CREATE, Type.TOPIC, "payments")), "orders")


def test_permits__idempotent_write_or_write_on_some_topic():
    idempotent = next(c for c in KAFKA_API_AUTHORIZATION[22].checks if c.resource_type == Type.CLUSTER)
    assert permits(idempotent, allowing((Op.IDEMPOTENT_WRITE, Type.CLUSTER, "kafka-cluster")), "")
    assert permits(idempotent, allowing((Op.WRITE, Type.TOPIC, None)), "")   # by resource type: no name
    assert not permits(idempotent, allowing((Op.READ, Type.TOPIC, None)), "")
