"""DescribeConfigs v1-4, on every node (admin clients send topic resources to any
node), answered from the node's image.

What Kafka answers (KafkaApis.handleDescribeConfigsRequest, ConfigHelper), and
what this handler does the same way:
  * a topic: every topic config Kafka 4.x defines (core.config: Kafka's names,
    types and defaults), or only configuration_keys when given; an override is
    DYNAMIC_TOPIC_CONFIG (source 1), the rest DEFAULT_CONFIG (5); values parsed
    and written back as Kafka writes them ("true", "604800000", "0.5",
    "compact,delete"), with Kafka's ConfigType (DOUBLE, LIST, ...); nothing is
    sensitive or read-only. Configs rafka keeps without acting on them are
    described the same way (core.config says which).
    An unknown topic: UNKNOWN_TOPIC_OR_PARTITION. error_message is "" (the
    field's default in Kafka) except for an error an exception made.
  * a broker (type 4): no configs, no error (rafka's brokers have no dynamic
    configs to show).
  * a broker's loggers (type 8, on that broker's node): each logger of the
    broker (core.broker_loggers) with its effective level, source
    DYNAMIC_BROKER_LOGGER_CONFIG (6), not read-only, config type 0 (Kafka sets
    none); configuration_keys null or empty: all, else those of them it has.
    Another broker's id, none, or one that is not an integer: INVALID_REQUEST
    with ConfigHelper's words; a node that is no broker answers as one whose id
    no name matches (-1).
  * any other resource type: INVALID_REQUEST.
  * synonyms are not listed; documentation is null.
  * authorization (KafkaApis): DESCRIBE_CONFIGS on each topic (refused:
    TOPIC_AUTHORIZATION_FAILED) or on the cluster for a broker (refused:
    CLUSTER_AUTHORIZATION_FAILED), per resource.
Caller: actors.serving (every node's table), through `route(current_image)`.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable

from rafka.protocol.entities import load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32Timedelta

from rafka.core import broker_loggers
from rafka.core.cluster_image import ClusterImage
from rafka.core.config import DESCRIBE_TYPE_CODES, TOPIC_CONFIG_DEFS, TopicConfig, kafka_string
from rafka.core.errors import KafkaError
from rafka.protocol.authorization import (CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_TOPIC, config_acl_resource,
                                          decide)
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import make, module_of

API_KEY = 32
TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE = CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG, DYNAMIC_BROKER_LOGGER_CONFIG = 1, 5, 6
NO_BROKER = -1   # a node that is no broker: no BROKER_LOGGER name is its id
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


@dataclasses.dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str            # as Kafka writes it ("true", "604800000", "0.5", "compact,delete")
    source: int           # DYNAMIC_TOPIC_CONFIG for the topic's own, else DEFAULT_CONFIG
    type_code: int        # Kafka's ConfigType


def topic_config_entries(overrides) -> list[ConfigEntry]:
    """Every topic config with the value a topic of these overrides has, in Kafka's
    order; for DescribeConfigs and for CreateTopics' answer (v5+), which lists
    them as Kafka's does."""
    values = TopicConfig.from_dict(overrides).to_dict()   # validated at creation
    return [ConfigEntry(name, kafka_string(values[name]), DYNAMIC_TOPIC_CONFIG if name in overrides else DEFAULT_CONFIG,
                        DESCRIBE_TYPE_CODES[definition.kind]) for name, definition in TOPIC_CONFIG_DEFS.items()]


def route(current_image: Callable[[], ClusterImage], broker_id: int = NO_BROKER) -> Route:
    """`broker_id`: the broker this node is (its loggers are described), or NO_BROKER."""
    def logger_entries(module, resource, image: ClusterImage):
        broker_loggers.check_described_broker(resource.resource_name, broker_id)
        levels = image.broker_logger_levels.get(broker_id, {})
        return tuple(make(module.DescribeConfigsResourceResult, name=name, value=level, read_only=False,
                          config_source=i8(DYNAMIC_BROKER_LOGGER_CONFIG), is_default=False, is_sensitive=False,
                          synonyms=(), config_type=i8(0), documentation=None)
                     for name, level in broker_loggers.describe(levels, resource.configuration_keys))

    async def handle(request, context: RequestContext):
        response_type = load_response_schema(API_KEY, context.api_version)
        module = module_of(response_type)
        image = current_image()
        decision = decide(context, request)
        results = []
        for resource in request.resources:
            # error_message: "" (its default) unless an exception made the error
            # (ConfigHelper.describeConfigs: an unknown topic is answered without one)
            configs, code, message = (), ErrorCode.none, ""
            acl_resource = config_acl_resource(resource.resource_type, resource.resource_name)
            refused = decision.refusal_of(*acl_resource) if acl_resource else None
            if refused is not None:
                code, message = ErrorCode(refused.code), refused.message
            elif resource.resource_type == TOPIC_RESOURCE:
                topic = image.topics.get(resource.resource_name)
                if topic is None:
                    code = ErrorCode.unknown_topic_or_partition
                else:
                    wanted = resource.configuration_keys
                    configs = tuple(make(
                        module.DescribeConfigsResourceResult, name=entry.name, value=entry.value, read_only=False,
                        config_source=i8(entry.source), is_default=entry.source == DEFAULT_CONFIG,
                        is_sensitive=False, synonyms=(), config_type=i8(entry.type_code), documentation=None)
                        for entry in topic_config_entries(topic.config) if wanted is None or entry.name in wanted)
            elif resource.resource_type == BROKER_LOGGER_RESOURCE:
                try:
                    configs = logger_entries(module, resource, image)
                except KafkaError as error:
                    code, message = ErrorCode(error.code), error.message
            elif resource.resource_type != BROKER_RESOURCE:
                code, message = ErrorCode.invalid_request, f"resource type {resource.resource_type} is not served"
            results.append(make(module.DescribeConfigsResult, error_code=code, error_message=message,
                                resource_type=resource.resource_type, resource_name=resource.resource_name,
                                configs=configs))
        return make(response_type, throttle_time=_NO_THROTTLE, results=tuple(results))
    return Route(API_KEY, 1, 4, handle)
