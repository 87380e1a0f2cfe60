"""The client side of the group APIs (protocol.group_requests) against the in-process
node's real handlers and coordinator shard: each reader gives what the coordinator
actor's Ray method gives, and raises the same typed errors."""

import asyncio

import pytest

from rafka.core.errors import FencedInstanceId, GroupIdNotFound, IllegalGeneration, OffsetMetadataTooLarge
from rafka.protocol import group_requests as gr
from rafka.protocol.connection import Connection
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.core

GROUP = "billing"


@pytest.fixture()
def node(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 2}) as node:
        yield node


def exchange(node, *requests, client_id="rafka"):
    """The answers to `requests`, sent in order on one connection to the coordinator."""
    async def go():
        connection = await Connection.open("127.0.0.1", node.coordinator_port, client_id=client_id)
        try:
            return [await connection.request(r) for r in requests]
        finally:
            await connection.close()
    return asyncio.run(go())


def join_and_sync(node, *, client_id="rafka", group=GROUP, instance_id=None):
    """A member joined and synced as the leader, giving itself every partition of
    "orders": (its join answer, its assignment)."""
    (joined,) = exchange(node, gr.join_request(group, "", protocols=[("range", gr.subscription(["orders"]))],
                                               session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                                               group_instance_id=instance_id),
                         client_id=client_id)
    member = gr.join_answer(joined)
    (synced,) = exchange(node, gr.sync_request(group, member["member_id"], member["generation"],
                                               protocol_name=member["protocol_name"], group_instance_id=instance_id,
                                               assignments={member["member_id"]: [("orders", 0), ("orders", 1)]}),
                         client_id=client_id)
    return member, gr.sync_answer(synced)


def test_join_and_sync__the_one_member_leads__the_leaders_assignment_comes_back(node):
    member, assignment = join_and_sync(node)
    assert member["member_id"] and member["leader"] == member["member_id"] and member["generation"] == 1
    assert member["protocol_name"] == "range"
    assert member["members"] == {member["member_id"]: (None, ("orders",), ())}
    assert assignment == [("orders", 0), ("orders", 1)]
    described = node.coordinator.shard.describe_group(GROUP)   # what the Ray methods say
    assert (member["generation"], member["leader"]) == (described["generation"], described["leader"])


def test_join__owned_partitions_reach_the_leader_in_the_subscription(node):
    (joined,) = exchange(node, gr.join_request(GROUP, "", protocols=[
        ("range", gr.subscription(["orders"], owned=[("orders", 1)]))],
        session_timeout_ms=10_000, rebalance_timeout_ms=10_000))
    member = gr.join_answer(joined)
    assert member["members"][member["member_id"]] == (None, ("orders",), (("orders", 1),))


def test_commit__a_static_member_named_by_an_old_member_id__fenced_instance_id(node):
    member, _ = join_and_sync(node, instance_id="billing-a")
    (ok, fenced) = exchange(
        node, gr.commit_request(GROUP, {("orders", 0): (3, -1, "")}, member_id=member["member_id"],
                                generation=member["generation"], group_instance_id="billing-a"),
        gr.commit_request(GROUP, {("orders", 0): (4, -1, "")}, member_id="billing-a-old",
                          generation=member["generation"], group_instance_id="billing-a"))
    assert gr.commit_answer(ok) == {("orders", 0): None}
    with pytest.raises(FencedInstanceId):
        gr.commit_answer(fenced)


def test_heartbeat__current_generation_ok__old_generation_raises_illegal_generation(node):
    member, _ = join_and_sync(node)
    current, old = exchange(node, gr.heartbeat_request(GROUP, member["member_id"], member["generation"]),
                            gr.heartbeat_request(GROUP, member["member_id"], member["generation"] - 1))
    assert gr.heartbeat_answer(current) is None
    with pytest.raises(IllegalGeneration):
        gr.heartbeat_answer(old)


def test_commit_then_fetch__offset_leader_epoch_and_metadata_round_trip(node):
    (committed,) = exchange(node, gr.commit_request(GROUP, {("orders", 0): (5, 3, "batch-7")}))
    assert gr.commit_answer(committed) == {("orders", 0): None}
    asked, everything = exchange(node, gr.offset_fetch_request(GROUP, [("orders", 0), ("orders", 1)]),
                                 gr.offset_fetch_request(GROUP, None))
    # the Ray method's answers: asked partitions with None where nothing is committed,
    # all committed ones for None
    assert gr.offset_fetch_answer(asked, GROUP) == node.coordinator.shard.fetch_offsets(
        GROUP, [("orders", 0), ("orders", 1)]) == {("orders", 0): (5, 3, "batch-7"), ("orders", 1): None}
    assert gr.offset_fetch_answer(everything, GROUP) == node.coordinator.shard.fetch_offsets(GROUP) == {
        ("orders", 0): (5, 3, "batch-7")}


