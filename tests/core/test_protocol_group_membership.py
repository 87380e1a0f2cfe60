"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup on the wire against the
in-process node's real coordinator shard: any protocol type, the protocol chosen
by vote, the leader's assignment relayed to every member as it sent it, static
membership, and Kafka's codes for what is refused."""

import asyncio
import datetime

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v7 import request as join_v7
from kio.schema.join_group.v9 import request as join_v9
from kio.schema.leave_group.v5 import request as leave_v5
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.static.primitive import i32, i32Timedelta

from rafka.protocol.connection import Connection
from rafka.protocol.consumer_protocol import encode_assignment, encode_subscription
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.core


@pytest.fixture()
def node(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 2}) as node:
        yield node


def join_request(*assignors, protocol_type="consumer", member_id="", instance=None, group="wire-group",
                 metadata=None):
    subscription = encode_subscription(["orders"]) if metadata is None else metadata
    return join_v7.JoinGroupRequest(
        group_id=group, session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)), member_id=member_id,
        group_instance_id=instance, protocol_type=protocol_type,
        protocols=tuple(join_v7.JoinGroupRequestProtocol(name=a, metadata=subscription) for a in assignors))


def sync_request(joined, assignments=(), *, instance=None, group="wire-group", protocol_type="consumer"):
    return SyncGroupRequest(group_id=group, generation_id=i32(joined.generation_id), member_id=joined.member_id,
                            group_instance_id=instance, protocol_type=protocol_type,
                            protocol_name=joined.protocol_name,
                            assignments=tuple(SyncGroupRequestAssignment(member_id=m, assignment=a)
                                              for m, a in assignments))


def exchange(node, *requests):
    async def go():
        connection = await Connection.open("127.0.0.1", node.coordinator_port)
        try:
            return [await connection.request(r) for r in requests]
        finally:
            await connection.close()
    return asyncio.run(go())


def test_join_and_sync__any_protocol_a_member_offers__the_leaders_assignment_comes_back(node):
    (joined,) = exchange(node, join_request("cooperative-sticky", "roundrobin", "range"))
    assert joined.error_code == ErrorCode.none and joined.protocol_name == "cooperative-sticky"
    assert joined.leader == joined.member_id and joined.generation_id == 1
    assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id,
                                                                    encode_subscription(["orders"]))]
    assignment = encode_assignment([("orders", 0), ("orders", 1)])
    synced, beat, stale = exchange(
        node, sync_request(joined, [(joined.member_id, assignment)]),
        HeartbeatRequest(group_id="wire-group", generation_id=i32(1), member_id=joined.member_id,
                         group_instance_id=None),
        HeartbeatRequest(group_id="wire-group", generation_id=i32(0), member_id=joined.member_id,
                         group_instance_id=None))
    assert synced.error_code == ErrorCode.none and synced.assignment == assignment
    assert beat.error_code == ErrorCode.none and stale.error_code == ErrorCode.illegal_generation
    (left,) = exchange(node, leave_v5.LeaveGroupRequest(group_id="wire-group", members=(
        leave_v5.MemberIdentity(member_id=joined.member_id, group_instance_id=None, reason=None),
        leave_v5.MemberIdentity(member_id="nobody", group_instance_id=None, reason=None))))
    assert [(m.member_id, m.error_code) for m in left.members] == [
        (joined.member_id, ErrorCode.none), ("nobody", ErrorCode.unknown_member_id)]
    assert node.coordinator.shard.describe_group("wire-group")["state"] == "Empty"


