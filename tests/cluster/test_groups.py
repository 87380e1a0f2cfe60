"""Consumer groups end to end: subscribe and rebalance, listeners, fencing of an
evicted consumer, max.poll.interval.ms, auto_offset_reset on new groups and below
the log start, lag, the admin's group operations, and member actors."""

import time

import pytest
import ray

from rafka.core.errors import (GroupIdNotFound, NoOffsetForPartitionError, NonEmptyGroup, OffsetOutOfRange,
                               UnknownMemberId)
from rafka.core.structs import TopicPartition
from tests.harness import handled_records, partition_state, recording_handler, replica, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.shares_cluster]

FAST_GROUP = dict(session_timeout_ms=3_000, heartbeat_interval_ms=300, fetch_max_wait_ms=100)

_running_groups: list = []   # the member-actor groups a test started


def stopped_after_the_test(group) -> None:
    """The cluster is shared with other modules: a group a test started is stopped
    when the test ends, passed or failed (ConsumerGroupHandle.stop: once)."""
    _running_groups.append(group)


@pytest.fixture(autouse=True)
def _stop_running_groups():
    yield
    while _running_groups:
        _running_groups.pop().stop()


def fill(cluster, topic, count, *, partitions=1, timestamp_ms=None, create=True, batch_per_record=False):
    if create:
        cluster.admin().create_topic(topic, partitions=partitions, replication_factor=1)
    with cluster.producer(acks="all", linger_ms=1) as producer:
        for i in range(count):
            sent = producer.send(topic, value=f"{topic}-{i}".encode(), partition=i % partitions,
                                 timestamp_ms=timestamp_ms)
            if batch_per_record:
                sent.result()
        producer.flush()


def poll_until(consumer, count, timeout_s=30.0):
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.poll(timeout=0.2)
    return got


class Recorder:
    def __init__(self, on_assigned=None):
        self.events = []
        self.on_assigned = on_assigned

    def on_partitions_revoked(self, revoked):
        self.events.append(("revoked", sorted(revoked)))

    def on_partitions_assigned(self, assigned):
        self.events.append(("assigned", sorted(assigned)))
        if self.on_assigned is not None:
            self.on_assigned()

    def on_partitions_lost(self, lost):
        self.events.append(("lost", sorted(lost)))


def test_subscribe__two_members_split_then_one_leaves_and_the_other_takes_all(cluster):
    fill(cluster, "clicks", 40, partitions=4)
    first, second = Recorder(), Recorder()
    a = cluster.consumer(group_id="split", auto_offset_reset="earliest", enable_auto_commit=False, **FAST_GROUP)
    b = cluster.consumer(group_id="split", auto_offset_reset="earliest", enable_auto_commit=False, **FAST_GROUP)
    a.subscribe(["clicks"], listener=first)
    a.poll(timeout=0.1)   # joins alone: generation 1 with every partition
    assert a.assignment() == {TopicPartition("clicks", p) for p in range(4)}
    b.subscribe(["clicks"], listener=second)
    # b's join parks until a rejoins (a's heartbeat learns of the rebalance): poll both
    import threading
    joined = threading.Thread(target=lambda: b.poll(timeout=0.1))
    joined.start()
    wait_until(lambda: a.poll(timeout=0.05) is not None and len(a.assignment()) == 2, timeout_s=30,
               what="a rebalanced to half the partitions")
    joined.join(timeout=30)
    assert a.assignment() | b.assignment() == {TopicPartition("clicks", p) for p in range(4)}
    assert not a.assignment() & b.assignment()
    assert first.events[0][0] == "assigned" and ("revoked", sorted(TopicPartition("clicks", p) for p in range(4))) \
        in first.events
    a.commit_sync({tp: 0 for tp in a.assignment()})
    b_had = b.assignment()
    b.close()   # leaves: a rebalances at once, well before b's session timeout
    got = []
    first.on_assigned = got.clear   # keep only what a reads under its final assignment

    def a_polls():
        got.extend(a.poll(timeout=0.05))
        return len(a.assignment()) == 4
    wait_until(a_polls, timeout_s=10, what="a took every partition after b left")
    assert second.events[-1] == ("revoked", sorted(b_had))
    got += poll_until(a, 40 - len(got))
    values = {r.value for r in got}
    assert values == {f"clicks-{i}".encode() for i in range(40)}
    assert cluster.admin().describe_consumer_group("split")["state"] == "Stable"
    a.close()
    assert cluster.admin().describe_consumer_group("split")["state"] == "Empty"


