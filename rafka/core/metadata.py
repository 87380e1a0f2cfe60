"""The controller's metadata: topics, partitions, leaders, ISRs, as a replayed log.

Every change is a record. Handlers validate a request against the current state
and return `(records, response)` without changing anything; `replay(record)`
applies one record. The controller writes the records to its metadata log, then
replays them; after a restart it replays the whole log and has the same state.
One path changes state, whether live or loading.

Invariants:
  a partition's leader is a member of its ISR, or -1 (offline: no live ISR
  member, and unclean election is off)
  the ISR is a non-empty subset of the replicas while the partition is online
  leader_epoch increases by one at every leader change; partition_epoch at every
  leader or ISR change (an AlterPartition request must name the current ones)
  replica ids are a partition's own small numbers (the actor name's replica
  index); `brokers` maps each to the broker id whose disk holds its log, fixed at
  creation (Kafka's rack-unaware assignment): a replica restarts on that broker
  only, so it reopens its own log
  a reassignment (Kafka's KIP-455) first adds the new replicas, which catch up
  from the leader; only once all of them are in the ISR are the removed ones
  dropped, so the ISR never shrinks below what it was for a move
  only an ISR member may lead; one that restarted leads only when no ISR member
  that kept running is available (it reopened its log, which holds every record
  below the HW, but may be behind the others). The one exception is an
  operator's unclean ElectLeaders (`elect_on_request`): a live replica outside
  the ISR may then lead an offline partition, alone in its ISR
  the preferred leader is a partition's first replica; a preferred ElectLeaders
  moves leadership there only if it is alive and in the ISR (`elect_on_request`)
  a user's SCRAM credential is kept salted (core.scram), never its password: the
  records, and every image built from them, hold no password (Kafka's
  UserScramCredentialRecord); user names beginning with "__" are rafka's own
  (the cluster credential, core.scram.CLUSTER_USER): AlterUserScramCredentials
  cannot add or delete them (core.scram_admin)
  each replica is held by one replica actor (a "shell", core.actor_names) and a
  shell holds at most one replica, ever: `replica_actor` records say which
  (committed with the records that create the replica, before the shell is told);
  the entry goes with its topic (`remove_topic`) or its replica (a `partition`
  record that no longer lists it); a shell's name is never given to another
  replica, so a node id never changes replicas
  once SASL is required (`require_sasl`) it stays required: no record turns it off
  ACL bindings are a set (core.acl): a binding created twice is kept once, and
  `acl_version` counts the ACL records replayed, so an image's `acls` say which
  set it holds; only valid bindings are recorded (core.acl.validate_new_binding),
  at most MAX_ACL_CHANGES_PER_REQUEST records per Create/DeleteAcls
  client quotas (core.client_quotas) hold only valid values and no empty entity;
  `client_quota` records are Kafka's ClientQuotaRecord (one key of one entity, set
  or removed), at most MAX_QUOTA_RECORDS_PER_REQUEST per AlterClientQuotas, and
  `client_quota_version` counts them, so an image's `client_quotas` say which
  configs they are
  a topic's config is its overrides only, every one valid together (TopicConfig),
  min.insync.replicas never above its replication factor; `topic_config` records
  replace the whole set (AlterConfigs and IncrementalAlterConfigs end there)
  finalized feature levels (core.features) start at its DEFAULT_LEVELS; a
  `feature_level` record (Kafka's FeatureLevelRecord) sets one, level 0 removes it
  (so a log ever compacted or snapshotted must keep a level-0 record: without
  one the feature reads as its default again)
Pure logic, no I/O. Caller: the controller actor.
"""

from __future__ import annotations

import base64
import dataclasses
import random
import re
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from rafka.core.acl import (MAX_ACL_CHANGES_PER_REQUEST, NO_ACLS, AclBinding, AclBindingFilter, Acls,
                            validate_new_binding)
from rafka.core import broker_loggers, features
from rafka.core.client_quotas import ClientQuotas, alteration_records, replayed
from rafka.core.config import SET, ConfigOp, TopicConfig, altered_overrides
from rafka.core.errors import (ElectionNotNeeded, EligibleLeadersNotAvailable, FencedLeaderEpoch, InvalidConfig,
                               InvalidPartitions, InvalidReplicaAssignment, InvalidReplicationFactor, InvalidRequest,
                               InvalidTopic, InvalidUpdateVersion, KafkaError, LeaderNotAvailable,
                               NoReassignmentInProgress, NotLeaderOrFollower, PreferredLeaderNotAvailable,
                               ReassignmentInProgress, TopicAlreadyExists, UnknownServerError, UnknownTopicOrPartition)
from rafka.core.replica_pool import MAX_POOL_SIZE_PER_BROKER
from rafka.core import scram_admin
from rafka.core.scram import CLUSTER_MECHANISM, CLUSTER_USER, ScramCredential, make_credential, matches

TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
NO_LEADER = -1
# Every partition is RF actor processes (~80 MB each): a typo of 10000 would hang
# the cluster placing them. Kafka has no such limit; rafka's actors need one.
MAX_PARTITIONS_PER_TOPIC = 1024
# A replica actor's placement group bundle holds 1/1000 of its broker's `rafka_broker`
# resource, so a broker holds at most 1000 replica actors; past that Ray would never
# place the group and creation would hang. The idle shells of the pool
# (core.replica_pool) hold bundles too: the replicas get what the largest pool leaves.
# The controller checks it before writing.
MAX_REPLICAS_PER_BROKER = 1000 - MAX_POOL_SIZE_PER_BROKER
Record = dict[str, Any]
PREFERRED_ELECTION, UNCLEAN_ELECTION = 0, 1   # Kafka's ElectionType (ElectLeaders v1+)
ElectionResult = tuple[str, int, KafkaError | None]   # (topic, partition, why not; None: elected)


def new_cluster_id() -> str:
    """22 characters of URL-safe base64 over a random UUID, as Kafka's cluster ids."""
    return uuid_as_id(uuid.uuid4())


