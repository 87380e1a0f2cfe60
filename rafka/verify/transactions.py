"""The transactional part of `rafka verify`'s workload (issue 28), mixed into
rafka.verify.workload.Workload, whose cluster, history, clock, options,
`stopping`, `errors`, `random` and value and incarnation counters it uses:

- transactional producers (rafka's Producer with a transactional_id) write each
  transaction's values ("<producer>-<n>-<j>") round robin over 2+ partitions of
  `<topic>-txn`, abort a share on purpose, and log each as a Txn: asked to commit
  or abort, ok, failed (a definite error: aborted instead) or indeterminate (the
  producer is then replaced: its successor's init_transactions fences it and
  ends what it left);
- read_committed readers follow that topic from its start;
- a consume-transform-produce chain: a read_committed group member of that topic
  whose transactions write each input value, transformed, to the same partition
  of `<topic>-txn-out` and commit the consumed offsets with them; after an abort
  it goes back to the group's committed offsets (logged as Resumes);
- at the end, a wait until every transactional topic's LSO is its HW (every
  transaction ended), before the read_committed final read.
Bounded: one transaction in flight per producer, at most `txn_writes[1]` values
(the chain: `ctp_batch_records`) each. Callers: rafka.verify.workload only.
"""

from __future__ import annotations

import random
import time

from rafka.core.errors import IllegalStateError, KafkaError
from rafka.core.history import (ABORT, ABORTED, COMMIT, FAILED, INDETERMINATE, OK, READ_COMMITTED, Assigned, Poll,
                                Resume, Txn)
from rafka.core.structs import TopicPartition
from rafka.verify.tail_reader import follow_partitions

CTP_GROUP = "verify-ctp"          # the consume-transform-produce chain's group


def transactional_id(producer: str) -> str:
    return f"verify-{producer}"



