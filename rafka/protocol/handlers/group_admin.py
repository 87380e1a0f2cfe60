"""ListGroups v0-5 (every node), DescribeGroups v0-5 and DeleteGroups v0-2 (the
group's coordinator node).

What Kafka answers (KafkaApis.handleListGroupsRequest / handleDescribeGroupsRequest
/ handleDeleteGroupsRequest), and what these handlers do the same way:
  * ListGroups: the groups this node coordinates (admin clients ask every node
    and merge); a node that coordinates none answers an empty list, no error;
    states_filter (v4) keeps groups in the named states, types_filter (v5) those
    of the named types ("classic", "consumer": KIP-848's), both case-insensitive.
  * ListGroups answers each group's protocol type ("" for one known only by
    its offsets) and (v5) its type.
  * DescribeGroups: per group; a group coordinated elsewhere: NOT_COORDINATOR; an
    unknown one: state Dead, no error (Kafka's answer). The group's protocol type;
    while Stable, protocol_data is its protocol and members carry their metadata
    and assignment bytes as the members sent them (other states: empty, as
    Kafka's describeNoMetadata); authorized operations are not computed
    (INT32_MIN).
  * DeleteGroups: per group; NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND or
    NOT_COORDINATOR as the coordinator decides; acked once the tombstones are
    replicated.
  * authorization (KafkaApis): ListGroups lists the groups the caller may
    DESCRIBE (all of them with DESCRIBE on the cluster); DescribeGroups needs
    DESCRIBE and DeleteGroups DELETE on each group, a refused one answered
    GROUP_AUTHORIZATION_FAILED without asking its coordinator.
Callers: actors.serving (ListGroups on every node) and the coordinator actor.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from typing import Protocol

from rafka.protocol.entities import load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from rafka.core.acl import AclOperation, ResourceType
from rafka.protocol.authorization import check_of, decided_host, gate
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import make, module_of
from rafka.protocol.handlers.group_offsets import GroupHost, coordinator_call
from rafka.protocol.handlers.partitions import error_code_of

LIST_KEY, DESCRIBE_KEY, DELETE_KEY = 16, 15, 42
AUTHORIZED_OPERATIONS_NOT_REQUESTED = i32(-2**31)
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
LIST_DESCRIBE = check_of(LIST_KEY, AclOperation.DESCRIBE, ResourceType.GROUP)   # unless DESCRIBE on the cluster


class GroupAdminEndpoint(Protocol):
    async def describe_group(self, group: str) -> dict: ...

    async def delete_group(self, group: str) -> None: ...


def list_groups_route(list_groups: Callable[[], Awaitable[list[dict]]] | None) -> Route:
    """`list_groups`: the node's groups ([{group, state}]); None for a node that
    coordinates none."""
    async def handle_list_groups(request, context: RequestContext):
        response_type = load_response_schema(LIST_KEY, context.api_version)
        module = module_of(response_type)
        try:
            groups, code = (await list_groups() if list_groups else []), ErrorCode.none
        except Exception as error:
            groups, code = [], error_code_of(error)
        wanted = {s.lower() for s in getattr(request, "states_filter", ()) or ()}
        types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
        request_gate = gate(context)
        listed = tuple(make(module.ListedGroup, group_id=g["group"], protocol_type=g.get("protocol_type", ""),
                            group_state=g["state"], group_type=g.get("type", "classic"))
                       for g in groups if (not wanted or g["state"].lower() in wanted)
                       and (not types or g.get("type", "classic") in types)
                       and request_gate.allows(LIST_DESCRIBE, g["group"]))
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=code, groups=listed)
    return Route(LIST_KEY, 0, 5, handle_list_groups)


def coordinator_routes(host: GroupHost) -> list[Route]:
    async def handle_describe(request, context: RequestContext):
        response_type = load_response_schema(DESCRIBE_KEY, context.api_version)
        module = module_of(response_type)
        decided = decided_host(host, context, request)
        return make(response_type, throttle_time=_NO_THROTTLE,
                    groups=tuple([await _describe(decided, module, g) for g in request.groups]))

    async def handle_delete(request, context: RequestContext):
        response_type = load_response_schema(DELETE_KEY, context.api_version)
        module = module_of(response_type)
        decided = decided_host(host, context, request)
        results = []
        for group_id in request.groups_names:
            coordinator = decided.coordinator_for(group_id)
            code = ErrorCode.not_coordinator
            if coordinator is not None:
                try:
                    await coordinator.delete_group(group_id)
                    code = ErrorCode.none
                except Exception as error:
                    code = error_code_of(error)
            results.append(make(module.DeletableGroupResult, group_id=group_id, error_code=code))
        return make(response_type, throttle_time=_NO_THROTTLE, results=tuple(results))
    return [Route(DESCRIBE_KEY, 0, 5, handle_describe), Route(DELETE_KEY, 0, 2, handle_delete)]


async def _describe(host: GroupHost, module, group_id: str):
    def empty(code: ErrorCode, state: str = ""):
        return make(module.DescribedGroup, error_code=code, group_id=group_id, group_state=state,
                    protocol_type="", protocol_data="", members=(),
                    authorized_operations=AUTHORIZED_OPERATIONS_NOT_REQUESTED)
    code, described, _ = await coordinator_call(host, group_id, "describe_group")
    if code != ErrorCode.none:
        return empty(code)
    # Kafka's describeGroups: members' metadata and assignment only while Stable
    # (protocol_data is then the group's protocol), empty bytes otherwise.
    stable = described["state"] == "Stable"
    members = tuple(make(module.DescribedGroupMember, member_id=member_id, group_instance_id=m["group_instance_id"],
                         client_id=m["client_id"], client_host=m["host"],
                         member_metadata=m["metadata"] if stable else b"",
                         member_assignment=m["assignment"] if stable else b"")
                    for member_id, m in described["members"].items())
    return make(module.DescribedGroup, error_code=ErrorCode.none, group_id=group_id,
                group_state=described["state"], protocol_type=described["protocol_type"],
                protocol_data=(described["protocol"] or "") if stable else "", members=members,
                authorized_operations=AUTHORIZED_OPERATIONS_NOT_REQUESTED)
