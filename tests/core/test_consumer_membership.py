"""client.consumer_membership (a KIP-848 member) against a scripted coordinator:
what each heartbeat sends and what each answer does, one heartbeat at a time
(no heartbeat thread, no network)."""

import concurrent.futures
import uuid

import pytest

from rafka.client.consumer_membership import ConsumerGroupMembership
from rafka.core.errors import FencedMemberEpoch, NotCoordinator, UnreleasedInstanceId

pytestmark = pytest.mark.core
ORDERS = uuid.UUID(int=7)


class ScriptedCoordinator:
    """Answers each heartbeat with the next scripted answer (a dict or an error)."""
    group_id = "g"

    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.sent: list[dict] = []
        self.invalidated = 0

    def submit(self, method, member_id, epoch, **fields):
        self.sent.append({"member_id": member_id, "epoch": epoch, **fields})
        future = concurrent.futures.Future()
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            future.set_exception(answer)
        else:
            future.set_result(answer)
        return future

    def call(self, method, member_id, epoch, **fields):
        self.sent.append({"member_id": member_id, "epoch": epoch, **fields})

    def invalidate(self):
        self.invalidated += 1


def answer(epoch, partitions=None):
    return {"member_id": "ignored", "member_epoch": epoch, "heartbeat_interval_ms": 300,
            "assignment": None if partitions is None else {ORDERS: partitions}}


def member(coordinator, **options) -> ConsumerGroupMembership:
    joined = ConsumerGroupMembership(coordinator, max_poll_interval_ms=300_000, request_timeout_ms=1_000,
                                     retry_backoff_ms=10, topic_id=lambda topic, fresh: ORDERS, **options)
    joined._start_heartbeats = lambda: None   # heartbeats sent by the test, one at a time
    joined.subscribe(("orders",))
    return joined


def test_join__target_taken_once__acknowledged_owned_sent_by_topic_id():
    coordinator = ScriptedCoordinator(answer(1, [0, 1]), answer(1, [0, 1]), answer(2, [0]))
    m = member(coordinator)
    assert m.identity() == ("", -1)                # not a member yet: commits carry no epoch
    m._heartbeat_once()
    assert coordinator.sent[0]["epoch"] == 0 and coordinator.sent[0]["owned"] == []
    assert coordinator.sent[0]["subscribed_topic_names"] == ("orders",)
    assert m.identity() == (m.member_id, 1)
    assert m.take_target() == {("orders", 0), ("orders", 1)}
    assert m.take_target() is None                  # handed once
    m.acknowledge([("orders", 0), ("orders", 1)])
    m._heartbeat_once()                             # the same assignment again: nothing new to take
    assert coordinator.sent[1]["owned"] == [(ORDERS, [0, 1])] and m.take_target() is None
    m._heartbeat_once()                             # one partition revoked
    assert m.take_target() == {("orders", 0)} and m.identity() == (m.member_id, 2)


def test_fenced__partitions_lost_first__then_rejoins_at_epoch_0_owning_nothing():
    coordinator = ScriptedCoordinator(answer(1, [0]), FencedMemberEpoch("fenced"), answer(3, [0]))
    m = member(coordinator)
    m._heartbeat_once()
    m.take_target()
    m.acknowledge([("orders", 0)])
    m._heartbeat_once()
    assert m.identity() == ("", -1)
    m._heartbeat_once()                             # nothing sent until the consumer dropped its partitions
    assert len(coordinator.sent) == 2
    assert m.take_lost() is True and m.take_lost() is False
    m._heartbeat_once()
    assert (coordinator.sent[2]["epoch"], coordinator.sent[2]["owned"]) == (0, [])
    assert coordinator.sent[2]["member_id"] == coordinator.sent[0]["member_id"]   # the same id, kept
    assert m.take_target() == {("orders", 0)}


def test_retriable_error__coordinator_looked_up_again__no_state_change():
    coordinator = ScriptedCoordinator(answer(1, []), NotCoordinator("moved"), answer(1, []))
    m = member(coordinator)
    m._heartbeat_once()
    assert m._heartbeat_once() == m.retry_backoff_s and coordinator.invalidated == 1
    assert m.identity() == (m.member_id, 1) and not m.take_lost()


def test_unreleased_instance_id__fatal__the_next_poll_raises_it():
    m = member(ScriptedCoordinator(UnreleasedInstanceId("held")), group_instance_id="i-1")
    m._heartbeat_once()
    with pytest.raises(UnreleasedInstanceId):
        m.polled()


@pytest.mark.parametrize("instance, leave_group, sent_epoch", [
    (None, None, -1), ("i-1", None, -2), ("i-1", True, -1), (None, False, None)])
def test_leave__epoch_by_membership_kind_and_close_options(instance, leave_group, sent_epoch):
    coordinator = ScriptedCoordinator(answer(1, []))
    m = member(coordinator, group_instance_id=instance)
    m._heartbeat_once()
    m.leave(leave_group=leave_group)
    epochs = [sent["epoch"] for sent in coordinator.sent[1:]]
    assert epochs == ([] if sent_epoch is None else [sent_epoch])
    assert m.identity() == ("", -1)