def test_rebalance__a_kept_partition_resumes_at_its_committed_offset_not_where_an_old_fetch_ended(cluster):
    """Regression (rafka verify, poll-skip): a fetch sent before an eager rebalance
    answered after it, for a partition the member kept. The new partition state's
    fetch generation had been bumped by loading committed offsets to the very number
    the old fetch carried, so its records were taken; the position jumped past every
    record that had been buffered and not yet handed out, and the next commit passed
    them for good."""
    fill(cluster, "kept", 40, partitions=2)
    cluster.admin().create_topic("kept-extra", partitions=1, replication_factor=1)
    # The group has committed offsets from the start, as a group that ran before does:
    # loading them is then the one move each partition state makes before fetching.
    cluster.admin().alter_consumer_group_offsets("kept", {("kept", 0): 0, ("kept", 1): 0})
    consumer = cluster.consumer(group_id="kept", auto_offset_reset="earliest", enable_auto_commit=False,
                                max_poll_records=3, session_timeout_ms=10_000, heartbeat_interval_ms=300,
                                fetch_max_wait_ms=20_000)
    consumer.subscribe(["kept"])
    handed = []
    wait_until(lambda: handed.extend(consumer.poll(timeout=0.2)) or {r.partition for r in handed} == {0, 1},
               timeout_s=30, what="records handed from both partitions")
    # Each partition has 20 records fetched, fewer handed, and a fetch parked at the
    # leader at offset 20 (fetch_max_wait_ms is long: it is still there at the rebalance).
    consumer.commit_sync()
    committed = {p: max(r.offset for r in handed if r.partition == p) + 1 for p in (0, 1)}
    assert all(offset < 20 for offset in committed.values())
    consumer.subscribe(["kept", "kept-extra"])   # a new subscription: the member rejoins
    assert consumer.poll(timeout=0) == []        # the rebalance; kept-extra's reset loads every position
    assert consumer.assignment() == {TopicPartition("kept", 0), TopicPartition("kept", 1),
                                     TopicPartition("kept-extra", 0)}
    fill(cluster, "kept", 10, partitions=2, create=False)   # the old parked fetches now answer
    after = poll_until(consumer, 50 - sum(committed.values()))
    for p in (0, 1):
        assert [r.offset for r in after if r.partition == p] == list(range(committed[p], 25))
    consumer.close()


def test_subscribe__pattern_picks_up_a_topic_created_later(cluster):
    fill(cluster, "metrics.cpu", 3)
    consumer = cluster.consumer(group_id="patterns", auto_offset_reset="earliest", metadata_max_age_ms=200,
                                **FAST_GROUP)
    consumer.subscribe(pattern=r"metrics\..*")
    assert {r.value for r in poll_until(consumer, 3)} == {b"metrics.cpu-0", b"metrics.cpu-1", b"metrics.cpu-2"}
    fill(cluster, "metrics.disk", 2)
    got = poll_until(consumer, 2)
    assert {r.topic for r in got} == {"metrics.disk"}
    assert consumer.subscription() == {"metrics.cpu", "metrics.disk"}
    consumer.close()


