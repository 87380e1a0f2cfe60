"""Chaos: a Spark stream topic to topic through TopicSink (issue 28's must-show)
while a running Ray read task, a broker and a Spark executor are killed mid-run;
the output read read_committed holds every input record exactly once and the
group's committed offsets equal the input's end offsets.

The faults strike in order, each once the stream has committed further than
when the one before struck (so each lands mid-run): a Ray worker while it runs
a read task (its process titled `ray::read_range_as_ipc`) is SIGKILLed; the
node of a broker is removed (its replicas and any coordinator it holds die with
it: the leader of input partition 0 when its node holds no Spark actor) and,
once the stream has gone on without it, brought back on its disk; then a RayDP
executor's process is SIGKILLed (the stream finishes on the other).

The broker removed is one whose node holds none of the Spark session's processes
(spark_bridge.session_nodes): its executor would go with it, and losing an
executor is the fault after it; and RayDP's Java driver, which owns the app
master that owns the executors, attaches to any node of this host (the first in
the GCS's order), so removing its node ends the session (both CI runs of session
27 failed so: "Lost executor 0 ... Lost executor 1" at once). The module runs 4
brokers, so that one is always free of 2 executors and that driver.
"""

import os
import signal
import threading
import time

import psutil
import pytest

from rafka.core.structs import TopicPartition
from tests.harness import wait_for_leader, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.spark]


@pytest.fixture(scope="module")
def cluster():
    from tests.harness import embedded_cluster
    with embedded_cluster(nodes=4) as embedded:
        yield embedded

RECORDS = 300
PARTITIONS = 3


def committed_total(admin) -> int:
    try:
        return sum(admin.list_consumer_group_offsets("chaos-query").values())
    except Exception:   # the group's coordinator may be moving: no progress seen this time
        return -1


def kill_a_running_read_task(deadline_s: float) -> int:
    """SIGKILLs a Ray worker while it runs a read task; its pid."""
    while time.monotonic() < deadline_s:
        for process in psutil.process_iter(["pid", "cmdline"]):
            title = " ".join(process.info["cmdline"] or ())
            if title.startswith("ray::read_range_as_ipc"):
                os.kill(process.info["pid"], signal.SIGKILL)
                return process.info["pid"]
        time.sleep(0.005)
    raise AssertionError("no read task was seen running")


def kill_an_executor() -> str:
    """SIGKILLs a live RayDP executor's process; its actor id (Ray restarts it)."""
    from ray._private.state import actors
    live = [(actor_id, info["Pid"]) for actor_id, info in actors().items()
            if info.get("State") == "ALIVE" and (info.get("Name") or "").startswith("raydp-executor")]
    assert len(live) == 2, f"not two live Spark executors: {live}"
    os.kill(live[0][1], signal.SIGKILL)
    return live[0][0]


def broker_to_remove(cluster, spark) -> int:
    """A broker whose node holds none of the Spark session's processes: the leader
    of input partition 0 when it qualifies, else another replica's broker, else
    any (3 partitions of 3 replicas on 4 brokers: each holds some of both topics)."""
    from rafka.placement.brokers import live_broker_ids
    from rafka.spark_bridge import session_nodes
    spark_nodes = session_nodes(spark)
    state = wait_for_leader(cluster, "chaos-in", 0)
    leader = state["brokers"][state["replicas"].index(state["leader"])]
    candidates = list(dict.fromkeys([leader, *state["brokers"], *sorted(live_broker_ids())]))
    free = [b for b in candidates if cluster.node_of_broker(b) not in spark_nodes]
    assert free, f"every broker's node holds a Spark process: {spark_nodes}"
    return free[0]


def test_stream_topic__read_task_broker_and_executor_killed__output_holds_every_input_once(cluster, spark):
    from rafka.spark_bridge import TopicSink, read_topic, stream_topic
    admin = cluster.admin()
    for topic in ("chaos-in", "chaos-out"):
        admin.create_topic(topic, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
    with cluster.producer(acks="all") as producer:
        for i in range(RECORDS):
            producer.send("chaos-in", value=b"in-%03d" % i, partition=i % PARTITIONS)
        producer.flush()
    input_tps = [TopicPartition("chaos-in", p) for p in range(PARTITIONS)]
    ends = admin.end_offsets(input_tps)

    outcome = {}

    def run():
        try:
            outcome["batches"] = stream_topic(spark, "chaos-in", "chaos-query", TopicSink("chaos-out"),
                                              trigger_interval_s=0.1, max_records_per_batch=15,
                                              stop_when_idle=True)
        except BaseException as error:   # the test thread reports it
            outcome["error"] = error
    stream = threading.Thread(target=run, name="chaos-stream", daemon=True)
    stream.start()

    def progressed_past(total: int) -> int:
        now = wait_until(lambda: (lambda t: t if t > total else None)(committed_total(admin)), timeout_s=240,
                         what=f"the stream committed past {total}")
        assert now < RECORDS, "the stream finished before the fault"
        return now

    kill_a_running_read_task(time.monotonic() + 120)
    progressed_past(max(0, committed_total(admin)))
    broker = broker_to_remove(cluster, spark)
    cluster.remove_node(cluster.node_of_broker(broker))
    progressed_past(max(0, committed_total(admin)))
    cluster.add_node(broker)                             # the broker back, with its disk
    kill_an_executor()
    stream.join(timeout=300)
    assert not stream.is_alive(), "the stream did not finish"
    assert "error" not in outcome, outcome.get("error")

    output = read_topic(spark, "chaos-out", isolation_level="read_committed").collect()
    assert sorted(bytes(r.value) for r in output) == [b"in-%03d" % i for i in range(RECORDS)]   # each once
    assert admin.list_consumer_group_offsets("chaos-query", require_stable=True) == ends
