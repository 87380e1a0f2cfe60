"""Metrics end to end: every actor exports Kafka-named metrics through Ray's
metrics, and the test reads them as Prometheus would, from each node's metrics
endpoint (`ray.nodes()[i]["MetricsExportPort"]`).

Ray's workers report to their node's agent every `metrics_report_interval_ms`
(10 s by default) and rafka's exporters copy at that pace: the module's cluster
runs with 1 s (RAY_metrics_report_interval_ms, inherited by every node it
starts). Every check polls the endpoints until it holds or a deadline passes.
"""

import os
import time
import urllib.request

import pytest
import ray
from prometheus_client.parser import text_string_to_metric_families

from rafka.core import kafka_metrics as km
from rafka.core.metrics import Kind
from rafka.core.structs import TopicPartition
from tests.harness import describe_replica, embedded_cluster, paused, replica, wait_for_leader, wait_until

pytestmark = pytest.mark.cluster

REPORT_INTERVAL_MS = "1000"
# every request kind the scenario sends; each network process exports its counts on its own clock,
# so the scrape waits for all of them
REQUESTS_SEEN = ("Produce", "FetchConsumer", "FetchFollower", "OffsetCommit", "JoinGroup", "SyncGroup", "Metadata")
OLD_MS = 60_000    # the records' timestamps lie this far in the past: the group's time lag is at least this


@pytest.fixture(scope="module")
def cluster():
    previous = os.environ.get("RAY_metrics_report_interval_ms")
    os.environ["RAY_metrics_report_interval_ms"] = REPORT_INTERVAL_MS
    try:
        with embedded_cluster() as embedded:
            yield embedded
    finally:
        if previous is None:
            os.environ.pop("RAY_metrics_report_interval_ms", None)
        else:
            os.environ["RAY_metrics_report_interval_ms"] = previous


class Scrape:
    """Every sample of every live node's endpoint, Ray's `ray_` prefix removed."""

    def __init__(self) -> None:
        self.samples: list[tuple[str, dict, float]] = []
        for node in ray.nodes():
            if not node["Alive"]:
                continue
            url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name.startswith("ray_kafka_"):
                        self.samples.append((sample.name[len("ray_"):], sample.labels, sample.value))

    def series(self, name: str, **labels) -> list[tuple[dict, float]]:
        return [(l, v) for n, l, v in self.samples if n == name and all(l.get(k) == w for k, w in labels.items())]

    def values(self, name: str, **labels) -> list[float]:
        return [v for _, v in self.series(name, **labels)]

    def total(self, name: str, **labels) -> float:
        return sum(self.values(name, **labels))


def scraped(condition, what: str, timeout_s: float = 60.0) -> Scrape:
    """The first scrape on which `condition(scrape)` holds."""
    found = []

    def check():
        scrape = Scrape()
        if condition(scrape):
            found.append(scrape)
            return True
        return False
    wait_until(check, timeout_s=timeout_s, interval_s=0.5, what=what)
    return found[0]


def exported_names(family) -> list[str]:
    if family.kind is Kind.COUNTER:
        return [f"{family.name}_total"]
    if family.kind is Kind.HISTOGRAM:
        return [f"{family.name}_bucket", f"{family.name}_count", f"{family.name}_sum"]
    return [family.name]


