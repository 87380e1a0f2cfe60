"""DeleteRecords in core: the log start offset moved on the leader, taken by the
followers from their fetches, and the low watermark that completes the request."""

import pytest

from rafka.core.clock import FakeClock
from rafka.core.config import TopicConfig
from rafka.core.errors import NotLeaderOrFollower, OffsetOutOfRange, PolicyViolation
from rafka.core.log import PartitionLog
from rafka.core.records import decode_records
from rafka.core.replica import ACKS_ALL, DELETE_TO_HIGH_WATERMARK, EARLIEST_TIMESTAMP

from tests.core.test_replica import fetch, records, replicas

pytestmark = pytest.mark.core


def three_replicas_with(tmp_path, batches, **config):
    _, (a, b, c) = replicas(tmp_path, **config)
    a.become_leader(leader_epoch=0, replicas=[0, 1, 2], isr=[0, 1, 2], partition_epoch=0)
    for follower in (b, c):
        follower.become_follower(leader_id=0, leader_epoch=0)
    for values in batches:
        a.append(records(*values), acks=ACKS_ALL)
    for _ in range(2):
        fetch(a, b), fetch(a, c)
    return a, b, c


def values_from(replica, offset):
    return [r.value for r in decode_records(replica.fetch_for_consumer(fetch_offset=offset, max_bytes=1 << 20).records)
            if r.offset >= offset]


def test_delete_records__leader_moves_log_start__below_unreadable__earliest_answers_it(tmp_path):
    a, _, _ = three_replicas_with(tmp_path, [[b"0", b"1"], [b"2", b"3"], [b"4"]])
    requested, low_watermark = a.delete_records(3)
    assert (requested, a.log.log_start_offset) == (3, 3)
    assert low_watermark == 0                           # the followers have not heard yet
    assert a.list_offset(timestamp_ms=EARLIEST_TIMESTAMP) == (3, -1, 0)
    with pytest.raises(OffsetOutOfRange):
        a.fetch_for_consumer(fetch_offset=2, max_bytes=1 << 20)
    assert values_from(a, 3) == [b"3", b"4"]


def test_delete_records__followers_take_leader_log_start__low_watermark_reaches_it(tmp_path):
    a, b, c = three_replicas_with(tmp_path, [[b"0", b"1"], [b"2", b"3"]])
    a.delete_records(2)
    fetch(a, b), fetch(a, c)                            # the answers carry log start 2
    assert (b.log.log_start_offset, c.log.log_start_offset) == (2, 2)
    assert a.low_watermark == 0                         # the leader learns it at their next fetch
    fetch(a, b)
    assert a.low_watermark == 0                         # c still holds it back
    fetch(a, c)
    assert a.low_watermark == 2


def test_delete_records__minus_one__to_the_high_watermark(tmp_path):
    a, _, _ = three_replicas_with(tmp_path, [[b"0", b"1", b"2"]])
    a.append(records(b"not-yet-replicated"), acks=ACKS_ALL)
    assert a.delete_records(DELETE_TO_HIGH_WATERMARK)[0] == 3 == a.log.log_start_offset


def test_delete_records__above_high_watermark__offset_out_of_range_and_nothing_moves(tmp_path):
    a, _, _ = three_replicas_with(tmp_path, [[b"0", b"1"]])
    a.append(records(b"2"), acks=ACKS_ALL)              # LEO 3, HW 2
    with pytest.raises(OffsetOutOfRange):
        a.delete_records(3)
    with pytest.raises(OffsetOutOfRange):
        a.delete_records(-2)
    assert a.log.log_start_offset == 0


def test_delete_records__below_current_log_start__no_change(tmp_path):
    a, _, _ = three_replicas_with(tmp_path, [[b"0", b"1", b"2"]])
    a.delete_records(2)
    assert a.delete_records(1) == (1, 0) and a.log.log_start_offset == 2


