"""Consumer groups of the new protocol (KIP-848) of one `__consumer_offsets`
partition, as Kafka's GroupMetadataManager, ConsumerGroup and
CurrentAssignmentBuilder run them.

The coordinator assigns; members only heartbeat (ConsumerGroupHeartbeat). A group
has an epoch that grows whenever what it must assign changes (a member joins,
leaves, is fenced, changes its subscription; a subscribed topic gains
partitions). When the group epoch is ahead of the target assignment's epoch, the
next heartbeat runs the group's server-side assignor ("uniform": balanced and
sticky, the default; "range") over every member's subscription: that is the
target assignment, at the group epoch. Each member then reconciles towards its
target, one heartbeat at a time:
  * partitions it owns that are not in its target are pending revocation: the
    member keeps its epoch until a heartbeat reports it no longer owns them
    (state UNREVOKED_PARTITIONS);
  * then it takes the target epoch and is given the partitions of its target that
    no other member still holds; the ones another member still holds (assigned
    or pending revocation) wait (UNRELEASED_PARTITIONS) and are given once freed;
  * it is STABLE when it owns exactly its target at the target epoch.
So a partition is given to its new owner only once its previous owner revoked it:
no partition has two owners.

A member subscribes to topic names, a regular expression (matched whole against
every topic at each heartbeat, internal topics never: a topic made later that
matches joins the group's subscription), or both.

Members leave with epoch -1 (a static member with -2: it keeps its place and
partitions until its session times out, and its instance id may rejoin with a new
member id). A member silent past the session timeout, or one that has not
revoked within its rebalance timeout, is fenced: removed, and the group epoch
bumped. A heartbeat with an epoch the coordinator does not know gets
FENCED_MEMBER_EPOCH (the member gives everything up and rejoins with epoch 0);
the previous epoch is accepted when the member owns a subset of its assignment
(the answer that bumped it may have been lost). A known member joining again
(epoch 0, owning nothing) starts over under its id.

Written and transient state, as core.group_manager: every decision returns the
records to write (Kafka's record types, core.consumer_group_records) and the
group changes only when they are replayed, once acked, so a failover replays the
same group; session and rebalance deadlines are never written (Kafka's timers):
after a failover every member gets a new session from the load.

Invariants:
  a member's epoch never exceeds the target assignment's epoch, which never
  exceeds the group epoch
  a partition is in at most one member's assigned or pending-revocation set, and
  is assigned to a member only when no other member holds it
  a group holds at most `max_group_size` members (GROUP_MAX_SIZE_REACHED)
  every record returned replays to the state the answer describes; the caller
  keeps the group still until then (core.coordinator_shard's per-group lock)
Pure logic, no I/O; time is passed in. Caller: core.coordinator_shard.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import uuid
from collections.abc import Callable, Iterable, Mapping

from rafka.core.actor_names import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from rafka.core.assignors import RangeAssignor, StickyAssignor, Subscription
from rafka.core.consumer_group_records import (ConsumerGroupMetadataKey, ConsumerGroupMetadataValue,
                                               CurrentAssignmentKey, CurrentAssignmentValue, MemberMetadataKey,
                                               MemberMetadataValue, PartitionMetadataKey, PartitionMetadataValue,
                                               SubscribedTopic, TargetAssignmentMemberKey,
                                               TargetAssignmentMemberValue, TargetAssignmentMetadataKey,
                                               TargetAssignmentMetadataValue, TopicPartitions, sorted_partitions)
from rafka.core.errors import (FencedInstanceId, FencedMemberEpoch, GroupIdNotFound, GroupMaxSizeReached,
                               InvalidRegularExpression, InvalidRequest, StaleMemberEpoch, UnknownMemberId, UnreleasedInstanceId,
                               UnsupportedAssignor)

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
NOT_SET = -1            # rebalance timeout "unchanged since the last heartbeat"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
MAX_RESOLVED_REGEXES = 1_024   # regexes whose matches are kept (the least recently used goes first)
TopicMetadata = Mapping[str, tuple[uuid.UUID, int]]   # topic name -> (topic id, partition count)


class MemberState(enum.IntEnum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


def as_sets(partitions: TopicPartitions) -> dict[uuid.UUID, set[int]]:
    return {topic_id: set(parts) for topic_id, parts in partitions}


@dataclasses.dataclass(frozen=True)
class Member:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = NOT_SET
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: TopicPartitions = ()
    pending_revocation: TopicPartitions = ()

    def metadata_record(self, group_id: str):
        return MemberMetadataKey(group_id, self.member_id), MemberMetadataValue(
            self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
            self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor)

    def assignment_record(self, group_id: str):
        return CurrentAssignmentKey(group_id, self.member_id), CurrentAssignmentValue(
            self.member_epoch, self.previous_member_epoch, int(self.state), self.assigned, self.pending_revocation)

    def topics(self, known: Iterable[str], resolve: Callable[[str], frozenset[str]] | None = None) -> set[str]:
        """What it subscribes to: its topic names, and the `known` topics its regex
        matches (`resolve(regex)`, else matched here: regex_matches)."""
        topics = set(self.subscribed_topic_names)
        if self.subscribed_topic_regex:
            topics |= (resolve(self.subscribed_topic_regex) if resolve is not None
                       else regex_matches(self.subscribed_topic_regex, known))
        return topics

    def reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch

    def with_epoch(self, epoch: int, **changes) -> Member:
        """Kafka's updateMemberEpoch: the previous epoch is the one it leaves."""
        return dataclasses.replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch, **changes)


