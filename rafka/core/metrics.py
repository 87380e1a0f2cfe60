"""Metrics as plain numbers: what a node counts, and how an exporter reads it.

The trade-off: the broker's hot path (a produce, a fetch, every request through
dispatch) only bumps ints and floats that its own objects hold (`count += 1`,
one slot of a fixed bucket array), with no call into a metrics library; the rest
(log size, ISR, parked requests, lag) are gauges read by a callback when the
exporter collects, every few seconds. A metric so costs the hot path a few
attribute updates and an idle node nothing; the price is that what a scrape shows
is up to one export interval old.

The registry holds (family, collect) pairs: `collect()` returns the family's
samples now, as (label values, value) with a value that is a number, or for a
histogram family a Histogram. A counter's value is cumulative (the exporter sends
the difference since its last export); it never decreases within a process.

Invariants: a family name is registered with one Family only (same kind, same
labels); every sample of a family carries one value per label name; histogram
buckets are fixed at construction (Prometheus' `le`: bucket i counts values
<= bounds[i], the last slot the values above every bound).

Pure Python, no Ray. Callers: rafka.protocol.dispatch (RequestMetrics),
rafka.core.kafka_metrics (the families, with Kafka's names, and their sources),
rafka.actors.metrics_export (the exporter to Ray's metrics).
"""

from __future__ import annotations

import dataclasses
import enum
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence

# Request latencies in ms, from a fast produce (~0.3 ms) to a long poll (fetch.max.wait
# of 500 ms) and a JoinGroup parked for a rebalance (seconds).
LATENCY_BUCKETS_MS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0,
                      1_000.0, 2_500.0, 5_000.0, 10_000.0, 30_000.0)


class Kind(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclasses.dataclass(frozen=True)
class Family:
    """A metric: `name` as Prometheus shows it without Ray's `ray_` prefix (and, for
    a counter, without the `_total` Ray appends); `mbean`: the Kafka JMX name it
    translates ("" for rafka's own)."""
    name: str
    help: str
    kind: Kind
    labels: tuple[str, ...] = ()
    mbean: str = ""
    bounds: tuple[float, ...] = ()     # a histogram's buckets

    def __post_init__(self) -> None:
        if (self.kind is Kind.HISTOGRAM) != bool(self.bounds):
            raise ValueError(f"{self.name}: bounds are for histograms, and every histogram needs them")


class Histogram:
    """Counts of observed values in fixed buckets, their count and their sum."""
    __slots__ = ("bounds", "bucket_counts", "count", "sum")

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS_MS) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError(f"histogram bounds must increase: {bounds}")
        self.bounds = tuple(bounds)
        self.bucket_counts = [0] * (len(bounds) + 1)   # the last: above every bound (+Inf)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.bucket_counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value

    def merge(self, other: Histogram) -> None:
        if other.bounds != self.bounds:
            raise ValueError("histograms with different buckets cannot merge")
        for i, n in enumerate(other.bucket_counts):
            self.bucket_counts[i] += n
        self.count += other.count
        self.sum += other.sum

    def cumulative_counts(self) -> list[int]:
        """Prometheus' `_bucket` values: observations <= each bound, then all (+Inf)."""
        total, counts = 0, []
        for n in self.bucket_counts:
            total += n
            counts.append(total)
        return counts


def quantile(bounds: Sequence[float], bucket_counts: Sequence[int], q: float) -> float | None:
    """The q-quantile of bucketed observations, interpolated linearly inside its
    bucket as Prometheus' histogram_quantile does (the first bucket from 0; one
    above every bound answers the last bound). None without observations."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q} is outside [0, 1]")
    total = sum(bucket_counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(bucket_counts):
        if n and seen + n >= rank:
            if i == len(bounds):
                return bounds[-1]
            low = bounds[i - 1] if i > 0 else 0.0
            return low + (bounds[i] - low) * max(0.0, rank - seen) / n
        seen += n
    return bounds[-1]


Labels = tuple[str, ...]
Sample = tuple[Labels, "float | int | Histogram"]
Collect = Callable[[], Iterable[Sample]]


class MetricsRegistry:
    """What one process exports: families and the callbacks that read them."""

    def __init__(self) -> None:
        self._families: dict[str, Family] = {}
        self._collectors: list[tuple[Family, Collect]] = []

    def add(self, family: Family, collect: Collect) -> None:
        known = self._families.setdefault(family.name, family)
        if known != family:
            raise ValueError(f"metric {family.name} registered twice, differently: {known} and {family}")
        self._collectors.append((family, collect))

    def value(self, family: Family, read: Callable[[], float | int | Histogram], labels: Labels = ()) -> None:
        """One sample of `family` with fixed labels, read at each collection."""
        if len(labels) != len(family.labels):
            raise ValueError(f"{family.name} takes labels {family.labels}, not {labels}")
        self.add(family, lambda: ((labels, read()),))

    def collect(self, *, on_error: Callable[[Family, Exception], None] | None = None
                ) -> list[tuple[Family, list[Sample]]]:
        """Every family's samples now, families in registration order (a collector
        may return nothing: e.g. a replica that is not serving). A collector that
        raises: `on_error(family, error)` and its samples are left out, or, without
        `on_error`, the error propagates."""
        by_name: dict[str, list[Sample]] = {}
        for family, collect in self._collectors:
            samples = by_name.setdefault(family.name, [])
            try:
                collected = [(tuple(labels), value) for labels, value in collect() or ()]
                for labels, _ in collected:
                    if len(labels) != len(family.labels):
                        raise ValueError(f"{family.name} takes labels {family.labels}, got {labels}")
            except Exception as error:
                if on_error is None:
                    raise
                on_error(family, error)
                continue
            samples += collected
        return [(self._families[name], samples) for name, samples in by_name.items()]

    @property
    def families(self) -> list[Family]:
        return list(self._families.values())


class RequestMetrics:
    """Per request name and version: a latency histogram (Kafka's TotalTimeMs: from
    the request's arrival at dispatch to its response being ready, parked time
    included), whose count is the request count (RequestsPerSec). The dispatcher
    keeps its own lookup of these by API key and version, so a request costs a
    dict lookup and Histogram.observe."""

    def __init__(self, bounds_ms: Sequence[float] = LATENCY_BUCKETS_MS) -> None:
        self.bounds_ms = tuple(bounds_ms)
        self.by_request: dict[tuple[str, int], Histogram] = {}

    def histogram(self, request: str, version: int) -> Histogram:
        found = self.by_request.get((request, version))
        if found is None:
            found = self.by_request[(request, version)] = Histogram(self.bounds_ms)
        return found
