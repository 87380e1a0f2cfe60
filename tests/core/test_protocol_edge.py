"""A broker's node (protocol.edge) in front of the actors' nodes, in process:
what clients see (Kafka's shape: brokers only), how requests reach the actor
they are for (relayed as bytes, or split and merged), and what a client gets
for work that is not on this broker or whose actor cannot be reached."""

import asyncio
import dataclasses
import datetime

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.create_acls.v3 import request as create_acls_v3
from kio.schema.create_topics.v7 import request as create_topics_v7
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.update_features.v1 import request as update_v1
from kio.static.primitive import i8, i16, i32, i32Timedelta

from rafka.core.acl import CLUSTER_NAME, AclOperation, ResourceType
from rafka.core.actor_names import CONTROLLER_NAME
from rafka.core.cluster_image import broker_view, build_image
from rafka.protocol.connection import Connection
from tests.core.protocol_node import ProtocolNode
from tests.core.test_protocol_partitions import batch, fetch_request, produce_request

pytestmark = pytest.mark.core


@pytest.fixture()
def node(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 2}, edge=True) as node:
        yield node


def exchange(node, *requests):
    async def go():
        connection = await Connection.open("127.0.0.1", node.port)
        try:
            return [await connection.request(r) for r in requests]
        finally:
            await connection.close()
    return asyncio.run(go())


def both_partitions(request_type, field, parts):
    """A request naming partitions 0 and 1 of "orders" (Produce or Fetch v12)."""
    (topic,) = getattr(request_type, field)
    return dataclasses.replace(request_type, **{field: (dataclasses.replace(topic, **parts),)})


def test_metadata_and_find_coordinator__name_the_broker_only(node):
    (metadata,) = exchange(node, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                 include_topic_authorized_operations=False))
    assert [(int(b.node_id), b.host, int(b.port)) for b in metadata.brokers] == [(0, "127.0.0.1", node.port)]
    assert int(metadata.controller_id) == 0
    orders = next(t for t in metadata.topics if t.name == "orders")
    assert {(int(p.partition_index), int(p.leader_id), tuple(p.replica_nodes), tuple(p.isr_nodes))
            for p in orders.partitions} == {(0, 0, (0,), (0,)), (1, 0, (0,), (0,))}
    (coordinator,) = exchange(node, FindCoordinatorRequest(key_type=i8(0), coordinator_keys=("g",)))
    (found,) = coordinator.coordinators
    assert (found.error_code, int(found.node_id), int(found.port)) == (ErrorCode.none, 0, node.port)


def test_produce__one_partition_relayed_as_bytes__two_split_and_merged(node):
    (one,) = exchange(node, produce_request(batch(b"a")))
    assert node.edge.relayed_requests >= 1 and node.edge.split_requests == 0
    assert [p.error_code for p in one.responses[0].partition_responses] == [ErrorCode.none]
    two = both_partitions(produce_request(batch(b"b")), "topic_data", {"partition_data": (
        produce_v9.PartitionProduceData(index=i32(0), records=batch(b"b")),
        produce_v9.PartitionProduceData(index=i32(1), records=batch(b"c")))})
    (answer,) = exchange(node, two)
    assert node.edge.split_requests == 1
    (topic,) = answer.responses   # one entry for the topic, its partitions from both parts
    assert sorted((int(p.index), p.error_code, int(p.base_offset)) for p in topic.partition_responses) == [
        (0, ErrorCode.none, 1), (1, ErrorCode.none, 0)]
    assert node.endpoints[("orders", 1)].replica.log.log_end_offset == 1


def test_fetch_spanning_actors__answers_when_one_has_data_not_after_the_others_wait(node):
    """The part with records answers at once; the other's wait (20 s here) is
    abandoned and it is read again without waiting: the client gets both."""
    exchange(node, produce_request(batch(b"x", b"y")))
    request = fetch_request(0, max_wait_ms=20_000)
    (topic,) = request.topics
    second = dataclasses.replace(topic.partitions[0], partition=i32(1))
    request = dataclasses.replace(request, topics=(dataclasses.replace(topic, partitions=(
        topic.partitions[0], second)),))

    async def go():
        connection = await Connection.open("127.0.0.1", node.port)
        try:
            answer = await asyncio.wait_for(connection.request(request), 10)
            again = await asyncio.wait_for(connection.request(dataclasses.replace(
                request, max_wait=i32Timedelta.parse(datetime.timedelta(0)))), 10)
            return answer, again
        finally:
            await connection.close()
    answer, again = asyncio.run(go())
    (fetched,) = answer.responses
    by_partition = {int(p.partition_index): p for p in fetched.partitions}
    assert sorted(by_partition) == [0, 1]
    assert len(by_partition[0].records) > 0 and int(by_partition[0].high_watermark) == 2
    assert by_partition[1].error_code == ErrorCode.none and int(by_partition[1].high_watermark) == 0
    # the abandoned wait does not hold the client's next fetch of that partition
    assert {int(p.partition_index) for p in again.responses[0].partitions} == {0, 1}


