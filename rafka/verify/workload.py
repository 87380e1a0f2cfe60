"""The workload of `rafka verify`, after Jepsen's Kafka workload and Kafka's
VerifiableProducer / VerifiableConsumer: every client logs what it saw into one
history (rafka.core.history), which the checker judges afterwards.

- producers send unique values ("<producer>-<n>") round-robin over the partitions,
  a bounded window in flight, and log each send as ok (partition and offset),
  failed (a definite error) or indeterminate (no answer in time);
- group members (threads of this process, each a Consumer in one group) poll, log
  every record with their incarnation and generation, commit sync and async in
  turn, log where each newly assigned partition resumed, and restart now and then;
- member actors (ConsumerMember, rafka's run_consumer_group) of a second group log
  what their handler is given, from their own processes, so that faults can kill
  them (Ray kill, SIGKILL);
- assign-mode readers follow the tail of every partition;
- an observer reads the groups' committed offsets now and then;
- unless `transactions` is off, transactional producers, read_committed readers
  and a consume-transform-produce chain (rafka.verify.transactions);
- at the end, a final read of every partition from its log start to its HW, and
  of the transactional topics also read_committed (once their LSO has caught up
  with their HW: every transaction ended).

Time: every event's time is wall-clock ms since the run started (`RunClock`), one
clock for the driver and the member actors (on one machine, or NTP-synchronised
hosts). Bounded: each producer keeps at most `window` sends in flight; each
client's history writes go through one lock to one file.
Callers: rafka.verify.run only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import threading
import time
from collections import deque
from pathlib import Path

from rafka.core.errors import KafkaError
from rafka.core.history import (ABORT, FAILED, INDETERMINATE, OK, READ_COMMITTED, READ_UNCOMMITTED,
                                Assigned, Commit, CommittedRead, FinalRead, HistoryWriter, Poll, Resume, Send, Txn,
                                event_from_json)
from rafka.core.structs import TopicPartition
from rafka.verify.tail_reader import follow_partitions
from rafka.verify.transactions import CTP_GROUP, TransactionalWorkload, transactional_id

GROUP = "verify-members"          # the driver-side members' group
ACTOR_GROUP = "verify-actors"     # the member actors' group


# Per group protocol (WorkloadOptions.group_protocol): whether it hands a member
# only the partitions that move (incremental; else the whole assignment after
# revoking everything), and the driver-side members' Consumer options.
MEMBER_GROUP_PROTOCOLS = {
    "eager": (False, lambda name: {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 500}),
    "cooperative": (True, lambda name: {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 500,
                                        "partition_assignment_strategy": "cooperative-sticky"}),
    "static": (False, lambda name: {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 500,
                                    "group_instance_id": name}),
    "consumer": (True, lambda name: {"group_protocol": "consumer"}),
}


class RunClock:
    """Milliseconds since the run started, on the wall clock (shared with actors)."""

    def __init__(self, started_s: float | None = None) -> None:
        self.started_s = time.time() if started_s is None else started_s

    def now_ms(self) -> int:
        return max(0, int((time.time() - self.started_s) * 1000))


class History:
    """The run's history file: one writer, one lock, any thread."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._writer = HistoryWriter.open(path)
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def log(self, event) -> None:
        with self._lock:
            self._writer.write(event)
            for key in _count_keys(event):
                self.counts[key] = self.counts.get(key, 0) + 1

    def close(self) -> None:
        with self._lock:
            self._writer.close()


def _count_keys(event) -> tuple[str, ...]:
    """What the report counts an event as: sends by outcome, transactions by what
    became of them (committed, aborted on purpose, failed, indeterminate), polls,
    read_committed ones apart too."""
    if isinstance(event, Send):
        return (f"send:{event.outcome}",)
    if isinstance(event, Txn):
        label = ("aborted" if event.intent == ABORT else
                 {OK: "committed", FAILED: "failed", INDETERMINATE: "indeterminate"}[event.outcome])
        return (f"txn:{label}",)
    if isinstance(event, Poll) and event.isolation_level == READ_COMMITTED:
        return ("poll", "poll:read_committed")
    return (event.TYPE,)


