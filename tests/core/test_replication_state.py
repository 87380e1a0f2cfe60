"""Leader/follower bookkeeping on two real logs, driven step by step."""

import pytest

from rafka.core.clock import FakeClock
from rafka.core.log import PartitionLog
from rafka.core.replication import (CommittedIsr, IsrChangeInFlight, LeaderState, follower_fetch_wait_ms,
                                   follower_high_watermark)
from rafka.core.records import decode_records

from tests.core.helpers import batch

pytestmark = pytest.mark.core

LAG_MS = 10_000


class Pair:
    """Leader replica 0 and follower replica 1 of one partition, fetching by hand."""

    def __init__(self, tmp_path, followers=(1,), isr=None):
        self.clock = FakeClock()
        self.leader_log = PartitionLog(tmp_path / "leader", clock=self.clock)
        self.follower_logs = {f: PartitionLog(tmp_path / f"follower-{f}", clock=self.clock) for f in followers}
        isr = [0, *followers] if isr is None else isr
        self.leader = LeaderState(replica_id=0, replicas=[0, *followers], isr=isr,
                                  leader_epoch=0, partition_epoch=0, log=self.leader_log,
                                  now_ms=self.clock.now_ms(), replica_lag_time_max_ms=LAG_MS)

    def produce(self, *values):
        self.leader_log.append_as_leader(batch(*values), leader_epoch=0)
        self.leader.maybe_advance_high_watermark()

    def fetch(self, follower=1):
        log = self.follower_logs[follower]
        offset = log.log_end_offset
        self.leader.on_follower_fetch(follower, offset, self.clock.now_ms())
        data = self.leader_log.read(offset, 1 << 20) if offset < self.leader_log.log_end_offset else b""
        if data:
            log.append_as_follower(data)
        log.update_high_watermark(follower_high_watermark(self.leader.high_watermark, log.log_end_offset))

    def propose(self):
        """The ISR keeper's step: the change it would send to the controller now."""
        return self.leader.maybe_propose_isr_change(self.clock.now_ms())

    def accept(self, change):
        """The controller accepts `change` as proposed (its record's epoch + 1).
        True if the HW moved."""
        return self.leader.isr_change_answered(change, isr=change.proposed_isr,
                                               partition_epoch=change.partition_epoch + 1)

    def row(self, follower=1):
        f = self.follower_logs[follower]
        return (self.leader_log.log_end_offset, self.leader_log.high_watermark,
                self.leader.followers[follower].log_end_offset, f.log_end_offset, f.high_watermark)


def test_synchronization_example__the_seed_table(tmp_path):
    pair = Pair(tmp_path)
    # columns: leader LEO, leader HW, leader's remote LEO of the follower, follower LEO, follower HW
    assert pair.row() == (0, 0, 0, 0, 0)          # T0: all zero
    pair.produce(b"m1")
    assert pair.row() == (1, 0, 0, 0, 0)          # T1: after one produce, LEO 1, HW 0
    pair.fetch()
    assert pair.row() == (1, 0, 0, 1, 0)          # T2: follower LEO 1
    pair.fetch()
    assert pair.row() == (1, 1, 1, 1, 1)          # T3: remote LEO 1, HW 1, follower HW 1


def test_high_watermark__never_passes_the_smallest_isr_leo_and_never_decreases(tmp_path):
    pair = Pair(tmp_path, followers=(1, 2))
    seen = []
    for step in range(30):
        pair.produce(b"v%d" % step)
        pair.fetch(1)
        if step % 3 == 0:
            pair.fetch(2)
        isr_leos = [pair.leader_log.log_end_offset] + [pair.leader.followers[f].log_end_offset for f in (1, 2)]
        assert pair.leader.high_watermark <= min(isr_leos)
        seen.append(pair.leader.high_watermark)
    assert seen == sorted(seen) and seen[-1] > 0


def test_isr__lagging_follower_leaves_after_lag_time_and_rejoins_when_caught_up(tmp_path):
    pair = Pair(tmp_path, followers=(1, 2))
    pair.produce(b"a")
    pair.fetch(1), pair.fetch(2)
    pair.clock.advance(LAG_MS - 1)
    pair.produce(b"b")
    pair.fetch(1), pair.fetch(1)        # follower 1 keeps up; follower 2 is paused
    assert pair.leader.lagging_isr_members(pair.clock.now_ms()) == set()
    pair.clock.advance(2)
    assert pair.leader.lagging_isr_members(pair.clock.now_ms()) == {2}
    assert pair.leader.high_watermark == 0       # held back: follower 2 has not confirmed offset 0
    shrink = pair.propose()
    assert shrink.proposed_isr == {0, 1}
    assert pair.leader.high_watermark == 0       # a removal counts once the controller applied it
    assert pair.accept(shrink)
    assert pair.leader.high_watermark == 2
    assert pair.leader.caught_up_outside_isr(pair.clock.now_ms()) == set()
    pair.fetch(2)
    assert pair.leader.caught_up_outside_isr(pair.clock.now_ms()) == set()  # fetched, LEO not confirmed
    pair.fetch(2)
    assert pair.leader.caught_up_outside_isr(pair.clock.now_ms()) == {2}
    pair.accept(pair.propose())
    assert pair.leader.isr == {0, 1, 2}
    assert [r.value for r in decode_records(pair.follower_logs[2].read(0, 1 << 20))] == [b"a", b"b"]


