"""The checker of a `rafka verify` history (rafka.core.history): one function per
anomaly, each `check_<name>(history) -> list[Anomaly]`, and `check_all`.

What is judged is DESIGN section 3 as a client sees it, after Jepsen's Kafka
workload and Kafka's VerifiableProducer / VerifiableConsumer: an acked write is in
the final log where it was acked (invariants 1, 5, 13), an offset holds one record,
a consumer is handed only committed records (4) in order, and a group's committed
offsets never move back and are where a restarted member resumes (8, 9, 10).
Transactions (DESIGN section 5, after Jepsen's Kafka transaction analysis): a
read_committed reader never sees an aborted transaction's record (G1a) nor an
open one's (read past the LSO), sees all of a committed transaction's records
in a partition it read past them (no torn read); a committed transaction's
writes all stay visible, once each; an indeterminate one is all or nothing; a
consume-transform-produce chain's committed output holds each input once, exactly
the inputs below its group's committed offsets.

Rules every check follows (each docstring says exactly what it flags):
  the final log of a partition is its FinalRead(s): records from the log start to
  the HW after the run; offsets below the final log start are not judged (retention
  may delete them), and a partition without a final read is not judged by the checks
  that need one (lost-write, poll-skip, read-above-HW)
  a Send is ok, failed or indeterminate; an indeterminate send is neither required
  nor forbidden anywhere (its value may be in the log once or not at all), and so is
  an indeterminate commit; a failed send or commit is ignored
  where two events' times are equal, the order between them is unknown and the
  check does not assume one (an anomaly is claimed only on a strict order)
  the history is in logged order; only the polls of one consumer incarnation are
  ordered by it (a consumer logs records as it is handed them)
  the topic/value model: values are unique per run (each send a new value)
Cost: one pass to index the history (`index_history`), then each check is
O(events log events) time and O(events) memory, for histories of millions of events.

Pure: no Ray, no I/O. Callers: rafka.verify (the run's report), the checker's tests.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, Union

from rafka.core.history import (ABORTED, COMMITTED, INDETERMINATE, OK, READ_COMMITTED, Assigned, Commit,
                                CommittedRead, Event, Fault, FinalRead, InvalidHistory, Poll, Resume, Send, Txn)

LOST_WRITE = "lost-write"
INCONSISTENT_OFFSETS = "inconsistent-offsets"
DUPLICATE = "duplicate"
NONMONOTONIC_SEND = "nonmonotonic-send"
NONMONOTONIC_POLL = "nonmonotonic-poll"
POLL_SKIP = "poll-skip"
COMMIT_REGRESSION = "commit-regression"
READ_ABOVE_HW = "read-above-HW"
RESUME_MISMATCH = "resume-mismatch"
# Transactions (KIP-98, DESIGN section 5), after Jepsen's Kafka transaction analysis.
ABORTED_READ = "aborted-read"
TXN_LOST_WRITE = "txn-lost-write"
TXN_DUPLICATE = "txn-duplicate"
TORN_TRANSACTION = "torn-transaction"
TORN_READ = "torn-read"
READ_PAST_LSO = "read-past-LSO"
CTP_DUPLICATE = "ctp-duplicate"
CTP_OFFSETS = "ctp-offsets"

# How many skipped records a poll-skip anomaly quotes: the count and range say the rest.
EXAMPLES_PER_ANOMALY_MAX = 5

TopicPartition = tuple[str, int]


@dataclasses.dataclass(frozen=True)
class Anomaly:
    """One anomaly: its name, a sentence a person can act on, and the evidence (the
    events that show it, and dicts for what the final log held)."""

    name: str
    description: str
    evidence: tuple[Event | dict[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "evidence": [e if isinstance(e, dict) else e.to_dict() for e in self.evidence]}


@dataclasses.dataclass
class FinalLog:
    """One partition's final read, its chunks joined."""

    topic: str
    partition: int
    log_start_offset: int
    high_watermark: int
    values_by_offset: dict[int, str]

    def record(self, offset: int) -> dict[str, Any]:
        """What the final log holds at `offset`, as evidence."""
        return {"final_read": {"topic": self.topic, "partition": self.partition, "offset": offset,
                               "value": self.values_by_offset.get(offset),
                               "log_start_offset": self.log_start_offset,
                               "high_watermark": self.high_watermark}}

    def judges(self, offset: int) -> bool:
        """Whether the final log says anything about `offset`: retention may have
        deleted what lies below its log start."""
        return offset >= self.log_start_offset


@dataclasses.dataclass
class HistoryIndex:
    """A history sorted by event type in one pass (logged order kept in each list),
    with the final reads joined per partition. Build it once and hand it to every
    check; check_all does."""

    sends: list[Send] = dataclasses.field(default_factory=list)
    polls: list[Poll] = dataclasses.field(default_factory=list)
    assigned: list[Assigned] = dataclasses.field(default_factory=list)
    resumes: list[Resume] = dataclasses.field(default_factory=list)
    commits: list[Commit] = dataclasses.field(default_factory=list)
    committed_reads: list[CommittedRead] = dataclasses.field(default_factory=list)
    faults: list[Fault] = dataclasses.field(default_factory=list)
    txns: list[Txn] = dataclasses.field(default_factory=list)
    # read_uncommitted final reads (every data record up to the HW) ...
    final_logs: dict[TopicPartition, FinalLog] = dataclasses.field(default_factory=dict)
    # ... and read_committed ones (up to the LSO, aborted transactions skipped)
    committed_final_logs: dict[TopicPartition, FinalLog] = dataclasses.field(default_factory=dict)
    # Every Poll and Resume in logged order: nonmonotonic-poll reads them interleaved.
    positions: list[Poll | Resume] = dataclasses.field(default_factory=list)

    @functools.cached_property
    def txn_by_value(self) -> dict[str, tuple[Txn, str, int]]:
        """value -> (its transaction, topic, partition), for the transaction rules;
        built once per index (read after the index is complete)."""
        found: dict[str, tuple[Txn, str, int]] = {}
        for txn in self.txns:
            for topic, partition, value in txn.writes:
                if value in found:
                    raise InvalidHistory(f"{value!r} written by two transactions: {found[value][0]!r} and {txn!r}")
                found[value] = (txn, topic, partition)
        return found


