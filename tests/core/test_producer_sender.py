"""The producer's sender runs on its network loop: what must stay true there."""

import threading

import pytest

from rafka.client.producer import Producer
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.core


class _Metadata:
    """The node's image, with one topic ("slow") whose metadata fetch blocks, off
    the calling thread, until `release` is set: a controller that does not answer."""

    def __init__(self, node) -> None:
        self.node = node
        self.release = threading.Event()
        self.fetched_off_main_thread = threading.Event()

    def needs_refresh(self, topic: str) -> bool:
        return topic == "slow" and not self.release.is_set()

    def partition_count(self, topic: str) -> int:
        if topic == "slow" and threading.current_thread() is not threading.main_thread():
            self.fetched_off_main_thread.set()
            assert self.release.wait(10)
        return len(self.node.image().topics[topic].partitions)

    def max_message_bytes(self, topic: str) -> int:
        return 1_048_576

    def leader_address(self, topic: str, partition: int):
        return self.node.image().leader_endpoint(topic, partition)

    def invalidate(self, topic: str) -> None:
        pass


def test_a_metadata_fetch_that_blocks__never_on_the_loop__other_topics_acked_meanwhile(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 1, "slow": 1}) as node:
        producer = Producer(None, acks=1, linger_ms=0)   # no idempotence: no controller asked
        metadata = producer._metadata = _Metadata(node)
        try:
            slow = producer.send("slow", b"waits for its metadata", partition=0)
            assert metadata.fetched_off_main_thread.wait(10)
            assert producer.send("orders", b"goes now", partition=0).result(timeout=10).offset == 0
            assert not slow.done()
            metadata.release.set()
            assert slow.result(timeout=10).offset == 0
        finally:
            metadata.release.set()
            producer.close(timeout=10)


def test_a_new_producer_epoch__a_batch_sent_before_keeps_its_epoch_and_is_never_written_twice(tmp_path):
    """KIP-360 without duplicates. Batch X (partition 0) is written but its answer
    is lost; while X waits to retry, batch Y (partition 1) fails for good and the
    producer starts a new epoch. X's retry must go with the epoch and sequence it
    was written with, so the leader recognises it and answers the first offset;
    encoded again with the new epoch and sequence 0 it was written a second time
    (`rafka verify` found one: six records twice in verify-0)."""
    from kio.serial import entity_reader
    from rafka.core.errors import InvalidRecord, NetworkException
    from rafka.protocol.hot_writers import write_body
    with ProtocolNode(tmp_path, {"orders": 2}) as node:
        producer = Producer(node.bootstrap, acks="all", linger_ms=0, retry_backoff_ms=300)
        real_request = producer._network.nodes.request
        x_lost = threading.Event()

        async def request(address, body, **options):
            if body.__api_key__ != 0:   # not a Produce (metadata, producer id)
                return await real_request(address, body, **options)
            produce, _ = entity_reader(body.entity_type)(write_body(body), 0)   # as the leader reads it
            if produce.topic_data[0].partition_data[0].index == 1:
                raise InvalidRecord("this batch fails for good")
            answer = await real_request(address, body, **options)
            if not x_lost.is_set():   # X's first attempt: written, then its answer lost
                x_lost.set()
                raise NetworkException("the answer was lost")
            return answer
        producer._network.nodes.request = request
        try:
            epoch = producer.producer_epoch
            x = producer.send("orders", b"X", partition=0)
            assert x_lost.wait(10)
            with pytest.raises(InvalidRecord):
                producer.send("orders", b"Y", partition=1).result(timeout=10)
            assert producer.producer_epoch == epoch + 1
            assert x.result(timeout=10).offset == 0
            z = producer.send("orders", b"Z", partition=0).result(timeout=10)   # the new epoch, sequence 0
        finally:
            producer.close(timeout=10)
        log = node.endpoint("orders", 0).replica.log
        assert log.log_end_offset == 2 and z.offset == 1


