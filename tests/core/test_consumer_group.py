"""Consumer groups of the new protocol (KIP-848), core.consumer_group: members
heartbeat with their epochs, the coordinator's target assignment, each member's
reconciliation (revoke before assign), leaving, fencing by session and
rebalance timeout, static members, offset commit checks, and the records: every
step below writes through Kafka's record encoding and replays the decoded
records, so a coordinator that replays the same log (a failover) has the same
group."""

import dataclasses
import random
import uuid

import pytest

from rafka.core import consumer_group_records as cgr
from rafka.core.consumer_group import ConsumerGroups, MemberState
from rafka.core.errors import (FencedInstanceId, FencedMemberEpoch, GroupIdNotFound, InvalidRegularExpression,
                               InvalidRequest,
                               StaleMemberEpoch, UnknownMemberId, UnreleasedInstanceId, UnsupportedAssignor)
from rafka.core.offsets_schema import decode_record, encode_key, encode_value

pytestmark = pytest.mark.core
G = "billing"
ORDERS = uuid.UUID(int=0xA1)
AUDIT = uuid.UUID(int=0xB2)
TOPICS = {"orders": (ORDERS, 6), "audit": (AUDIT, 2)}
SESSION_MS, REBALANCE_MS = 45_000, 30_000


class Coordinator:
    """ConsumerGroups over a log: every decision's records are encoded as Kafka
    writes them, kept, decoded and replayed (the one way the group changes)."""

    def __init__(self, topics=TOPICS) -> None:
        self.groups = ConsumerGroups(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=5_000)
        self.log: list[tuple[bytes, bytes | None]] = []
        self.topics = dict(topics)
        self.now_ms = 0

    def write(self, records) -> None:
        for key, value in records:
            encoded = (encode_key(key), encode_value(value))
            self.log.append(encoded)
            self.groups.replay(*decode_record(*encoded), self.now_ms)

    def heartbeat(self, member_id, epoch, *, owned=(), topics=("orders",), timeout_ms=REBALANCE_MS, **request):
        records, answer = self.groups.heartbeat(G, member_id=member_id, member_epoch=epoch,
                                                rebalance_timeout_ms=timeout_ms, subscribed_topic_names=topics,
                                                owned=owned, topics=self.topics, now_ms=self.now_ms, **request)
        self.write(records)
        return answer

    def expire(self) -> None:
        self.write(self.groups.expire(G, self.now_ms, self.topics))

    @property
    def group(self):
        return self.groups.groups[G]

    def reloaded(self) -> ConsumerGroups:
        fresh = ConsumerGroups(session_timeout_ms=SESSION_MS)
        for key, value in self.log:
            fresh.replay(*decode_record(key, value), self.now_ms)
        return fresh


@dataclasses.dataclass
class Client:
    """A consumer as librdkafka runs one: it owns what its last assignment gave it,
    revokes what a new assignment leaves out before reporting, and reports what it
    owns in every heartbeat."""
    coordinator: Coordinator
    member_id: str
    epoch: int = 0
    owned: tuple = ()
    alive: bool = True

    def heartbeat(self, **request):
        answer = self.coordinator.heartbeat(self.member_id, self.epoch, owned=self.owned, **request)
        self.epoch = answer.member_epoch
        if answer.assignment is not None:
            self.owned = answer.assignment
        return answer

    def partitions(self) -> set:
        return {(t, p) for t, parts in self.owned for p in parts}


def owned_by(group) -> dict:
    """Each partition the coordinator counts as held -> its holders (assigned or pending revocation)."""
    holders: dict = {}
    for member in group.members.values():
        for topic_id, parts in member.assigned + member.pending_revocation:
            for p in parts:
                holders.setdefault((topic_id, p), []).append(member.member_id)
    return holders


def orders(*partitions):
    return ((ORDERS, tuple(partitions)),)


# --- joining, and revoke before assign --------------------------------------------------