def id_as_uuid(kafka_id: str) -> uuid.UUID:
    """A cluster or topic id (Kafka's Uuid.toString: URL-safe base64, unpadded) as
    the 16-byte UUID the wire protocol carries."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(kafka_id + "=="))


def uuid_as_id(value: uuid.UUID) -> str:
    """The inverse of id_as_uuid: the wire's 16-byte UUID as Kafka writes the id."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def validate_topic_name(name: str) -> None:
    if not isinstance(name, str) or not TOPIC_NAME.match(name) or name in (".", ".."):
        raise InvalidTopic(f"Topic name {name!r} is illegal: it must be 1 to 249 characters "
                           f"of [a-zA-Z0-9._-], and not '.' or '..'")


@dataclasses.dataclass(frozen=True)
class PartitionState:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    brokers: tuple[int, ...] = ()     # brokers[i]: the broker id of replicas[i]
    adding: tuple[int, ...] = ()      # a reassignment's new replicas, catching up
    removing: tuple[int, ...] = ()    # replicas that leave once every adding one is in the ISR

    @property
    def online(self) -> bool:
        return self.leader != NO_LEADER

    def broker_of(self, replica_id: int) -> int:
        return self.brokers[self.replicas.index(replica_id)]


def assign_replicas_to_brokers(broker_ids: Sequence[int], partitions: int, replication_factor: int,
                               *, start_index: int, replica_shift: int,
                               first_partition: int = 0) -> list[list[int]]:
    """Kafka's rack-unaware assignment: partition p's first replica goes to broker
    (p + start_index) mod n, so leaders spread evenly; the others follow it at a
    distance that grows by one every n partitions, so that the followers of one
    broker's leaders spread over every other broker, not over its neighbours only.
    The two offsets are random in Kafka (AdminUtils); passed in here. `brokers`
    is sorted, so the outcome depends on the set of ids only."""
    brokers = sorted(broker_ids)
    n = len(brokers)
    assignment = []
    shift = replica_shift
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        assignment.append(replicas)
    return assignment


def elect_on_request(state: PartitionState, election_type: int, live: Collection[int]) -> PartitionState:
    """The partition after an operator's ElectLeaders (Kafka's
    ReplicationControlManager.electLeader with PartitionChangeBuilder), `live` the
    replica ids that could serve now. A replica may lead cleanly when it is live
    and in the ISR:
      * PREFERRED: the first replica leads if it may; if it may not and the
        current leader still may, nothing changes (PREFERRED_LEADER_NOT_AVAILABLE);
        a partition whose leader is gone or offline gets the first replica that
        may lead, as Kafka's preferred election does.
      * UNCLEAN: only for a partition with no leader; the first replica that may
        lead cleanly, else the first live one (out of the ISR: records acked
        only to the lost ISR are gone; it is the new ISR alone).
    ELECTION_NOT_NEEDED when the partition already has the leader sought (the
    first replica; for UNCLEAN, any); ELIGIBLE_LEADERS_NOT_AVAILABLE when nobody
    may lead. Every election bumps both epochs."""
    if election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
        raise InvalidRequest(f"Unknown election type {election_type}")
    preferred = state.replicas[0]
    if state.leader == preferred or (election_type == UNCLEAN_ELECTION and state.online):
        raise ElectionNotNeeded("Leader election not needed for topic partition.")
    may_lead = [r for r in state.replicas if r in live and r in state.isr]
    isr = state.isr
    if election_type == PREFERRED_ELECTION:
        if preferred in may_lead:
            leader = preferred
        elif state.leader in may_lead or not may_lead:
            raise PreferredLeaderNotAvailable(f"The preferred replica {preferred} is not alive and in the ISR "
                                              f"{list(state.isr)}.")
        else:
            leader = may_lead[0]
    elif may_lead:
        leader = may_lead[0]
    else:
        unclean = [r for r in state.replicas if r in live]
        if not unclean:
            raise EligibleLeadersNotAvailable(f"No replica of {list(state.replicas)} is alive.")
        leader, isr = unclean[0], (unclean[0],)
    return dataclasses.replace(state, leader=leader, isr=isr, leader_epoch=state.leader_epoch + 1,
                               partition_epoch=state.partition_epoch + 1)


@dataclasses.dataclass(frozen=True)
class NodeEndpoint:
    """A Kafka node: one actor serving the wire protocol. The id is kept for the
    actor's name across restarts; host and port are those of its current start.
    A node whose actor died, restarts or was retired is down: it has no endpoint
    (it leaves `ClusterMetadata.nodes`) until it registers again, so no answer
    names a port nobody listens on (issue 26)."""
    node_id: int
    actor: str
    host: str
    port: int
    rack: str | None = None    # the broker id, for replicas


@dataclasses.dataclass(frozen=True)
class TopicMetadata:
    name: str
    topic_id: str
    config: dict[str, Any]
    partitions: tuple[PartitionState, ...]

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas)