def test_fetch_spanning_actors__the_requests_max_bytes_bounds_the_whole_answer(node):
    """Kafka's one budget per Fetch (ReplicaManager.readFromLog): each actor's part
    was read with the whole max_bytes; merged, the first partition with records is
    whole, and one that would take the total past max_bytes answers no records
    this time (a librdkafka response past receive.message.max.bytes fails for good)."""
    big = b"v" * 3_000
    exchange(node, produce_request(batch(big)), produce_request(batch(big), partition=1))
    request = fetch_request(0)
    (topic,) = request.topics
    request = dataclasses.replace(request, max_bytes=i32(4_000), topics=(dataclasses.replace(topic, partitions=(
        topic.partitions[0], dataclasses.replace(topic.partitions[0], partition=i32(1)))),))
    (topic,) = request.topics
    reversed_request = dataclasses.replace(request, topics=(dataclasses.replace(
        topic, partitions=tuple(reversed(topic.partitions))),))
    answer, reversed_answer = exchange(node, request, reversed_request)
    for fetched, first in ((answer, 0), (reversed_answer, 1)):   # the request's order decides, not the actors'
        sizes = [(int(p.partition_index), len(p.records)) for p in fetched.responses[0].partitions]
        assert [index for index, _ in sizes] == [first, 1 - first], sizes
        assert sizes[0][1] > 3_000 and sizes[1][1] == 0, sizes
        assert all(p.error_code == ErrorCode.none and int(p.high_watermark) == 1
                   for p in fetched.responses[0].partitions)
    (both,) = exchange(node, dataclasses.replace(request, max_bytes=i32(10_000)))
    assert all(len(p.records) > 3_000 for p in both.responses[0].partitions)


def test_partition_led_by_another_broker__not_leader_or_follower__and_no_leader_while_it_has_no_node(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 4}, edge=True, brokers=2) as node:
        image = node.image()
        on_broker = {p.partition: p.replica_brokers[0] for p in image.topics["orders"].partitions}
        assert set(on_broker.values()) == {0, 1}
        elsewhere = next(p for p, b in on_broker.items() if b == 1)
        here = next(p for p, b in on_broker.items() if b == 0)
        refused, accepted = exchange(node, produce_request(batch(b"a"), partition=elsewhere),
                                     produce_request(batch(b"a"), partition=here))
        assert refused.responses[0].partition_responses[0].error_code == ErrorCode.not_leader_or_follower
        assert accepted.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert node.endpoints[("orders", elsewhere)].replica.log.log_end_offset == 0
        view = broker_view(image)
        assert list(view.nodes) == [0]   # broker 1 runs no node here: named nowhere
        assert view.topics["orders"].partitions[elsewhere].leader_node == -1
        assert view.topics["orders"].partitions[elsewhere].offline_nodes == (1,)


def _replica_server(node, partition: int = 0):
    replica_node = node.image().nodes[node.image().node_of_actor(node.image().replica_actor("orders", partition, 0))]
    return next(s for s in node.servers if s.started and s.port == replica_node.port)


def test_actor_unreachable__retriable_error_and_the_client_connection_stays(node):
    """A replica whose node is gone (restarting) past the edge's wait for it: the
    edge answers NOT_LEADER_OR_FOLLOWER for its partition, as for any partition not
    led here, and keeps serving the connection."""
    server = _replica_server(node)
    node.edge.upstream_open_wait_ms = 200
    node.call(server.stop())

    async def go():
        connection = await Connection.open("127.0.0.1", node.port)
        try:
            first = await connection.request(produce_request(batch(b"a")))
            second = await connection.request(produce_request(batch(b"b"), partition=1))
            return first, second
        finally:
            await connection.close()
    first, second = asyncio.run(go())
    assert first.responses[0].partition_responses[0].error_code == ErrorCode.not_leader_or_follower
    assert second.responses[0].partition_responses[0].error_code == ErrorCode.none