def test_connect_group__two_workers__the_leader_sees_both__each_gets_its_part_of_the_leaders_assignment(node):
    """A protocol type other than "consumer" (Kafka Connect's WorkerCoordinator):
    opaque metadata and assignments, relayed as they came."""
    async def go():
        first = await Connection.open("127.0.0.1", node.coordinator_port)
        second = await Connection.open("127.0.0.1", node.coordinator_port)
        try:
            def join(i, member_id=""):
                return join_request("sessioned", "default", protocol_type="connect", member_id=member_id,
                                    metadata=f"worker-{i}".encode())
            alone = await first.request(join(0))
            await first.request(sync_request(alone, [(alone.member_id, b"everything")], protocol_type="connect"))
            arriving = asyncio.create_task(second.request(join(1)))     # parks: a rebalance starts
            await asyncio.sleep(0.1)
            leader = await first.request(join(0, alone.member_id))      # the first worker rejoins
            follower = await arriving
            assert leader.leader == leader.member_id and follower.leader == leader.member_id
            assert leader.generation_id == follower.generation_id == 2
            assert {m.metadata for m in leader.members} == {b"worker-0", b"worker-1"} and follower.members == ()
            follower_sync = asyncio.create_task(second.request(sync_request(follower, protocol_type="connect")))
            await asyncio.sleep(0.1)
            assert not follower_sync.done()          # waits for the leader's assignment
            leader_synced = await first.request(sync_request(
                leader, [(leader.member_id, b"tasks-0,1"), (follower.member_id, b"tasks-2")],
                protocol_type="connect"))
            return leader, leader_synced, await follower_sync
        finally:
            await first.close()
            await second.close()
    leader, leader_synced, follower_synced = asyncio.run(go())
    assert leader.protocol_type == "connect" and leader.protocol_name == "sessioned"
    assert (leader_synced.assignment, follower_synced.assignment) == (b"tasks-0,1", b"tasks-2")
    assert (follower_synced.protocol_type, follower_synced.protocol_name) == ("connect", "sessioned")
    listed = node.coordinator.shard.list_groups()
    assert listed == [{"group": "wire-group", "state": "Stable", "protocol_type": "connect", "type": "classic"}]


def test_static_member__rejoins_with_a_new_id_and_keeps_its_assignment__the_old_id_is_fenced(node):
    (joined,) = exchange(node, join_request("range", instance="host-1"))
    assignment = encode_assignment([("orders", 0), ("orders", 1)])
    exchange(node, sync_request(joined, [(joined.member_id, assignment)], instance="host-1"))
    (again,) = exchange(node, join_request("range", instance="host-1"))
    assert again.error_code == ErrorCode.none and again.member_id != joined.member_id
    assert again.generation_id == joined.generation_id == 1        # no rebalance
    assert again.leader == joined.member_id and again.members == ()  # told it follows: it does not reassign
    synced, old_beat, old_leave, leave_by_instance = exchange(
        node, sync_request(again, instance="host-1"),
        HeartbeatRequest(group_id="wire-group", generation_id=i32(1), member_id=joined.member_id,
                         group_instance_id="host-1"),
        leave_v5.LeaveGroupRequest(group_id="wire-group", members=(
            leave_v5.MemberIdentity(member_id=joined.member_id, group_instance_id="host-1", reason=None),)),
        leave_v5.LeaveGroupRequest(group_id="wire-group", members=(
            leave_v5.MemberIdentity(member_id="", group_instance_id="host-1", reason="operator"),)))
    assert synced.error_code == ErrorCode.none and synced.assignment == assignment
    assert old_beat.error_code == ErrorCode.fenced_instance_id
    assert old_leave.members[0].error_code == ErrorCode.fenced_instance_id
    assert leave_by_instance.members[0].error_code == ErrorCode.none
    assert node.coordinator.shard.describe_group("wire-group")["state"] == "Empty"


def test_join_v9__a_static_leader_back_in_a_stable_group__leads_again_told_to_skip_assignment(node):
    def join_v9_request(reason):
        return join_v9.JoinGroupRequest(
            group_id="wire-group", session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
            rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)), member_id="",
            group_instance_id="host-1", protocol_type="consumer", reason=reason,
            protocols=(join_v9.JoinGroupRequestProtocol(name="range", metadata=encode_subscription(["orders"])),))
    (joined,) = exchange(node, join_v9_request("first start"))
    assert (joined.error_code, joined.leader, joined.skip_assignment) == (ErrorCode.none, joined.member_id, False)
    assignment = encode_assignment([("orders", 0), ("orders", 1)])
    exchange(node, sync_request(joined, [(joined.member_id, assignment)], instance="host-1"))
    (again,) = exchange(node, join_v9_request("restarted"))
    assert again.error_code == ErrorCode.none and again.member_id != joined.member_id
    assert (again.generation_id, again.leader, again.skip_assignment) == (1, again.member_id, True)
    assert [(m.member_id, m.group_instance_id) for m in again.members] == [(again.member_id, "host-1")]
    (synced,) = exchange(node, sync_request(again, instance="host-1"))   # skipped: sends no assignment
    assert synced.error_code == ErrorCode.none and synced.assignment == assignment