def test_out_of_order_sequence_with_nothing_earlier_outstanding__fails_the_batch_and_logs_its_sequence(tmp_path,
                                                                                                       caplog):
    """A leader that answers OUT_OF_ORDER_SEQUENCE_NUMBER to a batch with no earlier
    batch of its partition outstanding has lost track of the producer: the batch
    fails (not retried), and the producer logs the id, epoch and sequence it sent,
    as Kafka's Sender does (a CI run saw one on a fresh topic and nothing else)."""
    from rafka.core.errors import OutOfOrderSequence
    with ProtocolNode(tmp_path, {"orders": 1}) as node:
        producer = Producer(node.bootstrap, acks="all", linger_ms=0)
        real_request = producer._network.nodes.request

        async def request(address, body, **options):
            if body.__api_key__ == 0:   # a Produce
                raise OutOfOrderSequence("the leader expected another sequence")
            return await real_request(address, body, **options)
        producer._network.nodes.request = request
        try:
            with caplog.at_level("ERROR", logger="rafka.client.producer"):
                failed = producer.send("orders", b"x", partition=0)
                with pytest.raises(OutOfOrderSequence):
                    failed.result(timeout=10)
            logged = [r.getMessage() for r in caplog.records if r.name == "rafka.client.producer"]
            assert len(logged) == 1 and f"producer id {producer.producer_id}" in logged[0]
            assert "epoch 0, sequence 0 (attempt 1" in logged[0]
        finally:
            producer.close(timeout=10)


def test_a_new_producers_first_batch_refused_for_a_moment__the_next_waits_for_it__both_written_in_order(tmp_path):
    """A leader that has never seen a producer takes any sequence as its first
    (Kafka's too). So until a batch of the producer id and epoch is acked on a
    partition, the next batch there waits: here the first is refused
    NOT_ENOUGH_REPLICAS (the ISR regrowing after a whole-cluster restart) while
    the second is sent. With both in flight the second was written first, and the
    first's retry refused OUT_OF_ORDER_SEQUENCE_NUMBER (`rafka verify`,
    restart-cluster); now both are written, in send order."""
    import asyncio

    from rafka.core.errors import NotEnoughReplicas
    with ProtocolNode(tmp_path, {"orders": 1}) as node:
        producer = Producer(node.bootstrap, acks="all", linger_ms=0, retry_backoff_ms=20)
        real_request = producer._network.nodes.request
        first_sent, release = threading.Event(), asyncio.Event()
        produces = [0]

        async def request(address, body, **options):
            if body.__api_key__ != 0:   # not a Produce (metadata, producer id)
                return await real_request(address, body, **options)
            produces[0] += 1
            if produces[0] == 1:   # the first: held, then refused, nothing written
                first_sent.set()
                await release.wait()
                raise NotEnoughReplicas("the ISR is below min.insync.replicas for now")
            return await real_request(address, body, **options)
        producer._network.nodes.request = request

        async def loop_rounds() -> None:
            for _ in range(5):
                await asyncio.sleep(0)
        try:
            first = producer.send("orders", b"first", partition=0)
            assert first_sent.wait(10)
            second = producer.send("orders", b"second", partition=0)
            asyncio.run_coroutine_threadsafe(loop_rounds(), producer._loop).result(10)
            assert produces[0] == 1   # the second waits for the first's ack
            producer._loop.call_soon_threadsafe(release.set)
            assert [first.result(timeout=10).offset, second.result(timeout=10).offset] == [0, 1]
        finally:
            producer._loop.call_soon_threadsafe(release.set)
            producer.close(timeout=10)


