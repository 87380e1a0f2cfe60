"""`rafka lag`'s arithmetic and its refresh loop on a FakeClock: rates from two
samples, trend, time lag, the table; and the command itself over a fake admin."""

import argparse

import pytest

from rafka.cli_groups import cmd_lag
from rafka.cluster_errors import UsageError
from rafka.core.clock import FakeClock
from rafka.core.lag import (GROWING, LAG_HEADERS, SHRINKING, STEADY, LagSample, PartitionPosition,
                            format_duration_ms, group_lag, partition_lags, watch)

pytestmark = pytest.mark.core

T0 = 1_700_000_000_000


def position(partition=0, committed=90, end=100, oldest_ms=None, **extra):
    return PartitionPosition(topic="orders", partition=partition, committed_offset=committed, log_end_offset=end,
                             oldest_unconsumed_timestamp_ms=oldest_ms, **extra)


def sample(at_ms, *positions, group="billing"):
    return LagSample(group=group, wall_ms=at_ms, monotonic_ms=at_ms, positions=positions)


def test_first_sample__lag_and_time_lag_but_no_rates_or_trend():
    (lag,) = partition_lags(sample(T0, position(committed=90, end=100, oldest_ms=T0 - 2_500)))
    assert (lag.lag, lag.time_lag_ms, lag.consume_rate, lag.produce_rate, lag.trend) == (10, 2_500, None, None, None)


def test_two_samples__rates_are_deltas_per_second_and_the_trend_follows_the_lag():
    before = sample(T0, position(0, committed=100, end=150), position(1, committed=40, end=50),
                    position(2, committed=7, end=9))
    after = sample(T0 + 2_000, position(0, committed=140, end=250), position(1, committed=50, end=55),
                   position(2, committed=9, end=11))
    growing, shrinking, steady = partition_lags(after, before)
    assert (growing.consume_rate, growing.produce_rate, growing.lag, growing.trend) == (20.0, 50.0, 110, GROWING)
    assert (shrinking.consume_rate, shrinking.produce_rate, shrinking.lag, shrinking.trend) == (5.0, 2.5, 5, SHRINKING)
    assert (steady.consume_rate, steady.produce_rate, steady.trend) == (1.0, 1.0, STEADY)
    total = group_lag([growing, shrinking, steady])
    assert (total.lag, total.consume_rate, total.produce_rate, total.trend) == (117, 26.0, 53.5, GROWING)


def test_time_lag__zero_without_lag__never_negative__unknown_without_the_record():
    caught_up, ahead, unread, no_commit = partition_lags(sample(
        T0, position(0, committed=100, end=100, oldest_ms=None), position(1, committed=5, end=6, oldest_ms=T0 + 900),
        position(2, committed=5, end=6, oldest_ms=None), position(3, committed=None, end=6)))
    assert (caught_up.lag, caught_up.time_lag_ms) == (0, 0)
    assert ahead.time_lag_ms == 0          # the producer's clock ran ahead of ours
    assert (unread.lag, unread.time_lag_ms) == (1, None)
    assert (no_commit.lag, no_commit.time_lag_ms, no_commit.trend) == (None, None, None)
    assert group_lag([caught_up, ahead, unread, no_commit]).time_lag_ms == 0


def test_a_reset_to_an_earlier_offset__a_negative_consume_rate_and_growing_lag():
    before, after = sample(T0, position(committed=90)), sample(T0 + 1_000, position(committed=40))
    (lag,) = partition_lags(after, before)
    assert (lag.consume_rate, lag.trend) == (-50.0, GROWING)


def test_a_partition_new_since_the_previous_sample__no_rate_for_it():
    before = sample(T0, position(0))
    fresh, = partition_lags(sample(T0 + 1_000, position(1, committed=3, end=5)), before)
    assert (fresh.consume_rate, fresh.produce_rate, fresh.trend) == (None, None, None)
    assert group_lag([fresh]).trend is None


def test_samples_out_of_order_or_of_two_groups__refused():
    with pytest.raises(ValueError, match="taken before"):
        partition_lags(sample(T0, position()), sample(T0, position()))
    with pytest.raises(ValueError, match="two groups"):
        partition_lags(sample(T0 + 1, position()), sample(T0, position(), group="other"))


@pytest.mark.parametrize("ms, text", [(0, "0ms"), (999, "999ms"), (1_000, "1.0s"), (59_949, "59.9s"),
                                      (60_000, "1m00s"), (125_000, "2m05s"), (3_600_000 * 3 + 420_000, "3h07m")])
def test_durations_read_at_a_glance(ms, text):
    assert format_duration_ms(ms) == text


