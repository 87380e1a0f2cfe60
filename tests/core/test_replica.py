"""One partition's replicas wired by hand: produce, fetch, elections, truncation."""

import pytest

from rafka.core.clock import FakeClock
from rafka.core.config import TopicConfig
from rafka.core.errors import (FencedLeaderEpoch, NotEnoughReplicas, NotEnoughReplicasAfterAppend,
                               NotLeaderOrFollower, OffsetNotAvailable, OffsetOutOfRange)
from rafka.core.records import RecordInput, decode_records, encode_batch
from rafka.core.replica import ACKS_ALL, ACKS_LEADER, LATEST_TIMESTAMP, PartitionReplica

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
                                       leader_epoch=follower.leader_epoch, max_bytes=1 << 20,
                                       log_start_offset=follower.log.log_start_offset)
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


def values(data):
    return [r.value for r in decode_records(data)]


# --- KIP-497: an expansion in flight holds the HW back ----------------------------


def test_isr_expansion_in_flight__joining_follower_elected__no_acked_record_lost(tmp_path):
    """c joins the ISR. Had the HW counted only the committed ISR {a, b} while the
    expansion was in flight, "during" would be acked with c not having it, and the
    controller, having applied {a, b, c}, may elect c once a dies."""
    _, (a, b, c) = replicas(tmp_path, **{"min.insync.replicas": 2})
    elect(a, [b, c], 0, isr=[0, 1])                       # c outside the ISR, catching up
    before = a.append(records(b"before"), acks=ACKS_ALL)
    fetch(a, b), fetch(a, c), fetch(a, b), fetch(a, c)
    assert a.is_committed(before.last_offset)
    expand = a.maybe_propose_isr_change()                 # the ISR keeper, before calling the controller
    assert expand.proposed_isr == {0, 1, 2} and a.leader.isr == {0, 1}
    during = a.append(records(b"during"), acks=ACKS_ALL)  # committed ISR {a, b}: at min.insync.replicas
    fetch(a, b), fetch(a, b)                              # b has it; c is slow
    assert a.log.high_watermark == c.log.log_end_offset == 1
    assert not a.is_committed(during.last_offset)         # not acked: c does not have it
    a.isr_change_answered(expand, isr=[0, 1, 2], partition_epoch=1)   # the controller applied it
    acked_below = a.log.high_watermark
    # a dies; c is in the ISR, so a clean election may pick it
    elect(c, [b], 1, isr=[1, 2])
    assert c.log.log_end_offset >= acked_below
    assert log_bytes(c, acked_below) == log_bytes(a, acked_below)
    after = c.append(records(b"after"), acks=ACKS_ALL)
    fetch(c, b), fetch(c, b)
    assert c.is_committed(after.last_offset)
    assert values(log_bytes(c, c.log.high_watermark)) == [b"before", b"after"]
    assert log_bytes(b, c.log.high_watermark) == log_bytes(c, c.log.high_watermark)


def test_leader_told_again_at_its_epoch__an_older_isr_is_ignored__followers_progress_kept(tmp_path):
    """A late announcement (read before an ISR expansion was committed) tells the
    leader its role again at the same leader epoch with the older ISR. Taken as
    given, c would drop out of the leader's ISR while the controller counts it in
    sync: the HW would pass records c lacks, and an election of c would lose them."""
    _, (a, b, c) = replicas(tmp_path, **{"min.insync.replicas": 2})
    elect(a, [b, c], 0, isr=[0, 1])                       # partition epoch 0; c catching up
    a.append(records(b"w"), acks=ACKS_ALL)
    fetch(a, b), fetch(a, c), fetch(a, b), fetch(a, c)
    expand = a.maybe_propose_isr_change()
    a.isr_change_answered(expand, isr=[0, 1, 2], partition_epoch=1)
    a.become_leader(leader_epoch=0, replicas=[0, 1, 2], isr=[0, 1], partition_epoch=0)   # the late one
    assert (a.leader.isr, a.partition_epoch) == ({0, 1, 2}, 1)
    assert [a.leader.followers[r].log_end_offset for r in (1, 2)] == [1, 1]   # their progress kept
    x = a.append(records(b"x"), acks=ACKS_ALL)
    fetch(a, b), fetch(a, b), fetch(a, b)                 # c is slow
    assert not a.is_committed(x.last_offset)              # c, in the controller's ISR, lacks x
    fetch(a, c), fetch(a, c)
    assert a.is_committed(x.last_offset)
    a.become_leader(leader_epoch=0, replicas=[0, 1, 2], isr=[0, 1], partition_epoch=2)   # a newer record
    assert (a.leader.isr, a.partition_epoch) == ({0, 1}, 2)


