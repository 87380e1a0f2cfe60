"""The history of a `rafka verify` run: what every producer, consumer, observer and
fault injector saw, one event per JSON line, for the checker (rafka.core.checker).

Events are small frozen values. Every event has `time_ms`: monotonic milliseconds
since the run started, on one clock for the whole run (the driver's), so events of
different actors can be compared. An event with a duration (Send, Commit, Fault)
carries `start_ms` and `end_ms`, and its `time_ms` is `end_ms`: the moment its
outcome was known, which is when it is logged.

Invariants (checked where an event is built, so also where a line is read):
  times are >= 0 and start_ms <= end_ms
  outcome is one of ok / failed / indeterminate; a Send acked ok has its partition
  and offset, and a Send that is not ok has no offset (had it learned one, it would
  be ok)
  offsets are >= 0; a FinalRead's records lie in [log_start_offset, high_watermark)
  in strictly increasing offset order
  a Poll's and a FinalRead's isolation_level is read_uncommitted or read_committed
  a Txn's intent is commit or abort, its outcome one of the three, its writes are
  (topic, partition, value) with values unique within it, its end_requested_ms
  lies in [start_ms, end_ms]
  to_json() is one line, and from_json(e.to_json()) == e
  a line written or read is at most `line_bytes_max` bytes: the reader never holds
  more than one bounded line, however large or damaged the file; a FinalRead too
  large for one line is written as several chunks of the same read (same log start
  and HW), which the checker joins
A history is kept in the order it was logged: each actor logs its own events in the
order they happened (a consumer logs its polls in the order it was handed them).

Pure: no Ray, no clock (times are handed in). Callers: rafka.verify (the workload
writes it), rafka.core.checker (reads it), the verify report and picture.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any, ClassVar, Union

OK, FAILED, INDETERMINATE = "ok", "failed", "indeterminate"
OUTCOMES = (OK, FAILED, INDETERMINATE)
READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)
COMMIT, ABORT = "commit", "abort"                  # what a transaction's producer asked for
COMMITTED, ABORTED = "committed", "aborted"        # a transaction's fate (or INDETERMINATE)

# 1 MiB: far above any event but a FinalRead, which is split to fit.
LINE_BYTES_MAX_DEFAULT = 1 << 20


class InvalidHistory(ValueError):
    """An event that breaks the invariants above, or a history file that cannot be
    read back (a torn, oversized or unknown line). A bug in whoever wrote it: the
    checker refuses to judge a history it cannot trust."""


def _require(ok: bool, event: object, why: str) -> None:
    # Raises rather than asserts: a bad history must be refused under `python -O` too.
    if not ok:
        raise InvalidHistory(f"{type(event).__name__}: {why}: {event!r}")


def _require_time(event: object, *names: str) -> None:
    for name in names:
        value = getattr(event, name)
        _require(isinstance(value, int) and value >= 0, event, f"{name} must be an int >= 0")


def _require_offset(event: object, name: str, value: int | None, *, optional: bool) -> None:
    if value is None:
        _require(optional, event, f"{name} is required")
    else:
        _require(isinstance(value, int) and value >= 0, event, f"{name} must be an int >= 0")


class _Event:
    """JSON for every event type: {"type": TYPE, <fields in order>, "time_ms": ...}.
    Nested tuples become JSON lists; each event's __post_init__ turns them back into
    tuples, so one normalization serves the constructor and the reader."""

    __slots__ = ()
    TYPE: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": self.TYPE}
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            data[field.name] = getattr(self, field.name)
        data["time_ms"] = self.time_ms  # type: ignore[attr-defined]
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        given = dict(data)
        if given.pop("type", cls.TYPE) != cls.TYPE:
            raise InvalidHistory(f"not a {cls.TYPE!r} event: {data!r}")
        # An interval event's time_ms is its end_ms, not a field: checked, then dropped.
        derived_time_ms = None if "time_ms" in fields else given.pop("time_ms", None)
        unknown = set(given) - fields
        if unknown:
            raise InvalidHistory(f"{cls.TYPE}: unknown fields {sorted(unknown)}: {data!r}")
        try:
            event = cls(**given)
        except TypeError as e:
            raise InvalidHistory(f"{cls.TYPE}: {e}: {data!r}") from None
        if derived_time_ms is not None and derived_time_ms != event.time_ms:
            raise InvalidHistory(f"{cls.TYPE}: time_ms {derived_time_ms} is not end_ms: {data!r}")
        return event

    @classmethod
    def from_json(cls, line: str):
        return cls.from_dict(_loads(line))


def _loads(line: str) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except ValueError as e:
        raise InvalidHistory(f"not JSON ({e}): {line[:200]!r}") from None
    if not isinstance(data, dict):
        raise InvalidHistory(f"not a JSON object: {line[:200]!r}")
    return data


@dataclasses.dataclass(frozen=True, slots=True)
class Send(_Event):
    """One record a producer sent: ok (acked with partition and offset), failed (a
    definite error: not written) or indeterminate (timeout or unknown: written once
    or not at all). `partition` is the one the producer chose, when it knows it."""

    TYPE: ClassVar[str] = "send"
    producer: str
    topic: str
    value: str
    partition: int | None
    outcome: str
    offset: int | None
    start_ms: int
    end_ms: int
    error: str | None = None

    def __post_init__(self) -> None:
        _require(self.outcome in OUTCOMES, self, f"outcome must be one of {OUTCOMES}")
        _require_time(self, "start_ms", "end_ms")
        _require(self.start_ms <= self.end_ms, self, "start_ms after end_ms")
        ok = self.outcome == OK
        _require_offset(self, "partition", self.partition, optional=not ok)
        _require_offset(self, "offset", self.offset, optional=not ok)
        _require(ok or self.offset is None, self, "only an ok send knows its offset")

    @property
    def time_ms(self) -> int:
        return self.end_ms


@dataclasses.dataclass(frozen=True, slots=True)
class Poll(_Event):
    """One record handed to a consumer by poll(). `incarnation` tells the processes
    (restarts) of one member apart; `group` and `generation` are None for a reader
    that assigned itself partitions (no group); `isolation_level` is the
    consumer's (read_committed: below the LSO, aborted transactions skipped)."""

    TYPE: ClassVar[str] = "poll"
    consumer: str
    incarnation: int
    group: str | None
    generation: int | None
    topic: str
    partition: int
    offset: int
    value: str
    time_ms: int
    isolation_level: str = READ_UNCOMMITTED

    def __post_init__(self) -> None:
        _require_time(self, "time_ms")
        _require(self.isolation_level in ISOLATION_LEVELS, self,
                 f"isolation_level must be one of {ISOLATION_LEVELS}")
        _require_offset(self, "partition", self.partition, optional=False)
        _require_offset(self, "offset", self.offset, optional=False)


