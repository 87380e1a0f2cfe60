"""rafka's own Consumer in a group, on the in-process node (no Ray): the leader
member assigns on the client side with core.assignors and the coordinator relays
it (Kafka's classic protocol); static membership (KIP-345) keeps a restarted
member's partitions without rebalancing the others. Each consumer polls on its
own thread, as separate processes would: a join parks until the others rejoin."""

import threading
import time

import pytest

from rafka.client.consumer import Consumer
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.core


@pytest.fixture()
def node(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 4}) as node:
        yield node


class Recorder:
    """A rebalance listener of kafka-python's shape: no base class, and no
    on_partitions_lost (rafka's Consumer then tells lost partitions as revoked)."""

    def __init__(self):
        self.assigned, self.revoked = [], []

    def on_partitions_assigned(self, assigned):
        self.assigned.append(sorted((tp.topic, tp.partition) for tp in assigned))

    def on_partitions_revoked(self, revoked):
        self.revoked.append(sorted((tp.topic, tp.partition) for tp in revoked))


class Polling:
    """A consumer polling on its own thread until stopped (or closed with `close`)."""

    def __init__(self, node, *, instance=None, strategy="range", group="own"):
        self.listener = Recorder()
        self.consumer = Consumer(node.bootstrap, group_id=group, client_id=f"own-{instance}",
                                 session_timeout_ms=6_000, heartbeat_interval_ms=200,
                                 partition_assignment_strategy=strategy, group_instance_id=instance,
                                 enable_auto_commit=False)
        self.consumer.subscribe(["orders"], listener=self.listener)
        self.errors = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                self.consumer.poll(0.1)
            except Exception as error:   # noqa: BLE001 (shown by the test)
                self.errors.append(error)
                return

    def assignment(self):
        return sorted((tp.topic, tp.partition) for tp in self.consumer.assignment())

    def close(self):
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def wait_until(condition, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def settled(members):
    """Every member holds partitions, together all of "orders", none twice, and the
    group is Stable."""
    owned = [m.assignment() for m in members]
    every = sorted(tp for part in owned for tp in part)
    return all(owned) and every == [("orders", p) for p in range(4)]


def test_own_consumers__the_leader_assigns_with_its_assignor__the_coordinator_relays_it(node):
    members = [Polling(node, strategy="roundrobin") for _ in range(2)]
    try:
        assert wait_until(lambda: settled(members)), [m.assignment() for m in members]
        described = node.coordinator.shard.describe_group("own")
        assert (described["state"], described["protocol"]) == ("Stable", "roundrobin")
        # roundrobin over two members: each gets every other partition
        assert sorted(m.assignment() for m in members) == [[("orders", 0), ("orders", 2)],
                                                           [("orders", 1), ("orders", 3)]]
        assert all(m.errors == [] for m in members)
    finally:
        for m in members:
            m.close()


def test_own_static_member_restarted_within_its_session__same_partitions__the_other_not_rebalanced(node):
    a, b = Polling(node, instance="host-a"), Polling(node, instance="host-b")
    b_again = None
    try:
        assert wait_until(lambda: settled([a, b])), (a.assignment(), b.assignment())
        time.sleep(0.5)                                   # no rebalance left pending
        a_calls, a_revoked, b_partitions = len(a.listener.assigned), len(a.listener.revoked), b.assignment()
        generation = node.coordinator.shard.describe_group("own")["generation"]
        b.close()                                         # a static member sends no LeaveGroup
        assert node.coordinator.shard.describe_group("own")["state"] == "Stable"
        b_again = Polling(node, instance="host-b")
        assert wait_until(lambda: b_again.listener.assigned)
        assert b_again.listener.assigned == [b_partitions]
        time.sleep(1)                                     # five of a's heartbeat intervals
        assert (len(a.listener.assigned), len(a.listener.revoked)) == (a_calls, a_revoked)
        described = node.coordinator.shard.describe_group("own")
        assert (described["state"], described["generation"]) == ("Stable", generation)
        assert a.errors == b_again.errors == []
    finally:
        for m in (a, b, b_again):
            if m is not None and not m._stop.is_set():
                m.close()


def test_own_static_member__a_second_process_with_the_same_instance_id_fences_the_first(node):
    first = Polling(node, instance="host-a")
    second = None
    try:
        assert wait_until(lambda: first.assignment() == [("orders", p) for p in range(4)])
        second = Polling(node, instance="host-a")
        assert wait_until(lambda: second.assignment() == [("orders", p) for p in range(4)])
        assert wait_until(lambda: first.errors), "the fenced first process kept polling without an error"
        assert type(first.errors[0]).__name__ == "FencedInstanceId"
    finally:
        first._stop.set()
        first._thread.join(10)
        first.consumer.close()
        if second is not None:
            second.close()


def test_own_static_member_closed_with_leave_group__the_group_rebalances_at_once(node):
    """Kafka 4's CloseOptions LEAVE_GROUP, which rafka's member actors use on stop:
    the static member sends LeaveGroup, and its partitions move without waiting
    out its session."""
    a, b = Polling(node, instance="host-a"), Polling(node, instance="host-b")
    try:
        assert wait_until(lambda: settled([a, b]))
        b._stop.set()
        b._thread.join(10)
        b.consumer.close(leave_group=True)
        assert wait_until(lambda: a.assignment() == [("orders", p) for p in range(4)], seconds=4)
        assert list(m["group_instance_id"] for m in node.coordinator.shard.describe_group("own")["members"].values()) \
            == ["host-a"]
    finally:
        a.close()


def test_own_cooperative_sticky__a_second_member_joins__the_first_revokes_only_what_moves(node):
    """KIP-429 in rafka's Consumer: the first member keeps two partitions through
    both rounds (never revoked, never reassigned to it), gives up the other two,
    which the second member gets in the next round."""
    first = Polling(node, strategy="cooperative-sticky")
    second = None
    try:
        assert wait_until(lambda: first.assignment() == [("orders", p) for p in range(4)])
        second = Polling(node, strategy="cooperative-sticky")
        assert wait_until(lambda: settled([first, second])), (first.assignment(), second.assignment())
        kept = first.assignment()
        assert len(kept) == 2 and len(second.assignment()) == 2
        assert [len(r) for r in first.listener.revoked] == [2]                   # only what moved
        assert not set(kept) & set(first.listener.revoked[0])
        assert first.listener.assigned[0] == [("orders", p) for p in range(4)]
        assert all(a == [] for a in first.listener.assigned[1:])                 # nothing new for it
        assert second.listener.assigned[-1] == first.listener.revoked[0]
        assert node.coordinator.shard.describe_group("own")["protocol"] == "cooperative-sticky"
    finally:
        for m in (first, second):
            if m is not None:
                m.close()


def test_own_consumer__a_listener_without_on_partitions_lost__told_of_lost_partitions_as_revoked(node):
    """kafka-python's ConsumerRebalanceListener has no on_partitions_lost: a
    listener of that shape is told of partitions lost (here, a poll later than
    max_poll_interval_ms: the member left the group) by on_partitions_revoked,
    as Kafka's default on_partitions_lost does, and polling goes on."""
    listener = Recorder()
    every = [("orders", p) for p in range(4)]
    with Consumer(node.bootstrap, group_id="lost", session_timeout_ms=6_000, heartbeat_interval_ms=100,
                  max_poll_interval_ms=300, enable_auto_commit=False) as consumer:
        consumer.subscribe(["orders"], listener=listener)
        assert wait_until(lambda: consumer.poll(0.05) == [] and listener.assigned == [every])
        membership = consumer._membership
        # no poll: the heartbeat thread leaves the group once max_poll_interval_ms has passed
        assert wait_until(lambda: membership.member_id == "")
        assert wait_until(lambda: consumer.poll(0.05) == [] and listener.assigned == [every, every])
        assert listener.revoked == [every]