def test_first_member_joins__gets_every_partition_at_epoch_1():
    coordinator = Coordinator()
    answer = coordinator.heartbeat("a", 0)
    assert (answer.member_epoch, answer.assignment, answer.heartbeat_interval_ms) == (1, orders(0, 1, 2, 3, 4, 5), 5_000)
    group = coordinator.group
    assert (group.group_epoch, group.assignment_epoch, group.state) == (1, 1, "Stable")


def test_second_member_joins__the_first_revokes_before_the_second_is_given_them():
    coordinator = Coordinator()
    a, b = Client(coordinator, "a"), Client(coordinator, "b")
    a.heartbeat()
    a.heartbeat()
    assert b.heartbeat().assignment == ()     # epoch 2, its target still held by a: unreleased
    assert (b.epoch, coordinator.group.members["b"].state) == (2, MemberState.UNRELEASED_PARTITIONS)
    assert coordinator.group.state == "Reconciling"
    keeps, moves = coordinator.group.target["a"], coordinator.group.target["b"]
    assert sorted(keeps[0][1] + moves[0][1]) == [0, 1, 2, 3, 4, 5] and len(keeps[0][1]) == 3
    answer = a.heartbeat()                    # still owns all six: asked to revoke three, keeps epoch 1
    assert (answer.member_epoch, answer.assignment) == (1, keeps)
    assert coordinator.group.members["a"].pending_revocation == moves
    assert b.heartbeat().assignment == ()     # still held by a (pending revocation): nothing yet
    assert b.partitions() == set()
    a.heartbeat()                             # reports three: revoked, takes epoch 2
    assert (a.epoch, coordinator.group.members["a"].state) == (2, MemberState.STABLE)
    assert b.heartbeat().assignment == moves
    assert coordinator.group.state == "Stable"
    assert all(len(holders) == 1 for holders in owned_by(coordinator.group).values())


def test_a_member_that_does_not_report_its_partitions__keeps_them_pending_until_it_does():
    """owned None (the member sent no partitions: unchanged): the coordinator cannot
    know they were revoked, so it waits."""
    coordinator = Coordinator()
    coordinator.heartbeat("a", 0)
    coordinator.heartbeat("b", 0)
    assert coordinator.heartbeat("a", 1, owned=None).member_epoch == 1
    assert coordinator.heartbeat("a", 1, owned=None).member_epoch == 1
    assert coordinator.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert coordinator.heartbeat("a", 1, owned=coordinator.group.target["a"]).member_epoch == 2


# --- leaving, session and rebalance timeouts ----------------------------------------------

@pytest.mark.parametrize("how", ["leave", "session timeout"])
def test_member_gone__its_partitions_go_to_the_other(how):
    coordinator = Coordinator()
    a, b = Client(coordinator, "a"), Client(coordinator, "b")
    a.heartbeat(), b.heartbeat(), a.heartbeat(), a.heartbeat(), b.heartbeat()
    assert len(a.partitions()) == len(b.partitions()) == 3 and a.partitions() | b.partitions() == {
        (ORDERS, p) for p in range(6)}
    if how == "leave":
        assert coordinator.heartbeat("b", -1, owned=None).member_epoch == -1
    else:
        coordinator.now_ms += SESSION_MS - 1
        a.heartbeat()
        coordinator.expire()
        assert "b" in coordinator.group.members   # a's heartbeat kept its session, b's is not over yet
        coordinator.now_ms += 1
        coordinator.expire()
    assert set(coordinator.group.members) == {"a"}
    assert coordinator.group.group_epoch == 3
    assert a.heartbeat().assignment == orders(0, 1, 2, 3, 4, 5)
    assert (a.epoch, coordinator.group.state) == (3, "Stable")


