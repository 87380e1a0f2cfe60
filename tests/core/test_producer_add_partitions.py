"""AddPartitionsToTxn from the producer: retried until the transaction's own
timeout (past it the coordinator has aborted the transaction itself), not only
for the delivery timeout. A request given up sooner leaves its outcome unknown
(the coordinator may have added the partitions), and an abort that then skipped
EndTxn would leave the transaction Ongoing at the coordinator until its timeout,
holding back every read_committed consumer of those partitions."""

import threading
import time

import pytest

from rafka.client.producer import Producer
from rafka.core.errors import CoordinatorLoadInProgress, RequestTimedOut
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.core
DELIVERY_TIMEOUT_MS, RETRY_BACKOFF_MS = 300, 10


def test_add_partitions_refused_past_the_delivery_timeout__still_retried__the_abort_ends_the_transaction(tmp_path):
    """The coordinator answers COORDINATOR_LOAD_IN_PROGRESS for longer than the
    delivery timeout: the record expires (abortable, as Kafka's), but the request
    goes on until the coordinator takes it, so the abort knows the partition is
    in the transaction and ends it with EndTxn (its ABORT marker on the partition),
    then bumps the epoch for the failed record (KIP-360)."""
    with ProtocolNode(tmp_path, {"orders": 1}) as node:
        shard = node.transactions.shard
        add_partitions = shard.add_partitions
        refused, retried_past_the_delivery_timeout, open_up = [], threading.Event(), threading.Event()

        async def loading_for_a_while(*args, **kwargs):
            if not open_up.is_set():
                refused.append(time.monotonic())
                if refused[-1] - refused[0] > 2 * DELIVERY_TIMEOUT_MS / 1000:
                    retried_past_the_delivery_timeout.set()
                raise CoordinatorLoadInProgress("loading (test)")
            return await add_partitions(*args, **kwargs)
        shard.add_partitions = loading_for_a_while
        producer = Producer(node.bootstrap, transactional_id="slow-add", linger_ms=0, request_timeout_ms=200,
                            delivery_timeout_ms=DELIVERY_TIMEOUT_MS, retry_backoff_ms=RETRY_BACKOFF_MS)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            sent = producer.send("orders", value=b"waits for its partition", partition=0)
            assert isinstance(sent.exception(timeout=10), RequestTimedOut)
            assert retried_past_the_delivery_timeout.wait(10), "AddPartitionsToTxn was given up"
            open_up.set()
            producer.abort_transaction(timeout=10)
            described = node.call(_describe(shard, "slow-add"))   # the expired record: KIP-360's bump after
            assert (described.state, described.producer_epoch, described.topic_partitions) == (
                "Empty", 1, frozenset())
            log = node.endpoints[("orders", 0)].replica.log
            assert (log.high_watermark, log.last_stable_offset) == (1, 1)   # the ABORT marker, nothing else
        finally:
            open_up.set()
            producer.close(timeout=10)


async def _describe(shard, transactional_id):
    return shard.describe_transaction(transactional_id)
