"""Group coordinator actors over `__consumer_offsets` (R3, min ISR 2): offset
commits acked only once replicated, and reloaded after a coordinator restart."""

import os
import signal

import pytest
import ray

from rafka.core.errors import (CoordinatorNotAvailable, IllegalGeneration, NotCoordinator, OffsetMetadataTooLarge,
                               UnknownMemberId)
from rafka.core.offsets_schema import partition_for_group
from rafka.core.records import decode_records
from tests.harness import describe_replica, partition_state, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.shares_cluster]


@pytest.fixture(scope="module")
def coordinator(cluster):
    # the topic every scenario commits to: offsets of unknown topics are refused
    cluster.admin().create_topic("orders", partitions=4, replication_factor=1)
    (handle,) = cluster.start_group_coordinators()  # started by local_cluster: this finds it
    wait_until(lambda: ray.get(handle.ping.remote())["loaded"], what="the coordinator loading")
    return handle


def test_commit_then_fetch__returns_the_committed_offsets(coordinator):
    response = ray.get(coordinator.commit_offsets.remote("billing", {("orders", 0): (42, 3, "m"),
                                                                      ("orders", 1): (7, -1, "")}))
    assert response == {("orders", 0): None, ("orders", 1): None}
    assert ray.get(coordinator.fetch_offsets.remote("billing")) == {("orders", 0): (42, 3, "m"),
                                                                    ("orders", 1): (7, -1, "")}
    assert ray.get(coordinator.fetch_offsets.remote("billing", [("orders", 2)])) == {("orders", 2): None}


def test_commit__metadata_too_large__that_partition_errs_nothing_written(coordinator):
    response = ray.get(coordinator.commit_offsets.remote("big", {("orders", 0): (1, -1, "x" * 5000)}))
    assert isinstance(response[("orders", 0)], OffsetMetadataTooLarge)
    assert ray.get(coordinator.fetch_offsets.remote("big")) == {}


def test_commit__isr_below_min_isr__fails_retriable_not_visible_then_retry_succeeds(cluster, coordinator):
    state = partition_state(cluster, "__consumer_offsets", 0)
    followers = [r for r in state["replicas"] if r != state["leader"]]
    pids = [describe_replica("__consumer_offsets", 0, r)["pid"] for r in followers]
    leader = cluster.replica("__consumer_offsets", 0, state["leader"])
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: ray.get(leader.describe.remote())["isr"] == [state["leader"]], timeout_s=30,
                   what="the offsets partition's ISR shrinking to its leader")
        with pytest.raises(CoordinatorNotAvailable) as failed:   # NOT_ENOUGH_REPLICAS, as Kafka answers it
            ray.get(coordinator.commit_offsets.remote("payments", {("orders", 0): (100, -1, "")}))
        assert failed.value.retriable
        assert ray.get(coordinator.fetch_offsets.remote("payments")) == {}
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    wait_until(lambda: len(ray.get(leader.describe.remote())["isr"]) >= 2, timeout_s=30,
               what="the followers rejoining the ISR")
    assert ray.get(coordinator.commit_offsets.remote("payments", {("orders", 0): (100, -1, "")})) == {
        ("orders", 0): None}
    assert ray.get(coordinator.fetch_offsets.remote("payments")) == {("orders", 0): (100, -1, "")}


def test_coordinator_killed__reloads_every_committed_offset_unchanged(cluster, coordinator):
    for i in range(20):
        ray.get(coordinator.commit_offsets.remote(f"group-{i}", {("orders", i % 3): (i * 10, 0, f"m{i}")}))
    before = {f"group-{i}": ray.get(coordinator.fetch_offsets.remote(f"group-{i}")) for i in range(20)}
    pid = ray.get(coordinator.ping.remote())["pid"]
    ray.kill(coordinator, no_restart=False)
    wait_until(lambda: (p := ray.get(coordinator.ping.remote(), timeout=5))["pid"] != pid and p["loaded"],
               what="the restarted coordinator loading")
    after = {f"group-{i}": ray.get(coordinator.fetch_offsets.remote(f"group-{i}")) for i in range(20)}
    assert after == before and after["group-7"] == {("orders", 1): (70, 0, "m7")}
    assert ray.get(coordinator.fetch_offsets.remote("billing"))[("orders", 0)] == (42, 3, "m")


