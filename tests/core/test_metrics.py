"""Metrics without Ray: the registry's numbers, the sources that read rafka's core
objects under Kafka's names, and the exporter's copy into (fake) Ray metrics."""

import asyncio
import re

import pytest

from rafka.actors.metrics_export import RayMetricsExporter
from rafka.core import kafka_metrics as km
from rafka.core.clock import FakeClock
from rafka.core.config import TopicConfig
from rafka.core.coordinator_shard import CoordinatorShard
from rafka.core.group_manager import GroupManager
from rafka.core.lag import LagSample, PartitionPosition
from rafka.core.metadata import ClusterMetadata
from rafka.core.metrics import Family, Histogram, Kind, MetricsRegistry, RequestMetrics, quantile
from rafka.core.offset_store import OffsetStore
from rafka.core.records import RecordInput, count_records, encode_batch
from rafka.core.replica import ACKS_ALL, PartitionReplica
from rafka.protocol import fetching, producing
from rafka.protocol.dispatch import Dispatcher
from rafka.protocol.framing import pack_request_header
from rafka.protocol.hosted_partition import HostedPartition
from rafka.protocol.hot_writers import body_pieces
from rafka.protocol.node_table import node_table

pytestmark = pytest.mark.core


def collected(registry) -> dict[str, dict[tuple, object]]:
    return {family.name: dict(samples) for family, samples in registry.collect()}


# --- the registry ------------------------------------------------------------------------

def test_histogram__le_buckets_cumulative_counts_and_sum():
    histogram = Histogram((1.0, 5.0, 10.0))
    for value in (0.5, 1.0, 3.0, 5.0, 7.0, 100.0):
        histogram.observe(value)
    assert histogram.bucket_counts == [2, 2, 1, 1]             # <=1, <=5, <=10, above
    assert histogram.cumulative_counts() == [2, 4, 5, 6]        # Prometheus' _bucket{le}, +Inf last
    assert (histogram.count, histogram.sum) == (6, 116.5)


def test_quantile__interpolated_in_its_bucket_as_histogram_quantile():
    bounds = (1.0, 2.0, 4.0)
    assert quantile(bounds, [0, 10, 0, 0], 0.5) == pytest.approx(1.5)   # half way through (1, 2]
    assert quantile(bounds, [10, 0, 0, 0], 0.99) == pytest.approx(0.99)  # first bucket from 0
    assert quantile(bounds, [0, 0, 0, 3], 0.5) == 4.0                   # above every bound: the last
    assert quantile(bounds, [0, 0, 0, 0], 0.5) is None


def test_registry__one_family_per_name_and_labels_checked():
    registry = MetricsRegistry()
    family = Family("x", "help", Kind.GAUGE, ("topic",))
    registry.value(family, lambda: 1, ("a",))
    registry.value(family, lambda: 2, ("b",))
    assert collected(registry) == {"x": {("a",): 1, ("b",): 2}}
    with pytest.raises(ValueError, match="registered twice"):
        registry.add(Family("x", "help", Kind.COUNTER, ("topic",)), lambda: ())
    with pytest.raises(ValueError, match="takes labels"):
        registry.value(family, lambda: 3, ())


def test_registry__a_failing_collector_is_left_out_and_reported():
    registry = MetricsRegistry()
    registry.value(Family("fine", "h", Kind.GAUGE), lambda: 1)
    registry.value(Family("broken", "h", Kind.GAUGE), lambda: 1 / 0)
    failures = []
    assert {f.name: s for f, s in registry.collect(on_error=lambda f, e: failures.append(f.name))} == {
        "fine": [((), 1)], "broken": []}
    assert failures == ["broken"]
    with pytest.raises(ZeroDivisionError):
        registry.collect()


def test_families__prometheus_names_kafka_mbeans_and_ray_appends_total():
    names = [f.name for f in km.FAMILIES]
    assert len(names) == len(set(names))
    for family in km.FAMILIES:
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", family.name), family.name
        assert not family.name.endswith("_total")   # Ray appends it to counters
        if family.mbean:
            assert family.mbean.startswith("kafka.")
    assert km.MESSAGES_IN.mbean == "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=*"
    assert km.UNDER_REPLICATED_PARTITIONS.name == "kafka_server_replicamanager_underreplicatedpartitions"


def test_count_records__sums_batch_headers_without_decoding():
    data = encode_batch([RecordInput(b"a"), RecordInput(b"b")]) + encode_batch([RecordInput(b"c")])
    assert count_records(data) == 3
    assert count_records(b"") == 0