def _topic_partitions(event: object, pairs: Iterable[Any]) -> tuple[tuple[str, int], ...]:
    normalized = tuple(sorted((str(topic), int(partition)) for topic, partition in pairs))
    _require(len(set(normalized)) == len(normalized), event, "a partition is listed twice")
    return normalized


@dataclasses.dataclass(frozen=True, slots=True)
class Assigned(_Event):
    """A member's assignment in a generation, as its rebalance listener saw it."""

    TYPE: ClassVar[str] = "assigned"
    consumer: str
    incarnation: int
    group: str
    generation: int
    partitions: tuple[tuple[str, int], ...]
    time_ms: int

    def __post_init__(self) -> None:
        _require_time(self, "time_ms")
        object.__setattr__(self, "partitions", _topic_partitions(self, self.partitions))


@dataclasses.dataclass(frozen=True, slots=True)
class Resume(_Event):
    """Where a member's position in a newly assigned partition started
    (`first_position`), and the group's committed offset it found there (None: none,
    so auto_offset_reset chose the position)."""

    TYPE: ClassVar[str] = "resume"
    consumer: str
    incarnation: int
    group: str
    topic: str
    partition: int
    committed_offset: int | None
    first_position: int
    time_ms: int

    def __post_init__(self) -> None:
        _require_time(self, "time_ms")
        _require_offset(self, "partition", self.partition, optional=False)
        _require_offset(self, "committed_offset", self.committed_offset, optional=True)
        _require_offset(self, "first_position", self.first_position, optional=False)


