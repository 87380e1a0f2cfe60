"""Group coordinator actors over `__consumer_offsets` (R3, min ISR 2): offset
commits acked only once replicated, and reloaded after a coordinator restart."""

import os
import signal

import pytest
import ray

from rafka.core.errors import NotCoordinator, OffsetMetadataTooLarge, RequestTimedOut
from rafka.core.offsets_schema import partition_for_group
from tests.harness import describe_replica, partition_state, wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def coordinator(cluster):
    (handle,) = cluster.start_group_coordinators(offsets_topic_num_partitions=1,
                                                 offsets_commit_timeout_ms=2_000)
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
        with pytest.raises(RequestTimedOut) as failed:
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
    with pytest.raises(NotCoordinator, match=f"lives in __consumer_offsets-{partition_for_group(group, 50)}"):
        ray.get(other.fetch_offsets.remote(group))
    ray.kill(other)
