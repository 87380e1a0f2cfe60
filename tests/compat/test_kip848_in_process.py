"""KIP-848, the new consumer group protocol, with a client nobody here wrote:
confluent-kafka (librdkafka, group.protocol=consumer) against the in-process
node (no Ray; clients bootstrap at a broker's edge, as in a cluster), the
coordinator assigning with its uniform assignor. Members join, one leaves, one
crashes (a process SIGKILLed: no leave, its session times out); after each step
the assignments converge (every partition has exactly one owner), the members
in this process never own a partition at the same time, and at the end every
record was read and the group's committed offsets are the log end offsets."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from rafka.core.errors import GroupIdNotFound
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.compat
GROUP, PARTITIONS, SESSION_MS = "kip848", 6, 6_000
EVERY = {("orders", p) for p in range(PARTITIONS)}

CRASHING_MEMBER = textwrap.dedent("""
    import sys
    from confluent_kafka import Consumer
    bootstrap, group, out = sys.argv[1:4]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["orders"])
    with open(out, "a") as reads:
        while True:
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            reads.write(f"{message.partition()} {message.offset()}\\n")
            reads.flush()
            try:
                consumer.commit(message=message, asynchronous=False)
            except Exception:
                pass   # a stale epoch mid-reconciliation: the next commit or owner covers it
