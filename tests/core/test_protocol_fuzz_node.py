"""Fuzz the whole table a node serves: mutated Produce, Fetch, ListOffsets,
OffsetCommit, OffsetFetch, FindCoordinator, Metadata, CreateAcls, DescribeAcls,
DeleteAcls, ElectLeaders, AlterPartitionReassignments,
ListPartitionReassignments, DescribeClientQuotas, AlterClientQuotas,
DeleteRecords, DescribeCluster, DescribeLogDirs, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs and OffsetForLeaderEpoch frames go through the
in-process node's dispatcher. Whatever the bytes: no exception but a
ProtocolError, bounded time, and no state change that no answer acknowledged
(the log grows only when a Produce answer says NONE, its start moves only when
a DeleteRecords answer says NONE; committed offsets change only when an
OffsetCommit answer says NONE; ACL bindings only when a CreateAcls or
DeleteAcls answer says NONE for some entry; partitions' leaders and replicas
only when an ElectLeaders or AlterPartitionReassignments answer says NONE for
some partition; client quotas only when an AlterClientQuotas answer says NONE
for some entry). The same frames through a broker's edge whose clients have
byte-rate quotas (Produce and Fetch measured, throttled answers rewritten)
crash nothing either; nor do they from principals granted nothing on a node
with SASL required, at the actors' nodes and at a broker's edge, and those
change nothing at all."""

import datetime
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.alter_client_quotas.v0 import request as alter_quotas_v0
from kio.schema.alter_client_quotas.v1 import request as alter_quotas_v1
from kio.schema.alter_partition_reassignments.v1 import request as alter_reassignments_v1
from kio.schema.describe_client_quotas.v0 import request as describe_quotas_v0
from kio.schema.describe_client_quotas.v1 import request as describe_quotas_v1
from kio.schema.alter_configs.v2 import request as alter_configs_v2
from kio.schema.create_acls.v3 import request as create_acls_v3
from kio.schema.delete_records.v2 import request as delete_records_v2
from kio.schema.describe_cluster.v1 import request as describe_cluster_v1
from kio.schema.describe_configs.v4 import request as describe_configs_v4
from kio.schema.describe_log_dirs.v4 import request as describe_log_dirs_v4
from kio.schema.incremental_alter_configs.v1 import request as incremental_alter_configs_v1
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_v4
from kio.schema.delete_acls.v3 import request as delete_acls_v3
from kio.schema.describe_acls.v3 import request as describe_acls_v3
from kio.schema.elect_leaders.v2 import request as elect_leaders_v2
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.list_offsets.v7 import request as list_v7
from kio.schema.list_partition_reassignments.v0 import request as list_reassignments_v0
from kio.schema.offset_commit.v8 import request as commit_v8
from kio.schema.offset_fetch.v8 import request as offset_fetch_v8
from kio.schema.produce.v9 import request as produce_v9
from kio.static.primitive import f64, i8, i16, i32, i32Timedelta, i64

from rafka.core.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from rafka.core.records import RecordInput, encode_batch
from rafka.protocol.dispatch import Session
from rafka.protocol.errors import ProtocolError
from rafka.protocol.sasl import SaslListener
from tests.core.protocol_node import ProtocolNode
from tests.core.test_sasl_scram import Users
from tests.core.test_protocol_dispatch import read_response, request_frame
from tests.core.test_protocol_fuzz import mutated

pytestmark = pytest.mark.core
WORK_SECONDS_MAX = 2.0
TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=1))


