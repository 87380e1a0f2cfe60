"""JoinGroup v0-9, SyncGroup v0-5, Heartbeat v0-4 and LeaveGroup v0-5: Kafka's
classic group protocol for wire clients, on the group's coordinator node. The
wire layer decodes and encodes; core.group_manager decides (through the
coordinator: the shard in process, the actor in a cluster).

  * JoinGroup: any protocol type ("consumer", "connect", "sr", ...); the
    member's protocols (names and metadata bytes, in its order of preference)
    go to the coordinator as they came: it refuses only a protocol type other
    than the group's, or protocols none of which every member offers
    (INCONSISTENT_GROUP_PROTOCOL), and chooses the group's protocol by Kafka's
    vote. The join parks until the generation completes. The leader's answer
    lists every member with its metadata for the chosen protocol (and its
    group.instance.id); the others get no members. An empty member id gets a new
    one in the answer (KIP-394's MEMBER_ID_REQUIRED round trip is not asked for:
    clients take either answer). group_instance_id (v5+) makes a static member
    (KIP-345). v8's reason (KIP-800) goes to the coordinator's debug log; v9
    (KIP-814) lets a static leader back in a Stable group lead again with
    skip_assignment (before v9 it is told the old leader id and follows).
  * SyncGroup: the leader's assignments (opaque bytes per member) are what every
    member receives; a follower's sync waits for the leader's. v5+ checks the
    request's protocol type and name against the group's
    (INCONSISTENT_GROUP_PROTOCOL) and answers with them.
  * Heartbeat, LeaveGroup: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
    REBALANCE_IN_PROGRESS and FENCED_INSTANCE_ID as the coordinator decides;
    LeaveGroup v3+ batches members, each answered on its own (a member named by
    its group.instance.id alone is an operator's removal).
  * Any of these on a node that does not coordinate the group: NOT_COORDINATOR;
    without READ on the group: GROUP_AUTHORIZATION_FAILED, nothing asked of the
    coordinator (KafkaApis authorizes first).
Caller: the coordinator actor's table, through `routes(host)`.
"""

from __future__ import annotations

import datetime
from typing import Any

from rafka.protocol.entities import load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from rafka.protocol.authorization import decided_host
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import make, module_of
from rafka.protocol.handlers.group_offsets import GroupHost
from rafka.protocol.handlers.partitions import error_code_of

JOIN_KEY, HEARTBEAT_KEY, LEAVE_KEY, SYNC_KEY = 11, 12, 13, 14
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def routes(host: GroupHost) -> list[Route]:
    # READ on the group, else GROUP_AUTHORIZATION_FAILED (protocol.authorization)
    async def join(request, context: RequestContext):
        return await handle_join(decided_host(host, context, request), request, context)

    async def sync(request, context: RequestContext):
        return await handle_sync(decided_host(host, context, request), request, context.api_version)

    async def heartbeat(request, context: RequestContext):
        code = await _member_call(decided_host(host, context, request), request.group_id, "heartbeat",
                                  request.member_id,
                                  int(request.generation_id), getattr(request, "group_instance_id", None))
        return make(load_response_schema(HEARTBEAT_KEY, context.api_version), throttle_time=_NO_THROTTLE,
                    error_code=code)

    async def leave(request, context: RequestContext):
        return await handle_leave(decided_host(host, context, request), request, context.api_version)
    return [Route(JOIN_KEY, 0, 9, join), Route(SYNC_KEY, 0, 5, sync), Route(HEARTBEAT_KEY, 0, 4, heartbeat),
            Route(LEAVE_KEY, 0, 5, leave)]


async def _member_call(host: GroupHost, group_id: str, method: str, *args) -> ErrorCode:
    coordinator = host.coordinator_for(group_id)
    if coordinator is None:
        return ErrorCode.not_coordinator
    try:
        await getattr(coordinator, method)(group_id, *args)
        return ErrorCode.none
    except Exception as error:
        return error_code_of(error)


def client_host(connection_id: str) -> str:
    """Kafka's client_host: "/" and the peer address (from our connection id)."""
    try:
        remote = connection_id.split("-")[1]
        return "/" + remote.rsplit(":", 1)[0]
    except IndexError:
        return ""