def test_member_that_does_not_revoke_within_its_rebalance_timeout__fenced():
    coordinator = Coordinator()
    a, b = Client(coordinator, "a"), Client(coordinator, "b")
    a.heartbeat()
    b.heartbeat()
    coordinator.heartbeat("a", 1, owned=orders(0, 1, 2, 3, 4, 5), timeout_ms=10_000)   # asked to revoke 3
    coordinator.now_ms += 9_999
    coordinator.heartbeat("a", 1, owned=orders(0, 1, 2, 3, 4, 5))                      # still holds them
    b.heartbeat()
    coordinator.expire()
    assert "a" in coordinator.group.members
    coordinator.now_ms += 1
    coordinator.expire()
    assert set(coordinator.group.members) == {"b"}
    assert b.heartbeat().assignment == orders(0, 1, 2, 3, 4, 5)


def test_coordinator_reloaded_while_a_member_must_revoke__still_fenced_at_its_rebalance_timeout():
    """Kafka's onLoaded: a member loaded in UNREVOKED_PARTITIONS gets its rebalance
    timeout again. Without it the reloaded coordinator never fenced a member that
    does not revoke, and b waited for its partitions for good."""
    coordinator = Coordinator()
    a, b = Client(coordinator, "a"), Client(coordinator, "b")
    a.heartbeat()
    b.heartbeat()
    coordinator.heartbeat("a", 1, owned=orders(0, 1, 2, 3, 4, 5), timeout_ms=10_000)   # asked to revoke 3
    coordinator.groups = coordinator.reloaded()                                        # failover
    coordinator.now_ms += 9_999
    coordinator.heartbeat("a", 1, owned=orders(0, 1, 2, 3, 4, 5), timeout_ms=10_000)   # still holds them
    b.heartbeat()
    coordinator.expire()
    assert "a" in coordinator.group.members
    coordinator.now_ms += 1
    coordinator.expire()
    assert set(coordinator.group.members) == {"b"}
    assert b.heartbeat().assignment == orders(0, 1, 2, 3, 4, 5)


def test_last_member_leaves__group_empty_epoch_kept():
    coordinator = Coordinator()
    coordinator.heartbeat("a", 0)
    coordinator.heartbeat("a", -1, owned=None)
    group = coordinator.group
    assert (group.state, group.group_epoch, group.members, group.target) == ("Empty", 2, {}, {})


# --- epochs and errors ----------------------------------------------------------------------

def test_previous_epoch_with_a_subset__accepted__otherwise_fenced():
    """The answer that bumped the epoch may have been lost: the previous epoch is
    taken from a member owning a subset of its assignment (Kafka's rule)."""
    coordinator = Coordinator()
    coordinator.heartbeat("a", 0)
    coordinator.heartbeat("b", 0)
    coordinator.heartbeat("a", 1, owned=orders(0, 1, 2, 3, 4, 5))
    kept = coordinator.group.target["a"]
    coordinator.heartbeat("a", 1, owned=kept)                      # a at epoch 2 now, previous 1
    assert coordinator.heartbeat("a", 1, owned=((ORDERS, kept[0][1][:2]),)).member_epoch == 2
    moved = coordinator.group.target["b"][0][1]
    with pytest.raises(FencedMemberEpoch, match="smaller member epoch"):
        coordinator.heartbeat("a", 1, owned=orders(kept[0][1][0], moved[0]))
    with pytest.raises(FencedMemberEpoch, match="greater member epoch"):
        coordinator.heartbeat("a", 3, owned=kept)


@pytest.mark.parametrize("member_id, epoch, fields, error, message", [
    ("a", 1, {}, GroupIdNotFound, "Consumer group billing not found."),
    ("", 1, {}, InvalidRequest, "MemberId can't be empty."),
    ("a", -3, {}, InvalidRequest, "MemberEpoch is invalid."),
    ("a", 0, {"timeout_ms": -1}, InvalidRequest, "RebalanceTimeoutMs must be provided in first request."),
    ("a", 0, {"owned": orders(1)}, InvalidRequest, "TopicPartitions must be empty when (re-)joining."),
    ("a", 0, {"topics": ()}, InvalidRequest,
     "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."),
    ("a", -2, {}, InvalidRequest, "InstanceId can't be null."),
    ("a", 0, {"subscribed_topic_regex": "ord("}, InvalidRegularExpression,
     "SubscribedTopicRegex ord( is not a valid regular expression: missing ), unterminated subpattern at "
     "position 3."),
    ("a", 0, {"server_assignor": "sticky"}, UnsupportedAssignor,
     "ServerAssignor sticky is not supported. Supported assignors: uniform, range."),
])
def test_heartbeat_refused__kafkas_error(member_id, epoch, fields, error, message):
    coordinator = Coordinator()
    with pytest.raises(error) as raised:
        coordinator.heartbeat(member_id, epoch, **fields)
    assert raised.value.message == message
    assert coordinator.log == []


