"""Admin: topics, consumer groups and transactions, as kafka-topics.sh,
kafka-consumer-groups.sh and kafka-transactions.sh offer them (driver side).

Topic administration is a control-plane call to the controller; offset lookups
(ListOffsets to each leader) and group requests (to each group's coordinator)
go over the Kafka protocol. Group offsets are changed only while the group has
no members (Kafka's rule for --reset-offsets): the commit goes out without a member id, and the coordinator
refuses it (UNKNOWN_MEMBER_ID) if a member joined in between.

Leader elections and partition reassignments go over the wire to any broker,
which relays them to the controller (ElectLeaders, Alter/ListPartitionReassignments),
as Kafka's AdminClient sends them; so do users' SCRAM credentials
(Describe/AlterUserScramCredentials: the password is salted here, and only the
salted password leaves the process).

Transactions (Kafka's AdminClient): ListTransactions to every broker,
DescribeTransactions to each id's coordinator, DescribeProducers to each
partition's leader (or to one named broker, whose replica answers), and an
abort as a WriteTxnMarkers ABORT to the partition's leader, which needs
CLUSTER_ACTION (an operator's tool: the transaction's coordinator is not asked).
A partition that does not exist is refused before anything is sent
(UNKNOWN_TOPIC_OR_PARTITION), rather than retried until the timeout.

Invariant: no Ray import (DESIGN section 1). The control plane is handed in: an
object with `call(method, *args)` (the controller's answer), `call_each(method,
{key: args})`, `describe_replicas(replicas, timeout_s=)` and the cluster login
`login` (actors.controller_calls.ControllerCalls over Ray; spark_bridge's
cluster_access, whose reads use only the wire half).
Callers: rafka.cluster (`Cluster.admin()`), the CLI through it, spark_bridge.
"""

from __future__ import annotations

import itertools
import threading

from rafka.client.membership import CoordinatorClient
from rafka.client.metadata import MetadataCache
from rafka.protocol.network import ClientNetwork
from rafka.protocol.range_reads import RangeRead, read_range
from rafka.protocol.retry import ask_leader, ask_leader_once, retry_until, submit_to_leader
from rafka.core.acl import MATCH_EVERY_BINDING, AclBinding, AclBindingFilter
from rafka.core.isolation import IsolationLevel
from rafka.core.errors import (BrokerNotAvailable, GroupIdNotFound, KafkaError, NonEmptyGroup, OffsetOutOfRange,
                               ResourceNotFound, UnknownServerError, UnknownTopicOrPartition)
from rafka.core.producer_state import ActiveProducer
from rafka.core.replica import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from rafka.core.structs import TopicPartition
from rafka.core.scram import DEFAULT_ITERATIONS
from rafka.core.scram_admin import upsertion_refusal
from rafka.core.transaction_shard import TransactionListing, TxnMarker
from rafka.protocol import (acl_requests, config_requests, feature_requests, quota_requests, admin_requests,
                            cluster_requests, fetching, group_requests, scram_requests, txn_admin_requests, txn_markers)
from rafka.protocol.network import coordinator_channel
from rafka.protocol.txn_admin_requests import DescribedTransaction
from rafka.protocol.tls import cluster_client_context, node_tls_settings

INACTIVE_GROUP_STATES = ("Empty", "Dead")

_network_lock = threading.Lock()
_networks: dict[tuple, ClientNetwork] = {}


def admin_network(login) -> ClientNetwork:
    """The process's one network for admin requests (offset lookups, group
    requests). Shared by every Admin: admins are made freely (`cluster.admin()`,
    each CLI command, Spark's driver) and have no close, so one loop thread serves
    them all, as one AdminClient's NetworkClient would. It logs in with `login`
    (the cluster credential's coroutine function, handed in), over TLS where the
    node's settings say so: one network per TLS setting (a test process changes it
    between clusters) and login."""
    key = (node_tls_settings(), login)
    with _network_lock:
        network = _networks.get(key)
        if network is None:
            network = _networks[key] = ClientNetwork(client_id="rafka-admin", sasl=login,
                                                     tls=cluster_client_context())
        return network