def test_fetch_for_a_group_of_another_partition__not_coordinator(cluster, coordinator):
    from rafka.actors.coordinator import GroupCoordinatorActor
    other = ray.remote(GroupCoordinatorActor).options(num_cpus=0).remote(offsets_partition=0,
                                                                           offsets_partition_count=50)
    group = next(g for g in (f"g{i}" for i in range(100)) if partition_for_group(g, 50) != 0)
    try:   # the cluster is shared: the extra coordinator goes whatever happens
        with pytest.raises(NotCoordinator, match=f"lives in __consumer_offsets-{partition_for_group(group, 50)}"):
            ray.get(other.fetch_offsets.remote(group))
    finally:
        ray.kill(other)


def join(coordinator, group, member_id="", client="c", session_timeout_ms=6_000):
    return coordinator.join_group.remote(group, member_id, client_id=client, client_host="/127.0.0.1",
                                         protocol_type="consumer", protocols=[("range", b"orders")],
                                         session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=10_000)


def sync(coordinator, group, joined, generation=None):
    """A member's sync: the leader hands each member its member id as its assignment."""
    assignments = ({m: m.encode() for m, _instance, _metadata in joined["members"]}
                   if joined["leader"] == joined["member_id"] else None)
    return coordinator.sync_group.remote(group, joined["member_id"], generation or joined["generation"],
                                         assignments=assignments)


def test_membership__two_members_join_one_generation_and_split_the_partitions(cluster, coordinator):
    a, b = ray.get([join(coordinator, "members", client="a"), join(coordinator, "members", client="b")])
    assert a["generation"] == b["generation"] == 1 and a["leader"] == b["leader"]
    assignments = ray.get([sync(coordinator, "members", m) for m in (a, b)])
    assert [got["assignment"] for got in assignments] == [a["member_id"].encode(), b["member_id"].encode()]
    described = ray.get(coordinator.describe_group.remote("members"))
    assert described["state"] == "Stable" and set(described["members"]) == {a["member_id"], b["member_id"]}


def test_fencing__member_evicted_for_missing_heartbeats_cannot_commit(cluster, coordinator):
    """Member a stops heartbeating (as if paused); b keeps going. After a's session
    timeout, b rejoins into a new generation; a's commit is refused."""
    import threading
    a, b = ray.get([join(coordinator, "fenced", client="a"), join(coordinator, "fenced", client="b")])
    ray.get([sync(coordinator, "fenced", m) for m in (a, b)])
    stop = threading.Event()

    def keep_b_alive():
        member, generation = b["member_id"], 1
        while not stop.is_set():
            try:
                ray.get(coordinator.heartbeat.remote("fenced", member, generation))
            except Exception:  # REBALANCE_IN_PROGRESS: rejoin, as a consumer does
                ray.get(sync(coordinator, "fenced", ray.get(join(coordinator, "fenced", member))))
            stop.wait(0.5)
    keeper = threading.Thread(target=keep_b_alive)
    keeper.start()
    try:
        wait_until(lambda: set(ray.get(coordinator.describe_group.remote("fenced"))["members"]) == {b["member_id"]},
                   timeout_s=30, what="member a evicted after its session timeout")
        wait_until(lambda: ray.get(coordinator.describe_group.remote("fenced"))["generation"] >= 2
                   and ray.get(coordinator.describe_group.remote("fenced"))["state"] == "Stable")
        with pytest.raises((UnknownMemberId, IllegalGeneration)):
            ray.get(coordinator.commit_offsets.remote("fenced", {("orders", 0): (5, -1, "")},
                                                      a["member_id"], 1))
        assert ray.get(coordinator.fetch_offsets.remote("fenced")) == {}
    finally:
        stop.set()
        keeper.join()