""")


def librdkafka_speaks_kip848() -> bool:
    import confluent_kafka
    return confluent_kafka.libversion()[1] >= 0x020A0000   # 2.10: group.protocol=consumer generally available


@pytest.fixture
def node(tmp_path):
    with ProtocolNode(tmp_path, {"orders": PARTITIONS}, edge=True,
                      coordinator_options={"consumer_session_timeout_ms": SESSION_MS,
                                           "consumer_heartbeat_interval_ms": 500}) as node:
        yield node


class Member:
    """A consumer in this process: reads, commits each record, remembers what it read."""

    def __init__(self, node, name: str, topics=("orders",)) -> None:
        from confluent_kafka import Consumer
        self.name = name
        self.consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": GROUP, "client.id": name,
                                  "group.protocol": "consumer", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False})
        self.consumer.subscribe(list(topics))
        self.read: set[tuple[int, int]] = set()

    def poll(self) -> None:
        from confluent_kafka import KafkaException
        message = self.consumer.poll(0.05)
        if message is None or message.error() is not None:
            return
        self.read.add((message.partition(), message.offset()))
        try:
            self.consumer.commit(message=message, asynchronous=False)
        except KafkaException:
            pass   # STALE_MEMBER_EPOCH while its epoch moves: the next commit or owner covers it

    def owned(self) -> set:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}


def assert_one_member_caught_up(node, *, client_id: str, end_offset: int) -> str:
    """The group as `rafka consumer-groups --describe` reads it (ConsumerGroupDescribe
    behind DescribeGroups' Dead): Stable under the uniform assignor, one member
    (`client_id`) owning every partition with its commits at `end_offset` and lag 0.
    Returns the member's id."""
    admin = node.wire_admin(default_api_timeout_ms=30_000)
    group = admin.describe_consumer_group(GROUP)
    (member_id,) = group["members"]
    assert (group["state"], group["assignor"], group["members"][member_id]["client_id"]) == (
        "Stable", "uniform", client_id)
    rows = admin.consumer_group_lag(GROUP)
    assert sorted((r["partition"], r["current_offset"], r["lag"], r["consumer_id"]) for r in rows) == [
        (p, end_offset, 0, member_id) for p in range(PARTITIONS)]
    return member_id


def produce(node, count: int) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce("orders", value=f"r{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def described(node) -> dict | None:
    """The group as ConsumerGroupDescribe's coordinator call gives it (on the node's loop), None if unknown."""
    async def describe():
        try:
            return await node.coordinator.consumer_group_describe(GROUP)
        except GroupIdNotFound:
            return None
    return node.call(describe())


def coordinator_view(node) -> dict:
    """{member id: {(topic, partition)}} as the coordinator counts them (assigned)."""
    group = described(node) or {"members": []}
    return {m["member_id"]: {(name, p) for name, parts in m["assigned"].values() for p in parts}
            for m in group["members"]}


def converged(node, members: int) -> bool:
    """`members` members, the group Stable, each partition owned by exactly one."""
    group = described(node)
    if group is None:
        return False
    owned = [(name, p) for m in group["members"] for name, parts in m["assigned"].values() for p in parts]
    return len(group["members"]) == members and group["state"] == "Stable" and sorted(owned) == sorted(EVERY)


def sessions(node) -> dict:
    """Each member's session deadline on the coordinator (a heartbeat moves it on)."""
    async def deadlines():
        return dict(node.coordinator.shard.consumer_groups.groups[GROUP].session_deadline_ms)
    return node.call(deadlines())


def committed(node) -> dict:
    return {tp: value[0] for tp, value in node.call(node.coordinator.fetch_offsets(GROUP)).items()}


def run(node, members: list[Member], seconds: float, until) -> None:
    """Polls every member until `until()`, checking at each round that no two of
    them own a partition at once."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until():
        for member in members:
            member.poll()
        owned = [tp for member in members for tp in member.owned()]
        assert len(owned) == len(set(owned)), {m.name: m.owned() for m in members}
    assert until(), {"coordinator": coordinator_view(node), **{m.name: m.owned() for m in members}}


@pytest.mark.skipif(not librdkafka_speaks_kip848(), reason="librdkafka older than 2.10")
def test_confluent_kafka__kip848_members_join_leave_and_crash__assignments_converge__every_record_read_and_committed(
        node, tmp_path):
    produce(node, 300)
    first = Member(node, "first")
    run(node, [first], 60, lambda: converged(node, 1) and first.owned() == EVERY)
    second = Member(node, "second")
    run(node, [first, second], 60, lambda: converged(node, 2) and first.owned() | second.owned() == EVERY)
    assert first.owned() and second.owned()

    reads_file = tmp_path / "crashing-member-reads"
    crashing = subprocess.Popen([sys.executable, "-c", CRASHING_MEMBER, node.bootstrap, GROUP, str(reads_file)],
                                env={**os.environ}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        run(node, [first, second], 60,
            lambda: converged(node, 3) and len(first.owned() | second.owned()) < PARTITIONS)
        produce(node, 300)
        run(node, [first, second], 30, lambda: reads_file.exists() and reads_file.read_text().strip() != "")

        second.consumer.close()                      # leaves: member epoch -1
        run(node, [first], 60, lambda: converged(node, 2))
        assert described(node)["group_epoch"] == 4     # three joins, one leave
    finally:
        crashing.send_signal(signal.SIGKILL)         # no leave: the coordinator finds out by its session timeout
        crashing.wait(10)
    crashed_at = time.monotonic()
    run(node, [first], 60, lambda: converged(node, 1) and first.owned() == EVERY)
    assert time.monotonic() - crashed_at >= SESSION_MS / 1000 - 1   # it went by its session, not by a leave

    ends = {("orders", p): 100 for p in range(PARTITIONS)}
    run(node, [first], 60, lambda: committed(node) == ends)
    assert_one_member_caught_up(node, client_id="first", end_offset=100)
    first.consumer.close()
    crashed_reads = {tuple(map(int, line.split())) for line in reads_file.read_text().splitlines() if line}
    everything = {(p, o) for p in range(PARTITIONS) for o in range(100)}
    assert first.read | second.read | crashed_reads == everything
    assert crashed_reads, "the crashing member read nothing before it was killed"
    assert described(node)["state"] == "Empty"      # its close left the group


@pytest.mark.skipif(not librdkafka_speaks_kip848(), reason="librdkafka older than 2.10")
def test_confluent_kafka__kip848_coordinator_fails_over__the_group_kept__members_go_on_a_new_one_joins(node):
    """The coordinator is replaced by one that loads the group from what
    __consumer_offsets holds: the two members' heartbeats go on at their epochs
    (nobody is fenced, nothing moves, the group epoch stays), and a third member
    joining later is assigned by the new coordinator from the replayed target."""
    produce(node, 60)
    first, second = Member(node, "first"), Member(node, "second")
    run(node, [first, second], 60, lambda: converged(node, 2) and first.owned() | second.owned() == EVERY)
    before = described(node)
    owned_before = (first.owned(), second.owned())
    node.call(node.coordinator.fail_over())
    loaded = sessions(node)          # each member's session as the load set it
    run(node, [first, second], 30, lambda: all(ms > loaded[m] for m, ms in sessions(node).items()))
    after = described(node)          # both heartbeat on the new coordinator since
    assert (after["group_epoch"], after["members"]) == (before["group_epoch"], before["members"])
    assert (first.owned(), second.owned()) == owned_before
    third = Member(node, "third")
    run(node, [first, second, third], 60, lambda: converged(node, 3) and third.owned())
    assert described(node)["group_epoch"] == before["group_epoch"] + 1
    for member in (first, second, third):
        member.consumer.close()


@pytest.mark.skipif(not librdkafka_speaks_kip848(), reason="librdkafka older than 2.10")
def test_confluent_kafka__kip848_regex_subscription__the_coordinator_matches_the_topics(node):
    """librdkafka sends a "^" subscription as the heartbeat's topic regex; the
    coordinator matches it against the topics and assigns what matches."""
    member = Member(node, "by-regex", topics=("^ord.*",))
    run(node, [member], 60, lambda: converged(node, 1) and member.owned() == EVERY)
    assert described(node)["members"][0]["subscribed_topic_regex"] == "(^ord.*)"
    member.consumer.close()