# --- requests: counted and timed at dispatch with the injected clock ---------------------------

def frame(body, correlation_id=1) -> bytes:
    header = pack_request_header(header_version=body.__header_schema__.__version__, api_key=body.__api_key__,
                                 api_version=body.__version__, correlation_id=correlation_id, client_id="t")
    return header + b"".join(body_pieces(body))


class OnePartition:
    def __init__(self, hosted):
        self.hosted = hosted

    def image(self):
        return None

    def endpoint(self, topic, partition):
        return self.hosted if (topic, partition) == ("orders", 0) else None


def leader(tmp_path, **config) -> PartitionReplica:
    replica = PartitionReplica(topic="orders", partition=0, replica_id=0, directory=tmp_path / "orders-0",
                               config=TopicConfig.from_dict(config), clock=FakeClock(),
                               replica_lag_time_max_ms=30_000)
    replica.become_leader(leader_epoch=0, replicas=[0, 1], isr=[0, 1], partition_epoch=0)
    return replica


def test_dispatch__requests_counted_and_timed_per_request_fetch_split_as_kafka(tmp_path):
    replica = leader(tmp_path)
    hosted = HostedPartition(lambda: replica)
    ticks = iter([10.0, 10.002, 20.0, 20.0005, 30.0, 30.1])   # seconds: 2 ms, 0.5 ms, 100 ms

    async def no_producer_id():
        return 0
    dispatcher = Dispatcher(node_table(image=lambda: None, allocate_producer_id=no_producer_id,
                                       partitions=OnePartition(hosted)), clock_s=lambda: next(ticks))

    async def scenario():
        batch = encode_batch([RecordInput(b"x"), RecordInput(b"y")])
        await dispatcher.dispatch(frame(producing.produce_request(topic="orders", partition=0, records=batch,
                                                                  acks=1, timeout_ms=1000)))
        for replica_id in (1, -1):   # a follower's fetch, then a consumer's
            await dispatcher.dispatch(frame(fetching.fetch_request(
                topic="orders", partition=0, replica_id=replica_id, fetch_offset=0, leader_epoch=0,
                last_fetched_epoch=-1, log_start_offset=0, max_bytes=1 << 20, max_wait_ms=0)))
    asyncio.run(scenario())
    registry = MetricsRegistry()
    km.register_requests(registry, dispatcher.request_metrics)
    values = collected(registry)
    assert values[km.REQUESTS.name] == {("Produce", "9"): 1, ("FetchFollower", "12"): 1, ("FetchConsumer", "12"): 1}
    latency = values[km.TOTAL_TIME_MS.name]
    assert latency[("Produce",)].sum == pytest.approx(2.0)
    assert latency[("FetchFollower",)].sum == pytest.approx(0.5)
    assert latency[("FetchConsumer",)].sum == pytest.approx(100.0)


# --- a replica's sources -----------------------------------------------------------------------