@dataclasses.dataclass(frozen=True, slots=True)
class Commit(_Event):
    """One offset commit by a member: `offsets` are the next offsets to read, as
    (topic, partition, offset), sorted; a {(topic, partition): offset} mapping is
    accepted too. `sync` tells commit_sync from commit_async."""

    TYPE: ClassVar[str] = "commit"
    consumer: str
    incarnation: int
    group: str
    generation: int
    offsets: tuple[tuple[str, int, int], ...]
    sync: bool
    outcome: str
    start_ms: int
    end_ms: int

    def __post_init__(self) -> None:
        _require(self.outcome in OUTCOMES, self, f"outcome must be one of {OUTCOMES}")
        _require_time(self, "start_ms", "end_ms")
        _require(self.start_ms <= self.end_ms, self, "start_ms after end_ms")
        if isinstance(self.offsets, Mapping):
            entries = [(topic, partition, offset) for (topic, partition), offset in self.offsets.items()]
        else:
            entries = list(self.offsets)
        _require(all(len(entry) == 3 for entry in entries), self, "offsets are (topic, partition, offset)")
        triples = tuple(sorted((str(t), int(p), int(o)) for t, p, o in entries))
        object.__setattr__(self, "offsets", triples)
        _topic_partitions(self, ((t, p) for t, p, _ in triples))
        for _, _, offset in triples:
            _require_offset(self, "offset", offset, optional=False)

    @property
    def time_ms(self) -> int:
        return self.end_ms

    @property
    def offsets_by_partition(self) -> dict[tuple[str, int], int]:
        return {(topic, partition): offset for topic, partition, offset in self.offsets}


@dataclasses.dataclass(frozen=True, slots=True)
class CommittedRead(_Event):
    """An observer's read of the group's committed offset for one partition
    (OffsetFetch); None: the group has none."""

    TYPE: ClassVar[str] = "committed_read"
    group: str
    topic: str
    partition: int
    offset: int | None
    time_ms: int

    def __post_init__(self) -> None:
        _require_time(self, "time_ms")
        _require_offset(self, "partition", self.partition, optional=False)
        _require_offset(self, "offset", self.offset, optional=True)


@dataclasses.dataclass(frozen=True, slots=True)
class FinalRead(_Event):
    """After the run, a read of one partition from its log start up to its HW:
    `records` are (offset, value). A large read is logged as several FinalReads of
    the same partition, log start and HW, each with part of the records.
    read_committed (`isolation_level`), the read stops at the last stable offset,
    which `high_watermark` then holds, and skips aborted transactions' records."""

    TYPE: ClassVar[str] = "final_read"
    topic: str
    partition: int
    records: tuple[tuple[int, str], ...]
    log_start_offset: int
    high_watermark: int
    time_ms: int
    isolation_level: str = READ_UNCOMMITTED

    def __post_init__(self) -> None:
        _require_time(self, "time_ms")
        _require(self.isolation_level in ISOLATION_LEVELS, self,
                 f"isolation_level must be one of {ISOLATION_LEVELS}")
        _require_offset(self, "partition", self.partition, optional=False)
        _require_offset(self, "log_start_offset", self.log_start_offset, optional=False)
        _require_offset(self, "high_watermark", self.high_watermark, optional=False)
        _require(self.log_start_offset <= self.high_watermark, self, "log start above the HW")
        records = tuple((int(offset), value) for offset, value in self.records)
        object.__setattr__(self, "records", records)
        previous = self.log_start_offset - 1
        for offset, _ in records:
            # Nothing at or above the HW is readable (DESIGN invariant 4); a final read
            # that holds such a record was not a consumer's read.
            _require(previous < offset < self.high_watermark, self,
                     f"offset {offset} out of order or outside [log start, HW)")
            previous = offset

    def chunks(self, records_per_chunk: int) -> list[FinalRead]:
        """This read as several FinalReads of at most `records_per_chunk` records."""
        if records_per_chunk < 1:
            raise ValueError("records_per_chunk must be >= 1")
        if len(self.records) <= records_per_chunk:
            return [self]
        return [dataclasses.replace(self, records=self.records[i:i + records_per_chunk])
                for i in range(0, len(self.records), records_per_chunk)]