def test_min_insync__append_counts_the_committed_isr__after_append_the_maximal_isr(tmp_path):
    """Kafka's Partition: appendRecordsToLeader checks partitionState.isr,
    checkEnoughReplicasReachOffset partitionState.maximalIsr."""
    _, (a, b, c) = replicas(tmp_path, **{"min.insync.replicas": 2})
    elect(a, [b, c], 0, isr=[0])
    fetch(a, b)                                           # b caught up at the HW 0
    expand = a.maybe_propose_isr_change()
    assert expand.added == {1}
    with pytest.raises(NotEnoughReplicas):                # b might still be refused
        a.append(records(b"x"), acks=ACKS_ALL)
    a.isr_change_answered(expand, isr=[0, 1], partition_epoch=1)
    x = a.append(records(b"x"), acks=ACKS_ALL)
    a.apply_isr([0], 2)                                   # the controller fenced a restarted b ...
    assert a.is_committed(x.last_offset)                  # ... so the HW passed x, on a alone
    fetch(a, b), fetch(a, b)                              # b is back and caught up; then the
    rejoin = a.maybe_propose_isr_change()                 # acks=all waiter runs, after the keeper
    assert a.leader.isr == {0} and a.leader.maximal_isr == {0, 1}
    a.check_enough_replicas_after_append()                # x is on a and on b: two copies
    a.isr_change_refused(rejoin)
    with pytest.raises(NotEnoughReplicasAfterAppend):
        a.check_enough_replicas_after_append()


# --- consumer fetches between the HW and the LEO ----------------------------------


def test_consumer_fetch_between_hw_and_leo__empty_not_out_of_range(tmp_path):
    """Out of range is below the log start offset or above the LEO, as Kafka's
    LocalLog.read; at or above the HW up to the LEO there is nothing to read yet."""
    _, (a, b, c) = replicas(tmp_path)
    for replica in (a, b, c):
        replica.restart_from(5)                           # logs that start at 5 (retention moved it)
    elect(a, [b, c], 0, isr=[0, 1, 2])
    a.append(records(b"x"), acks=ACKS_ALL)
    fetch(a, b), fetch(a, c), fetch(a, b), fetch(a, c)
    a.append(records(b"y"), acks=ACKS_ALL)
    assert (a.log.log_start_offset, a.log.high_watermark, a.log.log_end_offset) == (5, 6, 7)
    for offset in (6, 7):                                 # at the HW, and in [HW, LEO]
        result = a.fetch_for_consumer(fetch_offset=offset, max_bytes=1 << 20)
        assert (result.records, result.high_watermark, result.log_end_offset) == (b"", 6, 7)
    assert values(a.fetch_for_consumer(fetch_offset=5, max_bytes=1 << 20).records) == [b"x"]
    for offset in (4, 8):                                 # below the log start, above the LEO
        with pytest.raises(OffsetOutOfRange):
            a.fetch_for_consumer(fetch_offset=offset, max_bytes=1 << 20)


