"""Authorization on every request, through dispatch on the in-process node with
SASL required (no binding: no access): a table of handlers, each asked once for
what the caller may not do (Kafka's error, and the node's state unchanged) and
once for what it may (served). At the actors' nodes and through a broker's node
(protocol.edge), which must refuse before it relays and relay only what is
permitted.

alice may WRITE and READ `orders`, READ group `billing`, and nothing else; bob may
READ `orders` and group `billing`; `secret` is no one's."""

import asyncio
import datetime

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from rafka.core.acl import AclBinding, AclOperation as Op, AclPermissionType, PatternType, ResourceType
from rafka.protocol.authorization import (HANDLER_WHEN, PER_RESOURCE_WHEN, WHEN, Decision, Gate, decide_with,
                                          names_at)
from rafka.core.api_authorization import KAFKA_API_AUTHORIZATION
from rafka.protocol.connection import Connection, SaslLogin
from rafka.protocol.entities import load_request_schema, make, module_of
from rafka.protocol.sasl import SaslListener
from tests.core.protocol_node import ProtocolNode
from tests.core.test_protocol_partitions import batch, produce_request
from tests.core.test_sasl_scram import Users

pytestmark = pytest.mark.core
SECONDS_5 = i32Timedelta.parse(datetime.timedelta(seconds=5))


def allow(principal, resource_type, name, operation, pattern=PatternType.LITERAL):
    return AclBinding(resource_type, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)


GRANTS = [allow("User:alice", ResourceType.TOPIC, "orders", Op.WRITE),
          allow("User:alice", ResourceType.TOPIC, "orders", Op.READ),
          allow("User:alice", ResourceType.GROUP, "billing", Op.READ),
          allow("User:bob", ResourceType.TOPIC, "orders", Op.READ),
          allow("User:bob", ResourceType.GROUP, "billing", Op.READ)]


@pytest.fixture(scope="module", params=[False, True], ids=["actor-nodes", "broker-edge"])
def node(tmp_path_factory, request):
    users = Users()
    for user in ("alice", "bob", "admin"):
        users.add(user, f"{user}-secret")
    with ProtocolNode(tmp_path_factory.mktemp("authz"), {"orders": 1, "secret": 1}, edge=request.param,
                      sasl=SaslListener(users.credential_for), require_sasl=True,
                      super_users=frozenset({"User:admin"})) as node:
        node.call(node.create_acls(GRANTS))
        yield node


def ask(node, user, *requests):
    async def go():
        connection = await Connection.open("127.0.0.1", node.port,
                                           sasl=SaslLogin("SCRAM-SHA-256", user, f"{user}-secret"))
        try:
            return [await connection.request(r) for r in requests]
        finally:
            await connection.close()
    return asyncio.run(go())


def state(node):
    """What a request could change: logs, topics and their configs, ACLs, groups and offsets."""
    groups = node.call(node.coordinator.list_groups())
    offsets = {g["group"]: node.call(node.coordinator.fetch_offsets(g["group"])) for g in groups}
    return ({k: e.replica.log.log_end_offset for k, e in node.endpoints.items()},
            {name: (len(t.partitions), dict(t.config)) for name, t in node.metadata.topics.items()},
            set(node.metadata.acl_bindings), sorted((g["group"], g["state"]) for g in groups), offsets)


# --- requests -----------------------------------------------------------------------------------

def req(api_key, version, **fields):
    return make(load_request_schema(api_key, version), **fields)


def mod(api_key, version):
    return module_of(load_request_schema(api_key, version))


def fetch(topic, *, replica_id=-1):
    m = mod(1, 12)
    return req(1, 12, cluster_id=None, replica_id=i32(replica_id), max_wait=i32Timedelta.parse(datetime.timedelta(0)),
               min_bytes=i32(1), max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(0),
               session_epoch=i32(-1), topics=(m.FetchTopic(topic=topic, partitions=(m.FetchPartition(
                   partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0), last_fetched_epoch=i32(-1),
                   log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),)),),
               forgotten_topics_data=(), rack_id="")


def list_offsets(topic):
    m = mod(2, 7)
    return req(2, 7, replica_id=i32(-1), isolation_level=i8(0), topics=(m.ListOffsetsTopic(name=topic, partitions=(
        m.ListOffsetsPartition(partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(-1)),)),))


def epoch_end(topic):
    m = mod(23, 4)
    return req(23, 4, replica_id=i32(-2), topics=(m.OffsetForLeaderTopic(topic=topic, partitions=(
        m.OffsetForLeaderPartition(partition=i32(0), current_leader_epoch=i32(-1), leader_epoch=i32(0)),)),))


