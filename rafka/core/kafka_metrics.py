"""rafka's metrics under Kafka's names, and where each is read.

Names: a Kafka MBean `kafka.<domain>:type=<T>,name=<N>,<k>=<v>` becomes
`kafka_<domain>_<t>_<n>{k="v"}`, lowercased, as the Prometheus JMX exporter's
Kafka rules (kafka-2_0_0.yml) make it: a meter `...PerSec` (its Count) is the
counter `..._total` without `PerSec`; a gauge (its Value) keeps its name; a
histogram or timer is the gauge `<name>{quantile="0.99"}` (the exporter's
50thPercentile... 999thPercentile). rafka adds Prometheus' own histogram series
for those (`_bucket{le}`, `_count`, `_sum`), so `histogram_quantile` works too.
Kafka's metrics-library names (`group-coordinator-metrics`, `offset-commit-count`)
get `_` for `-`. Consumer lag, which Kafka's brokers do not export, takes
kafka-lag-exporter's names (`kafka_consumergroup_group_lag{group,topic,partition}`).
Each Family names the MBean it translates; `FAMILIES` lists them all.

Where the numbers live (each read by a callback at export; nothing here runs on
a request's path):
  * requests: core.metrics.RequestMetrics, filled by protocol.dispatch, on every node;
  * a partition's traffic and purgatories: the HostedPartition of its replica actor
    (counters it bumps per batch); ISR changes: core.replica.PartitionReplica;
    log size and segments: core.log.PartitionLog;
  * the controller's partition counts: core.metadata.ClusterMetadata; leader
    elections: a Histogram the controller actor observes;
  * commits and rebalances: core.coordinator_shard / core.group_manager counters;
  * lag: core.lag LagSamples (the same rule as `rafka lag`) the coordinator actor
    takes of its groups from its committed offsets and what the partitions'
    leaders answer (actors.consumer_lag).

Pure Python, no Ray. Callers: the actors (through actors.metrics_export), tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from rafka.core.group_state import GroupState
from rafka.core.metrics import (LATENCY_BUCKETS_MS, Family, Histogram, Kind, MetricsRegistry,
                                RequestMetrics)

if TYPE_CHECKING:   # core.lag (and the offsets schema it reads) only where lag is exported: the coordinator
    from rafka.core.lag import LagSample

COUNTER, GAUGE, HISTOGRAM = Kind.COUNTER, Kind.GAUGE, Kind.HISTOGRAM
TOPIC = ("topic",)
PARTITION = ("topic", "partition")
GROUP_PARTITION = ("group", "topic", "partition")

# --- every node: requests (kafka.network) ----------------------------------------------
REQUESTS = Family("kafka_network_requestmetrics_requests", "Requests handled, per request and version",
                  COUNTER, ("request", "version"),
                  "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=*,version=*")
TOTAL_TIME_MS = Family("kafka_network_requestmetrics_totaltimems",
                       "Time from a request's arrival to its response, ms (parked time included)",
                       HISTOGRAM, ("request",), "kafka.network:type=RequestMetrics,name=TotalTimeMs,request=*",
                       LATENCY_BUCKETS_MS)

# --- replicas: topic traffic (kafka.server BrokerTopicMetrics) ------------------------------
MESSAGES_IN = Family("kafka_server_brokertopicmetrics_messagesin", "Records appended by produce requests",
                     COUNTER, TOPIC, "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=*")
BYTES_IN = Family("kafka_server_brokertopicmetrics_bytesin", "Bytes appended by produce requests",
                  COUNTER, TOPIC, "kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=*")
BYTES_OUT = Family("kafka_server_brokertopicmetrics_bytesout", "Bytes sent to consumers' fetches",
                   COUNTER, TOPIC, "kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec,topic=*")
MESSAGES_OUT = Family("kafka_server_brokertopicmetrics_messagesout",
                      "Records sent to consumers' fetches (rafka's; Kafka counts bytes out only)",
                      COUNTER, TOPIC, "")
REPLICATION_BYTES_IN = Family("kafka_server_brokertopicmetrics_replicationbytesin",
                              "Bytes a follower appended from its leader", COUNTER, TOPIC,
                              "kafka.server:type=BrokerTopicMetrics,name=ReplicationBytesInPerSec,topic=*")
REPLICATION_BYTES_OUT = Family("kafka_server_brokertopicmetrics_replicationbytesout",
                               "Bytes a leader sent to its followers' fetches", COUNTER, TOPIC,
                               "kafka.server:type=BrokerTopicMetrics,name=ReplicationBytesOutPerSec,topic=*")

# --- replicas: replication (kafka.server ReplicaManager, kafka.cluster Partition) -------------
UNDER_REPLICATED_PARTITIONS = Family(
    "kafka_server_replicamanager_underreplicatedpartitions",
    "Partitions led here whose ISR is smaller than their replicas", GAUGE, (),
    "kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions")
UNDER_MIN_ISR_PARTITIONS = Family(
    "kafka_server_replicamanager_underminisrpartitioncount",
    "Partitions led here whose ISR is smaller than min.insync.replicas", GAUGE, (),
    "kafka.server:type=ReplicaManager,name=UnderMinIsrPartitionCount")
LEADER_COUNT = Family("kafka_server_replicamanager_leadercount", "Partitions led here", GAUGE, (),
                      "kafka.server:type=ReplicaManager,name=LeaderCount")
PARTITION_COUNT = Family("kafka_server_replicamanager_partitioncount", "Replicas served here", GAUGE, (),
                         "kafka.server:type=ReplicaManager,name=PartitionCount")
ISR_SHRINKS = Family("kafka_server_replicamanager_isrshrinks", "ISR shrinks of partitions led here",
                     COUNTER, (), "kafka.server:type=ReplicaManager,name=IsrShrinksPerSec")
ISR_EXPANDS = Family("kafka_server_replicamanager_isrexpands", "ISR expansions of partitions led here",
                     COUNTER, (), "kafka.server:type=ReplicaManager,name=IsrExpandsPerSec")
PARTITION_UNDER_REPLICATED = Family(
    "kafka_cluster_partition_underreplicated", "1 if the partition is led here and under-replicated",
    GAUGE, PARTITION, "kafka.cluster:type=Partition,name=UnderReplicated,topic=*,partition=*")
PARTITION_IN_SYNC_REPLICAS = Family(
    "kafka_cluster_partition_insyncreplicascount", "The ISR's size (reported by the leader; 0 elsewhere)",
    GAUGE, PARTITION, "kafka.cluster:type=Partition,name=InSyncReplicasCount,topic=*,partition=*")
PARTITION_REPLICAS = Family(
    "kafka_cluster_partition_replicascount", "The partition's replicas (reported by the leader; 0 elsewhere)",
    GAUGE, PARTITION, "kafka.cluster:type=Partition,name=ReplicasCount,topic=*,partition=*")
PURGATORY_SIZE = Family(
    "kafka_server_delayedoperationpurgatory_purgatorysize",
    "Requests parked: Produce (acks=all waiting for the ISR), Fetch (long polls)", GAUGE,
    ("delayedoperation",), "kafka.server:type=DelayedOperationPurgatory,name=PurgatorySize,delayedOperation=*")

# --- replicas: the log (kafka.log Log) ------------------------------------------------------
LOG_SIZE = Family("kafka_log_log_size", "Bytes of the replica's log on disk", GAUGE, PARTITION,
                  "kafka.log:type=Log,name=Size,topic=*,partition=*")
LOG_SEGMENTS = Family("kafka_log_log_numlogsegments", "Segments of the replica's log", GAUGE, PARTITION,
                      "kafka.log:type=Log,name=NumLogSegments,topic=*,partition=*")
LOG_END_OFFSET = Family("kafka_log_log_logendoffset", "The replica's log end offset", GAUGE, PARTITION,
                        "kafka.log:type=Log,name=LogEndOffset,topic=*,partition=*")
LOG_START_OFFSET = Family("kafka_log_log_logstartoffset", "The replica's log start offset", GAUGE, PARTITION,
                          "kafka.log:type=Log,name=LogStartOffset,topic=*,partition=*")

# --- the controller (kafka.controller) -------------------------------------------------------
ACTIVE_CONTROLLER = Family("kafka_controller_kafkacontroller_activecontrollercount",
                           "1 on the active controller", GAUGE, (),
                           "kafka.controller:type=KafkaController,name=ActiveControllerCount")
OFFLINE_PARTITIONS = Family("kafka_controller_kafkacontroller_offlinepartitionscount",
                            "Partitions without a leader", GAUGE, (),
                            "kafka.controller:type=KafkaController,name=OfflinePartitionsCount")
GLOBAL_TOPICS = Family("kafka_controller_kafkacontroller_globaltopiccount", "Topics", GAUGE, (),
                       "kafka.controller:type=KafkaController,name=GlobalTopicCount")
GLOBAL_PARTITIONS = Family("kafka_controller_kafkacontroller_globalpartitioncount", "Partitions", GAUGE, (),
                           "kafka.controller:type=KafkaController,name=GlobalPartitionCount")
PREFERRED_REPLICA_IMBALANCE = Family(
    "kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
    "Partitions led by another replica than their first", GAUGE, (),
    "kafka.controller:type=KafkaController,name=PreferredReplicaImbalanceCount")
LEADER_ELECTIONS = Family(
    "kafka_controller_controllerstats_leaderelectionrateandtimems",
    "Leader elections (a leader lost, an offline partition back) and their time to the new leader's role, ms",
    HISTOGRAM, (), "kafka.controller:type=ControllerStats,name=LeaderElectionRateAndTimeMs",
    LATENCY_BUCKETS_MS)

# --- group coordinators ------------------------------------------------------------------------
OFFSET_COMMITS = Family("kafka_server_group_coordinator_metrics_offset_commit",
                        "Partition offsets committed (acked)", COUNTER, (),
                        "kafka.server:type=group-coordinator-metrics,name=offset-commit-count")
COMPLETED_REBALANCES = Family("kafka_server_group_coordinator_metrics_group_completed_rebalance",
                              "Rebalances completed (a generation with members)", COUNTER, (),
                              "kafka.server:type=group-coordinator-metrics,name=group-completed-rebalance-count")
NUM_GROUPS = Family("kafka_coordinator_group_groupmetadatamanager_numgroups", "Groups coordinated here",
                    GAUGE, (), "kafka.coordinator.group:type=GroupMetadataManager,name=NumGroups")
NUM_OFFSETS = Family("kafka_coordinator_group_groupmetadatamanager_numoffsets",
                     "Committed offsets held here", GAUGE, (),
                     "kafka.coordinator.group:type=GroupMetadataManager,name=NumOffsets")
NUM_GROUPS_BY_STATE = {state: Family(
    f"kafka_coordinator_group_groupmetadatamanager_numgroups{state.value.lower()}",
    f"Groups coordinated here in state {state.value}", GAUGE, (),
    f"kafka.coordinator.group:type=GroupMetadataManager,name=NumGroups{state.value}")
    for state in GroupState}

# --- consumer lag (kafka-lag-exporter's names) --------------------------------------------------
GROUP_OFFSET = Family("kafka_consumergroup_group_offset", "The group's committed offset", GAUGE,
                      GROUP_PARTITION)
GROUP_LAG = Family("kafka_consumergroup_group_lag", "Records the group has not consumed: HW - committed",
                   GAUGE, GROUP_PARTITION)
GROUP_LAG_SECONDS = Family("kafka_consumergroup_group_lag_seconds",
                           "Now minus the timestamp of the oldest record the group has not consumed, s",
                           GAUGE, GROUP_PARTITION)
PARTITION_LATEST_OFFSET = Family("kafka_partition_latest_offset", "The partition's HW, as lag is computed",
                                 GAUGE, PARTITION)

FAMILIES: tuple[Family, ...] = (
    REQUESTS, TOTAL_TIME_MS,
    MESSAGES_IN, BYTES_IN, BYTES_OUT, MESSAGES_OUT, REPLICATION_BYTES_IN, REPLICATION_BYTES_OUT,
    UNDER_REPLICATED_PARTITIONS, UNDER_MIN_ISR_PARTITIONS, LEADER_COUNT, PARTITION_COUNT, ISR_SHRINKS,
    ISR_EXPANDS, PARTITION_UNDER_REPLICATED, PARTITION_IN_SYNC_REPLICAS, PARTITION_REPLICAS, PURGATORY_SIZE,
    LOG_SIZE, LOG_SEGMENTS, LOG_END_OFFSET, LOG_START_OFFSET,
    ACTIVE_CONTROLLER, OFFLINE_PARTITIONS, GLOBAL_TOPICS, GLOBAL_PARTITIONS, PREFERRED_REPLICA_IMBALANCE,
    LEADER_ELECTIONS,
    OFFSET_COMMITS, COMPLETED_REBALANCES, NUM_GROUPS, NUM_OFFSETS, *NUM_GROUPS_BY_STATE.values(),
    GROUP_OFFSET, GROUP_LAG, GROUP_LAG_SECONDS, PARTITION_LATEST_OFFSET)


# --- sources -----------------------------------------------------------------------------------

def register_requests(registry: MetricsRegistry, requests: RequestMetrics) -> None:
    """Request counts per request and version; latency per request (versions merged)."""
    def counts():
        return [((name, str(version)), histogram.count)
                for (name, version), histogram in list(requests.by_request.items())]

    def latencies():
        merged: dict[str, Histogram] = {}
        for (name, _), histogram in list(requests.by_request.items()):
            merged.setdefault(name, Histogram(histogram.bounds)).merge(histogram)
        return [((name,), histogram) for name, histogram in merged.items()]
    registry.add(REQUESTS, counts)
    registry.add(TOTAL_TIME_MS, latencies)


def register_partition(registry: MetricsRegistry, *, topic: str, partition: int, replica: Callable,
                       traffic, replication_bytes_in: Callable[[], int]) -> None:
    """One replica's metrics. `replica()`: its core PartitionReplica, or None while
    it cannot serve (an unusable log dir, shut down): then only its traffic
    counters are reported. `traffic`: its HostedPartition (counters and parked
    requests); `replication_bytes_in()`: bytes fetched from its leaders."""
    topic_labels, partition_labels = (topic,), (topic, str(partition))

    def led(read):
        """`read(replica, leader state)` while leading, 0 otherwise (as Kafka's
        partition gauges on a follower); nothing while not serving."""
        def collect():
            served = replica()
            if served is None:
                return ()
            leader = served.leader
            return (((), read(served, leader) if leader is not None else 0),)
        return collect

    def of_partition(family: Family, read) -> None:
        def collect():
            served = replica()
            return () if served is None else ((partition_labels, read(served)),)
        registry.add(family, collect)

    registry.value(MESSAGES_IN, lambda: traffic.messages_in, topic_labels)
    registry.value(BYTES_IN, lambda: traffic.bytes_in, topic_labels)
    registry.value(BYTES_OUT, lambda: traffic.bytes_out, topic_labels)
    registry.value(MESSAGES_OUT, lambda: traffic.messages_out, topic_labels)
    registry.value(REPLICATION_BYTES_OUT, lambda: traffic.replication_bytes_out, topic_labels)
    registry.value(REPLICATION_BYTES_IN, replication_bytes_in, topic_labels)
    registry.add(PURGATORY_SIZE, lambda: ((("Produce",), traffic.parked_produces),
                                          (("Fetch",), traffic.parked_follower_fetches
                                           + traffic.parked_consumer_fetches)))

    def under_replicated(_, leader) -> int:
        return int(len(leader.isr) < len(leader.replicas))
    registry.add(UNDER_REPLICATED_PARTITIONS, led(under_replicated))
    registry.add(UNDER_MIN_ISR_PARTITIONS, led(lambda served, leader: int(
        len(leader.isr) < served.config.min_insync_replicas)))
    registry.add(LEADER_COUNT, led(lambda _, leader: 1))
    registry.add(PARTITION_COUNT, lambda: () if replica() is None else (((), 1),))
    for family, attribute in ((ISR_SHRINKS, "isr_shrinks"), (ISR_EXPANDS, "isr_expands")):
        registry.add(family, lambda attribute=attribute: () if replica() is None else (
            ((), getattr(replica(), attribute)),))

    def partition_gauge(read):
        def collect():
            served = replica()
            if served is None:
                return ()
            return ((partition_labels, read(served.leader) if served.leader is not None else 0),)
        return collect
    registry.add(PARTITION_UNDER_REPLICATED, partition_gauge(lambda leader: under_replicated(None, leader)))
    registry.add(PARTITION_IN_SYNC_REPLICAS, partition_gauge(lambda leader: len(leader.isr)))
    registry.add(PARTITION_REPLICAS, partition_gauge(lambda leader: len(leader.replicas)))
    of_partition(LOG_SIZE, lambda served: served.log.size_bytes)
    of_partition(LOG_SEGMENTS, lambda served: len(served.log.segment_base_offsets()))
    of_partition(LOG_END_OFFSET, lambda served: served.log.log_end_offset)
    of_partition(LOG_START_OFFSET, lambda served: served.log.log_start_offset)


def register_controller(registry: MetricsRegistry, metadata: Callable, elections: Histogram) -> None:
    """`metadata()`: the controller's core ClusterMetadata; `elections`: the
    histogram its elections are observed in."""
    def partitions():
        return [state for topic in list(metadata().topics.values()) for state in topic.partitions]
    registry.value(ACTIVE_CONTROLLER, lambda: 1)
    registry.value(OFFLINE_PARTITIONS, lambda: sum(1 for state in partitions() if not state.online))
    registry.value(GLOBAL_TOPICS, lambda: len(metadata().topics))
    registry.value(GLOBAL_PARTITIONS, lambda: len(partitions()))
    registry.value(PREFERRED_REPLICA_IMBALANCE, lambda: sum(
        1 for state in partitions() if state.online and state.leader != state.replicas[0]))
    registry.value(LEADER_ELECTIONS, lambda: elections)


def register_coordinator(registry: MetricsRegistry, shard, loaded: Callable[[], bool]) -> None:
    """`shard`: the coordinator's core CoordinatorShard. Group and offset counts are
    reported once its partition is loaded (before, they would be partial)."""
    registry.value(OFFSET_COMMITS, lambda: shard.offset_commits)
    registry.value(COMPLETED_REBALANCES, lambda: shard.groups.completed_rebalances)

    def states() -> dict[GroupState, int] | None:
        if not loaded():
            return None
        counts = dict.fromkeys(GroupState, 0)
        for name in set(shard.groups.groups) | set(shard.offsets.offsets_by_group):
            group = shard.groups.groups.get(name)
            counts[group.state if group is not None else GroupState.EMPTY] += 1   # offsets only: Empty
        return counts

    registry.add(NUM_GROUPS, lambda: () if not loaded() else (((), sum(states().values())),))
    registry.add(NUM_OFFSETS, lambda: () if not loaded() else (
        ((), sum(len(offsets) for offsets in list(shard.offsets.offsets_by_group.values()))),))
    for state, family in NUM_GROUPS_BY_STATE.items():
        registry.add(family, lambda state=state: () if not loaded() else (((), states()[state]),))


def register_consumer_lag(registry: MetricsRegistry, samples: Callable[[], Iterable[LagSample]]) -> None:
    """`samples()`: the newest look at each group (core.lag: committed offset, HW
    and the oldest unconsumed record's time per partition; time lag by its rule)."""
    def each(read):
        def collect():
            rows = []
            for sample in samples():
                for position in sample.positions:
                    value = read(sample, position)
                    if value is not None:
                        rows.append(((sample.group, position.topic, str(position.partition)), value))
            return rows
        return collect

    def seconds(sample: LagSample, position) -> float | None:
        from rafka.core.lag import time_lag_ms
        lag_ms = time_lag_ms(position, sample.wall_ms)
        return None if lag_ms is None else lag_ms / 1000
    registry.add(GROUP_OFFSET, each(lambda sample, position: position.committed_offset))
    registry.add(GROUP_LAG, each(lambda sample, position: position.lag))
    registry.add(GROUP_LAG_SECONDS, each(seconds))
    registry.add(PARTITION_LATEST_OFFSET, lambda: list(
        {(p.topic, str(p.partition)): p.log_end_offset for sample in samples() for p in sample.positions}.items()))