History = Union[Iterable[Event], HistoryIndex]


def index_history(history: History) -> HistoryIndex:
    if isinstance(history, HistoryIndex):
        return history
    index = HistoryIndex()
    by_type: dict[type, Callable[[Any], None]] = {
        Send: index.sends.append, Poll: index.polls.append, Assigned: index.assigned.append,
        Resume: index.resumes.append, Commit: index.commits.append,
        CommittedRead: index.committed_reads.append, Fault: index.faults.append, Txn: index.txns.append,
        FinalRead: lambda read: _join_final_read(
            index.committed_final_logs if read.isolation_level == READ_COMMITTED else index.final_logs, read)}
    for event in history:
        add = by_type.get(type(event))
        if add is None:
            raise InvalidHistory(f"not a history event: {event!r}")
        add(event)
        if isinstance(event, (Poll, Resume)):
            index.positions.append(event)
    return index


def _join_final_read(final_logs: dict[TopicPartition, FinalLog], read: FinalRead) -> None:
    tp = (read.topic, read.partition)
    log = final_logs.get(tp)
    if log is None:
        log = final_logs[tp] = FinalLog(read.topic, read.partition, read.log_start_offset,
                                        read.high_watermark, {})
    elif (log.log_start_offset, log.high_watermark) != (read.log_start_offset, read.high_watermark):
        # Chunks of one read share its bounds; two different reads cannot be joined.
        raise InvalidHistory(f"two final reads of {tp} with different log start / HW: "
                             f"({log.log_start_offset}, {log.high_watermark}) and {read!r}")
    for offset, value in read.records:
        if offset in log.values_by_offset:
            raise InvalidHistory(f"final reads of {tp} overlap at offset {offset}")
        log.values_by_offset[offset] = value


def _ok_sends(index: HistoryIndex) -> Iterable[Send]:
    return (s for s in index.sends if s.outcome == OK)


def _ok_commits(index: HistoryIndex) -> list[Commit]:
    return [c for c in index.commits if c.outcome == OK]


# -- the log: what was written where ---------------------------------------------------


def check_lost_write(history: History) -> list[Anomaly]:
    """lost-write: a Send acked ok at (topic, partition, offset), with that offset at
    or above the partition's final log start, whose value is not the final log's
    record at that offset: the offset is empty (above the HW, or a hole) or holds
    another value. Each such send is one anomaly; the evidence is the send and the
    final log at its offset, and (when the value is elsewhere in the final log) the
    offsets where it is. An ok send's record must be where its ack said (DESIGN
    invariants 1, 5, 13). Sends to partitions without a final read are not judged."""
    index = index_history(history)
    lost: list[tuple[Send, FinalLog]] = []
    for send in _ok_sends(index):
        log = index.final_logs.get((send.topic, send.partition))  # type: ignore[arg-type]
        if log is not None and log.judges(send.offset) and \
                log.values_by_offset.get(send.offset) != send.value:  # type: ignore[arg-type]
            lost.append((send, log))
    # Where lost values are instead: only the affected partitions are scanned.
    wanted = {(s.topic, s.partition, s.value) for s, _ in lost}
    found_at: dict[tuple[str, int | None, str], list[int]] = defaultdict(list)
    for log in {id(log): log for _, log in lost}.values():
        for offset, value in log.values_by_offset.items():
            if (log.topic, log.partition, value) in wanted:
                found_at[(log.topic, log.partition, value)].append(offset)
    anomalies = []
    for send, log in lost:
        elsewhere = sorted(found_at.get((send.topic, send.partition, send.value), ()))
        where = (f"at offsets {elsewhere} instead" if elsewhere else
                 "nowhere in the final log" if send.offset < log.high_watermark else
                 f"at or above the final HW {log.high_watermark}")
        evidence: list[Event | dict[str, Any]] = [send, log.record(send.offset)]  # type: ignore[arg-type]
        if elsewhere:
            evidence.append({"value_found_at_offsets": elsewhere})
        anomalies.append(Anomaly(LOST_WRITE, (
            f"{send.producer}'s {send.value!r} was acked at {send.topic}-{send.partition} offset "
            f"{send.offset}, but is {where}"), tuple(evidence)))
    return anomalies