def metadata(*topics):
    m = mod(3, 12)
    return req(3, 12, topics=None if not topics else tuple(m.MetadataRequestTopic(topic_id=None, name=t)
                                                          for t in topics),
               allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def commit(group, *topics):
    m = mod(8, 8)
    return req(8, 8, group_id=group, generation_id_or_member_epoch=i32(-1), member_id="", group_instance_id=None,
               topics=tuple(m.OffsetCommitRequestTopic(name=t, partitions=(m.OffsetCommitRequestPartition(
                   partition_index=i32(0), committed_offset=i64(7), committed_leader_epoch=i32(-1),
                   committed_metadata=""),)) for t in topics))


def offset_fetch(group, *topics):
    m = mod(9, 7)
    return req(9, 7, group_id=group, require_stable=False, topics=tuple(
        m.OffsetFetchRequestTopic(name=t, partition_indexes=(i32(0),)) for t in topics) if topics else None)


def join(group):
    m = mod(11, 7)
    return req(11, 7, group_id=group, session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
               rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)), member_id="",
               group_instance_id=None, protocol_type="consumer",
               protocols=(m.JoinGroupRequestProtocol(name="range", metadata=b""),))


def heartbeat(group):
    return req(12, 4, group_id=group, generation_id=i32(1), member_id="m", group_instance_id=None)


def sync(group):
    return req(14, 5, group_id=group, generation_id=i32(1), member_id="m", group_instance_id=None,
               protocol_type=None, protocol_name=None, assignments=())


def leave(group):
    m = mod(13, 5)
    return req(13, 5, group_id=group, members=(m.MemberIdentity(member_id="m", group_instance_id=None, reason=None),))


def describe_groups(*groups):
    return req(15, 5, groups=groups, include_authorized_operations=False)


def delete_groups(*groups):
    return req(42, 2, groups_names=groups)


def offset_delete(group, topic):
    m = mod(47, 0)
    return req(47, 0, group_id=group, topics=(m.OffsetDeleteRequestTopic(name=topic, partitions=(
        m.OffsetDeleteRequestPartition(partition_index=i32(0)),)),))


def create_topics(*names):
    m = mod(19, 7)
    return req(19, 7, topics=tuple(m.CreatableTopic(name=n, num_partitions=i32(1), replication_factor=i16(1),
                                                    assignments=(), configs=()) for n in names),
               timeout=SECONDS_5, validate_only=False)


def delete_topics(*names):
    m = mod(20, 6)
    return req(20, 6, topics=tuple(m.DeleteTopicState(name=n, topic_id=None) for n in names), timeout=SECONDS_5)


def create_partitions(name):
    m = mod(37, 3)
    return req(37, 3, topics=(m.CreatePartitionsTopic(name=name, count=i32(3), assignments=None),),
               timeout=SECONDS_5, validate_only=False)


def describe_configs(resource_type, name):
    m = mod(32, 4)
    return req(32, 4, resources=(m.DescribeConfigsResource(resource_type=i8(resource_type), resource_name=name,
                                                           configuration_keys=None),),
               include_synonyms=False, include_documentation=False)


def alter_configs(name):
    m = mod(44, 1)
    return req(44, 1, resources=(m.AlterConfigsResource(resource_type=i8(2), resource_name=name, configs=(
        m.AlterableConfig(name="retention.ms", config_operation=i8(0), value="1000"),)),), validate_only=False)


def init_producer_id(transactional_id=None):
    return req(22, 4, transactional_id=transactional_id, transaction_timeout=SECONDS_5, producer_id=i64(-1),
               producer_epoch=i16(-1))


def find_coordinator(key_type, key):
    return req(10, 4, key_type=i8(key_type), coordinator_keys=(key,))


def end_txn(transactional_id):
    return req(26, 4, transactional_id=transactional_id, producer_id=i64(0), producer_epoch=i16(0), committed=True)


def add_offsets(transactional_id, group):
    return req(25, 4, transactional_id=transactional_id, producer_id=i64(0), producer_epoch=i16(0), group_id=group)


def add_partitions(transactional_id, topic):
    m = mod(24, 3)
    return req(24, 3, v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=i64(0),
               v3_and_below_producer_epoch=i16(0),
               v3_and_below_topics=(m.AddPartitionsToTxnTopic(name=topic, partitions=(i32(0),)),))


def describe_transactions(transactional_id):
    return req(65, 0, transactional_ids=(transactional_id,))


