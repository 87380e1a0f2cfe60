"""Consumer partition assignors: Kafka's documented examples, then properties over
random groups (every partition exactly once, balance, stickiness)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.core.assignors import (ASSIGNORS, CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor,
                                  StickyAssignor, Subscription, assignor, is_cooperative)
from rafka.core.errors import InvalidRequest

pytestmark = pytest.mark.core


def subs(*topics, owned=(), generation=-1):
    return Subscription(tuple(topics), tuple(owned), generation)


def tps(*names):
    """tps("t0p0", "t1p2") -> [("t0", 0), ("t1", 2)]"""
    return [(n[:n.rindex("p")], int(n[n.rindex("p") + 1:])) for n in names]


def with_owned(assignment, subscriptions, generation):
    return {m: Subscription(subscriptions[m].topics, tuple(assignment[m]), generation) for m in subscriptions}


# range


def test_range__kafka_doc_example__c0_gets_the_first_two_of_each_topic():
    result = RangeAssignor().assign({"t0": 3, "t1": 3}, {"C0": subs("t0", "t1"), "C1": subs("t0", "t1")})
    assert result == {"C0": tps("t0p0", "t0p1", "t1p0", "t1p1"), "C1": tps("t0p2", "t1p2")}


def test_range__three_partitions_two_members__first_member_gets_the_extra():
    result = RangeAssignor().assign({"t": 3}, {"b": subs("t"), "a": subs("t")})
    assert result == {"b": tps("tp2"), "a": tps("tp0", "tp1")}


def test_range__seven_partitions_three_members__ranges_are_contiguous():
    result = RangeAssignor().assign({"t": 7}, {"m1": subs("t"), "m2": subs("t"), "m3": subs("t")})
    assert result == {"m1": tps("tp0", "tp1", "tp2"), "m2": tps("tp3", "tp4"), "m3": tps("tp5", "tp6")}


def test_range__more_members_than_partitions__last_members_get_nothing():
    result = RangeAssignor().assign({"t": 2}, {"a": subs("t"), "b": subs("t"), "c": subs("t")})
    assert result == {"a": tps("tp0"), "b": tps("tp1"), "c": []}


def test_range__unequal_subscriptions__each_topic_split_among_its_own_subscribers():
    result = RangeAssignor().assign({"t0": 2, "t1": 2}, {"a": subs("t0"), "b": subs("t0", "t1")})
    assert result == {"a": tps("t0p0"), "b": tps("t0p1", "t1p0", "t1p1")}


# roundrobin


def test_roundrobin__kafka_doc_example__partitions_alternate_across_topics():
    result = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, {"C0": subs("t0", "t1"), "C1": subs("t0", "t1")})
    assert result == {"C0": tps("t0p0", "t0p2", "t1p1"), "C1": tps("t0p1", "t1p0", "t1p2")}


def test_roundrobin__kafka_doc_unequal_example__skips_members_not_subscribed():
    result = RoundRobinAssignor().assign(
        {"t0": 1, "t1": 2, "t2": 3},
        {"C0": subs("t0"), "C1": subs("t0", "t1"), "C2": subs("t0", "t1", "t2")})
    assert result == {"C0": tps("t0p0"), "C1": tps("t1p0"), "C2": tps("t1p1", "t2p0", "t2p1", "t2p2")}


# sticky


def test_sticky__kafka_doc_example__balanced_then_c1_leaves__c0_and_c2_keep_theirs():
    topics = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
    everyone = {m: subs(*topics) for m in ("C0", "C1", "C2")}
    first = StickyAssignor().assign(topics, everyone)
    assert first == {"C0": tps("t0p0", "t1p1", "t3p0"), "C1": tps("t0p1", "t2p0", "t3p1"),
                     "C2": tps("t1p0", "t2p1")}

    remaining = with_owned(first, {m: everyone[m] for m in ("C0", "C2")}, generation=1)
    second = StickyAssignor().assign(topics, remaining)
    assert second == {"C0": tps("t0p0", "t1p1", "t2p0", "t3p0"), "C2": tps("t0p1", "t1p0", "t2p1", "t3p1")}
    assert set(first["C0"]) <= set(second["C0"]) and set(first["C2"]) <= set(second["C2"])


def test_sticky__kafka_doc_unequal_example__balanced_then_c0_leaves__nothing_else_moves():
    topics = {"t0": 1, "t1": 2, "t2": 3}
    group = {"C0": subs("t0"), "C1": subs("t0", "t1"), "C2": subs("t0", "t1", "t2")}
    first = StickyAssignor().assign(topics, group)
    assert first == {"C0": tps("t0p0"), "C1": tps("t1p0", "t1p1"), "C2": tps("t2p0", "t2p1", "t2p2")}

    second = StickyAssignor().assign(topics, with_owned(first, {m: group[m] for m in ("C1", "C2")}, 1))
    assert second == {"C1": tps("t0p0", "t1p0", "t1p1"), "C2": tps("t2p0", "t2p1", "t2p2")}


def test_sticky__new_member_joins__takes_only_the_excess():
    owned = {"a": subs("t", owned=tps("tp0", "tp1", "tp2"), generation=3),
             "b": subs("t", owned=tps("tp3", "tp4", "tp5"), generation=3), "c": subs("t")}
    result = StickyAssignor().assign({"t": 6}, owned)
    assert [len(result[m]) for m in "abc"] == [2, 2, 2]
    assert set(result["a"]) < set(tps("tp0", "tp1", "tp2")) and set(result["b"]) < set(tps("tp3", "tp4", "tp5"))


def test_sticky__two_claims__the_higher_generation_keeps_the_partition():
    group = {"a": subs("t", owned=tps("tp0"), generation=4), "b": subs("t", owned=tps("tp0"), generation=5)}
    assert StickyAssignor().assign({"t": 2}, group) == {"a": tps("tp1"), "b": tps("tp0")}


def test_sticky__two_claims_in_the_same_generation__both_are_void_and_it_goes_by_load():
    group = {"a": subs("t", owned=tps("tp1"), generation=5), "b": subs("t", owned=tps("tp1"), generation=5)}
    assert StickyAssignor().assign({"t": 2}, group) == {"a": tps("tp0"), "b": tps("tp1")}


def test_sticky__owned_partition_of_a_topic_left_or_shrunk__is_not_kept():
    group = {"a": subs("t", owned=tps("tp5", "up0"), generation=2), "b": subs("t", "u")}
    assert StickyAssignor().assign({"t": 2, "u": 1}, group) == {"a": tps("tp0"), "b": tps("tp1", "up0")}


# all assignors


@pytest.mark.parametrize("name", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_any_assignor__topic_missing_from_metadata__is_skipped(name):
    result = assignor(name).assign({"t": 1}, {"a": subs("t", "gone"), "b": subs("gone")})
    assert result == {"a": tps("tp0"), "b": []}


@pytest.mark.parametrize("name", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_any_assignor__no_members__empty_assignment(name):
    assert assignor(name).assign({"t": 3}, {}) == {}


def test_assignors__registered_under_their_kafka_protocol_names():
    assert {n: type(a) for n, a in ASSIGNORS.items()} == {
        "range": RangeAssignor, "roundrobin": RoundRobinAssignor, "sticky": StickyAssignor,
        "cooperative-sticky": CooperativeStickyAssignor}
    assert is_cooperative(["cooperative-sticky"]) and not is_cooperative(["cooperative-sticky", "range"])


def test_assignor__unknown_name__invalid_request_naming_the_known_ones():
    with pytest.raises(InvalidRequest) as raised:
        assignor("org.example.Custom")
    assert raised.value.message == ("unknown partition assignor 'org.example.Custom'; known: cooperative-sticky, "
                                    "range, roundrobin, sticky")


def test_cooperative_sticky__a_member_joins__what_moves_is_left_out_this_round__given_the_next():
    """KIP-429's two rounds: a owns all four; b joins. Round one takes two away from
    a (a revokes them) and gives b nothing yet; round two, a claiming only two, gives
    b the other two."""
    cooperative = CooperativeStickyAssignor()
    first = cooperative.assign({"t": 4}, {"a": subs("t", owned=tps("tp0", "tp1", "tp2", "tp3"), generation=1),
                                          "b": subs("t")})
    assert len(first["a"]) == 2 and first["b"] == []
    second = cooperative.assign({"t": 4}, {"a": subs("t", owned=first["a"], generation=2), "b": subs("t")})
    assert second["a"] == first["a"] and sorted(second["a"] + second["b"]) == tps("tp0", "tp1", "tp2", "tp3")


# properties

partition_counts = st.dictionaries(st.sampled_from(["t0", "t1", "t2", "t3"]), st.integers(0, 12),
                                   min_size=1, max_size=4)
member_ids = st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=8, unique=True)


def all_partitions(partitions_per_topic):
    return sorted((t, p) for t, n in partitions_per_topic.items() for p in range(n))


@given(partitions_per_topic=partition_counts, members=member_ids,
       name=st.sampled_from(["range", "roundrobin", "sticky"]))
def test_property__equal_subscriptions__every_partition_assigned_exactly_once(partitions_per_topic, members,
                                                                              name):
    result = assignor(name).assign(partitions_per_topic, {m: subs(*partitions_per_topic) for m in members})
    assert sorted(tp for tps_ in result.values() for tp in tps_) == all_partitions(partitions_per_topic)
    assert set(result) == set(members) and all(v == sorted(v) for v in result.values())


@given(partitions_per_topic=partition_counts, members=member_ids, name=st.sampled_from(["roundrobin", "sticky"]))
def test_property__equal_subscriptions__loads_differ_by_at_most_one(partitions_per_topic, members, name):
    result = assignor(name).assign(partitions_per_topic, {m: subs(*partitions_per_topic) for m in members})
    loads = [len(v) for v in result.values()]
    assert max(loads) - min(loads) <= 1


@given(partitions_per_topic=partition_counts, members=member_ids, data=st.data())
def test_property__sticky_rerun_with_its_own_assignment__changes_nothing(partitions_per_topic, members, data):
    # Unequal subscriptions too: a stable result must stay put whatever the subscriptions.
    topics = sorted(partitions_per_topic)
    group = {m: subs(*data.draw(st.lists(st.sampled_from(topics), unique=True))) for m in members}
    first = StickyAssignor().assign(partitions_per_topic, group)
    assert StickyAssignor().assign(partitions_per_topic, with_owned(first, group, generation=1)) == first


@given(partitions_per_topic=partition_counts, members=member_ids, data=st.data())
def test_property__sticky_after_membership_change__keeps_as_many_owned_as_balance_allows(
        partitions_per_topic, members, data):
    # Previous owners drawn at random, including members that have since left (None: unowned).
    everything = all_partitions(partitions_per_topic)
    previous = data.draw(st.lists(st.sampled_from([None, "gone1", "gone2", *members]),
                                  min_size=len(everything), max_size=len(everything)))
    group = {m: subs(*partitions_per_topic, owned=[tp for tp, o in zip(everything, previous) if o == m],
                     generation=1) for m in members}
    result = StickyAssignor().assign(partitions_per_topic, group)

    quota, with_extra = divmod(len(everything), len(members))
    owned_counts = sorted((len(group[m].owned_partitions) for m in members), reverse=True)
    best_kept = sum(min(c, quota + (1 if i < with_extra else 0)) for i, c in enumerate(owned_counts))
    kept = sum(len(set(result[m]) & set(group[m].owned_partitions)) for m in members)
    loads = [len(v) for v in result.values()]
    assert kept == best_kept and max(loads) - min(loads) <= 1
