"""JoinGroup v0-7, SyncGroup v0-5, Heartbeat v0-4 and LeaveGroup v0-5: Kafka's
classic group protocol for wire clients, on the group's coordinator node.

rafka's coordinator assigns partitions itself (DESIGN section 5), where Kafka's
leader member does. For wire clients that is done so that they cannot tell:
  * JoinGroup: protocol type must be "consumer" (INCONSISTENT_GROUP_PROTOCOL
    otherwise). The member's protocols are assignor names in its order of
    preference, each with its subscription; the first one rafka implements
    (range, roundrobin, sticky: the eager ones) is taken; a member offering none
    of them, or none that the group's current members use, gets
    INCONSISTENT_GROUP_PROTOCOL (Kafka's GroupMetadata.supportsProtocols).
    Cooperative assignors are not offered: rafka's rebalances are eager, and a
    client that speaks only cooperative-sticky is refused rather than given an
    eager assignment it would not revoke from in time.
    The join parks until the generation completes, as in Kafka. The leader gets
    the member list with each subscription (it runs its assignor; see SyncGroup).
    An empty member id gets a new one in the answer (KIP-394's
    MEMBER_ID_REQUIRED round trip is not needed: clients take either answer).
  * SyncGroup: every member, the leader included, gets the assignment rafka's
    coordinator computed with the chosen assignor, as Kafka's consumer protocol
    bytes; the leader's assignments in the request are not used. For eager
    assignors that is what the leader would have computed over the same members
    (rafka's range and roundrobin are Kafka's algorithms; sticky keeps its goals).
  * Heartbeat and LeaveGroup: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION and
    REBALANCE_IN_PROGRESS as the coordinator decides; LeaveGroup v3+ answers per
    member. group_instance_id (static membership, KIP-345) is ignored: such
    members are treated as dynamic ones.
  * Any of these on a node that does not coordinate the group: NOT_COORDINATOR.
Caller: the coordinator actor's table, through `routes(host)`.
"""

from __future__ import annotations

import datetime
from typing import Any

from rafka.protocol.entities import load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from rafka.core.assignors import ASSIGNORS
from rafka.core.errors import InconsistentGroupProtocol, InvalidRequest
from rafka.protocol.consumer_protocol import decode_subscription, encode_assignment, encode_subscription
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import make, module_of
from rafka.protocol.handlers.group_offsets import GroupHost
from rafka.protocol.handlers.partitions import error_code_of