def test_actor_not_listening_yet__the_requests_to_it_wait_in_order__none_answered_for_it(node):
    """A replica the image names that does not accept connections yet (its process
    starting): the edge tries it again while the client's requests to it wait
    behind; once it listens, both are written in the order sent. Before, the
    first was answered NOT_LEADER_OR_FOLLOWER at once and the second relayed once
    the replica listened, so an idempotent producer's second batch was written
    first and its retried first batch refused OUT_OF_ORDER_SEQUENCE_NUMBER."""
    from tests.harness import wait_until
    server = _replica_server(node)
    port = server.port
    node.call(server.stop())
    edge = node.edge

    async def go():
        connection = await Connection.open("127.0.0.1", node.port)
        try:
            first = asyncio.ensure_future(connection.request(produce_request(batch(b"a"))))
            second = asyncio.ensure_future(connection.request(produce_request(batch(b"b"))))
            # the edge is trying the replica: its open for this connection holds the lock
            await asyncio.to_thread(wait_until, lambda: any(
                lock.locked() for (_, endpoint), lock in list(edge._opening.items()) if endpoint[1] == port),
                timeout_s=10, what="the edge trying the replica")
            server.requested_port = port
            await asyncio.to_thread(node.call, server.start())
            return await first, await second
        finally:
            await connection.close()
    first, second = asyncio.run(go())
    answers = [(a.responses[0].partition_responses[0].error_code, a.responses[0].partition_responses[0].base_offset)
               for a in (first, second)]
    assert answers == [(ErrorCode.none, 0), (ErrorCode.none, 1)]


def test_client_connection_closed__its_upstream_connections_close(node):
    exchange(node, produce_request(batch(b"a")), produce_request(batch(b"b"), partition=1))

    async def channels():
        return len(node.edge._channels)
    for _ in range(100):   # the close runs on the node's loop: each call waits a turn of it
        if node.call(channels()) == 0:
            break
    assert node.call(channels()) == 0


def _create_topics(name: str):
    return create_topics_v7.CreateTopicsRequest(
        topics=(create_topics_v7.CreatableTopic(name=name, num_partitions=i32(1), replication_factor=i16(1),
                                                assignments=(), configs=()),),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)), validate_only=False)


def _controller_server(node):
    endpoint = node.image().nodes[node.image().node_of_actor(CONTROLLER_NAME)]
    return next(s for s in node.servers if s.started and s.port == endpoint.port)


def test_topic_administration__relayed_to_the_controller_again_on_a_new_connection_when_the_first_was_lost(node):
    """The broker's connection to the controller's node is lost between two
    CreateTopics of one client connection: the second is sent again on a new
    connection and the controller answers it (here: a node that is not the
    controller, NOT_CONTROLLER, which only the controller's node answers)."""
    controller = _controller_server(node)

    async def go():
        connection = await Connection.open("127.0.0.1", node.port)
        try:
            first = await connection.request(_create_topics("a"))
            for conn in list(controller._connections.values()):   # the controller's side drops them
                conn.abort()
            second = await connection.request(_create_topics("b"))
            return first, second
        finally:
            await connection.close()
    first, second = asyncio.run(go())
    assert [t.error_code for t in first.topics] == [ErrorCode.not_controller]
    assert [t.error_code for t in second.topics] == [ErrorCode.not_controller]


def test_topic_administration__controller_unreachable__request_timed_out_not_not_controller(node):
    """As Kafka's forwarding answers a request it could not forward: retriable
    (librdkafka takes NOT_CONTROLLER as the topic's final answer)."""
    node.call(_controller_server(node).stop())
    (answer,) = exchange(node, _create_topics("a"))
    assert [t.error_code for t in answer.topics] == [ErrorCode.request_timed_out]
    (answer,) = exchange(node, update_v1.UpdateFeaturesRequest(feature_updates=(update_v1.FeatureUpdateKey(
        feature="group.version", max_version_level=i16(1), upgrade_type=i8(1)),), validate_only=False))
    assert answer.error_code == ErrorCode.request_timed_out and answer.results == ()


def test_topic_administration__envelope_refused_by_the_controller__request_timed_out_and_not_sent_again(
        node, monkeypatch):
    """A refused envelope (its answer holds no inner answer: a misconfiguration)
    is answered here as an unreachable controller's request is, once: sending it
    again would be refused again."""
    from rafka.protocol import edge
    unwrapped = []
    monkeypatch.setattr(edge.envelope, "unwrap", lambda answer: unwrapped.append(answer))   # None: refused
    (answer,) = exchange(node, _create_topics("a"))
    assert [t.error_code for t in answer.topics] == [ErrorCode.request_timed_out]
    assert len(unwrapped) == 1


