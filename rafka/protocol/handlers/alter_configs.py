"""IncrementalAlterConfigs v0-1 and AlterConfigs v0-2, on every node: Kafka's
clients send TOPIC resources to any broker, which forwards them to the
controller (KIP-590). Here the controller's node calls the controller and every
other node forwards by a Ray call (actors.serving); `alter_topic_config` is
whichever the node has. The controller merges and validates
(core.metadata.handle_alter_topic_config, core.config.altered_overrides), commits,
and pushes the new image, so the topic's replicas run with it and
DescribeConfigs shows it from the answer on.

What Kafka answers (ConfigAdminManager.preprocess on the broker, then
ControllerApis and ConfigurationControlManager), and what these handlers do the
same way:
  * one answer per resource, in the request's order, each with its own error
    code and message (null without an error); the other resources go on.
  * a resource given twice: INVALID_REQUEST "Each resource must appear at most
    once." for every copy; a config name twice in one resource, or a null value
    to anything but DELETE: INVALID_REQUEST.
  * TOPIC: SET, DELETE (back to the default), APPEND and SUBTRACT (LIST configs
    only, else INVALID_CONFIG "Can't APPEND to key K because its type is not
    LIST."); AlterConfigs replaces every override of the topic with the given
    ones. Bad names and values: INVALID_CONFIG with core.config's wording; an
    unknown topic: UNKNOWN_TOPIC_OR_PARTITION (after the configs are checked, as
    Kafka's controller checks); an empty name: INVALID_REQUEST. validate_only:
    every check, nothing changed. Internal topics (__consumer_offsets) are
    altered like any other, as Kafka's controller allows.
  * BROKER: rafka's brokers have no dynamic configs. Changing any is refused as
    Kafka refuses a config that cannot be updated dynamically: INVALID_REQUEST
    "Cannot update these configs dynamically: Set(...)" (KAFKA-13609's code);
    DELETE only, or nothing: no error, nothing to do. A name that is not a node
    id: INVALID_REQUEST.
  * BROKER_LOGGER (IncrementalAlterConfigs, on the broker's own node, as the
    Java admin and kafka-python send it): the name checked against the node's
    broker id, then every change against the broker's loggers
    (core.broker_loggers: SET to one of Kafka's six levels, DELETE but not of the
    root; APPEND and SUBTRACT refused), all before any applies; then the
    controller records the broker's new map and pushes it, and every process of
    the broker applies it before the answer. validate_only: the checks only.
    AlterConfigs: INVALID_REQUEST "Unknown resource type 8", as Kafka's.
  * any other resource type (CLIENT_METRICS, GROUP, unknown ones): INVALID_REQUEST.
  * authorization (KafkaApis, ConfigAdminManager): ALTER_CONFIGS on each topic
    (refused: TOPIC_AUTHORIZATION_FAILED) or on the cluster for a broker
    (CLUSTER_AUTHORIZATION_FAILED), per resource, before anything else.
Not matched: an unknown operation id is INVALID_REQUEST "Unknown operations type
N" (Kafka's controller fails such a request as a whole); a BROKER name is not
compared with the node's own id.
Caller: protocol.node_table, through `routes(alter_topic_config)`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections import Counter
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from rafka.core import broker_loggers
from rafka.core.config import DELETE, SET, ConfigOp, check_config_ops
from rafka.core.errors import InvalidRequest
from rafka.protocol.authorization import (CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_TOPIC, config_acl_resource,
                                          decide)
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of
from rafka.protocol.handlers.partitions import error_code_of

ALTER_CONFIGS_KEY, INCREMENTAL_ALTER_CONFIGS_KEY = 33, 44
TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE = CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER
NOT_SERVED = {16: "CLIENT_METRICS", 32: "GROUP"}
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))

# (topic name, [(operation, name, value)], validate_only, replace) -> {"name", "config"}
AlterTopicConfig = Callable[[str, list, bool, bool], Awaitable[dict]]


@dataclasses.dataclass(frozen=True)
class BrokerLoggersHost:
    """The broker a node is, and how its loggers' changes reach the controller
    (broker id, [(operation, name, value)]) -> the broker's new map."""
    broker_id: int
    alter: Callable[[int, list], Awaitable[dict]]


