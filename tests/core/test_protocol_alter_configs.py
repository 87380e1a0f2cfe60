"""IncrementalAlterConfigs and AlterConfigs on the wire, through a node's whole
dispatch table, over a stand-in controller that decides with the real
ClusterMetadata handler: the controller's node (its topic_admin_host) and a
node that is not the controller (forwarding, as replica and coordinator nodes
forward by a Ray call). DescribeConfigs on the node follows the change."""

import asyncio

import pytest
from kio.schema.alter_configs.v0 import request as legacy_v0
from kio.schema.alter_configs.v2 import request as legacy_v2
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v0 import request as incremental_v0
from kio.schema.incremental_alter_configs.v1 import request as incremental_v1
from kio.static.primitive import i8

from rafka.protocol.dispatch import Dispatcher
from rafka.protocol.node_table import node_table
from tests.core.test_protocol_dispatch import read_response, request_frame
from tests.core.test_protocol_topic_admin import StandInController

pytestmark = pytest.mark.core
INCREMENTAL, LEGACY, DESCRIBE = 44, 33, 32
TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class AlteringController(StandInController):
    """The controller's alter_topic_config over the real metadata handler: commits
    unless validate_only, as ControllerActor.alter_topic_config."""

    def __init__(self):
        super().__init__()
        self.calls = []

    async def alter_topic_config(self, name, ops, validate_only=False, replace=False):
        self.calls.append((name, list(ops), validate_only, replace))
        records, overrides = self.metadata.handle_alter_topic_config(name, ops, replace=replace)
        if not validate_only:
            self._apply(records)
        return {"name": name, "config": overrides}


def with_topic(name="events", config=None):
    controller = AlteringController()
    asyncio.run(controller.create_topic(name, 1, 3, config))
    return controller


def controller_node(controller):
    return Dispatcher(node_table(image=controller.cluster_image, allocate_producer_id=None,
                                 topic_admin_host=controller))


def forwarding_node(controller):
    """A replica's or coordinator's node: not the controller; it forwards."""
    return Dispatcher(node_table(image=controller.cluster_image, allocate_producer_id=None,
                                 alter_topic_config=controller.alter_topic_config))


def ask(dispatcher, api_key, version, request):
    frame = asyncio.run(dispatcher.dispatch(request_frame(api_key, version, request)))
    return read_response(frame, api_key, version)[1]


def incremental(*resources, validate_only=False, schema=incremental_v1):
    return schema.IncrementalAlterConfigsRequest(resources=tuple(
        schema.AlterConfigsResource(resource_type=i8(kind), resource_name=name, configs=tuple(
            schema.AlterableConfig(name=config, config_operation=i8(op), value=value) for op, config, value in ops))
        for kind, name, ops in resources), validate_only=validate_only)


def legacy(*resources, validate_only=False, schema=legacy_v2):
    return schema.AlterConfigsRequest(resources=tuple(
        schema.AlterConfigsResource(resource_type=i8(kind), resource_name=name, configs=tuple(
            schema.AlterableConfig(name=config, value=value) for config, value in configs))
        for kind, name, configs in resources), validate_only=validate_only)


def described(dispatcher, topic, *names):
    answer = ask(dispatcher, DESCRIBE, 4, describe_v4.DescribeConfigsRequest(resources=(
        describe_v4.DescribeConfigsResource(resource_type=i8(TOPIC), resource_name=topic,
                                            configuration_keys=names or None),),
        include_synonyms=False, include_documentation=False))
    return {c.name: (c.value, c.config_source) for c in answer.results[0].configs}