def test_produce__the_next_request_reaches_the_actor_while_the_first_waits_for_its_acks(node):
    """A relayed Produce lets its client connection's next request start once it
    is written to the actor (as the actor's Produce does once appended), so a
    producer's requests in flight reach the leader together. A stand-in for the
    leader's node holds what it gets for a moment: both Produce requests of one
    client connection arrive in it before the first is answered."""
    image = node.image()
    name = image.replica_actor("orders", 0, 0)
    leader = image.nodes[image.node_of_actor(name)]
    held: list[bytes] = []

    async def stand_in(reader, writer):   # holds Produce frames for 1 s, then forwards them in order
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", leader.port)
        deadline = asyncio.get_running_loop().time() + 1.0
        while len(held) < 2:
            try:
                size = await asyncio.wait_for(reader.readexactly(4), deadline - asyncio.get_running_loop().time())
            except asyncio.TimeoutError:
                break
            frame = size + await reader.readexactly(int.from_bytes(size, "big"))
            if frame[4:6] != b"\x00\x00":   # the edge's login (ApiVersions, SASL): passed on at once
                upstream_writer.write(frame)
                answer_size = await upstream_reader.readexactly(4)
                writer.write(answer_size + await upstream_reader.readexactly(int.from_bytes(answer_size, "big")))
                continue
            held.append(frame)
        arrived_together = len(held)
        for frame in held:
            upstream_writer.write(frame)
        for _ in range(arrived_together):
            size = await upstream_reader.readexactly(4)
            writer.write(size + await upstream_reader.readexactly(int.from_bytes(size, "big")))
        while frame := await reader.read(1 << 16):   # anything later: passed on as it comes
            upstream_writer.write(frame)
            writer.write(await upstream_reader.read(1 << 16))
        upstream_writer.close()

    async def start():
        server = await asyncio.start_server(stand_in, "127.0.0.1", 0)
        return server, server.sockets[0].getsockname()[1]
    server, port = node.call(start())
    node._apply(node.metadata.handle_register_node(name, "127.0.0.1", port, "0")[0])
    node._image = build_image(node.metadata, version=2)
    node.view = broker_view(node._image)

    async def go():
        connection = await Connection.open("127.0.0.1", node.port)
        try:
            return await asyncio.gather(connection.request(produce_request(batch(b"a"))),
                                        connection.request(produce_request(batch(b"b"))))
        finally:
            await connection.close()
    first, second = asyncio.run(go())
    node.call(_close(server))
    assert len(held) == 2, "the second Produce waited for the first one's answer"
    assert [first.responses[0].partition_responses[0].error_code,
            second.responses[0].partition_responses[0].error_code] == [ErrorCode.none, ErrorCode.none]
    assert int(second.responses[0].partition_responses[0].base_offset) == \
        int(first.responses[0].partition_responses[0].base_offset) + 1


async def _close(server):
    server.close()


def _create_acls(principal: str):
    return create_acls_v3.CreateAclsRequest(creations=(create_acls_v3.AclCreation(
        resource_type=i8(ResourceType.CLUSTER), resource_name=CLUSTER_NAME, resource_pattern_type=i8(3),
        principal=principal, host="*", operation=i8(AclOperation.ALTER), permission_type=i8(3)),))


def test_acl_changes__relayed_to_the_controller__refused_here_when_the_clients_principal_may_not(node):
    """The relay reaches the controller on the broker's own login, so the broker
    authorizes the client's principal first: on an open cluster anyone may until a
    binding names the cluster; after that an anonymous CreateAcls is refused at the
    broker, not relayed, and changes nothing."""
    (created,) = exchange(node, _create_acls("User:admin"))
    assert [r.error_code for r in created.results] == [ErrorCode.none]
    assert len(node.metadata.acl_bindings) == 1 and node.edge.relayed_requests == 1
    (refused,) = exchange(node, _create_acls("User:ANONYMOUS"))
    assert [r.error_code for r in refused.results] == [ErrorCode.cluster_authorization_failed]
    assert len(node.metadata.acl_bindings) == 1 and node.edge.relayed_requests == 1