def test_unknown_member_of_a_known_group__unknown_member_id():
    coordinator = Coordinator()
    coordinator.heartbeat("a", 0)
    with pytest.raises(UnknownMemberId):
        coordinator.heartbeat("zz", 1)
    with pytest.raises(UnknownMemberId):
        coordinator.heartbeat("zz", -1)


def test_heartbeat_v0_without_member_id__the_coordinator_names_the_member():
    coordinator = Coordinator()
    answer = coordinator.heartbeat("", 0)
    assert uuid.UUID(answer.member_id) and answer.member_id in coordinator.group.members


# --- assignors and subscriptions ------------------------------------------------------------

def test_range_assignor__contiguous_ranges_per_topic():
    coordinator = Coordinator()
    for member in ("a", "b"):
        coordinator.heartbeat(member, 0, topics=("orders", "audit"), server_assignor="range")
    assert coordinator.group.target == {"a": ((ORDERS, (0, 1, 2)), (AUDIT, (0,))),
                                        "b": ((ORDERS, (3, 4, 5)), (AUDIT, (1,)))}
    assert coordinator.groups.describe(G)["assignor"] == "range"


def test_uniform_assignor__sticky_when_a_third_member_joins():
    """Each member keeps what it had that a balanced assignment lets it keep."""
    coordinator = Coordinator()
    coordinator.heartbeat("a", 0)
    coordinator.heartbeat("b", 0)
    before = dict(coordinator.group.target)
    coordinator.heartbeat("c", 0)
    after = coordinator.group.target
    assert sorted(len(cgr.sorted_partitions({ORDERS: p for _, p in t})[0][1]) for t in after.values()) == [2, 2, 2]
    for member in ("a", "b"):
        assert set(after[member][0][1]) <= set(before[member][0][1])


def test_a_topic_gains_partitions__group_epoch_bumped_and_reassigned():
    coordinator = Coordinator()
    a = Client(coordinator, "a")
    a.heartbeat()
    coordinator.topics["orders"] = (ORDERS, 8)
    a.heartbeat()
    assert (coordinator.group.group_epoch, a.epoch, len(a.owned[0][1])) == (2, 2, 8)


def test_subscribed_topic_that_does_not_exist__nothing_assigned_until_it_does():
    coordinator = Coordinator()
    a = Client(coordinator, "a")
    assert a.heartbeat(topics=("payments",)).assignment == ()
    coordinator.topics["payments"] = (uuid.UUID(int=0xC3), 1)
    assert a.heartbeat(topics=("payments",)).assignment == ((uuid.UUID(int=0xC3), (0,)),)


# --- static members -------------------------------------------------------------------------

def test_static_member_leaves_with_minus_2__rejoins_with_a_new_id__same_partitions_no_rebalance():
    coordinator = Coordinator()
    a, b = Client(coordinator, "a"), Client(coordinator, "b")
    a.heartbeat(instance_id="i-a"), b.heartbeat(instance_id="i-b")
    a.heartbeat(), a.heartbeat(), b.heartbeat()
    epoch, owned = coordinator.group.group_epoch, b.owned
    assert coordinator.heartbeat("b", -2, owned=None, instance_id="i-b").member_epoch == -2
    assert coordinator.group.members["b"].assigned == owned     # kept: nobody else may take them
    with pytest.raises(UnreleasedInstanceId):
        coordinator.heartbeat("a2", 0, instance_id="i-a")
    back = Client(coordinator, "b2")
    assert back.heartbeat(instance_id="i-b").assignment == owned
    assert (set(coordinator.group.members), coordinator.group.group_epoch) == ({"a", "b2"}, epoch)
    with pytest.raises(FencedInstanceId):
        coordinator.heartbeat("b", 2, instance_id="i-b")