def check_inconsistent_offsets(history: History) -> list[Anomaly]:
    """inconsistent-offsets: two different values observed at one (topic, partition,
    offset), counting the acks of ok Sends, every Poll and the final reads. Offsets
    below the final log start are judged too, among the sends and polls that saw
    them: retention deletes records but never reuses an offset (invariant 1).
    One anomaly per such offset; the evidence is the first observation of each
    distinct value there (a Send, a Poll, or the final log as a dict)."""
    index = index_history(history)
    # The final logs are the base (no copy of millions of entries); observations at
    # offsets the final logs lack go to `elsewhere`.
    elsewhere: dict[tuple[str, int, int], tuple[str, Event]] = {}
    conflicts: dict[tuple[str, int, int], dict[str, Event | dict[str, Any]]] = {}
    observations: Iterable[Send | Poll] = itertools.chain(_ok_sends(index), index.polls)
    for event in observations:
        key = (event.topic, event.partition, event.offset)  # type: ignore[assignment]
        log = index.final_logs.get((event.topic, event.partition))  # type: ignore[arg-type]
        if log is not None and event.offset in log.values_by_offset:
            first_value, first = log.values_by_offset[event.offset], log  # type: ignore[index]
        else:
            first_value, first = elsewhere.setdefault(key, (event.value, event))  # type: ignore[arg-type]
        if event.value != first_value:
            if key not in conflicts:
                # The final log's evidence dict is built only here, for a conflict.
                conflicts[key] = {first_value: first.record(event.offset) if isinstance(first, FinalLog) else first}
            conflicts[key].setdefault(event.value, event)
    return [Anomaly(INCONSISTENT_OFFSETS,
                    f"{topic}-{partition} offset {offset} was seen holding {len(seen)} values: "
                    f"{sorted(seen)!r}", tuple(seen.values()))
            for (topic, partition, offset), seen in conflicts.items()]


def check_duplicate(history: History) -> list[Anomaly]:
    """duplicate: one value observed at two positions (partition, offset) of a topic,
    counting the acks of ok Sends, every Poll and the final reads. One anomaly per
    such value; the evidence is the first observation at each position. Meaningful
    only with an idempotent producer: without it, a retried send may be written
    twice, so check_all runs this check only when told the producer was idempotent.
    An indeterminate send's value may be in the log once, not twice."""
    index = index_history(history)
    first_at: dict[tuple[str, str], tuple[int, int, Event | dict[str, Any]]] = {}
    duplicates: dict[tuple[str, str], dict[tuple[int, int], Event | dict[str, Any]]] = {}

    def observe(topic: str, value: str, partition: int, offset: int, event: Event | dict[str, Any]) -> None:
        partition0, offset0, event0 = first_at.setdefault((topic, value), (partition, offset, event))
        if (partition0, offset0) != (partition, offset):
            positions = duplicates.setdefault((topic, value), {(partition0, offset0): event0})
            positions.setdefault((partition, offset), event)

    for log in index.final_logs.values():
        for offset, value in log.values_by_offset.items():
            # Held lazily: a dict per final record would double the memory.
            observe(log.topic, value, log.partition, offset, log)  # type: ignore[arg-type]
    for event in itertools.chain(_ok_sends(index), index.polls):
        observe(event.topic, event.value, event.partition, event.offset, event)  # type: ignore[arg-type]
    anomalies = []
    for (topic, value), positions in duplicates.items():
        evidence = tuple(e.record(offset) if isinstance(e, FinalLog) else e
                         for (_, offset), e in sorted(positions.items(), key=lambda kv: kv[0]))
        anomalies.append(Anomaly(DUPLICATE, (
            f"{value!r} is at {len(positions)} positions of {topic}: "
            + ", ".join(f"{topic}-{p} offset {o}" for p, o in sorted(positions))), evidence))
    return anomalies


def check_nonmonotonic_send(history: History) -> list[Anomaly]:
    """nonmonotonic-send: for one producer and one (topic, partition), an ok Send B
    whose offset is at or below the offset of an ok Send A of the same producer that
    started strictly before it (A.start_ms < B.start_ms): a producer's sends to a
    partition are written in the order it sent them (Kafka's ordering, which
    idempotence keeps under retries; without idempotence, max.in.flight must be 1).
    A is the highest-offset send started before B. One anomaly per such B."""
    index = index_history(history)
    by_stream: dict[tuple[str, str, int], list[Send]] = defaultdict(list)
    for send in _ok_sends(index):
        by_stream[(send.producer, send.topic, send.partition)].append(send)  # type: ignore[index]
    anomalies = []
    for (producer, topic, partition), sends in by_stream.items():
        sends.sort(key=lambda s: s.start_ms)
        highest: Send | None = None       # highest offset among sends started strictly earlier
        for _, same_start in itertools.groupby(sends, key=lambda s: s.start_ms):
            group = list(same_start)
            for send in group:
                if highest is not None and send.offset <= highest.offset:  # type: ignore[operator]
                    anomalies.append(Anomaly(NONMONOTONIC_SEND, (
                        f"{producer} sent {send.value!r} after {highest.value!r} to {topic}-{partition}, "
                        f"but it was acked at offset {send.offset}, not above {highest.offset}"),
                        (highest, send)))
            top = max(group, key=lambda s: s.offset)  # type: ignore[arg-type, return-value]
            if highest is None or top.offset > highest.offset:  # type: ignore[operator]
                highest = top
    return anomalies


# -- consumers: what was handed out ------------------------------------------------------