def test_watch__every_interval_a_table__the_first_without_rates():
    clock = FakeClock(T0)
    produced = iter([100, 160, 220])

    def take():
        end = next(produced)
        return LagSample(group="billing", wall_ms=clock.now_ms(), monotonic_ms=clock.monotonic_ms(),
                         positions=(position(committed=90, end=end, oldest_ms=T0 - 1_000),))
    printed = []
    assert watch(take, interval_s=2, sleep=lambda s: clock.advance(int(s * 1000)), emit=printed.append,
                 refreshes=3) == 3
    tables = [text for text in printed if text]
    assert len(tables) == 3 and printed[1] == printed[3] == ""     # a blank line between tables
    first, second, third = ([line.split() for line in table.splitlines()] for table in tables)
    assert first[0][:3] == ["GROUP", "billing", "at"] and first[1] == list(LAG_HEADERS)
    assert first[2] == ["billing", "orders", "0", "90", "100", "10", "-", "-", "-", "1.0s", "-", "-", "-"]
    assert second[2] == ["billing", "orders", "0", "90", "160", "70", "-", "-", "-", "3.0s", "0.0/s", "30.0/s",
                         GROWING]
    assert third[2][-4:] == ["5.0s", "0.0/s", "30.0/s", GROWING]
    assert tables[1].splitlines()[0] == ("GROUP billing at 2023-11-14T22:13:22Z: lag 70 (growing), time lag 3.0s, "
                                         "consume 0.0/s, produce 30.0/s")


def test_watch__without_print_first__the_first_sample_is_only_the_base_of_the_rates():
    clock = FakeClock(T0)
    printed = []
    watch(lambda: sample(clock.monotonic_ms(), position()), interval_s=1, sleep=lambda s: clock.advance(1000),
          emit=printed.append, refreshes=2, print_first=False)
    assert len(printed) == 1 and "consume 0.0/s, produce 0.0/s" in printed[0] and STEADY in printed[0]


def test_watch__bad_interval_or_count__refused():
    with pytest.raises(ValueError, match="positive"):
        watch(lambda: None, interval_s=0, sleep=None, emit=None)
    with pytest.raises(ValueError, match="at least 1"):
        watch(lambda: None, interval_s=1, sleep=None, emit=None, refreshes=0)


class FakeAdmin:
    """What cmd_lag asks of Admin: a group with one member on partition 0 and
    nothing committed on partition 1; the log grows 10 records per look."""

    def __init__(self, state="Stable"):
        self.state = state
        self.looks = 0
        self.asked_timestamps = []

    def describe_consumer_group(self, group):
        return {"state": self.state}

    def consumer_group_lag(self, group):
        self.looks += 1
        return [{"group": group, "topic": "orders", "partition": 0, "current_offset": 5 * self.looks,
                 "log_end_offset": 10 * self.looks, "lag": 5 * self.looks, "consumer_id": "c-1", "host": "/10.0.0.1",
                 "client_id": "app"},
                {"group": group, "topic": "orders", "partition": 1, "current_offset": None, "log_end_offset": 3,
                 "lag": None, "consumer_id": None, "host": None, "client_id": None}]

    def record_timestamps(self, offsets):
        self.asked_timestamps.append(dict(offsets))
        return {tp: T0 - 4_000 for tp in offsets}


def lag_args(**values):
    return argparse.Namespace(**{"group": "billing", "watch": None, "iterations": None, "interval": 1.0, **values})


def test_cmd_lag__without_watch__two_looks_one_table(capsys):
    clock, admin = FakeClock(T0), FakeAdmin()
    assert cmd_lag(admin, lag_args(interval=0.5), clock=clock, sleep=lambda s: clock.advance(int(s * 1000))) == 0
    lines = capsys.readouterr().out.splitlines()
    assert admin.looks == 2 and [list(asked.values()) for asked in admin.asked_timestamps] == [[5], [10]]
    assert lines[0].startswith("GROUP billing at ") and lines[0].endswith(
        ": lag 10 (growing), time lag 4.5s, consume 10.0/s, produce 20.0/s")
    assert [line.split() for line in lines[2:]] == [
        ["billing", "orders", "0", "10", "20", "10", "c-1", "/10.0.0.1", "app", "4.5s", "10.0/s", "20.0/s", GROWING],
        ["billing", "orders", "1", "-", "3", "-", "-", "-", "-", "-", "-", "0.0/s", "-"]]


def test_cmd_lag__watch_with_iterations__that_many_tables(capsys):
    clock, admin = FakeClock(T0), FakeAdmin()
    assert cmd_lag(admin, lag_args(watch=2.0, iterations=3), clock=clock,
                   sleep=lambda s: clock.advance(int(s * 1000))) == 0
    assert admin.looks == 3 and capsys.readouterr().out.count("GROUP billing at ") == 3


def test_cmd_lag__ctrl_c__ends_quietly(capsys):
    clock, admin = FakeClock(T0), FakeAdmin()

    def sleep(seconds):
        raise KeyboardInterrupt
    assert cmd_lag(admin, lag_args(watch=1.0), clock=clock, sleep=sleep) == 0
    assert capsys.readouterr().out.count("GROUP billing at ") == 1


def test_cmd_lag__unknown_group__kafkas_message(capsys):
    assert cmd_lag(FakeAdmin(state="Dead"), lag_args(group="nobody")) == 1
    assert "Error: Consumer group 'nobody' does not exist." in capsys.readouterr().err


@pytest.mark.parametrize("values, message", [({"watch": 0.0}, "--watch takes a positive number of seconds, not 0"),
                                             ({"iterations": 2}, "--iterations takes a positive count, with --watch"),
                                             ({"interval": -1.0}, "--interval takes a positive number of seconds")])
def test_cmd_lag__bad_options__usage_error_before_the_cluster_is_asked(values, message):
    admin = FakeAdmin()
    with pytest.raises(UsageError, match=message):
        cmd_lag(admin, lag_args(**values))
    assert admin.looks == 0