def test_coordinator_restarted_while_its_partition_is_unreachable__load_in_progress_never_stale(
        cluster, coordinator):
    """Every replica of the offsets partition stops and the coordinator restarts:
    until it has loaded, every fetch is COORDINATOR_LOAD_IN_PROGRESS (never empty or
    stale data); once the replicas return, every committed offset is back unchanged."""
    from contextlib import ExitStack

    from rafka.core.errors import CoordinatorLoadInProgress
    from tests.harness import paused
    ray.get(coordinator.commit_offsets.remote("durable", {("orders", 3): (33, 1, "x")}))
    replicas = partition_state(cluster, "__consumer_offsets", 0)["replicas"]
    pids = [describe_replica("__consumer_offsets", 0, r)["pid"] for r in replicas]
    pid = ray.get(coordinator.ping.remote())["pid"]
    with ExitStack() as stack:
        for replica_pid in pids:
            stack.enter_context(paused(replica_pid))
        ray.kill(coordinator, no_restart=False)
        wait_until(lambda: ray.get(coordinator.ping.remote(), timeout=5)["pid"] != pid, what="a restart")
        for _ in range(3):
            with pytest.raises(CoordinatorLoadInProgress):
                ray.get(coordinator.fetch_offsets.remote("durable"))
    wait_until(lambda: ray.get(coordinator.ping.remote())["loaded"], timeout_s=60,
               what="loading once the replicas are back")
    assert ray.get(coordinator.fetch_offsets.remote("durable")) == {("orders", 3): (33, 1, "x")}
    assert ray.get(coordinator.fetch_offsets.remote("billing"))[("orders", 0)] == (42, 3, "m")


def fill(cluster, topic, count):
    cluster.admin().create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    with cluster.producer(acks="all", linger_ms=1) as producer:
        for future in [producer.send(topic, b"r-%d" % i, partition=0) for i in range(count)]:
            future.result(timeout=30)


def drain(consumer, count):
    got = []
    wait_until(lambda: got.extend(consumer.poll(timeout=0.5)) or len(got) >= count, what=f"{count} records")
    return got


def test_consumer_commits__commit_sync_then_a_new_consumer_resumes_at_the_committed_offset(cluster, coordinator):
    from rafka.core.structs import OffsetAndMetadata, TopicPartition
    fill(cluster, "ledger", 30)
    tp = TopicPartition("ledger", 0)
    with cluster.consumer(group_id="auditors", auto_offset_reset="earliest", enable_auto_commit=False,
                          max_poll_records=12) as consumer:
        consumer.assign([tp])
        assert consumer.committed([tp]) == {tp: None}
        first = consumer.poll(timeout=5.0)
        assert [r.offset for r in first] == list(range(12))
        consumer.commit_sync()
        assert consumer.committed([tp]) == {tp: OffsetAndMetadata(12, "", -1)}
        consumer.commit_sync({tp: OffsetAndMetadata(20, "checkpoint")})
    with cluster.consumer(group_id="auditors", auto_offset_reset="earliest") as resumed:
        resumed.assign([tp])
        assert resumed.position(tp) == 20
        assert [r.offset for r in drain(resumed, 10)] == list(range(20, 30))
    # auto-commit: close() commits the position
    with cluster.consumer(group_id="auditors", auto_offset_reset="earliest") as after_close:
        after_close.assign([tp])
        assert after_close.committed([tp])[tp].offset == 30