def test_leader_change__consumer_at_the_old_tail__waits_and_is_not_reset(tmp_path):
    """The new leader's HW trails the old one's by a fetch round (follower HW =
    min(leader HW, own LEO) as of its last fetch): a consumer that read up to the old
    HW is above the new HW but not above the new LEO."""
    _, (a, b, c) = replicas(tmp_path)
    elect(a, [b, c], 0, isr=[0, 1, 2])
    a.append(records(b"x", b"y"), acks=ACKS_ALL)
    fetch(a, b), fetch(a, c), fetch(a, b), fetch(a, c)   # c's fetch moved the HW; b had fetched before
    assert (a.log.high_watermark, b.log.high_watermark) == (2, 0)
    position = 2                                          # a consumer read x and y from a
    elect(b, [c], 1, isr=[1, 2])                          # a dies
    result = b.fetch_for_consumer(fetch_offset=position, max_bytes=1 << 20, leader_epoch=1)
    assert (result.records, result.high_watermark) == (b"", 0)
    with pytest.raises(OffsetNotAvailable):               # "latest" would move a consumer back to 0
        b.list_offset(timestamp_ms=LATEST_TIMESTAMP, leader_epoch=1)
    with pytest.raises(OffsetNotAvailable):               # so would a timestamp found nowhere below the HW
        b.list_offset(timestamp_ms=0, leader_epoch=1)
    fetch(b, c), fetch(b, c)
    assert b.list_offset(timestamp_ms=LATEST_TIMESTAMP, leader_epoch=1) == (2, -1, 1)
    b.append(records(b"z"), acks=ACKS_ALL)
    fetch(b, c), fetch(b, c)
    assert values(b.fetch_for_consumer(fetch_offset=position, max_bytes=1 << 20, leader_epoch=1).records) == [b"z"]


def fetch_kip320(leader, follower):
    """One replica Fetch as followers send it on the wire: with the epoch of the
    follower's last batch; a diverging answer is truncated to, records applied."""
    result = leader.fetch_for_follower(follower_id=follower.replica_id, fetch_offset=follower.log.log_end_offset,
                                       leader_epoch=follower.leader_epoch, max_bytes=1 << 20,
                                       last_fetched_epoch=follower.log.latest_epoch)
    if result.diverging_epoch is not None:
        assert result.records == b""
        follower.truncate_to_leader_epoch_end(result.diverging_epoch)
    else:
        follower.apply_fetched(result)
    return result


def test_diverging_epoch__a_deposed_leaders_unreplicated_tail_is_cut_by_the_fetch_answer(tmp_path):
    _, (a, b, c) = replicas(tmp_path)
    elect(a, [b, c], 0, isr=[0, 1, 2])
    a.append(records(b"acked"), acks=ACKS_ALL)
    for _ in range(2):
        fetch_kip320(a, b), fetch_kip320(a, c)
    a.append(records(b"never-replicated-1", b"never-replicated-2"), acks=ACKS_LEADER)
    b.become_leader(leader_epoch=1, replicas=[0, 1, 2], isr=[1, 2], partition_epoch=1)
    c.become_follower(leader_id=1, leader_epoch=1)
    b.append(records(b"new-leader"), acks=ACKS_ALL)
    a.become_follower(leader_id=1, leader_epoch=1)     # no OffsetForLeaderEpoch round trip
    assert (a.log.log_end_offset, a.log.latest_epoch) == (3, 0)

    answer = fetch_kip320(b, a)
    assert answer.diverging_epoch == (0, 1)             # b's epoch 0 ends at 1; a's goes on to 3
    assert a.log.log_end_offset == 1
    assert 0 not in b.leader.caught_up_outside_isr(0) and b.log.high_watermark <= 1   # not counted as progress
    fetch_kip320(b, a), fetch_kip320(b, c), fetch_kip320(b, a), fetch_kip320(b, c)
    hw = b.log.high_watermark
    assert hw == 2 and log_bytes(a, hw) == log_bytes(b, hw) == log_bytes(c, hw)
    assert [r.value for r in decode_records(log_bytes(a, hw))] == [b"acked", b"new-leader"]


def test_diverging_epoch__an_epoch_led_without_appending_is_dropped_and_fetching_goes_on(tmp_path):
    """A replica that led epoch 1 without appending keeps that epoch at its LEO;
    the next leader never had it. The diverging answer's truncation is to the LEO
    itself, which must still drop the empty epoch (Kafka's UnifiedLog.truncateTo),
    or every later fetch would diverge again."""
    _, (a, b, c) = replicas(tmp_path)
    elect(a, [b, c], 0, isr=[0, 1, 2])
    a.append(records(b"x"), acks=ACKS_ALL)
    for _ in range(2):
        fetch_kip320(a, b), fetch_kip320(a, c)
    a.become_leader(leader_epoch=1, replicas=[0, 1, 2], isr=[0, 1, 2], partition_epoch=1)   # led, wrote nothing
    assert a.log.latest_epoch == 1
    b.become_leader(leader_epoch=2, replicas=[0, 1, 2], isr=[1, 2], partition_epoch=2)
    b.append(records(b"y"), acks=ACKS_LEADER)
    a.become_follower(leader_id=1, leader_epoch=2)

    assert fetch_kip320(b, a).diverging_epoch == (0, 1)
    assert (a.log.log_end_offset, a.log.latest_epoch) == (1, 0)
    assert fetch_kip320(b, a).diverging_epoch is None
    assert [r.value for r in decode_records(log_bytes(a, a.log.log_end_offset))] == [b"x", b"y"]


