"""What the Ray-tier tests share: waiting on conditions, reading replicas, acked writes.

Never sleep for a fixed time where a condition can be waited on: `wait_until`
polls it, and counts an actor that is restarting or unreachable as "not yet",
since the scenarios restart actors on purpose.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager

import ray

from rafka.actors.replica import NAMESPACE
from rafka.core.actor_names import CONTROLLER_NAME
# member actors' handlers in tests record what they handle as the demo's do
from rafka.demo import read_recorded as handled_records, recording_handler  # noqa: F401 (re-exported)
from rafka.core.records import decode_records
from rafka.core.structs import TopicPartition


# Fast failure detection for tests: short lag window, quick pings and long polls.
# num.partitions and default.replication.factor set (Kafka's are 1 and 1), so that a
# CreateTopics with -1 shows the cluster's settings taking effect.
TEST_CLUSTER_OPTIONS = dict(num_partitions=2, default_replication_factor=3,
                            replica_lag_time_max_ms=2_000, fetch_max_wait_ms=100,
                            leader_ping_timeout_ms=1_000, watch_interval_ms=100,
                            log_retention_check_interval_ms=200, log_cleaner_backoff_ms=200)
# Groups settle fast in tests: a short initial rebalance delay, sessions from 1 s.
TEST_COORDINATOR_OPTIONS = dict(offsets_commit_timeout_ms=2_000, group_initial_rebalance_delay_ms=500,
                                group_min_session_timeout_ms=1_000)


def embedded_cluster(nodes: int = 3, **options):
    """The local cluster of `nodes` brokers a test module shares (a context manager);
    `options` beside TEST_CLUSTER_OPTIONS (network_processes=2 for a module whose
    clients should meet two processes on each broker's port)."""
    import rafka
    # small offsets segments: the log cleaner compacts __consumer_offsets in every module
    return rafka.local_cluster(nodes=nodes, coordinator_options=TEST_COORDINATOR_OPTIONS,
                               offsets_topic_segment_bytes=16_384, **{**TEST_CLUSTER_OPTIONS, **options})


def wait_until(condition, timeout_s: float = 60.0, interval_s: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = condition()
        except (ray.exceptions.ActorUnavailableError, ray.exceptions.RayActorError,
                ray.exceptions.GetTimeoutError) as error:
            value, last_error = None, error
        except ValueError as error:   # a named actor not there (yet): being re-created
            if not str(error).startswith("Failed to look up actor"):
                raise
            value, last_error = None, error
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"{what} not met in {timeout_s}s (last actor error: {last_error})")


def wait_for_controller_epoch_after(controller, epoch: int, timeout_s: float = 60.0) -> int:
    """The controller epoch of the controller once a new one answers (a restart
    bumps it). Not the first answer: ray.kill returns before the process dies,
    and the old controller may answer meanwhile."""
    def newer():
        answered = ray.get(controller.ping.remote(), timeout=10)
        return answered if answered > epoch else None
    return wait_until(newer, timeout_s=timeout_s, what=f"a controller after epoch {epoch}")


def replica(topic: str, partition: int, replica_id: int):
    """The actor holding the replica, as the controller's metadata names it."""
    controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    name = ray.get(controller.replica_actor.remote(topic, partition, replica_id))
    if name is None:
        raise ValueError(f"Failed to look up actor: {topic}-{partition} replica {replica_id} has none")
    return ray.get_actor(name, namespace=NAMESPACE)


def describe_replica(topic: str, partition: int, replica_id: int, timeout_s: float = 5.0) -> dict:
    return ray.get(replica(topic, partition, replica_id).describe.remote(), timeout=timeout_s)


def partition_state(cluster, topic: str, partition: int) -> dict:
    return ray.get(cluster.controller.metadata_snapshot.remote())["topics"][topic]["partitions"][partition]


def wait_for_leader(cluster, topic: str, partition: int, *, newer_than_epoch: int = -1,
                    timeout_s: float = 60.0) -> dict:
    """The controller's state once its leader answers as leader at that epoch."""
    def ready():
        state = partition_state(cluster, topic, partition)
        if state["leader"] < 0 or state["leader_epoch"] <= newer_than_epoch:
            return None
        answer = describe_replica(topic, partition, state["leader"], timeout_s=2.0)
        return state if (answer["role"], answer["leader_epoch"]) == ("leader", state["leader_epoch"]) else None
    return wait_until(ready, timeout_s=timeout_s,
                      what=f"{topic}-{partition} leader newer than epoch {newer_than_epoch}")


def values_below_high_watermark(topic: str, partition: int, replica_id: int) -> list[bytes]:
    data = ray.get(replica(topic, partition, replica_id).read_below_high_watermark.remote())
    return [r.value for r in decode_records(data)]


def assert_replicas_identical_below_high_watermark(cluster, topic: str, partition: int) -> bytes:
    """Every replica reaches the leader's HW, and their logs below it are the same bytes."""
    state = wait_for_leader(cluster, topic, partition)
    leader_hw = describe_replica(topic, partition, state["leader"])["high_watermark"]
    for replica_id in state["replicas"]:
        wait_until(lambda r=replica_id: describe_replica(topic, partition, r)["high_watermark"] >= leader_hw,
                   what=f"replica {replica_id} of {topic}-{partition} reaching HW {leader_hw}")
    logs = {r: ray.get(replica(topic, partition, r).read_below_high_watermark.remote())
            for r in state["replicas"]}
    leader_log = logs[state["leader"]]
    for replica_id, data in logs.items():
        assert data[:len(leader_log)] == leader_log, f"replica {replica_id} diverges below the HW"
    return leader_log


@contextmanager
def paused(pid: int):
    """SIGSTOP a process for the duration of the block; SIGCONT it after, whatever happens."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


class StreamingProducer:
    """Sends numbered records (acks=all) from a thread; `fault` runs once
    `fault_after` of them are acked. Until the fault has returned the stream goes
    on at a steady pace (one record every `pace_s`), so the fault strikes while
    records are being produced however fast the producer is; then it sends what is
    left of `count` and at least `after_fault` more. Collects (offset, value) of
    every ack."""

    def __init__(self, cluster, topic, *, count=300, fault_after=100, after_fault=20, pace_s=0.005, **options):
        self.topic, self.count, self.fault_after = topic, count, fault_after
        self.after_fault, self.pace_s = after_fault, pace_s
        self.producer = cluster.producer(acks="all", linger_ms=2, batch_size=2_000,
                                         request_timeout_ms=3_000, **options)
        self.acked: list[tuple[int, bytes]] = []
        self.sent = 0
        self.halfway = threading.Event()
        self.fault_done = threading.Event()

    def run(self, fault):
        thread = threading.Thread(target=self._send_all)
        thread.start()
        assert self.halfway.wait(60), "the first records were never acknowledged"
        try:
            fault()
        finally:
            self.fault_done.set()
        thread.join(180)
        assert not thread.is_alive(), "the producer did not finish"
        self.producer.close()
        assert len(self.acked) == self.sent
        return self.acked

    def _send_all(self):
        futures = []
        i = sent_after_fault = 0
        while i < self.count or sent_after_fault < self.after_fault:
            value = b"%s-%05d" % (self.topic.encode(), i)
            futures.append((value, self.producer.send(self.topic, value, partition=0)))
            if self.fault_done.is_set():
                sent_after_fault += 1
            if i == self.fault_after:
                for v, f in futures:
                    self.acked.append((f.result(timeout=60).offset, v))
                futures = []
                self.halfway.set()
            elif i > self.fault_after and not self.fault_done.is_set():
                time.sleep(self.pace_s)
            i += 1
        self.sent = i
        for v, f in futures:
            self.acked.append((f.result(timeout=120).offset, v))


def read_back(cluster, topic, partition=0):
    """Every record of the partition from its log start to its HW: [(offset, value)]."""
    tp = TopicPartition(topic, partition)
    with cluster.consumer(auto_offset_reset="earliest", max_poll_records=10_000) as consumer:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        records = []
        wait_until(lambda: records.extend(consumer.poll(timeout=0.5)) or consumer.position(tp) >= end,
                   what=f"reading {topic}-{partition} to its HW {end}")
    return [(r.offset, r.value) for r in records]


def wait_until_serving(cluster, timeout_s: float = 120.0) -> float:
    """Every partition of every topic has a leader that answers as leader at the
    controller's epoch, and every group and transaction coordinator has loaded;
    returns the seconds it took."""
    from rafka.core.actor_names import (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, coordinator_actor_name,
                                        transaction_coordinator_actor_name)
    started_s = time.monotonic()
    snapshot = ray.get(cluster.controller.metadata_snapshot.remote())["topics"]
    for name, topic in snapshot.items():
        for p in topic["partitions"]:
            wait_for_leader(cluster, name, p["partition"], timeout_s=timeout_s)
    for topic, name_of in ((OFFSETS_TOPIC, coordinator_actor_name),
                           (TRANSACTION_STATE_TOPIC, transaction_coordinator_actor_name)):
        for p in range(len(snapshot.get(topic, {}).get("partitions", []))):
            coordinator = ray.get_actor(name_of(p), namespace=NAMESPACE)
            wait_until(lambda: ray.get(coordinator.ping.remote(), timeout=5)["loaded"], timeout_s=timeout_s,
                       what=f"{name_of(p)} loaded")
    return time.monotonic() - started_s


def assert_acked_once_in_order(cluster, topic, acked):
    read = read_back(cluster, topic)
    values = [v for _, v in read]
    assert len(values) == len(set(values)), "a record was written twice"
    assert [o for o, _ in read] == list(range(read[0][0], read[0][0] + len(read))), "offsets not dense"
    acked_values = {v for _, v in acked}
    assert [pair for pair in read if pair[1] in acked_values] == sorted(acked), \
        "acked records missing, moved or out of order"
    assert_replicas_identical_below_high_watermark(cluster, topic, 0)


# --- one replica actor, on the wire -------------------------------------------------------
# Replica actors carry records only over the Kafka protocol. Tests that must reach one
# particular replica (a deposed leader, a zombie) send to its own endpoint, as a
# client that still believes it leads would.

def replica_wire(replica) -> tuple[tuple[str, int], str, int]:
    """(endpoint, topic, partition) of a replica actor: where produce_to and
    fetch_from send. Ask it before the replica is paused; pass it to them then."""
    if isinstance(replica, tuple):
        return replica
    answer = ray.get(replica.describe.remote(), timeout=30)
    return tuple(ray.get(replica.ping.remote(), timeout=30)["endpoint"]), answer["topic"], answer["partition"]


def produce_to(replica, records: bytes, acks: int, timeout_ms: int = 10_000):
    """Produce `records` to this replica's endpoint (the actor, or its replica_wire):
    a concurrent Future of the base offset, or of the typed KafkaError answered."""
    import concurrent.futures

    from rafka.actors.cluster_credential import cluster_login
    from rafka.client.admin import admin_network
    from rafka.protocol import producing
    address, topic, partition = replica_wire(replica)
    # the client waits well past the broker's own timeout: the replica may be
    # paused (SIGSTOP) for as long as a test holds it, and the answer still counts
    sent = admin_network(cluster_login).submit(address, producing.produce_request(
        topic=topic, partition=partition, records=records, acks=acks, timeout_ms=timeout_ms),
        timeout_ms=timeout_ms + 120_000)
    answer: concurrent.futures.Future = concurrent.futures.Future()

    def done(future) -> None:
        try:
            answer.set_result(producing.produce_answer(future.result(), topic=topic, partition=partition))
        except BaseException as error:
            answer.set_exception(error)
    sent.add_done_callback(done)
    return answer


def fetch_from(replica, offset: int, max_bytes: int = 1 << 20):
    """A consumer's Fetch of this replica from `offset`: protocol.fetching.LeaderAnswer."""
    from rafka.actors.cluster_credential import cluster_login
    from rafka.client.admin import admin_network
    from rafka.protocol import fetching
    address, topic, partition = replica_wire(replica)
    response = admin_network(cluster_login).submit(address, fetching.fetch_request(
        topic=topic, partition=partition, replica_id=fetching.CONSUMER_REPLICA_ID, fetch_offset=offset,
        leader_epoch=fetching.NO_EPOCH, last_fetched_epoch=fetching.NO_EPOCH, log_start_offset=-1,
        max_bytes=max_bytes, max_wait_ms=0)).result(timeout=30)
    return fetching.leader_answer(response, topic=topic, partition=partition)


class MetadataProbe:
    """Metadata (every topic) to one Kafka node every `interval_ms` on a thread of
    its own, over rafka's Connection: each answer's latency and the endpoints it
    named, with the time it was sent. With `check_endpoints`, every endpoint an
    answer names is dialled once the answer is in, and a refusal is kept with its
    time (an endpoint a later answer still names is one clients are sent to in
    vain). Used by the compat tests and bench/topic_create_bench.py."""

    def __init__(self, host: str, port: int, *, interval_ms: int = 20, check_endpoints: bool = False) -> None:
        self.host, self.port, self.interval_ms = host, port, interval_ms
        self.check_endpoints = check_endpoints
        self.answers: list[tuple[float, float, dict]] = []   # (sent at, monotonic s; latency ms; {node: (host, port)})
        self.refused: dict[tuple[str, int], float] = {}       # endpoint -> since when it refuses (monotonic s)
        # (endpoint, seconds since it refused) for each answer sent after the endpoint
        # was seen refusing that still named it
        self.named_after_refusal: list[tuple[tuple[str, int], float]] = []
        self.latest = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import asyncio
        import socket

        from rafka.protocol.cluster_requests import metadata_request
        from rafka.protocol.connection import Connection

        async def ask_forever():
            connection = await Connection.open(self.host, self.port, client_id="metadata-probe")
            while not self._stop.is_set():
                sent_s = time.monotonic()
                answer = await connection.request(metadata_request(None))
                nodes = {int(b.node_id): (b.host, int(b.port)) for b in answer.brokers}
                self.answers.append((sent_s, (time.monotonic() - sent_s) * 1000, nodes))
                self.latest = answer
                for endpoint in set(nodes.values()) if self.check_endpoints else ():
                    refused_s = self.refused.get(endpoint)
                    if refused_s is not None and sent_s > refused_s:
                        self.named_after_refusal.append((endpoint, sent_s - refused_s))
                    try:
                        socket.create_connection(endpoint, timeout=1).close()
                        self.refused.pop(endpoint, None)   # listening (again, or a new node on the port)
                    except ConnectionRefusedError:
                        self.refused.setdefault(endpoint, time.monotonic())
                await asyncio.sleep(self.interval_ms / 1000)
            await connection.close()
        asyncio.run(ask_forever())

    def __enter__(self) -> MetadataProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def latencies_ms(self, start_s: float, end_s: float) -> list[float]:
        return [ms for sent_s, ms, _ in self.answers if start_s <= sent_s <= end_s]