def check_nonmonotonic_poll(history: History) -> list[Anomaly]:
    """nonmonotonic-poll: within one consumer incarnation, one group generation and
    one (topic, partition), a Poll whose offset is not above the offset of the
    previous Poll (in logged order), or, after a Resume of that partition by that
    incarnation, a Poll below the Resume's first_position (the position moved back
    from where it started). A Resume starts a new sequence (the member was given the
    partition anew); a new generation does too. Gaps are not judged here: a hole in
    the log (compaction, transaction markers) is skipped legitimately. One anomaly
    per such Poll; the evidence is the previous Poll (or the Resume) and it."""
    index = index_history(history)
    # Per (consumer, incarnation, group, topic, partition): the last Poll or Resume.
    last: dict[tuple[str, int, str | None, str, int], Poll | Resume] = {}
    anomalies = []
    for event in index.positions:
        key = (event.consumer, event.incarnation, event.group, event.topic, event.partition)
        previous = last.get(key)
        last[key] = event
        if isinstance(event, Resume) or previous is None:
            continue
        if isinstance(previous, Resume):
            floor, what = previous.first_position, f"its resume at position {previous.first_position}"
            backwards = event.offset < floor
        elif previous.generation == event.generation:
            what = f"offset {previous.offset}, polled before it"
            backwards = event.offset <= previous.offset
        else:
            continue
        if backwards:
            anomalies.append(Anomaly(NONMONOTONIC_POLL, (
                f"{event.consumer} (incarnation {event.incarnation}, generation {event.generation}) was handed "
                f"{event.topic}-{event.partition} offset {event.offset} after {what}"), (previous, event)))
    return anomalies


def check_read_above_hw(history: History) -> list[Anomaly]:
    """read-above-HW: a Poll of (topic, partition, offset), at or above the final log
    start, whose value is not the final log's record at that offset (the offset is
    empty or holds another value): the consumer was handed a record that was later
    truncated, so it was handed before it was below the HW (DESIGN invariant 4).
    One anomaly per such Poll; the evidence is the Poll and the final log there.
    Partitions without a final read are not judged."""
    index = index_history(history)
    anomalies = []
    for poll in index.polls:
        log = index.final_logs.get((poll.topic, poll.partition))
        if log is None or not log.judges(poll.offset) or log.values_by_offset.get(poll.offset) == poll.value:
            continue
        anomalies.append(Anomaly(READ_ABOVE_HW, (
            f"{poll.consumer} was handed {poll.value!r} at {poll.topic}-{poll.partition} offset {poll.offset}, "
            f"which the final log does not hold there (final HW {log.high_watermark})"),
            (poll, log.record(poll.offset))))
    return anomalies


def _final_committed(index: HistoryIndex) -> dict[tuple[str, str, int], tuple[int, Commit | CommittedRead]]:
    """Per (group, topic, partition): the committed offset last known, from the ok
    Commit or CommittedRead (with an offset) of the latest time; at equal times, the
    lowest (the claim poll-skip makes is then the weakest)."""
    final: dict[tuple[str, str, int], tuple[int, int, Commit | CommittedRead]] = {}

    def see(key: tuple[str, str, int], time_ms: int, offset: int, event: Commit | CommittedRead) -> None:
        known = final.get(key)
        if known is None or time_ms > known[0] or (time_ms == known[0] and offset < known[1]):
            final[key] = (time_ms, offset, event)

    for commit in _ok_commits(index):
        for topic, partition, offset in commit.offsets:
            see((commit.group, topic, partition), commit.end_ms, offset, commit)
    for read in index.committed_reads:
        if read.offset is not None:
            see((read.group, read.topic, read.partition), read.time_ms, read.offset, read)
    return {key: (offset, event) for key, (_, offset, event) in final.items()}


def check_poll_skip(history: History) -> list[Anomaly]:
    """poll-skip: for a group and a (topic, partition) with a final read, a record of
    the final log at an offset in [from, C) that no member of the group (any
    consumer, incarnation or generation whose Poll names the group) was ever handed.
    A group whose members read read_committed is judged against the partition's
    read_committed final read (aborted records are never handed to it).
    C is the group's final committed offset (see _final_committed); `from` is the
    final log start, or higher: the lowest first_position of the group's Resumes of
    that partition that found no committed offset, when there are such (an
    auto_offset_reset to latest legitimately starts past older records).
    Committing C says every record below it was processed. One anomaly per run of
    skipped records (consecutive records of the final log); the evidence is the
    event that committed C and a dict with the run's range, count and examples."""
    index = index_history(history)
    handed: dict[tuple[str, str, int], set[int]] = defaultdict(set)
    read_committed: set[tuple[str, str, int]] = set()
    for poll in index.polls:
        if poll.group is not None:
            handed[(poll.group, poll.topic, poll.partition)].add(poll.offset)
            if poll.isolation_level == READ_COMMITTED:
                read_committed.add((poll.group, poll.topic, poll.partition))
    reset_from: dict[tuple[str, str, int], int] = {}
    for resume in index.resumes:
        if resume.committed_offset is None:
            key = (resume.group, resume.topic, resume.partition)
            reset_from[key] = min(reset_from.get(key, resume.first_position), resume.first_position)
    anomalies = []
    for (group, topic, partition), (committed, source) in _final_committed(index).items():
        key = (group, topic, partition)
        logs = index.committed_final_logs if key in read_committed else index.final_logs
        log = logs.get((topic, partition))
        if log is None:
            continue
        seen = handed.get(key, set())
        start = max(log.log_start_offset, reset_from.get(key, 0))
        skipped = [(offset, log.values_by_offset[offset])
                   for offset in range(start, min(committed, log.high_watermark))
                   if offset in log.values_by_offset and offset not in seen]
        for run in _runs_of_consecutive_records(skipped, log):
            anomalies.append(Anomaly(POLL_SKIP, (
                f"group {group} committed {topic}-{partition} offset {committed}, but no member was handed "
                f"the {len(run)} record(s) at offsets {run[0][0]}..{run[-1][0]}"),
                (source, {"skipped": {"group": group, "topic": topic, "partition": partition,
                                      "first_offset": run[0][0], "last_offset": run[-1][0], "count": len(run),
                                      "examples": [list(r) for r in run[:EXAMPLES_PER_ANOMALY_MAX]]}})))
    return anomalies


