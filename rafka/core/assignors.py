"""Kafka's consumer partition assignors: range, roundrobin, sticky and
cooperative-sticky.

Caller: the group's leader member (client.membership), which runs the assignor
of the group's chosen protocol over every member's subscription when a rebalance
completes (Kafka's classic protocol: the coordinator only relays the result). Pure functions of their input: no I/O, no
clock, no randomness, so the same group always gets the same assignment.

Invariants of every `assign()` result:
- every member id of `subscriptions` is a key; a member with nothing gets [];
- each (topic, partition) of a subscribed, known topic goes to exactly one member
  (cooperative-sticky: at most one, none while it moves away from its owner),
  and only to a member subscribed to that topic; topics missing from
  `partitions_per_topic` are skipped, as Kafka skips unknown topics;
- each member's list is sorted.

range and roundrobin copy the Java client's RangeAssignor and RoundRobinAssignor.
sticky keeps StickyAssignor's goals, not its algorithm: keep every valid owned
partition, deal the rest to the least-loaded subscriber, then move partitions from
the most- to the least-loaded subscriber until no move narrows a gap of two or
more. With equal subscriptions that is balanced within one and keeps as many owned
partitions as a balanced result can. The cost: moves are found by scanning,
O(partitions * members) each, fine for the group sizes rafka bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rafka.core.errors import InvalidRequest

TopicPartition = tuple[str, int]
Assignment = dict[str, list[TopicPartition]]


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation: int = -1


class Assignor(Protocol):
    name: str

    def assign(self, partitions_per_topic: dict[str, int],
               subscriptions: dict[str, Subscription]) -> Assignment: ...


def _members_by_topic(partitions_per_topic: dict[str, int],
                      subscriptions: dict[str, Subscription]) -> dict[str, list[str]]:
    """Known subscribed topics, sorted, each with its subscribers sorted by member id."""
    topics = sorted({t for s in subscriptions.values() for t in s.topics if t in partitions_per_topic})
    return {t: sorted(m for m, s in subscriptions.items() if t in s.topics) for t in topics}


def _sorted_result(assignment: dict[str, set[TopicPartition]] | dict[str, list[TopicPartition]],
                   subscriptions: dict[str, Subscription]) -> Assignment:
    """Sorts each member's list, raising if a partition went twice or to a non-subscriber."""
    seen: set[TopicPartition] = set()
    for member, partitions in assignment.items():
        for tp in partitions:
            if tp in seen or tp[0] not in subscriptions[member].topics:
                raise RuntimeError(f"assignor bug: {tp} given twice or to non-subscriber {member!r}")
            seen.add(tp)
    return {member: sorted(assignment.get(member, ())) for member in subscriptions}


class RangeAssignor:
    """Per topic, contiguous ranges; the first (partitions % members) members get one extra."""

    name = "range"

    def assign(self, partitions_per_topic: dict[str, int],
               subscriptions: dict[str, Subscription]) -> Assignment:
        assignment: Assignment = {m: [] for m in subscriptions}
        for topic, members in _members_by_topic(partitions_per_topic, subscriptions).items():
            per_member, with_extra = divmod(partitions_per_topic[topic], len(members))
            for i, member in enumerate(members):
                start = per_member * i + min(i, with_extra)
                length = per_member + (1 if i < with_extra else 0)
                assignment[member].extend((topic, p) for p in range(start, start + length))
        return _sorted_result(assignment, subscriptions)


class RoundRobinAssignor:
    """All partitions by (topic, partition) dealt over the sorted members, skipping
    members not subscribed to the partition's topic; the position carries over."""

    name = "roundrobin"

    def assign(self, partitions_per_topic: dict[str, int],
               subscriptions: dict[str, Subscription]) -> Assignment:
        assignment: Assignment = {m: [] for m in subscriptions}
        members = sorted(subscriptions)
        position = 0
        for topic in _members_by_topic(partitions_per_topic, subscriptions):
            for partition in range(partitions_per_topic[topic]):
                while topic not in subscriptions[members[position % len(members)]].topics:
                    position += 1
                assignment[members[position % len(members)]].append((topic, partition))
                position += 1
        return _sorted_result(assignment, subscriptions)