def regex_matches(regex: str, known: Iterable[str]) -> frozenset[str]:
    """The `known` topics `regex` matches whole (Kafka's RE2J matches()); internal
    topics never match."""
    pattern = re.compile(regex)
    return frozenset(t for t in known if t not in INTERNAL_TOPICS and pattern.fullmatch(t))


@dataclasses.dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    subscribed_topics: tuple[SubscribedTopic, ...] = ()
    members: dict[str, Member] = dataclasses.field(default_factory=dict)
    target: dict[str, TopicPartitions] = dataclasses.field(default_factory=dict)
    # never written (Kafka's timers): member id -> deadline
    session_deadline_ms: dict[str, int] = dataclasses.field(default_factory=dict)
    revocation_deadline_ms: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)  # (epoch, ms)

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroupState names."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(not m.reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def static_member(self, instance_id: str | None) -> Member | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def partition_epochs(self) -> dict[tuple[uuid.UUID, int], int]:
        """Each held partition -> its holder's epoch (assigned or pending revocation)."""
        epochs = {}
        for member in self.members.values():
            for topic_id, parts in member.assigned + member.pending_revocation:
                for p in parts:
                    epochs[(topic_id, p)] = member.member_epoch
        return epochs

    def subscribed_topic_names(self) -> set[str] | None:
        """The topic names its members subscribe to; None when a member subscribes
        by regex (every topic must be looked at)."""
        if any(m.subscribed_topic_regex for m in self.members.values()):
            return None
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    def topic_names_by_id(self) -> dict[uuid.UUID, str]:
        return {t.topic_id: t.name for t in self.subscribed_topics}


@dataclasses.dataclass(frozen=True)
class HeartbeatAnswer:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: TopicPartitions | None = None   # None: unchanged, not sent


ASSIGNORS = {"uniform": StickyAssignor(), "range": RangeAssignor()}
DEFAULT_ASSIGNOR = "uniform"


