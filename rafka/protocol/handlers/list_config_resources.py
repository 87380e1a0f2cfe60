"""ListConfigResources v0-1 (KIP-1142; v0 was ListClientMetricsResources): the
resources that have configs, as kafka-configs.sh --describe --entity-type ... lists
them through the AdminClients' listConfigResources.

What Kafka answers (KafkaApis.handleListConfigResources,
ListConfigResourcesRequest.supportedResourceTypes), and what this handler does
the same way, from the node's image:
  * DESCRIBE_CONFIGS on the cluster; refused: CLUSTER_AUTHORIZATION_FAILED and
    no resources (no per-topic filtering: Kafka lists every topic);
  * the types asked, none meaning every type the version serves (v0: client
    metrics only; v1: topics, brokers, broker loggers, client metrics, groups);
    a type the version does not serve fails the request: UNSUPPORTED_VERSION and
    no resources;
  * in Kafka's order, each type once: groups with dynamic configs, client-metrics
    subscriptions, broker loggers (every broker), brokers (every broker), topics
    (every one, internal ones too). rafka stores no group or client-metrics
    configs (AlterConfigs refuses those types), so it lists none of them, as a
    Kafka cluster where none were ever set; its brokers are the live ones the
    image lists (Kafka lists fenced ones too: rafka's image forgets a broker
    that is down).
Caller: dispatch, through `route(image)`.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32Timedelta

from rafka.core.cluster_image import ClusterImage
from rafka.protocol.authorization import decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of

API_KEY = 74
MIN_VERSION, MAX_VERSION = 0, 1
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
_SUPPORTED = {0: (CLIENT_METRICS,), 1: (GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC)}   # Kafka's answer order
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def route(image: Callable[[], ClusterImage]) -> Route:
    async def handle_list_config_resources(request, context: RequestContext):
        return list_config_resources(image(), request, context)
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_list_config_resources)


def list_config_resources(image: ClusterImage, request, context: RequestContext):
    response_type = load_response_schema(API_KEY, context.api_version)
    module = module_of(response_type)
    refusal = decide(context, request).refusal
    if refusal is not None:
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=ErrorCode(refusal.code),
                    config_resources=())
    supported = _SUPPORTED[context.api_version]
    asked = {int(t) for t in getattr(request, "resource_types", ())} or set(supported)
    if not asked <= set(supported):
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=ErrorCode.unsupported_version,
                    config_resources=())
    brokers = [str(b) for b in sorted(image.brokers)]
    names = {GROUP: [], CLIENT_METRICS: [], BROKER_LOGGER: brokers, BROKER: brokers, TOPIC: sorted(image.topics)}
    return make(response_type, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, config_resources=tuple(
        make(module.ConfigResource, resource_name=name, resource_type=i8(resource_type))
        for resource_type in supported if resource_type in asked for name in names[resource_type]))
