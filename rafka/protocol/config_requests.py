"""DescribeConfigs (v4) and IncrementalAlterConfigs (v1) as rafka's Admin sends
them, and their answers read back (Kafka's AdminClient describeConfigs /
incrementalAlterConfigs, which kafka-configs.sh calls for topics, brokers and
broker loggers).

A resource is (resource type, name): TOPIC (2) goes to any broker, BROKER (4)
and BROKER_LOGGER (8) to the broker it names, as Kafka's AdminClient sends them.
Each resource's answer is its own: its configs, or its typed error in their
place (Kafka's AdminClient completes each resource's future on its own).
Callers: rafka.client.admin (`rafka configs --entity-type
topics|brokers|broker-loggers`), tests.
"""

from __future__ import annotations

import dataclasses

from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.incremental_alter_configs.v1 import request as alter_v1
from kio.static.primitive import i8

from rafka.core.config import ConfigOp
from rafka.core.errors import KafkaError, error_or_none
from rafka.protocol.authorization import CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_TOPIC

TOPIC, BROKER, BROKER_LOGGER = CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER
# Kafka's ConfigSource names (DescribeConfigsResponse.ConfigSource), as kafka-configs.sh prints them
SOURCE_NAMES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
                6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
Resource = tuple[int, str]


@dataclasses.dataclass(frozen=True)
class DescribedConfig:
    name: str
    value: str | None
    source: int           # a key of SOURCE_NAMES
    read_only: bool
    sensitive: bool


def describe_request(resources: list[Resource], names: list[str] | None = None
                     ) -> describe_v4.DescribeConfigsRequest:
    """`names`: the configs wanted of every resource; None: all."""
    return describe_v4.DescribeConfigsRequest(resources=tuple(
        describe_v4.DescribeConfigsResource(resource_type=i8(kind), resource_name=name,
                                            configuration_keys=None if names is None else tuple(names))
        for kind, name in resources), include_synonyms=False, include_documentation=False)


def describe_answer(response) -> dict[Resource, list[DescribedConfig] | KafkaError]:
    return {(int(r.resource_type), r.resource_name):
            error_or_none(r.error_code, r.error_message) or
            [DescribedConfig(c.name, c.value, int(c.config_source), c.read_only, c.is_sensitive) for c in r.configs]
            for r in response.results}


def alter_request(changes: dict[Resource, list[ConfigOp]], *, validate_only: bool = False
                  ) -> alter_v1.IncrementalAlterConfigsRequest:
    """`changes`: by resource, its ops (core.config: SET, DELETE, APPEND, SUBTRACT)."""
    return alter_v1.IncrementalAlterConfigsRequest(validate_only=validate_only, resources=tuple(
        alter_v1.AlterConfigsResource(resource_type=i8(kind), resource_name=name, configs=tuple(
            alter_v1.AlterableConfig(name=config, config_operation=i8(op), value=value) for op, config, value in ops))
        for (kind, name), ops in changes.items()))


def alter_answer(response) -> dict[Resource, KafkaError | None]:
    return {(int(r.resource_type), r.resource_name): error_or_none(r.error_code, r.error_message)
            for r in response.responses}
