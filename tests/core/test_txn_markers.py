"""The transaction coordinator's marker sender over the wire (protocol.txn_markers)
against the in-process node's partition leaders: one WriteTxnMarkers per leader,
each partition's answer in the shard's sender contract."""

import pytest

from rafka.core.errors import InvalidProducerEpoch, NetworkException
from rafka.core.records import decode_batches
from rafka.core.transaction_shard import PARTITION_DELETED, TxnMarker
from rafka.protocol.network import NodeConnections
from rafka.protocol.txn_markers import WireMarkerSender
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.core


@pytest.fixture
def node(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 2}) as node:
        yield node


def sender(node, refreshed):
    async def refresh():
        refreshed.append(True)
    return WireMarkerSender(NodeConnections(client_id="markers", request_timeout_ms=5_000), image=node.image,
                            refresh=refresh, request_timeout_ms=5_000)


def marker(topic, partition, *, epoch=0, commit=True):
    return TxnMarker(topic, partition, producer_id=7, producer_epoch=epoch, coordinator_epoch=0, commit=commit)


def test_markers__written_to_each_leader__a_deleted_topic_dropped(node):
    refreshed = []
    send = sender(node, refreshed)
    answers = node.call(send([marker("orders", 0), marker("orders", 1), marker("gone", 0)]))
    assert answers == {("orders", 0): None, ("orders", 1): None, ("gone", 0): PARTITION_DELETED}
    for p in (0, 1):
        log = node.endpoint("orders", p).replica.log
        (header, _), = decode_batches(log.read(0, 1 << 20))
        assert header.is_control and header.producer_id == 7
    assert refreshed == []


def test_markers__a_leaders_error_per_partition__an_unreachable_leader_retriable_then_the_image_refreshed(node):
    refreshed = []
    send = sender(node, refreshed)
    node.call(send([marker("orders", 0, epoch=3)]))
    answers = node.call(send([marker("orders", 0, epoch=1)]))   # older than the producer's epoch there
    assert isinstance(answers[("orders", 0)], InvalidProducerEpoch)
    server = next(s for s in node.servers if s.port == node.image().leader_endpoint("orders", 1)[0][1])
    node.call(server.stop())
    answers = node.call(send([marker("orders", 0, epoch=3, commit=False), marker("orders", 1)]))
    assert answers[("orders", 0)] is None
    assert isinstance(answers[("orders", 1)], NetworkException) and answers[("orders", 1)].retriable
    node.call(send([marker("orders", 0, epoch=3)]))
    assert refreshed == [True]   # asked once, before the send after the retriable failure
