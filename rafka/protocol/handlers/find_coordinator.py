"""FindCoordinator v0-4: the node of the group coordinator actor for a group id,
or of the transaction coordinator actor for a transactional id.
Every node answers it, from its image.

What Kafka answers (KafkaApis.handleFindCoordinatorRequest), and what this handler
does the same way:
  * key type 0 (group): the coordinator of __consumer_offsets partition
    abs(hashCode(group)) % partitions (core.offsets_schema.partition_for_group);
    while that coordinator has no endpoint, or the offsets topic does not exist
    yet: COORDINATOR_NOT_AVAILABLE (retriable), node -1.
  * key type 1 (transaction): the coordinator of __transaction_state partition
    abs(hashCode(transactional id)) % partitions (core.transaction_log
    .partition_for, the same rule); COORDINATOR_NOT_AVAILABLE while that topic
    does not exist or its coordinator has no endpoint (Kafka creates the topic
    on the first such request and answers so meanwhile).
  * any other key type: INVALID_REQUEST for v1-3 (Kafka answers an unknown key
    type so), and the same per key in v4's batch.
  * v4 batches keys (KIP-699); v0-3 carry one.
  * authorization (KafkaApis): DESCRIBE on the group or the transactional id,
    refused: GROUP_AUTHORIZATION_FAILED / TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    and node -1 for that key (its coordinator is not told).
  * error_message is Kafka's Errors.message() (FindCoordinatorResponse sets it from
    the error, never null): "NONE" with a coordinator, else the error's text.
Caller: actors.serving (every node's table), through `route(current_image)`.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

from rafka.protocol.entities import load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from rafka.core.cluster_image import ClusterImage
from rafka.core.offsets_schema import partition_for_group
from rafka.core.transaction_log import partition_for
from rafka.core.acl import AclOperation, ResourceType
from rafka.protocol.authorization import Gate, check_of, gate
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import make, module_of

API_KEY = 10
MIN_VERSION, MAX_VERSION = 0, 4
GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE = 0, 1
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def route(current_image: Callable[[], ClusterImage]) -> Route:
    async def handle_find_coordinator(request, context: RequestContext):
        return find_coordinator(current_image(), request, context.api_version, gate(context))
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_find_coordinator)


# Kafka's Errors.message() for the codes answered here (Errors.NONE has no
# exception: its message is its name).
_KAFKA_MESSAGES = {
    ErrorCode.none: "NONE",
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
    ErrorCode.invalid_request: "This most likely occurs because of a request being malformed by the client "
                               "library or the message was sent to an incompatible broker. See the broker logs "
                               "for more details.",
}


_DESCRIBE_BY_KEY_TYPE = {GROUP_KEY_TYPE: check_of(API_KEY, AclOperation.DESCRIBE, ResourceType.GROUP),
                         TRANSACTION_KEY_TYPE: check_of(API_KEY, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID)}


def locate(image: ClusterImage, key: str, key_type: int,
           request_gate: Gate | None = None) -> tuple[ErrorCode, str, int, str, int]:
    """(error, Kafka's message for it, node id, host, port) for one key."""
    check = _DESCRIBE_BY_KEY_TYPE.get(key_type)
    refusal = request_gate.refusal(check, key) if request_gate is not None and check is not None else None
    if refusal is not None:
        code = ErrorCode(refusal.code)
        return code, _KAFKA_MESSAGES[code], -1, "", -1
    code, node = _coordinator(image, key, key_type)
    if node is None:
        return code, _KAFKA_MESSAGES[code], -1, "", -1
    return code, _KAFKA_MESSAGES[code], node.node_id, node.host, node.port


def _coordinator(image: ClusterImage, key: str, key_type: int):
    if key_type == GROUP_KEY_TYPE:
        nodes, place = image.coordinator_nodes, partition_for_group
    elif key_type == TRANSACTION_KEY_TYPE:
        nodes, place = image.transaction_coordinator_nodes, partition_for
    else:
        return ErrorCode.invalid_request, None
    if not nodes:   # the internal topic does not exist yet
        return ErrorCode.coordinator_not_available, None
    node = image.nodes.get(nodes[place(key, len(nodes))])
    if node is None:   # the key's coordinator is not serving
        return ErrorCode.coordinator_not_available, None
    return ErrorCode.none, node


def find_coordinator(image: ClusterImage, request, version: int, request_gate: Gate | None = None):
    response_type = load_response_schema(API_KEY, version)
    key_type = int(getattr(request, "key_type", GROUP_KEY_TYPE))
    if version >= 4:
        module = module_of(response_type)
        coordinators = []
        for key in request.coordinator_keys:
            code, message, node_id, host, port = locate(image, key, key_type, request_gate)
            coordinators.append(make(module.Coordinator, key=key, node_id=i32(node_id), host=host,
                                     port=i32(port), error_code=code, error_message=message))
        return make(response_type, throttle_time=_NO_THROTTLE, coordinators=tuple(coordinators))
    code, message, node_id, host, port = locate(image, request.key, key_type, request_gate)
    return make(response_type, throttle_time=_NO_THROTTLE, error_code=code, error_message=message,
                node_id=i32(node_id), host=host, port=i32(port))