def _previous_owners(partitions_per_topic: dict[str, int],
                     subscriptions: dict[str, Subscription]) -> dict[TopicPartition, str]:
    """Owner of each partition by the highest generation claiming it. Two claims in
    that generation cancel out (Kafka invalidates them). Claims on a partition that
    no longer exists or on a topic the member left are dropped."""
    claims: dict[TopicPartition, list[tuple[int, str]]] = {}
    for member, s in subscriptions.items():
        for topic, partition in set(s.owned_partitions):
            if topic in s.topics and 0 <= partition < partitions_per_topic.get(topic, 0):
                claims.setdefault((topic, partition), []).append((s.generation, member))
    owners = {}
    for tp, claimants in claims.items():
        top_generation = max(g for g, _ in claimants)
        winners = [m for g, m in claimants if g == top_generation]
        if len(winners) == 1:
            owners[tp] = winners[0]
    return owners


class StickyAssignor:
    """Balanced, and moves as few previously owned partitions as balance allows."""

    name = "sticky"

    def assign(self, partitions_per_topic: dict[str, int],
               subscriptions: dict[str, Subscription]) -> Assignment:
        members_by_topic = _members_by_topic(partitions_per_topic, subscriptions)
        owners = _previous_owners(partitions_per_topic, subscriptions)
        assignment: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
        for tp, owner in owners.items():
            assignment[owner].add(tp)
        for topic, members in members_by_topic.items():
            for tp in ((topic, p) for p in range(partitions_per_topic[topic])):
                if tp not in owners:
                    assignment[min(members, key=lambda m: (len(assignment[m]), m))].add(tp)
        while _move_one(assignment, members_by_topic, owners):
            pass
        return _sorted_result(assignment, subscriptions)


def _move_one(assignment: dict[str, set[TopicPartition]], members_by_topic: dict[str, list[str]],
              owners: dict[TopicPartition, str]) -> bool:
    """Moves one partition from the most-loaded member that can give one to the
    least-loaded subscriber with at least two fewer. Each move lowers the sum of
    squared loads, so repeating it terminates. Gives up new partitions before owned ones."""
    for giver in sorted(assignment, key=lambda m: (-len(assignment[m]), m)):
        load_max = len(assignment[giver]) - 2
        for tp in sorted(assignment[giver], key=lambda tp: (owners.get(tp) == giver, tp)):
            takers = [m for m in members_by_topic[tp[0]] if len(assignment[m]) <= load_max]
            if takers:
                taker = min(takers, key=lambda m: (len(assignment[m]), m))
                assignment[giver].remove(tp)
                assignment[taker].add(tp)
                return True
    return False


class CooperativeStickyAssignor(StickyAssignor):
    """KIP-429: sticky's assignment, less every partition that moves from one
    member to another: this round leaves it unassigned (its owner revokes only it
    and rejoins), the next round, with the owner no longer claiming it, gives it to
    its new member. So no partition is owned by two members at once, and members
    keep consuming what does not move."""

    name = "cooperative-sticky"
    cooperative = True

    def assign(self, partitions_per_topic: dict[str, int],
               subscriptions: dict[str, Subscription]) -> Assignment:
        assignment = super().assign(partitions_per_topic, subscriptions)
        owners = _previous_owners(partitions_per_topic, subscriptions)
        return {member: [tp for tp in partitions if owners.get(tp, member) == member]
                for member, partitions in assignment.items()}


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (RangeAssignor(), RoundRobinAssignor(), StickyAssignor(),
                                                      CooperativeStickyAssignor())}


def is_cooperative(names) -> bool:
    """Kafka's ConsumerCoordinator: a consumer rebalances cooperatively only when
    every assignor it offers supports it (any eager one makes the protocol eager)."""
    return all(getattr(assignor(name), "cooperative", False) for name in names)


def assignor(name: str) -> Assignor:
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise InvalidRequest(f"unknown partition assignor {name!r}; known: {', '.join(sorted(ASSIGNORS))}") from None