def write_markers(topic):
    m = mod(27, 1)
    return req(27, 1, markers=(m.WritableTxnMarker(producer_id=i64(0), producer_epoch=i16(0), transaction_result=True,
                                                   topics=(m.WritableTxnMarkerTopic(name=topic,
                                                                                    partition_indexes=(i32(0),)),),
                                                   coordinator_epoch=i32(0)),))


def describe_producers(topic):
    m = mod(61, 0)
    return req(61, 0, topics=(m.TopicRequest(name=topic, partition_indexes=(i32(0),)),))


def produce_txn(topic, transactional_id):
    import dataclasses
    return dataclasses.replace(produce_request(batch(b"x"), topic=topic), transactional_id=transactional_id)


# --- what an answer says ------------------------------------------------------------------------

def partition_codes(answer, topics_field, partitions_field):
    return {p.error_code for t in getattr(answer, topics_field) for p in getattr(t, partitions_field)}


CODES = {
    0: lambda a: partition_codes(a, "responses", "partition_responses"),
    1: lambda a: partition_codes(a, "responses", "partitions"),
    2: lambda a: partition_codes(a, "topics", "partitions"),
    23: lambda a: {p.error_code for t in a.topics for p in t.partitions},
    3: lambda a: {t.error_code for t in a.topics},
    8: lambda a: partition_codes(a, "topics", "partitions"),
    9: lambda a: {a.error_code} | partition_codes(a, "topics", "partitions") - {ErrorCode.none},
    10: lambda a: {c.error_code for c in a.coordinators},
    11: lambda a: {a.error_code}, 12: lambda a: {a.error_code}, 13: lambda a: {a.error_code},
    14: lambda a: {a.error_code},
    15: lambda a: {g.error_code for g in a.groups},
    42: lambda a: {r.error_code for r in a.results},
    47: lambda a: {a.error_code} | partition_codes(a, "topics", "partitions") - {ErrorCode.none},
    19: lambda a: {t.error_code for t in a.topics},
    20: lambda a: {r.error_code for r in a.responses},
    37: lambda a: {r.error_code for r in a.results},
    32: lambda a: {r.error_code for r in a.results},
    44: lambda a: {r.error_code for r in a.responses},
    22: lambda a: {a.error_code},
    24: lambda a: {p.partition_error_code for t in a.results_by_topic_v3_and_below for p in t.results_by_partition},
    25: lambda a: {a.error_code}, 26: lambda a: {a.error_code},
    27: lambda a: {p.error_code for m in a.markers for t in m.topics for p in t.partitions},
    65: lambda a: {t.error_code for t in a.transaction_states},
    61: lambda a: partition_codes(a, "topics", "partitions"),
}

TOPIC, GROUP, CLUSTER, TXN = (ErrorCode.topic_authorization_failed, ErrorCode.group_authorization_failed,
                              ErrorCode.cluster_authorization_failed, ErrorCode.transactional_id_authorization_failed)