def _runs_of_consecutive_records(records: list[tuple[int, str]], log: FinalLog) -> list[list[tuple[int, str]]]:
    """Splits skipped records into runs with no record of the final log between two
    neighbours (a hole in the log does not split a run; a record that was handed does)."""
    runs: list[list[tuple[int, str]]] = []
    for record in records:
        if runs:
            previous = runs[-1][-1][0]
            if all(o not in log.values_by_offset for o in range(previous + 1, record[0])):
                runs[-1].append(record)
                continue
        runs.append([record])
    return runs


# -- groups: committed offsets -----------------------------------------------------------


def check_commit_regression(history: History) -> list[Anomaly]:
    """commit-regression: a group's committed offset for a (topic, partition) moving
    back. Two forms:
      (a) a CommittedRead of it lower than (or finding none after) the highest
          CommittedRead of it at the latest earlier time_ms (successive reads, with
          the reads of one ms unordered among themselves);
      (b) an ok Commit C2 of it lower than an ok Commit C1 of the same group that
          ended strictly before C2 started (C1.end_ms < C2.start_ms); C1 is the
          highest such. Concurrent commits are not ordered, so not judged.
    One anomaly per such read or commit; the evidence is the pair (earlier, later)."""
    index = index_history(history)
    anomalies = []
    reads: dict[tuple[str, str, int], list[CommittedRead]] = defaultdict(list)
    for read in index.committed_reads:
        reads[(read.group, read.topic, read.partition)].append(read)
    for (group, topic, partition), series in reads.items():
        series.sort(key=lambda r: r.time_ms)
        # Reads of one ms are not ordered among themselves: each is compared with the
        # highest read of the ms before it.
        earlier: CommittedRead | None = None
        for _, same_ms in itertools.groupby(series, key=lambda r: r.time_ms):
            group_reads = list(same_ms)
            for later in group_reads:
                if earlier is not None and (later.offset is None or later.offset < earlier.offset):  # type: ignore
                    anomalies.append(Anomaly(COMMIT_REGRESSION, (
                        f"group {group}'s committed offset of {topic}-{partition} was read as {earlier.offset}, "
                        f"then as {later.offset}"), (earlier, later)))
            found = [r for r in group_reads if r.offset is not None]
            earlier = max(found, key=lambda r: r.offset) if found else None  # type: ignore[arg-type, return-value]
    commits = _ok_commits(index)
    by_end = sorted(commits, key=lambda c: c.end_ms)
    ended = 0
    # Per (group, topic, partition): the highest commit among those ended so far.
    highest: dict[tuple[str, str, int], tuple[int, Commit]] = {}
    for commit in sorted(commits, key=lambda c: c.start_ms):
        while ended < len(by_end) and by_end[ended].end_ms < commit.start_ms:
            done = by_end[ended]
            for topic, partition, offset in done.offsets:
                key = (done.group, topic, partition)
                if key not in highest or offset > highest[key][0]:
                    highest[key] = (offset, done)
            ended += 1
        for topic, partition, offset in commit.offsets:
            before = highest.get((commit.group, topic, partition))
            if before is not None and offset < before[0]:
                anomalies.append(Anomaly(COMMIT_REGRESSION, (
                    f"group {commit.group} committed {topic}-{partition} offset {offset} ({commit.consumer}, "
                    f"generation {commit.generation}) after {before[1].consumer}'s commit of {before[0]} "
                    f"was acked"), (before[1], commit)))
    return anomalies


def check_resume_mismatch(history: History) -> list[Anomaly]:
    """resume-mismatch: a Resume of (group, topic, partition) where
      (a) it found a committed offset and its first_position differs from it, unless
          the committed offset is below the final log start and first_position is at
          most that log start (the offset was out of range after retention, and the
          member reset to the earliest it could); or
      (b) its committed offset is below (or None with) the offset of the ok Commit
          of that partition by the group that ended last strictly before the Resume
          (end_ms < Resume.time_ms; at equal end times the lowest of them): the member
          started behind what was acked as committed (DESIGN invariants 8, 10, 13).
    Indeterminate commits are neither required nor forbidden: a committed offset
    above the last ok commit is accepted. One anomaly per Resume (a before b); the
    evidence is the Resume and, for (b), that Commit."""
    index = index_history(history)
    commits = sorted(_ok_commits(index), key=lambda c: c.end_ms)
    last_ended: dict[tuple[str, str, int], tuple[int, int, Commit]] = {}   # key -> (end_ms, offset, commit)
    ended = 0
    anomalies = []
    for resume in sorted(index.resumes, key=lambda r: r.time_ms):
        while ended < len(commits) and commits[ended].end_ms < resume.time_ms:
            done = commits[ended]
            for topic, partition, offset in done.offsets:
                key = (done.group, topic, partition)
                known = last_ended.get(key)
                # Ascending end_ms: a later end replaces; an equal end keeps the lowest.
                if known is None or done.end_ms > known[0] or (done.end_ms == known[0] and offset < known[1]):
                    last_ended[key] = (done.end_ms, offset, done)
            ended += 1
        where = f"{resume.consumer} (incarnation {resume.incarnation}) resumed {resume.topic}-{resume.partition}"
        committed = resume.committed_offset
        log = index.final_logs.get((resume.topic, resume.partition))
        if committed is not None and resume.first_position != committed:
            reset_after_retention = (log is not None and committed < log.log_start_offset
                                     and resume.first_position <= log.log_start_offset)
            if not reset_after_retention:
                anomalies.append(Anomaly(RESUME_MISMATCH, (
                    f"{where} at position {resume.first_position}, not at the committed offset {committed} "
                    f"it found"), (resume,)))
                continue
        acked = last_ended.get((resume.group, resume.topic, resume.partition))
        if acked is not None and (committed is None or committed < acked[1]):
            anomalies.append(Anomaly(RESUME_MISMATCH, (
                f"{where} finding committed offset {committed}, below the {acked[1]} of "
                f"{acked[2].consumer}'s commit acked before it"), (resume, acked[2])))
    return anomalies