def test_in_flight_is_counted_per_connection__waiting_partitions_take_turns_and_grow_their_request(tmp_path):
    """Kafka's max.in.flight.requests.per.connection counts requests on a
    connection, not per partition: 8 partitions of one broker share its 5. The
    3 partitions left waiting keep their batches in the producer, where records
    sent meanwhile join them: each goes as one request once a slot frees. Counted
    per partition (rafka before), 8 requests were outstanding at once and each
    waiting partition sent two."""
    import asyncio

    from kio.serial import entity_reader
    from rafka.protocol.hot_writers import write_body
    with ProtocolNode(tmp_path, {"orders": 8}, edge=True) as node:
        producer = Producer(node.bootstrap, acks="all", linger_ms=0, batch_size=1,
                            max_in_flight_requests_per_connection=5)
        for partition in range(8):   # metadata and connection ready, outside the measure
            producer.send("orders", b"warm", partition=partition).result(timeout=10)
        real_request = producer._network.nodes.request
        gate = asyncio.Event()
        outstanding, most_outstanding, requests = [0], [0], {p: 0 for p in range(8)}
        all_sent = threading.Event()

        async def request(address, body, **options):
            if body.__api_key__ != 0:
                return await real_request(address, body, **options)
            produce, _ = entity_reader(body.entity_type)(write_body(body), 0)   # as the leader reads it
            requests[produce.topic_data[0].partition_data[0].index] += 1
            outstanding[0] += 1
            most_outstanding[0] = max(most_outstanding[0], outstanding[0])
            if outstanding[0] == 5:
                all_sent.set()
            try:
                await gate.wait()
                return await real_request(address, body, **options)
            finally:
                outstanding[0] -= 1
        producer._network.nodes.request = request
        loop_held = threading.Event()
        producer._loop.call_soon_threadsafe(loop_held.wait)   # every first batch ready before one round
        try:
            first = [producer.send("orders", b"first", partition=p) for p in range(8)]
            loop_held.set()
            assert all_sent.wait(10)
            waiting = [p for p in range(8) if requests[p] == 0]
            assert len(waiting) == 3
            later = [producer.send("orders", b"later", partition=p) for p in waiting for _ in range(2)]
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0), producer._loop).result(10)   # a round of the loop
            assert most_outstanding[0] == 5
            producer._loop.call_soon_threadsafe(gate.set)
            assert [f.result(timeout=10).offset for f in first] == [1] * 8
            assert sorted(f.result(timeout=10).offset for f in later) == [2, 2, 2, 3, 3, 3]
        finally:
            producer._loop.call_soon_threadsafe(gate.set)
            producer.close(timeout=10)
        assert most_outstanding[0] == 5
        assert [requests[p] for p in waiting] == [1, 1, 1]   # first and later records in one request


def test_close_with_a_timeout__what_is_unfinished_fails_forcefully__close_returns_and_the_network_closes(tmp_path):
    """Kafka's close(timeout): wait up to the timeout, then fail every record still
    unfinished ("Producer is closed forcefully.") and close all the same. rafka's
    raised RequestTimedOut and left its network open, the records' futures
    pending for good."""
    import asyncio

    from rafka.core.errors import IllegalStateError
    with ProtocolNode(tmp_path, {"orders": 2}) as node:
        producer = Producer(node.bootstrap, acks="all", linger_ms=0)
        real_request = producer._network.nodes.request
        never = asyncio.Event()

        async def request(address, body, **options):
            if body.__api_key__ == 0:   # a Produce: unanswered (a leader that hangs)
                await never.wait()
            return await real_request(address, body, **options)
        producer._network.nodes.request = request
        futures = [producer.send("orders", b"x", partition=p % 2) for p in range(4)]
        producer.close(timeout=0.2)
        for future in futures:
            with pytest.raises(IllegalStateError, match="closed forcefully"):
                future.result(timeout=5)
        assert producer.metrics()["record-error-total"] == 4
        assert producer._network._closed and not producer._network._thread.is_alive()
        with pytest.raises(RuntimeError):
            producer.send("orders", b"after close")


