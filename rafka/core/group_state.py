"""A consumer group's states, the one table of transitions between them, and the
rule for which offset commits a group accepts (Kafka's classic group protocol).

States: Empty (no members; offsets may be kept), PreparingRebalance (members are
(re)joining), CompletingRebalance (joined; waiting for the leader's assignment),
Stable (assignment handed out), Dead (no members, no offsets: the group is gone).

Invariants:
  a state changes only along TRANSITIONS; any other move is IllegalTransition,
  naming the state and the event
  a commit from a member is accepted only from a known member at the group's
  current generation, and never while the assignment is being completed
Pure logic, no I/O. Caller: the group coordinator.
"""

from __future__ import annotations

import enum

from rafka.core.errors import (CoordinatorNotAvailable, IllegalGeneration, RebalanceInProgress,
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
               E.LAST_MEMBER_LEAVES: S.EMPTY},
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


def validate_offset_commit(*, state: GroupState, generation: int, members: set[str] | frozenset[str],
                           member_id: str, commit_generation: int) -> None:
    """Kafka's rule. A commit with no member id and generation -1 comes from a
    consumer outside the group protocol (assign mode): accepted only while the
    group has no members. Otherwise the member must be known and at the current
    generation, and the group not waiting for its assignment."""
    if state is GroupState.DEAD:
        raise CoordinatorNotAvailable("the group is dead (deleted or expired): retry to find its coordinator")
    if not member_id and commit_generation < 0:
        if members:
            raise UnknownMemberId("the group has members: a commit outside the group protocol is refused")
        return
    if member_id not in members:
        raise UnknownMemberId(f"member {member_id!r} is not in the group")
    if commit_generation != generation:
        raise IllegalGeneration(f"generation {commit_generation} is not the group's current {generation}")
    if state is GroupState.COMPLETING_REBALANCE:
        raise RebalanceInProgress("the group is completing a rebalance: commit after the assignment")