def seeds():
    batch = encode_batch([RecordInput(b"v", b"k", 1_000)])
    produce = produce_v9.ProduceRequest(transactional_id=None, acks=i16(-1), timeout=TIMEOUT, topic_data=(
        produce_v9.TopicProduceData(name="orders", partition_data=(
            produce_v9.PartitionProduceData(index=i32(0), records=batch),)),))
    fetch = fetch_v12.FetchRequest(
        cluster_id=None, replica_id=i32(-1), max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=i32(1),
        max_bytes=i32(1 << 16), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
        topics=(fetch_v12.FetchTopic(topic="orders", partitions=(fetch_v12.FetchPartition(
            partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0), last_fetched_epoch=i32(-1),
            log_start_offset=i64(-1), partition_max_bytes=i32(1 << 16)),)),), forgotten_topics_data=(), rack_id="")
    listing = list_v7.ListOffsetsRequest(replica_id=i32(-1), isolation_level=i8(0), topics=(list_v7.ListOffsetsTopic(
        name="orders", partitions=(list_v7.ListOffsetsPartition(partition_index=i32(0), current_leader_epoch=i32(-1),
                                                                timestamp=i64(-1)),)),))
    commit = commit_v8.OffsetCommitRequest(
        group_id="fuzzed", generation_id_or_member_epoch=i32(-1), member_id="", group_instance_id=None,
        topics=(commit_v8.OffsetCommitRequestTopic(name="orders", partitions=(commit_v8.OffsetCommitRequestPartition(
            partition_index=i32(0), committed_offset=i64(0), committed_leader_epoch=i32(-1),
            committed_metadata=""),)),))
    offsets = offset_fetch_v8.OffsetFetchRequest(groups=(offset_fetch_v8.OffsetFetchRequestGroup(
        group_id="fuzzed", topics=None),), require_stable=False)
    find = FindCoordinatorRequest(key_type=i8(0), coordinator_keys=("fuzzed",))
    create_acls = create_acls_v3.CreateAclsRequest(creations=(create_acls_v3.AclCreation(
        resource_type=i8(2), resource_name="orders", resource_pattern_type=i8(4), principal="User:alice", host="*",
        operation=i8(3), permission_type=i8(3)),))
    describe_acls = describe_acls_v3.DescribeAclsRequest(
        resource_type_filter=i8(1), resource_name_filter=None, pattern_type_filter=i8(1), principal_filter=None,
        host_filter=None, operation=i8(1), permission_type=i8(1))
    delete_acls = delete_acls_v3.DeleteAclsRequest(filters=(delete_acls_v3.DeleteAclsFilter(
        resource_type_filter=i8(2), resource_name_filter="orders", pattern_type_filter=i8(2), principal_filter=None,
        host_filter=None, operation=i8(1), permission_type=i8(1)),))
    elect = elect_leaders_v2.ElectLeadersRequest(election_type=i8(1), timeout=TIMEOUT, topic_partitions=(
        elect_leaders_v2.TopicPartitions(topic="orders", partitions=(i32(0),)),))
    elect_every = elect_leaders_v2.ElectLeadersRequest(election_type=i8(0), timeout=TIMEOUT, topic_partitions=None)
    reassign = alter_reassignments_v1.AlterPartitionReassignmentsRequest(
        timeout=TIMEOUT, allow_replication_factor_change=True, topics=(alter_reassignments_v1.ReassignableTopic(
            name="orders", partitions=(alter_reassignments_v1.ReassignablePartition(
                partition_index=i32(0), replicas=(i32(0), i32(1))), alter_reassignments_v1.ReassignablePartition(
                partition_index=i32(0), replicas=None))),))
    list_reassignments = list_reassignments_v0.ListPartitionReassignmentsRequest(
        timeout=TIMEOUT, topics=(list_reassignments_v0.ListPartitionReassignmentsTopics(
            name="orders", partition_indexes=(i32(0),)),))
    quota_seeds = []
    for version, (describe_quotas, alter_quotas) in enumerate(((describe_quotas_v0, alter_quotas_v0),
                                                               (describe_quotas_v1, alter_quotas_v1))):
        quota_seeds.append(request_frame(48, version, describe_quotas.DescribeClientQuotasRequest(
            strict=False, components=(
                describe_quotas.ComponentData(entity_type="user", match_type=i8(0), match="alice"),
                describe_quotas.ComponentData(entity_type="client-id", match_type=i8(2), match=None)))))
        quota_seeds.append(request_frame(49, version, alter_quotas.AlterClientQuotasRequest(
            validate_only=False, entries=(alter_quotas.EntryData(
                entity=(alter_quotas.EntityData(entity_type="user", entity_name="alice"),
                        alter_quotas.EntityData(entity_type="client-id", entity_name=None)),
                ops=(alter_quotas.OpData(key="producer_byte_rate", value=f64(1024.0), remove=False),
                     alter_quotas.OpData(key="consumer_byte_rate", value=f64(0.0), remove=True))),))))
    delete_records = delete_records_v2.DeleteRecordsRequest(timeout=TIMEOUT, topics=(
        delete_records_v2.DeleteRecordsTopic(name="orders", partitions=(
            delete_records_v2.DeleteRecordsPartition(partition_index=i32(0), offset=i64(-1)),)),))
    describe_cluster = describe_cluster_v1.DescribeClusterRequest(include_cluster_authorized_operations=True)
    log_dirs_every = describe_log_dirs_v4.DescribeLogDirsRequest(topics=None)
    log_dirs = describe_log_dirs_v4.DescribeLogDirsRequest(topics=(
        describe_log_dirs_v4.DescribableLogDirTopic(topic="orders", partitions=(i32(0), i32(7))),))
    describe_configs = describe_configs_v4.DescribeConfigsRequest(include_synonyms=True, resources=(
        describe_configs_v4.DescribeConfigsResource(resource_type=i8(2), resource_name="orders",
                                                    configuration_keys=None),
        describe_configs_v4.DescribeConfigsResource(resource_type=i8(4), resource_name="0",
                                                    configuration_keys=("log.retention.ms",))))
    alter_configs = alter_configs_v2.AlterConfigsRequest(validate_only=False, resources=(
        alter_configs_v2.AlterConfigsResource(resource_type=i8(2), resource_name="orders", configs=(
            alter_configs_v2.AlterableConfig(name="retention.ms", value="60000"),)),))
    incremental = incremental_alter_configs_v1.IncrementalAlterConfigsRequest(validate_only=False, resources=(
        incremental_alter_configs_v1.AlterConfigsResource(resource_type=i8(2), resource_name="orders", configs=(
            incremental_alter_configs_v1.AlterableConfig(name="retention.ms", config_operation=i8(0),
                                                         value="60000"),
            incremental_alter_configs_v1.AlterableConfig(name="cleanup.policy", config_operation=i8(2),
                                                         value="compact"))),))
    epoch_end = epoch_v4.OffsetForLeaderEpochRequest(replica_id=i32(-1), topics=(epoch_v4.OffsetForLeaderTopic(
        topic="orders", partitions=(epoch_v4.OffsetForLeaderPartition(
            partition=i32(0), current_leader_epoch=i32(0), leader_epoch=i32(0)),)),))
    return [request_frame(0, 9, produce), request_frame(1, 12, fetch), request_frame(2, 7, listing),
            request_frame(8, 8, commit), request_frame(9, 8, offsets), request_frame(10, 4, find),
            request_frame(30, 3, create_acls), request_frame(29, 3, describe_acls), request_frame(31, 3, delete_acls),
            request_frame(43, 2, elect), request_frame(43, 2, elect_every), request_frame(45, 1, reassign),
            request_frame(46, 0, list_reassignments), *quota_seeds, request_frame(21, 2, delete_records),
            request_frame(60, 1, describe_cluster), request_frame(35, 4, log_dirs_every),
            request_frame(35, 4, log_dirs), request_frame(32, 4, describe_configs),
            request_frame(33, 2, alter_configs), request_frame(44, 1, incremental), request_frame(23, 4, epoch_end)]


