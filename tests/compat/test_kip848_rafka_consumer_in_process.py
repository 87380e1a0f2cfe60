"""KIP-848 with rafka's own Consumer (group_protocol="consumer") against the
in-process node (no Ray; clients at a broker's edge), as the confluent-kafka
module next to it does with librdkafka: members join, one leaves, one crashes
(its process SIGKILLed: no leave, its session times out); after each step the
assignments converge with no partition owned by two members at any poll; every
record is read and the committed offsets and lag are what `rafka consumer-groups
--describe` shows. Reconciliation revokes before it assigns (the listener sees
only what moves), commits carry the member epoch (OffsetCommit v9), a static
member's close (epoch -2) and restart within its session keeps its partitions
without a new group epoch, and a second member with a live instance id is refused
(UNRELEASED_INSTANCE_ID)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from rafka.client.consumer import Consumer, ConsumerRebalanceListener
from rafka.core.errors import InvalidConfig, StaleMemberEpoch, UnreleasedInstanceId
from tests.compat.test_kip848_in_process import (EVERY, GROUP, PARTITIONS, SESSION_MS, assert_one_member_caught_up,
                                                 committed, converged, coordinator_view, described, produce)
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.compat

CRASHING_MEMBER = textwrap.dedent("""
    import sys
    from rafka.client.consumer import Consumer
    bootstrap, group, out = sys.argv[1:4]
    consumer = Consumer(bootstrap, group_id=group, group_protocol="consumer", client_id="crashing",
                        auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=50)
    consumer.subscribe(["orders"])
    with open(out, "a") as reads:
        while True:
            records = consumer.poll(0.2)
            for record in records:
                reads.write(f"{record.partition} {record.offset}\\n")
            reads.flush()
            if records:
                try:
                    consumer.commit_sync()
                except Exception:
                    pass
""")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with ProtocolNode(tmp_path_factory.mktemp("kip848-rafka"), {"orders": PARTITIONS}, edge=True,
                      coordinator_options={"consumer_session_timeout_ms": SESSION_MS,
                                           "consumer_heartbeat_interval_ms": 200}) as node:
        yield node


class Recording(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, frozenset]] = []

    def on_partitions_revoked(self, revoked) -> None:
        self.events.append(("revoked", frozenset((tp.topic, tp.partition) for tp in revoked)))

    def on_partitions_assigned(self, assigned) -> None:
        self.events.append(("assigned", frozenset((tp.topic, tp.partition) for tp in assigned)))

    def on_partitions_lost(self, lost) -> None:
        self.events.append(("lost", frozenset((tp.topic, tp.partition) for tp in lost)))


class Member:
    """rafka's Consumer in this process: reads, commits each batch, remembers what it read."""

    def __init__(self, node, name: str, group: str = GROUP, **options) -> None:
        self.name = name
        self.listener = Recording()
        self.consumer = Consumer(node.bootstrap, group_id=group, client_id=name, group_protocol="consumer",
                                 auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=20,
                                 **options)
        self.consumer.subscribe(["orders"], listener=self.listener)
        self.read: set[tuple[int, int]] = set()
        self.commit_owed = False

    def poll(self) -> None:
        records = self.consumer.poll(timeout=0.02)
        self.read |= {(r.partition, r.offset) for r in records}
        if records or self.commit_owed:
            try:
                self.consumer.commit_sync()
                self.commit_owed = False
            except StaleMemberEpoch:   # the epoch moved on while it was sent: commit again after the next poll
                self.commit_owed = True

    def owned(self) -> set:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}