# -- transactions: what read_committed readers may see ---------------------------------------
#
# A transaction's fate is its Txn's: committed (commit asked for and acked),
# aborted (abort asked for, or a commit that failed definitely), indeterminate
# (either, but all or nothing). The read_committed final read of a partition is
# what stays visible; an indeterminate transaction counts as committed when any
# of its writes is in it. Values are unique in a run, so a value names its
# transaction.


def _committed_offsets_by_value(index: HistoryIndex) -> dict[TopicPartition, dict[str, list[int]]]:
    """Per partition read read_committed at the end: value -> the offsets holding it."""
    found: dict[TopicPartition, dict[str, list[int]]] = {}
    for tp, log in index.committed_final_logs.items():
        by_value: dict[str, list[int]] = defaultdict(list)
        for offset, value in sorted(log.values_by_offset.items()):
            by_value[value].append(offset)
        found[tp] = by_value
    return found


def _judged_whole(log: FinalLog | None) -> bool:
    """Whether a read_committed final log can say a value is missing: it was read,
    and from offset 0 (nothing of it deleted by retention)."""
    return log is not None and log.log_start_offset == 0


def _visible_writes(txn: Txn, index: HistoryIndex,
                    offsets: dict[TopicPartition, dict[str, list[int]]]) -> tuple[list, list] | None:
    """(writes in the read_committed final logs, writes not in them), or None when
    a partition it wrote has no whole read_committed final log (not judged)."""
    seen, missing = [], []
    for topic, partition, value in txn.writes:
        if not _judged_whole(index.committed_final_logs.get((topic, partition))):
            return None
        (seen if offsets[(topic, partition)].get(value) else missing).append((topic, partition, value))
    return seen, missing


def check_aborted_read(history: History) -> list[Anomaly]:
    """aborted-read (Jepsen's G1a): a value of an aborted transaction handed to a
    read_committed consumer (Poll) or held by a read_committed final read; or a
    value of an indeterminate transaction that a read_committed consumer was
    handed, though none of that transaction's writes is in the read_committed
    final reads (judged only when each partition it wrote has one from offset 0).
    One anomaly per such Poll or final record; the evidence is the transaction and
    the Poll (or the final log there)."""
    index = index_history(history)
    by_value = index.txn_by_value
    offsets = _committed_offsets_by_value(index)
    gone: dict[int, bool] = {}   # id(indeterminate txn) -> none of its writes stayed visible

    def never_visible(txn: Txn) -> bool:
        if txn.fate == ABORTED:
            return True
        if txn.fate != INDETERMINATE:
            return False
        if id(txn) not in gone:
            visible = _visible_writes(txn, index, offsets)
            gone[id(txn)] = visible is not None and not visible[0]
        return gone[id(txn)]

    anomalies = []
    for poll in index.polls:
        found = by_value.get(poll.value)
        if poll.isolation_level != READ_COMMITTED or found is None or not never_visible(found[0]):
            continue
        txn = found[0]
        anomalies.append(Anomaly(ABORTED_READ, (
            f"{poll.consumer} (read_committed) was handed {poll.value!r} at {poll.topic}-{poll.partition} offset "
            f"{poll.offset}, written by {txn.producer}'s {txn.fate} transaction (asked to {txn.intent}, "
            f"{txn.outcome})"), (txn, poll)))
    for log in index.committed_final_logs.values():
        for offset, value in sorted(log.values_by_offset.items()):
            found = by_value.get(value)
            if found is not None and found[0].fate == ABORTED:
                anomalies.append(Anomaly(ABORTED_READ, (
                    f"the read_committed final read of {log.topic}-{log.partition} holds {value!r} at offset "
                    f"{offset}, written by {found[0].producer}'s aborted transaction"), (found[0], log.record(offset))))
    return anomalies


def check_txn_lost_write(history: History) -> list[Anomaly]:
    """txn-lost-write: a committed transaction (commit acked) with a write that the
    read_committed final read of its partition does not hold. Judged only where
    that read starts at offset 0. One anomaly per transaction; the evidence is the
    transaction and a dict of the writes missing."""
    index = index_history(history)
    offsets = _committed_offsets_by_value(index)
    anomalies = []
    for txn in index.txns:
        if txn.fate != COMMITTED:
            continue
        visible = _visible_writes(txn, index, offsets)
        if visible is None or not visible[1]:
            continue
        missing = visible[1]
        anomalies.append(Anomaly(TXN_LOST_WRITE, (
            f"{txn.producer}'s transaction committed at {txn.end_ms} ms, but {len(missing)} of its "
            f"{len(txn.writes)} writes are not in the read_committed final read: "
            + ", ".join(f"{v!r} ({t}-{p})" for t, p, v in missing[:EXAMPLES_PER_ANOMALY_MAX])),
            (txn, {"missing": [list(w) for w in missing]})))
    return anomalies


