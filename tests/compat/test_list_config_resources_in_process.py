"""ListConfigResources (KIP-1142) judged by kafka-python's KafkaAdminClient
(list_config_resources), on the in-process node (no Ray): at the actors' nodes and
at a broker's edge, which answers it from its own image as Kafka's brokers do.
Kafka's types, order, refusal and UNSUPPORTED_VERSION for a type it does not list."""

import asyncio

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.list_config_resources.v1 import request as v1
from kio.static.primitive import i8

from rafka.core.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from rafka.protocol.connection import Connection
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.compat
TIMEOUT_S = 20


@pytest.fixture(params=[False, True], ids=["actor-nodes", "broker-edge"])
def node(tmp_path, request):
    with ProtocolNode(tmp_path, {"orders": 2, "facts": 1}, edge=request.param) as node:
        yield node


@pytest.fixture()
def admin(node):
    with node.kafka_python_admin(TIMEOUT_S) as client:
        yield client


def on_the_wire(node, *types):
    async def ask():
        connection = await Connection.open("127.0.0.1", node.port)
        try:
            return await connection.request(v1.ListConfigResourcesRequest(resource_types=tuple(i8(t) for t in types)))
        finally:
            await connection.close()
    return asyncio.run(ask())


def test_every_type__brokers_as_loggers_and_brokers_and_every_topic_internal_ones_too(node, admin):
    """The brokers are those the node's image registers: broker 0 behind the edge;
    the actors' nodes here stand alone, with none."""
    topics = sorted(node.image().topics)
    assert {"orders", "facts"} <= set(topics) and any(t.startswith("__") for t in topics)
    brokers = {"broker_logger": ["0"], "broker": ["0"]} if node.with_edge else {}
    assert admin.list_config_resources() == {**brokers, "topic": topics}
    assert admin.list_config_resources(["TOPIC"]) == {"topic": topics}
    assert admin.list_config_resources(["GROUP", "CLIENT_METRICS"]) == {}


def test_kafkas_order_whatever_the_requests__each_type_once(node):
    answer = on_the_wire(node, 2, 4, 2, 8)
    assert answer.error_code == ErrorCode.none
    brokers = [(8, "0"), (4, "0")] if node.with_edge else []
    assert [(r.resource_type, r.resource_name) for r in answer.config_resources] == brokers + [
        (2, name) for name in sorted(node.image().topics)]


def test_a_type_it_does_not_list__unsupported_version_and_nothing(node):
    for types in ((1,), (0,), (2, 64)):
        answer = on_the_wire(node, *types)
        assert (answer.error_code, answer.config_resources) == (ErrorCode.unsupported_version, ()), types


def test_no_describe_configs_on_the_cluster__cluster_authorization_failed_and_nothing(node):
    node.call(node.create_acls([AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL,
                                           "User:someone-else", "*", AclOperation.DESCRIBE_CONFIGS,
                                           AclPermissionType.ALLOW)]))
    answer = on_the_wire(node, 2)
    assert (answer.error_code, answer.config_resources) == (ErrorCode.cluster_authorization_failed, ())