def test_isr__paused_follower_whose_leo_equals_the_hw_does_not_rejoin_without_fetching(tmp_path):
    """A follower that stopped at LEO 0 on an empty log is "at the HW", but it is not
    fetching: rejoining it would make acks=all wait on a replica that never answers."""
    pair = Pair(tmp_path, followers=(1, 2))
    pair.fetch(1)
    pair.clock.advance(LAG_MS + 1)
    pair.fetch(1)
    assert pair.leader.lagging_isr_members(pair.clock.now_ms()) == {2}
    pair.accept(pair.propose())
    assert pair.leader.high_watermark == pair.leader.followers[2].log_end_offset == 0
    assert pair.leader.caught_up_outside_isr(pair.clock.now_ms()) == set()


def waits(answers, *, fetch_max_wait_ms=500, idle_fetch_max_wait_ms=5_000, replica_lag_time_max_ms=30_000):
    """The wait each poll of a fetch loop asks for, given whether each answer had records."""
    wait_ms, asked = fetch_max_wait_ms, []
    for answered_records in answers:
        asked.append(wait_ms)
        wait_ms = follower_fetch_wait_ms(wait_ms, answered_records=answered_records,
                                         fetch_max_wait_ms=fetch_max_wait_ms,
                                         idle_fetch_max_wait_ms=idle_fetch_max_wait_ms,
                                         replica_lag_time_max_ms=replica_lag_time_max_ms)
    return asked


def test_follower_wait__idle_polls_double_to_the_idle_wait__records_bring_it_back_at_once():
    assert waits([False] * 6 + [True, False]) == [500, 1000, 2000, 4000, 5000, 5000, 5000, 500]
    assert waits([True] * 3) == [500, 500, 500]        # records flowing: Kafka's replica.fetch.wait.max.ms


def test_follower_wait__never_above_half_the_lag_time__never_below_fetch_max_wait():
    assert max(waits([False] * 10, replica_lag_time_max_ms=2_000)) == 1_000
    assert waits([False] * 3, fetch_max_wait_ms=100, replica_lag_time_max_ms=2_000) == [100, 200, 400]
    assert set(waits([False] * 4, fetch_max_wait_ms=500, idle_fetch_max_wait_ms=100)) == {500}


def test_isr__an_idle_follower_polling_at_the_longest_wait_stays_in_sync(tmp_path):
    """The longest idle poll is half the lag time: a caught-up follower that polls that
    rarely is never counted lagging, when records come after a long parked poll too."""
    pair = Pair(tmp_path)
    pair.produce(b"a")
    pair.fetch(), pair.fetch()
    longest_ms = max(waits([False] * 20, idle_fetch_max_wait_ms=10**9, replica_lag_time_max_ms=LAG_MS))
    for _ in range(5):
        pair.clock.advance(longest_ms)
        pair.fetch()
        assert pair.leader.lagging_isr_members(pair.clock.now_ms()) == set()
    pair.clock.advance(longest_ms - 1)   # parked at the LEO; records come just before its wait ends
    pair.produce(b"b")
    pair.fetch()
    assert pair.leader.lagging_isr_members(pair.clock.now_ms()) == set()


# --- KIP-497: the HW over the maximal ISR, one ISR change in flight ---------------


def joining_follower_caught_up(tmp_path):
    """ISR {0, 1}; follower 2 outside it, fetching, caught up at the HW 1."""
    pair = Pair(tmp_path, followers=(1, 2), isr=[0, 1])
    pair.produce(b"a")
    pair.fetch(1), pair.fetch(2), pair.fetch(1), pair.fetch(2)
    assert pair.leader.high_watermark == 1
    assert pair.leader.caught_up_outside_isr(pair.clock.now_ms()) == {2}
    return pair


def test_isr_expansion_in_flight__hw_cannot_pass_the_joining_followers_leo(tmp_path):
    pair = joining_follower_caught_up(tmp_path)
    expand = pair.propose()
    assert (expand.added, expand.removed) == ({2}, set())
    assert pair.leader.isr == {0, 1} and pair.leader.maximal_isr == {0, 1, 2}
    pair.produce(b"b")
    pair.fetch(1), pair.fetch(1)                 # ISR member 1 confirms offset 1; 2 stays at LEO 1
    assert pair.leader.high_watermark == pair.leader.followers[2].log_end_offset == 1
    pair.fetch(2), pair.fetch(2)
    assert pair.leader.high_watermark == 2
    assert not pair.accept(expand)               # nothing left to move: the HW already counted 2
    assert pair.leader.isr_state == CommittedIsr(frozenset({0, 1, 2}), 1)