def test_transaction_apis__routed_to_the_coordinator_here__not_coordinator_when_it_runs_elsewhere(node):
    """InitProducerId without a transactional id is answered here; with one, and
    AddPartitionsToTxn, EndTxn and DescribeTransactions, go to the transaction
    coordinator's node when it runs on this broker; ListTransactions asks every one
    here. Moved to broker 1 (no broker node of this one): NOT_COORDINATOR from
    here, and ListTransactions lists nothing."""
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    from kio.schema.list_transactions.v1.request import ListTransactionsRequest
    from kio.static.primitive import i64

    from rafka.core.actor_names import transaction_coordinator_actor_name

    def init(transactional_id):
        return InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout=i32Timedelta.parse(
            datetime.timedelta(seconds=30)), producer_id=i64(-1), producer_epoch=i16(-1))
    listing = ListTransactionsRequest(state_filters=("Empty", "Bogus"), producer_id_filters=(),
                                      duration_filter=i64(-1))
    # (an Empty transaction's start time is -1, which kio's reader refuses: "nobody" is described)
    idempotent, transactional, described, listed = exchange(
        node, init(None), init("routed"), DescribeTransactionsRequest(transactional_ids=("nobody",)), listing)
    assert (idempotent.error_code, transactional.error_code) == (ErrorCode.none, ErrorCode.none)
    assert int(transactional.producer_id) == node.transactions.shard.metadata["routed"].producer_id
    assert [s.error_code for s in described.transaction_states] == [ErrorCode.transactional_id_not_found]
    assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [("routed", "Empty")]
    assert listed.unknown_state_filters == ("Bogus",)

    actor = transaction_coordinator_actor_name(0)
    endpoint = node.metadata.nodes[actor]
    node._apply(node.metadata.handle_register_node(actor, endpoint.host, endpoint.port, "1")[0])
    node._rebuild_image()
    transactional, described, listed = exchange(
        node, init("routed"), DescribeTransactionsRequest(transactional_ids=("routed",)), listing)
    assert transactional.error_code == ErrorCode.not_coordinator
    assert [s.error_code for s in described.transaction_states] == [ErrorCode.not_coordinator]
    assert (listed.error_code, listed.transaction_states) == (ErrorCode.none, ())


@pytest.mark.parametrize("split", [False, True], ids=["relayed-whole", "split-some-refused-here"])
def test_controller_mutation_throttle__the_broker_mutes_the_clients_connection_for_it(tmp_path, split):
    """The controller's throttle time (controller_mutation_rate 10/s: a bucket of
    100; 105 partitions taken, the next topic refused with 500 ms to wait) comes
    back through the broker's edge, which mutes the client's connection for it,
    as Kafka's broker does for a forwarded answer: the request after starts only
    once the time has passed. Also when the request was split: a topic the client
    may not create answered here, the rest relayed."""
    from rafka.core.acl import AclBinding, AclPermissionType, PatternType
    from rafka.protocol.connection import SaslLogin
    from rafka.protocol.sasl import SaslListener
    from tests.core.test_protocol_topic_admin import StandInController
    from tests.core.test_sasl_scram import Users

    class Controller(StandInController):
        async def alter_topic_config(self, *args, **kwargs):
            raise AssertionError("not asked here")
    users = Users()
    users.add("alice", "alice-secret")
    secured = dict(sasl=SaslListener(users.credential_for), require_sasl=True) if split else {}
    with ProtocolNode(tmp_path, {"orders": 1}, edge=True, topic_admin=Controller(), **secured) as node:
        node.call(node.alter_client_quotas([([("client-id", "rafka")], [("controller_mutation_rate", 10.0)])]))
        if split:   # alice may create every topic but "forbidden"
            node.call(node.create_acls([AclBinding(ResourceType.TOPIC, "*", PatternType.LITERAL, "User:alice", "*",
                                                   AclOperation.CREATE, AclPermissionType.ALLOW),
                                        AclBinding(ResourceType.TOPIC, "forbidden", PatternType.LITERAL, "User:alice",
                                                   "*", AclOperation.CREATE, AclPermissionType.DENY)]))
        wide = dataclasses.replace(_create_topics("wide"), topics=(dataclasses.replace(
            _create_topics("wide").topics[0], num_partitions=i32(105)),))
        refused_next = _create_topics("next")
        if split:
            refused_next = dataclasses.replace(refused_next, topics=refused_next.topics
                                               + _create_topics("forbidden").topics)

        async def go():
            login = SaslLogin("SCRAM-SHA-256", "alice", "alice-secret") if split else None
            connection = await Connection.open("127.0.0.1", node.port, sasl=login)
            try:
                await connection.request(wide)
                refused = await connection.request(refused_next)
                loop = asyncio.get_running_loop()
                sent_s = loop.time()
                await connection.request(_create_topics("after"))
                return refused, loop.time() - sent_s
            finally:
                await connection.close()
        created, waited_s = asyncio.run(go())
        split_requests = node.edge.split_requests
    assert [t.error_code for t in created.topics] == [ErrorCode.throttling_quota_exceeded] + (
        [ErrorCode.topic_authorization_failed] if split else [])
    assert split_requests == (1 if split else 0)
    assert 400 <= created.throttle_time.total_seconds() * 1000 <= 500
    assert waited_s >= 0.35