def run(members: list[Member], seconds: float, until, node=None) -> None:
    """Polls every member until `until()`, checking after each poll that no two own a partition."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until():
        for member in members:
            member.poll()
            owned = [tp for m in members for tp in m.owned()]
            assert len(owned) == len(set(owned)), {m.name: m.owned() for m in members}
    assert until(), {"coordinator": coordinator_view(node) if node else None,
                     **{m.name: m.owned() for m in members}}


def test_rafka_consumer__kip848_members_join_leave_and_crash__assignments_converge__every_record_read_and_committed(
        node, tmp_path):
    produce(node, 300)
    first = Member(node, "first")
    run([first], 30, lambda: converged(node, 1) and first.owned() == EVERY, node)
    assert first.listener.events == [("assigned", frozenset(EVERY))]
    epoch_alone = first.consumer.group_metadata().generation_id
    assert epoch_alone >= 1

    second = Member(node, "second")
    run([first, second], 30, lambda: converged(node, 2) and first.owned() | second.owned() == EVERY, node)
    moved = second.owned()
    assert moved and first.owned() == EVERY - moved
    # the first gave up only what moved, before the second was given it
    assert first.listener.events[1:] == [("revoked", frozenset(moved)), ("assigned", frozenset())]
    assert first.consumer.group_metadata().generation_id > epoch_alone   # its commits carry the new epoch

    reads_file = tmp_path / "crashing-member-reads"
    crashing = subprocess.Popen([sys.executable, "-c", CRASHING_MEMBER, node.bootstrap, GROUP, str(reads_file)],
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        run([first, second], 60, lambda: converged(node, 3) and len(first.owned() | second.owned()) < PARTITIONS,
            node)
        produce(node, 300)
        run([first, second], 30, lambda: reads_file.exists() and reads_file.read_text().strip() != "", node)

        second.consumer.close()                     # leaves: member epoch -1
        assert second.listener.events[-1][0] == "revoked"
        run([first], 30, lambda: converged(node, 2), node)
        assert described(node)["group_epoch"] == 4    # three joins, one leave
    finally:
        crashing.send_signal(signal.SIGKILL)        # no leave: the coordinator finds out by its session timeout
        crashing.wait(10)
    crashed_at = time.monotonic()
    run([first], 60, lambda: converged(node, 1) and first.owned() == EVERY, node)
    assert time.monotonic() - crashed_at >= SESSION_MS / 1000 - 1   # it went by its session, not by a leave

    ends = {("orders", p): 100 for p in range(PARTITIONS)}
    run([first], 30, lambda: committed(node) == ends, node)
    member_id = assert_one_member_caught_up(node, client_id="first", end_offset=100)
    assert member_id == first.consumer.group_metadata().member_id   # the client's own id (v1)
    first.consumer.close()
    crashed_reads = {tuple(map(int, line.split())) for line in reads_file.read_text().splitlines() if line}
    assert crashed_reads, "the crashing member read nothing before it was killed"
    everything = {(p, o) for p in range(PARTITIONS) for o in range(100)}
    assert first.read | second.read | crashed_reads == everything
    assert described(node)["state"] == "Empty"     # its close left the group


def test_rafka_consumer__kip848_static_member_restarts_within_its_session__same_partitions_no_new_epoch(node):
    group = "kip848-static"

    def view():
        try:
            return node.call(node.coordinator.consumer_group_describe(group))
        except Exception:
            return None

    def stable(count):
        found = view()
        return found is not None and found["state"] == "Stable" and len(found["members"]) == count

    one = Member(node, "one", group=group, group_instance_id="static-1")
    two = Member(node, "two", group=group, group_instance_id="static-2")
    run([one, two], 30, lambda: stable(2) and len(one.owned() | two.owned()) == PARTITIONS)
    before, owned_before, two_events = view()["group_epoch"], one.owned(), list(two.listener.events)

    one.consumer.close()                            # a static member: epoch -2, it keeps its place
    assert view()["group_epoch"] == before
    again = Member(node, "one-again", group=group, group_instance_id="static-1")
    run([again, two], 30, lambda: stable(2) and again.owned() == owned_before)
    assert view()["group_epoch"] == before          # nobody rebalanced
    assert two.listener.events == two_events     # the other member was told nothing

    duplicate = Member(node, "duplicate", group=group, group_instance_id="static-1")
    with pytest.raises(UnreleasedInstanceId):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            duplicate.poll()
    duplicate.consumer.close()
    for member in (again, two):
        member.consumer.close(leave_group=True)    # epoch -1: the group empties
    assert view()["state"] == "Empty"


def test_rafka_consumer__kip848_refuses_a_client_side_assignor(node):
    with pytest.raises(InvalidConfig):
        Consumer(node.bootstrap, group_id=GROUP, group_protocol="consumer",
                 partition_assignment_strategy="cooperative-sticky")
