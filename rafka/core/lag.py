"""Consumer lag over time, as `rafka lag` shows it: the records a group is behind
(kafka-consumer-groups --describe's LAG), plus what two looks some seconds apart
tell: how fast the group consumes and the topic grows, whether the lag is growing
or shrinking, and how old the oldest record it has not consumed is (time lag).

A LagSample is one look at a group: per partition its committed offset, log end
offset (the HW, as Kafka's tools mean it for a consumer) and the timestamp of the
record at the committed offset, taken at one instant of a Clock. `partition_lags`
compares a sample with the one before it (None for the first: no rates, no trend);
`watch` takes and prints samples every interval. No I/O here: the caller hands in
how to take a sample, how to sleep and where to print, so tests move a FakeClock
instead of sleeping.

Rates are deltas over the monotonic time between the two samples: consume rate =
committed offset delta / s (negative after a reset to an earlier offset, as Burrow
calls it a rewind), produce rate = log end offset delta / s. Time lag = the
sample's wall-clock time minus the oldest unconsumed record's timestamp, 0 when
the lag is 0, never below 0 (a producer's clock may run ahead), unknown ("-")
when there is lag but that record could not be read.

Callers: cli_groups (the `lag` command), tests.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Sequence

from rafka.core.offset_reset import DESCRIBE_OFFSETS_HEADERS, format_table

GROWING, SHRINKING, STEADY = "growing", "shrinking", "steady"
# kafka-consumer-groups --describe's columns first, unchanged (so what reads that
# table reads this one), then what two samples add.
LAG_HEADERS = DESCRIBE_OFFSETS_HEADERS + ("TIME-LAG", "CONSUME-RATE", "PRODUCE-RATE", "TREND")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PartitionPosition:
    """One partition of a group at one instant."""
    topic: str
    partition: int
    committed_offset: int | None              # None: the group has no committed offset here
    log_end_offset: int                       # the HW
    oldest_unconsumed_timestamp_ms: int | None  # the record at the committed offset (None: none read)
    consumer_id: str | None = None
    host: str | None = None
    client_id: str | None = None

    @property
    def lag(self) -> int | None:
        if self.committed_offset is None:
            return None
        return max(0, self.log_end_offset - self.committed_offset)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LagSample:
    group: str
    wall_ms: int          # Clock.now_ms() when taken: what time lag is measured from
    monotonic_ms: int     # Clock.monotonic_ms() when taken: what rates are measured over
    positions: tuple[PartitionPosition, ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PartitionLag:
    position: PartitionPosition
    lag: int | None
    previous_lag: int | None       # the lag in the previous sample (None: none, or no commit then)
    time_lag_ms: int | None
    consume_rate: float | None     # records per second; None on the first sample
    produce_rate: float | None
    trend: str | None              # GROWING, SHRINKING, STEADY; None on the first sample


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GroupLag:
    """The whole group: lags and rates summed, the largest time lag, the trend of
    the summed lag over the partitions both samples have a lag for."""
    lag: int | None
    time_lag_ms: int | None
    consume_rate: float | None
    produce_rate: float | None
    trend: str | None


def time_lag_ms(position: PartitionPosition, wall_ms: int) -> int | None:
    lag = position.lag
    if lag is None:
        return None
    if lag == 0:
        return 0
    if position.oldest_unconsumed_timestamp_ms is None or position.oldest_unconsumed_timestamp_ms < 0:
        return None
    return max(0, wall_ms - position.oldest_unconsumed_timestamp_ms)


def trend_of(lag_before: int | None, lag_now: int | None) -> str | None:
    if lag_before is None or lag_now is None:
        return None
    return GROWING if lag_now > lag_before else SHRINKING if lag_now < lag_before else STEADY


def partition_lags(sample: LagSample, previous: LagSample | None = None) -> list[PartitionLag]:
    """One PartitionLag per position of `sample`, in its order; rates and trend where
    `previous` (an earlier sample of the same group) has the same partition."""
    if previous is not None:
        if previous.group != sample.group:
            raise ValueError(f"samples of two groups: {previous.group!r} then {sample.group!r}")
        if previous.monotonic_ms >= sample.monotonic_ms:
            raise ValueError("the previous sample must be taken before this one")
    elapsed_s = (sample.monotonic_ms - previous.monotonic_ms) / 1000 if previous else None
    before = {(p.topic, p.partition): p for p in previous.positions} if previous else {}
    lags = []
    for position in sample.positions:
        earlier = before.get((position.topic, position.partition))
        consume_rate = produce_rate = trend = None
        if earlier is not None:
            produce_rate = (position.log_end_offset - earlier.log_end_offset) / elapsed_s
            if position.committed_offset is not None and earlier.committed_offset is not None:
                consume_rate = (position.committed_offset - earlier.committed_offset) / elapsed_s
            trend = trend_of(earlier.lag, position.lag)
        lags.append(PartitionLag(position=position, lag=position.lag, previous_lag=earlier.lag if earlier else None,
                                 time_lag_ms=time_lag_ms(position, sample.wall_ms),
                                 consume_rate=consume_rate, produce_rate=produce_rate, trend=trend))
    return lags


def group_lag(lags: Sequence[PartitionLag]) -> GroupLag:
    def total(values):
        known = [v for v in values if v is not None]
        return sum(known) if known else None
    lag = total(p.lag for p in lags)
    time_lags = [p.time_lag_ms for p in lags if p.time_lag_ms is not None]
    compared = [p for p in lags if p.trend is not None]   # partitions with a lag in both samples
    trend = trend_of(sum(p.previous_lag for p in compared), sum(p.lag for p in compared)) if compared else None
    return GroupLag(lag=lag, time_lag_ms=max(time_lags) if time_lags else None,
                    consume_rate=total(p.consume_rate for p in lags), produce_rate=total(p.produce_rate for p in lags),
                    trend=trend)


# --- printing ----------------------------------------------------------------------

def format_rate(records_per_s: float | None) -> str | None:
    return None if records_per_s is None else f"{records_per_s:.1f}/s"


def format_duration_ms(ms: int | None) -> str | None:
    """12ms, 3.4s, 2m05s, 3h07m: what an operator reads at a glance."""
    if ms is None:
        return None
    if ms < 1_000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    seconds = ms // 1000
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def format_lags(sample: LagSample, lags: Sequence[PartitionLag]) -> str:
    """A title line (the group, the sample's UTC time and the group's totals), then
    the table: Kafka's columns, then TIME-LAG, CONSUME-RATE, PRODUCE-RATE, TREND."""
    total = group_lag(lags)
    at = datetime.datetime.fromtimestamp(sample.wall_ms / 1000, datetime.timezone.utc)
    title = (f"GROUP {sample.group} at {at.strftime('%Y-%m-%dT%H:%M:%S')}Z: lag {_cell(total.lag)} "
             f"({total.trend or 'trend -'}), time lag {_cell(format_duration_ms(total.time_lag_ms))}, "
             f"consume {_cell(format_rate(total.consume_rate))}, produce {_cell(format_rate(total.produce_rate))}")
    rows = [(sample.group, p.position.topic, p.position.partition, p.position.committed_offset,
             p.position.log_end_offset, p.lag, p.position.consumer_id, p.position.host, p.position.client_id,
             format_duration_ms(p.time_lag_ms), format_rate(p.consume_rate), format_rate(p.produce_rate), p.trend)
            for p in lags]
    return title + "\n" + format_table(LAG_HEADERS, rows)


def _cell(value) -> str:
    return "-" if value is None else str(value)


# --- the refresh loop ----------------------------------------------------------------

def watch(take_sample: Callable[[], LagSample], *, interval_s: float, sleep: Callable[[float], None],
          emit: Callable[[str], None], refreshes: int | None = None, print_first: bool = True) -> int:
    """Take a sample, print it with what the one before it tells, sleep
    `interval_s`, again: `refreshes` times (None: until interrupted, KeyboardInterrupt
    propagating to the caller). `print_first=False` takes the first sample only as
    the base of the second's rates (`rafka lag` without --watch). Returns the
    number of tables printed."""
    if interval_s <= 0:
        raise ValueError(f"the refresh interval must be positive, not {interval_s}")
    if refreshes is not None and refreshes < 1:
        raise ValueError(f"refreshes must be at least 1, not {refreshes}")
    previous = None
    printed = taken = 0
    while refreshes is None or taken < refreshes:
        if taken:
            sleep(interval_s)
        sample = take_sample()
        taken += 1
        if previous is not None or print_first:
            if printed:
                emit("")
            emit(format_lags(sample, partition_lags(sample, previous)))
            printed += 1
        previous = sample
    return printed