def test_commit__a_partitions_error_is_a_value__a_stale_generation_raises(node):
    (answer,) = exchange(node, gr.commit_request(GROUP, {("orders", 0): (1, -1, "x" * 5000),
                                                         ("orders", 1): (2, -1, "")}))
    refused = gr.commit_answer(answer)
    assert isinstance(refused[("orders", 0)], OffsetMetadataTooLarge) and refused[("orders", 1)] is None
    member, _ = join_and_sync(node, group="members")
    (stale,) = exchange(node, gr.commit_request("members", {("orders", 0): (3, -1, "")},
                                                member_id=member["member_id"], generation=member["generation"] + 1))
    with pytest.raises(IllegalGeneration):
        gr.commit_answer(stale)


def test_describe__after_join_the_stable_member_with_client_id_topics_and_assignment(node):
    member, assignment = join_and_sync(node, client_id="billing-1", instance_id="billing-host-1")
    (described,) = exchange(node, gr.describe_request(GROUP))
    answer = gr.describe_answer(described, GROUP)
    assert answer == {"group": GROUP, "state": "Stable", "protocol_type": "consumer", "assignor": "range",
                      "members": {member["member_id"]: {"client_id": "billing-1", "host": "/127.0.0.1",
                                                        "group_instance_id": "billing-host-1",
                                                        "topics": ["orders"], "assignment": assignment}}}


def test_describe__an_unknown_group_is_dead(node):
    (described,) = exchange(node, gr.describe_request("nobody"))
    assert gr.describe_answer(described, "nobody") == {"group": "nobody", "state": "Dead", "protocol_type": "",
                                                       "assignor": "", "members": {}}


def test_list_groups__a_member_group_and_a_commit_only_group(node):
    join_and_sync(node)
    exchange(node, gr.commit_request("assign-only", {("orders", 1): (4, -1, "")}))
    (listed,) = exchange(node, gr.list_groups_request())
    assert gr.list_groups_answer(listed) == [{"group": "assign-only", "state": "Empty"},
                                             {"group": GROUP, "state": "Stable"}]
    assert [g["protocol_type"] for g in node.coordinator.shard.list_groups()] == ["", "consumer"]


def test_leave__then_describe_shows_the_group_empty(node):
    member, _ = join_and_sync(node)
    left, described = exchange(node, gr.leave_request(GROUP, member["member_id"]), gr.describe_request(GROUP))
    assert gr.leave_answer(left) is None
    answer = gr.describe_answer(described, GROUP)
    assert answer["state"] == "Empty" and answer["members"] == {}


def test_delete_group__gone_then_group_id_not_found(node):
    exchange(node, gr.commit_request(GROUP, {("orders", 0): (5, -1, "")}))
    deleted, described, again = exchange(node, gr.delete_groups_request(GROUP), gr.describe_request(GROUP),
                                         gr.delete_groups_request(GROUP))
    assert gr.delete_groups_answer(deleted, GROUP) is None
    assert gr.describe_answer(described, GROUP)["state"] == "Dead"
    with pytest.raises(GroupIdNotFound):
        gr.delete_groups_answer(again, GROUP)


def test_offset_delete__the_commit_is_gone__an_unknown_group_raises(node):
    exchange(node, gr.commit_request(GROUP, {("orders", 0): (5, -1, ""), ("orders", 1): (6, -1, "")}))
    deleted, fetched, unknown = exchange(node, gr.offset_delete_request(GROUP, [("orders", 0)]),
                                         gr.offset_fetch_request(GROUP, None),
                                         gr.offset_delete_request("nobody", [("orders", 0)]))
    assert gr.offset_delete_answer(deleted) == {("orders", 0): None}
    assert gr.offset_fetch_answer(fetched, GROUP) == {("orders", 1): (6, -1, "")}
    with pytest.raises(GroupIdNotFound):
        gr.offset_delete_answer(unknown)
