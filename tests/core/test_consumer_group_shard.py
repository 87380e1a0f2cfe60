"""Consumer groups of the new protocol (KIP-848) through the coordinator shard:
heartbeats written to the offsets partition and replayed, a coordinator failover
(a fresh shard replaying what the partition holds), session expiry on the
ticker, member-epoch offset commits, and a group id wanted by both protocols."""

import asyncio
import uuid

import pytest

from rafka.core.clock import FakeClock
from rafka.core.consumer_group import ConsumerGroups
from rafka.core.coordinator_shard import CoordinatorShard
from rafka.core.errors import (CoordinatorNotAvailable, GroupIdNotFound, GroupSubscribedToTopic,
                               InconsistentGroupProtocol, NonEmptyGroup, StaleMemberEpoch)
from rafka.core.group_manager import GroupManager
from rafka.core.offset_store import OffsetStore
from tests.core import test_coordinator_shard as coordinator_shard_tests
from tests.core.test_coordinator_shard import FakeOffsetsPartition, join, sync

pytestmark = pytest.mark.core
G = "billing"
ORDERS, RETURNS = uuid.UUID(int=0xA1), uuid.UUID(int=0xA2)
SESSION_MS = 45_000


async def topic_metadata(topics):
    known = {"orders": (ORDERS, 4), "returns": (RETURNS, 1)}
    return {t: known[t] for t in (topics if topics is not None else ("orders",)) if t in known}


async def partitions_per_topic(topics):
    return {t: count for t, (_, count) in (await topic_metadata(topics)).items()}


def shard_on(partition, clock):
    return CoordinatorShard(offsets=OffsetStore(offsets_retention_ms=24 * 3_600_000),
                            groups=GroupManager(group_initial_rebalance_delay_ms=0), clock=clock,
                            append=partition.append, partitions_per_topic=partitions_per_topic,
                            join_poll_interval_ms=5, consumer_groups=ConsumerGroups(session_timeout_ms=SESSION_MS),
                            topic_metadata=topic_metadata)


def reloaded(partition, clock):
    return coordinator_shard_tests.reloaded(partition, clock, make=shard_on)


def on_a_shard(scenario) -> None:
    """Runs `scenario(shard, its offsets partition, the clock)` on a fresh shard."""
    clock, partition = FakeClock(), FakeOffsetsPartition()
    asyncio.run(scenario(shard_on(partition, clock), partition, clock))


def heartbeat(shard, member_id, epoch, owned=(), **request):
    return shard.consumer_group_heartbeat(G, member_id=member_id, member_epoch=epoch, rebalance_timeout_ms=30_000,
                                          subscribed_topic_names=["orders"], owned=owned, **request)


def test_heartbeats_written__a_failover_replays_the_same_group_and_its_members_go_on():
    async def scenario(shard, partition, clock):
        a = await heartbeat(shard, "a", 0)
        b = await heartbeat(shard, "b", 0)
        a = await heartbeat(shard, "a", 1, owned=a.assignment)
        a = await heartbeat(shard, "a", a.member_epoch, owned=a.assignment)
        b = await heartbeat(shard, "b", b.member_epoch, owned=())
        assert shard.consumer_groups.groups[G].state == "Stable"
        fresh = reloaded(partition, clock)
        before, after = shard.consumer_groups.groups[G], fresh.consumer_groups.groups[G]
        assert (after.members, after.target, after.group_epoch) == (before.members, before.target, 2)
        again = await heartbeat(fresh, "b", b.member_epoch, owned=b.assignment)
        assert (again.member_epoch, again.assignment) == (2, b.assignment)
    on_a_shard(scenario)


def test_heartbeat_write_fails__nothing_replayed__the_retried_join_succeeds():
    async def scenario(shard, partition, clock):
        partition.fail_next = 1
        with pytest.raises(CoordinatorNotAvailable):
            await heartbeat(shard, "a", 0)
        assert G not in shard.consumer_groups.groups
        assert (await heartbeat(shard, "a", 0)).member_epoch == 1
    on_a_shard(scenario)


def test_silent_member__expired_by_the_ticker__its_partitions_go_to_the_other():
    async def scenario(shard, partition, clock):
        a = await heartbeat(shard, "a", 0)
        b = await heartbeat(shard, "b", 0)
        a = await heartbeat(shard, "a", 1, owned=a.assignment)
        clock.advance(SESSION_MS)
        a = await heartbeat(shard, "a", a.member_epoch, owned=a.assignment)
        await shard.tick()
        assert set(shard.consumer_groups.groups[G].members) == {"a"}
        a = await heartbeat(shard, "a", a.member_epoch, owned=a.assignment)
        assert (a.member_epoch, a.assignment) == (3, ((ORDERS, (0, 1, 2, 3)),))
        assert set(reloaded(partition, clock).consumer_groups.groups[G].members) == {"a"}
    on_a_shard(scenario)


def test_offset_commit_of_a_consumer_group__member_epoch_checked():
    async def scenario(shard, partition, clock):
        await heartbeat(shard, "a", 0)
        assert await shard.commit_offsets(G, {("orders", 0): (5, -1, "")}, "a", 1) == {("orders", 0): None}
        with pytest.raises(StaleMemberEpoch):
            await shard.commit_offsets(G, {("orders", 0): (6, -1, "")}, "a", 0)
        assert shard.fetch_offsets(G) == {("orders", 0): (5, -1, "")}
    on_a_shard(scenario)