# --- commits ---------------------------------------------------------------------------------

def test_offset_commit__member_epoch_checked():
    coordinator = Coordinator()
    coordinator.heartbeat("a", 0)
    coordinator.groups.validate_offset_commit(G, "a", 1)
    with pytest.raises(StaleMemberEpoch):
        coordinator.groups.validate_offset_commit(G, "a", 0)
    with pytest.raises(UnknownMemberId):
        coordinator.groups.validate_offset_commit(G, "", -1)   # a simple commit while it has members
    coordinator.heartbeat("a", -1, owned=None)
    coordinator.groups.validate_offset_commit(G, "", -1)       # empty: taken


# --- the log -------------------------------------------------------------------------------

@pytest.mark.parametrize("key, value", [
    (cgr.ConsumerGroupMetadataKey(G), cgr.ConsumerGroupMetadataValue(7)),
    (cgr.PartitionMetadataKey(G), cgr.PartitionMetadataValue((cgr.SubscribedTopic(ORDERS, "orders", 6),))),
    (cgr.MemberMetadataKey(G, "m"), cgr.MemberMetadataValue("i", None, "client", "/10.0.0.1", ("audit", "orders"),
                                                            None, 30_000, "range")),
    (cgr.TargetAssignmentMetadataKey(G), cgr.TargetAssignmentMetadataValue(7)),
    (cgr.TargetAssignmentMemberKey(G, "m"), cgr.TargetAssignmentMemberValue(((ORDERS, (0, 3)), (AUDIT, (1,))))),
    (cgr.CurrentAssignmentKey(G, "m"), cgr.CurrentAssignmentValue(7, 6, 1, orders(0), orders(3))),
    (cgr.CurrentAssignmentKey(G, "m"), None),
])
def test_record__kafkas_bytes_decode_to_the_same_record(key, value):
    encoded_key = encode_key(key)
    assert encoded_key[:2] == cgr.KEY_VERSIONS[type(key)].to_bytes(2, "big")
    assert decode_record(encoded_key, encode_value(value)) == (key, value)


def test_record__group_epoch_value_is_kafkas_bytes():
    """Version 0, epoch int32, an empty tagged-field section (Kafka's flexible v0)."""
    assert encode_value(cgr.ConsumerGroupMetadataValue(5)) == b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00"
    assert encode_key(cgr.ConsumerGroupMetadataKey("g")) == b"\x00\x03\x00\x01g"


def test_failover__a_coordinator_replaying_the_log_has_the_same_group():
    coordinator = Coordinator()
    clients = [Client(coordinator, m) for m in "abc"]
    for _ in range(3):
        for client in clients:
            client.heartbeat()
    coordinator.heartbeat("c", -1, owned=None)
    fresh = coordinator.reloaded().groups[G]
    group = coordinator.group
    assert (fresh.group_epoch, fresh.assignment_epoch, fresh.subscribed_topics, fresh.members, fresh.target) == \
        (group.group_epoch, group.assignment_epoch, group.subscribed_topics, group.members, group.target)


# --- members joining, leaving and crashing at random ------------------------------------------

