"""Group membership of one `__consumer_offsets` partition: join, sync, heartbeat,
leave, session expiry, generations (Kafka's classic protocol, with the
assignment computed by the coordinator, as DESIGN section 5 says).

A rebalance: the first join (or a change: a new member, a leave, an expiry)
moves the group to PreparingRebalance; every member must (re)join before the
rebalance deadline (the largest rebalance timeout, i.e. max.poll.interval.ms;
for a group that was Empty, at least `group.initial.rebalance.delay.ms` so that
members starting together land in one generation). `maybe_complete_join` then
drops members that did not rejoin, bumps the generation, picks a leader, runs the
group's assignor and moves to CompletingRebalance; the first sync returns the
group metadata record to write, whose replay makes it Stable. Heartbeats keep a member,
and so do its offset commits (`commit_keeps_session`, as Kafka); `expire_members`
removes members silent for longer than their session timeout.

Written and transient changes: a change that writes a group metadata record (the
first sync of a generation makes the group Stable; the last member leaving or
expiring makes it Empty) changes nothing here: the handler returns the record and
the group moves when the caller replays it, once acked, so a failed write leaves
the group as it was and the retried request redoes it (STYLE point 2). Changes
that are never written (a join, a rebalance starting, a member leaving while others
stay, heartbeats) apply at once.

Invariants:
  state changes only through group_state.next_state (the one table), or by replay
  the generation grows by one at every completed join; a member's sync and
  heartbeat name the current generation or get ILLEGAL_GENERATION
  a group holds at most `max_group_size` members (GROUP_MAX_SIZE_REACHED)
  every group metadata record written replays to the same members and generation
  as the state it was decided on; the caller keeps that state still until then
  (core.coordinator_shard's per-group lock)
Pure logic, no I/O; time is passed in. Caller: core.coordinator_shard, which parks
join requests until `maybe_complete_join` completes their generation.
"""

from __future__ import annotations

import dataclasses
import json
import uuid

from rafka.core.assignors import Subscription, assignor
from rafka.core.errors import (CoordinatorNotAvailable, GroupMaxSizeReached, IllegalGeneration,
                               InvalidSessionTimeout, RebalanceInProgress, UnknownMemberId)
from rafka.core.group_state import GroupEvent, GroupState, next_state
from rafka.core.offsets_schema import GroupKey, GroupValue, MemberMetadata

PROTOCOL_TYPE = "consumer"


@dataclasses.dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    topics: tuple[str, ...]
    owned: tuple[tuple[str, int], ...] = ()
    assignment: tuple[tuple[str, int], ...] = ()
    last_heartbeat_ms: int = 0
    joined: bool = False          # has (re)joined the rebalance in progress


@dataclasses.dataclass
class Group:
    group_id: str
    assignor_name: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    leader: str | None = None
    members: dict[str, Member] = dataclasses.field(default_factory=dict)
    state_since_ms: int = 0
    join_deadline_ms: int = 0     # rebalance timeout: who has not rejoined by then is dropped
    join_not_before_ms: int = 0   # group.initial.rebalance.delay.ms after an Empty group's first join

    def move(self, event: GroupEvent, now_ms: int) -> None:
        state = next_state(self.state, event)
        if state is not self.state:
            self.state, self.state_since_ms = state, now_ms