def test_partition_metrics__traffic_per_batch_log_isr_and_purgatory(tmp_path):
    replica = leader(tmp_path, **{"min.insync.replicas": 2})
    hosted = HostedPartition(lambda: replica)
    serving = [replica]
    registry = MetricsRegistry()
    km.register_partition(registry, topic="orders", partition=0, traffic=hosted, replica=lambda: serving[0],
                          replication_bytes_in=lambda: 7)
    batch = encode_batch([RecordInput(b"a"), RecordInput(b"b"), RecordInput(b"c")])

    async def scenario():
        hosted.append(batch, ACKS_ALL)
        follower = await hosted.fetch(1, 0, 0, 1 << 20, 0)
        await hosted.fetch(1, 3, 0, 1 << 20, 0)              # the follower caught up: the HW moves
        consumed = await hosted.consumer_fetch(0, 1 << 20, 0)
        return follower, consumed
    follower, consumed = asyncio.run(scenario())
    values = collected(registry)
    topic, partition = ("orders",), ("orders", "0")
    assert values[km.MESSAGES_IN.name] == {topic: 3}
    assert values[km.BYTES_IN.name] == {topic: len(batch)}
    assert values[km.REPLICATION_BYTES_OUT.name] == {topic: len(follower.records)}
    assert values[km.BYTES_OUT.name] == {topic: len(consumed.records)}
    assert values[km.MESSAGES_OUT.name] == {topic: 3}
    assert values[km.REPLICATION_BYTES_IN.name] == {topic: 7}
    assert values[km.LOG_END_OFFSET.name] == {partition: 3}
    assert values[km.LOG_SIZE.name] == {partition: len(batch)}
    assert values[km.LOG_SEGMENTS.name] == {partition: 1}
    assert values[km.PURGATORY_SIZE.name] == {("Produce",): 0, ("Fetch",): 0}
    assert values[km.UNDER_REPLICATED_PARTITIONS.name] == {(): 0}
    assert values[km.LEADER_COUNT.name] == {(): 1}

    change = replica.leader.propose_isr([0])                      # the follower fell behind
    replica.isr_change_answered(change, isr=[0], partition_epoch=1)
    values = collected(registry)
    assert values[km.ISR_SHRINKS.name] == {(): 1} and values[km.ISR_EXPANDS.name] == {(): 0}
    assert values[km.UNDER_REPLICATED_PARTITIONS.name] == {(): 1}
    assert values[km.UNDER_MIN_ISR_PARTITIONS.name] == {(): 1}
    assert values[km.PARTITION_UNDER_REPLICATED.name] == {partition: 1}
    assert values[km.PARTITION_IN_SYNC_REPLICAS.name] == {partition: 1}
    change = replica.leader.propose_isr([0, 1])
    replica.isr_change_answered(change, isr=[0, 1], partition_epoch=2)
    assert collected(registry)[km.ISR_EXPANDS.name] == {(): 1}

    replica.become_follower(leader_id=1, leader_epoch=1)
    values = collected(registry)
    assert values[km.LEADER_COUNT.name] == {(): 0} and values[km.PARTITION_UNDER_REPLICATED.name] == {partition: 0}
    serving[0] = None                                              # shut down: only its traffic is left
    values = collected(registry)
    assert values[km.LOG_SIZE.name] == {} and values[km.MESSAGES_IN.name] == {topic: 3}


def test_controller_metrics__offline_partitions_and_elections():
    metadata = ClusterMetadata()
    for handle in (metadata.handle_start(), metadata.handle_create_topic("orders", 2, 2, None, [0, 1])[0]):
        for record in handle:
            metadata.replay(record)
    elections = Histogram()
    registry = MetricsRegistry()
    km.register_controller(registry, lambda: metadata, elections)
    assert collected(registry)[km.OFFLINE_PARTITIONS.name] == {(): 0}
    state = metadata.partition("orders", 0)
    for record in metadata.handle_elect_leader("orders", 0, unavailable_replicas=state.replicas)[0]:
        metadata.replay(record)
    elections.observe(12.0)
    values = collected(registry)
    assert values[km.OFFLINE_PARTITIONS.name] == {(): 1}
    assert values[km.GLOBAL_PARTITIONS.name] == {(): 2} and values[km.GLOBAL_TOPICS.name] == {(): 1}
    assert values[km.LEADER_ELECTIONS.name][()].count == 1


def test_coordinator_metrics__commits_rebalances_and_groups_by_state():
    async def append(records):
        return None

    async def partitions(topics):
        return {"orders": 2}
    clock = FakeClock()
    shard = CoordinatorShard(offsets=OffsetStore(), groups=GroupManager(group_initial_rebalance_delay_ms=0,
                                                                        group_min_session_timeout_ms=1),
                             clock=clock, append=append, partitions_per_topic=partitions)
    registry = MetricsRegistry()
    loaded = [False]
    km.register_coordinator(registry, shard, lambda: loaded[0])
    assert collected(registry)[km.NUM_GROUPS.name] == {}          # not loaded: nothing to count yet
    loaded[0] = True

    async def scenario():
        joined = await shard.join_group("g", "", client_id="c", client_host="h", protocol_type="consumer",
                                        protocols=[("range", b"")], session_timeout_ms=10_000,
                                        rebalance_timeout_ms=10_000)
        await shard.sync_group("g", joined["member_id"], joined["generation"])
        await shard.commit_offsets("g", {("orders", 0): (5, -1, ""), ("orders", 1): (7, -1, "")},
                                   joined["member_id"], joined["generation"])
        await shard.commit_offsets("solo", {("orders", 0): (1, -1, "")})
    asyncio.run(scenario())
    values = collected(registry)
    assert values[km.OFFSET_COMMITS.name] == {(): 3}
    assert values[km.COMPLETED_REBALANCES.name] == {(): 1}
    assert values[km.NUM_GROUPS.name] == {(): 2} and values[km.NUM_OFFSETS.name] == {(): 3}
    assert values[km.NUM_GROUPS_BY_STATE[km.GroupState.STABLE].name] == {(): 1}
    assert values[km.NUM_GROUPS_BY_STATE[km.GroupState.EMPTY].name] == {(): 1}   # assign-mode commits only