class ClusterMetadata:
    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.controller_epoch = 0
        self.topics: dict[str, TopicMetadata] = {}
        self.next_producer_id = 0
        # __transaction_state partition -> the last coordinator epoch its coordinators took
        self.transaction_coordinator_epochs: dict[int, int] = {}
        self.nodes: dict[str, NodeEndpoint] = {}   # by actor name: the nodes that are up
        self.node_ids: dict[str, int] = {}         # by actor name, up or down: ids are never reused
        self.next_node_id = 0
        self.scram_credentials: dict[tuple[str, str], ScramCredential] = {}   # by (user, mechanism)
        self.sasl_required = False   # every listener asks for a SASL login (protocol.sasl)
        # (topic, partition, replica id) -> the actor (shell) holding that replica
        self.replica_actors: dict[tuple[str, int, int], str] = {}
        self.actor_replicas: dict[str, tuple[str, int, int]] = {}   # the inverse
        self.acl_bindings: set[AclBinding] = set()
        self.acl_version = 0         # ACL records replayed: the version of `acls()`
        self._acls: Acls = NO_ACLS   # the indexed bindings at acl_version, made when first asked for
        self.client_quota_values: dict[frozenset, dict[str, float]] = {}   # by entity (core.client_quotas)
        self.client_quota_version = 0
        self._client_quotas = ClientQuotas()
        self.feature_levels: dict[str, int] = dict(features.DEFAULT_LEVELS)   # finalized (core.features)
        # by broker id: the port every network process of the broker listens on, chosen
        # once (a free one when brokers share a host) and kept across controller restarts
        self.broker_ports: dict[int, int] = {}
        # by broker id: {logger: Kafka level} its processes apply (core.broker_loggers)
        self.broker_logger_levels: dict[int, dict[str, str]] = {}

    # --- replay: the one way state changes ----------------------------------------

    def replay(self, record: Record) -> None:
        kind = record["type"]
        if kind == "cluster":
            self.cluster_id = record["cluster_id"]
        elif kind == "controller_epoch":
            self.controller_epoch = record["epoch"]
        elif kind == "topic":
            self.topics[record["name"]] = TopicMetadata(
                record["name"], record["topic_id"], dict(record["config"]),
                tuple(_partition(p) for p in record["partitions"]))
        elif kind == "partition":
            topic = self.topics[record["topic"]]
            partitions = list(topic.partitions)
            partitions[record["partition"]] = _partition(record)
            self.topics[topic.name] = dataclasses.replace(topic, partitions=tuple(partitions))
            kept = set(partitions[record["partition"]].replicas)
            for key in [k for k in self.replica_actors if k[:2] == (topic.name, record["partition"])
                        and k[2] not in kept]:
                del self.actor_replicas[self.replica_actors.pop(key)]
        elif kind == "add_partitions":
            topic = self.topics[record["topic"]]
            self.topics[topic.name] = dataclasses.replace(
                topic, partitions=topic.partitions + tuple(_partition(p) for p in record["partitions"]))
        elif kind == "topic_config":
            topic = self.topics[record["name"]]
            self.topics[topic.name] = dataclasses.replace(topic, config=dict(record["config"]))
        elif kind == "remove_topic":
            self.topics.pop(record["name"], None)
            for key in [k for k in self.replica_actors if k[0] == record["name"]]:
                del self.actor_replicas[self.replica_actors.pop(key)]
        elif kind == "replica_actor":
            key = (record["topic"], record["partition"], record["replica_id"])
            self.replica_actors[key] = record["actor"]
            self.actor_replicas[record["actor"]] = key
        elif kind == "producer_ids":
            self.next_producer_id = record["next"]
        elif kind == "transaction_coordinator_epoch":
            self.transaction_coordinator_epochs[record["partition"]] = record["epoch"]
        elif kind == "node":
            node = NodeEndpoint(record["node_id"], record["actor"], record["host"], record["port"], record.get("rack"))
            self.nodes[node.actor] = node
            self.node_ids[node.actor] = node.node_id
            self.next_node_id = max(self.next_node_id, node.node_id + 1)
        elif kind == "node_down":
            self.nodes.pop(record["actor"], None)
        elif kind == "broker_port":
            self.broker_ports[record["broker_id"]] = record["port"]
        elif kind == "broker_loggers":
            if record["levels"]:
                self.broker_logger_levels[record["broker_id"]] = dict(record["levels"])
            else:
                self.broker_logger_levels.pop(record["broker_id"], None)
        elif kind == "user_scram_credential":
            credential = ScramCredential.from_dict(record)
            self.scram_credentials[record["name"], credential.mechanism] = credential
        elif kind == "remove_user_scram_credential":
            self.scram_credentials.pop((record["name"], record["mechanism"]), None)
        elif kind == "require_sasl":
            self.sasl_required = True
        elif kind == "acl":
            self.acl_bindings.add(AclBinding.from_record(record))
            self.acl_version += 1
        elif kind == "remove_acl":
            binding = AclBinding.from_record(record)
            if binding not in self.acl_bindings:   # the log removes only what it added: a bug, loudly
                raise ValueError(f"metadata record removes an ACL that is not there: {record}")
            self.acl_bindings.remove(binding)
            self.acl_version += 1
        elif kind == "client_quota":
            replayed(self.client_quota_values, record)
            self.client_quota_version += 1
        elif kind == features.FEATURE_LEVEL_RECORD:
            features.replayed(self.feature_levels, record)
        else:
            raise ValueError(f"unknown metadata record type {kind!r}")

    # --- handlers: validate, return records and a response ------------------------

    def handle_start(self) -> list[Record]:
        """A controller (re)started: a cluster id the first time, epoch + 1 always."""
        records: list[Record] = []
        if self.cluster_id is None:
            records.append({"type": "cluster", "cluster_id": new_cluster_id()})
        records.append({"type": "controller_epoch", "epoch": self.controller_epoch + 1})
        return records

    def handle_create_topic(self, name: str, partitions: int, replication_factor: int,
                            config: dict[str, Any] | None, broker_ids: Sequence[int],
                            rng: random.Random | None = None) -> tuple[list[Record], TopicMetadata]:
        """`broker_ids`: the live brokers; each partition's replicas are assigned to
        `replication_factor` different ones (the placement group pins them there)."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExists(f"Topic '{name}' already exists.")
        _validate_partition_count(partitions)
        if partitions < 1:
            raise InvalidPartitions(f"Number of partitions must be larger than 0, got {partitions!r}.")
        if (isinstance(replication_factor, bool) or not isinstance(replication_factor, int)
                or replication_factor < 1):
            raise InvalidReplicationFactor(
                f"Replication factor must be larger than 0, got {replication_factor!r}.")
        if replication_factor > len(broker_ids):
            raise InvalidReplicationFactor(
                f"Replication factor: {replication_factor} larger than available brokers: {len(broker_ids)}.")
        # Kafka accepts this and fails acks=all later; rafka says so at creation.
        _check_min_insync_fits(TopicConfig.from_dict(config or {}), replication_factor, InvalidReplicationFactor)
        partition_records = _new_partitions(0, partitions, replication_factor, broker_ids, rng or random.Random())
        self._check_broker_capacity(partition_records)
        record = {"type": "topic", "name": name, "topic_id": new_cluster_id(),
                  "config": dict(config or {}), "partitions": partition_records}
        staged = ClusterMetadata()
        staged.replay(record)
        return [record], staged.topics[name]

    def handle_add_partitions(self, name: str, count: int, broker_ids: Sequence[int],
                              rng: random.Random | None = None) -> tuple[list[Record], TopicMetadata]:
        """kafka-topics.sh --alter --partitions: grow the topic to `count` partitions
        (never shrink: keys would move), the new ones assigned as at creation."""
        topic = self.topic(name)
        current = len(topic.partitions)
        _validate_partition_count(count)
        if count <= current:
            raise InvalidPartitions(f"Topic currently has {current} partitions, which is higher than "
                                    f"the requested {count}." if count < current else
                                    f"Topic already has {current} partitions.")
        if topic.replication_factor > len(broker_ids):
            raise InvalidReplicationFactor(f"Replication factor: {topic.replication_factor} larger than "
                                           f"available brokers: {len(broker_ids)}.")
        record = {"type": "add_partitions", "topic": name,
                  "partitions": _new_partitions(current, count - current, topic.replication_factor,
                                                broker_ids, rng or random.Random())}
        self._check_broker_capacity(record["partitions"])
        staged = ClusterMetadata()
        staged.topics[name] = topic
        staged.replay(record)
        return [record], staged.topics[name]

    def handle_alter_topic_config(self, name: str, ops: Sequence[ConfigOp], *,
                                  replace: bool = False) -> tuple[list[Record], dict[str, Any]]:
        """IncrementalAlterConfigs (`ops`: SET, DELETE, APPEND, SUBTRACT, merged into
        the topic's overrides by core.config.altered_overrides) or, with `replace`,
        AlterConfigs (`ops` all SET: they become the whole override set). Checked in
        the order Kafka's controller checks (ConfigurationControlManager, its
        validator, then the existence check): the name (INVALID_REQUEST for "",
        INVALID_TOPIC_EXCEPTION), the operations and every resulting value
        (INVALID_CONFIG, core.config's wording), that the topic exists
        (UNKNOWN_TOPIC_OR_PARTITION), and, as at creation, min.insync.replicas
        against the replication factor (INVALID_CONFIG here: the request changes a
        config). Returns the records (none when nothing changes) and the overrides."""
        if name == "":
            raise InvalidRequest("Default topic resources are not allowed.")
        validate_topic_name(name)
        if replace and any(op != SET for op, _, _ in ops):
            raise InvalidRequest("AlterConfigs only sets configs")
        existing = self.topics.get(name)
        current = dict(existing.config) if existing is not None else {}
        overrides = altered_overrides({} if replace else current, ops)
        topic_config = TopicConfig.from_dict(overrides)
        if existing is None:
            raise UnknownTopicOrPartition(f"The topic '{name}' does not exist.")
        _check_min_insync_fits(topic_config, existing.replication_factor, InvalidConfig)
        if overrides == current:
            return [], overrides
        return [{"type": "topic_config", "name": name, "config": overrides}], overrides

    def handle_reassign_partition(self, topic: str, partition: int, target_brokers: Sequence[int],
                                  live_broker_ids: Iterable[int]) -> tuple[list[Record], PartitionState]:
        """Start moving the partition's replicas onto `target_brokers` (Kafka's
        AlterPartitionReassignments): replicas for the new brokers are added now,
        with a new leader epoch so the leader tracks them; the ones on brokers not in
        the target are `removing` until `handle_complete_reassignment`. The replicas
        are listed in the target's order, then the removing ones (Kafka's
        PartitionReassignmentReplicas), so the target's first broker holds the
        preferred leader; a target of the same brokers in another order changes
        only that order, at once (no epoch: neither leader nor ISR changes). No
        records if the partition already lives there, in that order."""
        state = self.partition(topic, partition)
        target = list(target_brokers)
        live = set(live_broker_ids)
        if not target:
            raise InvalidReplicaAssignment("The manual partition assignment includes an empty replica list.")
        if any(isinstance(b, bool) or not isinstance(b, int) for b in target):
            raise InvalidReplicaAssignment(f"{topic}-{partition}: the target {target!r} must name broker ids")
        twice = sorted(b for b, n in Counter(target).items() if n > 1)
        if twice:
            raise InvalidReplicaAssignment(f"The manual partition assignment includes the broker {twice[0]} more "
                                           f"than once.")
        adding_brokers = [b for b in target if b not in state.brokers]
        not_live = sorted(b for b in adding_brokers if b not in live)
        if not_live:   # a broker the partition has already may be down: it keeps its replica
            raise InvalidReplicaAssignment(f"The manual partition assignment includes broker {not_live[0]}, but "
                                           f"no such broker is live.")
        if state.adding or state.removing:
            raise ReassignmentInProgress(f"{topic}-{partition} is already being reassigned")
        if not state.online:
            raise LeaderNotAvailable(f"{topic}-{partition} is offline: new replicas have no leader to "
                                     f"copy from")
        removing = tuple(r for r, b in zip(state.replicas, state.brokers) if b not in target)
        first_new = max(state.replicas) + 1     # ids only grow: a removed replica's id is never reused
        replica_on = dict(zip(state.brokers, state.replicas)) | {
            b: first_new + i for i, b in enumerate(adding_brokers)}
        replicas = tuple(replica_on[b] for b in target) + removing
        brokers = tuple(target) + tuple(state.broker_of(r) for r in removing)
        if not adding_brokers and not removing:
            if replicas == state.replicas:
                return [], state
            new = dataclasses.replace(state, replicas=replicas, brokers=brokers)   # only the order
            return [_partition_record(topic, partition, new)], new
        new = dataclasses.replace(state, replicas=replicas, brokers=brokers,
                                  adding=tuple(replica_on[b] for b in adding_brokers), removing=removing,
                                  leader_epoch=state.leader_epoch + 1, partition_epoch=state.partition_epoch + 1)
        return [_partition_record(topic, partition, new)], new

    def handle_complete_reassignment(self, topic: str,
                                     partition: int) -> tuple[list[Record], PartitionState]:
        """Every replica that stays is in the ISR (Kafka's maybeCompleteReassignment:
        the target ISR holds the whole target): drop the removed ones (a removed
        leader hands over to a remaining ISR member), epoch + 1. No records while a
        staying replica is still catching up, so a move never leaves the partition
        without an in-sync copy, even one that only removes replicas."""
        state = self.partition(topic, partition)
        staying = set(state.replicas) - set(state.removing)
        if not (state.adding or state.removing) or not staying <= set(state.isr):
            return [], state
        new = _completed(state)
        return [_partition_record(topic, partition, new)], new

    def handle_alter_reassignment(self, topic: str, partition: int, target_brokers: Sequence[int] | None,
                                  live_broker_ids: Iterable[int], *, allow_replication_factor_change: bool = True
                                  ) -> tuple[list[Record], PartitionState]:
        """One partition of AlterPartitionReassignments: `target_brokers` None
        cancels the partition's reassignment (NO_REASSIGNMENT_IN_PROGRESS when
        there is none), else starts one (`handle_reassign_partition`).
        `allow_replication_factor_change` False (v1, KIP-860): a target of another
        size is INVALID_REPLICATION_FACTOR. Kafka's controller replaces a
        reassignment in progress; rafka refuses it (REASSIGNMENT_IN_PROGRESS):
        cancel it first."""
        state = self.partition(topic, partition)
        if target_brokers is None:
            if not (state.adding or state.removing):
                raise NoReassignmentInProgress("No partition reassignment is in progress.")
            return self.handle_cancel_reassignment(topic, partition)
        current = len(state.replicas) - len(state.adding)
        if not allow_replication_factor_change and len(target_brokers) != current:
            raise InvalidReplicationFactor(f"The replication factor of {topic}-{partition} would change from "
                                           f"{current} to {len(target_brokers)}, which the request does not allow.")
        return self.handle_reassign_partition(topic, partition, target_brokers, live_broker_ids)

    def reassignments(self, partitions: Iterable[tuple[str, Iterable[int]]] | None = None
                      ) -> list[tuple[str, int, list[int], list[int], list[int]]]:
        """ListPartitionReassignments: the partitions being reassigned, of those
        named ((topic, partitions) pairs; None: every topic), in order, each as
        (topic, partition, replicas, adding, removing) in broker ids; unknown
        topics and partitions, and those not moving, are left out (Kafka's)."""
        if partitions is None:
            partitions = [(name, range(len(topic.partitions))) for name, topic in self.topics.items()]
        found = []
        for name, indexes in partitions:
            topic = self.topics.get(name)
            for p in (indexes if topic is not None else ()):
                state = topic.partitions[p] if 0 <= p < len(topic.partitions) else None
                if state is not None and (state.adding or state.removing):
                    found.append((name, p, list(state.brokers), [state.broker_of(r) for r in state.adding],
                                  [state.broker_of(r) for r in state.removing]))
        return found

    def replicas_per_broker(self) -> Counter:
        return Counter(b for topic in self.topics.values() for p in topic.partitions for b in p.brokers)

    def _check_broker_capacity(self, partition_records: list[Record]) -> None:
        load = self.replicas_per_broker()
        load.update(b for p in partition_records for b in p["brokers"])
        full = sorted(b for b, count in load.items() if count > MAX_REPLICAS_PER_BROKER)
        if full:
            raise InvalidPartitions(
                f"{len(partition_records)} partitions cannot be placed: brokers {full} would hold more "
                f"than {MAX_REPLICAS_PER_BROKER} replicas each; add brokers or use fewer partitions.")

    def handle_cancel_reassignment(self, topic: str, partition: int) -> tuple[list[Record], PartitionState]:
        """kafka-reassign-partitions --cancel: the added replicas go, the removing
        ones stay. Refused if that would leave no in-sync replica (an added one is
        the only ISR member left); no records if nothing is moving."""
        state = self.partition(topic, partition)
        if not (state.adding or state.removing):
            return [], state
        isr = tuple(r for r in state.isr if r not in state.adding)
        if not isr:
            raise ReassignmentInProgress(f"{topic}-{partition}: only new replicas are in sync; cancelling "
                                         f"would leave none: let the reassignment complete")
        new = _completed(dataclasses.replace(state, removing=state.adding, adding=()))
        return [_partition_record(topic, partition, new)], new

    def handle_allocate_producer_id(self) -> tuple[list[Record], int]:
        """A producer id never handed out before (idempotent producers): a block of one."""
        records, (first, _) = self.handle_allocate_producer_ids(1)
        return records, first

    def handle_allocate_producer_ids(self, count: int = 1000) -> tuple[list[Record], tuple[int, int]]:
        """A block of `count` producer ids never handed out before, (first id, count)
        (Kafka's AllocateProducerIds, ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE = 1000):
        a transaction coordinator hands them out one by one (core.producer_ids)."""
        if count <= 0:
            raise ValueError(f"a producer id block holds at least one id, not {count}")
        first = self.next_producer_id
        return [{"type": "producer_ids", "next": first + count}], (first, count)

    def handle_next_transaction_coordinator_epoch(self, partition: int,
                                                  leader_epoch: int) -> tuple[list[Record], int]:
        """The coordinator epoch of a transaction coordinator that has just loaded
        __transaction_state-`partition` from a leader at `leader_epoch`: at least that
        leader epoch and above every epoch taken for the partition before. Kafka's
        coordinator epoch is the partition's leader epoch and rises on every load,
        as its coordinator moves only with leadership; here a coordinator actor
        restarts without a leader change, and a marker its predecessor still had
        in flight must be fenced (TRANSACTION_COORDINATOR_FENCED) by the epoch of
        every marker the successor writes."""
        if leader_epoch < 0:
            raise ValueError(f"a load reads from a leader at an epoch >= 0, not {leader_epoch}")
        epoch = max(leader_epoch, self.transaction_coordinator_epochs.get(partition, -1) + 1)
        return [{"type": "transaction_coordinator_epoch", "partition": partition, "epoch": epoch}], epoch

    def handle_register_node(self, actor: str, host: str, port: int,
                             rack: str | None = None) -> tuple[list[Record], NodeEndpoint]:
        """An actor started serving at host:port: the node id its name already has,
        else the next one; a record only when something changed."""
        records, nodes = self.handle_register_nodes([(actor, host, port, rack)])
        return records, nodes[0]

    def handle_register_nodes(self, endpoints: Sequence[tuple[str, str, int, str | None]]
                              ) -> tuple[list[Record], list[NodeEndpoint]]:
        """`handle_register_node` for several actors (actor, host, port, rack) at
        once (one commit for a new partition's replicas): new names get the next
        ids in turn."""
        records, nodes = [], []
        next_node_id = self.next_node_id
        for actor, host, port, rack in endpoints:
            if not isinstance(actor, str) or not actor:   # a bug: the log would name a node of no actor
                raise ValueError(f"a node's actor must be named, not {actor!r}")
            known = self.nodes.get(actor)
            node_id = self.node_ids.get(actor)
            if node_id is None:
                node_id, next_node_id = next_node_id, next_node_id + 1
            node = NodeEndpoint(node_id, actor, host, port, rack)
            nodes.append(node)
            if node != known:
                records.append({"type": "node", "node_id": node_id, "actor": actor, "host": host, "port": port,
                                "rack": rack})
        return records, nodes

    def handle_node_down(self, actor: str) -> list[Record]:
        """The actor stopped serving (died, restarting, retired): its endpoint is
        no longer named anywhere; its node id stays its own for when it
        registers again. A record only when it was up."""
        return [{"type": "node_down", "actor": actor}] if actor in self.nodes else []

    def handle_broker_port(self, broker_id: int, port: int) -> list[Record]:
        """Broker `broker_id`'s network processes listen on `port` from now on; a
        record only when it changed."""
        if not isinstance(broker_id, int) or broker_id < 0 or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"a broker's port must be 1-65535 for a broker id >= 0, not {port!r} for {broker_id!r}")
        return [] if self.broker_ports.get(broker_id) == port else [
            {"type": "broker_port", "broker_id": broker_id, "port": port}]

    def handle_alter_broker_loggers(self, broker_id: int, ops: Sequence[ConfigOp]
                                    ) -> tuple[list[Record], dict[str, str]]:
        """IncrementalAlterConfigs of broker `broker_id`'s loggers (checked by the
        broker first, which knows its loggers): its new map; a record only when
        it changed."""
        current = self.broker_logger_levels.get(broker_id, {})
        levels = broker_loggers.altered(current, ops)
        return ([] if levels == current else
                [{"type": "broker_loggers", "broker_id": broker_id, "levels": levels}]), levels

    def handle_require_sasl(self) -> list[Record]:
        """Every listener requires a SASL login from now on (`rafka up --sasl`, or
        Ray's token authentication on); a record only the first time."""
        return [] if self.sasl_required else [{"type": "require_sasl"}]

    def handle_cluster_credential(self, password: str, *, require_sasl: bool) -> list[Record]:
        """At a controller's start: the cluster user's credential (core.scram.CLUSTER_USER)
        when the metadata has none made from `password`, and `require_sasl` when asked."""
        records: list[Record] = []
        held = self.scram_credentials.get((CLUSTER_USER, CLUSTER_MECHANISM))
        if held is None or not matches(held, password):
            records.append(_credential_record(CLUSTER_USER, make_credential(CLUSTER_MECHANISM, password)))
        return records + (self.handle_require_sasl() if require_sasl else [])

    def handle_alter_user_scram_credentials(self, deletions: Sequence[scram_admin.Deletion],
                                            upsertions: Sequence[scram_admin.Upsertion]
                                            ) -> tuple[list[Record], list[tuple[str, KafkaError | None]]]:
        """AlterUserScramCredentials (Kafka's rules: core.scram_admin): the records of
        the users' alterations that may be made, and each named user's result."""
        alteration = scram_admin.alter(self.scram_credentials, deletions, upsertions)
        records = [{"type": "remove_user_scram_credential", "name": user, "mechanism": mechanism}
                   for user, mechanism in alteration.removed]
        records += [_credential_record(user, credential) for user, credential in alteration.set_credentials]
        return records, alteration.results

    def acls(self) -> Acls:
        """The bindings, indexed (core.acl.Acls), made again only after they changed."""
        if self._acls.version != self.acl_version:
            self._acls = Acls(self.acl_bindings, version=self.acl_version)
        return self._acls

    def client_quotas(self) -> ClientQuotas:
        """The quota configs, immutable, made again only after they changed."""
        if self._client_quotas.version != self.client_quota_version:
            self._client_quotas = ClientQuotas({e: dict(v) for e, v in self.client_quota_values.items()},
                                               version=self.client_quota_version)
        return self._client_quotas

    def handle_update_features(self, updates: list[tuple[str, int, int]], *, controller_id: int) -> list[Record]:
        """UpdateFeatures [(feature, level, upgrade type)]: its records, or
        InvalidUpdateVersion for the first feature that cannot be set (core.features)."""
        return features.update_records(self.feature_levels, updates, controller_id=controller_id)

    def handle_alter_client_quotas(self, entries: list) -> tuple[list[Record], list[KafkaError | None]]:
        """AlterClientQuotas: per entry (entity pairs, ops of (key, value or None
        to remove)) None or why not, and the records (Kafka's
        ClientQuotaControlManager.alterClientQuotas)."""
        return alteration_records(self.client_quotas(), entries)

    def handle_create_acls(self, bindings: Sequence[AclBinding]) -> tuple[list[Record], list[KafkaError | None]]:
        """CreateAcls: per binding, None (created, or there already) or why not
        (INVALID_REQUEST with Kafka's message); a record for each binding new to the
        set, the request's duplicates once (Kafka's AclControlManager.createAcls)."""
        records: list[Record] = []
        results: list[KafkaError | None] = []
        added: set[AclBinding] = set()
        for binding in bindings:
            try:
                validate_new_binding(binding)
            except KafkaError as error:
                results.append(error)
                continue
            if binding not in self.acl_bindings and binding not in added:
                if len(records) >= MAX_ACL_CHANGES_PER_REQUEST:
                    results.append(UnknownServerError(f"Cannot create more than {MAX_ACL_CHANGES_PER_REQUEST} "
                                                      f"acls in a single operation."))
                    continue
                added.add(binding)
                records.append({"type": "acl", **binding.to_record()})
            results.append(None)
        return records, results

    def handle_delete_acls(self, filters: Sequence[AclBindingFilter]
                           ) -> tuple[list[Record], list[tuple[AclBinding, ...] | KafkaError]]:
        """DeleteAcls: per filter, the bindings it matched (each removed once, however
        many filters match it) or why not (a filter with an UNKNOWN field:
        INVALID_REQUEST; one matching more than MAX_ACL_CHANGES_PER_REQUEST in all:
        Kafka's "Cannot remove more than ..." as UNKNOWN_SERVER_ERROR, its part
        removing nothing). Kafka's AclControlManager.deleteAcls."""
        removed: dict[AclBinding, Record] = {}
        results: list[tuple[AclBinding, ...] | KafkaError] = []
        current = self.acls()
        for acl_filter in filters:
            unknown = acl_filter.unknown_field()
            if unknown is not None:
                results.append(InvalidRequest(unknown))
                continue
            matched = tuple(current.matching(acl_filter))
            new = [b for b in matched if b not in removed]
            if len(removed) + len(new) > MAX_ACL_CHANGES_PER_REQUEST:
                results.append(UnknownServerError(f"Cannot remove more than {MAX_ACL_CHANGES_PER_REQUEST} acls "
                                                  f"in a single delete operation."))
                continue
            removed.update((b, {"type": "remove_acl", **b.to_record()}) for b in new)
            results.append(matched)
        return list(removed.values()), results

    def handle_assign_replica_actors(self, topic: TopicMetadata,
                                     actors: dict[tuple[int, int], str]) -> list[Record]:
        """Records giving each replica `(partition, replica id)` of `topic` (as it
        is or will be once its creating records are replayed) the actor `actors`
        names. Refused (a bug, loudly): a replica the topic does not have, one
        already held, an actor that holds or held a replica, an actor named twice."""
        if len(set(actors.values())) != len(actors):
            raise ValueError(f"an actor named for two replicas: {sorted(actors.items())}")
        records = []
        for (partition, replica_id), actor in sorted(actors.items()):
            if not 0 <= partition < len(topic.partitions) or replica_id not in topic.partitions[partition].replicas:
                raise ValueError(f"{topic.name}-{partition} has no replica {replica_id}")
            if (topic.name, partition, replica_id) in self.replica_actors:
                raise ValueError(f"{topic.name}-{partition} replica {replica_id} is held by "
                                 f"{self.replica_actors[topic.name, partition, replica_id]} already")
            if actor in self.actor_replicas or actor in self.node_ids:
                raise ValueError(f"actor {actor} held a replica before: its name is never reused")
            records.append({"type": "replica_actor", "topic": topic.name, "partition": partition,
                            "replica_id": replica_id, "actor": actor})
        return records

    def replica_actor(self, topic: str, partition: int, replica_id: int) -> str | None:
        """The name of the actor holding the replica; None when none was given yet
        (or the replica is not there). The one lookup: everything that finds a
        replica's actor asks here, or in the image and snapshot built from here."""
        return self.replica_actors.get((topic, partition, replica_id))

    def handle_delete_topic(self, name: str) -> list[Record]:
        self.topic(name)
        return [{"type": "remove_topic", "name": name}]

    def handle_elect_leader(self, topic: str, partition: int, unavailable_replicas: Iterable[int],
                            restarted_replicas: Iterable[int] = ()) -> tuple[list[Record], PartitionState]:
        """The leader is gone, unreachable or restarted: a new leader from the ISR,
        epoch + 1. ISR members that kept running come first (they are caught up);
        only when none is available does a restarted one lead (it reopened its log
        on its broker's disk: an RF=1 partition, an ISR shrunk to one replica, a
        whole-cluster restart), as Kafka elects a re-registered broker that is the
        last ISR member. Restarted members leave the new ISR and rejoin once caught
        up. If no ISR member is available the partition goes offline (leader -1, ISR
        kept: unclean election is off, so only an ISR member may lead again)."""
        state = self.partition(topic, partition)
        unavailable, restarted = set(unavailable_replicas), set(restarted_replicas)
        running = [r for r in state.isr if r not in unavailable and r not in restarted]
        reopened = [r for r in state.isr if r not in unavailable and r in restarted]
        if running:
            leader, isr = running[0], tuple(running)
        elif reopened:
            leader, isr = reopened[0], (reopened[0],)
        else:
            leader, isr = NO_LEADER, state.isr
        new = dataclasses.replace(state, isr=isr, leader=leader, leader_epoch=state.leader_epoch + 1,
                                  partition_epoch=state.partition_epoch + 1)
        return [_partition_record(topic, partition, new)], new

    def handle_elect_leaders(self, election_type: int, partitions: Iterable[tuple[str, int]] | None,
                             live: Callable[[str, int], Collection[int]]
                             ) -> tuple[list[Record], list[ElectionResult]]:
        """ElectLeaders: `elect_on_request` for each partition named (None: every
        partition of every topic, those that need no election left out of the
        answer, as Kafka answers), `live(topic, partition)` giving the replica ids
        that could serve now. Per partition, in order, its error or None (elected:
        a record); an unknown one UNKNOWN_TOPIC_OR_PARTITION. A partition named
        twice is judged the second time as the first left it. An unknown election
        type refuses the whole request (INVALID_REQUEST, as Kafka's controller)."""
        if election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
            raise InvalidRequest(f"Unknown election type {election_type}")
        every = partitions is None
        if every:
            partitions = [(name, p) for name, topic in self.topics.items() for p in range(len(topic.partitions))]
        records: list[Record] = []
        results: list[ElectionResult] = []
        elected: dict[tuple[str, int], PartitionState] = {}
        for topic, partition in partitions:
            try:
                state = elected.get((topic, partition)) or self.partition(topic, partition)
                new = elect_on_request(state, election_type, live(topic, partition))
            except ElectionNotNeeded as error:
                if not every:
                    results.append((topic, partition, error))
                continue
            except KafkaError as error:
                results.append((topic, partition, error))
                continue
            elected[topic, partition] = new
            records.append(_partition_record(topic, partition, new))
            results.append((topic, partition, None))
        return records, results

    def handle_remove_from_isr(self, topic: str, partition: int,
                               replica_ids: Iterable[int]) -> tuple[list[Record], PartitionState]:
        """The controller fences replicas that restarted (a restarted replica may have
        lost its log: a new node starts empty): they leave the ISR now and rejoin
        through the leader once caught up, as Kafka drops a re-registered broker's
        replicas from the ISR. The leader is never removed here (that is an
        election). No records if nothing changes."""
        state = self.partition(topic, partition)
        removed = set(replica_ids) - {state.leader}
        if not state.online or not removed & set(state.isr):
            return [], state
        isr = tuple(r for r in state.isr if r not in removed)
        new = dataclasses.replace(state, isr=isr, partition_epoch=state.partition_epoch + 1)
        return [_partition_record(topic, partition, new)], new

    def handle_alter_isr(self, topic: str, partition: int, leader: int, leader_epoch: int,
                         partition_epoch: int, new_isr: Iterable[int]) -> tuple[list[Record], PartitionState]:
        """A leader's ISR change, accepted only from the current leader at the current
        leader and partition epochs (a stale leader is fenced; a leader that missed
        a change the controller made is refused INVALID_UPDATE_VERSION, as Kafka's
        ReplicationControlManager, and reads the record it missed)."""
        state = self.partition(topic, partition)
        if leader_epoch < state.leader_epoch:
            raise FencedLeaderEpoch(f"{topic}-{partition}: leader epoch {leader_epoch} is older than "
                                    f"{state.leader_epoch}")
        if leader != state.leader or leader_epoch != state.leader_epoch:
            raise NotLeaderOrFollower(f"{topic}-{partition}: replica {leader} at epoch {leader_epoch} "
                                      f"is not the leader (leader {state.leader}, epoch {state.leader_epoch})")
        if partition_epoch != state.partition_epoch:
            raise InvalidUpdateVersion(f"{topic}-{partition}: partition epoch {partition_epoch} is not "
                                       f"the current {state.partition_epoch}")
        isr = tuple(r for r in state.replicas if r in set(new_isr))
        if leader not in isr:
            raise InvalidRequest(f"{topic}-{partition}: the ISR must hold the leader {leader}")
        new = dataclasses.replace(state, isr=isr, partition_epoch=state.partition_epoch + 1)
        return [_partition_record(topic, partition, new)], new

    # --- lookups ------------------------------------------------------------------

    def topic(self, name: str) -> TopicMetadata:
        try:
            return self.topics[name]
        except KeyError:
            raise UnknownTopicOrPartition(f"Topic '{name}' does not exist.") from None

    def leaders_moved_by(self, records: Sequence[Record]) -> list[tuple[str, int]]:
        """The partitions whose leader replica `records` change to another one that
        serves (a new leader, not the same one at a new epoch, nor none), read
        before they are replayed. Until such a leader is told (become_leader), it
        answers NOT_LEADER_OR_FOLLOWER to a Produce that reaches it: the
        controller shows brokers the change only once it is told."""
        moved = []
        for record in records:
            if record["type"] != "partition" or record["leader"] == NO_LEADER:
                continue
            topic = self.topics.get(record["topic"])
            before = (topic.partitions[record["partition"]]
                      if topic is not None and record["partition"] < len(topic.partitions) else None)
            if before is None or before.leader != record["leader"]:
                moved.append((record["topic"], record["partition"]))
        return moved

    def partition(self, topic: str, partition: int) -> PartitionState:
        partitions = self.topic(topic).partitions
        if not 0 <= partition < len(partitions):
            raise UnknownTopicOrPartition(f"Partition {topic}-{partition} does not exist.")
        return partitions[partition]