@pytest.mark.parametrize("seed", range(20))
def test_random_joins_leaves_and_crashes__no_partition_owned_twice__converges(seed):
    """Clients heartbeat in random order while members join, leave (-1) and crash
    (stop heartbeating: fenced at their session timeout). At every step no
    partition is owned by two live clients; once the churn stops, every partition
    has exactly one owner and the group is Stable."""
    rng = random.Random(seed)
    coordinator = Coordinator()
    clients: list[Client] = []
    every = {(ORDERS, p) for p in range(6)}

    def check_no_double_owner():
        seen: dict = {}
        for client in clients:
            if client.alive:
                for tp in client.partitions():
                    assert tp not in seen, f"{tp} owned by {seen[tp]} and {client.member_id}"
                    seen[tp] = client.member_id

    for step in range(120):
        roll = rng.random()
        live = [c for c in clients if c.alive]
        if roll < 0.08 or not live:
            clients.append(Client(coordinator, f"m{step}"))
            clients[-1].heartbeat()
        elif roll < 0.12 and len(live) > 1:
            leaving = rng.choice(live)
            coordinator.heartbeat(leaving.member_id, -1, owned=None)
            leaving.alive = False
        elif roll < 0.15 and len(live) > 1:
            rng.choice(live).alive = False      # crashed: no more heartbeats
        else:
            rng.choice(live).heartbeat()
        coordinator.now_ms += 1_000
        coordinator.expire()
        for client in clients:
            if client.alive and client.member_id not in coordinator.group.members:
                client.owned, client.epoch = (), 0     # fenced (FENCED_MEMBER_EPOCH): gives all up, rejoins
        check_no_double_owner()
    coordinator.now_ms += SESSION_MS
    for _ in range(10):
        for client in [c for c in clients if c.alive]:
            client.heartbeat()
        coordinator.expire()
        check_no_double_owner()
    owners = [tp for c in clients if c.alive for tp in c.partitions()]
    assert sorted(owners) == sorted(every)
    assert coordinator.group.state == "Stable"


def test_dump_offsets__consumer_group_records_printed_as_kafkas_formatter():
    from rafka.core.offset_reset import format_offsets_record
    assert format_offsets_record(cgr.ConsumerGroupMetadataKey(G), cgr.ConsumerGroupMetadataValue(3)) == \
        '{"key":{"type":3,"data":{"groupId":"billing"}},"value":{"version":0,"data":{"epoch":3}}}'
    line = format_offsets_record(cgr.CurrentAssignmentKey(G, "m"), cgr.CurrentAssignmentValue(3, 2, 0, orders(1), ()))
    assert '"assignedPartitions":[{"topicId":"AAAAAAAAAAAAAAAAAAAAoQ","partitions":[1]}]' in line
    assert format_offsets_record(cgr.MemberMetadataKey(G, "m"), None).endswith('"value":null}')


def test_fenced_member_rejoins_with_epoch_0_under_its_id__starts_over_and_gets_its_partitions_back():
    coordinator = Coordinator()
    a = Client(coordinator, "a")
    a.heartbeat()
    with pytest.raises(FencedMemberEpoch):
        coordinator.heartbeat("a", 5, owned=a.owned)
    a.owned, a.epoch = (), 0                       # gives everything up, rejoins
    a.heartbeat()
    assert coordinator.group.members["a"].assigned == ()   # its old partitions were its own: freed by this write
    assert a.heartbeat().assignment == orders(0, 1, 2, 3, 4, 5)
    assert (a.epoch, coordinator.group.state) == (1, "Stable")


def test_regex_subscription__matching_topics_assigned__a_new_match_reassigned__internal_topics_never():
    """Kafka 4's SubscribedTopicRegex: matched whole against every topic at each
    heartbeat; a topic created later that matches joins the subscription (group
    epoch bumped); "" clears the regex (what librdkafka sends with names only)."""
    coordinator = Coordinator({**TOPICS, "__consumer_offsets": (uuid.UUID(int=0xD4), 1)})
    answer = coordinator.heartbeat("a", 0, topics=(), subscribed_topic_regex="(^au.*)|(^__.*)")
    assert answer.assignment == ((AUDIT, (0, 1)),)
    assert coordinator.group.members["a"].subscribed_topic_regex == "(^au.*)|(^__.*)"
    coordinator.topics["audit-eu"] = (uuid.UUID(int=0xE5), 1)
    answer = coordinator.heartbeat("a", 1, owned=answer.assignment, topics=None)
    assert (answer.member_epoch, answer.assignment) == (2, ((AUDIT, (0, 1)), (uuid.UUID(int=0xE5), (0,))))
    answer = coordinator.heartbeat("a", 2, owned=answer.assignment, topics=("orders",), subscribed_topic_regex="")
    assert coordinator.group.members["a"].subscribed_topic_regex is None
    assert coordinator.group.target["a"] == orders(0, 1, 2, 3, 4, 5)