class Admin:
    """`controller`: the control plane, handed in (see the module's docstring: topic
    administration is a control-plane call); `bootstrap_servers`: where the Kafka
    requests start (default: the controller's listener, asked of it when first
    needed and again after it failed to answer: client.metadata)."""

    def __init__(self, controller, *, bootstrap_servers=None, default_api_timeout_ms: int = 60_000,
                 retry_backoff_ms: int = 100) -> None:
        self._controller = controller
        self._network = admin_network(controller.login)
        if bootstrap_servers is None:
            bootstrap_servers = lambda: controller.call("bootstrap_address")   # noqa: E731
        self._metadata = MetadataCache(bootstrap_servers, self._network, max_wait_ms=default_api_timeout_ms,
                                       retry_backoff_ms=retry_backoff_ms)
        self.default_api_timeout_s = default_api_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000

    def create_topic(self, name: str, *, partitions: int = 1, replication_factor: int = 1,
                     config: dict | None = None) -> dict:
        return self._controller.call("create_topic", name, partitions, replication_factor, config)

    def create_partitions(self, name: str, count: int) -> dict:
        """Grow `name` to `count` partitions (Kafka's AdminClient.createPartitions)."""
        return self._controller.call("add_partitions", name, count)

    def delete_topic(self, name: str) -> None:
        self._controller.call("delete_topic", name)

    def list_topics(self) -> list[str]:
        return self._controller.call("list_topics")

    # --- users' SCRAM credentials (kafka-configs.sh --entity-type users), over the wire ---

    def upsert_user(self, name: str, password: str, *, mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512"),
                    iterations: int = DEFAULT_ITERATIONS) -> None:
        """Set a user's SCRAM credentials (AlterUserScramCredentials upsertions):
        salted here, so the password goes no further than this process. Each
        mechanism and the iterations are checked before anything is sent (a
        refusal changes nothing); then one request per mechanism: Kafka's
        controller takes one alteration per user per request."""
        for mechanism in mechanisms:
            refusal = upsertion_refusal(mechanism, iterations)
            if refusal is not None:
                raise refusal
        for mechanism in mechanisms:
            self._alter_user(name, upsertions=[(name, mechanism, password, iterations)])

    def delete_user(self, name: str, mechanisms=None) -> None:
        """Remove the user's credentials for `mechanisms` (default: all it has);
        ResourceNotFound, and nothing removed, if it has none or lacks one named."""
        described = self._describe_users([name]).get(name, ResourceNotFound(f"no answer for user {name!r}"))
        if isinstance(described, KafkaError):
            raise described
        held = [mechanism for mechanism, _ in described]
        wanted = held if mechanisms is None else list(dict.fromkeys(mechanisms))
        missing = [mechanism for mechanism in wanted if mechanism not in held]
        if missing:
            raise ResourceNotFound(f"Attempt to delete a user credential that does not exist: {name!r} {missing}")
        for mechanism in wanted:
            self._alter_user(name, deletions=[(name, mechanism)])

    def list_users(self) -> dict[str, list[str]]:
        """{user: [mechanisms]} (kafka-configs --describe --entity-type users)."""
        return {user: [mechanism for mechanism, _ in infos]
                for user, infos in self._describe_users(None).items() if not isinstance(infos, KafkaError)}

    def _describe_users(self, users: list[str] | None) -> dict:
        return self._metadata.ask_any_node(scram_requests.describe_request(users), scram_requests.describe_answer,
                                           what="describe user SCRAM credentials")

    def _alter_user(self, name: str, **alterations) -> None:
        answer = self._metadata.ask_any_node(scram_requests.alter_request(**alterations), scram_requests.alter_answer,
                                             what="alter user SCRAM credentials")
        if name not in answer:   # as Kafka's AdminClient fails the user's future
            raise UnknownServerError(f"the AlterUserScramCredentials answer has no result for user {name!r}")
        if answer[name] is not None:
            raise answer[name]

    def describe_topics(self, names: list[str] | None = None, *, timeout_s: float = 5.0) -> dict[str, dict]:
        """Per partition: leader (replica index and node), leader epoch, replicas, ISR,
        log start offset, HW, and each live replica's LEO (None when unreachable)."""
        snapshot = self._topics_snapshot(names)
        answers = self._controller.describe_replicas(
            {(name, p["partition"], r): p["actors"].get(r) for name, topic in snapshot.items()
             for p in topic["partitions"] for r in p["replicas"]}, timeout_s=timeout_s)
        for name, topic in snapshot.items():
            for p in topic["partitions"]:
                states = {r: answers.get((name, p["partition"], r)) for r in p["replicas"]}
                leader_state = states.get(p["leader"])
                p["leader_node"] = leader_state["node_id"] if leader_state else None
                p["log_start_offset"] = leader_state["log_start_offset"] if leader_state else None
                p["high_watermark"] = leader_state["high_watermark"] if leader_state else None
                p["log_end_offsets"] = {r: (s["log_end_offset"] if s else None) for r, s in states.items()}
                p["replica_nodes"] = {r: (s["node_id"] if s else None) for r, s in states.items()}
        return snapshot

    def replica_brokers(self, names: list[str] | None = None) -> dict[TopicPartition, list[int]]:
        """Each partition's replicas as broker ids, of the topics `names` (None: every
        topic, the internal ones too), from the controller's metadata."""
        return {TopicPartition(name, p["partition"]): list(p["brokers"])
                for name, topic in self._topics_snapshot(names).items() for p in topic["partitions"]}

    def _topics_snapshot(self, names: list[str] | None) -> dict[str, dict]:
        """The controller's metadata of the topics `names` (None: all);
        UNKNOWN_TOPIC_OR_PARTITION naming the first it does not have."""
        snapshot = self._controller.call("metadata_snapshot")["topics"]
        if names is None:
            return snapshot
        missing = [n for n in names if n not in snapshot]
        if missing:
            raise UnknownTopicOrPartition(f"Topic '{missing[0]}' does not exist.")
        return {n: snapshot[n] for n in names}

    # --- offsets of partitions ------------------------------------------------------------

    def list_offsets(self, partitions, timestamp_ms: int, *,
                     isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
                     ) -> dict[TopicPartition, tuple[int, int] | None]:
        """Kafka's ListOffsets: EARLIEST_TIMESTAMP (-2) -> log start, LATEST_TIMESTAMP
        (-1) -> HW (read_committed: the LSO), else the first (offset, timestamp) at or
        after the time, below that end. Every leader is asked at once, on the wire; a
        partition whose answer failed is asked again, with retries, after the
        metadata is refreshed."""
        tps = [TopicPartition(*tp) for tp in partitions]

        def request_for(tp: TopicPartition):
            return lambda leader_epoch: fetching.list_offset_request(
                topic=tp.topic, partition=tp.partition, replica_id=fetching.CONSUMER_REPLICA_ID,
                leader_epoch=leader_epoch, timestamp_ms=timestamp_ms, isolation_level=isolation_level)

        def read(tp: TopicPartition):
            return lambda response: fetching.list_offset_answer(response, topic=tp.topic, partition=tp.partition)
        return self._ask_each_leader(tps, request_for, read)

    def _ask_each_leader(self, tps: list[TopicPartition], request_for, read) -> dict:
        """{tp: read(tp)(answer)} of `request_for(tp)(leader_epoch)` sent to each
        partition's leader, every leader asked at once; a partition whose answer
        failed is asked again, with retries, after the metadata is refreshed (a
        final error raised)."""
        found = {}
        asked = {}
        for tp in tps:
            try:
                asked[tp] = submit_to_leader(self._metadata, self._network, tp.topic, tp.partition, request_for(tp))
            except Exception:   # no leader known: the retrying path below
                pass
        for tp in tps:
            try:
                found[tp] = read(tp)(asked[tp].result(timeout=self.default_api_timeout_s))
            except Exception:
                self._metadata.invalidate(tp.topic)
                found[tp] = ask_leader(self._metadata, self._network, tp.topic, tp.partition, request_for(tp),
                                       read(tp), timeout_s=self.default_api_timeout_s,
                                       retry_backoff_s=self.retry_backoff_s)
        return found

    def beginning_offsets(self, partitions) -> dict[TopicPartition, int]:
        return {tp: found[0] for tp, found in self.list_offsets(partitions, EARLIEST_TIMESTAMP).items()}

    def end_offsets(self, partitions, *, isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
                    ) -> dict[TopicPartition, int]:
        """The HW of each partition (what Kafka's tools call LOG-END-OFFSET for a
        consumer); read_committed: its last stable offset."""
        return {tp: found[0] for tp, found in
                self.list_offsets(partitions, LATEST_TIMESTAMP, isolation_level=isolation_level).items()}

    def record_timestamps(self, offsets, *, max_bytes: int = 65_536) -> dict[TopicPartition, int | None]:
        """{tp: offset} -> the timestamp (ms) of the first record at or after each
        offset below the HW: a read from each offset (protocol.range_reads), every
        leader's first fetch sent at once (what `rafka lag` reads the oldest
        unconsumed record's age from). An offset below the log start reads the log
        start's record; None where no record is there or the answer failed (the
        caller prints "-": one look, no retries)."""
        def read_from(tp: TopicPartition, offset: int) -> RangeRead:
            return RangeRead(topic=tp.topic, partition=tp.partition, start_offset=offset, end_offset=None,
                             max_bytes=max_bytes)

        def send_first(cursor: RangeRead):
            return submit_to_leader(self._metadata, self._network, cursor.topic, cursor.partition, cursor.request_for)

        def first_timestamp(cursor: RangeRead, first_sent) -> int | None:
            """The first record's time: in the first answer, else (compaction left
            no record at or after the offset in its batch) in the reads after it."""
            def ask(request_for, read):
                return ask_leader_once(self._metadata, self._network, cursor.topic, cursor.partition, request_for,
                                       read, timeout_s=self.default_api_timeout_s)
            first = cursor.read(first_sent.result(timeout=self.default_api_timeout_s))
            chunks = itertools.chain([first] if first is not None else [], read_range(ask, cursor))
            return next((r.timestamp_ms for chunk in chunks for r in chunk.in_range()), None)
        wanted = {TopicPartition(*tp): offset for tp, offset in offsets.items()}
        cursors, sent, found = {}, {}, {}
        for tp, offset in wanted.items():
            try:
                cursors[tp] = read_from(tp, offset)
                sent[tp] = send_first(cursors[tp])
            except Exception:
                found[tp] = None
        for tp, first_sent in sent.items():
            try:
                found[tp] = first_timestamp(cursors[tp], first_sent)
            except OffsetOutOfRange:   # below the log start (retention): its oldest record is the log start's
                try:
                    start = self.beginning_offsets([tp])[tp]
                    cursor = read_from(tp, start)
                    found[tp] = first_timestamp(cursor, send_first(cursor)) if start > wanted[tp] else None
                except Exception:
                    found[tp] = None
            except Exception:
                self._metadata.invalidate(tp.topic)
                found[tp] = None
        return found

    def topic_partitions(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in range(self._metadata.partition_count(topic))]

    # --- cluster, log dirs, records (kafka-log-dirs.sh, kafka-delete-records.sh) ----------

    def describe_cluster(self, *, include_authorized_operations: bool = False) -> dict:
        """{cluster_id, controller_id, brokers: [{node_id, host, port, rack}],
        authorized_operations} (DescribeCluster, from any node's image)."""
        return self._metadata.ask_any_node(
            admin_requests.describe_cluster_request(include_authorized_operations=include_authorized_operations),
            admin_requests.describe_cluster_answer, what="describe the cluster")

    def describe_log_dirs(self, partitions: dict[str, list[int]] | None = None,
                          brokers: list[int] | None = None) -> dict[int, list[dict]]:
        """Per broker (all, or those named), its log dirs with the size and offset
        lag of each partition there (DescribeLogDirs to each broker, as Kafka's
        AdminClient); `partitions` {topic: [partition]} narrows it (None: all)."""
        asked = {node_id: self._network.submit(address, admin_requests.describe_log_dirs_request(partitions))
                 for node_id, address in self._broker_addresses().items() if brokers is None or node_id in brokers}
        return {node_id: admin_requests.describe_log_dirs_answer(answer.result(timeout=self.default_api_timeout_s))
                for node_id, answer in asked.items()}

    def _broker_addresses(self) -> dict[int, tuple[str, int]]:
        """{broker id: (host, port)} of the live brokers, by id (DescribeCluster)."""
        return {b["node_id"]: (b["host"], b["port"]) for b in sorted(self.describe_cluster()["brokers"],
                                                                     key=lambda b: b["node_id"])}

    def delete_records(self, offsets: dict, *, timeout_ms: int = 30_000) -> dict[TopicPartition, int | KafkaError]:
        """{tp: offset} (-1: the HW): each partition's log start moved there on its
        leader, answered once the ISR has it (DeleteRecords). Per partition the new
        low watermark, or the error that refused it (retriable ones retried)."""
        done: dict[TopicPartition, int | KafkaError] = {}
        for tp, offset in offsets.items():
            tp = TopicPartition(*tp)
            try:
                done[tp] = ask_leader(
                    self._metadata, self._network, tp.topic, tp.partition,
                    lambda leader_epoch, tp=tp, offset=offset: admin_requests.delete_records_request(
                        topic=tp.topic, partition=tp.partition, offset=offset, timeout_ms=timeout_ms),
                    lambda response, tp=tp: admin_requests.delete_records_answer(
                        response, topic=tp.topic, partition=tp.partition),
                    timeout_s=max(self.default_api_timeout_s, timeout_ms / 1000), retry_backoff_s=self.retry_backoff_s)
            except KafkaError as error:
                done[tp] = error
        return done

    # --- leader elections and reassignments (kafka-leader-election.sh,
    #     kafka-reassign-partitions.sh), over the wire: any broker relays them to the controller

    def elect_leaders(self, election_type: int, partitions=None, *, timeout_ms: int = 30_000
                      ) -> dict[TopicPartition, KafkaError | None]:
        """ElectLeaders (core.metadata's PREFERRED_ELECTION or UNCLEAN_ELECTION) for
        `partitions` [(topic, partition)] (None: every partition; those that needed
        no election are then left out): per partition None (elected: its new
        leader serves when this returns) or why not (ELECTION_NOT_NEEDED,
        PREFERRED_LEADER_NOT_AVAILABLE, ...), as Kafka's electLeaders."""
        named = None if partitions is None else [tuple(tp) for tp in partitions]
        return self._metadata.ask_any_node(
            admin_requests.elect_leaders_request(election_type, named, timeout_ms=timeout_ms),
            admin_requests.elect_leaders_answer, what="elect leaders")

    def alter_partition_reassignments(self, reassignments: dict, *, timeout_ms: int = 30_000
                                      ) -> dict[TopicPartition, KafkaError | None]:
        """{(topic, partition): [broker ids], or None to cancel}: start moving each
        partition's replicas there (AlterPartitionReassignments: the new replicas
        catch up, then the old ones go). Per partition None (started, or
        cancelled) or why not (INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS, ...)."""
        if not reassignments:
            return {}
        moves = {tuple(tp): None if brokers is None else list(brokers) for tp, brokers in reassignments.items()}
        return self._metadata.ask_any_node(admin_requests.alter_reassignments_request(moves, timeout_ms=timeout_ms),
                                           admin_requests.alter_reassignments_answer, what="reassign partitions")

    def cancel_partition_reassignments(self, partitions) -> dict[TopicPartition, KafkaError | None]:
        """Stop moving these partitions: the replicas being added are dropped."""
        return self.alter_partition_reassignments({tuple(tp): None for tp in partitions})

    def partition_replicas(self, topics: list[str]) -> dict[TopicPartition, list[int]]:
        """Each partition's replicas as a broker's Metadata names them (broker ids,
        the preferred leader first), of `topics`; an unknown one raised."""
        answer = self._metadata.ask_any_node(cluster_requests.metadata_request(topics),
                                             cluster_requests.metadata_answer, what=f"the metadata of {topics}")
        for topic in topics:
            if topic in answer.topic_errors:
                raise answer.topic_errors[topic]
        return {TopicPartition(name, p.partition): list(p.replica_nodes)
                for name, topic in answer.topics.items() for p in topic.partitions}

    def list_partition_reassignments(self, partitions=None, *, timeout_ms: int = 30_000
                                     ) -> dict[TopicPartition, dict[str, list[int]]]:
        """The partitions moving (of `partitions` [(topic, partition)]; None: all):
        {tp: {"replicas", "adding", "removing"}} as broker ids (ListPartitionReassignments)."""
        named = None if partitions is None else [tuple(tp) for tp in partitions]
        return self._metadata.ask_any_node(admin_requests.list_reassignments_request(named, timeout_ms=timeout_ms),
                                           admin_requests.list_reassignments_answer,
                                           what="list partition reassignments")

    # --- ACLs (kafka-acls.sh), over the wire -----------------------------------------------

    def create_acls(self, bindings: list[AclBinding]) -> list[KafkaError | None]:
        """CreateAcls to any broker (it relays to the controller, which commits and
        pushes the bindings to every node before it answers): per binding, None or
        why not."""
        if not bindings:
            return []
        return self._metadata.ask_any_node(acl_requests.create_acls_request(list(bindings)),
                                           acl_requests.create_acls_answer, what="create ACLs")

    def describe_acls(self, acl_filter: AclBindingFilter = MATCH_EVERY_BINDING) -> list[AclBinding]:
        """The bindings the filter matches (DescribeAcls, from a node's image)."""
        return self._metadata.ask_any_node(acl_requests.describe_acls_request(acl_filter),
                                           acl_requests.describe_acls_answer, what="describe ACLs")

    def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding] | KafkaError]:
        """Per filter, the bindings it removed, or why not."""
        if not filters:
            return []
        return self._metadata.ask_any_node(acl_requests.delete_acls_request(list(filters)),
                                           acl_requests.delete_acls_answer, what="delete ACLs")

    # --- client quotas (kafka-configs.sh --entity-type users|clients), over the wire -------------

    def describe_client_quotas(self, components: list[tuple[str, str | None]], *, strict: bool = False,
                               any_name: frozenset[str] = frozenset()) -> list[tuple[list, dict[str, float]]]:
        """The quota entities the filter matches, each with its values
        (DescribeClientQuotas, from a node's image): `components` (entity type,
        name; None: the default), `any_name`: types matched by any name."""
        return self._metadata.ask_any_node(quota_requests.describe_request(components, strict=strict,
                                                                           any_name=any_name),
                                           quota_requests.describe_answer, what="describe client quotas")

    def alter_client_quotas(self, entries: list[tuple[list, list[tuple[str, float | None]]]], *,
                            validate_only: bool = False) -> list[KafkaError | None]:
        """AlterClientQuotas to any broker (it relays to the controller, which
        commits and pushes the quotas to every broker before it answers): per
        entry (entity, ops: (key, value; None removes it)), None or why not."""
        if not entries:
            return []
        return self._metadata.ask_any_node(quota_requests.alter_request(entries, validate_only=validate_only),
                                           quota_requests.alter_answer, what="alter client quotas")

    # --- topics', brokers' and broker loggers' configs (kafka-configs.sh), over the wire --------

    def describe_configs(self, resources: list[config_requests.Resource], names: list[str] | None = None
                         ) -> dict[config_requests.Resource, list[config_requests.DescribedConfig] | KafkaError]:
        """Per (resource type, name), its configs (all, or `names`) or why not
        (DescribeConfigs): a topic's from any broker, a broker's and its loggers'
        from that broker, as Kafka's AdminClient asks."""
        return self._ask_by_resource(resources, lambda part: config_requests.describe_request(part, names),
                                     config_requests.describe_answer, what="describe configs")

    def incremental_alter_configs(self, changes: dict[config_requests.Resource, list], *,
                                  validate_only: bool = False) -> dict[config_requests.Resource, KafkaError | None]:
        """Per (resource type, name), None or why not (IncrementalAlterConfigs: ops
        of core.config SET, DELETE, APPEND, SUBTRACT): topics' through any broker
        (to the controller, which pushes them to the topic's replicas before it
        answers), a broker's loggers on that broker."""
        return self._ask_by_resource(list(changes), lambda part: config_requests.alter_request(
            {r: changes[r] for r in part}, validate_only=validate_only), config_requests.alter_answer,
            what="alter configs")

    def _ask_by_resource(self, resources, request_for, read, *, what: str) -> dict:
        """`read(answer)` merged over one request per node the resources go to: a
        BROKER or BROKER_LOGGER resource named by a broker id to that broker (one
        no live broker has: BrokerNotAvailable), the rest to any broker."""
        by_broker: dict[int | None, list] = {}
        for kind, name in dict.fromkeys(resources):
            named = kind != config_requests.TOPIC and name.isdigit()
            by_broker.setdefault(int(name) if named else None, []).append((kind, name))
        addresses = self._broker_addresses() if set(by_broker) - {None} else {}
        found: dict = {}
        for broker, part in by_broker.items():
            if broker is None:
                found.update(self._metadata.ask_any_node(request_for(part), read, what=what))
            elif broker not in addresses:
                found.update({r: BrokerNotAvailable(f"broker {broker} is not live") for r in part})
            else:
                found.update(retry_until(lambda remaining_s, address=addresses[broker], part=part: read(
                    self._network.submit(address, request_for(part)).result(remaining_s)),
                    timeout_s=self.default_api_timeout_s, retry_backoff_s=self.retry_backoff_s, what=what))
        return found

    # --- feature flags (kafka-features.sh), over the wire -------------------------------------

    def describe_features(self) -> feature_requests.FeatureMetadata:
        """The features a broker's software supports and the levels the cluster has
        finalized, with their epoch (ApiVersions v4 to any broker, as Kafka's
        describeFeatures)."""
        return self._metadata.ask_any_node(feature_requests.describe_request(), feature_requests.describe_answer,
                                           what="describe features")

    def update_features(self, updates: dict[str, tuple[int, int]], *, validate_only: bool = False) -> None:
        """UpdateFeatures to any broker (it relays to the controller, which commits
        and pushes the levels to every node before it answers): by feature, (level,
        upgrade type: core.features.UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE). All
        are set, or none: InvalidUpdateVersion names the first that cannot be."""
        self._metadata.ask_any_node(feature_requests.update_request(updates, validate_only=validate_only),
                                    feature_requests.update_answer, what="update features")

    # --- transactions (kafka-transactions.sh), over the wire ---------------------------------

    def list_transactions(self, *, states=(), producer_ids=(), duration_ms: int = -1
                          ) -> dict[int, list[TransactionListing]]:
        """By broker id, the transactions its coordinators hold (ListTransactions to
        every broker, as Kafka's listTransactions().allByBrokerId()): empty filters
        match all; `duration_ms` >= 0 keeps those running longer than that."""
        request = txn_admin_requests.list_transactions_request(states=states, producer_ids=producer_ids,
                                                               duration_ms=duration_ms)

        def ask_all(remaining_s: float) -> dict[int, list[TransactionListing]]:
            asked = {broker: self._network.submit(address, request)
                     for broker, address in self._broker_addresses().items()}
            return {broker: txn_admin_requests.list_transactions_answer(answer.result(remaining_s))
                    for broker, answer in asked.items()}
        return retry_until(ask_all, timeout_s=self.default_api_timeout_s, retry_backoff_s=self.retry_backoff_s,
                           what="list transactions")

    def describe_transactions(self, transactional_ids) -> dict[str, DescribedTransaction | KafkaError]:
        """Per transactional id, its coordinator's description (with the broker it
        runs on), or the error that refused it (TRANSACTIONAL_ID_NOT_FOUND for an
        id no coordinator holds). Each id's coordinator is found with
        FindCoordinator and found afresh after a retriable error."""
        broker_of = {address: broker for broker, address in self._broker_addresses().items()}
        found: dict[str, DescribedTransaction | KafkaError] = {}
        for transactional_id in dict.fromkeys(transactional_ids):
            def attempt(remaining_s: float, transactional_id=transactional_id) -> DescribedTransaction:
                address = self._metadata.transaction_coordinator_address(transactional_id)
                answer = self._network.submit(coordinator_channel(address), txn_admin_requests
                                              .describe_transactions_request([transactional_id]))
                return txn_admin_requests.describe_transactions_answer(
                    answer.result(remaining_s), transactional_id, coordinator_id=broker_of.get(address, -1))
            try:
                found[transactional_id] = retry_until(
                    attempt, timeout_s=self.default_api_timeout_s, retry_backoff_s=self.retry_backoff_s,
                    what=f"describe transactional id {transactional_id!r}",
                    on_retry=lambda _, t=transactional_id: self._metadata.invalidate_transaction_coordinator(t))
            except KafkaError as error:
                found[transactional_id] = error
        return found

    def _existing(self, partitions) -> list[TopicPartition]:
        """`partitions` as TopicPartitions, once each is known to exist (else
        UNKNOWN_TOPIC_OR_PARTITION, final here: nothing is retried for it)."""
        tps = [TopicPartition(*tp) for tp in partitions]
        for tp in tps:
            if not 0 <= tp.partition < self._metadata.partition_count(tp.topic):
                raise UnknownTopicOrPartition(f"Partition {tp.topic}-{tp.partition} does not exist.")
        return tps

    def describe_producers(self, partitions, *, broker_id: int | None = None
                           ) -> dict[TopicPartition, list[ActiveProducer]]:
        """Each partition's active producers, from its leader (DescribeProducers),
        or with `broker_id` from that broker's replica, leader or follower
        (kafka-transactions.sh describe-producers --broker-id). A partition's
        error is raised (the first, in the order asked)."""
        tps = self._existing(partitions)
        if broker_id is None:
            def read(tp: TopicPartition):
                return lambda response: _raised_or_value(txn_admin_requests.describe_producers_answer(
                    response, [(tp.topic, tp.partition)])[(tp.topic, tp.partition)])
            return self._ask_each_leader(tps, lambda tp: lambda leader_epoch: txn_admin_requests
                                         .describe_producers_request([(tp.topic, tp.partition)]), read)
        address = self._broker_addresses().get(broker_id)
        if address is None:
            raise BrokerNotAvailable(f"broker {broker_id} is not a live broker of this cluster")
        keys = [(tp.topic, tp.partition) for tp in tps]
        answer = self._network.submit(address, txn_admin_requests.describe_producers_request(keys))
        found = txn_admin_requests.describe_producers_answer(answer.result(self.default_api_timeout_s), keys)
        return {tp: _raised_or_value(found[key]) for tp, key in zip(tps, keys)}

    def abort_transaction(self, topic: str, partition: int, *, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int) -> None:
        """Write an ABORT marker for the producer's open transaction on the partition
        (WriteTxnMarkers to its leader, as Kafka's abortTransaction): the LSO moves
        past it once replicated. INVALID_PRODUCER_EPOCH for an epoch older than the
        producer's, TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older
        than its last marker's, CLUSTER_AUTHORIZATION_FAILED without CLUSTER_ACTION;
        a moved leader is found again and asked again."""
        (tp,) = self._existing([(topic, partition)])
        marker = TxnMarker(tp.topic, tp.partition, producer_id, producer_epoch, coordinator_epoch, commit=False)

        def read(response) -> None:
            _raised_or_value(txn_markers.write_txn_markers_answers(response, [marker])[(tp.topic, tp.partition)])
        ask_leader(self._metadata, self._network, tp.topic, tp.partition,
                   lambda leader_epoch: txn_markers.write_txn_markers_request([marker]), read,
                   timeout_s=self.default_api_timeout_s, retry_backoff_s=self.retry_backoff_s)

    # --- consumer groups ------------------------------------------------------------------

    def _group(self, group_id: str) -> CoordinatorClient:
        return CoordinatorClient(self._metadata, self._network, group_id, retry_backoff_s=self.retry_backoff_s,
                                 default_timeout_s=self.default_api_timeout_s)

    def list_consumer_groups(self) -> list[dict]:
        """[{group, state}] from every node (ListGroups to each, as Kafka's
        AdminClient: a node answers for the groups it coordinates)."""
        network = self._network

        def ask_all(remaining_s: float) -> list[dict]:
            asked = [network.submit(address, group_requests.list_groups_request())
                     for address in self._metadata.node_addresses()]
            return [g for answer in asked for g in group_requests.list_groups_answer(answer.result(remaining_s))]
        groups = retry_until(ask_all, timeout_s=self.default_api_timeout_s, retry_backoff_s=self.retry_backoff_s,
                             what="list groups")
        return sorted(groups, key=lambda g: g["group"])

    def describe_consumer_group(self, group_id: str) -> dict:
        """The coordinator's view: state ("Dead" for a group that does not exist),
        assignor, members with client id, host and assignment (DescribeGroups, as
        Kafka's AdminClient.describeConsumerGroups; a group of the new protocol,
        KIP-848, which DescribeGroups answers Dead, by ConsumerGroupDescribe)."""
        coordinator = self._group(group_id)
        described = coordinator.call("describe_group")
        if described["state"] != "Dead":
            return described
        try:
            return coordinator.call("consumer_group_describe")
        except GroupIdNotFound:
            return described

    def list_consumer_group_offsets(self, group_id: str, partitions=None, *,
                                    require_stable: bool = False) -> dict[TopicPartition, int]:
        """The group's committed offsets (of `partitions`, default every committed
        one). `require_stable` (Kafka's ListConsumerGroupOffsetsOptions.requireStable,
        KIP-447): a partition with a transaction's offset pending is waited for
        (UNSTABLE_OFFSET_COMMIT retried) until that transaction ends."""
        asked = None if partitions is None else [tuple(tp) for tp in partitions]
        fetched = self._group(group_id).call("fetch_offsets", asked, require_stable=require_stable)
        return {TopicPartition(*tp): value[0] for tp, value in sorted(fetched.items()) if value is not None}

    def consumer_group_lag(self, group_id: str) -> list[dict]:
        """kafka-consumer-groups --describe: one row per partition the group has a
        committed offset for or a member owns; LAG = LOG-END-OFFSET (the HW) minus
        CURRENT-OFFSET, None ("-") where there is no committed offset."""
        description = self.describe_consumer_group(group_id)
        committed = self.list_consumer_group_offsets(group_id)
        owner = {}
        for member_id, member in description["members"].items():
            for tp in member["assignment"]:
                owner[TopicPartition(*tp)] = (member_id, member["host"], member["client_id"])
        partitions = sorted(set(committed) | set(owner))
        ends = self.end_offsets(partitions)
        rows = []
        for tp in partitions:
            current = committed.get(tp)
            member_id, host, client_id = owner.get(tp, (None, None, None))
            rows.append({"group": group_id, "topic": tp.topic, "partition": tp.partition,
                         "current_offset": current, "log_end_offset": ends[tp],
                         "lag": None if current is None else max(0, ends[tp] - current),
                         "consumer_id": member_id, "host": host, "client_id": client_id})
        return rows

    def alter_consumer_group_offsets(self, group_id: str, offsets: dict) -> None:
        """Set committed offsets ({tp: offset}) of a group with no members."""
        state = self.describe_consumer_group(group_id)["state"]
        if state not in INACTIVE_GROUP_STATES:
            raise NonEmptyGroup(f"Assignments can only be reset if the group '{group_id}' is inactive, "
                                f"but the current state is {state}.")
        request = {tuple(tp): (offset, -1, "") for tp, offset in offsets.items()}
        response = self._group(group_id).call("commit_offsets", request)
        for error in response.values():
            if error is not None:
                raise error

    def delete_consumer_group(self, group_id: str) -> None:
        """Only a group without members (NON_EMPTY_GROUP), only a known one
        (GROUP_ID_NOT_FOUND)."""
        self._group(group_id).call("delete_group")


def _raised_or_value(found):
    """A per-item answer: its KafkaError raised, else the value."""
    if isinstance(found, KafkaError):
        raise found
    return found