@pytest.mark.parametrize("request_", [join_request("range", protocol_type="connect"),
                                      join_request("roundrobin")],
                         ids=["another-protocol-type", "no-common-protocol"])
def test_join__a_type_or_protocols_the_group_cannot_take__inconsistent_group_protocol(node, request_):
    (first,) = exchange(node, join_request("range"))
    exchange(node, sync_request(first))
    (joined,) = exchange(node, request_)
    assert joined.error_code == ErrorCode.inconsistent_group_protocol
    assert list(node.coordinator.shard.describe_group("wire-group")["members"]) == [first.member_id]


def test_offset_delete__refused_for_a_subscribed_topic_and_an_unknown_group(node):
    from kio.schema.offset_delete.v0 import request as delete_v0

    def delete(group):
        return delete_v0.OffsetDeleteRequest(group_id=group, topics=(delete_v0.OffsetDeleteRequestTopic(
            name="orders", partitions=(delete_v0.OffsetDeleteRequestPartition(partition_index=i32(0)),)),))
    (joined,) = exchange(node, join_request("range"))
    exchange(node, sync_request(joined))
    asyncio.run_coroutine_threadsafe(node.coordinator.shard.commit_offsets(
        "wire-group", {("orders", 0): (2, -1, "")}, joined.member_id, joined.generation_id), node._loop).result(10)
    subscribed, unknown = exchange(node, delete("wire-group"), delete("no-such-group"))
    assert subscribed.error_code == ErrorCode.none
    assert subscribed.topics[0].partitions[0].error_code == ErrorCode.group_subscribed_to_topic
    assert unknown.error_code == ErrorCode.group_id_not_found and unknown.topics == ()
    assert node.coordinator.shard.fetch_offsets("wire-group")[("orders", 0)][0] == 2


def test_join_and_sync__an_error__null_protocol_type_and_name(node):
    """Kafka's JoinGroup (v7+) and SyncGroup (v5+) error answers leave both at their
    null default; a success names the group's; a SyncGroup naming another protocol
    is INCONSISTENT_GROUP_PROTOCOL."""
    (refused,) = exchange(node, join_request(protocol_type="connect"))   # no protocols at all
    assert refused.error_code == ErrorCode.inconsistent_group_protocol
    assert (refused.protocol_type, refused.protocol_name) == (None, None)
    (joined,) = exchange(node, join_request("range"))
    assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
    stale, other, synced = exchange(
        node, SyncGroupRequest(group_id="wire-group", generation_id=i32(9), member_id=joined.member_id,
                               group_instance_id=None, protocol_type="consumer", protocol_name="range",
                               assignments=()),
        SyncGroupRequest(group_id="wire-group", generation_id=joined.generation_id, member_id=joined.member_id,
                         group_instance_id=None, protocol_type="consumer", protocol_name="sticky", assignments=()),
        SyncGroupRequest(group_id="wire-group", generation_id=joined.generation_id, member_id=joined.member_id,
                         group_instance_id=None, protocol_type="consumer", protocol_name=None, assignments=()))
    assert stale.error_code == ErrorCode.illegal_generation and (stale.protocol_type, stale.protocol_name) == (
        None, None)
    assert other.error_code == ErrorCode.inconsistent_group_protocol
    assert synced.error_code == ErrorCode.none and (synced.protocol_type, synced.protocol_name) == (
        "consumer", "range")


def test_join_v6__an_error__empty_protocol_name(node):
    """Before v7 the name is not nullable: JoinGroupResponse answers ""."""
    from kio.schema.join_group.v6 import request as join_v6
    request = join_v6.JoinGroupRequest(
        group_id="wire-group", session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)), member_id="", group_instance_id=None,
        protocol_type="connect", protocols=())
    (refused,) = exchange(node, request)
    assert refused.error_code == ErrorCode.inconsistent_group_protocol and refused.protocol_name == ""