def test_fencing__a_consumer_whose_heartbeats_stop_is_evicted_cannot_commit_and_loses_its_partitions(cluster):
    import threading
    fill(cluster, "payments", 10)
    tp = TopicPartition("payments", 0)
    stalled_events = Recorder()
    stalled = cluster.consumer(group_id="fence", auto_offset_reset="earliest", enable_auto_commit=False,
                               **FAST_GROUP)
    stalled.subscribe(["payments"], listener=stalled_events)
    assert len(poll_until(stalled, 10)) == 10
    # Its heartbeat thread stops, as if the process were paused (SIGSTOP).
    stalled._membership._closing.set()
    other = cluster.consumer(group_id="fence", auto_offset_reset="earliest", enable_auto_commit=False,
                             **FAST_GROUP)
    other.subscribe(["payments"])
    other.poll(timeout=0.1)   # parks until the stalled member's session (3 s) runs out
    assert other.assignment() == {tp}
    with pytest.raises(UnknownMemberId):
        stalled.commit_sync({tp: 10})
    assert other.committed([tp])[tp] is None         # the fenced commit changed nothing
    # The process resumes: its next poll reports the partition lost (not revoked:
    # it may not commit) and rejoins; the group rebalances between the two.
    stalled._membership._closing = threading.Event()
    stalled._membership._heartbeats = None
    rejoin = threading.Thread(target=lambda: stalled.poll(timeout=0.1))
    rejoin.start()
    wait_until(lambda: other.poll(timeout=0.05) is not None and not rejoin.is_alive(), timeout_s=30,
               what="the resumed consumer rejoined")
    assert stalled_events.events[1] == ("lost", [tp])
    assert stalled_events.events[-1][0] == "assigned"
    owner = stalled if stalled.assignment() == {tp} else other
    assert owner.assignment() == {tp} and (stalled.assignment() | other.assignment()) == {tp}
    owner.commit_sync({tp: 10})
    assert owner.committed([tp])[tp].offset == 10
    for consumer in (other, stalled):
        consumer.close()


def test_max_poll_interval__a_consumer_that_stops_polling_leaves_and_then_rejoins(cluster):
    fill(cluster, "slowjobs", 4)
    events = Recorder()
    consumer = cluster.consumer(group_id="slow", auto_offset_reset="earliest", enable_auto_commit=False,
                                max_poll_interval_ms=1_500, **FAST_GROUP)
    consumer.subscribe(["slowjobs"], listener=events)
    consumer.poll(timeout=0.1)
    admin = cluster.admin()
    wait_until(lambda: admin.describe_consumer_group("slow")["state"] == "Empty", timeout_s=10,
               what="the member left after max.poll.interval.ms without a poll")
    consumer.poll(timeout=0.1)
    assert ("lost", [TopicPartition("slowjobs", 0)]) in events.events
    assert events.events[-1] == ("assigned", [TopicPartition("slowjobs", 0)])
    assert admin.describe_consumer_group("slow")["state"] == "Stable"
    consumer.close()


NOW_MS = int(time.time() * 1000)


@pytest.fixture(scope="module")
def timed(cluster):
    """10 records two hours old, then 10 from ten minutes ago."""
    fill(cluster, "timed", 10, timestamp_ms=NOW_MS - 2 * 3_600_000)
    fill(cluster, "timed", 10, timestamp_ms=NOW_MS - 600_000, create=False)
    return TopicPartition("timed", 0)


@pytest.mark.parametrize("reset, first_offset", [("earliest", 0), ("latest", 20), ("by_duration:PT1H", 10),
                                                 ("by_duration:PT5M", 20), ("by_duration:P1D", 0)])
def test_auto_offset_reset__new_group__starts_where_named(cluster, timed, reset, first_offset):
    with cluster.consumer(group_id=f"new-{reset}", auto_offset_reset=reset, enable_auto_commit=False) as consumer:
        consumer.assign([timed])
        assert consumer.position(timed) == first_offset


def test_auto_offset_reset_none__new_group__no_offset_for_partition(cluster, timed):
    with cluster.consumer(group_id="new-none", auto_offset_reset="none", enable_auto_commit=False) as consumer:
        consumer.assign([timed])
        with pytest.raises(NoOffsetForPartitionError):
            consumer.poll(timeout=1.0)


@pytest.fixture(scope="module")
def truncated(cluster):
    """A topic whose first segments retention deleted: old records (two hours old)
    then new ones (ten minutes old); a group committed offset 0, now below the
    log start."""
    cluster.admin().create_topic("trimmed", partitions=1, replication_factor=1,
                                 config={"segment.bytes": "300", "retention.bytes": "1000"})
    fill(cluster, "trimmed", 30, timestamp_ms=NOW_MS - 2 * 3_600_000, create=False, batch_per_record=True)
    fill(cluster, "trimmed", 10, timestamp_ms=NOW_MS - 600_000, create=False, batch_per_record=True)
    tp = TopicPartition("trimmed", 0)
    admin = cluster.admin()
    only_replica = replica("trimmed", 0, partition_state(cluster, "trimmed", 0)["replicas"][0])

    def settled():   # every record is written: once a retention pass deletes nothing, the start stays put
        return (ray.get(only_replica.enforce_retention.remote()) == 0
                and admin.beginning_offsets([tp])[tp] > 0)
    wait_until(settled, what="retention moved the log start, and has nothing left to delete")
    for group in ("cut-earliest", "cut-latest", "cut-none", "cut-duration"):
        admin.alter_consumer_group_offsets(group, {tp: 0})
    start, end = admin.beginning_offsets([tp])[tp], admin.end_offsets([tp])[tp]
    assert 0 < start <= 30 and end == 40, "the new records must outlive retention for this test"
    return tp, start, end


