"""DescribeConfigs on the wire for a topic created with CreateTopics: every topic
config Kafka 4.x defines, each with its value as Kafka writes it, its type, and
its source (DYNAMIC_TOPIC_CONFIG for what the topic set, DEFAULT_CONFIG else)."""

import asyncio

import pytest
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.errors import ErrorCode

from rafka.protocol.dispatch import DispatchTable, Dispatcher
from rafka.protocol.handlers import api_versions, describe_configs, topic_admin
from tests.core.test_protocol_dispatch import read_response, request_frame
from tests.core.test_protocol_topic_admin import TIMEOUT, StandInController, creatable
from tests.core.test_topic_configs import KAFKA_TOPIC_CONFIG_DEFAULTS

pytestmark = pytest.mark.core
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7


def ask(controller, api_key, version, request):
    dispatcher = Dispatcher(DispatchTable([api_versions.ROUTE, *topic_admin.routes(controller),
                                           describe_configs.route(controller.cluster_image)]))
    frame = asyncio.run(dispatcher.dispatch(request_frame(api_key, version, request)))
    return read_response(frame, api_key, version)[1]


def describe(controller, topic, keys=None):
    answer = ask(controller, 32, 4, describe_v4.DescribeConfigsRequest(resources=(
        describe_v4.DescribeConfigsResource(resource_type=2, resource_name=topic, configuration_keys=keys),),
        include_synonyms=False, include_documentation=False))
    (result,) = answer.results
    assert result.error_code == ErrorCode.none
    return {c.name: c for c in result.configs}


def test_describe_configs__a_created_topic__every_kafka_name_with_value_type_and_source():
    controller = StandInController()
    overrides = [("min.cleanable.dirty.ratio", "0.01"), ("max.compaction.lag.ms", "5000"),
                 ("file.delete.delay.ms", "1000"), ("cleanup.policy", "compact, delete")]
    created = ask(controller, 19, 7, create_v7.CreateTopicsRequest(
        topics=(creatable("tuned", configs=overrides),), timeout=TIMEOUT, validate_only=False))
    assert created.topics[0].error_code == ErrorCode.none
    configs = describe(controller, "tuned")
    assert set(configs) == set(KAFKA_TOPIC_CONFIG_DEFAULTS)
    assert {n: (c.value, c.config_source) for n, c in configs.items() if n in dict(overrides)} == {
        "min.cleanable.dirty.ratio": ("0.01", DYNAMIC_TOPIC_CONFIG),
        "max.compaction.lag.ms": ("5000", DYNAMIC_TOPIC_CONFIG),
        "file.delete.delay.ms": ("1000", DYNAMIC_TOPIC_CONFIG),
        "cleanup.policy": ("compact,delete", DYNAMIC_TOPIC_CONFIG)}
    defaults = {n: c for n, c in configs.items() if n not in dict(overrides)}
    assert all(c.config_source == DEFAULT_CONFIG for c in defaults.values())
    assert {n: c.value for n, c in defaults.items() if n in (
        "segment.ms", "flush.messages", "preallocate", "follower.replication.throttled.replicas",
        "compression.type", "local.retention.ms", "message.timestamp.after.max.ms")} == {
        "segment.ms": "604800000", "flush.messages": "9223372036854775807", "preallocate": "false",
        "follower.replication.throttled.replicas": "", "compression.type": "producer",
        "local.retention.ms": "-2", "message.timestamp.after.max.ms": "3600000"}
    assert {n: configs[n].config_type for n in ("min.cleanable.dirty.ratio", "cleanup.policy", "segment.bytes",
                                                "segment.ms", "preallocate", "compression.type")} == {
        "min.cleanable.dirty.ratio": DOUBLE, "cleanup.policy": LIST, "segment.bytes": INT, "segment.ms": LONG,
        "preallocate": BOOLEAN, "compression.type": STRING}


def test_describe_configs__configuration_keys__only_those_named():
    controller = StandInController()
    ask(controller, 19, 7, create_v7.CreateTopicsRequest(topics=(creatable("plain"),), timeout=TIMEOUT,
                                                         validate_only=False))
    configs = describe(controller, "plain", keys=("min.cleanable.dirty.ratio", "segment.jitter.ms"))
    assert {n: (c.value, c.config_source) for n, c in configs.items()} == {
        "min.cleanable.dirty.ratio": ("0.5", DEFAULT_CONFIG), "segment.jitter.ms": ("0", DEFAULT_CONFIG)}


def test_create_topics__a_bad_new_config__invalid_config_in_kafkas_words_and_nothing_created():
    controller = StandInController()
    answer = ask(controller, 19, 7, create_v7.CreateTopicsRequest(
        topics=(creatable("dirty", configs=[("min.cleanable.dirty.ratio", "2")]),), timeout=TIMEOUT,
        validate_only=False))
    (topic,) = answer.topics
    assert topic.error_code == ErrorCode.invalid_config
    assert topic.error_message == ("Invalid value 2.0 for configuration min.cleanable.dirty.ratio: "
                                   "Value must be no more than 1")
    assert controller.metadata.topics == {}