@dataclasses.dataclass(frozen=True, slots=True)
class Fault(_Event):
    """One injected fault: `kind` (e.g. kill-leader, pause-leader, remove-broker),
    `target` (the actor or node it hit), from start to end (healed)."""

    TYPE: ClassVar[str] = "fault"
    kind: str
    target: str
    start_ms: int
    end_ms: int

    def __post_init__(self) -> None:
        _require_time(self, "start_ms", "end_ms")
        _require(self.start_ms <= self.end_ms, self, "start_ms after end_ms")

    @property
    def time_ms(self) -> int:
        return self.end_ms


@dataclasses.dataclass(frozen=True, slots=True)
class Txn(_Event):
    """One transaction of a transactional producer (`transactional_id`), from
    begin_transaction (`start_ms`) to the end of its commit_transaction or
    abort_transaction (`end_ms`), which was called at `end_requested_ms`.
    `intent`: what the producer asked for (commit, or abort on purpose);
    `outcome`: how that call ended: ok, failed (a definite error: the
    transaction was aborted instead) or indeterminate (no answer in time, or
    the producer fenced: committed or not, all or nothing). `writes`: every
    (topic, partition, value) sent in it, values unique in the run.
    `offsets`: the (group, topic, partition, next offset) sent with it
    (send_offsets_to_transaction); `sources`: for a consume-transform-produce
    transaction, the input value each write was made from (parallel to
    `writes`), else empty."""

    TYPE: ClassVar[str] = "txn"
    producer: str
    transactional_id: str
    intent: str
    outcome: str
    writes: tuple[tuple[str, int, str], ...]
    start_ms: int
    end_requested_ms: int
    end_ms: int
    offsets: tuple[tuple[str, str, int, int], ...] = ()
    sources: tuple[str, ...] = ()
    error: str | None = None

    def __post_init__(self) -> None:
        _require(self.intent in (COMMIT, ABORT), self, f"intent must be {COMMIT} or {ABORT}")
        _require(self.outcome in OUTCOMES, self, f"outcome must be one of {OUTCOMES}")
        _require_time(self, "start_ms", "end_requested_ms", "end_ms")
        _require(self.start_ms <= self.end_requested_ms <= self.end_ms, self,
                 "start_ms <= end_requested_ms <= end_ms broken")
        writes = tuple((str(topic), int(partition), str(value)) for topic, partition, value in self.writes)
        object.__setattr__(self, "writes", writes)
        for _, partition, _ in writes:
            _require_offset(self, "partition", partition, optional=False)
        _require(len({value for _, _, value in writes}) == len(writes), self, "a value is written twice")
        offsets = tuple((str(g), str(t), int(p), int(o)) for g, t, p, o in self.offsets)
        object.__setattr__(self, "offsets", offsets)
        for _, _, _, offset in offsets:
            _require_offset(self, "offset", offset, optional=False)
        object.__setattr__(self, "sources", tuple(str(s) for s in self.sources))
        _require(not self.sources or len(self.sources) == len(writes), self, "sources are not one per write")

    @property
    def time_ms(self) -> int:
        return self.end_ms

    @property
    def fate(self) -> str:
        """committed (asked and acknowledged), aborted (asked for, or a commit that
        failed definitely) or indeterminate."""
        if self.intent == ABORT or self.outcome == FAILED:
            return ABORTED
        return COMMITTED if self.outcome == OK else INDETERMINATE


