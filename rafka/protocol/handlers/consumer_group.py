"""ConsumerGroupHeartbeat v0-1 and ConsumerGroupDescribe v0-1: Kafka's new consumer
group protocol (KIP-848) for wire clients, on the group's coordinator node. The
wire layer decodes and encodes; core.consumer_group decides (through the
coordinator: the shard in process, the actor in a cluster).

What Kafka answers (KafkaApis.handleConsumerGroupHeartbeat / Describe,
GroupMetadataManager), and what these handlers do the same way:
  * Heartbeat: member id (v0: "" for a new member, named by the coordinator; v1:
    the client's own), member epoch (0 joins, -1 leaves, -2 a static member's
    temporary leave), and what changed since the last heartbeat (null fields are
    unchanged): instance id, rack, rebalance timeout, subscribed topic names,
    server assignor, owned partitions (by topic id). The answer: the member id,
    its epoch, the heartbeat interval, and its assignment (by topic id) when the
    request was a full one or the assignment changed (else null).
  * a topic regex (v1) subscribes to every topic it matches whole, now and as
    topics are made; "" is none.
  * errors, with Kafka's messages: INVALID_REQUEST (a malformed heartbeat),
    INVALID_REGULAR_EXPRESSION, UNSUPPORTED_ASSIGNOR, UNKNOWN_MEMBER_ID,
    FENCED_MEMBER_EPOCH, GROUP_ID_NOT_FOUND (no such consumer group, or a classic
    group with members), UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID,
    GROUP_MAX_SIZE_REACHED; NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS;
    without READ on the group GROUP_AUTHORIZATION_FAILED.
  * a cluster whose finalized `group.version` is below 1 (core.features) does not
    serve the protocol: a heartbeat answers UNSUPPORTED_VERSION, a describe
    UNSUPPORTED_VERSION for every group, before anything else is checked (Kafka's
    isConsumerGroupProtocolEnabled, checked before authorization).
  * Describe: per group its state, epochs, assignor and members with their
    subscription, current and target assignments (topic id and name);
    GROUP_ID_NOT_FOUND for a group that is not a consumer group; without DESCRIBE
    on it GROUP_AUTHORIZATION_FAILED. Authorized operations are not computed
    (INT32_MIN).
Caller: the coordinator actor's table, through `routes(host)`.
"""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i32Timedelta

from rafka.core.features import consumer_group_protocol_enabled
from rafka.protocol.authorization import decided_host
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of
from rafka.protocol.handlers.group_admin import AUTHORIZED_OPERATIONS_NOT_REQUESTED
from rafka.protocol.handlers.group_membership import client_host
from rafka.protocol.handlers.group_offsets import GroupHost, coordinator_call

HEARTBEAT_KEY, DESCRIBE_KEY = 68, 69
CONSUMER_MEMBER_TYPE = i8(1)
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def routes(host: GroupHost) -> list[Route]:
    async def heartbeat(request, context: RequestContext):
        if not _enabled(context):
            return _refused_heartbeat(context, ErrorCode.unsupported_version, None)
        return await handle_heartbeat(decided_host(host, context, request), request, context)

    async def describe(request, context: RequestContext):
        response_type = load_response_schema(DESCRIBE_KEY, context.api_version)
        if not _enabled(context):
            return make(response_type, throttle_time=_NO_THROTTLE, groups=tuple(
                _refused_describe(module_of(response_type), g, ErrorCode.unsupported_version)
                for g in request.group_ids))
        decided = decided_host(host, context, request)
        return make(response_type, throttle_time=_NO_THROTTLE,
                    groups=tuple([await _describe(decided, module_of(response_type), g) for g in request.group_ids]))
    return [Route(HEARTBEAT_KEY, 0, 1, heartbeat), Route(DESCRIBE_KEY, 0, 1, describe)]


def _enabled(context: RequestContext) -> bool:
    return context.image is None or consumer_group_protocol_enabled(context.image.finalized_features)


def _ms(value) -> int:
    return int(value.total_seconds() * 1000)


def _refused_heartbeat(context: RequestContext, code: ErrorCode, message: str | None):
    return make(load_response_schema(HEARTBEAT_KEY, context.api_version), throttle_time=_NO_THROTTLE,
                error_code=code, error_message=message, member_id=None, member_epoch=i32(0),
                heartbeat_interval=i32Timedelta.parse(datetime.timedelta(0)))


def _refused_describe(module, group_id: str, code: ErrorCode, message: str | None = None):
    return make(module.DescribedGroup, error_code=code, error_message=message, group_id=group_id,
                group_state="", group_epoch=i32(-1), assignment_epoch=i32(-1), assignor_name="", members=(),
                authorized_operations=AUTHORIZED_OPERATIONS_NOT_REQUESTED)


async def handle_heartbeat(host: GroupHost, request, context: RequestContext):
    response_type = load_response_schema(HEARTBEAT_KEY, context.api_version)
    module = module_of(response_type)
    owned = None if request.topic_partitions is None else tuple(
        (tp.topic_id, tuple(int(p) for p in tp.partitions)) for tp in request.topic_partitions)
    names = request.subscribed_topic_names
    code, answer, message = await coordinator_call(
        host, request.group_id, "consumer_group_heartbeat", member_id=request.member_id,
        member_epoch=int(request.member_epoch), instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=_ms(request.rebalance_timeout), client_id=context.client_id,
        client_host=client_host(context.connection_id), subscribed_topic_names=None if names is None else list(names),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor, owned=owned)
    if code != ErrorCode.none:
        return _refused_heartbeat(context, code, message)
    assignment = None if answer.assignment is None else module.Assignment(topic_partitions=tuple(
        module.TopicPartitions(topic_id=topic_id, partitions=tuple(i32(p) for p in parts))
        for topic_id, parts in answer.assignment))
    return make(response_type, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, member_id=answer.member_id,
                member_epoch=i32(answer.member_epoch),
                heartbeat_interval=i32Timedelta.parse(datetime.timedelta(milliseconds=answer.heartbeat_interval_ms)),
                assignment=assignment)


async def _describe(host: GroupHost, module, group_id: str):
    code, described, message = await coordinator_call(host, group_id, "consumer_group_describe")
    if code != ErrorCode.none:
        return _refused_describe(module, group_id, code, message)

    def assignment(by_topic: dict):
        return module.Assignment(topic_partitions=tuple(
            module.TopicPartitions(topic_id=topic_id, topic_name=name, partitions=tuple(i32(p) for p in parts))
            for topic_id, (name, parts) in sorted(by_topic.items())))
    members = tuple(make(module.Member, member_id=m["member_id"], instance_id=m["instance_id"], rack_id=m["rack_id"],
                         member_epoch=i32(m["member_epoch"]), client_id=m["client_id"], client_host=m["client_host"],
                         subscribed_topic_names=tuple(m["subscribed_topic_names"]),
                         subscribed_topic_regex=m["subscribed_topic_regex"],
                         assignment=assignment(m["assigned"]), target_assignment=assignment(m["target"]),
                         member_type=CONSUMER_MEMBER_TYPE)
                    for m in described["members"])
    return make(module.DescribedGroup, error_code=ErrorCode.none, group_id=group_id, group_state=described["state"],
                group_epoch=i32(described["group_epoch"]), assignment_epoch=i32(described["assignment_epoch"]),
                assignor_name=described["assignor"], members=members,
                authorized_operations=AUTHORIZED_OPERATIONS_NOT_REQUESTED)