@pytest.mark.parametrize("group, reset", [("cut-earliest", "earliest"), ("cut-latest", "latest"),
                                          ("cut-duration", "by_duration:PT1H")])
def test_auto_offset_reset__committed_offset_below_log_start__resets_as_named(cluster, truncated, group, reset):
    tp, start, end = truncated
    expected = {"earliest": start, "latest": end, "by_duration:PT1H": 30}[reset]
    with cluster.consumer(group_id=group, auto_offset_reset=reset, enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        assert consumer.position(tp) == 0                    # the committed offset, as Kafka
        records = poll_until(consumer, end - expected, timeout_s=10)
        assert [r.offset for r in records] == list(range(expected, end))


def test_auto_offset_reset_none__committed_offset_below_log_start__offset_out_of_range(cluster, truncated):
    tp, _, _ = truncated
    with cluster.consumer(group_id="cut-none", auto_offset_reset="none", enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        with pytest.raises(OffsetOutOfRange):
            poll_until(consumer, 1, timeout_s=10)


def test_auto_offset_reset__bad_values__value_error_before_anything_starts(cluster):
    for bad in ("smallest", "by_duration:-PT1H", "by_duration:1H"):
        with pytest.raises(ValueError):
            cluster.consumer(group_id="bad", auto_offset_reset=bad)


def test_lag__consumer_current_lag_and_admin_lag_rows(cluster):
    fill(cluster, "lagging", 12)
    tp = TopicPartition("lagging", 0)
    with cluster.consumer(group_id="lag", auto_offset_reset="earliest", enable_auto_commit=False,
                          max_poll_records=5, **FAST_GROUP) as consumer:
        consumer.subscribe(["lagging"])
        assert len(consumer.poll(timeout=5.0)) == 5
        assert consumer.current_lag(tp) == 7
        consumer.commit_sync()
        (row,) = cluster.admin().consumer_group_lag("lag")
        assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (5, 12, 7)
        assert row["consumer_id"] and row["client_id"] == "rafka-consumer"
        with pytest.raises(NonEmptyGroup, match="Assignments can only be reset if the group 'lag' is inactive, "
                                                "but the current state is Stable."):
            cluster.admin().alter_consumer_group_offsets("lag", {tp: 0})
        with pytest.raises(NonEmptyGroup):
            cluster.admin().delete_consumer_group("lag")
    admin = cluster.admin()
    admin.alter_consumer_group_offsets("lag", {tp: 2})
    assert admin.list_consumer_group_offsets("lag") == {tp: 2}
    assert "lag" in {g["group"] for g in admin.list_consumer_groups()}
    admin.delete_consumer_group("lag")
    assert admin.describe_consumer_group("lag")["state"] == "Dead"
    assert admin.list_consumer_group_offsets("lag") == {}
    with pytest.raises(GroupIdNotFound):
        admin.delete_consumer_group("lag")


def test_run_consumer_group__members_on_different_nodes_handle_everything_and_stop_leaves(cluster, tmp_path):
    fill(cluster, "invoices", 60, partitions=4)
    group = cluster.run_consumer_group("invoicing", ["invoices"], recording_handler(str(tmp_path)), members=2,
                                       **FAST_GROUP)
    stopped_after_the_test(group)
    admin = cluster.admin()
    wait_until(lambda: sum(r["current_offset"] or 0 for r in admin.consumer_group_lag("invoicing")) == 60,
               timeout_s=60, what="the group committed every record")
    # A member reports its assignment as of its last poll, so a member still in a
    # poll begun before the latest rebalance shows its old one: wait until both
    # report the assignment the coordinator gave them in a Stable group.
    def settled():
        coordinator_view = admin.describe_consumer_group("invoicing")
        members = coordinator_view["members"]
        return (coordinator_view["state"] == "Stable" and len(members) == 2
                and all(d["member_id"] in members
                        and sorted(map(tuple, d["assignment"])) == sorted(members[d["member_id"]]["assignment"])
                        for d in group.describe()))
    wait_until(settled, timeout_s=60, what="both members report the coordinator's current assignment")
    described = group.describe()
    assert sorted(tp for d in described for tp in d["assignment"]) == [("invoices", p) for p in range(4)]
    assert len({d["node_id"] for d in described}) == 2   # the SPREAD placement group
    generations = {d["generation"] for d in described}
    assert len(generations) == 1 and min(generations) >= 1 and all(d["member_id"] for d in described)
    assert {d["member_id"] for d in described} == set(admin.describe_consumer_group("invoicing")["members"])
    seen = {(partition, offset) for _, partition, offset in handled_records(str(tmp_path))}
    assert seen == {(p, o) for p in range(4) for o in range(15)}
    # each batch was handled knowing the generation it was polled in
    handled_in = {g for *_, g in handled_records(str(tmp_path), with_generation=True)}
    assert handled_in and min(handled_in) >= 1 and max(handled_in) <= generations.pop()
    final = group.stop()
    assert sum(d["handled"] for d in final) >= 60
    assert admin.describe_consumer_group("invoicing")["state"] == "Empty"


def test_run_consumer_group__member_actor_killed_in_a_group_of_three__rejoins_in_its_place__the_two_others_not_rebalanced(
        cluster, tmp_path):
    """KIP-345 for member actors: each is a static member named after its actor, so
    the one Ray restarts after a kill joins again within its session timeout under
    the same group.instance.id and takes its old partitions; the group's generation
    does not move, so the two others keep their member ids, generation and
    partitions (an eager rebalance would have moved all three to a new one)."""
    fill(cluster, "parcels", 30, partitions=6)
    group = cluster.run_consumer_group("parcels", ["parcels"], recording_handler(str(tmp_path)), members=3,
                                       session_timeout_ms=20_000, heartbeat_interval_ms=300, fetch_max_wait_ms=100)
    stopped_after_the_test(group)
    admin = cluster.admin()

    def settled():
        """Stable with three members, each reporting the coordinator's assignment."""
        coordinator_view = admin.describe_consumer_group("parcels")
        members = coordinator_view["members"]
        described = group.describe()
        return (coordinator_view["state"] == "Stable" and len(members) == 3
                and all(d is not None and d["member_id"] in members
                        and sorted(map(tuple, d["assignment"])) == sorted(members[d["member_id"]]["assignment"])
                        for d in described)) and described
    before = wait_until(settled, timeout_s=60, what="three members report the coordinator's assignment")
    assert len({d["generation"] for d in before}) == 1 and all(d["assignment"] for d in before)
    ray.kill(group.members[0], no_restart=False)
    after = wait_until(lambda: (lambda now: now and now[0]["pid"] != before[0]["pid"] and now)(settled()),
                       timeout_s=60, what="the killed member restarted and back in the group")
    assert after[0]["member_id"] != before[0]["member_id"]      # a new incarnation, in the old one's place
    for old, new in zip(before, after):
        assert (new["generation"], new["assignment"]) == (old["generation"], old["assignment"])
    assert [d["member_id"] for d in after[1:]] == [d["member_id"] for d in before[1:]]
    group.stop()


def receipts_handler(directory: str, *, poison_offset: int, pause_s: float):
    """An exactly-once member's handler: a receipt per payment, to the same
    partition of `receipts`. Once in the whole run (the first batch to reach
    `poison_offset` of partition 0, whichever process) it also returns a record
    for a partition that does not exist: the send fails after the batch's other
    receipts went into the transaction, which the member aborts and reads again."""
    def handle(records):
        import os
        import time as clock
        from rafka.core.structs import ProducerRecord
        out = [ProducerRecord("receipts", value=b"receipt-" + r.value, partition=r.partition) for r in records]
        if any(r.partition == 0 and r.offset >= poison_offset for r in records):
            try:
                os.close(os.open(os.path.join(directory, "poisoned"), os.O_CREAT | os.O_EXCL))
                out.append(ProducerRecord("receipts", value=b"poison", partition=99))
            except FileExistsError:
                pass
        clock.sleep(pause_s)   # the batch takes a while: the kill lands inside one now and then
        return out
    return handle


def test_run_consumer_group__handler_output__written_by_the_member_before_the_commit(cluster, tmp_path):
    """At least once, the same data path: what the handler returns is written by
    the member's producer and acked before the batch's offsets are committed."""
    from tests.compat.confluent_reads import read_values
    fill(cluster, "refunds", 30, partitions=2)
    cluster.admin().create_topic("refund-receipts", partitions=2, replication_factor=1)

    def handle(records):
        from rafka.core.structs import ProducerRecord
        return [ProducerRecord("refund-receipts", value=b"receipt-" + r.value, partition=r.partition)
                for r in records]
    group = cluster.run_consumer_group("refunding", ["refunds"], handle, members=1, **FAST_GROUP)
    stopped_after_the_test(group)
    admin = cluster.admin()
    wait_until(lambda: sum(r["current_offset"] or 0 for r in admin.consumer_group_lag("refunding")) == 30,
               timeout_s=60, what="the member committed every record")
    (final,) = group.stop()
    assert (final["written"], final["error"], final["exactly_once"]) == (30, None, False)
    written = read_values(cluster.bootstrap_servers, "refund-receipts", "read_uncommitted")
    assert written == {p: [b"receipt-refunds-%d" % i for i in range(p, 30, 2)] for p in range(2)}


def test_run_consumer_group_exactly_once__member_killed_mid_run__read_committed_output_holds_every_input_once(
        cluster, tmp_path):
    from rafka.actors.replica import NAMESPACE
    from rafka.core.actor_names import transaction_coordinator_actor_name
    from tests.compat.confluent_reads import read_values
    total, partitions = 600, 3
    fill(cluster, "eos-payments", total, partitions=partitions)
    admin = cluster.admin()
    admin.create_topic("receipts", partitions=partitions, replication_factor=1)
    handler = receipts_handler(str(tmp_path), poison_offset=20, pause_s=0.05)
    group = cluster.run_consumer_group("paying", ["eos-payments"], handler, members=2, exactly_once=True,
                                       max_poll_records=25, **FAST_GROUP)
    stopped_after_the_test(group)

    def committed_total():
        return sum(r["current_offset"] or 0 for r in admin.consumer_group_lag("paying"))
    wait_until(lambda: committed_total() >= total // 4, timeout_s=60, what="a quarter committed")
    victim = group.describe()[0]
    assert victim["assignment"] and victim["exactly_once"]
    ray.kill(group.members[0], no_restart=False)   # Ray restarts it; it joins again as the same static member
    wait_until(lambda: committed_total() == total, timeout_s=120, what="the group committed every record")
    described = group.describe()
    assert described[0] is not None and described[0]["pid"] != victim["pid"], "member 0 restarted"
    final = group.stop()
    assert sum(d["aborted_batches"] for d in [victim, *final]) >= 1, "the poisoned batch was aborted"

    # The restarted member's init_transactions fenced its killed predecessor: a new epoch for the same id.
    coordinator = ray.get_actor(transaction_coordinator_actor_name(0), namespace=NAMESPACE)
    assert ray.get(coordinator.describe_transaction.remote("member:paying:0"), timeout=10).producer_epoch >= 1
    assert admin.list_consumer_group_offsets("paying") == {
        TopicPartition("eos-payments", p): total // partitions for p in range(partitions)}

    inputs = {p: [b"eos-payments-%d" % i for i in range(p, total, partitions)] for p in range(partitions)}
    committed = read_values(cluster.bootstrap_servers, "receipts", "read_committed", partitions=range(partitions))
    # every payment's receipt exactly once, in the payments' order
    assert committed == {p: [b"receipt-" + v for v in values] for p, values in inputs.items()}
    # read_uncommitted may also see the aborted and fenced attempts, never anything else
    uncommitted = read_values(cluster.bootstrap_servers, "receipts", "read_uncommitted", partitions=range(partitions))
    assert {v for vs in uncommitted.values() for v in vs} == {v for vs in committed.values() for v in vs}
    assert sum(map(len, uncommitted.values())) >= total