def test_metrics__produce_consume_commit__traffic_requests_log_groups_and_lag(cluster):
    started_s = time.monotonic()
    cluster.admin().create_topic("metered", partitions=2, replication_factor=3,
                                 config={"min.insync.replicas": "2"})
    old_ms = int(time.time() * 1000) - OLD_MS
    with cluster.producer(acks="all", linger_ms=5) as producer:
        for i in range(100):
            producer.send("metered", value=b"m-%d" % i, partition=i % 2, timestamp_ms=old_ms + i)
        producer.flush()
    consumer = cluster.consumer(group_id="meter", auto_offset_reset="earliest", enable_auto_commit=False,
                                session_timeout_ms=3_000, heartbeat_interval_ms=300, fetch_max_wait_ms=100)
    consumer.subscribe(["metered"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 100 and time.monotonic() < deadline:
        got += consumer.poll(timeout=0.2)
    assert len(got) == 100
    p0, p1 = TopicPartition("metered", 0), TopicPartition("metered", 1)
    consumer.commit_sync({p0: 20, p1: 30})           # 50 records each: lag 30 and 20
    consumer.close()

    group, topic = dict(group="meter", topic="metered"), dict(topic="metered")

    def settled(s: Scrape) -> bool:
        """Every actor's export after the scenario is in (each exports on its own clock)."""
        return (s.values("kafka_consumergroup_group_lag", partition="0", **group) == [30]
                and s.values("kafka_consumergroup_group_lag", partition="1", **group) == [20]
                and len(s.values("kafka_consumergroup_group_lag_seconds", **group)) == 2
                and s.total("kafka_server_brokertopicmetrics_messagesin_total", **topic) >= 100
                and s.total("kafka_server_brokertopicmetrics_messagesout_total", **topic) >= 100
                and s.values("kafka_log_log_logendoffset", **topic) == [50] * 6
                and s.total("kafka_server_brokertopicmetrics_replicationbytesin_total", **topic)
                == 2 * s.total("kafka_server_brokertopicmetrics_bytesin_total", **topic)   # two followers each
                and s.total("kafka_server_group_coordinator_metrics_offset_commit_total") >= 2
                and all(s.total("kafka_network_requestmetrics_requests_total", request=request) >= 1
                        for request in REQUESTS_SEEN))
    scrape = scraped(settled, what="the group's lag, the topic's traffic and the requests in the scrape")
    elapsed_s = time.monotonic() - started_s

    # every metric rafka exports is there, with its labels
    for family in km.FAMILIES:
        if family is km.LEADER_ELECTIONS:
            continue   # no election yet: its count is there, checked in the election scenario
        for name in exported_names(family):
            series = scrape.series(name)
            assert series, f"{name} is not exported"
            for labels, _ in series:
                assert set(family.labels) <= set(labels), f"{name}: labels {labels}, wanted {family.labels}"

    # topic traffic (the leaders' counts; followers' replication bytes)
    assert scrape.total("kafka_server_brokertopicmetrics_messagesin_total", **topic) == 100
    assert scrape.total("kafka_server_brokertopicmetrics_bytesin_total", **topic) > 100 * len(b"m-00")
    assert scrape.total("kafka_server_brokertopicmetrics_bytesout_total", **topic) > 100 * len(b"m-00")
    assert scrape.total("kafka_server_brokertopicmetrics_messagesout_total", **topic) >= 100
    assert scrape.total("kafka_server_brokertopicmetrics_replicationbytesout_total", **topic) > 0

    # requests: counted per request and version, timed per request
    assert scrape.total("kafka_network_requestmetrics_requests_total", request="Produce") >= 1
    for request in REQUESTS_SEEN:
        assert scrape.total("kafka_network_requestmetrics_requests_total", request=request) >= 1, request
    for labels, count in scrape.series("kafka_network_requestmetrics_totaltimems_count", request="Produce"):
        assert scrape.values("kafka_network_requestmetrics_totaltimems_bucket", le="+Inf", **labels) == [count]
    produce_p99 = scrape.values("kafka_network_requestmetrics_totaltimems", request="Produce", quantile="0.99")
    assert produce_p99 and all(0 < ms < 30_000 for ms in produce_p99)
    assert scrape.values("kafka_network_requestmetrics_totaltimems", request="OffsetCommit", quantile="0.50")

    # each partition's log on its three replicas
    for partition in ("0", "1"):
        assert scrape.values("kafka_log_log_logendoffset", partition=partition, **topic) == [50, 50, 50]
        assert all(size > 0 for size in scrape.values("kafka_log_log_size", partition=partition, **topic))
        assert scrape.values("kafka_log_log_numlogsegments", partition=partition, **topic) == [1, 1, 1]
        assert sorted(scrape.values("kafka_cluster_partition_insyncreplicascount", partition=partition,
                                    **topic)) == [0, 0, 3]   # the leader reports it
    assert scrape.total("kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert scrape.values("kafka_server_delayedoperationpurgatory_purgatorysize", delayedoperation="Produce")
    assert all(v >= 0 for v in scrape.values("kafka_server_delayedoperationpurgatory_purgatorysize"))

    # the controller
    assert scrape.values("kafka_controller_kafkacontroller_activecontrollercount") == [1]
    assert scrape.values("kafka_controller_kafkacontroller_offlinepartitionscount") == [0]
    # with __consumer_offsets and __transaction_state
    assert scrape.values("kafka_controller_kafkacontroller_globalpartitioncount") == [4]

    # the group's coordinator: commits, a rebalance, the group, and its lag
    assert scrape.total("kafka_server_group_coordinator_metrics_offset_commit_total") >= 2
    assert scrape.total("kafka_server_group_coordinator_metrics_group_completed_rebalance_total") >= 1
    assert scrape.total("kafka_coordinator_group_groupmetadatamanager_numgroups") >= 1
    assert scrape.values("kafka_consumergroup_group_offset", partition="0", **group) == [20]
    assert scrape.values("kafka_partition_latest_offset", partition="0", **topic) == [50]
    for partition, committed in (("0", 20), ("1", 30)):
        (seconds,) = scrape.values("kafka_consumergroup_group_lag_seconds", partition=partition, **group)
        # the record at the committed offset was stamped OLD_MS + its index before the test began
        assert OLD_MS / 1000 <= seconds <= OLD_MS / 1000 + elapsed_s + 5


def test_metrics__a_paused_follower__isr_shrinks_under_replicated_then_expands(cluster):
    cluster.admin().create_topic("isr-watch", partitions=1, replication_factor=3,
                                 config={"min.insync.replicas": "1"})
    state = wait_for_leader(cluster, "isr-watch", 0)
    follower = [r for r in state["replicas"] if r != state["leader"]][0]
    partition = dict(topic="isr-watch", partition="0")
    with paused(describe_replica("isr-watch", 0, follower)["pid"]):
        # the leader says 1 (the paused follower's own last export may linger, saying 0)
        scraped(lambda s: 1 in s.values("kafka_cluster_partition_underreplicated", **partition),
                what="the partition under-replicated while its follower is paused")
    scrape = scraped(lambda s: s.total("kafka_cluster_partition_underreplicated", **partition) == 0
                     and s.total("kafka_server_replicamanager_isrexpands_total") >= 1,
                     what="the follower back in the ISR")
    assert scrape.total("kafka_server_replicamanager_isrshrinks_total") >= 1
    assert scrape.values("kafka_cluster_partition_insyncreplicascount", **partition).count(3) == 1


def test_metrics__a_killed_leader__a_leader_election_counted_and_timed(cluster):
    cluster.admin().create_topic("elect-watch", partitions=1, replication_factor=3)
    before = wait_for_leader(cluster, "elect-watch", 0)
    ray.kill(replica("elect-watch", 0, before["leader"]), no_restart=False)
    wait_for_leader(cluster, "elect-watch", 0, newer_than_epoch=before["leader_epoch"])
    name = km.LEADER_ELECTIONS.name
    scrape = scraped(lambda s: s.total(f"{name}_count") >= 1, what="the election in the controller's metrics")
    assert scrape.values(f"{name}_bucket", le="+Inf") == scrape.values(f"{name}_count")
    (p50,) = scrape.values(name, quantile="0.50")
    assert 0 < p50 < 30_000
    assert scrape.values("kafka_controller_kafkacontroller_offlinepartitionscount") == [0]
