"""An actor's metrics, copied into Ray's metrics (`ray.util.metrics`) every interval.

Every rafka actor (controller, replica, coordinator) holds a core.metrics
MetricsRegistry, which its hot paths feed with plain ints (core.metrics says why).
The exporter is one asyncio task on the actor's event loop: every `interval_s`
(default: Ray's own `metrics_report_interval_ms`, how often a worker reports to
its node's metrics agent; exporting more often would show nothing sooner) it runs
the registered refreshes (the coordinator's lag probe), collects the registry and
writes what changed into Ray's metric objects:
  * a counter: Counter.inc by its growth since the last export (a series first
    seen at 0 is recorded as 0, so that e.g. `isrshrinks_total` exists before the
    first shrink, as Kafka's meters do);
  * a gauge: Gauge.set at every export, changed or not: a worker reports a gauge
    to its agent only in the interval it was set, and the agent drops a gauge
    series not reported for two intervals (Ray 2.60's OpenTelemetryMetricRecorder
    gauge TTL). So a series no collector reports any more (a partition no longer
    led, a group deleted) leaves the endpoint by itself two intervals later;
  * a histogram (request TotalTimeMs, election time) as gauges, not as Ray's
    Histogram: Histogram.observe takes one value per call (about 2.5 us each), so
    copying a node's thousands of requests per second into it would cost, off the
    hot path but on the same loop, what recording them there would (and Ray's
    agent turns bucket counts back into bucket midpoints anyway). Instead each
    export sets, per request, Prometheus' histogram series as gauges
    (`_bucket{le}` cumulative counts, `_count`, `_sum`; histogram_quantile() and
    rate() read them as they would a native histogram's, each process having its
    own WorkerId label, so a restarted actor's series are new ones, not resets)
    and the quantile gauges the JMX exporter makes of Kafka's percentiles
    (`{quantile="0.99"}`), here over the requests since the previous export.
    The cost is ~26 gauge sets per request type seen, per interval; with the
    other gauges, well under a millisecond per export for a replica.

Finding a name: Ray prefixes every custom metric with `ray_` and appends
`_total` to counters, so Kafka's `kafka.server:type=BrokerTopicMetrics,
name=MessagesInPerSec,topic=T` (the JMX exporter's
`kafka_server_brokertopicmetrics_messagesin_total{topic="T"}`) is
`ray_kafka_server_brokertopicmetrics_messagesin_total{topic="T"}` on each node's
metrics endpoint (`ray.nodes()[i]["MetricsExportPort"]`, listed for Prometheus in
Ray's `prom_metrics_service_discovery.json`), with Ray's labels added (NodeAddress,
WorkerId, SessionName, ...): sum over them, e.g. `sum by (topic) (rate(...[1m]))`.
A relabel rule (`__name__` regex `ray_(kafka_.*)`, replacement `$1`) gives back
the JMX exporter's names. README's "Metrics" section lists every name.

Callers: actors.serving (one exporter per actor's Kafka node).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from rafka.core.metrics import Family, Histogram, Kind, Labels, MetricsRegistry, quantile

logger = logging.getLogger(__name__)

# The JMX exporter's labels for Kafka's 50thPercentile ... 999thPercentile.
QUANTILES = (("0.50", 0.50), ("0.75", 0.75), ("0.95", 0.95), ("0.98", 0.98), ("0.99", 0.99), ("0.999", 0.999))


def ray_report_interval_s() -> float:
    """How often Ray's workers report metrics to their node's agent (at least 1 s,
    as Ray's own floor)."""
    import ray
    return max(1.0, ray._config.metrics_report_interval_ms() / 1000)


class RayMetricsExporter:
    def __init__(self, registry: MetricsRegistry, *, interval_s: float | None = None, metric_types=None) -> None:
        """`metric_types`: what provides Counter and Gauge (default ray.util.metrics;
        tests pass fakes)."""
        self.registry = registry
        self.interval_s = interval_s
        self._types = metric_types
        self._refreshes: list[Callable[[], Awaitable[None]]] = []
        self._metrics: dict[str, object] = {}                       # Ray's metric objects, by exported name
        self._counted: dict[tuple[str, Labels], float] = {}         # a counter's value at its last export
        self._gauges: dict[str, dict[Labels, float]] = {}           # gauge values set, by exported name
        self._windows: dict[tuple[str, Labels], list[int]] = {}     # a histogram's buckets at its last export
        self._failing: set[str] = set()                             # families whose collector failed (logged once)
        self._task: asyncio.Task | None = None
        self.exports = 0

    def refresh_before_export(self, refresh: Callable[[], Awaitable[None]]) -> None:
        """`await refresh()` before each export (bounded by the interval)."""
        self._refreshes.append(refresh)

    def start(self) -> None:
        """From the actor's event loop; once."""
        if self._task is None:
            if self.interval_s is None:
                self.interval_s = ray_report_interval_s()
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.export_once()
            except Exception:   # said loudly; the next round tries again
                logger.exception("exporting metrics failed")

    async def export_once(self) -> None:
        for refresh in self._refreshes:
            try:
                await asyncio.wait_for(refresh(), timeout=self.interval_s or 10.0)
            except Exception as error:
                logger.info("refreshing metrics before export failed: %s: %s", type(error).__name__, error)
        for family, samples in self.registry.collect(on_error=self._collector_failed):
            if family.kind is Kind.COUNTER:
                self._export_counter(family, samples)
            elif family.kind is Kind.GAUGE:
                self._export_gauges(family.name, family.labels, self._help(family), samples)
            else:
                self._export_histograms(family, samples)
        self.exports += 1

    def _collector_failed(self, family: Family, error: Exception) -> None:
        if family.name not in self._failing:
            self._failing.add(family.name)
            logger.warning("metric %s: its collector failed: %s: %s", family.name, type(error).__name__, error)

    # --- into Ray's metrics -------------------------------------------------------------

    def _metric(self, kind: str, name: str, help_text: str, tag_keys: tuple[str, ...]):
        metric = self._metrics.get(name)
        if metric is None:
            types = self._types
            if types is None:
                import ray.util.metrics as types
            metric = self._metrics[name] = getattr(types, kind)(name, help_text, tag_keys=tag_keys)
        return metric

    @staticmethod
    def _help(family: Family) -> str:
        return f"{family.help} (Kafka: {family.mbean})" if family.mbean else family.help

    def _export_counter(self, family: Family, samples) -> None:
        counter = self._metric("Counter", family.name, self._help(family), family.labels)
        for labels, value in samples:
            tags = dict(zip(family.labels, labels))
            key = (family.name, labels)
            before = self._counted.get(key)
            if before is None and value <= 0:
                # Ray's Counter.inc refuses 0; its record path does not, and the series then exists.
                record = getattr(counter, "_record", None)
                if record is not None:
                    record(0.0, tags=tags)
                self._counted[key] = 0
                continue
            before = before or 0
            if value > before:
                counter.inc(value - before, tags=tags)
            self._counted[key] = value   # a smaller value: a reset (not expected in one process)

    def _export_gauges(self, name: str, label_names: tuple[str, ...], help_text: str, samples) -> None:
        gauge = self._metric("Gauge", name, help_text, label_names)
        current: dict[Labels, float] = {}
        for labels, value in samples:
            current[labels] = value
            gauge.set(value, tags=dict(zip(label_names, labels)))
        self._gauges[name] = current

    def _export_histograms(self, family: Family, samples) -> None:
        help_text = self._help(family)
        buckets, counts, sums, quantiles = [], [], [], []
        for labels, histogram in samples:
            histogram: Histogram
            cumulative = histogram.cumulative_counts()
            bounds = [repr(float(b)) for b in histogram.bounds] + ["+Inf"]
            buckets += [((*labels, le), n) for le, n in zip(bounds, cumulative)]
            counts.append((labels, histogram.count))
            sums.append((labels, histogram.sum))
            key = (family.name, labels)
            last = self._windows.get(key) or [0] * len(histogram.bucket_counts)
            window = [now - before for now, before in zip(histogram.bucket_counts, last)]
            self._windows[key] = list(histogram.bucket_counts)
            if sum(window):   # else the last window's quantiles stand
                quantiles += [((*labels, label), quantile(histogram.bounds, window, q)) for label, q in QUANTILES]
            else:
                quantiles += [((*labels, label), value) for label, value in self._held_quantiles(family.name, labels)]
        self._export_gauges(f"{family.name}_bucket", (*family.labels, "le"), help_text, buckets)
        self._export_gauges(f"{family.name}_count", family.labels, help_text, counts)
        self._export_gauges(f"{family.name}_sum", family.labels, help_text, sums)
        self._export_gauges(family.name, (*family.labels, "quantile"), help_text, quantiles)

    def _held_quantiles(self, name: str, labels: Labels) -> list[tuple[str, float]]:
        """(quantile, value) set at an earlier export: kept while nothing was observed since."""
        return [(key[-1], value) for key, value in self._gauges.get(name, {}).items() if key[:-1] == labels]
