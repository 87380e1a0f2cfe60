"""A one-node Kafka cluster in this process, without Ray: core PartitionReplicas
(replication factor 1) and one group coordinator (a real CoordinatorShard),
served by the real ProtocolServer and handlers, on a thread with its own event
loop. The wire-protocol tests drive it with our Connection and with clients
nobody here wrote (kafka-python, confluent-kafka, kcat).

Each partition is served by the HostedPartition the replica actor uses (the same
calls and waiting, no Ray); the coordinator below stands in for the coordinator
actor, and its writes to __consumer_offsets are acked at once (nothing
replicates here). ACLs are created and deleted on this node's own metadata (it
stands in for the controller there: `acl_admin`), and the image rebuilt; so are
leader elections and reassignments (`elections_admin`: metadata only, no
replica moves). One transaction coordinator (a real TransactionShard of the
one __transaction_state partition, on its own node) stands in for the
transaction coordinator actor: its writes are acked at once and kept encoded
(`LocalTransactionCoordinator.records`), and its markers go to the hosted
partitions' `append_marker`, as WriteTxnMarkers does (those of __consumer_offsets
to the group coordinator's `complete_transaction`).

Authorization is as in a cluster: the image carries the ACL bindings, rafka's
cluster user (whose credential the metadata holds, as the controller's) and
`super_users`; `require_sasl` commits require_sasl, so a resource no binding names
is closed (with a SASL listener, as `rafka up --sasl`). Behind an edge the
actors' listeners know the cluster user, and the edge relays as it, as a
broker does.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading

from rafka.core.actor_names import (CONTROLLER_NAME, OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, broker_actor_name,
                                    coordinator_actor_name, transaction_coordinator_actor_name)
from rafka.core.broker_loggers import LoggerLevels
from rafka.core.clock import SystemClock
from rafka.core.cluster_image import broker_view, build_image
from rafka.core.config import TopicConfig
from rafka.core.consumer_group import ConsumerGroups
from rafka.core.coordinator_shard import CoordinatorShard
from rafka.core.group_manager import GroupManager
from rafka.core.log_dirs import describe_log_dir
from rafka.core.metadata import ClusterMetadata, id_as_uuid
from rafka.core.offsets_schema import decode_record as decode_offsets_record
from rafka.core.offsets_schema import encode_key as encode_offsets_key, encode_value as encode_offsets_value
from tests.core.helpers import assign_shells
from rafka.core.errors import KafkaError
from rafka.core.offset_store import OffsetStore
from rafka.core.producer_ids import ProducerIdAllocator, ProducerIdBlock
from rafka.core.replica import PartitionReplica
from rafka.core.transaction_log import encode_key, encode_value
from rafka.core.transaction_shard import TransactionShard
from rafka.core.scram import CLUSTER_MECHANISM, CLUSTER_USER
from rafka.protocol.connection import SaslLogin
from rafka.protocol.dispatch import Dispatcher
from rafka.protocol.sasl import SaslListener
from rafka.protocol.edge import ControllerUnreachable, EdgeDispatcher
from rafka.protocol.handlers.alter_configs import BrokerLoggersHost
from rafka.protocol.handlers.describe_quorum import CONTROLLER_UNREACHABLE
from rafka.protocol.hosted_partition import HostedPartition
from rafka.protocol.node_table import node_table
from rafka.protocol.pipelining import admit_next
from rafka.protocol.server import ProtocolServer


class LocalCoordinator:
    """The coordinator actor's calls over a real CoordinatorShard; every group is
    its own (one offsets partition)."""

    def __init__(self, partitions_per_topic, topic_metadata, *, consumer_session_timeout_ms: int = 45_000,
                 consumer_heartbeat_interval_ms: int = 5_000, verify_transaction=None) -> None:
        async def append(records, kind=None):   # acked at once: nothing to replicate to
            self.records += [(encode_offsets_key(key), encode_offsets_value(value)) for key, value in records]
        self.records: list[tuple[bytes, bytes | None]] = []   # what __consumer_offsets would hold, encoded

        def new_shard() -> CoordinatorShard:
            return CoordinatorShard(offsets=OffsetStore(offset_metadata_max_bytes=4096,
                                                        offsets_retention_ms=7 * 24 * 3_600_000),
                                    groups=GroupManager(group_initial_rebalance_delay_ms=0),
                                    clock=SystemClock(), append=append, partitions_per_topic=partitions_per_topic,
                                    join_poll_interval_ms=20, topic_metadata=topic_metadata,
                                    verify_transaction=verify_transaction,
                                    consumer_groups=ConsumerGroups(session_timeout_ms=consumer_session_timeout_ms,
                                                                   heartbeat_interval_ms=consumer_heartbeat_interval_ms))
        self._new_shard = new_shard
        self.shard = new_shard()

    async def fail_over(self) -> None:
        """A new coordinator takes the partition: a fresh shard that loads it by
        replaying what it holds (`records`; transactions' batches are kept as plain
        records here, so a test of a failover runs none)."""
        shard = self._new_shard()
        for key_bytes, value_bytes in self.records:
            shard.replay(*decode_offsets_record(key_bytes, value_bytes))
        self.shard = shard

    def coordinator_for(self, group_id):
        return self

    async def tick_forever(self):
        while True:
            await asyncio.sleep(0.1)
            await self.shard.tick()

    async def list_groups(self):
        return self.shard.list_groups()

    async def describe_group(self, group):
        return self.shard.describe_group(group)

    async def consumer_group_describe(self, group):
        return self.shard.consumer_group_describe(group)

    def offsets_partition_coordinator(self, partition):
        return self if partition == 0 else None

    async def fetch_offsets(self, group, partitions=None, *, require_stable=False):
        return self.shard.fetch_offsets(group, partitions, require_stable=require_stable)

    async def commit_transactional_offsets(self, group, offsets, **txn):   # as the actor's
        return await self.shard.commit_transactional_offsets(group, offsets, **txn, on_queued=admit_next)

    async def commit_offsets(self, group, offsets, member_id="", generation=-1, group_instance_id=None):
        # as the actor's
        return await self.shard.commit_offsets(group, offsets, member_id, generation, group_instance_id,
                                               on_queued=admit_next)

    def __getattr__(self, name):   # join_group, sync_group, heartbeat, commit_offsets, ...
        return getattr(self.shard, name)


class LocalTransactionCoordinator:
    """A TransactionHost (handlers.txn_coordinator) over one real TransactionShard
    coordinating every transactional id (one __transaction_state partition)."""

    def __init__(self, *, allocate_block, send_markers, offsets_partition_count: int) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

        async def append(records):   # acked at once: nothing to replicate to
            self.records += [(encode_key(key), encode_value(value)) for key, value in records]
        self.shard = TransactionShard(partition=0, partition_count=1, coordinator_epoch=0, clock=SystemClock(),
                                      append=append, send_markers=send_markers,
                                      producer_ids=ProducerIdAllocator(allocate_block),
                                      offsets_partition_count=offsets_partition_count)
        self.shard.finish_loading()

    def transaction_coordinator_for(self, transactional_id):
        return self.shard

    def transaction_coordinators(self):
        return [self.shard]


class _NoControlPlane:
    """In place of the controller's handle: an Admin given it has no Ray calls."""
    login = None


