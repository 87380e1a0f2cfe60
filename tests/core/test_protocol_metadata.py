"""Node registration in the controller's metadata, the cluster image built from it,
and the Metadata v10-12 answer on the wire (read back with kio, as a client does)."""

import asyncio
import random
import uuid

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from rafka.core.actor_names import CONTROLLER_NAME
from rafka.core.cluster_image import build_image
from rafka.core.metadata import ClusterMetadata, id_as_uuid
from rafka.protocol.dispatch import DispatchTable, Dispatcher
from tests.core.helpers import assign_shells
from rafka.protocol.handlers import api_versions, metadata
from tests.core.test_protocol_dispatch import read_response, request_frame

pytestmark = pytest.mark.core


def apply(state, records):
    for record in records:
        state.replay(record)


def register(state, actor, port, rack=None):
    records, node = state.handle_register_node(actor, "127.0.0.1", port, rack)
    apply(state, records)
    return node


@pytest.fixture()
def state():
    state = ClusterMetadata()
    apply(state, state.handle_start())
    records, _ = state.handle_create_topic("orders", 2, 3, None, [0, 1, 2], rng=random.Random(1))
    apply(state, records)
    assign_shells(state, "orders")
    register(state, CONTROLLER_NAME, 9092)
    for p in range(2):
        for r in range(3):
            if (p, r) != (1, 2):    # replica 2 of partition 1 has not started serving yet
                register(state, state.replica_actor("orders", p, r), 10_000 + 10 * p + r,
                         rack=str(state.topic("orders").partitions[p].broker_of(r)))
    return state


def test_register_node__an_actor_keeps_its_node_id_across_restarts_and_new_actors_get_new_ids(state):
    before = state.nodes[state.replica_actor("orders", 0, 1)]
    again = register(state, state.replica_actor("orders", 0, 1), 20_000, rack=before.rack)
    assert again.node_id == before.node_id and again.port == 20_000
    assert state.handle_register_node(again.actor, again.host, again.port, again.rack)[0] == []  # no change
    fresh = register(state, "coordinator:0", 30_000)
    assert fresh.node_id == max(n.node_id for n in state.nodes.values()) and fresh.node_id not in {
        n.node_id for n in state.nodes.values() if n.actor != "coordinator:0"}
    reloaded = ClusterMetadata()   # replaying the log gives the same registry
    for name in ("orders",):
        assert name in state.topics
    apply(reloaded, [{"type": "node", "node_id": n.node_id, "actor": n.actor, "host": n.host, "port": n.port,
                      "rack": n.rack} for n in state.nodes.values()])
    assert reloaded.nodes == state.nodes and reloaded.next_node_id == state.next_node_id


def test_build_image__leaders_replicas_and_isr_as_node_ids(state):
    image = build_image(state, version=7)
    orders = image.topics["orders"]
    assert orders.topic_id == id_as_uuid(state.topic("orders").topic_id) and not orders.is_internal
    for p, partition in enumerate(orders.partitions):
        meta = state.topic("orders").partitions[p]
        leader_actor = state.replica_actor("orders", p, meta.leader)
        assert partition.leader_node == state.nodes[leader_actor].node_id
        assert partition.leader_epoch == meta.leader_epoch
    missing = state.topic("orders").partitions[1]
    assert len(orders.partitions[1].replica_nodes) == 2   # the unregistered replica has no node id yet
    assert image.controller_node == state.nodes[CONTROLLER_NAME].node_id
    assert set(image.nodes) == {n.node_id for n in state.nodes.values()}
    assert sorted(missing.replicas) == [0, 1, 2]


def test_build_image__a_leader_without_an_endpoint_is_no_leader(state):
    leader = state.topic("orders").partitions[0].leader
    del state.nodes[state.replica_actor("orders", 0, leader)]
    image = build_image(state, version=8)
    assert image.topics["orders"].partitions[0].leader_node == -1