def test_partial_heartbeat__null_fields_unchanged__nothing_written__full_one_answered_with_the_assignment():
    """Kafka's client sends a field only when it changed since its last heartbeat
    (null: unchanged): such a heartbeat writes nothing and changes nothing, and is
    answered without the assignment. After a failed heartbeat the client sends a
    full one (rebalance timeout, subscription, owned partitions), answered with the
    whole assignment, also when its subscription is a regex alone (Kafka's
    isFullRequest counts names or regex)."""
    coordinator = Coordinator()
    answer = coordinator.heartbeat("a", 0, topics=(), subscribed_topic_regex="ord.*", server_assignor="range",
                                   rack_id="rack-a")
    owned = answer.assignment
    assert owned == orders(0, 1, 2, 3, 4, 5)
    member, logged = coordinator.group.members["a"], len(coordinator.log)
    answer = coordinator.heartbeat("a", 1, owned=None, topics=None, timeout_ms=-1)
    assert (answer.member_epoch, answer.assignment, len(coordinator.log)) == (1, None, logged)
    assert coordinator.group.members["a"] == member
    assert (member.subscribed_topic_regex, member.server_assignor, member.rack_id, member.rebalance_timeout_ms) == (
        "ord.*", "range", "rack-a", REBALANCE_MS)
    # the answer to that one lost: the client's next heartbeat is full, regex and all
    answer = coordinator.heartbeat("a", 1, owned=owned, topics=None, subscribed_topic_regex="ord.*")
    assert (answer.member_epoch, answer.assignment, len(coordinator.log)) == (1, owned, logged)


def test_a_regex_is_matched_once_per_set_of_topics__not_at_every_heartbeat_of_every_member(monkeypatch):
    """Kafka's coordinator resolves a group's regexes when the metadata changes;
    rafka matched each member's regex against every topic at each heartbeat (a
    group of regex members over thousands of topics paid members x topics
    matches per heartbeat). Three members on one regex: once the group is
    stable, heartbeats match nothing; a topic created that matches is matched
    (against the new set of topics) and subscribed at the next heartbeat."""
    from rafka.core import consumer_group
    everything = []   # the matches made against every topic (not the assignor's own, on a rebalance)
    real = consumer_group.regex_matches

    def counted(regex, known):
        if "audit" in known:
            everything.append(frozenset(known))
        return real(regex, known)
    monkeypatch.setattr(consumer_group, "regex_matches", counted)
    coordinator = Coordinator()
    clients = [Client(coordinator, name) for name in ("a", "b", "c")]
    for _ in range(3):
        for client in clients:
            client.heartbeat(topics=(), subscribed_topic_regex="ord.*")
    assert coordinator.group.state == "Stable"
    assert everything == [frozenset(TOPICS)]
    for _ in range(5):
        for client in clients:
            client.heartbeat(topics=None)
    assert everything == [frozenset(TOPICS)]
    coordinator.topics["orders-eu"] = (uuid.UUID(int=0xE5), 3)
    clients[0].heartbeat(topics=None)
    assert everything == [frozenset(TOPICS), frozenset({*TOPICS, "orders-eu"})]
    assert [t.name for t in coordinator.group.subscribed_topics] == ["orders", "orders-eu"]


def test_resolved_regexes_are_bounded__the_least_recently_used_goes(monkeypatch):
    from rafka.core import consumer_group
    monkeypatch.setattr(consumer_group, "MAX_RESOLVED_REGEXES", 2)
    coordinator = Coordinator()
    for name, regex in (("a", "ord.*"), ("b", "aud.*"), ("c", "o.*")):
        Client(coordinator, name).heartbeat(topics=(), subscribed_topic_regex=regex)
    assert list(coordinator.groups._resolved_regexes) == ["aud.*", "o.*"]   # each heartbeat resolves every member's