class GroupManager:
    def __init__(self, *, group_initial_rebalance_delay_ms: int = 3_000, max_group_size: int = 1_000,
                 group_min_session_timeout_ms: int = 6_000,
                 group_max_session_timeout_ms: int = 1_800_000) -> None:
        self.group_initial_rebalance_delay_ms = group_initial_rebalance_delay_ms
        self.max_group_size = max_group_size
        self.session_timeout_range_ms = (group_min_session_timeout_ms, group_max_session_timeout_ms)
        self.groups: dict[str, Group] = {}
        self.completed_rebalances = 0   # joins completed with members (Kafka's group-completed-rebalance-count)

    # --- join / sync / heartbeat / leave ---------------------------------------------

    def join(self, group_id: str, member_id: str, *, client_id: str, client_host: str, topics,
             session_timeout_ms: int, rebalance_timeout_ms: int, assignor_name: str, now_ms: int,
             owned=()) -> str:
        """Registers a (re)join; returns the member id (a new one for member_id "")."""
        low, high = self.session_timeout_range_ms
        if not low <= session_timeout_ms <= high:
            raise InvalidSessionTimeout(f"session.timeout.ms {session_timeout_ms} is outside "
                                        f"[{low}, {high}]")
        assignor(assignor_name)  # unknown names fail before anything changes
        group = self.groups.get(group_id) or Group(group_id, assignor_name, state_since_ms=now_ms)
        if group.state is GroupState.DEAD:
            raise CoordinatorNotAvailable(f"group {group_id} is being removed")
        if member_id and member_id not in group.members:
            raise UnknownMemberId(f"member {member_id!r} is not in group {group_id}")
        if not member_id:
            if len(group.members) >= self.max_group_size:
                raise GroupMaxSizeReached(f"group {group_id} has {len(group.members)} members, "
                                          f"the most group.max.size allows")
            member_id = f"{client_id}-{uuid.uuid4()}"
        self.groups[group_id] = group
        if group.state is not GroupState.PREPARING_REBALANCE:
            if group.state is GroupState.EMPTY:
                group.join_not_before_ms = now_ms + self.group_initial_rebalance_delay_ms
            group.move(GroupEvent.MEMBER_JOINS, now_ms)
            for member in group.members.values():
                member.joined = False
            group.join_deadline_ms = now_ms  # raised below by each member's rebalance timeout
        group.members[member_id] = Member(member_id, client_id, client_host, session_timeout_ms,
                                          rebalance_timeout_ms, tuple(topics), tuple(map(tuple, owned)),
                                          last_heartbeat_ms=now_ms, joined=True)
        group.join_deadline_ms = max(group.join_deadline_ms, now_ms + rebalance_timeout_ms,
                                     group.join_not_before_ms)
        return member_id

    def maybe_complete_join(self, group_id: str, partitions_per_topic: dict[str, int], now_ms: int) -> bool:
        """Completes the join phase when every member rejoined (and the initial
        delay passed) or the deadline passed. True if the generation moved on."""
        if not self.join_complete_due(group_id, now_ms):
            return False
        group = self.groups[group_id]
        for member_id in [m for m, member in group.members.items() if not member.joined]:
            del group.members[member_id]
        group.generation += 1
        if not group.members:
            group.leader = None
            group.move(GroupEvent.LAST_MEMBER_LEAVES, now_ms)
            return True
        self.completed_rebalances += 1
        group.leader = group.leader if group.leader in group.members else min(group.members)
        subscriptions = {m.member_id: Subscription(m.topics, m.owned, group.generation - 1)
                         for m in group.members.values()}
        assigned = assignor(group.assignor_name).assign(partitions_per_topic, subscriptions)
        for member_id, member in group.members.items():
            member.assignment = tuple(assigned[member_id])
        group.move(GroupEvent.JOIN_COMPLETES, now_ms)
        return True

    def join_complete_due(self, group_id: str, now_ms: int) -> bool:
        """True when `maybe_complete_join` would complete the join phase now: every
        member rejoined (and the initial delay passed), or the deadline passed."""
        group = self.groups.get(group_id)
        if group is None or group.state is not GroupState.PREPARING_REBALANCE:
            return False
        everyone = all(m.joined for m in group.members.values())
        return (everyone and now_ms >= group.join_not_before_ms) or now_ms >= group.join_deadline_ms

    def sync(self, group_id: str, member_id: str, generation: int, now_ms: int):
        """(records to write, the member's assignment). The first sync of a
        generation returns the group's metadata record; replaying it makes the
        group Stable (until then the group stays CompletingRebalance, so a failed
        write is redone by the next sync)."""
        group, member = self._member(group_id, member_id, generation)
        if group.state is GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgress(f"group {group_id} is rebalancing: rejoin")
        member.last_heartbeat_ms = now_ms
        records = []
        if group.state is GroupState.COMPLETING_REBALANCE:
            next_state(group.state, GroupEvent.LEADER_SYNCS)  # the move replay makes must be in the table
            records.append(self.metadata_record(group, now_ms))
        return records, list(member.assignment)

    def heartbeat(self, group_id: str, member_id: str, generation: int, now_ms: int) -> None:
        group, member = self._member(group_id, member_id, generation)
        member.last_heartbeat_ms = now_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgress(f"group {group_id} is rebalancing: rejoin")

    def commit_keeps_session(self, group_id: str, member_id: str, now_ms: int) -> None:
        """A member's offset commit, once validated, counts as a heartbeat while the
        group is Stable or PreparingRebalance (Kafka's OffsetMetadataManager.commitOffset
        reschedules the member's heartbeat then): a consumer that commits more often
        than it heartbeats keeps its session."""
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return   # a commit outside the group protocol (assign mode): no session
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            group.members[member_id].last_heartbeat_ms = now_ms

    def leave(self, group_id: str, member_id: str, now_ms: int) -> list:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            raise UnknownMemberId(f"member {member_id!r} is not in group {group_id}")
        return self._remove(group, [member_id], now_ms)

    def expire_members(self, now_ms: int) -> list:
        """Removes members silent for longer than their session timeout; returns
        the records to write (groups whose last member went: replaying them makes
        those groups Empty)."""
        records = []
        for group_id in list(self.groups):
            records += self.expire_group_members(group_id, now_ms)
        return records

    def has_silent_members(self, group_id: str, now_ms: int) -> bool:
        group = self.groups.get(group_id)
        return group is not None and any(now_ms - m.last_heartbeat_ms > m.session_timeout_ms
                                         for m in group.members.values())

    def expire_group_members(self, group_id: str, now_ms: int) -> list:
        """`expire_members` for one group (the coordinator expires each group under
        its own lock)."""
        group = self.groups.get(group_id)
        if not self.has_silent_members(group_id, now_ms):
            return []
        silent = [m.member_id for m in group.members.values()
                  if now_ms - m.last_heartbeat_ms > m.session_timeout_ms]
        return self._remove(group, silent, now_ms)

    def _remove(self, group: Group, member_ids: list[str], now_ms: int) -> list:
        if set(member_ids) >= set(group.members):
            # The group becomes Empty by replaying this record once it is written.
            next_state(group.state, GroupEvent.LAST_MEMBER_LEAVES)
            empty = dataclasses.replace(group, members={}, generation=group.generation + 1, leader=None)
            return [self.metadata_record(empty, now_ms)]
        for member_id in member_ids:
            del group.members[member_id]
        if group.state is not GroupState.PREPARING_REBALANCE:
            group.move(GroupEvent.MEMBER_LEAVES, now_ms)
            for member in group.members.values():
                member.joined = False
            group.join_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in group.members.values())
        return []

    def _member(self, group_id: str, member_id: str, generation: int) -> tuple[Group, Member]:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            raise UnknownMemberId(f"member {member_id!r} is not in group {group_id}")
        if generation != group.generation:
            raise IllegalGeneration(f"generation {generation} is not group {group_id}'s current "
                                    f"{group.generation}")
        return group, group.members[member_id]

    # --- records ------------------------------------------------------------------

    def metadata_record(self, group: Group, now_ms: int):
        """rafka encodes a member's subscription and assignment as JSON in Kafka's
        bytes fields (not Kafka's binary consumer protocol)."""
        members = tuple(MemberMetadata(
            m.member_id, None, m.client_id, m.client_host, m.rebalance_timeout_ms, m.session_timeout_ms,
            json.dumps({"topics": list(m.topics)}).encode(), json.dumps(list(m.assignment)).encode())
            for m in group.members.values())
        return GroupKey(group.group_id), GroupValue(PROTOCOL_TYPE, group.generation, group.assignor_name,
                                                    group.leader, now_ms, members)

    def replay(self, key, value, now_ms: int) -> None:
        """A written group record, when loading and once acked live (the one way a
        group becomes Stable or Empty): the group comes back with its members and
        generation (Stable) or Empty; its members must heartbeat within their
        session timeout from now. A tombstone removes the group."""
        if not isinstance(key, GroupKey):
            return
        if value is None:
            self.groups.pop(key.group, None)
            return
        members = {m.member_id: Member(m.member_id, m.client_id, m.client_host, m.session_timeout_ms,
                                       m.rebalance_timeout_ms, tuple(json.loads(m.subscription)["topics"]),
                                       assignment=tuple(map(tuple, json.loads(m.assignment))),
                                       last_heartbeat_ms=now_ms, joined=True)
                   for m in value.members}
        state = GroupState.STABLE if members else GroupState.EMPTY
        self.groups[key.group] = Group(key.group, value.protocol or "range", state, value.generation,
                                       value.leader, members, state_since_ms=value.current_state_timestamp_ms)
