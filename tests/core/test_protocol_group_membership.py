"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup on the wire against the
in-process node's real coordinator shard: the assignor chosen from the member's
protocols, the coordinator's assignment in Kafka's consumer protocol bytes, and
Kafka's codes for what is refused."""

import asyncio
import datetime

import pytest
from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v7 import request as join_v7
from kio.schema.leave_group.v5 import request as leave_v5
from kio.schema.sync_group.v5.request import SyncGroupRequest
from kio.serial import entity_reader
from kio.static.primitive import i32, i32Timedelta

from rafka.protocol.connection import Connection
from rafka.protocol.consumer_protocol import encode_subscription
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.core


@pytest.fixture()
def node(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 2}) as node:
        yield node


def join_request(*assignors, protocol_type="consumer", member_id=""):
    subscription = encode_subscription(["orders"])
    return join_v7.JoinGroupRequest(
        group_id="wire-group", session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)), member_id=member_id,
        group_instance_id=None, protocol_type=protocol_type,
        protocols=tuple(join_v7.JoinGroupRequestProtocol(name=a, metadata=subscription) for a in assignors))


def exchange(node, *requests):
    async def go():
        connection = await Connection.open("127.0.0.1", node.coordinator_port)
        try:
            return [await connection.request(r) for r in requests]
        finally:
            await connection.close()
    return asyncio.run(go())


def test_join_and_sync__the_first_assignor_rafka_runs_and_the_coordinators_assignment(node):
    (joined,) = exchange(node, join_request("cooperative-sticky", "roundrobin", "range"))
    assert joined.error_code == ErrorCode.none and joined.protocol_name == "roundrobin"
    assert joined.leader == joined.member_id and joined.generation_id == 1
    assert [m.member_id for m in joined.members] == [joined.member_id]   # the leader sees the members
    synced, beat, stale = exchange(
        node, SyncGroupRequest(group_id="wire-group", generation_id=i32(1), member_id=joined.member_id,
                               group_instance_id=None, protocol_type="consumer", protocol_name="roundrobin",
                               assignments=()),
        HeartbeatRequest(group_id="wire-group", generation_id=i32(1), member_id=joined.member_id,
                         group_instance_id=None),
        HeartbeatRequest(group_id="wire-group", generation_id=i32(0), member_id=joined.member_id,
                         group_instance_id=None))
    assert synced.error_code == ErrorCode.none and synced.assignment[:2] == b"\x00\x00"
    assignment, _ = entity_reader(ConsumerProtocolAssignment)(synced.assignment, 2)
    assert [(t.topic, sorted(t.partitions)) for t in assignment.assigned_partitions] == [("orders", [0, 1])]
    assert beat.error_code == ErrorCode.none and stale.error_code == ErrorCode.illegal_generation
    (left,) = exchange(node, leave_v5.LeaveGroupRequest(group_id="wire-group", members=(
        leave_v5.MemberIdentity(member_id=joined.member_id, group_instance_id=None, reason=None),
        leave_v5.MemberIdentity(member_id="nobody", group_instance_id=None, reason=None))))
    assert [(m.member_id, m.error_code) for m in left.members] == [
        (joined.member_id, ErrorCode.none), ("nobody", ErrorCode.unknown_member_id)]
    assert node.coordinator.shard.describe_group("wire-group")["state"] == "Empty"


@pytest.mark.parametrize("request_", [join_request("cooperative-sticky"),
                                      join_request("range", protocol_type="connect")],
                         ids=["only-cooperative", "not-a-consumer-group"])
def test_join__what_rafka_cannot_coordinate_is_inconsistent_group_protocol(node, request_):
    (joined,) = exchange(node, request_)
    assert joined.error_code == ErrorCode.inconsistent_group_protocol
    assert node.coordinator.shard.describe_group("wire-group")["state"] == "Dead"   # nothing joined


def test_offset_delete__refused_for_a_subscribed_topic_and_an_unknown_group(node):
    from kio.schema.offset_delete.v0 import request as delete_v0

    def delete(group):
        return delete_v0.OffsetDeleteRequest(group_id=group, topics=(delete_v0.OffsetDeleteRequestTopic(
            name="orders", partitions=(delete_v0.OffsetDeleteRequestPartition(partition_index=i32(0)),)),))
    (joined,) = exchange(node, join_request("range"))
    exchange(node, SyncGroupRequest(group_id="wire-group", generation_id=i32(joined.generation_id),
                                    member_id=joined.member_id, group_instance_id=None, protocol_type="consumer",
                                    protocol_name="range", assignments=()))
    asyncio.run_coroutine_threadsafe(node.coordinator.shard.commit_offsets(
        "wire-group", {("orders", 0): (2, -1, "")}, joined.member_id, joined.generation_id), node._loop).result(10)
    subscribed, unknown = exchange(node, delete("wire-group"), delete("no-such-group"))
    assert subscribed.error_code == ErrorCode.none
    assert subscribed.topics[0].partitions[0].error_code == ErrorCode.group_subscribed_to_topic
    assert unknown.error_code == ErrorCode.group_id_not_found and unknown.topics == ()
    assert node.coordinator.shard.fetch_offsets("wire-group")[("orders", 0)][0] == 2


def test_join_and_sync__an_error__null_protocol_type_and_name(node):
    """Kafka's JoinGroup (v7+) and SyncGroup (v5+) error answers leave both at their
    null default; a success names the group's."""
    (refused,) = exchange(node, join_request("range", protocol_type="connect"))
    assert refused.error_code == ErrorCode.inconsistent_group_protocol
    assert (refused.protocol_type, refused.protocol_name) == (None, None)
    (joined,) = exchange(node, join_request("range"))
    assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
    stale, synced = exchange(
        node, SyncGroupRequest(group_id="wire-group", generation_id=i32(9), member_id=joined.member_id,
                               group_instance_id=None, protocol_type="consumer", protocol_name="range",
                               assignments=()),
        SyncGroupRequest(group_id="wire-group", generation_id=joined.generation_id, member_id=joined.member_id,
                         group_instance_id=None, protocol_type="consumer", protocol_name=None, assignments=()))
    assert stale.error_code == ErrorCode.illegal_generation and (stale.protocol_type, stale.protocol_name) == (
        None, None)
    assert synced.error_code == ErrorCode.none and (synced.protocol_type, synced.protocol_name) == (
        "consumer", "range")


def test_join_v6__an_error__empty_protocol_name(node):
    """Before v7 the name is not nullable: JoinGroupResponse answers ""."""
    from kio.schema.join_group.v6 import request as join_v6
    request = join_v6.JoinGroupRequest(
        group_id="wire-group", session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)), member_id="", group_instance_id=None,
        protocol_type="connect", protocols=(join_v6.JoinGroupRequestProtocol(name="range", metadata=b""),))
    (refused,) = exchange(node, request)
    assert refused.error_code == ErrorCode.inconsistent_group_protocol and refused.protocol_name == ""