# (scenario, user, request, Kafka's refusal)
REFUSED = [
    ("produce to a topic not granted", "alice", lambda: produce_request(batch(b"x"), topic="secret"), TOPIC),
    ("produce with read only", "bob", lambda: produce_request(batch(b"x")), TOPIC),
    ("produce with a transactional id not granted", "alice", lambda: produce_txn("orders", "t1"), TXN),
    ("fetch a topic not granted", "alice", lambda: fetch("secret"), TOPIC),
    ("fetch as a follower without cluster action", "alice", lambda: fetch("orders", replica_id=1), TOPIC),
    ("list offsets of a topic not granted", "bob", lambda: list_offsets("secret"), TOPIC),
    ("offset for leader epoch of a topic not granted", "bob", lambda: epoch_end("secret"), TOPIC),
    ("metadata of a topic not granted", "alice", lambda: metadata("secret"), TOPIC),
    ("metadata of a topic not granted that does not exist", "alice", lambda: metadata("nowhere"), TOPIC),
    ("commit in a group not granted", "alice", lambda: commit("other", "orders"), GROUP),
    ("commit a topic not granted", "alice", lambda: commit("billing", "secret"), TOPIC),
    ("offset fetch of a group not granted", "bob", lambda: offset_fetch("other", "orders"), GROUP),
    ("join a group not granted", "alice", lambda: join("other"), GROUP),
    ("heartbeat in a group not granted", "alice", lambda: heartbeat("other"), GROUP),
    ("sync in a group not granted", "alice", lambda: sync("other"), GROUP),
    ("leave a group not granted", "alice", lambda: leave("other"), GROUP),
    ("describe a group not granted", "alice", lambda: describe_groups("other"), GROUP),
    ("delete a group with read only", "bob", lambda: delete_groups("billing"), GROUP),
    ("delete offsets with read only on the group", "alice", lambda: offset_delete("billing", "orders"), GROUP),
    ("create a topic", "alice", lambda: create_topics("invoices"), TOPIC),
    ("delete a topic", "alice", lambda: delete_topics("orders"), TOPIC),
    ("delete a topic not granted that does not exist", "alice", lambda: delete_topics("nowhere"), TOPIC),
    ("create partitions", "alice", lambda: create_partitions("orders"), TOPIC),
    ("describe configs of a topic not granted", "bob", lambda: describe_configs(2, "secret"), TOPIC),
    ("describe configs with read and write only", "alice", lambda: describe_configs(2, "orders"), TOPIC),
    ("describe configs of a broker", "bob", lambda: describe_configs(4, "0"), CLUSTER),
    ("alter configs of a topic", "alice", lambda: alter_configs("orders"), TOPIC),
    ("idempotent producer id without write anywhere", "bob", lambda: init_producer_id(), CLUSTER),
    ("transactional producer id not granted", "alice", lambda: init_producer_id("t1"), TXN),
    ("find the coordinator of a group not granted", "alice", lambda: find_coordinator(0, "other"), GROUP),
    ("find the coordinator of a transactional id not granted", "alice", lambda: find_coordinator(1, "t1"), TXN),
    ("end a transaction not granted", "alice", lambda: end_txn("t1"), TXN),
    ("add offsets to a transaction not granted", "alice", lambda: add_offsets("t1", "billing"), TXN),
    ("add partitions to a transaction not granted", "alice", lambda: add_partitions("t1", "orders"), TXN),
    ("describe a transaction not granted", "alice", lambda: describe_transactions("t1"), TXN),
    ("write transaction markers without cluster action", "alice", lambda: write_markers("orders"), CLUSTER),
    ("describe producers of a topic not granted", "alice", lambda: describe_producers("secret"), TOPIC),
]


@pytest.mark.parametrize("scenario, user, make_request, code", REFUSED, ids=[r[0] for r in REFUSED])
def test_refused__kafkas_error__and_nothing_changes(node, scenario, user, make_request, code):
    request = make_request()
    before = state(node)
    (answer,) = ask(node, user, request)
    assert CODES[request.__api_key__](answer) == {code}
    assert state(node) == before


# (scenario, user, request): served, no authorization error in the answer
ALLOWED = [
    ("produce to a granted topic", "alice", lambda: produce_request(batch(b"ok"))),
    ("fetch a granted topic", "bob", lambda: fetch("orders")),
    ("list offsets of a granted topic", "bob", lambda: list_offsets("orders")),
    ("describe producers of a topic granted read", "bob", lambda: describe_producers("orders")),
    ("metadata of a granted topic", "bob", lambda: metadata("orders")),
    ("commit a granted topic in a granted group", "alice", lambda: commit("billing", "orders")),
    ("offset fetch in a granted group", "bob", lambda: offset_fetch("billing", "orders")),
    ("describe a granted group", "bob", lambda: describe_groups("billing")),
    ("describe configs as a super user", "admin", lambda: describe_configs(2, "orders")),
    ("idempotent producer id with write on a topic", "alice", lambda: init_producer_id()),
    ("find the coordinator of a granted group", "bob", lambda: find_coordinator(0, "billing")),
    ("a super user deletes a group", "admin", lambda: delete_groups("nobodys")),
]
_AUTHORIZATION_CODES = {TOPIC, GROUP, CLUSTER, TXN}


@pytest.mark.parametrize("scenario, user, make_request", ALLOWED, ids=[r[0] for r in ALLOWED])
def test_allowed__served(node, scenario, user, make_request):
    request = make_request()
    (answer,) = ask(node, user, request)
    codes = CODES[request.__api_key__](answer)
    assert not codes & _AUTHORIZATION_CODES
    assert codes <= {ErrorCode.none, ErrorCode.group_id_not_found}


def test_metadata__all_topics__only_the_ones_the_principal_may_describe(node):
    (alices,) = ask(node, "alice", metadata())
    assert {t.name for t in alices.topics} == {"orders"}
    (admins,) = ask(node, "admin", metadata())
    assert {"orders", "secret"} <= {t.name for t in admins.topics}