class ConsumerGroups:
    def __init__(self, *, session_timeout_ms: int = 45_000, heartbeat_interval_ms: int = 5_000,
                 max_group_size: int = 1_000) -> None:
        self.session_timeout_ms = session_timeout_ms          # group.consumer.session.timeout.ms
        self.heartbeat_interval_ms = heartbeat_interval_ms    # group.consumer.heartbeat.interval.ms
        self.max_group_size = max_group_size                  # group.consumer.max.size
        self.groups: dict[str, ConsumerGroup] = {}
        self.rebalances = 0    # group epoch bumps (Kafka's consumer-group-rebalance count)
        # regex -> (the topic names it was matched against, its matches): a regex is
        # matched again only when the topics changed, not at every heartbeat of every
        # member (Kafka's coordinator resolves regexes once per metadata image too)
        self._resolved_regexes: dict[str, tuple[frozenset[str], frozenset[str]]] = {}

    # --- ConsumerGroupHeartbeat ----------------------------------------------------------

    def heartbeat(self, group_id: str, *, member_id: str, member_epoch: int, instance_id: str | None = None,
                  rack_id: str | None = None, rebalance_timeout_ms: int = NOT_SET, client_id: str = "",
                  client_host: str = "", subscribed_topic_names: Iterable[str] | None = None,
                  subscribed_topic_regex: str | None = None, server_assignor: str | None = None,
                  owned: TopicPartitions | None = None, topics: TopicMetadata,
                  now_ms: int) -> tuple[list, HeartbeatAnswer]:
        """Kafka's consumerGroupHeartbeat: (records to write, the answer). `topics`:
        id and partition count of every existing topic the group's members (this
        one's new subscription included) subscribe to. `owned`: None when the
        member did not send them (unchanged)."""
        names = tuple(subscribed_topic_names) if subscribed_topic_names is not None else None
        self._validate(group_id, member_id, member_epoch, instance_id, rebalance_timeout_ms, names,
                       subscribed_topic_regex, server_assignor, owned)
        if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group_id, member_id, member_epoch, instance_id, topics)
        joining = member_epoch == JOIN_EPOCH
        group = self.groups.get(group_id)
        if group is None:
            if not joining:
                raise GroupIdNotFound(f"Consumer group {group_id} not found.")
            group = ConsumerGroup(group_id)
        if len(group.members) >= self.max_group_size and member_id not in group.members:
            raise GroupMaxSizeReached(f"The consumer group has reached its maximum capacity of "
                                      f"{self.max_group_size} members.")
        member_id = member_id or str(uuid.uuid4())   # v0: the coordinator names a new member
        records: list = []
        member, replaced = self._member(group, member_id, member_epoch, instance_id, owned, joining)
        if replaced is not None:
            records += self._replace(group, replaced, member)
        updated = dataclasses.replace(
            member, client_id=client_id, client_host=client_host,
            instance_id=instance_id if instance_id is not None else member.instance_id,
            rack_id=rack_id if rack_id is not None else member.rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms if rebalance_timeout_ms != NOT_SET
            else member.rebalance_timeout_ms,
            server_assignor=server_assignor if server_assignor is not None else member.server_assignor,
            subscribed_topic_names=tuple(sorted(set(names))) if names is not None else member.subscribed_topic_names,
            subscribed_topic_regex=(subscribed_topic_regex or None) if subscribed_topic_regex is not None
            else member.subscribed_topic_regex)
        if updated != member or joining:
            records.append(updated.metadata_record(group_id))
        # a static member replacing its old id keeps its subscription and target: no rebalance
        bump = (updated.subscribed_topic_names, updated.subscribed_topic_regex) != (
            member.subscribed_topic_names, member.subscribed_topic_regex)
        members = {**group.members, member_id: updated}
        if replaced is not None:
            members.pop(replaced.member_id, None)
        subscribed = self._subscribed_topics(members.values(), topics)
        if subscribed != group.subscribed_topics:
            records.append((PartitionMetadataKey(group_id), PartitionMetadataValue(subscribed)))
            bump = True
        group_epoch = group.group_epoch
        if bump:
            group_epoch += 1
            self.rebalances += 1
            records.append((ConsumerGroupMetadataKey(group_id), ConsumerGroupMetadataValue(group_epoch)))
        target_epoch = group.assignment_epoch
        targets = dict(group.target)
        if replaced is not None:
            targets[member_id] = targets.pop(replaced.member_id, ())
        if group_epoch > group.assignment_epoch:
            targets, written = self._target_assignment(group, members, subscribed, targets, group_epoch)
            records += written
            target_epoch = group_epoch
        reconciled = self._reconcile(group, updated, target_epoch, targets.get(member_id, ()), owned)
        if reconciled != updated or member_id not in group.members:
            records.append(reconciled.assignment_record(group_id))
            self._track_revocation(group, reconciled, now_ms)
        group.session_deadline_ms[member_id] = now_ms + self.session_timeout_ms
        # Kafka's isFullRequest: what a client sends after a lost answer (a regex alone subscribes too)
        full = joining or (rebalance_timeout_ms != NOT_SET and (names is not None or subscribed_topic_regex is not None)
                           and owned is not None)
        sent = reconciled.assigned if full or reconciled.assigned != member.assigned else None
        return records, HeartbeatAnswer(member_id, reconciled.member_epoch, self.heartbeat_interval_ms, sent)

    def _validate(self, group_id: str, member_id: str, member_epoch: int, instance_id: str | None,
                  rebalance_timeout_ms: int, names: tuple[str, ...] | None, regex: str | None,
                  server_assignor: str | None, owned: TopicPartitions | None) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        if not group_id:
            raise InvalidRequest("GroupId can't be empty.")
        if instance_id == "":
            raise InvalidRequest("InstanceId can't be empty.")
        if regex:   # "" is no regex: librdkafka sends it with a list of names (Kafka 4 takes it so)
            try:
                re.compile(regex)
            except re.error as error:
                raise InvalidRegularExpression(f"SubscribedTopicRegex {regex} is not a valid regular expression: "
                                               f"{error}.") from None
        if member_epoch > 0 or member_epoch == LEAVE_EPOCH:
            if not member_id:
                raise InvalidRequest("MemberId can't be empty.")
        elif member_epoch == JOIN_EPOCH:
            if rebalance_timeout_ms == NOT_SET:
                raise InvalidRequest("RebalanceTimeoutMs must be provided in first request.")
            if owned is None or owned:
                raise InvalidRequest("TopicPartitions must be empty when (re-)joining.")
            if not names and not regex:
                raise InvalidRequest("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif member_epoch == STATIC_LEAVE_EPOCH:
            if not member_id:
                raise InvalidRequest("MemberId can't be empty.")
            if instance_id is None:
                raise InvalidRequest("InstanceId can't be null.")
        else:
            raise InvalidRequest("MemberEpoch is invalid.")
        if server_assignor is not None and server_assignor not in ASSIGNORS:
            raise UnsupportedAssignor(f"ServerAssignor {server_assignor} is not supported. Supported assignors: "
                                      f"{', '.join(ASSIGNORS)}.")

    def _member(self, group: ConsumerGroup, member_id: str, member_epoch: int, instance_id: str | None,
                owned: TopicPartitions | None, joining: bool) -> tuple[Member, Member | None]:
        """(the member, the static member it replaces or None): Kafka's
        getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise UnknownMemberId(f"Member {member_id} is not a member of group {group.group_id}.")
                return Member(member_id), None
            if joining:
                # It rejoins with nothing (epoch 0 requires no owned partitions), as a
                # client does after FENCED_MEMBER_EPOCH: it starts over under its id
                # instead of being fenced again until its session ends.
                return dataclasses.replace(member, member_epoch=0, previous_member_epoch=0,
                                           state=MemberState.STABLE, assigned=(), pending_revocation=()), None
            self._check_epoch(member, member_epoch, owned)
            return member, None
        existing = group.static_member(instance_id)
        if joining:
            if existing is None:
                return Member(member_id, instance_id=instance_id), None
            if existing.member_epoch != STATIC_LEAVE_EPOCH:
                raise UnreleasedInstanceId(f"Static member {existing.member_id} with instance id {instance_id} "
                                           f"is present in the consumer group {group.group_id}.")
            return dataclasses.replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0), \
                existing
        if existing is None:
            raise UnknownMemberId(f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise FencedInstanceId(f"Static member {member_id} with instance id {instance_id} was fenced by "
                                   f"member {existing.member_id}.")
        self._check_epoch(existing, member_epoch, owned)
        return existing, None

    @staticmethod
    def _check_epoch(member: Member, received: int, owned: TopicPartitions | None) -> None:
        """Kafka's throwIfConsumerGroupMemberEpochIsInvalid."""
        if received > member.member_epoch:
            raise FencedMemberEpoch(f"The consumer group member has a greater member epoch ({received}) than the "
                                    f"one known by the group coordinator ({member.member_epoch}). The member must "
                                    f"abandon all its partitions and rejoin.")
        if received < member.member_epoch:
            assigned = as_sets(member.assigned)
            subset = owned is not None and all(set(parts) <= assigned.get(topic_id, set())
                                               for topic_id, parts in owned)
            if received != member.previous_member_epoch or not subset:
                raise FencedMemberEpoch(f"The consumer group member has a smaller member epoch ({received}) than "
                                        f"the one known by the group coordinator ({member.member_epoch}). The "
                                        f"member must abandon all its partitions and rejoin.")

    def _replace(self, group: ConsumerGroup, old: Member, new: Member) -> list:
        """Kafka's replaceMember: the old static member's records go, the new one takes its target."""
        return [*self._removal(group.group_id, old.member_id), new.metadata_record(group.group_id),
                (TargetAssignmentMemberKey(group.group_id, new.member_id),
                 TargetAssignmentMemberValue(group.target.get(old.member_id, ()))),
                new.assignment_record(group.group_id)]

    @staticmethod
    def _removal(group_id: str, member_id: str) -> list:
        """Kafka's removeMember: the member's tombstones, in this order."""
        return [(CurrentAssignmentKey(group_id, member_id), None), (TargetAssignmentMemberKey(group_id, member_id), None),
                (MemberMetadataKey(group_id, member_id), None)]

    def _subscribed_topics(self, members: Iterable[Member], topics: TopicMetadata) -> tuple[SubscribedTopic, ...]:
        names: frozenset[str] | None = None   # of `topics`: made once, and only for a regex

        def resolve(regex: str) -> frozenset[str]:
            nonlocal names
            if names is None:
                names = frozenset(topics)
            cached = self._resolved_regexes.pop(regex, None)   # re-inserted: the newest, evicted last
            if cached is None or cached[0] != names:
                cached = (names, regex_matches(regex, names))
            self._resolved_regexes[regex] = cached
            if len(self._resolved_regexes) > MAX_RESOLVED_REGEXES:
                del self._resolved_regexes[next(iter(self._resolved_regexes))]
            return cached[1]
        wanted = {t for m in members for t in m.topics(topics, resolve)}
        return tuple(SubscribedTopic(topics[name][0], name, topics[name][1]) for name in sorted(wanted) if name in topics)

    def _target_assignment(self, group: ConsumerGroup, members: Mapping[str, Member],
                           subscribed: tuple[SubscribedTopic, ...], targets: Mapping[str, TopicPartitions],
                           group_epoch: int) -> tuple[dict[str, TopicPartitions], list]:
        """Kafka's TargetAssignmentBuilder: the group's assignor over every member
        (the most-named server assignor wins, then the default); records for each
        member whose target changed, then the assignment epoch."""
        name = preferred_assignor(members.values())
        by_name = {t.name: t for t in subscribed}
        names_by_id = {t.topic_id: t.name for t in subscribed}
        subscriptions = {
            member_id: Subscription(tuple(sorted(m.topics(by_name))),
                                    tuple((names_by_id[topic_id], p) for topic_id, parts in targets.get(member_id, ())
                                          if topic_id in names_by_id for p in parts),
                                    group.assignment_epoch)
            for member_id, m in members.items()}
        assigned = ASSIGNORS[name].assign({t.name: t.partitions for t in subscribed}, subscriptions) \
            if subscriptions else {}
        new_targets = {}
        records = []
        for member_id, partitions in sorted(assigned.items()):
            by_topic: dict[uuid.UUID, list[int]] = {}
            for topic, p in partitions:
                by_topic.setdefault(by_name[topic].topic_id, []).append(p)
            new_targets[member_id] = sorted_partitions(by_topic)
            if new_targets[member_id] != targets.get(member_id) or member_id not in group.target:
                records.append((TargetAssignmentMemberKey(group.group_id, member_id),
                                TargetAssignmentMemberValue(new_targets[member_id])))
        records.append((TargetAssignmentMetadataKey(group.group_id), TargetAssignmentMetadataValue(group_epoch)))
        return new_targets, records

    @staticmethod
    def _reconcile(group: ConsumerGroup, member: Member, target_epoch: int, target: TopicPartitions,
                   owned: TopicPartitions | None) -> Member:
        """Kafka's CurrentAssignmentBuilder: one step of the member towards its target."""
        if member.reconciled_to(target_epoch):
            return member

        def owns_any(partitions: Mapping[uuid.UUID, set[int]]) -> bool:
            if owned is None:
                return True
            return any(p in partitions.get(topic_id, ()) for topic_id, parts in owned for p in parts)

        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owns_any(as_sets(member.pending_revocation)):
                return member
            epoch = member.member_epoch + 1
        elif member.state is MemberState.UNKNOWN:
            if owned is None or owned:
                raise FencedMemberEpoch("The consumer group member is in a unknown state. The member must abandon "
                                        "all its partitions and rejoin.")
            epoch = target_epoch
        else:
            epoch = member.member_epoch
        epochs = group.partition_epochs()
        own = _own(member)
        wanted, current = as_sets(target), as_sets(member.assigned)
        kept, revoking, adding = {}, {}, {}
        unreleased = False
        for topic_id in set(wanted) | set(current):
            keep = current.get(topic_id, set()) & wanted.get(topic_id, set())
            revoke = current.get(topic_id, set()) - keep
            free = {p for p in wanted.get(topic_id, set()) - keep
                    if epochs.get((topic_id, p), -1) == -1 or (topic_id, p) in own}
            unreleased = unreleased or bool(wanted.get(topic_id, set()) - keep - free)
            kept[topic_id], revoking[topic_id], adding[topic_id] = keep, revoke, free
        if any(revoking.values()) and owns_any(revoking):
            return dataclasses.replace(member.with_epoch(epoch), state=MemberState.UNREVOKED_PARTITIONS,
                                       assigned=sorted_partitions(kept),
                                       pending_revocation=sorted_partitions(revoking))
        assigned = {topic_id: kept[topic_id] | adding[topic_id] for topic_id in kept}
        state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        return member.with_epoch(target_epoch, state=state, assigned=sorted_partitions(assigned),
                                 pending_revocation=())

    @staticmethod
    def _track_revocation(group: ConsumerGroup, member: Member, now_ms: int) -> None:
        """Kafka's rebalance timer: a member must revoke within its rebalance timeout."""
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            group.revocation_deadline_ms[member.member_id] = (member.member_epoch,
                                                              now_ms + max(member.rebalance_timeout_ms, 0))
        else:
            group.revocation_deadline_ms.pop(member.member_id, None)

    # --- leaving, fencing, expiry -------------------------------------------------------

    def _leave(self, group_id: str, member_id: str, member_epoch: int, instance_id: str | None,
               topics: TopicMetadata) -> tuple[list, HeartbeatAnswer]:
        """Kafka's consumerGroupLeave: -1 removes the member; -2 (a static member)
        keeps it, its partitions and its place until its session times out, at epoch -2."""
        group = self.groups.get(group_id)
        if group is None:
            raise GroupIdNotFound(f"Consumer group {group_id} not found.")
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise UnknownMemberId(f"Member {member_id} is not a member of group {group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise UnknownMemberId(f"Instance id {instance_id} is unknown.")
            if member.member_id != member_id:
                raise FencedInstanceId(f"Static member {member_id} with instance id {instance_id} was fenced by "
                                       f"member {member.member_id}.")
            if member_epoch == STATIC_LEAVE_EPOCH:
                leaving = dataclasses.replace(member, member_epoch=STATIC_LEAVE_EPOCH, pending_revocation=())
                return [leaving.assignment_record(group_id)], HeartbeatAnswer(member_id, STATIC_LEAVE_EPOCH, 0)
        return self.fence(group, member.member_id, topics), HeartbeatAnswer(member_id, member_epoch, 0)

    def fence(self, group: ConsumerGroup, member_id: str, topics: TopicMetadata) -> list:
        """Kafka's consumerGroupFenceMember: the member's tombstones, the
        subscription without it, the group epoch bumped. Its deadlines go when the
        tombstones replay."""
        records = self._removal(group.group_id, member_id)
        rest = [m for m in group.members.values() if m.member_id != member_id]
        subscribed = self._subscribed_topics(rest, topics)
        if subscribed != group.subscribed_topics:
            records.append((PartitionMetadataKey(group.group_id), PartitionMetadataValue(subscribed)))
        self.rebalances += 1
        records.append((ConsumerGroupMetadataKey(group.group_id), ConsumerGroupMetadataValue(group.group_epoch + 1)))
        return records

    def expired_members(self, group_id: str, now_ms: int) -> list[str]:
        """Members past their session, and members that did not revoke within their
        rebalance timeout (at the epoch they were asked in)."""
        group = self.groups.get(group_id)
        if group is None:
            return []
        expired = [m for m, deadline_ms in group.session_deadline_ms.items() if now_ms >= deadline_ms]
        for member_id, (epoch, deadline_ms) in group.revocation_deadline_ms.items():
            member = group.members.get(member_id)
            if (now_ms >= deadline_ms and member is not None and member.member_epoch == epoch
                    and member_id not in expired):
                expired.append(member_id)
        return [m for m in expired if m in group.members]

    def expire(self, group_id: str, now_ms: int, topics: TopicMetadata) -> list:
        """The records fencing every expired member of the group, one after another
        (each bumps the group epoch once: the decisions are chained on a scratch
        copy, as the log will replay them)."""
        expired = self.expired_members(group_id, now_ms)
        if not expired:
            return []
        group = self.groups[group_id]
        scratch = dataclasses.replace(group, members=dict(group.members))
        records = []
        for member_id in expired:
            records += self.fence(scratch, member_id, topics)
            del scratch.members[member_id]
            scratch.group_epoch += 1
            scratch.subscribed_topics = self._subscribed_topics(scratch.members.values(), topics)
        return records

    # --- offsets, deletion ---------------------------------------------------------------

    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int) -> None:
        """Kafka's ConsumerGroup.validateOffsetCommit: a commit naming no epoch is
        taken while the group has no members; otherwise the member must be known
        (UNKNOWN_MEMBER_ID) and name its current epoch (STALE_MEMBER_EPOCH)."""
        group = self.groups[group_id]
        if member_epoch < 0 and not group.members:
            return
        member = group.members.get(member_id)
        if member is None:
            raise UnknownMemberId(f"Member {member_id} is not a member of group {group_id}.")
        if member_epoch != member.member_epoch:
            raise StaleMemberEpoch(f"The received member epoch {member_epoch} does not match the expected member "
                                   f"epoch {member.member_epoch}.")

    def tombstones(self, group_id: str) -> list:
        """Every record of an empty group, deleted (Kafka's createGroupTombstoneRecords):
        DeleteGroups, and a classic group taking over the id."""
        group = self.groups[group_id]
        records = []
        for member_id in sorted(set(group.members) | set(group.target)):
            records += self._removal(group_id, member_id)
        return records + [(TargetAssignmentMetadataKey(group_id), None), (PartitionMetadataKey(group_id), None),
                          (ConsumerGroupMetadataKey(group_id), None)]

    def describe(self, group_id: str) -> dict:
        """Kafka's ConsumerGroup.asDescribedGroup, assignments as {topic id: (topic
        name, [partitions])} (the name "" for a topic no longer subscribed)."""
        group = self.groups[group_id]
        names = group.topic_names_by_id()

        def named(partitions: TopicPartitions) -> dict:
            return {t: (names.get(t, ""), list(parts)) for t, parts in partitions}
        return {"group": group_id, "state": group.state, "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch, "assignor": preferred_assignor(group.members.values()),
                "members": [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                             "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                             "subscribed_topic_names": list(m.subscribed_topic_names),
                             "subscribed_topic_regex": m.subscribed_topic_regex,
                             "assigned": named(m.assigned), "target": named(group.target.get(m.member_id, ()))}
                            for m in sorted(group.members.values(), key=lambda m: m.member_id)]}

    # --- replay ---------------------------------------------------------------------------

    def replay(self, key, value, now_ms: int) -> None:
        """A written record of a consumer group, when loading and once acked live:
        the one way a group changes. A member first seen here gets a session from now."""
        group_id = key.group
        group = self.groups.get(group_id)
        if group is None:
            if value is None:
                return
            group = self.groups[group_id] = ConsumerGroup(group_id)
        if isinstance(key, ConsumerGroupMetadataKey):
            if value is None:
                del self.groups[group_id]
            else:
                group.group_epoch = value.epoch
        elif isinstance(key, PartitionMetadataKey):
            group.subscribed_topics = value.topics if value is not None else ()
        elif isinstance(key, TargetAssignmentMetadataKey):
            group.assignment_epoch = value.assignment_epoch if value is not None else 0
        elif isinstance(key, TargetAssignmentMemberKey):
            if value is None:
                group.target.pop(key.member_id, None)
            else:
                group.target[key.member_id] = value.partitions
        elif isinstance(key, MemberMetadataKey):
            if value is None:
                group.members.pop(key.member_id, None)
                group.session_deadline_ms.pop(key.member_id, None)
                group.revocation_deadline_ms.pop(key.member_id, None)
                return
            member = group.members.get(key.member_id) or Member(key.member_id)
            group.members[key.member_id] = dataclasses.replace(
                member, instance_id=value.instance_id, rack_id=value.rack_id, client_id=value.client_id,
                client_host=value.client_host, subscribed_topic_names=value.subscribed_topic_names,
                subscribed_topic_regex=value.subscribed_topic_regex, rebalance_timeout_ms=value.rebalance_timeout_ms,
                server_assignor=value.server_assignor)
            group.session_deadline_ms.setdefault(key.member_id, now_ms + self.session_timeout_ms)
            self._track_revocation_loaded(group, group.members[key.member_id], now_ms)
        elif isinstance(key, CurrentAssignmentKey):
            member = group.members.get(key.member_id) or Member(key.member_id)
            if value is None:
                member = dataclasses.replace(member, member_epoch=LEAVE_EPOCH, previous_member_epoch=LEAVE_EPOCH,
                                             state=MemberState.STABLE, assigned=(), pending_revocation=())
            else:
                state = value.state if value.state in MemberState._value2member_map_ else MemberState.UNKNOWN
                member = dataclasses.replace(member, member_epoch=value.member_epoch,
                                             previous_member_epoch=value.previous_member_epoch,
                                             state=MemberState(state), assigned=value.assigned,
                                             pending_revocation=value.pending_revocation)
            group.members[key.member_id] = member
            group.session_deadline_ms.setdefault(key.member_id, now_ms + self.session_timeout_ms)
            self._track_revocation_loaded(group, member, now_ms)

    def _track_revocation_loaded(self, group: ConsumerGroup, member: Member, now_ms: int) -> None:
        """A member replayed while it must revoke gets its rebalance timeout from
        now, unless it has one at this epoch already (Kafka's onLoaded schedules it
        for every member loaded in UNREVOKED_PARTITIONS): else a coordinator that
        reloaded never fenced a member that did not revoke, and the members waiting
        for its partitions waited for good."""
        tracked = group.revocation_deadline_ms.get(member.member_id)
        if member.state is not MemberState.UNREVOKED_PARTITIONS or tracked is None \
                or tracked[0] != member.member_epoch:
            self._track_revocation(group, member, now_ms)


def preferred_assignor(members: Iterable[Member]) -> str:
    """Kafka's computePreferredServerAssignor: the server assignor most members
    name (ties: the first by name), else the default."""
    named = [m.server_assignor for m in members if m.server_assignor is not None]
    return max(sorted(set(named)), key=named.count) if named else DEFAULT_ASSIGNOR


def _own(member: Member) -> set[tuple[uuid.UUID, int]]:
    """The partitions the member itself holds (its own epoch in partition_epochs is no obstacle)."""
    return {(topic_id, p) for topic_id, parts in member.assigned + member.pending_revocation for p in parts}
