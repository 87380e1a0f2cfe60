"""rafka's member actors on the new consumer group protocol (KIP-848,
group_protocol="consumer") on a 3-broker local cluster: two members split the
topic by the coordinator's assignment, one is killed (Ray restarts it; its
instance id is held until the coordinator fences the killed one at its session
timeout, then it joins again), a third member joins; the assignment converges
after each step, every record is handled and committed, and `rafka
consumer-groups --describe` shows the members' commits and lag."""

import argparse

import pytest
import ray

import rafka
from rafka.core.errors import StaleMemberEpoch
from tests.harness import TEST_CLUSTER_OPTIONS, TEST_COORDINATOR_OPTIONS, handled_records, recording_handler, wait_until

pytestmark = pytest.mark.cluster
GROUP, TOPIC, PARTITIONS = "kip848-members", "kip-orders", 6
SESSION_MS = 4_000


@pytest.fixture(scope="module")
def cluster():
    with rafka.local_cluster(nodes=3, coordinator_options={**TEST_COORDINATOR_OPTIONS,
                                                           "group_consumer_session_timeout_ms": SESSION_MS,
                                                           "group_consumer_heartbeat_interval_ms": 300},
                             offsets_topic_segment_bytes=16_384, **TEST_CLUSTER_OPTIONS) as embedded:
        yield embedded


def fill(cluster, start: int, count: int) -> None:
    with cluster.producer(acks="all", linger_ms=1) as producer:
        for i in range(start, start + count):
            producer.send(TOPIC, value=f"o-{i}".encode(), partition=i % PARTITIONS)
        producer.flush()


def settled(admin, group, members: int) -> bool:
    """The coordinator's group Stable with `members` members, each partition owned
    once, and every member actor reporting the assignment the coordinator gave it."""
    described = admin.describe_consumer_group(GROUP)
    owned = sorted(tp for m in described["members"].values() for tp in m["assignment"])
    if described["state"] != "Stable" or len(described["members"]) != members or \
            owned != [(TOPIC, p) for p in range(PARTITIONS)]:
        return False
    reports = [d for d in group.describe() if d is not None]
    return len(reports) == members and all(
        d["member_id"] in described["members"]
        and sorted(map(tuple, d["assignment"])) == sorted(described["members"][d["member_id"]]["assignment"])
        for d in reports)


def committed_total(admin) -> int:
    return sum(r["current_offset"] or 0 for r in admin.consumer_group_lag(GROUP))


def test_member_actors__kip848__split_killed_member_rejoins_after_its_session_third_joins__all_committed(
        cluster, tmp_path, capsys):
    from rafka.cli_groups import cmd_consumer_groups
    admin = cluster.admin()
    admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=1)
    fill(cluster, 0, 120)
    group = cluster.run_consumer_group(GROUP, [TOPIC], recording_handler(str(tmp_path)), members=2,
                                       group_protocol="consumer", fetch_max_wait_ms=100)
    wait_until(lambda: committed_total(admin) == 120, timeout_s=60, what="the group committed every record")
    wait_until(lambda: settled(admin, group, 2), timeout_s=60, what="two members settled")
    described = admin.describe_consumer_group(GROUP)
    assert described["assignor"] == "uniform" and described["group_epoch"] == 2
    assert {len(m["assignment"]) for m in described["members"].values()} == {3}
    victim = group.describe()[0]
    assert victim["assignment"], "the victim owns partitions when it is killed"

    ray.kill(group.members[0], no_restart=False)     # no leave: its session holds its instance id
    fill(cluster, 120, 60)
    wait_until(lambda: (d := group.describe()[0]) is not None and d["pid"] != victim["pid"]
               and d["member_id"] not in ("", victim["member_id"]), timeout_s=60,
               what="the restarted member joined under a new member id")
    assert group.describe()[0]["unreleased_waits"] >= 1   # refused while the killed one's session lasted
    wait_until(lambda: settled(admin, group, 2), timeout_s=60, what="two members settled after the restart")
    wait_until(lambda: committed_total(admin) == 180, timeout_s=60, what="every record committed after the kill")

    # a third member: rafka's Consumer in the driver, polled while the test waits
    third = cluster.consumer(group_id=GROUP, group_protocol="consumer", client_id="third",
                             auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=100)
    third.subscribe([TOPIC])
    third_read = set()
    commit_owed = False

    def polling_third(condition):
        def check():
            nonlocal commit_owed
            records = third.poll(timeout=0.1)
            third_read.update((r.partition, r.offset) for r in records)
            if records or commit_owed:
                try:
                    third.commit_sync()
                    commit_owed = False
                except StaleMemberEpoch:   # the epoch moved on while it was sent: commit again after the next poll
                    commit_owed = True
            return condition()
        return check
    try:
        fill(cluster, 180, 60)
        wait_until(polling_third(lambda: committed_total(admin) == 240 and len(third.assignment()) == 2
                                 and admin.describe_consumer_group(GROUP)["state"] == "Stable"
                                 and len(admin.describe_consumer_group(GROUP)["members"]) == 3),
                   timeout_s=60, what="every record committed, three members settled")
        by_member = {m: len(d["assignment"]) for m, d in admin.describe_consumer_group(GROUP)["members"].items()}
        assert sorted(by_member.values()) == [2, 2, 2]
        assert len(third.assignment()) == 2

        seen = {(partition, offset) for _, partition, offset in handled_records(str(tmp_path))} | third_read
        assert seen == {(p, o) for p in range(PARTITIONS) for o in range(40)}

        capsys.readouterr()
        code = cmd_consumer_groups(admin, argparse.Namespace(list=False, group=GROUP, describe=True, state=False,
                                                            members=False, verbose=False, reset_offsets=False,
                                                            delete=False))
        lines = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip()]
        assert code == 0 and lines[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                          "CONSUMER-ID", "HOST", "CLIENT-ID"]
        rows = {int(cells[2]): cells for cells in lines[1:]}
        assert sorted(rows) == list(range(PARTITIONS))
        assert all(cells[3] == cells[4] == "40" and cells[5] == "0" and cells[6] in by_member
                   for cells in rows.values()), rows
        assert {cells[8] for cells in rows.values()} == {f"{GROUP}-member-0", f"{GROUP}-member-1", "third"}
    finally:
        third.close()
    final = group.stop()
    assert all("error" not in d or d["error"] is None for d in final), final
    assert admin.describe_consumer_group(GROUP)["state"] == "Empty"