class ProtocolNode:
    """Start with `with ProtocolNode(tmp_path, {"orders": 2}) as node:`;
    `node.bootstrap` is host:port; `configs` gives a topic its configs
    ({"facts": {"cleanup.policy": "compact"}}) beside min.insync.replicas=1."""

    def __init__(self, directory, topics: dict[str, int], *, configs: dict[str, dict] | None = None, sasl=None,
                 tls=None, edge: bool = False, brokers: int = 1, require_sasl: bool = False,
                 super_users: frozenset[str] = frozenset(), coordinator_options: dict | None = None,
                 quota_options: dict | None = None, topic_admin=None) -> None:
        """`edge`: clients bootstrap at a broker's node (protocol.edge) in front of
        the actors' nodes, as in a cluster; `brokers`: how many brokers the
        partitions are spread over (replicas of brokers > 0 are refused by broker
        0's edge, as not led there; only broker 0 runs an edge);
        `coordinator_options`: LocalCoordinator's (consumer groups' session timeout
        and heartbeat interval); `quota_options`: the edge's client quotas'
        (protocol.throttling.EdgeQuotas: clock, quota window); `topic_admin`: the
        controller's calls behind the node (a stand-in; none: NOT_CONTROLLER)."""
        self.topic_admin = topic_admin
        self.quota_options = quota_options
        self.coordinator_options = coordinator_options or {}
        self.directory = directory
        self.topics = topics
        self.configs = configs or {}
        self.sasl = sasl   # a protocol.sasl.SaslListener: every listener asks for SASL/SCRAM
        self.tls = tls     # a protocol.tls.server_context: every listener speaks TLS
        self.metadata = ClusterMetadata()
        self.endpoints: dict[tuple[str, int], HostedPartition] = {}
        self._image = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="protocol-node", daemon=True)
        self.port = None
        self.edge = None
        self.with_edge = edge
        self.broker_ids = list(range(brokers))
        self.require_sasl = require_sasl
        self.super_users = frozenset(super_users)
        self.cluster_login = SaslLogin(CLUSTER_MECHANISM, CLUSTER_USER, "in-process-cluster-secret")
        self.logger_levels = LoggerLevels()   # broker 0's, on this process's loggers

    def image(self):
        return self._image

    def endpoint(self, topic: str, partition: int):
        return self.endpoints.get((topic, partition))

    def append_unverified(self, topic: str, partition: int, records: bytes) -> int:
        """Batches written straight into the partition's leader, as no Produce can
        since KIP-890 (a transactional batch no coordinator knows of: what a
        Produce that arrived after its transaction ended left behind before); the
        base offset."""
        async def append():
            endpoint = self.endpoints[(topic, partition)]
            return (await endpoint.acknowledged(endpoint.append(records, 1), 5_000)).base_offset
        return self.call(append())

    async def _verify_offsets_partition(self, transactional_id, producer_id, producer_epoch):
        """The group coordinator's KIP-890 question (core.coordinator_shard) for its
        one __consumer_offsets partition."""
        offsets_partition = (OFFSETS_TOPIC, 0)
        return (await self.verify_transaction(transactional_id, producer_id, producer_epoch,
                                              [offsets_partition]))[offsets_partition]

    async def verify_transaction(self, transactional_id, producer_id, producer_epoch, partitions) -> dict:
        """PartitionHost: KIP-890's question, asked of the one transaction coordinator
        here directly (a cluster's leaders ask over the wire:
        protocol.txn_verification, whose request and answer tests.core.
        test_protocol_transactions drives through the handler)."""
        try:
            return self.transactions.shard.verify_partitions(transactional_id, producer_id=producer_id,
                                                             producer_epoch=producer_epoch, partitions=partitions)
        except KafkaError as error:
            return {tp: error for tp in partitions}

    def wire_admin(self, *, default_api_timeout_ms: int = 30_000):
        """rafka's Admin with only its wire half, bootstrapped here (no Ray: the calls
        a test makes of it go over the wire)."""
        from rafka.client.admin import Admin
        return Admin(_NoControlPlane(), bootstrap_servers=self.bootstrap, default_api_timeout_ms=default_api_timeout_ms)

    @contextlib.contextmanager
    def kafka_python_admin(self, timeout_s: float = 20):
        """kafka-python's KafkaAdminClient bootstrapped here, closed after."""
        from kafka.admin import KafkaAdminClient
        client = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=int(timeout_s * 1000))
        try:
            yield client
        finally:
            client.close()

    @property
    def coordinator_port(self) -> int:
        return self.servers[2 if self.with_edge else 1].port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> ProtocolNode:
        self._thread.start()
        self.port = self.call(self._start())
        return self

    def __exit__(self, *exc) -> None:
        self.logger_levels.apply({})   # the test process's loggers as they were
        self.call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        for endpoint in self.endpoints.values():
            endpoint.replica.close()

    def call(self, coroutine, timeout_s: float = 30):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)

    async def _start(self) -> int:
        apply = self._apply
        apply(self.metadata.handle_start())
        apply(self.metadata.handle_cluster_credential(self.cluster_login.password, require_sasl=self.require_sasl))
        clock = SystemClock()
        for name, count in self.topics.items():
            config = {"min.insync.replicas": 1, **self.configs.get(name, {})}
            records, _ = self.metadata.handle_create_topic(name, count, 1, config, self.broker_ids,
                                                           rng=random.Random(0))
            apply(records)
            assign_shells(self.metadata, name)
            for p in range(count):
                replica = PartitionReplica(topic=name, partition=p, replica_id=0,
                                           directory=self.directory / f"{name}-{p}",
                                           config=TopicConfig.from_dict(config), clock=clock,
                                           replica_lag_time_max_ms=30_000)
                replica.become_leader(leader_epoch=0, replicas=[0], isr=[0], partition_epoch=0)
                self.endpoints[(name, p)] = HostedPartition(lambda replica=replica: replica)
        apply(self.metadata.handle_create_topic(OFFSETS_TOPIC, 1, 1, None, [0], rng=random.Random(0))[0])
        apply(self.metadata.handle_create_topic(TRANSACTION_STATE_TOPIC, 1, 1, None, [0], rng=random.Random(0))[0])
        self.coordinator = LocalCoordinator(self._partitions_per_topic, self._topic_metadata,
                                            verify_transaction=self._verify_offsets_partition,
                                            **self.coordinator_options)
        self._ticker = asyncio.get_running_loop().create_task(self.coordinator.tick_forever())
        self.transactions = LocalTransactionCoordinator(allocate_block=self._allocate_producer_ids,
                                                        send_markers=self._send_markers, offsets_partition_count=1)
        self._txn_ticker = asyncio.get_running_loop().create_task(self._tick_transactions())
        # The one table every node serves; here one node hosts everything (and is
        # not the controller: topic administration answers NOT_CONTROLLER).
        dispatcher = Dispatcher(node_table(image=self.image, allocate_producer_id=self._allocate_producer_id,
                                           partitions=self, groups=self.coordinator,
                                           list_groups=self.coordinator.list_groups, acl_admin=self,
                                           topic_admin_host=self.topic_admin,
                                           elections_admin=self, quota_admin=self, feature_admin=self,
                                           transactions=self.transactions, envelopes=True,
                                           log_dirs=None if self.with_edge else self._log_dirs,
                                           quorum=self.quorum))
        # One server (port) per actor, as in a cluster, all answering from one table:
        # librdkafka 2.0 mixes up node ids that share an address.
        actors = [(CONTROLLER_NAME, None), (coordinator_actor_name(0), "0" if self.with_edge else None),
                  (transaction_coordinator_actor_name(0), "0" if self.with_edge else None)] + [
            (self.metadata.replica_actor(name, p, 0), str(self.metadata.topics[name].partitions[p].brokers[0]))
            for name, count in self.topics.items() for p in range(count)]
        self.servers = []
        # Behind an edge, the actors' listeners take the cluster user's login (the
        # edge's relays), optional unless the node's SASL is required.
        internal_sasl = SaslListener(
            credential_for=lambda user, mechanism: self._image.scram_credential(user, mechanism) or (
                self.sasl.credential_for(user, mechanism) if self.sasl else None),
            required=self.sasl.required if self.sasl else (lambda: False)) if self.with_edge else self.sasl
        for actor, rack in actors:
            server = ProtocolServer(dispatcher, host="127.0.0.1", sasl=internal_sasl, tls=self.tls)
            port = await server.start()
            self.servers.append(server)
            apply(self.metadata.handle_register_node(actor, "127.0.0.1", port, rack)[0])
        if self.with_edge:
            self.edge = EdgeDispatcher(
                node_table(image=lambda: self.view, allocate_producer_id=self._allocate_producer_id,
                           topic_admin_host=ControllerUnreachable(lambda: self.view),   # as actors.broker
                           log_dirs=self._log_dirs, quorum=CONTROLLER_UNREACHABLE,
                           broker_loggers=BrokerLoggersHost(0, self.alter_broker_loggers)),
                broker_id=0, image=self.image, view=lambda: self.view, upstream_login=self._cluster_login,
                quota_options=self.quota_options)
            server = ProtocolServer(self.edge, host="127.0.0.1", sasl=self.sasl, tls=self.tls)
            self.servers.insert(0, server)
            apply(self.metadata.handle_register_node(broker_actor_name(0), "127.0.0.1", await server.start())[0])
        self._rebuild_image()
        return self.servers[0].port

    def _log_dirs(self):
        """Broker 0's log dir (the node's directory), as actors.broker describes
        its own: every partition here is one of its replicas."""
        hosted = [(name, p) for name, count in self.topics.items() for p in range(count)]
        return [(str(self.directory.absolute()), lambda: describe_log_dir(self.directory, hosted))]

    async def _cluster_login(self):
        return self.cluster_login

    def quorum(self):
        """The metadata log's quorum as the controller tells it (actors.controller
        `_quorum`), for a cluster of brokers 0 and 1: broker 0 the voter at the
        image's version, its controller listener the controller's node; broker 1 an
        observer a version behind."""
        from rafka.protocol.handlers.describe_quorum import QuorumState, ReplicaState
        image = self.image()
        node = image.nodes.get(image.controller_node)
        return QuorumState(leader_id=0, leader_epoch=1, high_watermark=image.version,
                           voters=(ReplicaState(0, image.version, 1_000, 1_000),),
                           observers=(ReplicaState(1, image.version - 1, 900, 800),),
                           leader_endpoint=(node.host, node.port) if node else None)

    def _rebuild_image(self) -> None:
        self._image = build_image(self.metadata, version=1 if self._image is None else self._image.version + 1,
                                  super_users=self.super_users)
        self.view = broker_view(self._image)

    async def create_acls(self, bindings):   # the controller's calls (protocol.handlers.acls.AclAdmin)
        records, results = self.metadata.handle_create_acls(bindings)
        self._apply(records)
        self._rebuild_image()
        return results

    async def delete_acls(self, filters):
        records, results = self.metadata.handle_delete_acls(filters)
        self._apply(records)
        self._rebuild_image()
        return results

    async def alter_client_quotas(self, entries, validate_only=False):   # (protocol.handlers.client_quotas)
        records, results = self.metadata.handle_alter_client_quotas(entries)
        if not validate_only:
            self._apply(records)
            self._rebuild_image()
        return results

    async def update_features(self, updates, validate_only=False):   # (protocol.handlers.update_features)
        records = self.metadata.handle_update_features(updates, controller_id=0)
        if not validate_only:
            self._apply(records)
            self._rebuild_image()

    async def alter_broker_loggers(self, broker_id, ops):   # (the controller's, forwarded by the edge)
        records, levels = self.metadata.handle_alter_broker_loggers(broker_id, ops)
        self._apply(records)
        self._rebuild_image()
        self.logger_levels.apply(self._image.broker_logger_levels.get(0, {}))   # as the image push applies them
        return levels

    async def alter_user_scram_credentials(self, deletions, upsertions):   # (protocol.handlers.scram_credentials)
        records, results = self.metadata.handle_alter_user_scram_credentials(deletions, upsertions)
        self._apply(records)
        self._rebuild_image()
        return results

    async def elect_leaders(self, election_type, partitions):   # (protocol.handlers.partition_admin)
        """Every replica with a registered node serves (nothing dies here)."""
        records, results = self.metadata.handle_elect_leaders(
            election_type, partitions, lambda topic, partition: {
                r for r in self.metadata.partition(topic, partition).replicas
                if self.metadata.replica_actor(topic, partition, r) in self.metadata.nodes})
        self._apply(records)
        self._rebuild_image()
        return results

    async def alter_partition_reassignments(self, moves, allow_replication_factor_change=True):
        """The metadata only: no replica starts or stops here, so a move stays in
        progress until cancelled."""
        results = []
        for topic, partition, brokers in moves:
            try:
                records, _ = self.metadata.handle_alter_reassignment(
                    topic, partition, brokers, self.broker_ids,
                    allow_replication_factor_change=allow_replication_factor_change)
            except KafkaError as error:
                results.append(error)
                continue
            self._apply(records)
            results.append(None)
        self._rebuild_image()
        return results

    async def list_partition_reassignments(self, partitions):
        return self.metadata.reassignments(partitions)

    async def _stop(self) -> None:
        self.transactions.shard.close()
        for ticker in (self._ticker, self._txn_ticker):
            ticker.cancel()
        await asyncio.gather(self._ticker, self._txn_ticker, return_exceptions=True)
        for server in self.servers:
            await server.stop()

    async def _partitions_per_topic(self, topics) -> dict[str, int]:
        return {t: count for t, (_, count) in (await self._topic_metadata(topics)).items()}

    async def _topic_metadata(self, topics) -> dict:
        """None: every topic."""
        return {t: (id_as_uuid(self.metadata.topics[t].topic_id), len(self.metadata.topics[t].partitions))
                for t in (self.metadata.topics if topics is None else topics) if t in self.metadata.topics}

    async def _allocate_producer_id(self) -> int:
        records, producer_id = self.metadata.handle_allocate_producer_id()
        self._apply(records)
        return producer_id

    async def _allocate_producer_ids(self) -> ProducerIdBlock:
        records, (first, count) = self.metadata.handle_allocate_producer_ids()
        self._apply(records)
        return ProducerIdBlock(first, count)

    async def _send_markers(self, markers) -> dict:
        """The transaction coordinator's markers, each to its hosted partition (a
        cluster's coordinator sends WriteTxnMarkers to the partition's leader),
        __consumer_offsets' to the group coordinator (as handlers.write_txn_markers)."""
        outcomes = {}
        for marker in markers:
            hosted = self.coordinator.shard if marker.topic == OFFSETS_TOPIC else \
                self.endpoints[(marker.topic, marker.partition)]
            complete = hosted.complete_transaction if marker.topic == OFFSETS_TOPIC else hosted.append_marker
            try:
                await complete(producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                               coordinator_epoch=marker.coordinator_epoch, commit=marker.commit)
                outcomes[(marker.topic, marker.partition)] = None
            except KafkaError as error:
                outcomes[(marker.topic, marker.partition)] = error
        return outcomes

    async def _tick_transactions(self):
        while True:
            await asyncio.sleep(0.1)
            await self.transactions.shard.tick()

    def _apply(self, records) -> None:
        for record in records:
            self.metadata.replay(record)