def test_diverging_epoch__an_epoch_the_leader_has_no_end_for__offset_out_of_range(tmp_path):
    _, (a, b) = replicas(tmp_path, count=2)
    elect(a, [b], 0, isr=[0, 1])
    with pytest.raises(OffsetOutOfRange):
        a.fetch_for_follower(follower_id=1, fetch_offset=0, leader_epoch=0, max_bytes=100, last_fetched_epoch=7)


# --- followers that must not wedge ---------------------------------------------------


def batches_of(replica):
    from rafka.core.records import iter_batches
    return [(h.base_offset, h.partition_leader_epoch)
            for _, h in iter_batches(replica.log.read(0, 1 << 30), verify_crc=False)]


def catch_up(leader, follower, rounds=4):
    for _ in range(rounds):
        result = leader.fetch_for_follower(follower_id=follower.replica_id, fetch_offset=follower.log.log_end_offset,
                                           leader_epoch=follower.leader_epoch, max_bytes=1 << 20,
                                           last_fetched_epoch=follower.log.latest_epoch,
                                           log_start_offset=follower.log.log_start_offset)
        if result.diverging_epoch is not None:
            follower.truncate_to_leader_epoch_end(result.diverging_epoch)
        else:
            follower.apply_fetched(result)


def test_diverging_epoch_the_follower_never_had__cut_at_its_own_end_below_it__logs_match(tmp_path):
    """a led epoch 2 (writing 5-9) without ever seeing epoch 1 (c's 5-7, from b);
    c leads epoch 3 and answers a's epoch 2 with (1, 8). a does not know epoch 1:
    as Kafka, it cuts at its own end of the epoch below (5) and asks again. Cut
    at 8, it kept 5-7 of an epoch c never had, and got (1, 8) back for good."""
    _, (a, b, c) = replicas(tmp_path)
    elect(a, [b, c], 0, isr=[0, 1, 2])
    a.append(records(*[b"e0"] * 5), acks=ACKS_LEADER)
    fetch(a, c)
    c.become_follower(leader_id=1, leader_epoch=1)        # b leads epoch 1; c copies its 5-7
    c.log.append_as_follower(encode_batch([RecordInput(b"e1", b"k")] * 3, base_offset=5, partition_leader_epoch=1))
    a.become_follower(leader_id=1, leader_epoch=1)        # a rejoined, fetched nothing of epoch 1
    a.become_leader(leader_epoch=2, replicas=[0, 1, 2], isr=[0, 2], partition_epoch=2)   # b paused
    a.append(records(*[b"e2"] * 3), acks=ACKS_LEADER)
    a.append(records(*[b"e2"] * 2), acks=ACKS_LEADER)
    c.become_leader(leader_epoch=3, replicas=[0, 1, 2], isr=[2], partition_epoch=3)   # a died
    a.become_follower(leader_id=2, leader_epoch=3)
    catch_up(c, a)
    assert batches_of(a) == batches_of(c) == [(0, 0), (5, 1)]


def test_leaders_log_start_inside_a_batch__an_empty_follower_starts_at_the_batch__catches_up(tmp_path):
    """DeleteRecords moved the leader's log start into a batch (0-9, start 5). A new
    replica starts at 5; the fetch at 5 returns the batch from 0. As Kafka, it
    starts its empty log at the batch; refused below its LEO, it never caught up."""
    _, (a, b, c) = replicas(tmp_path)
    elect(a, [b, c], 0, isr=[0])
    a.append(records(*[b"v"] * 10), acks=ACKS_LEADER)
    a.delete_records(5)
    b.restart_from(5)   # the fetch at 0 was out of range; ListOffsets EARLIEST said 5
    catch_up(a, b)
    assert (b.log.log_start_offset, b.log.log_end_offset) == (5, 10)
    assert b.log.read(5, 1 << 30) == a.log.read(5, 1 << 30)
