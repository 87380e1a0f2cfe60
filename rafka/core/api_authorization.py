"""Which operation on which resource each Kafka API checks before it acts, and the
error a refusal answers: Kafka's KafkaApis, ControllerApis, AclApis and
ConfigHelper as data (read at apache/kafka trunk), so every handler checks as
Kafka's broker does and one table says what that is.

A `Check` is one authorization KafkaApis makes: an operation on the resource a
request field names (or the cluster), how far a refusal reaches (`Scope`), the
error it answers, when Kafka makes it (`when`, a condition on the request) and
what waives it (`unless`: a check that, allowed, makes this one unnecessary, as
CREATE on the cluster waives CREATE on each topic). An API's checks are made in
the table's order; a REQUEST refusal answers the whole request.

`by_resource_type`: the check is Kafka's authorizeByResourceType (WRITE on some
topic, for an idempotent producer's InitProducerId), not one resource's.

Invariants: every API the node table serves has an entry (a test reads the
table against protocol.node_table); the entry of an API that checks nothing
(ApiVersions, SASL's own) has no checks; errors are core.errors' classes.
Callers: the handlers (a later slice of issue 30 wires each one), tests.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from types import MappingProxyType

from rafka.core.acl import CLUSTER_NAME, AclOperation, ResourceType
from rafka.core.errors import (ClusterAuthorizationFailed, GroupAuthorizationFailed, KafkaError,
                               TopicAuthorizationFailed, TransactionalIdAuthorizationFailed)

Op, Type = AclOperation, ResourceType


class Scope(enum.Enum):
    REQUEST = "request"   # one check; refused: the whole request answers the error
    EACH = "each"         # each resource named on its own; the refused ones answer the error, the rest is served
    FILTER = "filter"     # resources not allowed are left out of the answer, no error (all-topics Metadata, ListGroups)


@dataclasses.dataclass(frozen=True)
class Check:
    operation: AclOperation
    resource_type: ResourceType
    field: str                    # the request field naming the resource(s); CLUSTER_NAME for the cluster
    scope: Scope
    error: type[KafkaError] | None   # None: a FILTER check, which answers no error
    when: str = ""                # the condition under which Kafka checks (on request fields); "" always
    unless: Check | None = None   # allowed, it waives this check
    by_resource_type: bool = False


@dataclasses.dataclass(frozen=True)
class ApiAuthorization:
    api_key: int
    name: str
    checks: tuple[Check, ...]
    note: str = ""


def _cluster(operation: AclOperation, *, error: type[KafkaError] | None = ClusterAuthorizationFailed,
             scope: Scope = Scope.REQUEST, when: str = "") -> Check:
    return Check(operation, Type.CLUSTER, CLUSTER_NAME, scope, error, when)


def _topics(operation: AclOperation, field: str, *, scope: Scope = Scope.EACH, when: str = "",
            unless: Check | None = None) -> Check:
    return Check(operation, Type.TOPIC, field, scope, TopicAuthorizationFailed if scope != Scope.FILTER else None,
                 when, unless)


def _group(operation: AclOperation, field: str, *, scope: Scope = Scope.REQUEST, when: str = "",
           unless: Check | None = None) -> Check:
    return Check(operation, Type.GROUP, field, scope, GroupAuthorizationFailed if scope != Scope.FILTER else None,
                 when, unless)


def _transactional_id(operation: AclOperation, field: str = "transactional_id", *, when: str = "") -> Check:
    return Check(operation, Type.TRANSACTIONAL_ID, field, Scope.REQUEST, TransactionalIdAuthorizationFailed, when)


_TXN_GIVEN = "transactional_id is not None"
_CLUSTER_ACTION_QUIET = _cluster(Op.CLUSTER_ACTION, error=None, scope=Scope.FILTER)

_TABLE: list[ApiAuthorization] = [
    ApiAuthorization(0, "Produce", (
        _transactional_id(Op.WRITE, when=_TXN_GIVEN),
        _topics(Op.WRITE, "topic_data[].name"))),
    ApiAuthorization(1, "Fetch", (
        _cluster(Op.CLUSTER_ACTION, error=TopicAuthorizationFailed, when="replica_id >= 0 (a follower's fetch)"),
        _topics(Op.READ, "topics[].topic", when="replica_id < 0 (a consumer's fetch)")),
        "a follower's fetch needs CLUSTER_ACTION on the cluster and no topic check (refused: every partition "
        "answers TOPIC_AUTHORIZATION_FAILED); a consumer's READ on each topic"),
    ApiAuthorization(2, "ListOffsets", (_topics(Op.DESCRIBE, "topics[].name"),)),
    ApiAuthorization(3, "Metadata", (
        _topics(Op.DESCRIBE, "topics[].name", when="topics listed"),
        _topics(Op.DESCRIBE, "every topic", scope=Scope.FILTER, when="topics is None (all topics)"),
        _topics(Op.CREATE, "topics[].name", when="allow_auto_topic_creation and the topic does not exist",
                unless=_cluster(Op.CREATE, error=None, scope=Scope.FILTER))),
        "a listed topic the principal may not describe answers TOPIC_AUTHORIZATION_FAILED (no partitions, "
        "zero topic id); all-topics requests leave them out"),
    ApiAuthorization(8, "OffsetCommit", (
        _group(Op.READ, "group_id"),
        _topics(Op.READ, "topics[].name"))),
    ApiAuthorization(9, "OffsetFetch", (
        _group(Op.DESCRIBE, "group_id (v0-7) / groups[].group_id (v8+)", scope=Scope.EACH),
        _topics(Op.DESCRIBE, "topics[].name"),
        _topics(Op.DESCRIBE, "every committed topic", scope=Scope.FILTER, when="topics is None (all offsets)"))),
    ApiAuthorization(10, "FindCoordinator", (
        _group(Op.DESCRIBE, "key / coordinator_keys[]", scope=Scope.EACH, when="key_type == 0 (group)"),
        _transactional_id(Op.DESCRIBE, "key / coordinator_keys[]", when="key_type == 1 (transaction)")),
        "a refusal answers the coordinator as no node (-1) with the error"),
    ApiAuthorization(11, "JoinGroup", (_group(Op.READ, "group_id"),)),
    ApiAuthorization(12, "Heartbeat", (_group(Op.READ, "group_id"),)),
    ApiAuthorization(13, "LeaveGroup", (_group(Op.READ, "group_id"),)),
    ApiAuthorization(14, "SyncGroup", (_group(Op.READ, "group_id"),)),
    ApiAuthorization(15, "DescribeGroups", (_group(Op.DESCRIBE, "groups[]", scope=Scope.EACH),)),
    ApiAuthorization(16, "ListGroups", (
        _group(Op.DESCRIBE, "every group", scope=Scope.FILTER,
               unless=_cluster(Op.DESCRIBE, error=None, scope=Scope.FILTER)),)),
    ApiAuthorization(17, "SaslHandshake", ()),
    ApiAuthorization(18, "ApiVersions", ()),
    ApiAuthorization(19, "CreateTopics", (
        _topics(Op.CREATE, "topics[].name", unless=_cluster(Op.CREATE, error=None, scope=Scope.FILTER)),
        _topics(Op.DESCRIBE_CONFIGS, "topics[].name", scope=Scope.FILTER)),
        "without DESCRIBE_CONFIGS a created topic's configs are answered with topic_config_error_code "
        "TOPIC_AUTHORIZATION_FAILED"),
    ApiAuthorization(20, "DeleteTopics", (
        _topics(Op.DESCRIBE, "topics[].name / topic_names[]"),
        _topics(Op.DELETE, "topics[].name / topic_names[]")),
        "an unknown topic the principal may not describe answers TOPIC_AUTHORIZATION_FAILED, not "
        "UNKNOWN_TOPIC_OR_PARTITION (its existence is not told)"),
    ApiAuthorization(21, "DeleteRecords", (_topics(Op.DELETE, "topics[].name"),)),
    ApiAuthorization(22, "InitProducerId", (
        _transactional_id(Op.WRITE, when=_TXN_GIVEN),
        Check(Op.IDEMPOTENT_WRITE, Type.CLUSTER, CLUSTER_NAME, Scope.REQUEST, ClusterAuthorizationFailed,
              when="transactional_id is None",
              unless=Check(Op.WRITE, Type.TOPIC, "any topic", Scope.FILTER, None, by_resource_type=True))),
        "an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic"),
    ApiAuthorization(23, "OffsetForLeaderEpoch", (
        _topics(Op.DESCRIBE, "topics[].topic", unless=_CLUSTER_ACTION_QUIET),)),
    ApiAuthorization(24, "AddPartitionsToTxn", (
        _transactional_id(Op.WRITE, "v3_and_below_transactional_id", when="version <= 3"),
        _topics(Op.WRITE, "v3_and_below_topics[].name", when="version <= 3"),
        _cluster(Op.CLUSTER_ACTION, when="version >= 4 (brokers verifying)"))),
    ApiAuthorization(25, "AddOffsetsToTxn", (
        _transactional_id(Op.WRITE),
        _group(Op.READ, "group_id"))),
    ApiAuthorization(26, "EndTxn", (_transactional_id(Op.WRITE),)),
    ApiAuthorization(27, "WriteTxnMarkers", (
        Check(Op.CLUSTER_ACTION, Type.CLUSTER, CLUSTER_NAME, Scope.REQUEST, ClusterAuthorizationFailed,
              unless=_cluster(Op.ALTER, error=None, scope=Scope.FILTER)),)),
    ApiAuthorization(28, "TxnOffsetCommit", (
        _transactional_id(Op.WRITE),
        _group(Op.READ, "group_id"),
        _topics(Op.READ, "topics[].name"))),
    ApiAuthorization(29, "DescribeAcls", (_cluster(Op.DESCRIBE),)),
    ApiAuthorization(30, "CreateAcls", (_cluster(Op.ALTER),)),
    ApiAuthorization(31, "DeleteAcls", (_cluster(Op.ALTER),)),
    ApiAuthorization(32, "DescribeConfigs", (
        _cluster(Op.DESCRIBE_CONFIGS, scope=Scope.EACH, when="resource_type in (BROKER, BROKER_LOGGER)"),
        _topics(Op.DESCRIBE_CONFIGS, "resources[].resource_name", when="resource_type == TOPIC"),
        _group(Op.DESCRIBE_CONFIGS, "resources[].resource_name", scope=Scope.EACH, when="resource_type == GROUP"))),
    ApiAuthorization(33, "AlterConfigs", (
        _cluster(Op.ALTER_CONFIGS, scope=Scope.EACH, when="resource_type in (BROKER, BROKER_LOGGER)"),
        _topics(Op.ALTER_CONFIGS, "resources[].resource_name", when="resource_type == TOPIC"),
        _group(Op.ALTER_CONFIGS, "resources[].resource_name", scope=Scope.EACH, when="resource_type == GROUP"))),
    ApiAuthorization(34, "AlterReplicaLogDirs", (_cluster(Op.ALTER),),
                     "refused: every partition named answers CLUSTER_AUTHORIZATION_FAILED"),
    ApiAuthorization(35, "DescribeLogDirs", (_cluster(Op.DESCRIBE),)),
    ApiAuthorization(36, "SaslAuthenticate", ()),
    ApiAuthorization(37, "CreatePartitions", (_topics(Op.ALTER, "topics[].name"),)),
    ApiAuthorization(42, "DeleteGroups", (_group(Op.DELETE, "groups_names[]", scope=Scope.EACH),)),
    ApiAuthorization(43, "ElectLeaders", (_cluster(Op.ALTER),)),
    ApiAuthorization(44, "IncrementalAlterConfigs", (
        _cluster(Op.ALTER_CONFIGS, scope=Scope.EACH, when="resource_type in (BROKER, BROKER_LOGGER)"),
        _topics(Op.ALTER_CONFIGS, "resources[].resource_name", when="resource_type == TOPIC"),
        _group(Op.ALTER_CONFIGS, "resources[].resource_name", scope=Scope.EACH, when="resource_type == GROUP"))),
    ApiAuthorization(45, "AlterPartitionReassignments", (_cluster(Op.ALTER),)),
    ApiAuthorization(46, "ListPartitionReassignments", (_cluster(Op.DESCRIBE),)),
    ApiAuthorization(47, "OffsetDelete", (
        _group(Op.DELETE, "group_id"),
        _topics(Op.READ, "topics[].name"))),
    ApiAuthorization(48, "DescribeClientQuotas", (_cluster(Op.DESCRIBE_CONFIGS),)),
    ApiAuthorization(49, "AlterClientQuotas", (_cluster(Op.ALTER_CONFIGS),)),
    ApiAuthorization(50, "DescribeUserScramCredentials", (_cluster(Op.DESCRIBE),)),
    ApiAuthorization(51, "AlterUserScramCredentials", (_cluster(Op.ALTER),)),
    ApiAuthorization(57, "UpdateFeatures", (_cluster(Op.ALTER),),
                     "refused: the top-level CLUSTER_AUTHORIZATION_FAILED and no results"),
    ApiAuthorization(58, "Envelope", (_cluster(Op.CLUSTER_ACTION),),
                     "a broker relaying a client's request to the controller (KIP-590); the inner request "
                     "is then checked as the client's"),
    ApiAuthorization(60, "DescribeCluster", (_cluster(Op.DESCRIBE, error=None, scope=Scope.FILTER,
                                                      when="include_cluster_authorized_operations"),),
                     "answered to everyone; DESCRIBE on the cluster only gates the authorized operations"),
    ApiAuthorization(61, "DescribeProducers", (_topics(Op.READ, "topics[].name"),)),
    ApiAuthorization(65, "DescribeTransactions", (
        _transactional_id(Op.DESCRIBE, "transactional_ids[]"),
        _topics(Op.DESCRIBE, "the transaction's topics", scope=Scope.FILTER))),
    ApiAuthorization(66, "ListTransactions", (
        Check(Op.DESCRIBE, Type.TRANSACTIONAL_ID, "every transactional id", Scope.FILTER, None),)),
    ApiAuthorization(55, "DescribeQuorum", (_cluster(Op.DESCRIBE),),
                     "refused: the top-level CLUSTER_AUTHORIZATION_FAILED and no topics"),
    ApiAuthorization(68, "ConsumerGroupHeartbeat", (_group(Op.READ, "group_id"),)),
    ApiAuthorization(69, "ConsumerGroupDescribe", (_group(Op.DESCRIBE, "group_ids[]", scope=Scope.EACH),)),
    ApiAuthorization(74, "ListConfigResources", (_cluster(Op.DESCRIBE_CONFIGS),),
                     "refused: CLUSTER_AUTHORIZATION_FAILED and no resources; topics are not filtered"),
    ApiAuthorization(75, "DescribeTopicPartitions", (
        _topics(Op.DESCRIBE, "topics[].name", when="topics listed"),
        _topics(Op.DESCRIBE, "every topic", scope=Scope.FILTER, when="topics empty (all topics)")),
        "a listed topic the principal may not describe answers TOPIC_AUTHORIZATION_FAILED (no partitions, "
        "zero topic id) after the others; all-topics requests leave them out"),
]

KAFKA_API_AUTHORIZATION: Mapping[int, ApiAuthorization] = MappingProxyType({a.api_key: a for a in _TABLE})


def permits(check: Check, allowed: Callable[[AclOperation, ResourceType, str], bool], name: str) -> bool:
    """Whether `check` passes for the resource `name` (ignored for the cluster),
    with `allowed(operation, resource type, name)` the authorizer's decision
    (a by-resource-type check is asked with name None)."""
    if check.unless is not None and permits(check.unless, allowed, name):
        return True
    if check.resource_type == Type.CLUSTER:
        name = CLUSTER_NAME
    return allowed(check.operation, check.resource_type, None if check.by_resource_type else name)