def test_consumer_commits__commit_async_reports_to_its_callback_in_a_later_poll(cluster, coordinator):
    from rafka.core.structs import TopicPartition
    fill(cluster, "receipts", 5)
    tp = TopicPartition("receipts", 0)
    reports = []
    with cluster.consumer(group_id="async", auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        drain(consumer, 5)
        consumer.commit_async(callback=lambda offsets, error: reports.append((offsets, error)))
        wait_until(lambda: consumer.poll(timeout=0.1) == [] and reports, what="the callback")
        (offsets, error), = reports
        assert error is None and offsets[tp].offset == 5
        assert consumer.committed([tp])[tp].offset == 5


def test_consumer_commits__committed_offset_out_of_range__auto_offset_reset_applies(cluster, coordinator):
    from rafka.core.structs import TopicPartition
    fill(cluster, "shortlog", 4)
    tp = TopicPartition("shortlog", 0)
    ray.get(coordinator.commit_offsets.remote("stale", {("shortlog", 0): (1_000, -1, "")}))
    with cluster.consumer(group_id="stale", auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        assert consumer.position(tp) == 1_000          # the committed offset, as Kafka
        assert [r.offset for r in drain(consumer, 4)] == [0, 1, 2, 3]   # out of range: reset to earliest


def test_retention__expired_offsets_get_tombstones_empty_group_gone_active_group_keeps_its_offsets(
        cluster, coordinator):
    """A second coordinator of the same partition with a 3 s retention (runs last in
    this module: its tombstones are in the shared log from here on)."""
    from rafka.actors.coordinator import GroupCoordinatorActor
    short = ray.remote(GroupCoordinatorActor).options(num_cpus=0).remote(
        offsets_partition=0, offsets_partition_count=1, offsets_retention_minutes=3 / 60,
        offsets_retention_check_interval_ms=200)
    wait_until(lambda: ray.get(short.ping.remote())["loaded"])
    member = ray.get(short.join_group.remote("active", "", client_id="a", client_host="h",
                                             protocol_type="consumer", protocols=[("range", b"")],
                                             session_timeout_ms=6_000, rebalance_timeout_ms=10_000))
    ray.get(sync(short, "active", member))
    ray.get(short.commit_offsets.remote("active", {("orders", 0): (9, -1, "")}, member["member_id"],
                                        member["generation"]))
    ray.get(short.commit_offsets.remote("standalone", {("orders", 0): (4, -1, "")}))
    # a group that commits, then its last member leaves: Empty, so its clock starts
    left = ray.get(short.join_group.remote("leaver", "", client_id="l", client_host="h",
                                           protocol_type="consumer", protocols=[("range", b"")],
                                           session_timeout_ms=6_000, rebalance_timeout_ms=10_000))
    ray.get(sync(short, "leaver", left))
    ray.get(short.commit_offsets.remote("leaver", {("orders", 1): (3, -1, "")}, left["member_id"],
                                        left["generation"]))
    ray.get(short.leave_group.remote("leaver", [(left["member_id"], None)]))
    assert ray.get(short.describe_group.remote("leaver"))["state"] == "Empty"

    def expired():   # the active member heartbeats meanwhile: its group must stay, with its offsets
        ray.get(short.heartbeat.remote("active", member["member_id"], member["generation"]))
        return (not ray.get(short.fetch_offsets.remote("standalone"))
                and ray.get(short.describe_group.remote("leaver"))["state"] == "Dead")
    wait_until(expired, timeout_s=30, interval_s=0.2, what="standalone offsets expired and the empty group gone")
    assert ray.get(short.fetch_offsets.remote("active")) == {("orders", 0): (9, -1, "")}
    # the tombstones are in the log: a coordinator loading it now finds no standalone offsets
    pid = ray.get(coordinator.ping.remote())["pid"]
    ray.kill(coordinator, no_restart=False)
    wait_until(lambda: (p := ray.get(coordinator.ping.remote(), timeout=5))["pid"] != pid and p["loaded"],
               what="reload after expiry")
    assert ray.get(coordinator.fetch_offsets.remote("active")) == {("orders", 0): (9, -1, "")}
    assert ray.get(coordinator.fetch_offsets.remote("standalone")) == {}
    assert ray.get(coordinator.fetch_offsets.remote("leaver")) == {}
    assert ray.get(coordinator.describe_group.remote("leaver"))["state"] == "Dead"   # the group is gone
    assert "leaver" not in {g["group"] for g in ray.get(coordinator.list_groups.remote())}
    ray.kill(short)


def test_commit_async__many_in_a_row__the_committed_offset_never_moves_back(cluster, coordinator):
    """The seed's regression: async commits of growing offsets, sent back to back,
    with no older one landing after a newer one. A watcher samples the committed
    offset while they land; it must only grow, and end at the last one."""
    import threading
    from rafka.core.structs import TopicPartition
    tp = TopicPartition("regress", 0)
    cluster.admin().create_topic("regress", partitions=1, replication_factor=1)
    seen, stop = [], threading.Event()

    def watch():
        while not stop.is_set():
            found = ray.get(coordinator.fetch_offsets.remote("monotonic", [("regress", 0)]))[("regress", 0)]
            if found:
                seen.append(found[0])
    reports = []
    with cluster.consumer(group_id="monotonic", enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            for offset in range(1, 41):
                consumer.commit_async({tp: offset}, callback=lambda offsets, error: reports.append(error))
            consumer.commit_sync({tp: 41})
        finally:
            stop.set()
            watcher.join()
        assert reports == [None] * 40          # every callback ran before commit_sync returned
        assert consumer.committed([tp])[tp].offset == 41
    assert seen == sorted(seen) and seen and seen[-1] <= 41


def test_offsets_log_compacted__a_reloaded_coordinator_returns_the_latest_offsets(cluster, coordinator):
    """Small offsets segments (tests/harness.py): the replicas' log cleaner keeps the
    newest commit per key, and the loader reads the compacted log (batches whose last
    records were removed keep their last offset) into the same cache."""
    from rafka.actors.coordinator import OFFSETS_TOPIC
    from tests.harness import replica
    groups = [f"compacted-{i}" for i in range(4)]
    for round_ in range(60):   # one batch of two records per commit
        for group in groups:
            ray.get(coordinator.commit_offsets.remote(group, {("orders", 0): (round_, 0, ""),
                                                              ("orders", 1): (round_, 0, "")}))
    for round_ in range(60, 120):   # then only partition 1: each last two-record batch loses its last record
        for group in groups:
            ray.get(coordinator.commit_offsets.remote(group, {("orders", 1): (round_, 0, "")}))
    state = partition_state(cluster, OFFSETS_TOPIC, 0)
    leader = replica(OFFSETS_TOPIC, 0, state["leader"])
    high_watermark = ray.get(leader.describe.remote())["high_watermark"]
    wait_until(lambda: len(decode_records(ray.get(leader.read_below_high_watermark.remote()))) < high_watermark // 2,
               timeout_s=30, what="the offsets leader's log cleaner removing superseded commits")
    before = {g: ray.get(coordinator.fetch_offsets.remote(g)) for g in groups}
    pid = ray.get(coordinator.ping.remote())["pid"]
    ray.kill(coordinator, no_restart=False)
    try:
        wait_until(lambda: (p := ray.get(coordinator.ping.remote(), timeout=5))["pid"] != pid and p["loaded"],
                   what="the restarted coordinator loading the compacted log")
    except AssertionError as error:
        raise AssertionError(f"{error}; coordinator: {ray.get(coordinator.ping.remote(), timeout=5)}; leader: "
                             f"{ray.get(leader.describe.remote(), timeout=5)}") from None
    after = {g: ray.get(coordinator.fetch_offsets.remote(g)) for g in groups}
    assert after == before
    assert all((a[("orders", 0)], a[("orders", 1)]) == ((59, 0, ""), (119, 0, "")) for a in after.values())
