"""Group membership of one `__consumer_offsets` partition: Kafka's classic group
protocol (join, sync, heartbeat, leave, session expiry, generations) with static
membership (KIP-345), as Kafka's GroupMetadataManager and ClassicGroup run it.

The coordinator relays, it does not assign. Members join with a protocol type
("consumer", "connect", "sr", ...) and their protocols in order of preference,
each a name and opaque metadata bytes. When the join phase completes, the group's
protocol is chosen by vote (each member votes for its first protocol that every
member supports; the most votes win), one member leads, and the leader's
JoinGroup answer lists every member's metadata for that protocol. The leader's
SyncGroup carries every member's assignment bytes; the group metadata record
stores them (with the protocol type, protocol, leader and each member's
metadata), and every member's SyncGroup answer is its own bytes. Nothing here
reads metadata or assignments, except the topics a "consumer" group subscribes
to (`subscribed_topics`: OffsetDelete refuses those, as Kafka's does).

A rebalance: a new member, a changed member (other metadata), the leader
rejoining in Stable, a leave or an expiry moves the group to PreparingRebalance;
every member must rejoin before the rebalance deadline (the largest rebalance
timeout, i.e. max.poll.interval.ms; for a group that was Empty, first
`group.initial.rebalance.delay.ms`, extended by each new member, so that members
starting together land in one generation). `maybe_complete_join` then drops the
dynamic members that did not rejoin (static ones stay: they leave only by session
timeout or LeaveGroup), bumps the generation, keeps the leader if it rejoined
(else the first member that did), votes the protocol and moves to
CompletingRebalance. Members that do not send SyncGroup within the rebalance
timeout are removed (Kafka's pending-sync expiry), which bounds how long a
follower's sync waits for the leader's.

Static membership: a member with a group.instance.id that joins with no member id
while its instance id is in the group takes the old member's place: a new member
id, the old one's assignment. In Stable with the same protocol and metadata that
is all (one group metadata record, no rebalance; the answer names the old leader
id when the old member led, so a JoinGroup v0-v8 client does not reassign);
otherwise the group rebalances. Any later request with the old member id and
that instance id gets FENCED_INSTANCE_ID.

Written and transient changes: a change that writes a group metadata record (the
leader's sync makes the group Stable; a static member replaced in Stable; the
last member leaving or expiring, or a join completing with nobody, makes it
Empty) changes nothing here: the handler returns the record and the group moves
when the caller replays it, once acked, so a failed write leaves the group as it
was and the retried request redoes it (STYLE point 2). Changes that are never
written (a join, a rebalance starting, a member leaving while others stay,
heartbeats, a member's sync being received) apply at once.

Invariants:
  state changes only through group_state.next_state (the one table), or by replay
  the generation grows by one at every completed join; a member's sync and
  heartbeat name the current generation or get ILLEGAL_GENERATION
  an instance id maps to at most one member (`Group.static_members`)
  a group holds at most `max_group_size` members (GROUP_MAX_SIZE_REACHED)
  every group metadata record written replays to the same members and generation
  as the state it was decided on; the caller keeps that state still until then
  (core.coordinator_shard's per-group lock)
Pure logic, no I/O; time is passed in. Caller: core.coordinator_shard, which parks
joins until their generation completes and followers' syncs until the leader's.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Iterable, Sequence

from rafka.core.errors import (CoordinatorNotAvailable, GroupMaxSizeReached, IllegalGeneration,
                               InconsistentGroupProtocol, InvalidSessionTimeout, KafkaError,
                               RebalanceInProgress, UnknownMemberId)
from rafka.core.group_state import GroupEvent, GroupState, next_state, validate_member
from rafka.core.offsets_schema import GroupKey, GroupValue, MemberMetadata

CONSUMER_PROTOCOL_TYPE = "consumer"
Protocols = tuple[tuple[str, bytes], ...]     # (name, metadata), the member's order of preference


@dataclasses.dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: Protocols
    assignment: bytes = b""
    last_heartbeat_ms: int = 0
    joined: bool = False          # its JoinGroup waits for the rebalance in progress to complete
    synced: bool = True           # sent its SyncGroup for the current generation (else pending)

    def metadata(self, protocol: str | None) -> bytes:
        return next((data for name, data in self.protocols if name == protocol), b"")

    def vote(self, candidates: set[str]) -> str:
        return next(name for name, _ in self.protocols if name in candidates)


@dataclasses.dataclass(frozen=True)
class JoinAnswer:
    """What a JoinGroup answers once its generation is known."""
    member_id: str
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    members: tuple[tuple[str, str | None, bytes], ...] = ()   # the leader's: (member id, instance id, metadata)
    skip_assignment: bool = False   # KIP-814: a static leader back in a Stable group leads without assigning


@dataclasses.dataclass(frozen=True)
class JoinResult:
    member_id: str
    records: list
    answer: JoinAnswer | None     # None: parked until the generation completes


@dataclasses.dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = dataclasses.field(default_factory=dict)
    state_since_ms: int = 0
    join_deadline_ms: int = 0     # rebalance timeout: dynamic members not rejoined by then are dropped
    join_not_before_ms: int = 0   # the initial rebalance's delay (group.initial.rebalance.delay.ms)
    initial_rebalance: bool = False
    sync_deadline_ms: int = 0     # members that did not sync by then are dropped (pending-sync expiry)

    def move(self, event: GroupEvent, now_ms: int) -> None:
        state = next_state(self.state, event)
        if state is not self.state:
            self.state, self.state_since_ms = state, now_ms

    @property
    def static_members(self) -> dict[str, str]:
        return {m.group_instance_id: m.member_id for m in self.members.values() if m.group_instance_id is not None}

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports(self, protocol_type: str, names: Iterable[str]) -> bool:
        """Kafka's supportsProtocols: any non-empty offer while Empty; otherwise the
        group's protocol type and a protocol every current member offers."""
        names = set(names)
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self._candidates())

    def _candidates(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = {name for name, _ in members[0].protocols}
        for member in members[1:]:
            common &= {name for name, _ in member.protocols}
        return common

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its first protocol among those all
        support; the most votes win (ties: the name first in sorted order, where
        Kafka's pick depends on a hash map's order)."""
        candidates = self._candidates()
        votes: dict[str, int] = {}
        for member in self.members.values():
            name = member.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        return min(votes, key=lambda name: (-votes[name], name))

    def members_for_leader(self) -> tuple[tuple[str, str | None, bytes], ...]:
        return tuple((m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                     for m in self.members.values())


class GroupManager:
    def __init__(self, *, group_initial_rebalance_delay_ms: int = 3_000, max_group_size: int = 1_000,
                 group_min_session_timeout_ms: int = 6_000,
                 group_max_session_timeout_ms: int = 1_800_000) -> None:
        self.group_initial_rebalance_delay_ms = group_initial_rebalance_delay_ms
        self.max_group_size = max_group_size
        self.session_timeout_range_ms = (group_min_session_timeout_ms, group_max_session_timeout_ms)
        self.groups: dict[str, Group] = {}
        self.completed_rebalances = 0   # joins completed with members (Kafka's group-completed-rebalance-count)

    # --- join ---------------------------------------------------------------------------

    def join(self, group_id: str, member_id: str, *, group_instance_id: str | None = None, client_id: str,
             client_host: str, protocol_type: str, protocols: Sequence[tuple[str, bytes]],
             session_timeout_ms: int, rebalance_timeout_ms: int, now_ms: int,
             skip_assignment_supported: bool = False) -> JoinResult:
        """Kafka's classicGroupJoinToClassicGroup. member_id "" for a new member
        (a new id is made: "<instance id or client id>-<uuid>").
        `skip_assignment_supported`: the request is JoinGroup v9+ (KIP-814)."""
        low, high = self.session_timeout_range_ms
        if not low <= session_timeout_ms <= high:
            raise InvalidSessionTimeout(f"session.timeout.ms {session_timeout_ms} is outside [{low}, {high}]")
        protocols = tuple((name, bytes(data)) for name, data in protocols)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:   # Kafka: the group is not found, the member unknown
                raise UnknownMemberId(f"group {group_id} does not exist: member {member_id!r} is unknown")
            group = Group(group_id, state_since_ms=now_ms)
        if group.state is GroupState.DEAD:
            raise CoordinatorNotAvailable(f"group {group_id} is being removed")
        if not self._accepts(group, member_id):
            raise GroupMaxSizeReached(f"group {group_id} has {len(group.members)} members, the most "
                                      f"group.max.size allows")
        if not group.supports(protocol_type, (name for name, _ in protocols)):
            offered = ", ".join(name for name, _ in protocols)
            raise InconsistentGroupProtocol(
                f"protocol type {protocol_type!r} with [{offered}]: group {group_id} runs "
                f"{group.protocol_type!r} with {sorted(group._candidates())} common to its members")
        self.groups[group_id] = group
        if not member_id:
            new_id = f"{group_instance_id or client_id}-{uuid.uuid4()}"
            old_id = group.static_members.get(group_instance_id) if group_instance_id is not None else None
            if old_id is not None:
                return self._replace_static_member(group, old_id, new_id, protocols, session_timeout_ms,
                                                   rebalance_timeout_ms, now_ms, skip_assignment_supported)
            member = Member(new_id, group_instance_id, client_id, client_host, session_timeout_ms,
                            rebalance_timeout_ms, protocols, last_heartbeat_ms=now_ms, joined=True)
            if group.state is GroupState.PREPARING_REBALANCE and group.initial_rebalance:
                self._extend_initial_rebalance(group, now_ms)
            if not group.members:
                group.protocol_type = protocol_type
            group.members[new_id] = member
            if group.leader is None:
                group.leader = new_id
            self._prepare_rebalance(group, now_ms)
            return JoinResult(new_id, [], None)
        validate_member(members=group.members, static_members=group.static_members, member_id=member_id,
                        group_instance_id=group_instance_id)
        member = group.members[member_id]
        member.last_heartbeat_ms = now_ms
        unchanged = member.protocols == protocols
        if group.state is GroupState.COMPLETING_REBALANCE and unchanged:
            # It lost its JoinGroup answer: the same one again.
            return JoinResult(member_id, [], self._answer(group, member_id))
        if group.state is GroupState.STABLE and unchanged and member_id != group.leader:
            return JoinResult(member_id, [], self._answer(group, member_id, members=False))
        if group.state is GroupState.EMPTY:
            raise UnknownMemberId(f"member {member_id!r} rejoins group {group_id}, which is Empty")
        # PreparingRebalance, a changed member, or the leader rejoining a Stable group
        # (Kafka lets the leader force a rebalance: topic metadata it watches changed).
        member.protocols, member.joined = protocols, True
        member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        self._prepare_rebalance(group, now_ms)
        return JoinResult(member_id, [], None)

    def _accepts(self, group: Group, member_id: str) -> bool:
        """Kafka's acceptJoiningMember: a known member always; a new one up to group.max.size."""
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.state is GroupState.PREPARING_REBALANCE:
            joined = sum(m.joined for m in group.members.values())
            return (member_id in group.members and group.members[member_id].joined) or joined < self.max_group_size
        return member_id in group.members or len(group.members) < self.max_group_size

    def _replace_static_member(self, group: Group, old_id: str, new_id: str, protocols: Protocols,
                               session_timeout_ms: int, rebalance_timeout_ms: int, now_ms: int,
                               skip_assignment_supported: bool) -> JoinResult:
        """Kafka's updateStaticMemberThenRebalanceOrCompleteJoin: the new member id
        takes the old one's place and assignment."""
        old = group.members[old_id]
        new = dataclasses.replace(old, member_id=new_id, protocols=protocols, session_timeout_ms=session_timeout_ms,
                                  rebalance_timeout_ms=rebalance_timeout_ms, last_heartbeat_ms=now_ms)
        if group.state is GroupState.STABLE:
            members = {new_id if m == old_id else m: new if m == old_id else member
                       for m, member in group.members.items()}
            replaced = dataclasses.replace(group, members=members,
                                           leader=new_id if group.leader == old_id else group.leader)
            # Kafka's rule: only a change of the protocol the group would select next
            # rebalances; other metadata (a restarted consumer owns no partitions
            # yet, so its subscription differs) is stored for the next generation.
            if replaced.select_protocol() == group.protocol_name:
                next_state(group.state, GroupEvent.STATIC_MEMBER_REPLACED)
                if skip_assignment_supported and group.leader == old_id:
                    # KIP-814 (v9+): the returning leader leads again, with every
                    # member's metadata (to watch their topics), told not to assign.
                    answer = JoinAnswer(new_id, group.generation, group.protocol_type, group.protocol_name,
                                        new_id, replaced.members_for_leader(), skip_assignment=True)
                else:
                    # v0-v8 cannot tell a leader to skip assigning: the answer names
                    # the old leader id, so a returning leader acts as a follower.
                    answer = JoinAnswer(new_id, group.generation, group.protocol_type, group.protocol_name,
                                        group.leader or "")
                return JoinResult(new_id, [self.metadata_record(replaced, now_ms)], answer)
        del group.members[old_id]
        group.members[new_id] = new
        if group.leader == old_id:
            group.leader = new_id
        new.joined = True
        self._prepare_rebalance(group, now_ms)
        return JoinResult(new_id, [], None)

    def _prepare_rebalance(self, group: Group, now_ms: int) -> None:
        """Kafka's maybePrepareRebalanceOrCompleteJoin: start a rebalance, whose
        deadline is the group's rebalance timeout from now (a sync waiting on
        CompletingRebalance then sees PreparingRebalance and is told to rejoin);
        during one, nothing more (the joins parked complete it)."""
        if group.state is GroupState.PREPARING_REBALANCE:
            return
        group.initial_rebalance = group.state is GroupState.EMPTY
        if group.initial_rebalance:
            group.join_not_before_ms = now_ms + self.group_initial_rebalance_delay_ms
        group.move(GroupEvent.MEMBER_JOINS, now_ms)
        for member in group.members.values():
            member.synced = True       # no sync is pending in a rebalance
        group.join_deadline_ms = now_ms + max(group.rebalance_timeout_ms(), self.group_initial_rebalance_delay_ms
                                              if group.initial_rebalance else 0)

    def _extend_initial_rebalance(self, group: Group, now_ms: int) -> None:
        """A new member during the initial delay: wait another delay for more, up to
        the rebalance timeout (Kafka's tryCompleteInitialRebalanceElseSchedule)."""
        group.join_not_before_ms = min(max(group.join_not_before_ms, now_ms + self.group_initial_rebalance_delay_ms),
                                       group.join_deadline_ms)

    def join_complete_due(self, group_id: str, now_ms: int) -> bool:
        """True when `maybe_complete_join` would complete the join phase now: every
        member rejoined (after the initial delay, for a group that was Empty), or the
        deadline passed."""
        group = self.groups.get(group_id)
        if group is None or group.state is not GroupState.PREPARING_REBALANCE:
            return False
        if now_ms >= group.join_deadline_ms:
            return True
        if group.initial_rebalance:
            return now_ms >= group.join_not_before_ms
        return all(m.joined for m in group.members.values())

    def maybe_complete_join(self, group_id: str, now_ms: int) -> tuple[bool, list]:
        """(whether the generation moved on, records to write). Kafka's
        completeClassicGroupJoin: dynamic members that did not rejoin are dropped;
        if nobody rejoined the phase waits another rebalance timeout (static members
        may still come back); with nobody left the group becomes Empty by replaying
        the returned record."""
        if not self.join_complete_due(group_id, now_ms):
            return False, []
        group = self.groups[group_id]
        for member_id in [m for m, member in group.members.items()
                          if not member.joined and member.group_instance_id is None]:
            del group.members[member_id]
        if not group.members:
            next_state(group.state, GroupEvent.LAST_MEMBER_LEAVES)
            empty = dataclasses.replace(group, members={}, generation=group.generation + 1, leader=None,
                                        protocol_name=None)
            return True, [self.metadata_record(empty, now_ms)]
        joined = [m for m, member in group.members.items() if member.joined]
        if not joined:
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
            return False, []
        if group.leader not in joined:
            group.leader = joined[0]
        group.generation += 1
        group.protocol_name = group.select_protocol()
        group.initial_rebalance = False
        for member in group.members.values():
            member.joined, member.synced, member.assignment = False, False, b""
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()
        group.move(GroupEvent.JOIN_COMPLETES, now_ms)
        self.completed_rebalances += 1
        return True, []

    def join_answer(self, group_id: str, member_id: str) -> JoinAnswer:
        """The answer of a parked JoinGroup whose generation completed."""
        return self._answer(self.groups[group_id], member_id)

    def _answer(self, group: Group, member_id: str, *, members: bool = True) -> JoinAnswer:
        leads = member_id == group.leader and members
        return JoinAnswer(member_id, group.generation, group.protocol_type, group.protocol_name, group.leader or "",
                          group.members_for_leader() if leads else ())

    # --- sync, heartbeat, leave ----------------------------------------------------------

    def sync(self, group_id: str, member_id: str, generation: int, *, group_instance_id: str | None = None,
             protocol_type: str | None = None, protocol_name: str | None = None,
             assignments: dict[str, bytes] | None = None, now_ms: int) -> tuple[list, bytes | None]:
        """(records to write, the member's assignment bytes, or None while the
        leader's assignment has not arrived: the caller waits for `sync_outcome`).
        The leader's sync in CompletingRebalance returns the group metadata record
        with every member's assignment (a member it left out gets none); replaying it
        makes the group Stable."""
        group = self._group_with_members(group_id)
        self._validate(group, member_id, group_instance_id, generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            raise InconsistentGroupProtocol(f"SyncGroup names {protocol_type!r}/{protocol_name!r}; group "
                                            f"{group_id} runs {group.protocol_type!r}/{group.protocol_name!r}")
        if group.state is GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgress(f"group {group_id} is rebalancing: rejoin")
        member = group.members[member_id]
        member.last_heartbeat_ms, member.synced = now_ms, True
        if group.state is GroupState.STABLE:
            return [], member.assignment
        if member_id != group.leader:
            return [], None
        next_state(group.state, GroupEvent.LEADER_SYNCS)   # the move replay makes must be in the table
        assignments = assignments or {}
        members = {m: dataclasses.replace(member, assignment=bytes(assignments.get(m, b"")))
                   for m, member in group.members.items()}
        return [self.metadata_record(dataclasses.replace(group, members=members), now_ms)], None

    def sync_write_failed(self, group_id: str, generation: int, now_ms: int) -> None:
        """The leader's sync record for `generation` was not written (Kafka's
        resetAndPropagateAssignmentWithError, then maybePrepareRebalanceOrCompleteJoin):
        a group still CompletingRebalance at that generation drops every member's
        assignment and rebalances, so the followers waiting on `sync_outcome` are
        told to rejoin instead of waiting out their deadline. The record may have
        landed all the same (a timeout): the next generation's record follows it."""
        group = self.groups.get(group_id)
        if group is None or group.state is not GroupState.COMPLETING_REBALANCE or group.generation != generation:
            return
        for member in group.members.values():
            member.assignment = b""
        self._prepare_rebalance(group, now_ms)

    def sync_outcome(self, group_id: str, member_id: str, generation: int,
                     group_instance_id: str | None = None) -> bytes | None:
        """For a sync waiting on the leader's: its assignment once the group is
        Stable at `generation`, None while still waiting; raises what ended the wait
        (a new rebalance, the member removed or fenced)."""
        group = self._group_with_members(group_id)
        self._validate(group, member_id, group_instance_id, generation)
        if group.state is GroupState.STABLE:
            return group.members[member_id].assignment
        if group.state is not GroupState.COMPLETING_REBALANCE:
            raise RebalanceInProgress(f"group {group_id} is rebalancing: rejoin")
        return None

    def heartbeat(self, group_id: str, member_id: str, generation: int, *, group_instance_id: str | None = None,
                  now_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is None:
            raise UnknownMemberId(f"group {group_id} does not exist")
        self._validate(group, member_id, group_instance_id, generation)
        if group.state is GroupState.EMPTY:
            raise UnknownMemberId(f"group {group_id} is Empty")
        group.members[member_id].last_heartbeat_ms = now_ms
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

    def leave(self, group_id: str, members: Sequence[tuple[str, str | None]],
              now_ms: int) -> tuple[list, list[KafkaError | None]]:
        """Kafka's classicGroupLeaveToClassicGroup, for (member id, instance id)
        pairs: (records, each pair's error or None). A pair with member id "" removes
        the static member of that instance id (an operator's removal); otherwise the
        pair must name a current member (FENCED_INSTANCE_ID for a replaced one).
        The group rebalances once for all of them."""
        group = self.groups.get(group_id)
        if group is None:
            raise UnknownMemberId(f"group {group_id} does not exist")
        if group.state is GroupState.DEAD:
            raise CoordinatorNotAvailable(f"group {group_id} is being removed")
        leaving: list[str] = []
        errors: list[KafkaError | None] = []
        for member_id, instance_id in members:
            try:
                if not member_id:
                    found = group.static_members.get(instance_id) if instance_id is not None else None
                    if found is None:
                        raise UnknownMemberId(f"no member has group.instance.id {instance_id!r}")
                    member_id = found
                else:
                    validate_member(members=group.members, static_members=group.static_members,
                                    member_id=member_id, group_instance_id=instance_id)
                if member_id not in leaving:
                    leaving.append(member_id)
                errors.append(None)
            except KafkaError as error:
                errors.append(error)
        return (self._remove(group, leaving, now_ms) if leaving else []), errors

    # --- expiry ------------------------------------------------------------------------

    def expire_members(self, now_ms: int) -> list:
        """`expire_group_members` for every group."""
        records = []
        for group_id in list(self.groups):
            records += self.expire_group_members(group_id, now_ms)
        return records

    def has_silent_members(self, group_id: str, now_ms: int) -> bool:
        """Members past their session timeout, or past the sync deadline without a sync."""
        group = self.groups.get(group_id)
        return group is not None and bool(self._expired(group, now_ms))

    def expire_group_members(self, group_id: str, now_ms: int) -> list:
        """Removes the group's members silent for longer than their session timeout
        (static members too: it is how they leave without LeaveGroup), and those that
        did not sync within the rebalance timeout after their join completed; returns
        the records to write (the last member going: replaying makes the group Empty)."""
        group = self.groups.get(group_id)
        expired = self._expired(group, now_ms) if group is not None else []
        return self._remove(group, expired, now_ms) if expired else []

    @staticmethod
    def _expired(group: Group, now_ms: int) -> list[str]:
        silent = [m.member_id for m in group.members.values() if now_ms - m.last_heartbeat_ms > m.session_timeout_ms]
        if group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and now_ms >= group.sync_deadline_ms:
            silent += [m.member_id for m in group.members.values() if not m.synced and m.member_id not in silent]
        return silent

    def _remove(self, group: Group, member_ids: list[str], now_ms: int) -> list:
        if set(member_ids) >= set(group.members):
            # The group becomes Empty by replaying this record once it is written.
            next_state(group.state, GroupEvent.LAST_MEMBER_LEAVES)
            empty = dataclasses.replace(group, members={}, generation=group.generation + 1, leader=None,
                                        protocol_name=None)
            return [self.metadata_record(empty, now_ms)]
        for member_id in member_ids:
            del group.members[member_id]
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        if group.state is not GroupState.PREPARING_REBALANCE:
            group.move(GroupEvent.MEMBER_LEAVES, now_ms)
            group.initial_rebalance = False
            for member in group.members.values():
                member.synced = True
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
        return []

    def _group_with_members(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None or not group.members:
            raise UnknownMemberId(f"group {group_id} has no members")
        return group

    @staticmethod
    def _validate(group: Group, member_id: str, group_instance_id: str | None, generation: int) -> None:
        if group.state is GroupState.DEAD:
            raise CoordinatorNotAvailable(f"group {group.group_id} is being removed")
        validate_member(members=group.members, static_members=group.static_members, member_id=member_id,
                        group_instance_id=group_instance_id)
        if generation != group.generation:
            raise IllegalGeneration(f"generation {generation} is not group {group.group_id}'s current "
                                    f"{group.generation}")

    # --- records ------------------------------------------------------------------

    @staticmethod
    def metadata_record(group: Group, now_ms: int):
        """Kafka's GroupMetadataValue: each member's metadata for the group's
        protocol and its assignment, as the members sent them."""
        members = tuple(MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                       m.rebalance_timeout_ms, m.session_timeout_ms, m.metadata(group.protocol_name),
                                       m.assignment)
                        for m in group.members.values())
        return GroupKey(group.group_id), GroupValue(group.protocol_type or "", group.generation, group.protocol_name,
                                                    group.leader, now_ms, members)

    def replay(self, key, value, now_ms: int) -> None:
        """A written group record, when loading and once acked live (the one way a
        group becomes Stable or Empty): the group comes back with its members and
        generation (Stable) or Empty; members it held before keep their session
        and whether they synced, others must heartbeat within their session timeout
        from now. A tombstone removes the group."""
        if not isinstance(key, GroupKey):
            return
        if value is None:
            self.groups.pop(key.group, None)
            return
        before = self.groups.get(key.group)
        known = before.members if before is not None and before.generation == value.generation else {}
        members = {}
        for m in value.members:
            previous = known.get(m.member_id)
            members[m.member_id] = Member(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                m.rebalance_timeout_ms if m.rebalance_timeout_ms >= 0 else m.session_timeout_ms,
                ((value.protocol, m.subscription),) if value.protocol is not None else (), assignment=m.assignment,
                last_heartbeat_ms=previous.last_heartbeat_ms if previous is not None else now_ms,
                synced=previous.synced if previous is not None else True)
        state = GroupState.STABLE if members else GroupState.EMPTY
        group = Group(key.group, state, value.generation, value.protocol_type or None, value.protocol,
                      value.leader, members, state_since_ms=value.current_state_timestamp_ms)
        if before is not None and before.generation == value.generation:
            group.sync_deadline_ms = before.sync_deadline_ms
        self.groups[key.group] = group

    # --- what a consumer group subscribes to ----------------------------------------------

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """The topics a "consumer" group's members subscribe to (read from their
        metadata for the group's protocol, Kafka's ConsumerProtocolSubscription);
        None when that is not known: another protocol type, no protocol chosen yet,
        or metadata that does not parse (Kafka's computeSubscribedTopics)."""
        group = self.groups.get(group_id)
        if group is None or group.protocol_type != CONSUMER_PROTOCOL_TYPE or group.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in group.members.values():
            found = subscription_topics(member.metadata(group.protocol_name))
            if found is None:
                return None
            topics |= found
        return topics


def subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription (any version: int16 version,
    then the topics as an int32 count of int16-length strings, then fields this
    does not need), or None if it does not parse. Core reads only this much of
    the consumer protocol, without protocol.consumer_protocol (core imports nothing
    of rafka)."""
    try:
        (version, count), position = struct.unpack_from(">hi", metadata, 0), 6
        if version < 0 or count < 0:
            return None
        topics = set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, position)
            if length < 0 or position + 2 + length > len(metadata):
                return None
            topics.add(metadata[position + 2:position + 2 + length].decode("utf-8"))
            position += 2 + length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