JOIN_KEY, HEARTBEAT_KEY, LEAVE_KEY, SYNC_KEY = 11, 12, 13, 14
PROTOCOL_TYPE = "consumer"
EAGER_ASSIGNORS = frozenset(ASSIGNORS)   # range, roundrobin, sticky
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def routes(host: GroupHost) -> list[Route]:
    async def join(request, context: RequestContext):
        return await handle_join(host, request, context)

    async def sync(request, context: RequestContext):
        return await handle_sync(host, request, context.api_version)

    async def heartbeat(request, context: RequestContext):
        code = await _member_call(host, request.group_id, "heartbeat", request.member_id,
                                  int(request.generation_id))
        return make(load_response_schema(HEARTBEAT_KEY, context.api_version), throttle_time=_NO_THROTTLE,
                    error_code=code)

    async def leave(request, context: RequestContext):
        return await handle_leave(host, request, context.api_version)
    return [Route(JOIN_KEY, 0, 7, join), Route(SYNC_KEY, 0, 5, sync), Route(HEARTBEAT_KEY, 0, 4, heartbeat),
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


def choose_protocol(protocols, group_assignor: str | None) -> tuple[str, bytes]:
    """(assignor name, subscription bytes) of the member's first protocol rafka
    can run (and, if the group has members, the group's own)."""
    for protocol in protocols:
        if protocol.name in EAGER_ASSIGNORS and group_assignor in (None, protocol.name):
            return protocol.name, protocol.metadata
    offered = ", ".join(p.name for p in protocols)
    wanted = f"the group's {group_assignor}" if group_assignor else f"one of {sorted(EAGER_ASSIGNORS)}"
    raise InconsistentGroupProtocol(f"the member offers [{offered}], the coordinator needs {wanted}")


async def handle_join(host: GroupHost, request, context: RequestContext):
    response_type = load_response_schema(JOIN_KEY, context.api_version)
    module = module_of(response_type)

    def answer(code: ErrorCode, *, generation=-1, protocol=None, leader="", member_id=None, members=()):
        # An error carries no protocol: null type (v7+) and name, the name "" before
        # v7 (JoinGroupResponse's constructor; the type's default is null).
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=code, generation_id=i32(generation),
                    protocol_type=PROTOCOL_TYPE if protocol else None,
                    protocol_name=protocol if protocol or context.api_version >= 7 else "", leader=leader,
                    member_id=request.member_id if member_id is None else member_id, members=members)
    coordinator = host.coordinator_for(request.group_id)
    if coordinator is None:
        return answer(ErrorCode.not_coordinator)
    try:
        if request.protocol_type != PROTOCOL_TYPE:
            raise InconsistentGroupProtocol(f"protocol type {request.protocol_type!r}: rafka coordinates "
                                            f"{PROTOCOL_TYPE!r} groups only")
        current = await coordinator.describe_group(request.group_id)
        group_assignor = current["assignor"] if current["members"] else None
        assignor_name, subscription = choose_protocol(request.protocols, group_assignor)
        topics, owned = decode_subscription(subscription)
        if not topics:
            raise InvalidRequest("a subscription to no topic")
        session_timeout_ms = int(request.session_timeout.total_seconds() * 1000)
        rebalance_timeout = getattr(request, "rebalance_timeout", None)
        rebalance_timeout_ms = (int(rebalance_timeout.total_seconds() * 1000) if rebalance_timeout is not None
                                else session_timeout_ms)   # v0 has none: Kafka uses the session timeout
        joined = await coordinator.join_group(
            request.group_id, request.member_id, client_id=context.client_id,
            client_host=client_host(context.connection_id), topics=list(topics),
            session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
            assignor_name=assignor_name, owned=list(owned))
    except InconsistentGroupProtocol:
        return answer(ErrorCode.inconsistent_group_protocol)
    except Exception as error:
        return answer(error_code_of(error))
    members = ()
    if joined["leader"] == joined["member_id"]:
        described = await coordinator.describe_group(request.group_id)
        members = tuple(make(module.JoinGroupResponseMember, member_id=member_id, group_instance_id=None,
                             metadata=encode_subscription(m["topics"]))
                        for member_id, m in described["members"].items())
    return answer(ErrorCode.none, generation=joined["generation"], protocol=assignor_name,
                  leader=joined["leader"], member_id=joined["member_id"], members=members)


async def handle_sync(host: GroupHost, request, version: int):
    response_type = load_response_schema(SYNC_KEY, version)
    coordinator = host.coordinator_for(request.group_id)
    assignment: Any = None
    if coordinator is None:
        code = ErrorCode.not_coordinator
    else:
        try:
            assignment = await coordinator.sync_group(request.group_id, request.member_id,
                                                      int(request.generation_id))
            code = ErrorCode.none
        except Exception as error:
            code = error_code_of(error)
    # v5+: the group's protocol type and name with an assignment, null with an
    # error (GroupMetadataManager's sync answers; their defaults are null).
    protocol_type = protocol_name = None
    if code == ErrorCode.none and version >= 5:
        protocol_type = PROTOCOL_TYPE
        protocol_name = request.protocol_name or (await coordinator.describe_group(request.group_id))["assignor"]
    return make(response_type, throttle_time=_NO_THROTTLE, error_code=code, protocol_type=protocol_type,
                protocol_name=protocol_name,
                assignment=encode_assignment(map(tuple, assignment)) if assignment is not None else b"")


async def handle_leave(host: GroupHost, request, version: int):
    response_type = load_response_schema(LEAVE_KEY, version)
    if version < 3:
        code = await _member_call(host, request.group_id, "leave_group", request.member_id)
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=code)
    module = module_of(response_type)
    answers = []
    for member in request.members:
        code = await _member_call(host, request.group_id, "leave_group", member.member_id)
        answers.append(make(module.MemberResponse, member_id=member.member_id,
                            group_instance_id=member.group_instance_id, error_code=code))
    top = ErrorCode.not_coordinator if host.coordinator_for(request.group_id) is None else ErrorCode.none
    return make(response_type, throttle_time=_NO_THROTTLE, error_code=top, members=tuple(answers))