class _NoLeaderEndpoint:
    """The cache of a topic whose answers name a leader with no endpoint (a broker
    the answering node's image does not list as live): every lookup of the leader
    fails with LEADER_NOT_AVAILABLE and marks the topic stale, as MetadataCache's
    does; each fetch takes the same answer again. Counts the fetches."""

    def __init__(self, node) -> None:
        self.node = node
        self.stale = True
        self.fetches = 0

    def needs_refresh(self, topic: str) -> bool:
        return self.stale

    def partition_count(self, topic: str) -> int:
        if threading.current_thread() is not threading.main_thread():
            self.fetches += 1
        self.stale = False
        return len(self.node.image().topics[topic].partitions)

    def max_message_bytes(self, topic: str) -> int:
        return 1_048_576

    def leader_address(self, topic: str, partition: int):
        from rafka.core.errors import LeaderNotAvailable
        self.stale = True
        raise LeaderNotAvailable(f"{topic}-{partition} has no leader with a Kafka endpoint yet")

    def invalidate(self, topic: str) -> None:
        self.stale = True


def test_a_leader_with_no_endpoint_for_good__the_send_fails_at_delivery_timeout__metadata_asked_with_backoff(
        tmp_path):
    """Every record's future resolves by delivery_timeout_ms (Kafka's expiry of
    waiting batches). In `rafka verify` a producer's batches went back for metadata
    again and again (each answer naming a leader without an endpoint), never
    reaching the one place the timeout was checked, a failed request: their
    futures stayed pending for ten minutes, and metadata was asked in a busy loop.
    An idempotent producer keeps its epoch: the batch never had a sequence."""
    import time

    from rafka.core.errors import RequestTimedOut
    with ProtocolNode(tmp_path, {"orders": 1}) as node:
        producer = Producer(node.bootstrap, acks="all", linger_ms=0, delivery_timeout_ms=600,
                            retry_backoff_ms=100)
        epoch = producer.producer_epoch
        metadata = producer._metadata = _NoLeaderEndpoint(node)
        try:
            started_s = time.monotonic()
            future = producer.send("orders", b"nowhere to go", partition=0)
            error = future.exception(timeout=10)
            waited_s = time.monotonic() - started_s
            assert isinstance(error, RequestTimedOut) and "Expiring 1 record(s) for orders-0" in str(error)
            assert 0.6 <= waited_s < 5
            assert 2 <= metadata.fetches <= waited_s / 0.1 + 2   # one per backoff at most, not a busy loop
            assert producer.producer_epoch == epoch
            assert producer.metrics()["record-error-total"] == 1
            producer.flush(timeout=5)   # nothing left buffered
        finally:
            producer.close(timeout=5)


def test_a_metadata_fetch_that_never_returns__the_send_fails_at_delivery_timeout(tmp_path):
    """The topic's fetch hangs (a controller that never answers): its batch waits
    out of the sender's reach, and still fails at delivery_timeout_ms."""
    from rafka.core.errors import RequestTimedOut
    with ProtocolNode(tmp_path, {"slow": 1}) as node:
        producer = Producer(None, acks=1, linger_ms=0, delivery_timeout_ms=500)
        metadata = producer._metadata = _Metadata(node)
        try:
            future = producer.send("slow", b"waits for its metadata", partition=0)
            assert metadata.fetched_off_main_thread.wait(10)
            assert isinstance(future.exception(timeout=10), RequestTimedOut)
        finally:
            metadata.release.set()
            producer.close(timeout=5)


def test_acks_0__close_right_after_the_sends__every_record_still_written(tmp_path):
    """Kafka's acks=0: a batch is done once its request is on the wire. rafka's
    finished it when the request was made, before it was written, so a close
    right after the sends could cancel it unsent (a cluster test saw 5 records
    sent with acks=0 and not all of them written)."""
    import time
    with ProtocolNode(tmp_path, {"fire": 1}) as node:
        for round_ in range(20):
            producer = Producer(node.bootstrap, acks=0, linger_ms=0)
            for i in range(5):
                assert producer.send("fire", b"f", partition=0).result(timeout=10).offset == -1
            producer.close(timeout=10)
        log = node.endpoint("fire", 0)._replica().log
        deadline_s = time.monotonic() + 10   # the last writes may still be in the node's socket
        while log.log_end_offset < 100 and time.monotonic() < deadline_s:
            time.sleep(0.01)
        assert log.log_end_offset == 100