@dataclasses.dataclass
class WorkloadOptions:
    topic: str = "verify"
    partitions: int = 3
    producers: int = 2
    members: int = 2
    member_actors: int = 2
    readers: int = 1
    acks: str = "all"
    idempotence: bool = True
    # Below what a producer gets through here (about 100 acks=all sends/s, one Ray
    # call each, on 2 cores shared with the cluster), so a send's latency is the
    # cluster's, not a queue's: the picture then shows what a fault costs.
    send_rate_per_producer: float = 50.0      # sends per second, at most
    window: int = 32                          # sends in flight per producer, at most
    member_lifetime_s: tuple[float, float] = (5.0, 20.0)
    commit_every_polls: int = 3
    # How the driver-side members run their group (issue 29): "eager" (classic,
    # range), "cooperative" (classic, cooperative-sticky), "static" (classic, range,
    # a group.instance.id per member, kept across its incarnations) or "consumer"
    # (KIP-848, the coordinator assigns).
    group_protocol: str = "eager"
    # Transactions (issue 28): producers of `<topic>-txn`, read_committed readers.
    transactions: bool = True
    txn_producers: int = 2
    txn_readers: int = 1
    txn_rate_per_producer: float = 5.0           # transactions per second, at most
    txn_abort_fraction: float = 0.25             # aborted on purpose
    txn_writes: tuple[int, int] = (2, 5)         # values per transaction, round robin over partitions
    txn_open_s: float = 0.1                      # a transaction stays open up to this long after its sends
    transaction_timeout_ms: int = 10_000
    txn_call_timeout_s: float = 30.0             # commit / abort / init_transactions, each try
    ctp: bool = True                             # the consume-transform-produce chain (with transactions)
    ctp_batch_records: int = 20                  # input records per transaction, at most

    @property
    def txn_topic(self) -> str | None:
        return f"{self.topic}-txn" if self.transactions else None

    @property
    def ctp_topic(self) -> str | None:
        return f"{self.topic}-txn-out" if self.transactions and self.ctp else None

    def transactional_ids(self) -> list[str]:
        if not self.transactions:
            return []
        names = [f"txn-producer-{i}" for i in range(self.txn_producers)] + (["ctp"] if self.ctp else [])
        return [transactional_id(name) for name in names]


def _outcome(error: BaseException) -> str:
    """A definite error: the broker refused the write (nothing was written). Any
    other failure (a timeout, a lost answer, a dead connection) may or may not have
    written it: indeterminate, as Jepsen counts :info operations."""
    if isinstance(error, KafkaError) and not error.retriable:
        return FAILED
    return INDETERMINATE