def _validate_partition_count(count) -> None:
    # bool is an int in Python: create_topic(partitions=True) must not mean 1
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidPartitions(f"Number of partitions must be an integer, got {count!r}.")
    if count > MAX_PARTITIONS_PER_TOPIC:
        raise InvalidPartitions(f"Number of partitions {count} is larger than this cluster's "
                                f"limit of {MAX_PARTITIONS_PER_TOPIC} per topic.")


def _check_min_insync_fits(config: TopicConfig, replication_factor: int, error: type[Exception]) -> None:
    if config.min_insync_replicas > replication_factor:
        raise error(f"min.insync.replicas ({config.min_insync_replicas}) is larger than the "
                    f"replication factor ({replication_factor}).")


def _new_partitions(first: int, count: int, replication_factor: int, broker_ids: Sequence[int],
                    rng: random.Random) -> list[Record]:
    """Partition records for partitions first .. first+count-1: replica ids 0..RF-1,
    leaders spread over them, brokers by Kafka's rack-unaware assignment with the
    preferred leader on each partition's first assigned broker."""
    assignment = assign_replicas_to_brokers(
        broker_ids, count, replication_factor, first_partition=first,
        start_index=rng.randrange(len(broker_ids)), replica_shift=rng.randrange(len(broker_ids)))
    replicas = tuple(range(replication_factor))
    records = []
    for p, assigned in zip(range(first, first + count), assignment):
        leader = p % replication_factor  # spread leaders over the replica slots
        ordered = replicas[leader:] + replicas[:leader]
        brokers = [assigned[(r - leader) % replication_factor] for r in ordered]
        records.append({"replicas": list(ordered), "isr": list(ordered), "brokers": brokers,
                        "leader": leader, "leader_epoch": 0, "partition_epoch": 0})
    return records


