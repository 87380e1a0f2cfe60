"""A Fetch waits until it can answer its min_bytes (Kafka's fetch.min.bytes and
replica.fetch.min.bytes; DelayedFetch), or until its max_wait_ms has passed, then
answers what there is (protocol.hosted_partition)."""

import asyncio

import pytest

from rafka.core.clock import FakeClock
from rafka.core.config import TopicConfig
from rafka.core.records import RecordInput, encode_batch
from rafka.core.replica import ACKS_ALL, PartitionReplica
from rafka.protocol.hosted_partition import HostedPartition

pytestmark = pytest.mark.core

LONG_WAIT_MS = 30_000
BATCH_A = encode_batch([RecordInput(b"a" * 500)])
BATCH_B = encode_batch([RecordInput(b"b" * 500)])


def hosted(tmp_path, replicas: list[int]) -> HostedPartition:
    replica = PartitionReplica(topic="orders", partition=0, replica_id=0, directory=tmp_path / "orders-0",
                               config=TopicConfig.from_dict({"min.insync.replicas": 1}), clock=FakeClock(),
                               replica_lag_time_max_ms=30_000)
    replica.become_leader(leader_epoch=0, replicas=replicas, isr=replicas, partition_epoch=0)
    return HostedPartition(lambda: replica)


async def parked(condition, timeout_s: float = 5.0) -> None:
    """Until `condition()` holds (the fetch parked), yielding to the loop."""
    async def until():
        while not condition():
            await asyncio.sleep(0)
    await asyncio.wait_for(until(), timeout_s)


def test_consumer_fetch__waits_for_min_bytes__answers_once_a_second_batch_makes_it(tmp_path):
    partition = hosted(tmp_path, [0])

    async def scenario():
        partition.append(BATCH_A, 1)   # below the HW at once (the leader is the whole ISR)
        fetch = asyncio.ensure_future(partition.consumer_fetch(0, 1 << 20, LONG_WAIT_MS,
                                                               min_bytes=len(BATCH_A) + 1))
        await parked(lambda: partition.parked_consumer_fetches == 1)
        assert not fetch.done()            # one batch is below the HW, but less than min_bytes
        partition.append(BATCH_B, 1)
        return await asyncio.wait_for(fetch, 5)
    answer = asyncio.run(scenario())
    assert len(answer.records) == len(BATCH_A) + len(BATCH_B)


def test_consumer_fetch__min_bytes_never_reached__answers_what_there_is_at_max_wait(tmp_path):
    partition = hosted(tmp_path, [0])

    async def scenario():
        partition.append(BATCH_A, 1)
        return await asyncio.wait_for(partition.consumer_fetch(0, 1 << 20, 20, min_bytes=1 << 20), 5)
    assert len(asyncio.run(scenario()).records) == len(BATCH_A)


def test_consumer_fetch__min_bytes_1__answers_the_first_batch_at_once(tmp_path):
    partition = hosted(tmp_path, [0])

    async def scenario():
        fetch = asyncio.ensure_future(partition.consumer_fetch(0, 1 << 20, LONG_WAIT_MS))
        await parked(lambda: partition.parked_consumer_fetches == 1)
        partition.append(BATCH_A, 1)
        return await asyncio.wait_for(fetch, 5)
    assert len(asyncio.run(scenario()).records) == len(BATCH_A)


def test_follower_fetch__waits_for_min_bytes__answers_once_a_second_batch_makes_it(tmp_path):
    partition = hosted(tmp_path, [0, 1])

    async def scenario():
        partition.append(BATCH_A, ACKS_ALL)
        fetch = asyncio.ensure_future(partition.fetch(1, 0, 0, 1 << 20, LONG_WAIT_MS,
                                                      min_bytes=len(BATCH_A) + 1))
        await parked(lambda: partition.parked_follower_fetches == 1)
        assert not fetch.done()
        partition.append(BATCH_B, ACKS_ALL)
        return await asyncio.wait_for(fetch, 5)
    assert len(asyncio.run(scenario()).records) == len(BATCH_A) + len(BATCH_B)