FIELDS = ("rebalance_timeout_ms", "subscribed_topic_names", "subscribed_topic_regex", "server_assignor", "rack_id",
          "owned")


def fields(sent: dict) -> dict:
    """The heartbeat's optional fields that were sent (absent: null on the wire, unchanged)."""
    return {name: sent[name] for name in FIELDS if name in sent}


def test_partial_heartbeats__joining_sends_all__then_only_what_changed__owned_once_per_reconciliation():
    """Kafka's HeartbeatState: a joining member sends every field; a member sends a
    field again only when it changed since it was last sent; its owned partitions
    once after each reconciliation; the rack only when joining."""
    coordinator = ScriptedCoordinator(answer(1, [0, 1]), answer(1), answer(1), answer(1))
    m = member(coordinator, server_assignor="range", rack_id="rack-a")
    m._heartbeat_once()
    assert fields(coordinator.sent[0]) == {
        "rebalance_timeout_ms": 300_000, "subscribed_topic_names": ("orders",), "server_assignor": "range",
        "rack_id": "rack-a", "owned": []}
    m.take_target()
    m.acknowledge([("orders", 0), ("orders", 1)])
    m._heartbeat_once()
    assert fields(coordinator.sent[1]) == {"owned": [(ORDERS, [0, 1])]}
    m._heartbeat_once()
    assert fields(coordinator.sent[2]) == {}
    m.subscribe(("audit", "orders"))
    m._heartbeat_once()
    assert fields(coordinator.sent[3]) == {"subscribed_topic_names": ("audit", "orders")}
    assert m.take_target() is None and m.identity() == (m.member_id, 1)   # no assignment in the answer: unchanged


@pytest.mark.parametrize("failure", [NotCoordinator("moved"), TimeoutError("no answer")])
def test_failed_heartbeat__the_next_is_full__its_answer_handed_only_if_the_assignment_moved(failure):
    """After any failed heartbeat (an error, a lost answer) Kafka resets what was
    sent: the next heartbeat is full, so the coordinator answers it with the whole
    assignment."""
    coordinator = ScriptedCoordinator(answer(1, [0]), answer(1), failure, answer(1, [0]), answer(1))
    m = member(coordinator)
    m._heartbeat_once()
    m.take_target()
    m.acknowledge([("orders", 0)])
    m._heartbeat_once()
    m._heartbeat_once()                             # fails
    m._heartbeat_once()
    assert fields(coordinator.sent[3]) == {"rebalance_timeout_ms": 300_000, "subscribed_topic_names": ("orders",),
                                           "owned": [(ORDERS, [0])]}
    assert m.take_target() is None                  # the same assignment: nothing to reconcile
    m._heartbeat_once()
    assert fields(coordinator.sent[4]) == {}


def test_answer_naming_a_topic_id_not_known_yet__not_taken__the_next_heartbeat_full_to_bring_it_again():
    other = uuid.UUID(int=8)
    known = {"orders": ORDERS}
    coordinator = ScriptedCoordinator(answer(1, []), {**answer(2), "assignment": {other: [0]}}, answer(2))
    m = ConsumerGroupMembership(coordinator, max_poll_interval_ms=300_000, request_timeout_ms=1_000,
                                retry_backoff_ms=10, topic_id=lambda topic, fresh: known.get(topic))
    m._start_heartbeats = lambda: None
    m.subscribe(("orders", "audit"))
    m._heartbeat_once()
    m.take_target()
    m.acknowledge([])
    assert m._heartbeat_once() == m.retry_backoff_s and m.take_target() is None
    m._heartbeat_once()
    assert "rebalance_timeout_ms" in coordinator.sent[2] and "owned" in coordinator.sent[2]


def test_regex_subscription__sent_for_the_coordinator_to_match__assigned_topics_named_by_id():
    """A regex goes to the coordinator (SubscribedTopicRegex) with no topic names;
    the assignment's topic ids are named through the consumer's metadata; going
    back to names sends "" to drop the regex."""
    audit = uuid.UUID(int=9)
    coordinator = ScriptedCoordinator({**answer(1), "assignment": {ORDERS: [0], audit: [1]}}, answer(1))
    m = ConsumerGroupMembership(coordinator, max_poll_interval_ms=300_000, request_timeout_ms=1_000,
                                retry_backoff_ms=10, topic_id=lambda topic, fresh: None,
                                topic_name={ORDERS: "orders", audit: "audit"}.get)
    m._start_heartbeats = lambda: None
    m.subscribe(regex="(orders|audit)")
    m._heartbeat_once()
    assert fields(coordinator.sent[0]) == {"rebalance_timeout_ms": 300_000, "subscribed_topic_names": (),
                                           "subscribed_topic_regex": "(orders|audit)", "owned": []}
    assert m.take_target() == {("orders", 0), ("audit", 1)}
    m.subscribe(("orders",))
    m._heartbeat_once()
    assert fields(coordinator.sent[1]) == {"subscribed_topic_names": ("orders",), "subscribed_topic_regex": ""}