Event = Union[Send, Poll, Assigned, Resume, Commit, CommittedRead, FinalRead, Fault, Txn]
EVENT_TYPES: dict[str, type] = {cls.TYPE: cls for cls in
                                (Send, Poll, Assigned, Resume, Commit, CommittedRead, FinalRead, Fault, Txn)}


def event_from_json(line: str) -> Event:
    """The event one JSON line holds, whatever its type."""
    data = _loads(line)
    cls = EVENT_TYPES.get(data.get("type"))  # type: ignore[arg-type]
    if cls is None:
        raise InvalidHistory(f"unknown event type {data.get('type')!r}")
    return cls.from_dict(data)


class HistoryWriter:
    """Appends events to a JSON-lines file, one line each, flushed per event, so a
    run that dies still leaves every event logged before it (but perhaps a torn last
    line, which the reader refuses). Not thread-safe: one writer per thread, or a
    lock around write()."""

    def __init__(self, file: IO[bytes], *, line_bytes_max: int = LINE_BYTES_MAX_DEFAULT) -> None:
        if line_bytes_max < 64:
            raise ValueError("line_bytes_max must be >= 64")
        self._file = file
        self.line_bytes_max = line_bytes_max
        self.lines_written = 0

    @classmethod
    def open(cls, path: str, *, line_bytes_max: int = LINE_BYTES_MAX_DEFAULT) -> HistoryWriter:
        return cls(open(path, "ab"), line_bytes_max=line_bytes_max)

    def write(self, event: Event) -> None:
        for line in self._encode(event):
            self._file.write(line + b"\n")
            self.lines_written += 1
        self._file.flush()

    def _encode(self, event: Event) -> list[bytes]:
        line = event.to_json().encode()
        if len(line) <= self.line_bytes_max:
            return [line]
        if isinstance(event, FinalRead) and len(event.records) > 1:
            # Halve until each part fits: no record count is right for every value size.
            return [part for chunk in event.chunks((len(event.records) + 1) // 2)
                    for part in self._encode(chunk)]
        raise InvalidHistory(f"{event.TYPE} event of {len(line)} bytes, over line_bytes_max "
                             f"{self.line_bytes_max}: {line[:200]!r}")

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_history(file: IO[bytes], *, line_bytes_max: int = LINE_BYTES_MAX_DEFAULT) -> Iterator[Event]:
    """The events of a JSON-lines history, in file order. Holds one line at a time,
    of at most `line_bytes_max` bytes; a longer, torn or unreadable line raises
    InvalidHistory naming its line number. Blank lines are skipped."""
    line_number = 0
    while True:
        raw = file.readline(line_bytes_max + 1)
        if not raw:
            return
        line_number += 1
        complete = raw.endswith(b"\n")
        if len(raw.rstrip(b"\r\n")) > line_bytes_max:
            raise InvalidHistory(f"line {line_number}: longer than line_bytes_max {line_bytes_max}")
        if not raw.strip():
            continue
        try:
            yield event_from_json(raw.decode())
        except (InvalidHistory, UnicodeDecodeError) as e:
            torn = "" if complete else " (the last line, without its newline: torn?)"
            raise InvalidHistory(f"line {line_number}{torn}: {e}") from None


def load_history(path: str, *, line_bytes_max: int = LINE_BYTES_MAX_DEFAULT) -> list[Event]:
    with open(path, "rb") as file:
        return list(read_history(file, line_bytes_max=line_bytes_max))


def write_history(path: str, events: Iterable[Event], *,
                  line_bytes_max: int = LINE_BYTES_MAX_DEFAULT) -> int:
    """Writes (appends) events to `path`; returns the number of lines written."""
    with HistoryWriter.open(path, line_bytes_max=line_bytes_max) as writer:
        for event in events:
            writer.write(event)
        return writer.lines_written