def check_txn_duplicate(history: History) -> list[Anomaly]:
    """txn-duplicate: a transaction's value at two offsets of a read_committed final
    read (a committed transaction's records appear once). One anomaly per value;
    the evidence is the transaction and the final log at each offset."""
    index = index_history(history)
    by_value = index.txn_by_value
    anomalies = []
    for tp, values in _committed_offsets_by_value(index).items():
        log = index.committed_final_logs[tp]
        for value, at in values.items():
            if len(at) > 1 and value in by_value:
                anomalies.append(Anomaly(TXN_DUPLICATE, (
                    f"{value!r} of {by_value[value][0].producer}'s transaction is at offsets {at} of the "
                    f"read_committed final read of {tp[0]}-{tp[1]}"),
                    (by_value[value][0], *(log.record(o) for o in at))))
    return anomalies


def check_torn_transaction(history: History) -> list[Anomaly]:
    """torn-transaction: a committed or indeterminate transaction of which the
    read_committed final reads hold some writes but not all (all or nothing across
    partitions; a committed one missing writes is a txn-lost-write as well).
    Judged only when every partition it wrote has a read_committed final read from
    offset 0. One anomaly per transaction; the evidence is the transaction and the
    writes seen and missing."""
    index = index_history(history)
    offsets = _committed_offsets_by_value(index)
    anomalies = []
    for txn in index.txns:
        if txn.fate == ABORTED:
            continue
        visible = _visible_writes(txn, index, offsets)
        if visible is None or not visible[0] or not visible[1]:
            continue
        seen, missing = visible
        anomalies.append(Anomaly(TORN_TRANSACTION, (
            f"{txn.producer}'s {txn.fate} transaction is torn: the read_committed final reads hold {len(seen)} of "
            f"its writes and not {len(missing)}: missing "
            + ", ".join(f"{v!r} ({t}-{p})" for t, p, v in missing[:EXAMPLES_PER_ANOMALY_MAX])),
            (txn, {"seen": [list(w) for w in seen], "missing": [list(w) for w in missing]})))
    return anomalies


def check_torn_read(history: History) -> list[Anomaly]:
    """torn-read: a read_committed consumer that read a partition past a record of
    the read_committed final read without being handed it. Its polls of one
    (topic, partition) in one incarnation and generation, up to a Resume of that
    partition (which starts over), are one stretch; a record of the read_committed
    final read at an offset strictly between the stretch's first and last polled
    offsets that the stretch does not hold is skipped: for a transaction's record,
    the reader saw the partition past it and not all of the transaction there.
    One anomaly per stretch and transaction (or per record outside any); the
    evidence is the transaction (if any), the stretch's first and last Polls and
    the final log at the first skipped offset."""
    index = index_history(history)
    by_value = index.txn_by_value
    stretches: list[list[Poll]] = []
    current: dict[tuple, list[Poll]] = {}
    for event in index.positions:
        if isinstance(event, Resume):
            for key in [k for k in current if k[:3] == (event.consumer, event.incarnation, event.group)
                        and k[4:] == (event.topic, event.partition)]:
                stretches.append(current.pop(key))
            continue
        if event.isolation_level != READ_COMMITTED:
            continue
        key = (event.consumer, event.incarnation, event.group, event.generation, event.topic, event.partition)
        current.setdefault(key, []).append(event)
    stretches.extend(current.values())
    anomalies = []
    for stretch in stretches:
        log = index.committed_final_logs.get((stretch[0].topic, stretch[0].partition))
        if log is None:
            continue
        handed = {poll.offset for poll in stretch}
        first, last = min(handed), max(handed)
        skipped_by_txn: dict[int, list[int]] = {}
        txn_of: dict[int, Txn | None] = {}
        for offset in range(first + 1, last):
            value = log.values_by_offset.get(offset)
            if value is None or offset in handed:
                continue
            found = by_value.get(value)
            key = id(found[0]) if found is not None else -offset
            txn_of[key] = found[0] if found is not None else None
            skipped_by_txn.setdefault(key, []).append(offset)
        reader = stretch[0]
        for key, skipped in skipped_by_txn.items():
            txn = txn_of[key]
            what = (f"{len(skipped)} record(s) of {txn.producer}'s transaction" if txn is not None
                    else "a record outside any transaction")
            evidence: list[Event | dict[str, Any]] = [txn] if txn is not None else []
            evidence += [min(stretch, key=lambda p: p.offset), max(stretch, key=lambda p: p.offset),
                         log.record(skipped[0])]
            anomalies.append(Anomaly(TORN_READ, (
                f"{reader.consumer} (read_committed, incarnation {reader.incarnation}) read "
                f"{reader.topic}-{reader.partition} from offset {first} to {last} but was not handed {what} at "
                f"offsets {skipped[:EXAMPLES_PER_ANOMALY_MAX]}"), tuple(evidence)))
    return anomalies