def test_isr_shrink_in_flight__removed_follower_holds_the_hw_until_the_controller_applies_it(tmp_path):
    pair = Pair(tmp_path, followers=(1, 2))
    pair.produce(b"a")
    pair.fetch(1), pair.fetch(1)                 # follower 2 never fetches
    pair.clock.advance(LAG_MS + 1)
    pair.fetch(1)
    shrink = pair.propose()
    assert (shrink.added, shrink.removed) == (set(), {2})
    assert pair.leader.maximal_isr == {0, 1, 2}
    pair.fetch(1)
    assert pair.leader.high_watermark == 0       # the controller may still refuse it
    assert pair.accept(shrink)
    assert pair.leader.high_watermark == 1


def test_isr_change_refused__dropped_and_the_hw_moves_past_the_follower(tmp_path):
    pair = joining_follower_caught_up(tmp_path)
    expand = pair.propose()
    pair.produce(b"b")
    pair.fetch(1), pair.fetch(1)
    assert pair.leader.high_watermark == 1
    assert pair.leader.isr_change_refused(expand)    # e.g. FENCED_LEADER_EPOCH: not applied
    assert pair.leader.isr_state == CommittedIsr(frozenset({0, 1}), 0)
    assert pair.leader.high_watermark == 2
    pair.fetch(2), pair.fetch(2)
    assert pair.propose().added == {2}               # caught up again: a later tick proposes again


def test_isr_change_in_flight__no_second_proposal(tmp_path):
    pair = joining_follower_caught_up(tmp_path)
    expand = pair.propose()
    pair.clock.advance(LAG_MS + 1)                   # follower 1 now lags too
    pair.fetch(2)
    assert pair.leader.lagging_isr_members(pair.clock.now_ms()) == {1}
    assert pair.propose() is None
    with pytest.raises(IsrChangeInFlight):
        pair.leader.propose_isr({0, 2})
    assert pair.leader.isr_state is expand


def test_isr_answer_older_than_a_pushed_record__ignored(tmp_path):
    """The controller accepted the expansion (epoch 1), then fenced restarted
    follower 1 itself (epoch 2) and pushed that; its answer to the expansion comes
    after the push and must not bring follower 1 back."""
    pair = joining_follower_caught_up(tmp_path)
    expand = pair.propose()
    pair.leader.apply_isr({0, 2}, 2)
    assert pair.leader.isr_state == CommittedIsr(frozenset({0, 2}), 2)
    assert not pair.leader.isr_change_answered(expand, isr={0, 1, 2}, partition_epoch=1)
    assert not pair.leader.isr_change_refused(expand)
    assert pair.leader.isr_state == CommittedIsr(frozenset({0, 2}), 2)
    assert not pair.leader.apply_isr({0, 1, 2}, 2)   # a record the leader already holds


def test_follower_fenced_by_the_controller__its_old_progress_cannot_bring_it_back_into_the_isr(tmp_path):
    """A restarted follower is fenced out of the ISR (its log may have lost its
    unflushed tail); the fetches it made before the restart must not count: it
    rejoins only once it fetches again and catches up."""
    from rafka.core.clock import FakeClock
    from rafka.core.log import PartitionLog
    from rafka.core.replication import LeaderState
    from tests.core.helpers import batch
    clock = FakeClock()
    log = PartitionLog(tmp_path, clock=clock)
    leader = LeaderState(replica_id=0, replicas=[0, 1, 2], isr=[0, 1, 2], leader_epoch=0, partition_epoch=0, log=log,
                         now_ms=clock.monotonic_ms(), replica_lag_time_max_ms=10_000)
    log.append_as_leader(batch(*[b"v%d" % i for i in range(5)]), leader_epoch=0)
    for follower in (1, 2):
        leader.on_follower_fetch(follower, 5, clock.monotonic_ms())
    assert log.high_watermark == 5
    leader.apply_isr([0, 2], leader.partition_epoch + 1)        # follower 1 restarted: fenced
    assert 1 not in leader.caught_up_outside_isr(clock.monotonic_ms())
    leader.on_follower_fetch(1, 2, clock.monotonic_ms())         # its first real fetch: it lost 2..4
    assert 1 not in leader.caught_up_outside_isr(clock.monotonic_ms())
    leader.on_follower_fetch(1, 5, clock.monotonic_ms())
    assert 1 in leader.caught_up_outside_isr(clock.monotonic_ms())
