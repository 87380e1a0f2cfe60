"""DescribeCluster v0-2, answered from the node's image: the cluster id, the
controller and the brokers, as Metadata lists them.

What Kafka answers (KafkaApis.handleDescribeCluster, AuthHelper
.computeDescribeClusterResponse), and what this handler does the same way:
  * the brokers are the nodes Metadata lists (at a broker's edge: node id =
    broker id at its advertised address), none fenced; the controller id is
    Metadata's controller_id (Java admin clients send topic administration there).
  * endpoint_type (v1+): 1 (brokers) is served; 2 (controllers) answers
    MISMATCHED_ENDPOINT_TYPE, any other UNSUPPORTED_ENDPOINT_TYPE (v0 cannot
    ask; Kafka answers INVALID_REQUEST there).
  * everyone may ask; include_cluster_authorized_operations: the bitfield of the
    cluster operations the caller may do if it may DESCRIBE the cluster, else 0;
    not asked: INT32_MIN (Kafka's "not requested").
Caller: dispatch, through `route(current_image)`.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i32Timedelta

from rafka.core.acl import AclOperation, ResourceType
from rafka.core.cluster_image import ClusterImage
from rafka.protocol.authorization import check_of, gate
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of

API_KEY = 60
MIN_VERSION, MAX_VERSION = 0, 2
BROKER_ENDPOINTS, CONTROLLER_ENDPOINTS = 1, 2   # Kafka's EndpointType
AUTHORIZED_OPERATIONS_NOT_REQUESTED = -2**31
_DESCRIBE_CLUSTER = check_of(API_KEY, AclOperation.DESCRIBE, ResourceType.CLUSTER)
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def route(current_image: Callable[[], ClusterImage]) -> Route:
    async def handle_describe_cluster(request, context: RequestContext):
        return describe_cluster(current_image(), request, context)
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_describe_cluster)


def describe_cluster(image: ClusterImage, request, context: RequestContext):
    response_type = load_response_schema(API_KEY, context.api_version)
    module = module_of(response_type)
    endpoint_type = int(getattr(request, "endpoint_type", BROKER_ENDPOINTS))
    if endpoint_type != BROKER_ENDPOINTS:
        mismatched = endpoint_type == CONTROLLER_ENDPOINTS
        code = ErrorCode.mismatched_endpoint_type if mismatched else ErrorCode.unsupported_endpoint_type
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=code,
                    error_message=("The request was sent to an endpoint of type BROKER, but we wanted an endpoint "
                                   "of type CONTROLLER" if mismatched else
                                   f"Unsupported endpoint type {endpoint_type}"),
                    endpoint_type=i8(endpoint_type), cluster_id=image.cluster_id or "", brokers=())
    operations = AUTHORIZED_OPERATIONS_NOT_REQUESTED
    if request.include_cluster_authorized_operations:
        request_gate = gate(context)
        operations = (request_gate.authorized_operations(ResourceType.CLUSTER)
                      if request_gate.allows(_DESCRIBE_CLUSTER) else 0)
    brokers = tuple(make(module.DescribeClusterBroker, broker_id=i32(n.node_id), host=n.host, port=i32(n.port),
                         rack=None, is_fenced=False)
                    for n in sorted(image.nodes.values(), key=lambda n: n.node_id))
    return make(response_type, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                endpoint_type=i8(BROKER_ENDPOINTS), cluster_id=image.cluster_id or "",
                controller_id=i32(image.controller_node), brokers=brokers,
                cluster_authorized_operations=i32(operations))