async def handle_join(host: GroupHost, request, context: RequestContext):
    response_type = load_response_schema(JOIN_KEY, context.api_version)
    module = module_of(response_type)

    def answer(code: ErrorCode, *, generation=-1, protocol_type=None, protocol=None, leader="", member_id=None,
               members=(), skip_assignment=False):
        # An error carries no protocol: null type (v7+) and name, the name "" before
        # v7 (JoinGroupResponse's constructor; the type's default is null).
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=code, generation_id=i32(generation),
                    protocol_type=protocol_type,
                    protocol_name=protocol if protocol is not None or context.api_version >= 7 else "",
                    leader=leader, member_id=request.member_id if member_id is None else member_id,
                    members=members, skip_assignment=skip_assignment)
    coordinator = host.coordinator_for(request.group_id)
    if coordinator is None:
        return answer(ErrorCode.not_coordinator)
    session_timeout_ms = int(request.session_timeout.total_seconds() * 1000)
    rebalance_timeout = getattr(request, "rebalance_timeout", None)
    rebalance_timeout_ms = (int(rebalance_timeout.total_seconds() * 1000) if rebalance_timeout is not None
                            else session_timeout_ms)   # v0 has none: Kafka uses the session timeout
    try:
        joined = await coordinator.join_group(
            request.group_id, request.member_id, group_instance_id=getattr(request, "group_instance_id", None),
            client_id=context.client_id, client_host=client_host(context.connection_id),
            protocol_type=request.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
            session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
            skip_assignment_supported=context.api_version >= 9, reason=getattr(request, "reason", None))
    except Exception as error:
        return answer(error_code_of(error))
    members = tuple(make(module.JoinGroupResponseMember, member_id=member_id, group_instance_id=instance_id,
                         metadata=metadata)
                    for member_id, instance_id, metadata in joined["members"])
    return answer(ErrorCode.none, generation=joined["generation"], protocol_type=joined["protocol_type"],
                  protocol=joined["protocol_name"], leader=joined["leader"], member_id=joined["member_id"],
                  members=members, skip_assignment=joined["skip_assignment"])


async def handle_sync(host: GroupHost, request, version: int):
    response_type = load_response_schema(SYNC_KEY, version)
    coordinator = host.coordinator_for(request.group_id)
    synced: Any = None
    if coordinator is None:
        code = ErrorCode.not_coordinator
    else:
        try:
            synced = await coordinator.sync_group(
                request.group_id, request.member_id, int(request.generation_id),
                group_instance_id=getattr(request, "group_instance_id", None),
                protocol_type=getattr(request, "protocol_type", None),
                protocol_name=getattr(request, "protocol_name", None),
                assignments={a.member_id: bytes(a.assignment) for a in request.assignments})
            code = ErrorCode.none
        except Exception as error:
            code = error_code_of(error)
    # v5+: the group's protocol type and name with an assignment, null with an
    # error (GroupMetadataManager's sync answers; their defaults are null).
    if synced is None:
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=code, protocol_type=None,
                    protocol_name=None, assignment=b"")
    return make(response_type, throttle_time=_NO_THROTTLE, error_code=code, protocol_type=synced["protocol_type"],
                protocol_name=synced["protocol_name"], assignment=synced["assignment"])


async def handle_leave(host: GroupHost, request, version: int):
    response_type = load_response_schema(LEAVE_KEY, version)
    coordinator = host.coordinator_for(request.group_id)
    if version < 3:
        members = [(request.member_id, None)]
    else:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    errors: list = []
    if coordinator is None:
        top = ErrorCode.not_coordinator
    else:
        try:
            errors, top = await coordinator.leave_group(request.group_id, members), ErrorCode.none
        except Exception as error:
            top = error_code_of(error)
    if version < 3:
        code = top if top != ErrorCode.none else (error_code_of(errors[0]) if errors[0] else ErrorCode.none)
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=code)
    module = module_of(response_type)
    answers = tuple(make(module.MemberResponse, member_id=member_id, group_instance_id=instance_id,
                         error_code=error_code_of(error) if error is not None else ErrorCode.none)
                    for (member_id, instance_id), error in zip(members, errors)) if top == ErrorCode.none else ()
    return make(response_type, throttle_time=_NO_THROTTLE, error_code=top, members=answers)