SEEDS = seeds()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with ProtocolNode(tmp_path_factory.mktemp("fuzz"), {"orders": 1}, brokers=2) as node:
        yield node


def acknowledged(frame: bytes, response: bytes, api_key: int) -> bool:
    """A Produce or OffsetCommit answer that reports success for some partition."""
    try:
        version = int.from_bytes(frame[2:4], "big", signed=True)
        _, body = read_response(response, api_key, version)
    except Exception:
        return False
    if api_key == 0:
        return any(p.error_code == ErrorCode.none for t in body.responses for p in t.partition_responses)
    if api_key == 30:
        return any(r.error_code == ErrorCode.none for r in body.results)
    if api_key == 31:
        return any(r.error_code == ErrorCode.none and r.matching_acls for r in body.filter_results)
    if api_key == 43:
        return any(p.error_code == ErrorCode.none for r in body.replica_election_results for p in r.partition_result)
    if api_key == 45:
        return any(p.error_code == ErrorCode.none for t in body.responses for p in t.partitions)
    if api_key == 49:
        return any(e.error_code == ErrorCode.none for e in body.entries)
    if api_key in (33, 44):
        return any(r.error_code == ErrorCode.none for r in body.responses)
    return any(p.error_code == ErrorCode.none for t in body.topics for p in t.partitions)


def state(node):
    log = node.endpoints[("orders", 0)].replica.log
    return (log.log_start_offset, log.log_end_offset,
            node.coordinator.shard.fetch_offsets("fuzzed"), frozenset(node.metadata.acl_bindings),
            node.metadata.client_quota_version,
            tuple((name, topic.partitions, topic.config) for name, topic in sorted(node.metadata.topics.items())))