class TransactionalWorkload:
    def _transact(self, name: str) -> None:
        """Transactions one after another, each on 2+ partitions; a producer whose
        transaction ended indeterminate is closed, and its successor's
        init_transactions (same transactional id) fences it and completes or aborts
        what it left. At the end the last one is always a producer that ended
        cleanly, so no transaction of this id stays open."""
        o = self.options
        rng = random.Random(f"{self.random.random()}-{name}")
        number = self._next_sequence.get(name, 0)
        producer = None
        try:
            while not self.stopping.is_set():
                if producer is None:
                    producer = self._transactional_producer(name)
                    if producer is None:
                        continue
                count = rng.randint(*o.txn_writes)
                first = rng.randrange(o.partitions)
                writes = [(o.txn_topic, (first + j) % o.partitions, f"{name}-{number}-{j}") for j in range(count)]
                number += 1
                self._next_sequence[name] = number
                producer = self._one_transaction(producer, name, writes, abort=rng.random() < o.txn_abort_fraction,
                                                 open_s=rng.uniform(0.0, o.txn_open_s))
                self.stopping.wait(rng.uniform(0.0, 2.0 / o.txn_rate_per_producer))
        finally:
            if producer is None:   # the last one was given up: a successor ends what it left
                producer = self._transactional_producer(name, attempts=3)
            if producer is not None:
                _close_quietly(producer)

    def _transactional_producer(self, name: str, *, attempts: int | None = None):
        """A producer of `name`'s transactional id, initialised; None if stopping (or
        after `attempts` failures, which go on despite stopping)."""
        o = self.options
        tried = 0
        while attempts is not None or not self.stopping.is_set():
            producer = self.cluster.producer(transactional_id=transactional_id(name),
                                             transaction_timeout_ms=o.transaction_timeout_ms, linger_ms=2,
                                             request_timeout_ms=5_000, delivery_timeout_ms=20_000,
                                             max_block_ms=int(o.txn_call_timeout_s * 1000))
            try:
                producer.init_transactions(timeout=o.txn_call_timeout_s)
                return producer
            except Exception as error:   # e.g. its coordinator moving for longer than the timeout
                self.errors.append(f"{name}: init_transactions: {type(error).__name__}: {error}")
                _close_quietly(producer)
            tried += 1
            if attempts is not None and tried >= attempts:
                return None
            self.stopping.wait(0.5)
        return None

    def _one_transaction(self, producer, name: str, writes: list, *, abort: bool, open_s: float):
        """Begin, send `writes`, commit or abort, and log the Txn; returns the
        producer to go on with (None: it was given up)."""
        started_ms = self.clock.now_ms()
        try:
            producer.begin_transaction()
        except Exception as error:   # nothing sent: no transaction to log
            self.errors.append(f"{name}: begin_transaction: {type(error).__name__}: {error}")
            _close_quietly(producer)
            return None
        sent = []
        for topic, partition, value in writes:
            try:
                producer.send(topic, value=value.encode(), partition=partition)
            except Exception:   # refused at send (the transaction failed already): the commit says so
                break
            sent.append((topic, partition, value))
        if open_s:
            self.stopping.wait(open_s)
        requested_ms = self.clock.now_ms()
        outcome, error, usable = self._abort_transaction(producer) if abort else self._commit_transaction(producer)
        self.history.log(Txn(name, producer.transactional_id, ABORT if abort else COMMIT, outcome, tuple(sent),
                             started_ms, requested_ms, self.clock.now_ms(), error=error))
        if usable:
            return producer
        _close_quietly(producer)
        return None

    def _commit_transaction(self, producer) -> tuple[str, str | None, bool]:
        """(outcome, error, producer still usable). A commit that raised is aborted
        when the producer allows it (an abortable error: the coordinator never took
        the commit, so the transaction is definitely aborted: failed); a commit
        still in flight (the producer refuses the abort) is resumed; what cannot be
        told apart (fatal errors, fencing, time out) is indeterminate."""
        timeout_s = self.options.txn_call_timeout_s
        last = None
        for _ in range(3):
            try:
                producer.commit_transaction(timeout=timeout_s)
                return OK, None if last is None else f"committed on a retry after {last!r}", True
            except Exception as error:
                last = error
            try:
                producer.abort_transaction(timeout=timeout_s)
                return FAILED, repr(last), True
            except IllegalStateError:   # still committing: its EndTxn may be in flight; resume it
                continue
            except Exception as error:
                return INDETERMINATE, f"{last!r}; then abort: {error!r}", False
        return INDETERMINATE, repr(last), False

    def _abort_transaction(self, producer) -> tuple[str, str | None, bool]:
        """(outcome, error, producer still usable): aborted, or given up (still
        aborted: the commit was never asked for, and its successor's
        init_transactions or the coordinator's timeout ends it)."""
        last = None
        for _ in range(3):
            try:
                producer.abort_transaction(timeout=self.options.txn_call_timeout_s)
                return OK, None if last is None else f"aborted on a retry after {last!r}", True
            except IllegalStateError as error:
                return INDETERMINATE, repr(error), False
            except Exception as error:
                last = error
        return INDETERMINATE, repr(last), False

    def _transform(self, name: str) -> None:
        """The consume-transform-produce chain: incarnations one after another (a
        new one after a transaction ended indeterminate), each a read_committed
        group member and a transactional producer of one transactional id."""
        rng = random.Random(f"{self.random.random()}-{name}")
        while not self.stopping.is_set():
            incarnation = self._next_incarnation.get(name, 0)
            self._next_incarnation[name] = incarnation + 1
            producer = self._transactional_producer(name)
            if producer is None:
                return
            try:
                self._transform_incarnation(name, incarnation, producer, rng)
            except Exception as error:   # e.g. a poll during a fault: a new incarnation goes on
                self.errors.append(f"{name} incarnation {incarnation}: {type(error).__name__}: {error}")
            finally:
                _close_quietly(producer)

    def _transform_incarnation(self, name: str, incarnation: int, producer, rng: random.Random) -> None:
        o = self.options
        consumer = self.cluster.consumer(group_id=CTP_GROUP, isolation_level="read_committed",
                                         auto_offset_reset="earliest", enable_auto_commit=False,
                                         session_timeout_ms=6_000, heartbeat_interval_ms=500,
                                         fetch_max_wait_ms=100, client_id=name, request_timeout_ms=10_000,
                                         default_api_timeout_ms=20_000)
        history, clock, workload = self.history, self.clock, self

        def log_resumes(partitions) -> None:
            """Where each partition starts (again): its committed offset, or the log start."""
            committed = consumer.committed(partitions)
            for tp in sorted(partitions):
                found = committed.get(tp)
                if found is None:
                    consumer.seek_to_beginning(tp)
                else:
                    consumer.seek(tp, found.offset)
                history.log(Resume(name, incarnation, CTP_GROUP, tp.topic, tp.partition,
                                   None if found is None else found.offset, consumer.position(tp), clock.now_ms()))

        class Listener:
            def on_partitions_revoked(self, revoked):
                pass

            def on_partitions_assigned(self, assigned):
                history.log(Assigned(name, incarnation, CTP_GROUP, consumer.group_metadata().generation_id,
                                     tuple(sorted((tp.topic, tp.partition) for tp in assigned)), clock.now_ms()))
                try:
                    log_resumes(set(assigned))
                except KafkaError as error:   # the incarnation cannot say where it starts: a new one
                    workload.errors.append(f"{name}: resume points not read: {error}")
                    raise

        consumer.subscribe([o.txn_topic], listener=Listener())
        number = self._next_sequence.get(name, 0)
        try:
            while not self.stopping.is_set():
                records = consumer.poll(timeout=0.5, max_records=o.ctp_batch_records)
                if not records:
                    continue
                generation = consumer.group_metadata().generation_id
                now_ms = clock.now_ms()
                for record in records:
                    history.log(Poll(name, incarnation, CTP_GROUP, generation, record.topic, record.partition,
                                     record.offset, record.value.decode(errors="replace"), now_ms, READ_COMMITTED))
                number += 1
                self._next_sequence[name] = number
                fate, usable = self._transform_transaction(producer, consumer, name, number, records, rng)
                if not usable or fate == INDETERMINATE:
                    return   # a new incarnation (and producer) goes on from the committed offsets
                if fate == ABORTED:   # its input again, from the committed offsets
                    log_resumes(consumer.assignment())
        finally:
            try:
                consumer.close()
            except Exception as error:
                self.errors.append(f"{name}: close: {error!r}")

    def _transform_transaction(self, producer, consumer, name: str, number: int, records,
                               rng) -> tuple[str, bool]:
        """One transaction of the chain: the transformed records and the offsets
        past them; aborted on purpose now and then. Returns its fate and whether
        the producer can go on."""
        o = self.options
        abort = rng.random() < o.txn_abort_fraction
        started_ms = self.clock.now_ms()
        writes, sources, next_offsets = [], [], {}
        producer.begin_transaction()
        error = None
        try:
            for record in records:
                source = record.value.decode(errors="replace")
                value = f"{source}>{name}-{number}"
                producer.send(o.ctp_topic, value=value.encode(), partition=record.partition)
                writes.append((o.ctp_topic, record.partition, value))
                sources.append(source)
                next_offsets[TopicPartition(record.topic, record.partition)] = record.offset + 1
            producer.send_offsets_to_transaction(next_offsets, consumer.group_metadata(),
                                                 timeout=o.txn_call_timeout_s)
        except Exception as failure:   # the transaction cannot commit: the commit says so
            error = failure
        requested_ms = self.clock.now_ms()
        outcome, why, usable = self._abort_transaction(producer) if abort else self._commit_transaction(producer)
        if error is not None and why is None:
            why = repr(error)
        offsets = tuple((CTP_GROUP, tp.topic, tp.partition, offset) for tp, offset in sorted(next_offsets.items()))
        txn = Txn(name, producer.transactional_id, ABORT if abort else COMMIT, outcome, tuple(writes), started_ms,
                  requested_ms, self.clock.now_ms(), offsets, tuple(sources), why)
        self.history.log(txn)
        return txn.fate, usable

    def _read_committed(self, name: str) -> None:
        """The transactional topic from its start, read_committed, for as long as the
        run goes (a restart of the cluster starts a new incarnation from the start)."""
        o = self.options
        incarnation = self._next_incarnation.get(name, 0)
        self._next_incarnation[name] = incarnation + 1
        partitions = [TopicPartition(o.txn_topic, p) for p in range(o.partitions)]
        follow_partitions(self.cluster, partitions, name=name, incarnation=incarnation, stopping=self.stopping,
                          errors=self.errors, history=self.history, clock=self.clock, auto_offset_reset="earliest",
                          isolation_level=READ_COMMITTED)

    def _wait_for_stable_offsets(self, timeout_s: float) -> None:
        """Until the transactional topics' LSO is their HW on every partition: every
        transaction ended (one left open by a producer given up ends at its
        timeout at the latest), so the read_committed final read sees them all."""
        o = self.options
        tps = [TopicPartition(topic, p) for topic in (o.txn_topic, o.ctp_topic) if topic for p in range(o.partitions)]
        deadline_s = time.monotonic() + timeout_s
        with self.cluster.consumer(isolation_level="read_committed") as committed, \
                self.cluster.consumer() as uncommitted:
            while True:
                stable, high = committed.end_offsets(tps), uncommitted.end_offsets(tps)
                if stable == high:
                    return
                if time.monotonic() > deadline_s:
                    self.errors.append(f"the LSO did not reach the HW in {timeout_s} s: LSO {stable}, HW {high}")
                    return
                time.sleep(0.2)


def _close_quietly(producer) -> None:
    try:
        producer.close(timeout=5)
    except Exception:   # a producer given up: what it holds ends with it
        pass
