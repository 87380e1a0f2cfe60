"""ListGroups, DescribeGroups and DeleteGroups on the wire, over a stand-in
coordinator: Kafka's codes per group, and member bytes as the members sent them."""

import asyncio

import pytest
from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.serial import entity_reader

from rafka.core.errors import GroupIdNotFound, NonEmptyGroup
from rafka.protocol.consumer_protocol import encode_assignment, encode_subscription
from rafka.protocol.dispatch import DispatchTable, Dispatcher
from rafka.protocol.handlers import api_versions, group_admin
from tests.core.test_protocol_dispatch import read_response, request_frame

pytestmark = pytest.mark.core


class StandInCoordinator:
    """Coordinates the groups whose names start with "mine"."""

    def __init__(self):
        self.deleted = []

    def coordinator_for(self, group_id):
        return self if group_id.startswith("mine") else None

    async def list_groups(self):
        return [{"group": "mine-a", "state": "Stable", "protocol_type": "consumer"},
                {"group": "mine-b", "state": "Empty", "protocol_type": ""},
                {"group": "mine-c", "state": "CompletingRebalance", "protocol_type": "connect"}]

    async def describe_group(self, group):
        if group == "mine-a":
            return {"group": group, "state": "Stable", "generation": 3, "leader": "m1", "protocol_type": "consumer",
                    "protocol": "range",
                    "members": {"m1": {"client_id": "c1", "host": "/10.0.0.1", "group_instance_id": "host-1",
                                       "metadata": encode_subscription(["t"]),
                                       "assignment": encode_assignment([("t", 0), ("t", 1)])}}}
        if group == "mine-c":
            return {"group": group, "state": "CompletingRebalance", "generation": 4, "leader": "w1",
                    "protocol_type": "connect", "protocol": "sessioned",
                    "members": {"w1": {"client_id": "worker", "host": "/10.0.0.2", "group_instance_id": None,
                                       "metadata": b"connect-metadata", "assignment": b""}}}
        return {"group": group, "state": "Dead", "generation": -1, "leader": None, "protocol_type": "",
                "protocol": None, "members": {}}

    async def delete_group(self, group):
        if group == "mine-a":
            raise NonEmptyGroup("has members")
        if group == "mine-gone":
            raise GroupIdNotFound("no such group")
        self.deleted.append(group)


def ask(routes, api_key, version, request):
    dispatcher = Dispatcher(DispatchTable([api_versions.ROUTE, *routes]))
    frame = asyncio.run(dispatcher.dispatch(request_frame(api_key, version, request)))
    return read_response(frame, api_key, version)[1]


def test_list_groups__a_coordinators_groups_filtered_by_state_and_none_elsewhere():
    coordinator = StandInCoordinator()
    listed = ask([group_admin.list_groups_route(coordinator.list_groups)], 16, 4, ListGroupsRequest(states_filter=()))
    assert [(g.group_id, g.group_state, g.protocol_type) for g in listed.groups] == [
        ("mine-a", "Stable", "consumer"), ("mine-b", "Empty", ""), ("mine-c", "CompletingRebalance", "connect")]
    stable = ask([group_admin.list_groups_route(coordinator.list_groups)], 16, 4,
                 ListGroupsRequest(states_filter=("Stable",)))
    assert [g.group_id for g in stable.groups] == ["mine-a"]
    elsewhere = ask([group_admin.list_groups_route(None)], 16, 4, ListGroupsRequest(states_filter=()))
    assert elsewhere.error_code == ErrorCode.none and elsewhere.groups == ()


def test_describe_groups__members_bytes_as_they_came_while_stable__none_otherwise__kafkas_codes():
    routes = group_admin.coordinator_routes(StandInCoordinator())
    answer = ask(routes, 15, 5, DescribeGroupsRequest(groups=("mine-a", "mine-c", "mine-unknown", "theirs"),
                                                      include_authorized_operations=False))
    stable, rebalancing, unknown, theirs = answer.groups
    assert (stable.error_code, stable.group_state, stable.protocol_type, stable.protocol_data) == (
        ErrorCode.none, "Stable", "consumer", "range")
    (member,) = stable.members
    assert member.group_instance_id == "host-1"
    subscription, _ = entity_reader(ConsumerProtocolSubscription)(member.member_metadata, 2)
    assignment, _ = entity_reader(ConsumerProtocolAssignment)(member.member_assignment, 2)
    assert member.member_metadata[:2] == member.member_assignment[:2] == b"\x00\x00"   # version 0
    assert subscription.topics == ("t",)
    assert [(t.topic, tuple(t.partitions)) for t in assignment.assigned_partitions] == [("t", (0, 1))]
    # Kafka's describeNoMetadata outside Stable: the type, no protocol, members without bytes
    assert (rebalancing.protocol_type, rebalancing.protocol_data) == ("connect", "")
    assert [(m.member_id, m.member_metadata, m.member_assignment) for m in rebalancing.members] == [
        ("w1", b"", b"")]
    assert (unknown.error_code, unknown.group_state) == (ErrorCode.none, "Dead")
    assert theirs.error_code == ErrorCode.not_coordinator


def test_delete_groups__each_group_its_own_code():
    coordinator = StandInCoordinator()
    answer = ask(group_admin.coordinator_routes(coordinator), 42, 2,
                 DeleteGroupsRequest(groups_names=("mine-a", "mine-gone", "mine-old", "theirs")))
    assert [(r.group_id, r.error_code) for r in answer.results] == [
        ("mine-a", ErrorCode.non_empty_group), ("mine-gone", ErrorCode.group_id_not_found),
        ("mine-old", ErrorCode.none), ("theirs", ErrorCode.not_coordinator)]
    assert coordinator.deleted == ["mine-old"]