def test_delete_records__compact_only_topic__policy_violation(tmp_path):
    a, _, _ = three_replicas_with(tmp_path, [[b"0"]], **{"cleanup.policy": "compact"})
    with pytest.raises(PolicyViolation):
        a.delete_records(1)


def test_delete_records__on_a_follower__not_leader(tmp_path):
    _, b, _ = three_replicas_with(tmp_path, [[b"0"]])
    with pytest.raises(NotLeaderOrFollower):
        b.delete_records(1)


def test_log_start_move__segments_wholly_below_deleted__active_kept__survives_reopen(tmp_path):
    clock = FakeClock()
    log = PartitionLog(tmp_path / "p", TopicConfig.from_dict({}), clock=clock)
    for i in range(5):      # a segment per batch
        if i:
            log.roll()
        log.append_as_leader(records(str(i).encode()), leader_epoch=0)
    log.update_high_watermark(5)
    assert log.segment_base_offsets() == [0, 1, 2, 3, 4]
    assert log.maybe_increment_log_start_offset(3)
    assert log.segment_base_offsets() == [3, 4]
    assert log.maybe_increment_log_start_offset(5)      # everything: only the active segment stays
    assert log.segment_base_offsets() == [4] and log.log_start_offset == 5 == log.log_end_offset
    assert log.read(5, 1 << 20) == b""
    log.close(clean_shutdown=True)
    reopened = PartitionLog(tmp_path / "p", TopicConfig.from_dict({}), clock=clock)
    assert (reopened.log_start_offset, reopened.high_watermark, reopened.log_end_offset) == (5, 5, 5)
    reopened.close()


def test_log_start_move__retention_after_it_stays_consistent(tmp_path):
    clock = FakeClock()
    log = PartitionLog(tmp_path / "p", TopicConfig.from_dict({"retention.bytes": 1}), clock=clock)
    for i in range(4):
        if i:
            log.roll()
        log.append_as_leader(records(str(i).encode()), leader_epoch=0)
    log.update_high_watermark(4)
    log.maybe_increment_log_start_offset(2)
    log.enforce_retention()
    assert log.log_start_offset == log.segment_base_offsets()[0] >= 2
    assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
    log.close()


def test_hosted_delete_records__waits_for_isr_log_start__parked_follower_fetch_returns_at_once(tmp_path):
    import asyncio
    from rafka.protocol.hosted_partition import HostedPartition
    a, b, c = three_replicas_with(tmp_path, [[b"0", b"1", b"2"]])
    hosted = HostedPartition(lambda: a)

    async def follower_fetch(follower, max_wait_ms):
        result = await hosted.fetch(follower.replica_id, follower.log.log_end_offset, 0, 1 << 20, max_wait_ms,
                                    log_start_offset=follower.log.log_start_offset)
        follower.apply_fetched(result)

    async def scenario():
        loop = asyncio.get_running_loop()
        parked = asyncio.ensure_future(follower_fetch(b, 60_000))   # an idle follower's long poll
        await asyncio.sleep(0)
        deleting = asyncio.ensure_future(hosted.delete_records(2, timeout_ms=10_000))
        await asyncio.wait_for(parked, 1)              # answered at once: its log start is behind
        assert b.log.log_start_offset == 2 and not deleting.done()
        await follower_fetch(b, 0)                    # tells the leader its log start
        await follower_fetch(c, 0)                    # learns it
        assert not deleting.done()
        started = loop.time()
        await follower_fetch(c, 0)                    # tells it: the ISR has it
        outcome = await asyncio.wait_for(deleting, 1)
        assert (outcome.low_watermark, outcome.timed_out) == (2, False) and loop.time() - started < 1
        timed_out = await hosted.delete_records(3, timeout_ms=50)   # the followers do not fetch again
        assert (timed_out.low_watermark, timed_out.timed_out) == (2, True)
        assert a.log.log_start_offset == 3
    asyncio.run(scenario())
