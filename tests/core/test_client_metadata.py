"""client.metadata: the clients' metadata over the Kafka protocol, from any node.

Against a real in-process node (ProtocolNode: real server and handlers), and with
a scripted network that answers from chosen cluster images (the real Metadata
handler's answers), to show what a stale node's answer may and may not change."""

import concurrent.futures
import socket
import uuid

import pytest

from rafka.client.metadata import MetadataCache, parse_bootstrap_servers
from rafka.protocol.network import ClientNetwork
from rafka.core.actor_names import coordinator_actor_name
from rafka.core.cluster_image import ClusterImage, PartitionImage, TopicImage
from rafka.core.errors import LeaderNotAvailable, NetworkException, RequestTimedOut, UnknownTopicOrPartition
from rafka.core.metadata import NodeEndpoint
from rafka.protocol import cluster_requests
from rafka.protocol.handlers.metadata import metadata_response
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.core


def free_port() -> int:
    """A port nobody listens on (bound, noted, closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def network():
    network = ClientNetwork(client_id="metadata-test", request_timeout_ms=5_000)
    yield network
    network.close()


def test_topics_leaders_coordinator_configs_and_producer_id__from_the_bootstrap_node(tmp_path, network):
    with ProtocolNode(tmp_path, {"orders": 2}) as node:
        metadata = MetadataCache(node.bootstrap, network)
        assert metadata.partition_count("orders") == 2
        image = node.image()
        for partition in (0, 1):
            assert metadata.leader_address("orders", partition) == image.leader_endpoint("orders", partition)
        coordinator = image.nodes[image.coordinator_nodes[0]]
        assert coordinator.actor == coordinator_actor_name(0)
        assert metadata.coordinator_address("billing") == (coordinator.host, coordinator.port)
        assert metadata.max_message_bytes("orders") == 1_048_588          # Kafka's default
        assert set(metadata.node_addresses()) == {(n.host, n.port) for n in image.nodes.values()}
        assert metadata.topic_names() == ["orders"]                         # __consumer_offsets is internal
        first = metadata.ask_any_node(cluster_requests.init_producer_id_request(),
                                      cluster_requests.init_producer_id_answer, what="a producer id")
        second = metadata.ask_any_node(cluster_requests.init_producer_id_request(),
                                       cluster_requests.init_producer_id_answer, what="a producer id")
        assert first[1] == second[1] == 0 and first[0] != second[0] and min(first[0], second[0]) >= 0


def test_a_cached_topic__asks_no_node_until_invalidated(tmp_path, network):
    with ProtocolNode(tmp_path, {"orders": 1}) as node:
        metadata = MetadataCache(node.bootstrap, network)
        assert metadata.needs_refresh("orders")
        metadata.partition_count("orders")
        assert not metadata.needs_refresh("orders")
        node.call(node.servers[0].stop())   # the only address it knows to ask first is gone
        assert metadata.leader_address("orders", 0)[1] == 0   # from the cache
        metadata.invalidate("orders")
        assert metadata.needs_refresh("orders")


def test_the_bootstrap_node_gone__any_node_the_cluster_listed_answers(tmp_path, network):
    """The controller's endpoint (the bootstrap address) stops answering: a client
    that has seen the node list asks the others."""
    with ProtocolNode(tmp_path, {"orders": 1}) as node:
        metadata = MetadataCache(node.bootstrap, network, max_wait_ms=10_000)
        expected = metadata.leader_address("orders", 0)
        node.call(node.servers[0].stop())
        metadata.invalidate("orders")
        assert metadata.leader_address("orders", 0) == expected
        assert not metadata.needs_refresh("orders")
        assert metadata.coordinator_address("g") == ("127.0.0.1", node.coordinator_port)


def test_a_dead_bootstrap_address_first__the_next_one_answers(tmp_path, network):
    with ProtocolNode(tmp_path, {"orders": 1}) as node:
        metadata = MetadataCache(f"127.0.0.1:{free_port()},{node.bootstrap}", network, max_wait_ms=10_000)
        assert metadata.partition_count("orders") == 1


def test_every_known_node_gone__bootstrap_discovered_again(tmp_path, network):
    """A whole cluster restarted on new ports (a local cluster's actors bind ports
    of the moment): every address the cache knew refuses; the bootstrap callable
    (rafka's in-cluster clients ask the controller) is asked again and answers
    with the new listener."""
    listeners = []
    with ProtocolNode(tmp_path / "before", {"orders": 1}) as before:
        listeners.append(before.bootstrap)
        metadata = MetadataCache(lambda: listeners[-1], network, max_wait_ms=20_000)
        old_leader = metadata.leader_address("orders", 0)[0]
    with ProtocolNode(tmp_path / "after", {"orders": 1}) as after:
        listeners.append(after.bootstrap)
        metadata.invalidate("orders")
        assert metadata.leader_address("orders", 0)[0] == after.image().leader_endpoint("orders", 0)[0] != old_leader


def test_no_node_answers__request_timed_out_after_max_wait(network):
    metadata = MetadataCache(f"127.0.0.1:{free_port()}", network, max_wait_ms=300, retry_backoff_ms=50)
    with pytest.raises(RequestTimedOut, match="no node answered the metadata of topic 'orders'"):
        metadata.partition_count("orders")
    with pytest.raises(NetworkException, match="no bootstrap server"):
        MetadataCache(None, network).partition_count("orders")


def test_unknown_topic__typed_error_and_nothing_cached(tmp_path, network):
    with ProtocolNode(tmp_path, {"orders": 1}) as node:
        metadata = MetadataCache(node.bootstrap, network)
        with pytest.raises(UnknownTopicOrPartition):
            metadata.partition_count("missing")
        assert metadata.needs_refresh("missing")
        with pytest.raises(UnknownTopicOrPartition):
            metadata.leader_address("orders", 5)
        with pytest.raises(UnknownTopicOrPartition):
            metadata.max_message_bytes("missing")


@pytest.mark.parametrize("servers", ["nohost", "host:", ":9092", "host:port", "a:1,b"])
def test_bad_bootstrap_servers__value_error(servers):
    with pytest.raises(ValueError, match="is not host:port"):
        parse_bootstrap_servers(servers)


def test_bootstrap_servers__string_list_or_pairs():
    assert parse_bootstrap_servers("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap_servers(["a:1", ("b", 2)]) == [("a", 1), ("b", 2)]
    assert parse_bootstrap_servers(None) == []


def test_asked_on_the_network_thread__refused_not_deadlocked(tmp_path, network):
    with ProtocolNode(tmp_path, {"orders": 1}) as node:
        metadata = MetadataCache(node.bootstrap, network)
        done = concurrent.futures.Future()

        def on_loop():
            try:
                done.set_result(metadata.partition_count("orders"))
            except BaseException as error:
                done.set_exception(error)
        network.loop.call_soon_threadsafe(on_loop)
        with pytest.raises(RuntimeError, match="would wait on itself"):
            done.result(timeout=10)


# --- what a stale node's answer may change ----------------------------------------------

TOPIC_ID, NEW_TOPIC_ID = uuid.uuid4(), uuid.uuid4()
NODES = {n: NodeEndpoint(n, f"actor-{n}", "127.0.0.1", 9000 + n) for n in (1, 2, 3)}


def image(leader: int, epoch: int, *, topic_id=TOPIC_ID, partitions: int = 1) -> ClusterImage:
    parts = tuple(PartitionImage(partition=p, leader_node=leader, leader_epoch=epoch, replica_nodes=(1, 2, 3),
                                 isr_nodes=(1, 2, 3), offline_nodes=(), leader_replica=0 if leader > 0 else -1)
                  for p in range(partitions))
    return ClusterImage(version=epoch, cluster_id="c", controller_node=1, nodes=NODES,
                        topics={"orders": TopicImage("orders", topic_id, False, parts)}, coordinator_nodes=())


class ScriptedNetwork:
    """Answers each Metadata request from the next image of `images` (the real
    handler's answer), whichever node was asked."""

    def __init__(self, images) -> None:
        self.images = list(images)
        self.thread = None   # no loop thread of its own: every caller may wait
        self.nodes = type("Nodes", (), {"request_timeout_ms": 1_000, "backing_off": lambda self, _: False})()
        self.asked = []

        self.refused = set()

    def submit(self, address, request, *, timeout_ms=None):
        self.asked.append(address)
        answered = concurrent.futures.Future()
        if address in self.refused:
            answered.set_exception(NetworkException(f"could not connect to {address}"))
        else:
            answered.set_result(metadata_response(self.images.pop(0), request, 12))
        return answered


def test_the_bootstrap_asked_first__and_discovered_again_after_it_failed():
    """The bootstrap address (rafka's controller, whose image is the newest) is
    asked before the node that answered last; a bootstrap that failed is looked up
    again (a restarted controller listens on a new port)."""
    network = ScriptedNetwork([image(leader=2, epoch=5), image(leader=3, epoch=6), image(leader=3, epoch=7)])
    discovered = []

    def discover():
        discovered.append(1)
        return "127.0.0.1:9001"
    metadata = MetadataCache(discover, network)
    metadata.leader_address("orders", 0)
    network.refused.add(("127.0.0.1", 9001))
    metadata.invalidate("orders")
    assert metadata.leader_address("orders", 0)[1] == 6
    assert network.asked == [("127.0.0.1", 9001), ("127.0.0.1", 9001), ("127.0.0.1", 9002)] and len(discovered) == 1
    network.refused.clear()
    metadata.invalidate("orders")
    assert metadata.leader_address("orders", 0)[1] == 7
    assert network.asked[-1] == ("127.0.0.1", 9001) and len(discovered) == 2


def test_a_stale_answer__never_moves_a_partition_back_in_leader_epoch():
    network = ScriptedNetwork([image(leader=2, epoch=5), image(leader=1, epoch=4), image(leader=3, epoch=6)])
    metadata = MetadataCache("127.0.0.1:9001", network)
    assert metadata.leader_address("orders", 0) == (("127.0.0.1", 9002), 5)
    metadata.invalidate("orders")
    assert metadata.leader_address("orders", 0) == (("127.0.0.1", 9002), 5)   # epoch 4 answer ignored
    metadata.invalidate("orders")
    assert metadata.leader_address("orders", 0) == (("127.0.0.1", 9003), 6)


def test_a_topic_created_again__taken_whole_whatever_its_epochs():
    network = ScriptedNetwork([image(leader=2, epoch=5), image(leader=1, epoch=0, topic_id=NEW_TOPIC_ID)])
    metadata = MetadataCache("127.0.0.1:9001", network)
    assert metadata.leader_address("orders", 0)[1] == 5
    metadata.invalidate("orders")
    assert metadata.leader_address("orders", 0) == (("127.0.0.1", 9001), 0)


def test_an_answer_from_before_partitions_were_added__kept_out():
    network = ScriptedNetwork([image(leader=2, epoch=5, partitions=3), image(leader=2, epoch=5, partitions=1)])
    metadata = MetadataCache("127.0.0.1:9001", network)
    assert metadata.partition_count("orders") == 3
    metadata.invalidate("orders")
    assert metadata.partition_count("orders") == 3


def test_a_partition_without_leader__leader_not_available_and_asked_again():
    network = ScriptedNetwork([image(leader=-1, epoch=5), image(leader=3, epoch=6)])
    metadata = MetadataCache("127.0.0.1:9001", network)
    with pytest.raises(LeaderNotAvailable):
        metadata.leader_address("orders", 0)
    assert metadata.needs_refresh("orders")
    assert metadata.leader_address("orders", 0) == (("127.0.0.1", 9003), 6)