def ask(image, version, topics):
    dispatcher = Dispatcher(DispatchTable([api_versions.ROUTE, metadata.route(lambda: image)]))
    request_type = load_request_schema(metadata.API_KEY, version)
    module = __import__(request_type.__module__, fromlist=["_"])
    wanted = None if topics is None else tuple(
        module.MetadataRequestTopic(topic_id=t if isinstance(t, uuid.UUID) else uuid.UUID(int=0),
                                    name=None if isinstance(t, uuid.UUID) else t) for t in topics)
    options = dict(topics=wanted, allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    if version == 10:
        options["include_cluster_authorized_operations"] = False
    frame = asyncio.run(dispatcher.dispatch(request_frame(metadata.API_KEY, version, request_type(**options))))
    return read_response(frame, metadata.API_KEY, version)[1]


@pytest.mark.parametrize("version", [10, 11, 12])
def test_metadata__all_topics_with_brokers_controller_and_cluster_id(state, version):
    image = build_image(state, version=1)
    response = ask(image, version, None)
    assert response.cluster_id == state.cluster_id and response.controller_id == image.controller_node
    assert {(b.node_id, b.host, b.port) for b in response.brokers} == {
        (n.node_id, n.host, n.port) for n in image.nodes.values()}
    (orders,) = response.topics
    assert orders.name == "orders" and orders.error_code == ErrorCode.none
    assert [(p.partition_index, p.leader_id) for p in orders.partitions] == [
        (p.partition, p.leader_node) for p in image.topics["orders"].partitions]


def test_metadata__unknown_and_illegal_names_and_ids_get_kafkas_codes_and_nothing_is_created(state):
    image = build_image(state, version=1)
    response = ask(image, 12, ["orders", "nope", "bad name!", uuid.uuid4(), image.topics["orders"].topic_id])
    codes = [(t.name, t.error_code) for t in response.topics]
    assert codes == [("orders", ErrorCode.none), ("nope", ErrorCode.unknown_topic_or_partition),
                     ("bad name!", ErrorCode.invalid_topic_exception), (None, ErrorCode.unknown_topic_id),
                     ("orders", ErrorCode.none)]
    assert set(state.topics) == {"orders"}
    assert ask(image, 12, []).topics == ()


def test_metadata__a_leaderless_partition_is_leader_not_available(state):
    leader = state.topic("orders").partitions[0].leader
    del state.nodes[state.replica_actor("orders", 0, leader)]
    (orders,) = ask(build_image(state, version=2), 11, ["orders"]).topics
    assert (orders.partitions[0].leader_id, orders.partitions[0].error_code) == (-1, ErrorCode.leader_not_available)
    assert orders.partitions[1].error_code == ErrorCode.none


def find(image, version, *keys, key_type=0):
    from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest as V3
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as V4
    from kio.static.primitive import i8
    from rafka.protocol.handlers import find_coordinator
    dispatcher = Dispatcher(DispatchTable([api_versions.ROUTE, find_coordinator.route(lambda: image)]))
    request = (V4(key_type=i8(key_type), coordinator_keys=keys) if version == 4
               else V3(key=keys[0], key_type=i8(key_type)))
    frame = asyncio.run(dispatcher.dispatch(request_frame(find_coordinator.API_KEY, version, request)))
    return read_response(frame, find_coordinator.API_KEY, version)[1]


def test_find_coordinator__the_groups_offsets_partition_coordinator_node(state):
    from rafka.core.offsets_schema import partition_for_group
    apply(state, state.handle_create_topic("__consumer_offsets", 3, 3, None, [0, 1, 2], rng=random.Random(2))[0])
    assert find(build_image(state, version=3), 3, "g").error_code == ErrorCode.coordinator_not_available
    nodes = [register(state, f"coordinator:{p}", 40_000 + p) for p in range(3)]
    image = build_image(state, version=4)
    answer = find(image, 3, "payments")
    expected = nodes[partition_for_group("payments", 3)]
    assert (answer.error_code, answer.node_id, answer.port) == (ErrorCode.none, expected.node_id, expected.port)
    batched = find(image, 4, "payments", "other")
    assert [(c.key, c.node_id) for c in batched.coordinators] == [
        ("payments", expected.node_id), ("other", nodes[partition_for_group("other", 3)].node_id)]
    assert find(image, 3, "tx", key_type=1).error_code == ErrorCode.coordinator_not_available   # no txn topic
    assert find(image, 3, "tx", key_type=2).error_code == ErrorCode.invalid_request


def test_find_coordinator__key_type_1__the_transaction_state_partitions_coordinator(state):
    from rafka.core.transaction_log import partition_for
    apply(state, state.handle_create_topic("__transaction_state", 3, 3, None, [0, 1, 2], rng=random.Random(2))[0])
    assert find(build_image(state, version=3), 3, "txn-1", key_type=1).error_code == ErrorCode.coordinator_not_available
    nodes = [register(state, f"txn-coordinator:{p}", 41_000 + p) for p in range(3)]
    image = build_image(state, version=4)
    assert image.topics["__transaction_state"].is_internal
    expected = nodes[partition_for("txn-1", 3)]
    answer = find(image, 3, "txn-1", key_type=1)
    assert (answer.error_code, answer.node_id, answer.port) == (ErrorCode.none, expected.node_id, expected.port)
    batched = find(image, 4, "txn-1", "txn-2", key_type=1)
    assert [(c.key, c.node_id) for c in batched.coordinators] == [
        ("txn-1", expected.node_id), ("txn-2", nodes[partition_for("txn-2", 3)].node_id)]
    assert find(image, 3, "txn-1").error_code == ErrorCode.coordinator_not_available   # key type 0: no offsets topic


def test_find_coordinator__no_offsets_topic_yet__coordinator_not_available(state):
    answer = find(build_image(state, version=1), 4, "g")
    assert [(c.error_code, c.node_id) for c in answer.coordinators] == [(ErrorCode.coordinator_not_available, -1)]


def test_metadata__brokers_carry_no_rack_so_librdkafka_can_parse_many_nodes(state):
    # librdkafka's Metadata parser fails ("Bad message format") past ~37 brokers
    # with short hosts when each carries a rack (see handlers/metadata.py)
    assert any(n.rack is not None for n in state.nodes.values())   # known, not sent
    response = ask(build_image(state, version=1), 12, None)
    assert response.brokers and all(b.rack is None for b in response.brokers)


def test_find_coordinator__error_message_is_kafkas__none_with_a_coordinator(state):
    """FindCoordinatorResponse sets error_message from Errors.message(), never null:
    Errors.NONE's is its name."""
    assert find(build_image(state, version=1), 3, "g").error_message == "The coordinator is not available."
    apply(state, state.handle_create_topic("__consumer_offsets", 1, 1, None, [0], rng=random.Random(2))[0])
    register(state, "coordinator:0", 40_000)
    image = build_image(state, version=2)
    assert find(image, 3, "g").error_message == "NONE"
    assert [c.error_message for c in find(image, 4, "g").coordinators] == ["NONE"]
    assert find(image, 3, "tx", key_type=2).error_message.startswith("This most likely occurs because of a request")


def test_describe_configs__error_message_empty_for_a_topic_and_an_unknown_one(state):
    """ConfigHelper.describeConfigs sets no message for either: the field's default,
    "" (not null)."""
    from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
    from kio.static.primitive import i8
    from rafka.protocol.handlers import describe_configs
    image = build_image(state, version=2)   # the fixture's state has "orders"
    assert "orders" in image.topics
    dispatcher = Dispatcher(DispatchTable([api_versions.ROUTE, describe_configs.route(lambda: image)]))
    request = DescribeConfigsRequest(resources=tuple(
        DescribeConfigsResource(resource_type=i8(2), resource_name=name, configuration_keys=None)
        for name in ("orders", "nope")), include_synonyms=False, include_documentation=False)
    frame = asyncio.run(dispatcher.dispatch(request_frame(describe_configs.API_KEY, 4, request)))
    known, unknown = read_response(frame, describe_configs.API_KEY, 4)[1].results
    assert (known.error_code, known.error_message) == (ErrorCode.none, "") and known.configs
    assert (unknown.error_code, unknown.error_message) == (ErrorCode.unknown_topic_or_partition, "")
