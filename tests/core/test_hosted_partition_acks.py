"""An acks=all Produce parked on a leader (protocol.hosted_partition.acknowledged)
is answered from the leader's state only: leadership first, then the HW, as Kafka's
Partition.checkEnoughReplicasReachOffset."""

import asyncio

import pytest

from rafka.core.errors import NotLeaderOrFollower
from rafka.core.replica import ACKS_ALL
from tests.core.test_fetch_min_bytes import BATCH_A, hosted, parked

pytestmark = pytest.mark.core


def test_acks_all__deposed_before_the_waiter_runs__not_acked_though_its_follower_hw_passed(tmp_path):
    """The leader is deposed and, before its parked produce looks again, its HW as a
    follower passes the batch's offset (it truncated and fetched the new leader's
    records, which may hold another record there). The produce must be refused, not
    acked for a record the log no longer holds."""
    partition = hosted(tmp_path, [0, 1])
    replica = partition.replica

    async def scenario():
        appended = partition.append(BATCH_A, ACKS_ALL)
        produce = asyncio.ensure_future(partition.acknowledged(appended, 30_000))
        await parked(lambda: partition.parked_produces == 1)
        replica.become_follower(leader_id=1, leader_epoch=1)
        replica.log.update_high_watermark(replica.log.log_end_offset)   # as a follower's fetch sets it
        partition.notify()
        return await asyncio.wait_for(produce, 5)
    with pytest.raises(NotLeaderOrFollower):
        asyncio.run(scenario())
