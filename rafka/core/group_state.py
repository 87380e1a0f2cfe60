"""A consumer group's states, the one table of transitions between them, and the
rule for which offset commits a group accepts (Kafka's classic group protocol).

States: Empty (no members; offsets may be kept), PreparingRebalance (members are
(re)joining), CompletingRebalance (joined; waiting for the leader's assignment),
Stable (assignment handed out), Dead (no members, no offsets: the group is gone).

Invariants:
  a state changes only along TRANSITIONS; any other move is IllegalTransition,
  naming the state and the event
  a commit from a member is accepted only from a known member at the group's
  current generation (a static member replaced by a newer one with its
  group.instance.id: FENCED_INSTANCE_ID), and never while the assignment is being
  completed
Pure logic, no I/O. Caller: the group coordinator.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping

from rafka.core.errors import (CoordinatorNotAvailable, FencedInstanceId, IllegalGeneration, RebalanceInProgress,
                               UnknownMemberId)


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupEvent(enum.Enum):
    MEMBER_JOINS = "member joins"                 # a new or changed member (re)joins
    JOIN_COMPLETES = "join completes"             # every member joined, or the rebalance timeout ended
    LEADER_SYNCS = "leader syncs"                 # the leader's assignment arrives
    MEMBER_LEAVES = "member leaves"               # leave request, session or poll timeout (others remain)
    STATIC_MEMBER_REPLACED = "static member replaced"   # a known instance id rejoins, nothing else changes
    LAST_MEMBER_LEAVES = "last member leaves"
    GROUP_DELETED = "group deleted"               # delete request, or offsets expired while Empty


S, E = GroupState, GroupEvent
TRANSITIONS: dict[GroupState, dict[GroupEvent, GroupState]] = {
    S.EMPTY: {E.MEMBER_JOINS: S.PREPARING_REBALANCE, E.GROUP_DELETED: S.DEAD},
    S.PREPARING_REBALANCE: {E.MEMBER_JOINS: S.PREPARING_REBALANCE, E.JOIN_COMPLETES: S.COMPLETING_REBALANCE,
                            E.MEMBER_LEAVES: S.PREPARING_REBALANCE, E.LAST_MEMBER_LEAVES: S.EMPTY},
    S.COMPLETING_REBALANCE: {E.MEMBER_JOINS: S.PREPARING_REBALANCE, E.LEADER_SYNCS: S.STABLE,
                             E.MEMBER_LEAVES: S.PREPARING_REBALANCE, E.LAST_MEMBER_LEAVES: S.EMPTY},
    S.STABLE: {E.MEMBER_JOINS: S.PREPARING_REBALANCE, E.MEMBER_LEAVES: S.PREPARING_REBALANCE,
               E.LAST_MEMBER_LEAVES: S.EMPTY, E.STATIC_MEMBER_REPLACED: S.STABLE},
    S.DEAD: {},
}


class IllegalTransition(Exception):
    """A programmer error: the coordinator asked for a move the table does not have."""

    def __init__(self, state: GroupState, event: GroupEvent) -> None:
        super().__init__(f"a group in state {state.value} cannot take the event '{event.value}'")
        self.state, self.event = state, event


def next_state(state: GroupState, event: GroupEvent) -> GroupState:
    try:
        return TRANSITIONS[state][event]
    except KeyError:
        raise IllegalTransition(state, event) from None


def validate_member(*, members: Collection[str], static_members: Mapping[str, str], member_id: str,
                    group_instance_id: str | None) -> None:
    """Kafka's ClassicGroup.validateMember: an instance id must be the group's and
    name this member id (another id: the member was replaced by a newer one with
    the same instance id, FENCED_INSTANCE_ID); the member id must be known."""
    if group_instance_id is not None:
        current = static_members.get(group_instance_id)
        if current is None:
            raise UnknownMemberId(f"no member of the group has group.instance.id {group_instance_id!r}")
        if current != member_id:
            raise FencedInstanceId(f"member {member_id!r} of group.instance.id {group_instance_id!r} was "
                                   f"replaced by {current!r}")
    if member_id not in members:
        raise UnknownMemberId(f"member {member_id!r} is not in the group")


def validate_offset_commit(*, state: GroupState, generation: int, members: Collection[str],
                           member_id: str, commit_generation: int, group_instance_id: str | None = None,
                           static_members: Mapping[str, str] | None = None, transactional: bool = False) -> None:
    """Kafka's ClassicGroup.validateOffsetCommit. Generation -1 on an Empty group:
    a commit from outside the group protocol (assign mode, admin tools), accepted.
    A commit naming a member (id, instance id or generation) must come from a
    current member (a replaced static member: FENCED_INSTANCE_ID) at the group's
    generation, and not while the group waits for its assignment. A commit naming
    nothing is refused while the group has members. A `transactional` one
    (TxnOffsetCommit) naming nothing is accepted in any state (its versions before
    KIP-447 name no member), and one naming a member also while the group
    completes a rebalance."""
    if state is GroupState.DEAD:
        raise CoordinatorNotAvailable("the group is dead (deleted or expired): retry to find its coordinator")
    if commit_generation < 0 and state is GroupState.EMPTY:
        return
    if commit_generation >= 0 or member_id or group_instance_id is not None:
        validate_member(members=members, static_members=static_members or {}, member_id=member_id,
                        group_instance_id=group_instance_id)
        if commit_generation != generation:
            raise IllegalGeneration(f"generation {commit_generation} is not the group's current {generation}")
    elif state is not GroupState.EMPTY and not transactional:
        raise UnknownMemberId("the group has members: a commit outside the group protocol is refused")
    if state is GroupState.COMPLETING_REBALANCE and not transactional:
        raise RebalanceInProgress("the group is completing a rebalance: commit after the assignment")