def test_commit__granted_and_refused_topics__the_granted_one_committed_only(node):
    (answer,) = ask(node, "alice", commit("billing", "orders", "secret"))
    assert {t.name: t.partitions[0].error_code for t in answer.topics} == {"orders": ErrorCode.none,
                                                                          "secret": TOPIC}
    committed = node.call(node.coordinator.fetch_offsets("billing"))
    assert committed[("orders", 0)][0] == 7 and ("secret", 0) not in committed


def test_produce__granted_and_refused_topics__the_granted_one_written_only(node):
    import dataclasses
    one = produce_request(batch(b"a"))
    both = dataclasses.replace(one, topic_data=one.topic_data + produce_request(batch(b"b"), topic="secret").topic_data)
    before = {k: e.replica.log.log_end_offset for k, e in node.endpoints.items()}
    (answer,) = ask(node, "alice", both)
    assert {t.name: t.partition_responses[0].error_code for t in answer.responses} == {"orders": ErrorCode.none,
                                                                                      "secret": TOPIC}
    after = {k: e.replica.log.log_end_offset for k, e in node.endpoints.items()}
    assert after[("orders", 0)] == before[("orders", 0)] + 1 and after[("secret", 0)] == before[("secret", 0)]


def test_offset_fetch_of_every_topic__only_topics_it_may_describe(node):
    ask(node, "admin", commit("billing", "orders", "secret"))
    (answer,) = ask(node, "bob", offset_fetch("billing"))
    assert {t.name for t in answer.topics} == {"orders"}


def test_list_groups__only_groups_it_may_describe(node):
    ask(node, "admin", commit("billing", "orders"), commit("audit", "orders"))
    (bobs,) = ask(node, "bob", req(16, 4, states_filter=()))
    assert {g.group_id for g in bobs.groups} == {"billing"}
    (admins,) = ask(node, "admin", req(16, 4, states_filter=()))
    assert {"billing", "audit"} <= {g.group_id for g in admins.groups}


def test_a_binding_added_and_removed_takes_effect_at_once(node):
    binding = allow("User:bob", ResourceType.TOPIC, "sec", Op.DESCRIBE, PatternType.PREFIXED)
    node.call(node.create_acls([binding]))
    (seen,) = ask(node, "bob", metadata("secret"))
    assert CODES[3](seen) == {ErrorCode.none}
    from rafka.core.acl import AclBindingFilter
    node.call(node.delete_acls([AclBindingFilter(principal="User:bob", resource_name="sec",
                                                 pattern_type=PatternType.PREFIXED)]))
    (hidden,) = ask(node, "bob", metadata("secret"))
    assert CODES[3](hidden) == {TOPIC}


def test_edge__a_refused_request_is_not_relayed(node):
    if node.edge is None:
        pytest.skip("no broker node")
    relayed = node.edge.relayed_requests
    ask(node, "alice", produce_request(batch(b"x"), topic="secret"), commit("other", "orders"),
        delete_topics("orders"))
    assert node.edge.relayed_requests == relayed


# --- the table read as data ---------------------------------------------------------------------

def test_every_condition_of_the_table_is_judged_somewhere():
    for api in KAFKA_API_AUTHORIZATION.values():
        for check in api.checks:
            assert check.when in WHEN or check.when in PER_RESOURCE_WHEN or check.when in HANDLER_WHEN, \
                (api.name, check.when)


def test_names_at__paths_alternatives_and_notes():
    request = create_topics("a", "b")
    assert names_at(request, "topics[].name") == ["a", "b"]
    assert names_at(delete_topics("x"), "topics[].name / topic_names[]") == ["x"]
    assert names_at(req(20, 5, topic_names=("y",), timeout=SECONDS_5), "topics[].name / topic_names[]") == ["y"]
    assert names_at(commit("g"), "group_id") == ["g"]
    assert names_at(find_coordinator(0, "k"), "key / coordinator_keys[]") == ["k"]


def test_decide__a_request_refusal_stops_at_the_first_failing_check():
    class Image:   # a stand-in allowing WRITE on topic orders only
        super_users = frozenset()

        def authorize(self, principal, host, operation, resource):
            return (operation, resource) == (Op.WRITE, (ResourceType.TOPIC, "orders"))
    request_gate = Gate(Image(), "User:x", "")
    refused = decide_with(request_gate, 0, 9, produce_txn("orders", "t1"))
    assert refused.refusal is not None and refused.refusal.code == TXN
    partial = decide_with(request_gate, 0, 9, produce_request(batch(b"x"), topic="secret"))
    assert partial.refusal is None and partial.refused_names(ResourceType.TOPIC) == {"secret"}
    assert decide_with(request_gate, 0, 9, produce_request(batch(b"x"))) == Decision()