async def _alter_broker_loggers(host: BrokerLoggersHost | None, image, name: str, ops: list[ConfigOp],
                                validate_only: bool) -> None:
    """A BROKER_LOGGER resource on this node: checked here, applied by the controller."""
    if host is None:   # a node that is no broker: no name is its id
        broker_loggers.check_altered_broker(name, -1)
        raise InvalidRequest(f"node {name} is not a broker: its loggers are not altered here")
    broker_loggers.check_altered_broker(name, host.broker_id)
    check_config_ops(ops)
    levels = image.broker_logger_levels.get(host.broker_id, {}) if image is not None else {}
    broker_loggers.check_changes(ops, broker_loggers.broker_loggers(levels))
    if not validate_only:
        await host.alter(host.broker_id, ops)


def _check_broker_resource(name: str, ops: list[ConfigOp]) -> None:
    """What Kafka's broker answers for a BROKER resource when none of the configs
    can be updated dynamically (ConfigAdminManager.validateBrokerConfigChange)."""
    check_config_ops(ops)
    if name and not name.lstrip("-").isdigit():
        raise InvalidRequest(f"Node id must be an integer, but it is: {name}")
    changed = [config for op, config, _ in ops if op != DELETE]
    if changed:
        raise InvalidRequest(f"Cannot update these configs dynamically: Set({', '.join(changed)})")


def routes(alter_topic_config: AlterTopicConfig, loggers: BrokerLoggersHost | None = None) -> list[Route]:
    """`loggers`: the broker this node is (none: every BROKER_LOGGER name is refused)."""
    async def alter(request, context: RequestContext, *, replace: bool):
        api_key = ALTER_CONFIGS_KEY if replace else INCREMENTAL_ALTER_CONFIGS_KEY
        response_type = load_response_schema(api_key, context.api_version)
        module = module_of(response_type)
        copies = Counter((r.resource_type, r.resource_name) for r in request.resources)
        decision = decide(context, request)

        async def one(resource):
            code, message = ErrorCode.none, None
            ops = [(SET if replace else int(c.config_operation), c.name, c.value) for c in resource.configs]
            try:
                acl_resource = config_acl_resource(resource.resource_type, resource.resource_name)
                refused = decision.refusal_of(*acl_resource) if acl_resource else None
                if refused is not None:
                    raise refused
                if copies[resource.resource_type, resource.resource_name] > 1:
                    raise InvalidRequest("Each resource must appear at most once.")
                if resource.resource_type == TOPIC_RESOURCE:
                    await alter_topic_config(resource.resource_name, ops, bool(request.validate_only), replace)
                elif resource.resource_type == BROKER_RESOURCE:
                    _check_broker_resource(resource.resource_name, ops)
                elif resource.resource_type == BROKER_LOGGER_RESOURCE and not replace:
                    await _alter_broker_loggers(loggers, context.image, resource.resource_name, ops,
                                                bool(request.validate_only))
                elif resource.resource_type in NOT_SERVED:
                    raise InvalidRequest(f"rafka does not serve {NOT_SERVED[resource.resource_type]} resources")
                else:
                    raise InvalidRequest(f"Unknown resource type {resource.resource_type}")
            except Exception as error:
                code, message = error_code_of(error), str(getattr(error, "message", error))
            return make(module.AlterConfigsResourceResponse, error_code=code, error_message=message,
                        resource_type=resource.resource_type, resource_name=resource.resource_name)
        results = await asyncio.gather(*(one(r) for r in request.resources))
        return make(response_type, throttle_time=_NO_THROTTLE, responses=tuple(results))

    async def incremental(request, context: RequestContext):
        return await alter(request, context, replace=False)

    async def legacy(request, context: RequestContext):
        return await alter(request, context, replace=True)
    return [Route(INCREMENTAL_ALTER_CONFIGS_KEY, 0, 1, incremental), Route(ALTER_CONFIGS_KEY, 0, 2, legacy)]