@pytest.mark.parametrize("node", [controller_node, forwarding_node], ids=["controller", "forwarding"])
def test_incremental_alter_configs__append_then_subtract_compact__describe_follows(node):
    controller = with_topic()
    dispatcher = node(controller)
    answer = ask(dispatcher, INCREMENTAL, 1, incremental((TOPIC, "events", [(APPEND, "cleanup.policy", "compact")])))
    assert [(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in answer.responses] == [
        (TOPIC, "events", ErrorCode.none, None)]
    assert controller.metadata.topic("events").config == {"cleanup.policy": "delete,compact"}
    assert described(dispatcher, "events", "cleanup.policy") == {"cleanup.policy": ("delete,compact", 1)}
    ask(dispatcher, INCREMENTAL, 0, incremental((TOPIC, "events", [(SUBTRACT, "cleanup.policy", "compact,delete")]),
                                                schema=incremental_v0))
    assert described(dispatcher, "events", "cleanup.policy") == {"cleanup.policy": ("", 1)}
    ask(dispatcher, INCREMENTAL, 1, incremental((TOPIC, "events", [(DELETE, "cleanup.policy", None)])))
    assert described(dispatcher, "events", "cleanup.policy") == {"cleanup.policy": ("delete", 5)}


def test_incremental_alter_configs__each_resource_its_own_error__the_others_go_on():
    controller = with_topic()
    answer = ask(controller_node(controller), INCREMENTAL, 1, incremental(
        (TOPIC, "events", [(SET, "retention.ms", "60000")]),
        (TOPIC, "missing", [(SET, "retention.ms", "60000")]),
        (TOPIC, "events-2", [(SET, "retention.ms", "soon")]),
        (TOPIC, "twice", [(SET, "retention.ms", "1")]),
        (TOPIC, "twice", [(SET, "retention.ms", "2")]),
        (TOPIC, "events-3", [(APPEND, "segment.ms", "1")]),
        (BROKER, "0", [(SET, "log.retention.ms", "1")]),
        (BROKER, "", [(DELETE, "log.retention.ms", None)]),
        (BROKER, "one", []),
        (BROKER_LOGGER, "0", [(SET, "kafka", "DEBUG")]),
        (GROUP, "g", [(SET, "consumer.session.timeout.ms", "45000")]),
        (99, "x", [])))
    got = [(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in answer.responses]
    assert got == [
        (TOPIC, "events", ErrorCode.none, None),
        (TOPIC, "missing", ErrorCode.unknown_topic_or_partition, "The topic 'missing' does not exist."),
        (TOPIC, "events-2", ErrorCode.invalid_config,
         "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
        (TOPIC, "twice", ErrorCode.invalid_request, "Each resource must appear at most once."),
        (TOPIC, "twice", ErrorCode.invalid_request, "Each resource must appear at most once."),
        (TOPIC, "events-3", ErrorCode.invalid_config, "Can't APPEND to key segment.ms because its type is not LIST."),
        (BROKER, "0", ErrorCode.invalid_request, "Cannot update these configs dynamically: Set(log.retention.ms)"),
        (BROKER, "", ErrorCode.none, None),
        (BROKER, "one", ErrorCode.invalid_request, "Node id must be an integer, but it is: one"),
        (BROKER_LOGGER, "0", ErrorCode.invalid_request, "Unexpected node id. Expected -1, but received 0"),
        (GROUP, "g", ErrorCode.invalid_request, "rafka does not serve GROUP resources"),
        (99, "x", ErrorCode.invalid_request, "Unknown resource type 99")]
    assert controller.metadata.topic("events").config == {"retention.ms": "60000"}
    assert [name for name, *_ in controller.calls] == ["events", "missing", "events-2", "events-3"]


def test_incremental_alter_configs__validate_only__answers_and_changes_nothing():
    controller = with_topic(config={"retention.ms": "60000"})
    dispatcher = forwarding_node(controller)
    answer = ask(dispatcher, INCREMENTAL, 1, incremental(
        (TOPIC, "events", [(APPEND, "cleanup.policy", "compact")]),
        (TOPIC, "events-2", [(SET, "min.insync.replicas", "2")]), validate_only=True))
    assert [r.error_code for r in answer.responses] == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    assert controller.metadata.topic("events").config == {"retention.ms": "60000"}
    assert described(dispatcher, "events", "cleanup.policy") == {"cleanup.policy": ("delete", 5)}


def test_incremental_alter_configs__min_insync_above_the_replication_factor__invalid_config():
    controller = with_topic()
    answer = ask(controller_node(controller), INCREMENTAL, 1, incremental(
        (TOPIC, "events", [(SET, "min.insync.replicas", "4")])))
    assert (answer.responses[0].error_code, answer.responses[0].error_message) == (
        ErrorCode.invalid_config, "min.insync.replicas (4) is larger than the replication factor (3).")
    assert controller.metadata.topic("events").config == {}


@pytest.mark.parametrize("version, schema", [(0, legacy_v0), (2, legacy_v2)])
def test_alter_configs__replaces_every_override_of_the_topic(version, schema):
    controller = with_topic(config={"retention.ms": "60000", "cleanup.policy": "compact"})
    dispatcher = forwarding_node(controller)
    answer = ask(dispatcher, LEGACY, version, legacy((TOPIC, "events", [("segment.ms", "3600000")]),
                                                     (TOPIC, "missing", []), schema=schema))
    assert [(r.resource_name, r.error_code) for r in answer.responses] == [
        ("events", ErrorCode.none), ("missing", ErrorCode.unknown_topic_or_partition)]
    assert controller.metadata.topic("events").config == {"segment.ms": "3600000"}
    assert described(dispatcher, "events", "cleanup.policy", "segment.ms") == {
        "cleanup.policy": ("delete", 5), "segment.ms": ("3600000", 1)}


def test_alter_configs__null_value__invalid_request_and_nothing_changes():
    controller = with_topic(config={"retention.ms": "60000"})
    answer = ask(controller_node(controller), LEGACY, 2, legacy((TOPIC, "events", [("retention.ms", None)])))
    assert (answer.responses[0].error_code, answer.responses[0].error_message) == (
        ErrorCode.invalid_request, "Null value not supported for : retention.ms")
    assert controller.metadata.topic("events").config == {"retention.ms": "60000"}


def test_alter_configs__a_node_with_no_way_to_the_controller__not_controller():
    controller = with_topic()
    dispatcher = Dispatcher(node_table(image=controller.cluster_image, allocate_producer_id=None))
    answer = ask(dispatcher, INCREMENTAL, 1, incremental((TOPIC, "events", [(SET, "retention.ms", "1")])))
    assert answer.responses[0].error_code == ErrorCode.not_controller


def test_api_versions__every_node_advertises_both_alter_configs_apis():
    for dispatcher in (controller_node(with_topic()), forwarding_node(with_topic())):
        answer = ask(dispatcher, 18, 3, api_versions_v3.ApiVersionsRequest(
            client_software_name="test", client_software_version="1"))
        ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        assert ranges[INCREMENTAL] == (0, 1) and ranges[LEGACY] == (0, 2)