def _completed(state: PartitionState) -> PartitionState:
    keep = [i for i, r in enumerate(state.replicas) if r not in state.removing]
    replicas = tuple(state.replicas[i] for i in keep)
    isr = tuple(r for r in state.isr if r not in state.removing)   # every replica kept: it is all in sync
    leader = state.leader if state.leader not in state.removing else isr[0]
    return dataclasses.replace(state, replicas=replicas, brokers=tuple(state.brokers[i] for i in keep),
                               isr=isr, leader=leader, adding=(), removing=(),
                               leader_epoch=state.leader_epoch + 1, partition_epoch=state.partition_epoch + 1)


def _partition(record: Record) -> PartitionState:
    return PartitionState(tuple(record["replicas"]), tuple(record["isr"]), record["leader"],
                          record["leader_epoch"], record["partition_epoch"], tuple(record["brokers"]),
                          tuple(record.get("adding", ())), tuple(record.get("removing", ())))


def _partition_record(topic: str, partition: int, state: PartitionState) -> Record:
    return {"type": "partition", "topic": topic, "partition": partition,
            "replicas": list(state.replicas), "isr": list(state.isr), "brokers": list(state.brokers),
            "adding": list(state.adding), "removing": list(state.removing),
            "leader": state.leader, "leader_epoch": state.leader_epoch, "partition_epoch": state.partition_epoch}


def _credential_record(user: str, credential: ScramCredential) -> Record:
    return {"type": "user_scram_credential", "name": user, **credential.to_dict()}