class Workload(TransactionalWorkload):
    def __init__(self, cluster, history: History, clock: RunClock, options: WorkloadOptions, *,
                 actor_log_dir: str, seed: int = 0) -> None:
        self.cluster = cluster
        self.history = history
        self.clock = clock
        self.options = options
        self.actor_log_dir = actor_log_dir
        self.random = random.Random(seed)
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self._threads: list[threading.Thread] = []
        self.actor_group = None
        # kept across a pause: values stay unique and incarnations keep counting
        self._next_sequence: dict[str, int] = {}
        self._next_incarnation: dict[str, int] = {}

    # --- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        o = self.options
        targets = [(self._produce, f"producer-{i}") for i in range(o.producers)]
        targets += [(self._member, f"member-{i}") for i in range(o.members)]
        targets += [(self._read_tail, f"reader-{i}") for i in range(o.readers)]
        targets += [(self._observe_commits, "observer")]
        if o.transactions:
            targets += [(self._transact, f"txn-producer-{i}") for i in range(o.txn_producers)]
            targets += [(self._read_committed, f"txn-reader-{i}") for i in range(o.txn_readers)]
            if o.ctp:
                targets += [(self._transform, "ctp")]
        for target, name in targets:
            thread = threading.Thread(target=self._guarded, args=(target, name), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        if o.member_actors:
            Path(self.actor_log_dir).mkdir(parents=True, exist_ok=True)
            self.actor_group = self.cluster.run_consumer_group(
                ACTOR_GROUP, [o.topic], actor_history_handler(self.actor_log_dir, self.clock.started_s),
                members=o.member_actors, session_timeout_ms=6_000, heartbeat_interval_ms=500,
                fetch_max_wait_ms=100, max_poll_records=100)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(120)
            if thread.is_alive():
                self.errors.append(f"{thread.name} did not stop")
        self._threads = []
        if self.actor_group is not None:
            try:
                self.actor_group.stop()
            except Exception as error:   # a member actor killed by the last fault
                self.errors.append(f"stopping the member actors: {error!r}")
            self.actor_group = None

    def restart_on(self, cluster) -> None:
        """Go on with every client on `cluster` (the same cluster restarted): after
        `stop()`, new clients, the same producer sequences and member incarnations."""
        self.cluster = cluster
        self.stopping.clear()
        self.start()

    def _guarded(self, target, name: str) -> None:
        try:
            target(name)
        except Exception as error:   # a workload bug: reported, the run goes on
            self.errors.append(f"{name}: {type(error).__name__}: {error}")

    # --- producers ----------------------------------------------------------------

    def _produce(self, name: str) -> None:
        o = self.options
        producer = self.cluster.producer(acks=o.acks, enable_idempotence=o.idempotence, linger_ms=2,
                                         request_timeout_ms=5_000, delivery_timeout_ms=20_000,
                                         max_block_ms=10_000)
        in_flight: deque = deque()
        sequence = self._next_sequence.get(name, 0)
        gap_s = 1.0 / o.send_rate_per_producer
        try:
            while not self.stopping.is_set():
                value = f"{name}-{sequence}"
                partition = sequence % o.partitions
                started_ms = self.clock.now_ms()
                try:
                    future = producer.send(o.topic, value=value.encode(), partition=partition)
                except Exception as error:   # refused at send: nothing queued
                    self.history.log(Send(name, o.topic, value, partition, _outcome(error), None, started_ms,
                                          self.clock.now_ms(), repr(error)))
                    future = None
                if future is not None:
                    in_flight.append((value, partition, started_ms, future))
                sequence += 1
                self._next_sequence[name] = sequence
                while in_flight and (in_flight[0][3].done() or len(in_flight) >= o.window):
                    self._log_send(name, *in_flight.popleft(), wait_s=30.0)
                time.sleep(gap_s)
            while in_flight:
                self._log_send(name, *in_flight.popleft(), wait_s=30.0)
        finally:
            producer.close()

    def _log_send(self, name: str, value: str, partition: int, started_ms: int, future, *, wait_s: float) -> None:
        try:
            offset = future.result(timeout=wait_s).offset
            outcome, error = OK, None
        except Exception as failure:
            offset, outcome, error = None, _outcome(failure), repr(failure)
        self.history.log(Send(name, self.options.topic, value, partition, outcome, offset, started_ms,
                              self.clock.now_ms(), error))

    # --- group members (driver side) ----------------------------------------------------

    def _member(self, name: str) -> None:
        while not self.stopping.is_set():
            incarnation = self._next_incarnation.get(name, 0)
            self._next_incarnation[name] = incarnation + 1
            lifetime_s = self.random.uniform(*self.options.member_lifetime_s)
            try:
                self._member_incarnation(name, incarnation, time.monotonic() + lifetime_s)
            except Exception as error:   # e.g. a poll during a fault: a new incarnation goes on
                self.errors.append(f"{name} incarnation {incarnation}: {type(error).__name__}: {error}")

    def _member_incarnation(self, name: str, incarnation: int, until_s: float) -> None:
        o = self.options
        incremental, protocol_options = MEMBER_GROUP_PROTOCOLS[o.group_protocol]
        consumer = self.cluster.consumer(group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False,
                                         max_poll_records=100, fetch_max_wait_ms=100, client_id=name,
                                         request_timeout_ms=10_000, default_api_timeout_ms=20_000,
                                         **protocol_options(name))
        history, clock, workload = self.history, self.clock, self
        owned: set[TopicPartition] = set()   # this incarnation's partitions, across rebalances

        class Listener:
            def on_partitions_revoked(self, revoked):
                if incremental:
                    owned.difference_update(revoked)

            def on_partitions_lost(self, lost):
                owned.difference_update(lost)

            def on_partitions_assigned(self, assigned):
                generation = consumer.group_metadata().generation_id
                everything = set(assigned) | (owned if incremental else set())
                history.log(Assigned(name, incarnation, GROUP, generation,
                                     tuple(sorted((tp.topic, tp.partition) for tp in everything)), clock.now_ms()))
                # A partition this member keeps across the rebalance goes on from its
                # own position, as Kafka's consumer does (it is not a resume); only a
                # partition new to it starts at the group's committed offset.
                # Logged here, inside the poll that delivered the assignment: the
                # committed offset is read and the position resolved before this
                # member can poll or commit the partition (a Resume logged at its
                # first poll came after the member's own commits of it, which the
                # checker rightly took as a resume behind an acked commit).
                new = set(assigned) - owned
                if not incremental:
                    owned.clear()
                owned.update(assigned)
                try:
                    committed = consumer.committed(new) if new else {}
                    resumes = [(tp, committed.get(tp), consumer.position(tp)) for tp in sorted(new)]
                except KafkaError as error:   # not judged: the member goes on
                    workload.errors.append(f"{name}: resume points not read: {error}")
                    return
                for tp, found, position in resumes:
                    history.log(Resume(name, incarnation, GROUP, tp.topic, tp.partition,
                                       found.offset if found is not None else None, position, clock.now_ms()))

        consumer.subscribe([o.topic], listener=Listener())
        polls = 0
        sync_next = True
        try:
            while not self.stopping.is_set() and time.monotonic() < until_s:
                records = consumer.poll(timeout=0.5)
                generation = consumer.group_metadata().generation_id
                for record in records:
                    history.log(Poll(name, incarnation, GROUP, generation, record.topic, record.partition,
                                     record.offset, record.value.decode(errors="replace"), clock.now_ms()))
                polls += 1
                if records and polls % o.commit_every_polls == 0:
                    self._commit(consumer, name, incarnation, generation, sync_next)
                    sync_next = not sync_next
        finally:
            try:
                consumer.close()   # a clean leave (a kill is the member actors' fault)
            except Exception as error:
                self.errors.append(f"{name}: close: {error!r}")

    def _commit(self, consumer, name: str, incarnation: int, generation: int, sync: bool) -> None:
        positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
        offsets = tuple(sorted((tp.topic, tp.partition, offset) for tp, offset in positions.items()))
        started_ms = self.clock.now_ms()

        def log(outcome: str) -> None:
            self.history.log(Commit(name, incarnation, GROUP, generation, offsets, sync, outcome, started_ms,
                                    self.clock.now_ms()))
        if sync:
            try:
                consumer.commit_sync({tp: offset for tp, offset in positions.items()}, timeout=10.0)
                log(OK)
            except Exception as error:
                log(_outcome(error))
        else:
            consumer.commit_async({tp: offset for tp, offset in positions.items()},
                                  callback=lambda _, error: log(OK if error is None else _outcome(error)))

    # --- readers and the observer -------------------------------------------------------

    def _read_tail(self, name: str) -> None:
        o = self.options
        partitions = [TopicPartition(o.topic, p) for p in range(o.partitions)]
        follow_partitions(self.cluster, partitions, name=name, incarnation=0, stopping=self.stopping,
                          errors=self.errors, history=self.history, clock=self.clock, auto_offset_reset="latest")

    def _observe_commits(self, name: str) -> None:
        admin = self.cluster.admin()
        while not self.stopping.wait(0.5):
            for group in (GROUP, ACTOR_GROUP):
                try:
                    offsets = admin.list_consumer_group_offsets(group)
                except Exception:   # a coordinator moving: the next look sees it
                    continue
                now_ms = self.clock.now_ms()
                for tp, offset in sorted(offsets.items()):
                    self.history.log(CommittedRead(group, tp.topic, tp.partition, offset, now_ms))

    # --- the end --------------------------------------------------------------------

    def _final_read(self, tp: TopicPartition, isolation_level: str, timeout_s: float) -> None:
        with self.cluster.consumer(auto_offset_reset="earliest", max_poll_records=10_000, fetch_max_wait_ms=100,
                                   isolation_level=isolation_level) as consumer:
            consumer.assign([tp])
            start, end = consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]
            consumer.seek(tp, start)
            records, deadline_s = [], time.monotonic() + timeout_s
            while consumer.position(tp) < end:
                if time.monotonic() > deadline_s:
                    raise TimeoutError(f"the final read of {tp} ({isolation_level}) did not reach {end}")
                records += [r for r in consumer.poll(timeout=0.5) if r.offset < end]
        self.history.log(FinalRead(tp.topic, tp.partition, tuple((r.offset, r.value.decode(errors="replace"))
                                                                 for r in records), start, end, self.clock.now_ms(),
                                   isolation_level))

    def final_read(self, timeout_s: float = 120.0) -> None:
        """Every partition from its log start to its HW, the transactional topics'
        also read_committed to their LSO, and each group's last committed offsets
        (faults are over: the cluster has healed)."""
        o = self.options
        reads = [(o.topic, READ_UNCOMMITTED)]
        if o.transactions:
            self._wait_for_stable_offsets(timeout_s)
            for topic in (o.txn_topic, o.ctp_topic):
                if topic is not None:
                    reads += [(topic, READ_UNCOMMITTED), (topic, READ_COMMITTED)]
        for topic, isolation_level in reads:
            for partition in range(o.partitions):
                self._final_read(TopicPartition(topic, partition), isolation_level, timeout_s)
        admin = self.cluster.admin()
        for group in (GROUP, ACTOR_GROUP) + ((CTP_GROUP,) if o.ctp_topic else ()):
            now_ms = self.clock.now_ms()
            for tp, offset in sorted(admin.list_consumer_group_offsets(group).items()):
                self.history.log(CommittedRead(group, tp.topic, tp.partition, offset, now_ms))


def actor_history_handler(directory: str, started_s: float):
    """A member actor's handler: one Poll line per record, into a file per process
    (a killed process keeps what it wrote); incarnation = the process id, and the
    group generation the batch was polled in (a batch whose commit the group
    refused is handed again after the rebalance, in a newer generation)."""
    def handle(records) -> None:
        from rafka.actors.member import handling_generation
        now_ms = max(0, int((time.time() - started_s) * 1000))
        pid = os.getpid()
        generation = handling_generation()
        with open(os.path.join(directory, f"actor-{pid}.jsonl"), "a") as out:
            out.write("".join(Poll(f"actor-{pid}", pid, ACTOR_GROUP, generation, r.topic, r.partition, r.offset,
                                   r.value.decode(errors="replace"), now_ms).to_json() + "\n"
                              for r in records))
    return handle


def merge_actor_polls(directory: str, history: History) -> None:
    """The member actors' Poll lines into the run's history (a torn last line of a
    killed process is dropped: that record was handed but not logged)."""
    for path in sorted(Path(directory).glob("actor-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                history.log(event_from_json(line))
            except (ValueError, json.JSONDecodeError):
                continue
