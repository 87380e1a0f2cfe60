"""rafka's Consumer with group_protocol="consumer" (KIP-848) on the in-process node
(no Ray): a regex subscription resolved by the coordinator, client.rack shown by
ConsumerGroupDescribe, and what a commit refused STALE_MEMBER_EPOCH does (Kafka's
CommitRequestManager: commitSync throws it, the auto-commit before a revocation
resends it with the member's latest epoch)."""

import time

import pytest

from rafka.client.admin import Admin
from rafka.client.consumer import Consumer
from rafka.core.errors import StaleMemberEpoch
from rafka.core.structs import TopicPartition
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.core
ORDERS = [TopicPartition("orders", p) for p in range(2)]


@pytest.fixture()
def node(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 2, "audit": 1},
                      coordinator_options={"consumer_heartbeat_interval_ms": 100}) as node:
        yield node


def member(node, name, **options) -> Consumer:
    return Consumer(node.bootstrap, group_id="kip848", group_protocol="consumer", client_id=name,
                    **{"enable_auto_commit": False, **options})


def poll_until(consumers, condition, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, [sorted(c.assignment()) for c in consumers]
        for consumer in consumers:
            consumer.poll(0.02)


def admin(node) -> Admin:
    return Admin(type("NoControlPlane", (), {"login": None})(), bootstrap_servers=node.bootstrap,
                 default_api_timeout_ms=10_000)


def stale_once(consumer, identity) -> None:
    """The consumer's next commit carries `identity`, an epoch the member had
    before (as when a heartbeat's answer moves the epoch while a commit is sent)."""
    membership = consumer._membership
    current = membership.identity
    calls = iter([identity])
    membership.identity = lambda: next(calls, None) or current()


def test_regex_subscription__the_coordinator_matches_it__client_rack_in_consumer_group_describe(node):
    consumer = member(node, "by-regex", client_rack="rack-a")
    try:
        consumer.subscribe(pattern="ord.*")
        poll_until([consumer], lambda: sorted(consumer.assignment()) == ORDERS)
        assert consumer.subscription() == {"orders"}
        (described,) = admin(node).describe_consumer_group("kip848")["members"].values()
        assert (described["topic_regex"], described["topics"], described["rack_id"]) == ("ord.*", [], "rack-a")
    finally:
        consumer.close()


def test_commit_sync__stale_member_epoch__raised_not_resent__the_member_stays(node):
    first = member(node, "first")
    second = member(node, "second")
    try:
        first.subscribe(["orders"])
        poll_until([first], lambda: len(first.assignment()) == 2)
        joined = first._membership.identity()
        second.subscribe(["orders"])
        poll_until([first, second], lambda: len(first.assignment()) == len(second.assignment()) == 1
                   and first._membership.identity()[1] > joined[1])
        (kept,) = first.assignment()
        stale_once(first, joined)
        with pytest.raises(StaleMemberEpoch):
            first.commit_sync({kept: 5})
        assert first.committed([kept]) == {kept: None}
        first.commit_sync({kept: 5})                 # the member's own epoch: taken
        assert first.committed([kept])[kept].offset == 5
        first.poll(0.02)
        assert first.assignment() == {kept}          # not fenced, nothing lost
    finally:
        first.close()
        second.close()


def test_auto_commit_before_revocation__stale_member_epoch__resent_with_the_latest_epoch(node):
    consumer = member(node, "auto", enable_auto_commit=True)
    try:
        consumer.subscribe(["orders"])
        poll_until([consumer], lambda: len(consumer.assignment()) == 2 and consumer._membership.identity()[1] > 0)
        for tp in ORDERS:
            consumer.seek(tp, 3)
        stale_once(consumer, (consumer._membership.identity()[0], consumer._membership.identity()[1] - 1))
        consumer.unsubscribe()                       # revokes: auto-commit first
        assert {tp: found.offset for tp, found in consumer.committed(ORDERS).items()} == {tp: 3 for tp in ORDERS}
    finally:
        consumer.close()
