"""The coordinator's ordering, without Ray: a fake offsets partition whose appends
a test holds until it releases them, so a join, a commit or a retention check can
be made to arrive while a write is in flight. Each scenario ends by reloading a
fresh shard from the records the partition holds (what a restarted coordinator
does) and comparing."""

import asyncio
import dataclasses
import struct

import pytest

from rafka.core.clock import FakeClock
from rafka.core.coordinator_shard import CoordinatorShard
from rafka.core.errors import (CoordinatorNotAvailable, FencedInstanceId, NetworkException, RebalanceInProgress,
                               RequestTimedOut, UnknownTopicOrPartition)
from rafka.core.group_manager import GroupManager
from rafka.core.group_state import GroupState
from rafka.core.offset_store import OffsetStore
from rafka.core.offsets_schema import GroupKey, decode_key, decode_value, encode_key, encode_value

pytestmark = pytest.mark.core
G = "billing"
SESSION_MS, REBALANCE_MS, DAY_MS = 10_000, 60_000, 24 * 3600 * 1000


@dataclasses.dataclass
class Hold:
    started: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    released: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def release(self) -> None:
        self.released.set()


class FakeOffsetsPartition:
    """The shard's acks=all append, its records kept encoded as the replicas would
    hold them; it checks that the shard has one append in flight at a time. A test
    holds the next append (`hold_next`) or fails it (`fail_next`)."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.fail_next = 0
        self.appends = 0
        self._holds: list[Hold] = []
        self._one_in_flight = asyncio.Lock()

    def hold_next(self) -> Hold:
        hold = Hold()
        self._holds.append(hold)
        return hold

    async def append(self, records) -> None:
        assert not self._one_in_flight.locked(), "the shard had two appends in flight"
        self.appends += 1
        failing, self.fail_next = self.fail_next > 0, max(0, self.fail_next - 1)
        async with self._one_in_flight:
            if self._holds:
                hold = self._holds.pop(0)
                hold.started.set()
                await hold.released.wait()
            if failing:
                raise RequestTimedOut("__consumer_offsets-0: the write was not replicated (fake)")
            self.records += [(encode_key(key), encode_value(value)) for key, value in records]


async def partitions_per_topic(topics):
    return {t: 4 for t in topics if t in ("orders", "returns")}


def shard_on(partition, clock, *, delay_ms=0, retention_ms=DAY_MS, max_queued=4_000):
    return CoordinatorShard(offsets=OffsetStore(offsets_retention_ms=retention_ms),
                            groups=GroupManager(group_initial_rebalance_delay_ms=delay_ms),
                            clock=clock, append=partition.append, partitions_per_topic=partitions_per_topic,
                            join_poll_interval_ms=5, max_queued_requests_per_group=max_queued)


def reloaded(partition, clock, *, make=None):
    """A restarted coordinator: a fresh shard (of `make`, default shard_on) replaying what the partition holds."""
    shard = (make or shard_on)(FakeOffsetsPartition(), clock)
    for key_bytes, value_bytes in partition.records:
        key = decode_key(key_bytes)
        shard.replay(key, decode_value(key, value_bytes))
    return shard


def string(text: bytes | None) -> bytes:
    """A nullable int16-length string as the classic schemas write it."""
    return struct.pack(">h", -1) if text is None else struct.pack(">h", len(text)) + text


def join(shard, client, member_id="", *, instance=None, metadata=b"orders"):
    return shard.join_group(G, member_id, group_instance_id=instance, client_id=client, client_host="/127.0.0.1",
                            protocol_type="consumer", protocols=[("range", metadata)],
                            session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS)


async def sync(shard, member_id, generation, *, instance=None):
    """A member's sync: its assignment bytes. The leader hands each member its own
    member id as its assignment."""
    group = shard.groups.groups[G]
    assignments = {m: m.encode() for m in group.members} if group.leader == member_id else None
    return (await shard.sync_group(G, member_id, generation, group_instance_id=instance,
                                   assignments=assignments))["assignment"]


async def settle(steps=50):
    """Lets every runnable task run until it blocks (on a lock, a held append, a park)."""
    for _ in range(steps):
        await asyncio.sleep(0)


def members_and_generation(shard):
    group = shard.groups.groups[G]
    return group.state, group.generation, set(group.members)


def test_joins_during_the_first_sync_write__all_admitted_into_the_next_generation():
    """a is alone in generation 1; its sync writes the group record. b, c and d join
    while that record is in flight: none may be wiped out when it is replayed over
    the group. They and a (rejoining) make generation 2, which the log keeps."""
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock)
        a = await join(shard, "a")
        assert a["generation"] == 1
        hold = partition.hold_next()
        sync_a = asyncio.create_task(sync(shard, a["member_id"], 1))
        await hold.started.wait()
        late = [asyncio.create_task(join(shard, client)) for client in ("b", "c", "d")]
        await settle()
        hold.release()
        assert await sync_a == a["member_id"].encode()
        await settle()
        lost = [task.exception() for task in late if task.done()]
        assert lost == [], f"joins that arrived during the write were lost: {lost}"
        assert len(shard.groups.groups[G].members) == 4
        answers = await asyncio.wait_for(asyncio.gather(join(shard, "a", a["member_id"]), *late), timeout=5)
        assert {answer["generation"] for answer in answers} == {2}
        assert len({answer["leader"] for answer in answers}) == 1
        ids = {answer["member_id"] for answer in answers}
        assert members_and_generation(shard) == (GroupState.COMPLETING_REBALANCE, 2, ids)
        assignments = await asyncio.wait_for(asyncio.gather(*(sync(shard, m, 2) for m in sorted(ids))), 5)
        assert assignments == [m.encode() for m in sorted(ids)]   # each its part of the leader's
        assert members_and_generation(shard) == (GroupState.STABLE, 2, ids)
        assert members_and_generation(reloaded(partition, clock)) == (GroupState.STABLE, 2, ids)
    asyncio.run(scenario())


def test_joins_during_a_commit_write__all_admitted_and_the_commit_kept():
    """a (generation 1, Stable) commits; while that commit is being written b, c and
    d join. Each join waits for the commit's write and replay, then is admitted:
    generation 2 holds all four, and the commit is in the cache and the log."""
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock)
        a = await join(shard, "a")
        await sync(shard, a["member_id"], 1)
        hold = partition.hold_next()
        commit = asyncio.create_task(shard.commit_offsets(G, {("orders", 1): (7, -1, "")}, a["member_id"], 1))
        await hold.started.wait()
        late = [asyncio.create_task(join(shard, client)) for client in ("b", "c", "d")]
        await settle()
        hold.release()
        assert await commit == {("orders", 1): None}
        answers = await asyncio.wait_for(asyncio.gather(join(shard, "a", a["member_id"]), *late), timeout=5)
        assert {answer["generation"] for answer in answers} == {2} and len(answers) == 4
        assert members_and_generation(shard)[1:] == (2, {answer["member_id"] for answer in answers})
        assert shard.fetch_offsets(G) == {("orders", 1): (7, -1, "")}
        assert reloaded(partition, clock).fetch_offsets(G) == {("orders", 1): (7, -1, "")}
    asyncio.run(scenario())


def test_join_during_the_last_members_leave_write__admitted_not_wiped_by_the_empty_record():
    """a, the last member, leaves: the Empty group record is in flight when c joins.
    c must land in the group the record leaves (generation 2, Empty) and make
    generation 3 alone, not vanish when the record replays."""
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock)
        a = await join(shard, "a")
        await sync(shard, a["member_id"], 1)
        hold = partition.hold_next()
        leave = asyncio.create_task(shard.leave_group(G, [(a["member_id"], None)]))
        await hold.started.wait()
        joining = asyncio.create_task(join(shard, "c"))
        await settle()
        hold.release()
        await leave
        c = await asyncio.wait_for(joining, timeout=5)
        assert c["generation"] == 3
        assert members_and_generation(shard) == (GroupState.COMPLETING_REBALANCE, 3, {c["member_id"]})
        assert await sync(shard, c["member_id"], 3) == c["member_id"].encode()
        assert members_and_generation(reloaded(partition, clock)) == (GroupState.STABLE, 3, {c["member_id"]})
    asyncio.run(scenario())


def test_commit_in_flight_when_retention_runs__acked_commit_survives_in_cache_and_after_reload():
    """An assign-mode group's offset is past retention; a new commit of the same
    partition is being written when the retention check runs. The commit is acked:
    no tombstone decided before it may delete it, in the cache nor at a reload
    (which replays the log in order). A day later, untouched, it does expire."""
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock)
        await shard.commit_offsets("audit", {("orders", 0): (3, -1, "")})
        clock.advance(DAY_MS)
        hold = partition.hold_next()
        commit = asyncio.create_task(shard.commit_offsets("audit", {("orders", 0): (42, -1, "")}))
        await hold.started.wait()
        retention = asyncio.create_task(shard.tick())
        await settle()
        hold.release()
        assert await commit == {("orders", 0): None}
        await retention
        assert shard.fetch_offsets("audit") == {("orders", 0): (42, -1, "")}
        assert reloaded(partition, clock).fetch_offsets("audit") == {("orders", 0): (42, -1, "")}
        clock.advance(DAY_MS)
        await shard.tick()
        assert shard.fetch_offsets("audit") == {} == reloaded(partition, clock).fetch_offsets("audit")
    asyncio.run(scenario())


def test_empty_group_past_retention__offsets_and_group_tombstoned_then_dead_after_reload():
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock)
        a = await join(shard, "a")
        await sync(shard, a["member_id"], 1)
        await shard.commit_offsets(G, {("orders", 1): (7, -1, "")}, a["member_id"], 1)
        await shard.leave_group(G, [(a["member_id"], None)])
        await shard.tick()
        assert shard.fetch_offsets(G) == {("orders", 1): (7, -1, "")}    # Empty, not for long enough
        clock.advance(DAY_MS)
        await shard.tick()
        for coordinator in (shard, reloaded(partition, clock)):
            assert coordinator.fetch_offsets(G) == {} and coordinator.describe_group(G)["state"] == "Dead"
    asyncio.run(scenario())


def test_group_value_v1_without_state_time__offsets_age_from_their_commit_not_all_at_once():
    """A group value of format v1 (written by an old Kafka: no state timestamp) for
    an Empty group: its offsets age from their own commits (Kafka's fallback), so
    the first retention check after the load expires the old one only."""
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock)
        await shard.commit_offsets(G, {("orders", 0): (5, -1, "")})
        clock.advance(DAY_MS - 1_000)
        await shard.commit_offsets(G, {("orders", 1): (9, -1, "")})
        empty_v1 = struct.pack(">h", 1) + string(b"consumer") + struct.pack(">i", 4) + string(b"range") + \
            string(None) + struct.pack(">i", 0)
        partition.records.append((encode_key(GroupKey(G)), empty_v1))
        clock.advance(1_000)
        loaded = reloaded(partition, clock)
        assert loaded.describe_group(G)["state"] == "Empty"
        await loaded.tick()
        assert loaded.fetch_offsets(G) == {("orders", 1): (9, -1, "")}
    asyncio.run(scenario())


def test_stable_group__offsets_of_topics_no_member_subscribes_to_expire__subscribed_ones_kept():
    """Kafka's isSubscribedToTopic: a Stable consumer group whose subscriptions
    parse loses the offsets of a topic it no longer subscribes to once they are
    past retention from their commit; the offsets of "orders" stay."""
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock)
        subscription = struct.pack(">hi", 1, 1) + string(b"orders") + struct.pack(">i", -1)
        a = await join(shard, "a", metadata=subscription)
        await sync(shard, a["member_id"], 1)
        answer = await shard.commit_offsets(G, {("orders", 0): (3, -1, ""), ("returns", 0): (8, -1, "")},
                                            a["member_id"], 1)
        assert answer == {("orders", 0): None, ("returns", 0): None}
        clock.advance(DAY_MS)
        await shard.heartbeat(G, a["member_id"], 1)
        await shard.tick()
        assert members_and_generation(shard)[0] is GroupState.STABLE
        for coordinator in (shard, reloaded(partition, clock)):
            assert coordinator.fetch_offsets(G) == {("orders", 0): (3, -1, "")}
    asyncio.run(scenario())


def test_leaders_sync_write_fails__coordinator_not_available__the_follower_told_to_rejoin_then_both_sync():
    """Kafka's resetAndPropagateAssignmentWithError: the leader's sync record is not
    replicated. The leader gets COORDINATOR_NOT_AVAILABLE (a Java consumer treats
    REQUEST_TIMED_OUT from SyncGroup as fatal), the group drops the assignments and
    rebalances, so the follower waiting on the leader's sync is told to rejoin at
    once, not after twice the rebalance timeout. Both rejoin and sync."""
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard, a, b, follower = await follower_waiting_on_the_leader(partition, clock)
        partition.fail_next = 1
        with pytest.raises(CoordinatorNotAvailable):
            await sync(shard, a["member_id"], 1)
        with pytest.raises(RebalanceInProgress):
            await asyncio.wait_for(follower, timeout=5)
        assert members_and_generation(shard) == (GroupState.PREPARING_REBALANCE, 1, {a["member_id"], b["member_id"]})
        assert {m.assignment for m in shard.groups.groups[G].members.values()} == {b""}
        assert partition.records == []
        a, b = await asyncio.gather(join(shard, "a", a["member_id"]), join(shard, "b", b["member_id"]))
        assert a["generation"] == b["generation"] == 2
        leader, other = (a, b) if a["leader"] == a["member_id"] else (b, a)
        follower = asyncio.create_task(sync(shard, other["member_id"], 2))
        assert await sync(shard, leader["member_id"], 2) == leader["member_id"].encode()
        assert await asyncio.wait_for(follower, timeout=5) == other["member_id"].encode()
        assert members_and_generation(reloaded(partition, clock)) == (
            GroupState.STABLE, 2, {a["member_id"], b["member_id"]})
    asyncio.run(scenario())


def test_last_member_expiry_write_fails__member_kept_and_the_next_tick_writes_the_empty_group():
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock)
        a = await join(shard, "a")
        await sync(shard, a["member_id"], 1)
        clock.advance(SESSION_MS + 1)
        partition.fail_next = 1
        with pytest.raises(CoordinatorNotAvailable):
            await shard.tick()
        assert members_and_generation(shard) == (GroupState.STABLE, 1, {a["member_id"]})
        await shard.tick()
        assert members_and_generation(shard) == (GroupState.EMPTY, 2, set())
        assert members_and_generation(reloaded(partition, clock)) == (GroupState.EMPTY, 2, set())
    asyncio.run(scenario())


def test_parked_joins__hold_no_lock__the_group_serves_others_while_they_wait():
    """Joins park through the initial rebalance delay without the group's lock: a
    second member registers and an assign-mode fetch answers meanwhile."""
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock, delay_ms=3_000)
        first = asyncio.create_task(join(shard, "a"))
        await settle()
        assert not shard.locks.held(G) and not first.done()
        second = asyncio.create_task(join(shard, "b"))
        await settle()
        assert len(shard.groups.groups[G].members) == 2 and not second.done()
        clock.advance(3_000)
        a, b = await asyncio.wait_for(asyncio.gather(first, second), timeout=5)
        assert a["generation"] == b["generation"] == 1
    asyncio.run(scenario())


def test_requests_queued_behind_a_membership_write__bounded__the_next_one_refused_retriable():
    """a's sync record is being written (a membership write holds the group's lock
    until replayed); a commit and a heartbeat queue for the lock; the next request
    is refused, retriable, and the queued ones complete once the write does."""
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock, max_queued=3)
        a = await join(shard, "a")
        hold = partition.hold_next()
        syncing = asyncio.create_task(sync(shard, a["member_id"], 1))
        await hold.started.wait()
        waiting = [asyncio.create_task(shard.commit_offsets(G, {("orders", 0): (2, -1, "")}, a["member_id"], 1)),
                   asyncio.create_task(shard.heartbeat(G, a["member_id"], 1))]
        await settle()
        with pytest.raises(CoordinatorNotAvailable) as refused:
            await shard.commit_offsets(G, {("orders", 0): (3, -1, "")}, a["member_id"], 1)
        assert refused.value.retriable
        hold.release()
        await asyncio.gather(syncing, *waiting)
        assert shard.fetch_offsets(G) == {("orders", 0): (2, -1, "")}
        assert not shard.locks.held(G)
    asyncio.run(scenario())


def test_commits_during_an_append__queued_without_the_lock__one_append_carries_them_in_order():
    """While a's first commit is being written, five more commits of the same
    partition arrive (one member's pipelined commit_async): each is queued at once
    (its connection may go on: on_queued runs before any ack) and holds no lock, the
    next append carries all five, and the last one queued is what the cache and a
    reload hold."""
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock)
        a = await join(shard, "a")
        await sync(shard, a["member_id"], 1)
        appends_before = partition.appends
        queued = []
        hold = partition.hold_next()
        first = asyncio.create_task(shard.commit_offsets(G, {("orders", 0): (10, -1, "")}, a["member_id"], 1,
                                                         on_queued=lambda: queued.append(10)))
        await hold.started.wait()
        later = [asyncio.create_task(shard.commit_offsets(G, {("orders", 0): (offset, -1, "")}, a["member_id"], 1,
                                                          on_queued=lambda o=offset: queued.append(o)))
                 for offset in (11, 12, 13, 14, 15)]
        await settle()
        assert queued == [10, 11, 12, 13, 14, 15], "each commit is queued while the first one is in flight"
        assert not shard.locks.held(G) and not any(task.done() for task in later)
        assert shard.fetch_offsets(G) == {}, "nothing is visible before it is acked"
        hold.release()
        assert await asyncio.gather(first, *later) == [{("orders", 0): None}] * 6
        assert partition.appends - appends_before == 2, "the five queued commits went out in one append"
        assert [decode_value(decode_key(k), v).offset for k, v in partition.records[-6:]] == [10, 11, 12, 13, 14, 15]
        assert shard.fetch_offsets(G) == {("orders", 0): (15, -1, "")}
        assert reloaded(partition, clock).fetch_offsets(G) == {("orders", 0): (15, -1, "")}
    asyncio.run(scenario())


def test_append_carrying_two_commits_fails__both_fail_nothing_replayed__the_next_write_goes_out():
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock)
        await shard.commit_offsets("audit", {("orders", 0): (1, -1, "")})
        hold = partition.hold_next()
        first = asyncio.create_task(shard.commit_offsets("audit", {("orders", 0): (2, -1, "")}))
        await hold.started.wait()
        failing = [asyncio.create_task(shard.commit_offsets("audit", {("orders", p): (3, -1, "")})) for p in (0, 1)]
        await settle()
        partition.fail_next = 1   # the append after the held one: it carries both
        hold.release()
        assert await first == {("orders", 0): None}
        for task in failing:
            with pytest.raises(CoordinatorNotAvailable):
                await task
        assert shard.fetch_offsets("audit") == {("orders", 0): (2, -1, "")}
        assert await shard.commit_offsets("audit", {("orders", 1): (4, -1, "")}) == {("orders", 1): None}
        expected = {("orders", 0): (2, -1, ""), ("orders", 1): (4, -1, "")}
        assert shard.fetch_offsets("audit") == expected == reloaded(partition, clock).fetch_offsets("audit")
    asyncio.run(scenario())


@pytest.mark.parametrize("client_went_away", [False, True])
def test_delete_offsets_while_a_commit_is_in_flight__decided_after_it__nothing_left_behind(client_went_away):
    """An assign-mode group commits orders-1 while OffsetDelete of orders-0 and
    orders-1 arrives: the delete waits for the commit to be answered, so its
    tombstones cover the new offset too, in the cache and after a reload. So too
    when the committing client went away (its request task cancelled) while the
    commit was being written."""
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock)
        await shard.commit_offsets("audit", {("orders", 0): (5, -1, "")})
        hold = partition.hold_next()
        commit = asyncio.create_task(shard.commit_offsets("audit", {("orders", 1): (6, -1, "")}))
        await hold.started.wait()
        if client_went_away:
            commit.cancel()
            await settle()
        deleting = asyncio.create_task(shard.delete_offsets("audit", [("orders", 0), ("orders", 1)]))
        await settle()
        assert not deleting.done(), "the delete decided while the commit's write was in flight"
        hold.release()
        if not client_went_away:
            assert await commit == {("orders", 1): None}
        assert await deleting == {("orders", 0): None, ("orders", 1): None}
        assert shard.fetch_offsets("audit") == {} == reloaded(partition, clock).fetch_offsets("audit")
    asyncio.run(scenario())


def test_write_queue_full__the_next_commit_refused_retriable__the_queued_ones_complete():
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock)
        shard._writes.max_queued_writes = 3
        hold = partition.hold_next()
        queued = [asyncio.create_task(shard.commit_offsets(f"g{i}", {("orders", 0): (i, -1, "")})) for i in range(3)]
        await hold.started.wait()
        with pytest.raises(CoordinatorNotAvailable) as refused:
            await shard.commit_offsets("g3", {("orders", 0): (3, -1, "")})
        assert refused.value.retriable
        hold.release()
        await asyncio.gather(*queued)
        assert [shard.fetch_offsets(f"g{i}") for i in range(4)] == [
            {("orders", 0): (0, -1, "")}, {("orders", 0): (1, -1, "")}, {("orders", 0): (2, -1, "")}, {}]
    asyncio.run(scenario())


def test_sync_cancelled_while_its_record_is_written__the_group_lock_is_held_until_it_replays():
    """a's sync request goes away while the group record is in flight; a join that
    arrives meanwhile must wait for the record's replay (as with any membership
    write), not be wiped out by it."""
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock)
        a = await join(shard, "a")
        hold = partition.hold_next()
        syncing = asyncio.create_task(sync(shard, a["member_id"], 1))
        await hold.started.wait()
        syncing.cancel()
        await settle()
        assert shard.locks.held(G), "the lock was let go while the sync's record was in flight"
        joining = asyncio.create_task(join(shard, "b"))
        await settle()
        hold.release()
        await settle()
        assert "b" in {m.client_id for m in shard.groups.groups[G].members.values()}
        joining.cancel()
    asyncio.run(scenario())


def test_commit__unknown_topic_or_partition__refused_per_partition_nothing_written():
    """Kafka answers UNKNOWN_TOPIC_OR_PARTITION for each partition of a topic that
    does not exist and for a partition past the topic's last, writes the known
    ones, and checks no membership for a request naming only unknown ones."""
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock)
        answer = await shard.commit_offsets(G, {("orders", 1): (5, -1, ""), ("orders", 4): (5, -1, ""),
                                                ("gone", 0): (7, -1, "")})
        assert answer[("orders", 1)] is None
        assert isinstance(answer[("orders", 4)], UnknownTopicOrPartition)
        assert isinstance(answer[("gone", 0)], UnknownTopicOrPartition)
        assert shard.fetch_offsets(G) == {("orders", 1): (5, -1, "")}
        assert reloaded(partition, clock).fetch_offsets(G) == {("orders", 1): (5, -1, "")}
        appends = partition.appends
        only_unknown = await shard.commit_offsets(G, {("gone", 0): (7, -1, "")}, "no-such-member", 9)
        assert list(only_unknown) == [("gone", 0)] and isinstance(only_unknown[("gone", 0)], UnknownTopicOrPartition)
        assert partition.appends == appends
    asyncio.run(scenario())


def test_member_that_only_commits__keeps_its_session__one_that_neither_commits_nor_heartbeats_is_expired():
    """Kafka reschedules a member's heartbeat on each offset commit it accepts from
    it (Stable or PreparingRebalance): a consumer whose commits come more often than
    its session timeout stays in the group without a heartbeat. b, silent, is
    expired; a, committing every half session timeout for two timeouts, stays, and
    is expired only once it stops committing too."""
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock, delay_ms=1_000)
        joining = [asyncio.create_task(join(shard, client)) for client in ("a", "b")]
        await settle()
        clock.advance(1_000)
        a, b = (answer["member_id"] for answer in await asyncio.wait_for(asyncio.gather(*joining), timeout=5))
        await asyncio.wait_for(asyncio.gather(*(sync(shard, m, 1) for m in (a, b))), timeout=5)
        assert members_and_generation(shard) == (GroupState.STABLE, 1, {a, b})
        for step in range(1, 5):
            clock.advance(SESSION_MS // 2)
            assert await shard.commit_offsets(G, {("orders", 0): (step, -1, "")}, a, 1) == {("orders", 0): None}
            await shard.tick()
        assert set(shard.groups.groups[G].members) == {a}, "a only committed for two session timeouts"
        assert shard.groups.groups[G].state is GroupState.PREPARING_REBALANCE   # b's expiry
        clock.advance(SESSION_MS + 1)
        await shard.tick()
        assert members_and_generation(shard) == (GroupState.EMPTY, 2, set())
        assert shard.fetch_offsets(G) == {("orders", 0): (4, -1, "")}
    asyncio.run(scenario())


async def join_together(shard, clock, *joins):
    """Members starting together: one generation, after the initial rebalance delay."""
    tasks = [asyncio.create_task(j) for j in joins]
    await settle()
    clock.advance(shard.groups.group_initial_rebalance_delay_ms)
    return await asyncio.wait_for(asyncio.gather(*tasks), timeout=5)


async def follower_waiting_on_the_leader(partition, clock):
    """(shard, a, b, b's sync task): a (the leader) and b joined together in
    generation 1; b's sync waits for a's."""
    shard = shard_on(partition, clock, delay_ms=1_000)
    a, b = await join_together(shard, clock, join(shard, "a"), join(shard, "b"))
    follower = asyncio.create_task(sync(shard, b["member_id"], 1))
    await settle()
    return shard, a, b, follower


def test_followers_sync_waits_for_the_leaders__then_each_gets_its_part():
    """Kafka's classic protocol: the coordinator relays the leader's assignment. b
    syncs first and waits; a (the leader) syncs with both parts; b gets its own."""
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock, delay_ms=1_000)
        a, b = await join_together(shard, clock, join(shard, "a"), join(shard, "b"))
        assert a["leader"] == a["member_id"] and [m[0] for m in a["members"]] == [a["member_id"], b["member_id"]]
        assert b["members"] == ()
        follower = asyncio.create_task(sync(shard, b["member_id"], 1))
        await settle()
        assert not follower.done(), "a follower's sync answered before the leader's assignment"
        assert await sync(shard, a["member_id"], 1) == a["member_id"].encode()
        assert await asyncio.wait_for(follower, timeout=5) == b["member_id"].encode()
        loaded = reloaded(partition, clock).groups.groups[G]
        assert {m: member.assignment for m, member in loaded.members.items()} == {
            a["member_id"]: a["member_id"].encode(), b["member_id"]: b["member_id"].encode()}
    asyncio.run(scenario())


def test_leader_never_syncs__its_pending_sync_expires__the_waiting_follower_is_told_to_rejoin():
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard, a, b, follower = await follower_waiting_on_the_leader(partition, clock)
        clock.advance(REBALANCE_MS)
        await shard.heartbeat(G, b["member_id"], 1)     # b is alive; a, the leader, is too but never syncs
        await shard.heartbeat(G, a["member_id"], 1)
        await shard.tick()
        with pytest.raises(RebalanceInProgress):
            await asyncio.wait_for(follower, timeout=5)
        assert members_and_generation(shard) == (GroupState.PREPARING_REBALANCE, 1, {b["member_id"]})
    asyncio.run(scenario())


def test_static_member_restarted_in_a_stable_group__one_record__reload_keeps_the_new_id_and_its_assignment():
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock, delay_ms=1_000)
        a, b = await join_together(shard, clock, join(shard, "a"), join(shard, "b", instance="host-b"))
        await asyncio.wait_for(asyncio.gather(sync(shard, a["member_id"], 1),
                                              sync(shard, b["member_id"], 1, instance="host-b")), timeout=5)
        records_before = len(partition.records)
        again = await asyncio.wait_for(join(shard, "b", instance="host-b"), timeout=5)   # answered at once
        assert again["generation"] == 1 and again["leader"] == a["member_id"]
        assert len(partition.records) == records_before + 1
        assert await sync(shard, again["member_id"], 1, instance="host-b") == b["member_id"].encode()
        with pytest.raises(FencedInstanceId):
            await shard.heartbeat(G, b["member_id"], 1, "host-b")
        with pytest.raises(FencedInstanceId):
            await shard.commit_offsets(G, {("orders", 0): (1, -1, "")}, b["member_id"], 1, "host-b")
        for coordinator in (shard, reloaded(partition, clock)):
            group = coordinator.groups.groups[G]
            assert (group.state, group.generation) == (GroupState.STABLE, 1)
            assert group.static_members == {"host-b": again["member_id"]}
            assert group.members[again["member_id"]].assignment == b["member_id"].encode()
    asyncio.run(scenario())


def test_parked_join_of_a_static_member_replaced_meanwhile__fenced_instance_id():
    async def scenario():
        clock, partition = FakeClock(), FakeOffsetsPartition()
        shard = shard_on(partition, clock, delay_ms=1_000)
        a, b, c = await join_together(shard, clock, join(shard, "a"), join(shard, "b", instance="host-b"),
                                      join(shard, "c"))
        await asyncio.wait_for(asyncio.gather(sync(shard, a["member_id"], 1), sync(shard, c["member_id"], 1),
                                              sync(shard, b["member_id"], 1, instance="host-b")), timeout=5)
        rebalance = asyncio.create_task(join(shard, "a", a["member_id"], metadata=b"more topics"))
        old = asyncio.create_task(join(shard, "b", b["member_id"], instance="host-b"))
        await settle()   # both parked: c has not rejoined
        new = asyncio.create_task(join(shard, "b", instance="host-b"))     # a second process, same instance
        with pytest.raises(FencedInstanceId):
            await asyncio.wait_for(old, timeout=5)
        clock.advance(REBALANCE_MS)    # c never rejoins: dropped at the deadline
        answers = await asyncio.wait_for(asyncio.gather(rebalance, new), timeout=5)
        assert {answer["generation"] for answer in answers} == {2}
        assert members_and_generation(shard)[2] == {a["member_id"], answers[1]["member_id"]}
    asyncio.run(scenario())


@pytest.mark.parametrize("raised, answered", [
    (RequestTimedOut("the write was not replicated"), "coordinator_not_available"),
    (NetworkException("the controller is not registered"), "coordinator_load_in_progress"),
    (RebalanceInProgress("rejoin"), "rebalance_in_progress"),
])
def test_group_call_failing__answered_as_kafkas_coordinator_maps_an_operations_error(raised, answered):
    """The group handlers' one way to ask (handlers.group_offsets.coordinator_call)
    maps what a call raised as Kafka's CoordinatorOperationExceptionHelper: a Java
    consumer treats REQUEST_TIMED_OUT or NETWORK_EXCEPTION from SyncGroup or a
    KIP-848 heartbeat as fatal."""
    from kio.schema.errors import ErrorCode

    from rafka.protocol.handlers.group_offsets import coordinator_call

    class Failing:
        async def sync_group(self, group, *args, **kwargs):
            raise raised

    class Host:
        def coordinator_for(self, group):
            return Failing()
    code, answer, _ = asyncio.run(coordinator_call(Host(), G, "sync_group", "m", 1))
    assert (code, answer) == (getattr(ErrorCode, answered), None)