def test_lag__records_and_seconds_by_core_lags_rule():
    def at(partition, committed, end, timestamp_ms):
        return PartitionPosition(topic="orders", partition=partition, committed_offset=committed,
                                 log_end_offset=end, oldest_unconsumed_timestamp_ms=timestamp_ms)
    samples = [LagSample(group="g", wall_ms=61_000, monotonic_ms=0,
                         positions=(at(0, 3, 5, 1_000), at(1, 0, 4, None))),
               LagSample(group="h", wall_ms=61_000, monotonic_ms=0, positions=(at(0, 5, 5, None),))]
    registry = MetricsRegistry()
    km.register_consumer_lag(registry, lambda: samples)
    values = collected(registry)
    assert values[km.GROUP_LAG.name] == {("g", "orders", "0"): 2, ("g", "orders", "1"): 4, ("h", "orders", "0"): 0}
    assert values[km.GROUP_OFFSET.name][("g", "orders", "0")] == 3
    # now minus the oldest unconsumed record's time; 0 with nothing to consume; unknown: no series
    assert values[km.GROUP_LAG_SECONDS.name] == {("g", "orders", "0"): 60.0, ("h", "orders", "0"): 0.0}
    assert values[km.PARTITION_LATEST_OFFSET.name] == {("orders", "0"): 5, ("orders", "1"): 4}


# --- the exporter, into fake Ray metrics -------------------------------------------------------

class FakeMetric:
    made: dict = {}

    def __init__(self, name, description="", tag_keys=()):
        self.name, self.tag_keys, self.values = name, tag_keys, {}
        FakeMetric.made[name] = self

    def _key(self, tags):
        assert set(tags) == set(self.tag_keys)
        return tuple(tags[k] for k in self.tag_keys)


class FakeCounter(FakeMetric):
    def inc(self, value, tags):
        assert value > 0
        self.values[self._key(tags)] = self.values.get(self._key(tags), 0) + value

    def _record(self, value, tags):
        self.values.setdefault(self._key(tags), value)


class FakeGauge(FakeMetric):
    def set(self, value, tags):
        self.values[self._key(tags)] = value


class FakeTypes:
    Counter, Gauge = FakeCounter, FakeGauge


def test_exporter__counter_deltas_gauges_set_each_time_histograms_as_prometheus_series():
    FakeMetric.made = {}
    registry = MetricsRegistry()
    count, size, latency = [0], {("a",): 5}, Histogram((1.0, 10.0))
    registry.value(km.ISR_SHRINKS, lambda: count[0])
    registry.add(Family("g", "h", Kind.GAUGE, ("topic",)), lambda: list(size.items()))
    registry.value(km.LEADER_ELECTIONS, lambda: latency)
    exporter = RayMetricsExporter(registry, interval_s=1.0, metric_types=FakeTypes)
    asyncio.run(exporter.export_once())
    made = FakeMetric.made
    assert made[km.ISR_SHRINKS.name].values == {(): 0}            # present before the first shrink
    count[0] = 3
    for value in (0.5, 5.0, 50.0):
        latency.observe(value)
    del size[("a",)]
    size[("b",)] = 2
    asyncio.run(exporter.export_once())
    assert made[km.ISR_SHRINKS.name].values == {(): 3}
    assert made["g"].values == {("a",): 5, ("b",): 2}
    made["g"].values.clear()
    asyncio.run(exporter.export_once())                            # every gauge is set at every export
    assert made["g"].values == {("b",): 2}                        # ("a",) is left for Ray's agent to drop
    name = km.LEADER_ELECTIONS.name
    assert made[f"{name}_bucket"].values == {("1.0",): 1, ("10.0",): 2, ("+Inf",): 3}
    assert made[f"{name}_count"].values == {(): 3} and made[f"{name}_sum"].values == {(): 55.5}
    assert made[name].values[("0.50",)] == pytest.approx(5.5)    # over the requests since the last export
    made[name].values.clear()
    asyncio.run(exporter.export_once())                            # nothing new: the quantiles stand
    assert made[name].values[("0.50",)] == pytest.approx(5.5)