def test_group_id_of_a_classic_group_with_members__heartbeat_group_id_not_found():
    async def scenario(shard, partition, clock):
        joined = await join(shard, "classic")
        await sync(shard, joined["member_id"], joined["generation"])
        with pytest.raises(GroupIdNotFound, match="is not a consumer group"):
            await heartbeat(shard, "a", 0)
    on_a_shard(scenario)


def test_empty_classic_group__taken_over_by_a_consumer_group__and_back_once_empty():
    """Kafka's maybeDeleteEmpty{Classic,Consumer}Group: the id passes from one
    protocol to the other through tombstones; with members, the other refuses."""
    async def scenario(shard, partition, clock):
        joined = await join(shard, "classic")
        await sync(shard, joined["member_id"], joined["generation"])
        await shard.leave_group(G, [(joined["member_id"], None)])
        assert (await heartbeat(shard, "a", 0)).member_epoch == 1
        assert G not in shard.groups.groups
        with pytest.raises(InconsistentGroupProtocol):
            await join(shard, "classic")
        await heartbeat(shard, "a", -1, owned=None)
        assert shard.list_groups() == [{"group": G, "state": "Empty", "protocol_type": "consumer", "type": "consumer"}]
        joined = await join(shard, "classic")
        assert G not in shard.consumer_groups.groups and joined["generation"] == 1
        await sync(shard, joined["member_id"], joined["generation"])
        fresh = reloaded(partition, clock)
        assert G not in fresh.consumer_groups.groups and G in fresh.groups.groups
    on_a_shard(scenario)


def test_delete_consumer_group__refused_with_members__tombstones_once_empty():
    async def scenario(shard, partition, clock):
        await heartbeat(shard, "a", 0)
        with pytest.raises(NonEmptyGroup):
            await shard.delete_group(G)
        await heartbeat(shard, "a", -1, owned=None)
        await shard.delete_group(G)
        assert G not in shard.consumer_groups.groups
        assert G not in reloaded(partition, clock).consumer_groups.groups
        with pytest.raises(GroupIdNotFound):
            shard.consumer_group_describe(G)
    on_a_shard(scenario)


def test_consumer_group_left_empty__deleted_by_the_retention_check_once_no_offset_is_left():
    """Kafka's cleanupGroupMetadata: a consumer group with no member and no offset
    left is deleted (its every record tombstoned); one with offsets stays until
    they expire. Before, an emptied consumer group stayed in memory and in the
    partition for good."""
    async def scenario(shard, partition, clock):
        await heartbeat(shard, "a", 0)
        await heartbeat(shard, "a", -1, owned=None)
        assert G in shard.consumer_groups.groups
        await shard.tick()   # the first tick checks retention
        assert G not in shard.consumer_groups.groups
        assert G not in reloaded(partition, clock).consumer_groups.groups
    on_a_shard(scenario)


def test_consumer_group_left_empty_with_offsets__kept_until_they_expire():
    async def scenario(shard, partition, clock):
        a = await heartbeat(shard, "a", 0)
        await shard.commit_offsets(G, {("orders", 0): (7, -1, "")}, "a", a.member_epoch)
        await heartbeat(shard, "a", -1, owned=None)
        await shard.tick()
        assert G in shard.consumer_groups.groups
        clock.advance(shard.offsets.offsets_retention_ms + shard.offsets_retention_check_interval_ms)
        await shard.tick()
        assert G not in shard.consumer_groups.groups
        assert G not in reloaded(partition, clock).consumer_groups.groups
    on_a_shard(scenario)


def test_consumer_group_with_members__offsets_of_an_unsubscribed_topic_expire__subscribed_ones_kept():
    """Kafka's ConsumerGroup: with members, offsets age from their commit, except
    those of a topic a member subscribes to."""
    async def scenario(shard, partition, clock):
        a = await heartbeat(shard, "a", 0)
        answer = await shard.commit_offsets(G, {("orders", 0): (5, -1, ""), ("returns", 0): (2, -1, "")}, "a",
                                            a.member_epoch)
        assert answer == {("orders", 0): None, ("returns", 0): None}
        clock.advance(shard.offsets.offsets_retention_ms + shard.offsets_retention_check_interval_ms)
        await heartbeat(shard, "a", a.member_epoch, owned=a.assignment)
        await shard.tick()
        assert G in shard.consumer_groups.groups
        for coordinator in (shard, reloaded(partition, clock)):
            assert coordinator.fetch_offsets(G) == {("orders", 0): (5, -1, "")}
    on_a_shard(scenario)


def test_offset_delete_of_a_consumer_group__a_subscribed_topics_refused():
    async def scenario(shard, partition, clock):
        await heartbeat(shard, "a", 0)
        await shard.commit_offsets(G, {("orders", 0): (5, -1, "")}, "a", 1)
        answer = await shard.delete_offsets(G, [("orders", 0)])
        assert isinstance(answer[("orders", 0)], GroupSubscribedToTopic)
        assert shard.fetch_offsets(G) == {("orders", 0): (5, -1, "")}
    on_a_shard(scenario)