# Produce, OffsetCommit, DeleteRecords, CreateAcls, DeleteAcls, AlterConfigs, ElectLeaders,
# IncrementalAlterConfigs, AlterPartitionReassignments, AlterClientQuotas
CHANGING_APIS = (0, 8, 21, 30, 31, 33, 43, 44, 45, 49)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(frame=mutated(SEEDS, min_mutations=1))
def test_fuzz__mutated_requests__protocol_errors_only__bounded__no_unacknowledged_change(node, frame):
    dispatcher = node.servers[0].dispatcher
    before = state(node)
    started = time.perf_counter()
    try:
        response = node.call(dispatcher.dispatch(frame, connection_id="fuzz"))
    except ProtocolError:
        response = None
    assert time.perf_counter() - started < WORK_SECONDS_MAX
    api_key = int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else -1
    if state(node) != before:
        assert response is not None and api_key in CHANGING_APIS and acknowledged(frame, response, api_key)


def test_fuzz__seeds_are_answered(node):
    dispatcher = node.servers[0].dispatcher
    for seed in SEEDS:
        assert node.call(dispatcher.dispatch(seed, connection_id="fuzz")) is not None


@pytest.fixture(scope="module")
def edge_node(tmp_path_factory):
    """Through a broker's edge, the fuzzing client ("test-client") over tiny
    produce and fetch quotas, so that throttled answers are rewritten too."""
    with ProtocolNode(tmp_path_factory.mktemp("fuzz-edge"), {"orders": 1}, edge=True,
                      quota_options={"quota_window_num": 2}) as node:
        node.call(node.alter_client_quotas([([("client-id", "test-client")],
                                             [("producer_byte_rate", 64.0), ("consumer_byte_rate", 64.0)])]))
        yield node


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(frame=mutated(SEEDS))
def test_fuzz__edge_with_quotas__protocol_errors_only__bounded(edge_node, frame):
    started = time.perf_counter()
    try:
        node_answer = edge_node.call(edge_node.edge.dispatch(frame, connection_id="fuzz"))
    except ProtocolError:
        node_answer = None
    assert time.perf_counter() - started < WORK_SECONDS_MAX
    if node_answer is not None:
        assert int.from_bytes(node_answer[:4], "big") == len(node_answer) - 4


def test_fuzz__edge_with_quotas__seeds_answered__throttled_in_throttle_time(edge_node):
    for seed in SEEDS:
        assert edge_node.call(edge_node.edge.dispatch(seed, connection_id="fuzz-seeds")) is not None
    assert edge_node.edge.quotas.produce.throttled_requests + edge_node.edge.quotas.fetch.throttled_requests > 0


# --- principals granted nothing, SASL required ----------------------------------------------

@pytest.fixture(scope="module")
def guarded_node(tmp_path_factory):
    """SASL required (a resource no binding names is closed) and alice granted
    orders; the fuzzing principals are granted nothing."""
    users = Users()
    users.add("alice", "alice-secret")
    with ProtocolNode(tmp_path_factory.mktemp("fuzz-guarded"), {"orders": 1}, edge=True, brokers=2,
                      sasl=SaslListener(users.credential_for), require_sasl=True) as node:
        node.call(node.create_acls([AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*",
                                               AclOperation.ALL, AclPermissionType.ALLOW)]))
        yield node


def everything(node):
    """All a request could change, whatever it is."""
    return (state(node), node.coordinator.shard.fetch_offsets("billing"),
            tuple(node.metadata.nodes.items()),
            len(node.transactions.records))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(frame=mutated(SEEDS), principal=st.sampled_from(["User:mallory", "User:ANONYMOUS"]),
       at_edge=st.booleans())
def test_fuzz__unauthorized_principals__protocol_errors_only__bounded__nothing_changes(
        guarded_node, frame, principal, at_edge):
    dispatcher = guarded_node.edge if at_edge else guarded_node.servers[1].dispatcher
    before = everything(guarded_node)
    started = time.perf_counter()
    try:
        answer = guarded_node.call(dispatcher.dispatch(frame, connection_id="fuzz-guarded",
                                                       session=Session(principal=principal)))
    except ProtocolError:
        answer = None
    assert time.perf_counter() - started < WORK_SECONDS_MAX
    if answer is not None:
        assert int.from_bytes(answer[:4], "big") == len(answer) - 4
    assert everything(guarded_node) == before


def test_fuzz__unauthorized_principals__every_seed_answered_and_refused(guarded_node):
    """Each seed, unmutated, from a principal granted nothing: answered, and
    nothing changes (the mutated ones above rest on these being refused)."""
    before = everything(guarded_node)
    for at_edge in (False, True):
        dispatcher = guarded_node.edge if at_edge else guarded_node.servers[1].dispatcher
        for seed in SEEDS:
            answer = guarded_node.call(dispatcher.dispatch(seed, connection_id="fuzz-guarded-seeds",
                                                           session=Session(principal="User:mallory")))
            assert answer is not None
    assert everything(guarded_node) == before
