"""The one dispatch table every node serves: every API rafka implements, on every
node, as every Kafka broker advertises every API. A node answers for what it
hosts and with Kafka's redirecting errors for the rest, so clients that take one
node's ApiVersions for the whole cluster (kafka-python does) work:
  * a partition not hosted here: NOT_LEADER_OR_FOLLOWER (UNKNOWN_TOPIC_OR_PARTITION
    when the image does not know it); DescribeProducers is answered by any replica
    hosted here, leader or follower, as Kafka's;
  * a group or transactional id not coordinated here: NOT_COORDINATOR;
  * WriteTxnMarkers for a partition not led here: NOT_LEADER_OR_FOLLOWER (for a
    `__consumer_offsets` partition whose group coordinator is here: through it);
  * DescribeCluster on every node from its image; DescribeLogDirs with the
    node's log dirs (a broker's edge: its broker's; any other node: none);
  * topic administration anywhere but the controller: NOT_CONTROLLER (the client
    sends it to Metadata's controller_id; Kafka's brokers forward it instead,
    KIP-590, which rafka's nodes do not need to);
  * ACLs: DescribeAcls on every node from its image; CreateAcls and DeleteAcls
    on the controller's node (its topic_admin_host), NOT_CONTROLLER elsewhere
    (a broker's edge relays them to the controller; `acl_admin` stands in for
    the controller where a test node keeps the metadata itself);
  * client quotas: DescribeClientQuotas on every node from its image;
    AlterClientQuotas as CreateAcls (`quota_admin` stands in for the controller
    in tests); users' SCRAM credentials alike: DescribeUserScramCredentials on
    every node from its image, AlterUserScramCredentials as AlterClientQuotas;
  * leader elections and partition reassignments (ElectLeaders,
    Alter/ListPartitionReassignments): as CreateAcls, on the controller's node
    (`elections_admin` stands in for the controller in tests);
  * config changes (AlterConfigs, IncrementalAlterConfigs) on every node: clients
    send them to any broker, so a node that is not the controller forwards them
    (`alter_topic_config`, given by the actor); the controller's node calls the
    controller (its topic_admin_host).
Callers: actors.serving (each actor's node) and the tests' in-process node.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from rafka.core.cluster_image import ClusterImage
from rafka.core.errors import NotController
from rafka.protocol import sasl
from rafka.protocol.dispatch import DispatchTable
from rafka.protocol.handlers import (acls, add_offsets_to_txn, add_partitions_to_txn, alter_configs,
                                     alter_replica_log_dirs, api_versions,
                                     client_quotas,
                                     consumer_group, delete_records, describe_cluster, describe_configs, describe_log_dirs,
                                     describe_quorum, list_config_resources,
                                     describe_topic_partitions,
                                     describe_producers, describe_transactions, end_txn, envelope, fetch,
                                     find_coordinator,
                                     group_admin, group_membership, group_offsets, init_producer_id, list_offsets,
                                     list_transactions, metadata, offset_for_leader_epoch, partition_admin, produce,
                                     scram_credentials, topic_admin, txn_offset_commit, update_features,
                                     write_txn_markers)
from rafka.protocol.handlers.txn_coordinator import NoTransactions


class _NoPartitions:
    def __init__(self, image: Callable[[], ClusterImage]) -> None:
        self.image = image

    def endpoint(self, topic: str, partition: int):
        return None


class _NoGroups:
    def coordinator_for(self, group_id: str):
        return None

    def offsets_partition_coordinator(self, partition: int):
        return None


@envelope.answering_every_admin_call("_refuse")
class _NotController:
    def __init__(self, image: Callable[[], ClusterImage]) -> None:
        self.cluster_image = image

    async def _refuse(self, *args, **kwargs):
        raise NotController("this node is not the controller: send cluster administration to the "
                            "controller Metadata names")


class UserAdmin(client_quotas.QuotaAdmin, scram_credentials.ScramAdmin, Protocol):
    """Where AlterClientQuotas and AlterUserScramCredentials go: both calls."""


def node_table(*, image: Callable[[], ClusterImage], allocate_producer_id: Callable[[], Awaitable[int]],
               partitions=None, groups=None, topic_admin_host=None, transactions=None,
               list_groups: Callable[[], Awaitable[list[dict]]] | None = None,
               alter_topic_config: alter_configs.AlterTopicConfig | None = None,
               acl_admin: acls.AclAdmin | None = None,
               elections_admin: partition_admin.PartitionAdmin | None = None,
               quota_admin: UserAdmin | None = None,
               feature_admin: update_features.FeatureAdmin | None = None,
               broker_loggers: alter_configs.BrokerLoggersHost | None = None,
               log_dirs: describe_log_dirs.LogDirs | None = None, envelopes: bool = False,
               quorum: Callable[[], describe_quorum.QuorumState] | object | None = None) -> DispatchTable:
    """`partitions`: a PartitionHost (its own image() answers lookups); `groups`:
    a GroupHost with the coordinator's calls; `transactions`: a TransactionHost
    (handlers.txn_coordinator) with the transaction coordinators hosted here
    (none: NOT_COORDINATOR); `topic_admin_host`: the controller;
    `alter_topic_config`: how a node that is not the controller reaches it (none:
    NOT_CONTROLLER, the controller's node uses its topic_admin_host);
    `acl_admin`: where CreateAcls / DeleteAcls go (default: topic_admin_host);
    `elections_admin`: where ElectLeaders and the partition reassignment APIs go
    (default: topic_admin_host);
    `quota_admin`: where AlterClientQuotas and AlterUserScramCredentials go
    (default: topic_admin_host);
    `feature_admin`: where UpdateFeatures goes (default: topic_admin_host);
    `broker_loggers`: the broker this node is, for its BROKER_LOGGER configs
    (none: the node is no broker);
    `log_dirs`: the node's log dirs for DescribeLogDirs and AlterReplicaLogDirs (a
    broker's; none: no log dir);
    `quorum`: the metadata log's quorum, for DescribeQuorum (the controller's node;
    a broker's: describe_quorum.CONTROLLER_UNREACHABLE; none: NOT_LEADER_OR_FOLLOWER);
    `envelopes`: the controller's node (or a test's stand-in for it): it takes
    what brokers relay to it in envelopes (KIP-590) and charges topic
    administration to the clients' controller_mutation_rate; no other node
    offers Envelope or charges that quota (a broker answering for an
    unreachable controller did no mutation)."""
    partitions = partitions or _NoPartitions(image)
    groups = groups or _NoGroups()
    transactions = transactions or NoTransactions()
    admin = topic_admin_host or _NotController(image)
    alter_topic_config = alter_topic_config or admin.alter_topic_config
    envelope_target = envelope.EnvelopeTarget() if envelopes else None
    return DispatchTable([
        api_versions.ROUTE, metadata.route(image), describe_topic_partitions.route(image),
        find_coordinator.route(image),
        describe_configs.route(image, broker_loggers.broker_id if broker_loggers else describe_configs.NO_BROKER),
        produce.route(partitions), fetch.route(partitions), list_offsets.route(partitions),
        offset_for_leader_epoch.route(partitions), delete_records.route(partitions),
        describe_producers.route(partitions),
        describe_cluster.route(image), describe_log_dirs.route(log_dirs),
        alter_replica_log_dirs.route(image, log_dirs), describe_quorum.route(quorum),
        list_config_resources.route(image), init_producer_id.route(allocate_producer_id, transactions),
        add_partitions_to_txn.route(transactions, image), add_offsets_to_txn.route(transactions),
        end_txn.route(transactions), describe_transactions.route(transactions), list_transactions.route(transactions),
        write_txn_markers.route(partitions, groups), txn_offset_commit.route(groups),
        group_admin.list_groups_route(list_groups), *group_admin.coordinator_routes(groups),
        *group_offsets.routes(groups), *group_membership.routes(groups), *consumer_group.routes(groups),
        *topic_admin.routes(admin, mutation_quotas=envelopes),
        *alter_configs.routes(alter_topic_config, broker_loggers), *acls.routes(image, acl_admin or admin),
        *partition_admin.routes(elections_admin or admin),
        *client_quotas.routes(image, quota_admin or admin), *scram_credentials.routes(image, quota_admin or admin),
        update_features.route(feature_admin or admin),
        *sasl.routes(), *([envelope.route(envelope_target)] if envelope_target else [])],
        image=image, envelope_target=envelope_target)
