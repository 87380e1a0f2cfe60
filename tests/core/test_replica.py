"""One partition's replicas wired by hand: produce, fetch, elections, truncation."""

import pytest

from rafka.core.clock import FakeClock
from rafka.core.config import TopicConfig
from rafka.core.errors import FencedLeaderEpoch, NotEnoughReplicas, NotLeaderOrFollower
from rafka.core.records import RecordInput, decode_records, encode_batch
from rafka.core.replica import ACKS_ALL, ACKS_LEADER, PartitionReplica

pytestmark = pytest.mark.core


def replicas(tmp_path, count=3, **config):
    clock = FakeClock()
    topic_config = TopicConfig.from_dict(config)
    return clock, [PartitionReplica(topic="orders", partition=0, replica_id=i, directory=tmp_path / f"r{i}",
                                    config=topic_config, clock=clock, replica_lag_time_max_ms=30_000)
                   for i in range(count)]


def records(*values):
    return encode_batch([RecordInput(v, b"k") for v in values])


def fetch(leader, follower):
    result = leader.fetch_for_follower(follower_id=follower.replica_id, fetch_offset=follower.log.log_end_offset,
                                       leader_epoch=follower.leader_epoch, max_bytes=1 << 20)
    follower.apply_fetched(result)


def elect(leader, followers, epoch, isr):
    leader.become_leader(leader_epoch=epoch, replicas=[0, 1, 2], isr=isr, partition_epoch=epoch)
    for f in followers:
        f.become_follower(leader_id=leader.replica_id, leader_epoch=epoch)
        f.truncate_to_leader_epoch_end(leader.end_offset_for_epoch(
            requested_epoch=f.log.latest_epoch, leader_epoch=epoch))


def log_bytes(replica, below):
    return replica.log.read(0, 1 << 30, max_offset=below)


def test_acks_all__isr_below_min_isr__not_enough_replicas_and_nothing_visible(tmp_path):
    _, (a, b, c) = replicas(tmp_path, **{"min.insync.replicas": 2})
    elect(a, [b, c], 0, isr=[0])
    with pytest.raises(NotEnoughReplicas):
        a.append(records(b"x"), acks=ACKS_ALL)
    assert a.log.log_end_offset == 0
    assert a.fetch_for_consumer(fetch_offset=0, max_bytes=1 << 20).records == b""


def test_acks_all__committed_only_when_every_isr_member_has_it(tmp_path):
    _, (a, b, c) = replicas(tmp_path, **{"min.insync.replicas": 2})
    elect(a, [b, c], 0, isr=[0, 1, 2])
    result = a.append(records(b"x", b"y"), acks=ACKS_ALL)
    assert not a.is_committed(result.last_offset)
    fetch(a, b), fetch(a, c)
    assert not a.is_committed(result.last_offset)        # LEOs are learnt at the next fetch
    assert a.fetch_for_consumer(fetch_offset=0, max_bytes=1 << 20).records == b""
    fetch(a, b), fetch(a, c)
    assert a.is_committed(result.last_offset)
    assert [r.value for r in decode_records(a.fetch_for_consumer(fetch_offset=0, max_bytes=1 << 20).records)] \
        == [b"x", b"y"]
    assert (b.log.high_watermark, c.log.high_watermark) == (0, 2)  # b fetched before the HW moved
    fetch(a, b)
    assert b.log.high_watermark == 2


def test_stale_leader__fenced_then_truncates_its_unreplicated_tail(tmp_path):
    _, (a, b, c) = replicas(tmp_path)
    elect(a, [b, c], 0, isr=[0, 1, 2])
    a.append(records(b"acked"), acks=ACKS_ALL)
    fetch(a, b), fetch(a, c), fetch(a, b), fetch(a, c)
    a.append(records(b"never-replicated-1", b"never-replicated-2"), acks=ACKS_LEADER)  # a is then paused
    elect(b, [c], 1, isr=[1, 2])                       # the controller moves on without a
    b.append(records(b"new-leader"), acks=ACKS_ALL)
    fetch(b, c), fetch(b, c)
    with pytest.raises(FencedLeaderEpoch):            # c, at epoch 1, refuses to follow epoch 0
        c.apply_fetched(a.fetch_for_follower(follower_id=2, fetch_offset=0, leader_epoch=0, max_bytes=100))
    with pytest.raises(FencedLeaderEpoch):            # and b refuses a's epoch-0 requests
        b.fetch_for_follower(follower_id=0, fetch_offset=1, leader_epoch=0, max_bytes=100)
    a.become_follower(leader_id=1, leader_epoch=1)    # resumed: told it follows now
    with pytest.raises(NotLeaderOrFollower):
        a.append(records(b"late"), acks=ACKS_ALL)
    a.truncate_to_leader_epoch_end(b.end_offset_for_epoch(requested_epoch=a.log.latest_epoch, leader_epoch=1))
    assert a.log.log_end_offset == 1
    fetch(b, a), fetch(b, a)
    hw = b.log.high_watermark
    assert hw == 2
    assert log_bytes(a, hw) == log_bytes(b, hw) == log_bytes(c, hw)
    assert [r.value for r in decode_records(log_bytes(a, hw))] == [b"acked", b"new-leader"]


def test_idempotent_retry__after_append_before_ack__in_the_log_once(tmp_path):
    _, (a, b, c) = replicas(tmp_path)
    elect(a, [b, c], 0, isr=[0, 1, 2])
    batch = encode_batch([RecordInput(b"once")], producer_id=11, producer_epoch=0, base_sequence=0)
    first = a.append(batch, acks=ACKS_ALL)
    retry = a.append(batch, acks=ACKS_ALL)           # the ack was lost; the producer resends
    assert (retry.base_offset, retry.duplicate) == (first.base_offset, True)
    assert a.log.log_end_offset == 1
    fetch(a, b)
    elect(b, [c], 1, isr=[1, 2])                      # the retry reaches a new leader
    again = b.append(batch, acks=ACKS_ALL)
    assert (again.base_offset, again.duplicate) == (first.base_offset, True)
    assert b.log.log_end_offset == 1