def check_read_past_lso(history: History) -> list[Anomaly]:
    """read-past-LSO: a read_committed consumer handed a transaction's value strictly
    before the transaction's commit was asked for (Poll.time_ms <
    Txn.end_requested_ms): it was read while the transaction was open, above the
    LSO. One anomaly per such Poll; the evidence is the transaction and the Poll."""
    index = index_history(history)
    by_value = index.txn_by_value
    anomalies = []
    for poll in index.polls:
        found = by_value.get(poll.value)
        if poll.isolation_level != READ_COMMITTED or found is None or poll.time_ms >= found[0].end_requested_ms:
            continue
        txn = found[0]
        anomalies.append(Anomaly(READ_PAST_LSO, (
            f"{poll.consumer} (read_committed) was handed {poll.value!r} at {poll.time_ms} ms, before "
            f"{txn.producer} asked to {txn.intent} its transaction at {txn.end_requested_ms} ms"), (txn, poll)))
    return anomalies


# -- consume-transform-produce: each input once in the output, with its offsets ----------------


def _visible_sources(index: HistoryIndex) -> dict[str, list[tuple[Txn, FinalLog, int]]]:
    """Per input value: the records of the read_committed final reads made from it
    (a transaction with `sources`), as (transaction, final log, offset)."""
    made_from: dict[str, tuple[Txn, str]] = {}
    for txn in index.txns:
        for (_, _, value), source in zip(txn.writes, txn.sources):
            made_from[value] = (txn, source)
    found: dict[str, list[tuple[Txn, FinalLog, int]]] = defaultdict(list)
    for log in index.committed_final_logs.values():
        for offset, value in sorted(log.values_by_offset.items()):
            if value in made_from:
                txn, source = made_from[value]
                found[source].append((txn, log, offset))
    return found


def check_ctp_duplicate(history: History) -> list[Anomaly]:
    """ctp-duplicate: an input value of a consume-transform-produce chain from which
    two records of the read_committed final reads were made (processed twice, in
    two transactions that both committed, or written twice in one). One anomaly
    per input value; the evidence is each transaction and the final log there."""
    index = index_history(history)
    anomalies = []
    for source, made in _visible_sources(index).items():
        if len(made) > 1:
            anomalies.append(Anomaly(CTP_DUPLICATE, (
                f"input {source!r} is in the committed output {len(made)} times: "
                + ", ".join(f"{log.topic}-{log.partition} offset {offset} ({txn.producer})"
                            for txn, log, offset in made)),
                tuple(e for txn, log, offset in made for e in (txn, log.record(offset)))))
    return anomalies


def check_ctp_offsets(history: History) -> list[Anomaly]:
    """ctp-offsets: for a group whose offsets consume-transform-produce transactions
    commit (Txn.offsets) and an input partition with a final committed offset C
    (see _final_committed) and a read_committed final read from offset 0: the
    inputs the committed output was made from are not exactly the input
    partition's records below C. Missing ones were consumed and committed
    without their output; extra ones have committed output but not their offsets
    (a restarted chain would process them again). One anomaly per group and input
    partition; the evidence is the event that gave C and a dict of what differs."""
    index = index_history(history)
    groups = {group for txn in index.txns for group, _, _, _ in txn.offsets}
    if not groups:
        return []
    made = _visible_sources(index)
    anomalies = []
    for (group, topic, partition), (committed, source_event) in sorted(_final_committed(index).items(),
                                                                        key=lambda kv: kv[0]):
        log = index.committed_final_logs.get((topic, partition))
        if group not in groups or not _judged_whole(log):
            continue
        below = {value for offset, value in log.values_by_offset.items() if offset < committed}
        output_of = {value for value in log.values_by_offset.values() if value in made}
        missing, extra = sorted(below - output_of), sorted(output_of - below)
        if not missing and not extra:
            continue
        anomalies.append(Anomaly(CTP_OFFSETS, (
            f"group {group} committed {topic}-{partition} offset {committed}, but {len(missing)} input(s) below it "
            f"have no committed output and {len(extra)} at or above it have"),
            (source_event, {"group": group, "topic": topic, "partition": partition, "committed": committed,
                            "missing": missing[:EXAMPLES_PER_ANOMALY_MAX], "extra": extra[:EXAMPLES_PER_ANOMALY_MAX]})))
    return anomalies


CHECKS: dict[str, Callable[[History], list[Anomaly]]] = {
    LOST_WRITE: check_lost_write,
    INCONSISTENT_OFFSETS: check_inconsistent_offsets,
    DUPLICATE: check_duplicate,
    NONMONOTONIC_SEND: check_nonmonotonic_send,
    NONMONOTONIC_POLL: check_nonmonotonic_poll,
    POLL_SKIP: check_poll_skip,
    COMMIT_REGRESSION: check_commit_regression,
    READ_ABOVE_HW: check_read_above_hw,
    RESUME_MISMATCH: check_resume_mismatch,
    ABORTED_READ: check_aborted_read,
    TXN_LOST_WRITE: check_txn_lost_write,
    TXN_DUPLICATE: check_txn_duplicate,
    TORN_TRANSACTION: check_torn_transaction,
    TORN_READ: check_torn_read,
    READ_PAST_LSO: check_read_past_lso,
    CTP_DUPLICATE: check_ctp_duplicate,
    CTP_OFFSETS: check_ctp_offsets,
}
ANOMALY_NAMES = tuple(CHECKS)


def check_all(history: History, *, idempotent: bool) -> dict[str, list[Anomaly]]:
    """Every check on one index of the history: {anomaly name: anomalies}, in
    ANOMALY_NAMES order. Without idempotence the duplicate check is not run, and its
    name is absent (not checked is not the same as none found)."""
    index = index_history(history)
    return {name: check(index) for name, check in CHECKS.items() if idempotent or name != DUPLICATE}
