"""A member of a consumer group that rafka runs: a Ray actor around one subscribed
Consumer, and the driver's handle on a group of them.

The handler takes a batch of records and returns its output: None, or
ProducerRecords, which the member writes with its own producer (one data path;
core.member_batch holds the batch's rules). Each member loops: poll, call the
handler, write its output, commit the batch's end positions, and only then poll
again.

At least once (the default): the output is written and acked, then the offsets
committed with commit_sync. A member that dies between the handler and the
commit leaves those records uncommitted, and whoever gets the partition next
handles them again (and writes their output again); no record below a committed
offset was left unhandled.

Exactly once (`exactly_once=True`, KIP-447 as Kafka Streams' EOS v2): the
consumer reads read_committed, and each batch is one transaction of a
transactional producer whose transactional.id is the member's actor name (stable
across Ray restarts, like its group.instance.id): begin_transaction, the
output, send_offsets_to_transaction(the batch's end offsets, the consumer's
group_metadata()), commit_transaction. A restarted member's init_transactions
aborts what its killed predecessor left open and fences it; the group generation
in TxnOffsetCommit fences a member the group has moved past; a read_committed
consumer's committed offsets wait for a pending transaction (require_stable), so
a partition's next owner starts where the last committed transaction ended. A
batch that fails is dropped: abortable, the transaction is aborted; the producer
fenced or unable to abort, it is replaced by a new one (init_transactions again);
either way the member seeks back to the group's committed offsets and reads the
batch again. So the output topic, read read_committed, holds each input
record's output once; read_uncommitted also sees the aborted attempts.

Invariants:
  the member commits only positions of records the handler returned from
  exactly once: a batch's output and its offsets are in one transaction, never
  committed apart; a batch that did not commit leaves the member's positions at
  the group's committed offsets
  the member's committed offsets come only from its own commits; a commit
  refused because the group moved on (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
  REBALANCE_IN_PROGRESS) is dropped, and the batch's partitions go to the
  rebalance (their next owner starts at the last committed offset)
A handler that needs to know which group generation its batch was polled in
(a batch handed again after a rebalance comes in a newer one) calls
`handling_generation()`.
Actors are named `member:<group>:<index>`, restartable: a restarted member
starts its loop again from its constructor and joins again with its actor name as
group.instance.id (a static member, KIP-345): within the session timeout it takes
its old place and partitions and nobody else is rebalanced. Members are spread
across the broker nodes with a SPREAD placement group. `stop()` closes each
consumer with LeaveGroup, so the group empties at once.

`group_protocol="consumer"` (KIP-848) runs the same loop on the new protocol: the
coordinator assigns, commits carry the member epoch, and a commit refused
because the member was fenced (FENCED_MEMBER_EPOCH) is dropped as above. One
refused STALE_MEMBER_EPOCH (the member's epoch moved on while it was sent; Kafka's
consumer, like rafka's, does not resend it) is owed: committed again after the
next poll, for the partitions the member still owns then, before any newer
commit of theirs (and dropped where one succeeded meanwhile), so a partition the
member keeps is committed to its end even when no record follows. A member killed there never sent its static leave (epoch -2), so its
restart is refused (UNRELEASED_INSTANCE_ID) until the coordinator fences the
old one at its session timeout: the member waits and joins again, as a new
consumer, every `UNRELEASED_RETRY_S`.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import ray
from ray.util.placement_group import placement_group, remove_placement_group

from rafka.actors.replica import NAMESPACE
from rafka.core.errors import (FencedMemberEpoch, IllegalGeneration, KafkaError, RebalanceInProgress,
                               StaleMemberEpoch, UnknownMemberId, UnreleasedInstanceId)
from rafka.core.member_batch import (OwedCommits, Recovery, batch_span, output_records, recovery_for,
                                     rewind_positions)
from rafka.core.structs import TopicPartition
from rafka.placement.groups import BROKER_RESOURCE, in_bundle

logger = logging.getLogger(__name__)
MEMBER_CPU = 0.01
# Kafka Streams' transaction.timeout.ms under exactly-once (Kafka's producer default is
# 60 s): a killed member's open transaction, if no restart aborts it first, holds its
# partitions' committed offsets unstable this long.
MEMBER_TRANSACTION_TIMEOUT_MS = 10_000
PRODUCER_CLOSE_TIMEOUT_S = 5.0
UNRELEASED_RETRY_S = 1.0
_REFUSED_COMMITS = (IllegalGeneration, UnknownMemberId, RebalanceInProgress, StaleMemberEpoch, FencedMemberEpoch)
_handling = threading.local()   # the generation of the batch the member's handler is handling


def handling_generation() -> int | None:
    """Inside a member actor's handler: the group generation its batch was polled
    in (Kafka's consumer.groupMetadata().generationId); None elsewhere."""
    return getattr(_handling, "generation", None)


def member_actor_name(group_id: str, index: int) -> str:
    return f"member:{group_id}:{index}"


class ConsumerMemberActor:
    def __init__(self, *, group_id: str, topics: list[str], handler, index: int,
                 poll_timeout_s: float = 0.5, exactly_once: bool = False, producer_options: dict | None = None,
                 **consumer_options) -> None:
        from rafka.actors.cluster_credential import cluster_client_options
        from rafka.actors.controller import cluster_bootstrap_servers
        from rafka.client.consumer import Consumer

        if exactly_once and consumer_options.get("isolation_level", "read_committed") != "read_committed":
            raise ValueError("exactly_once members read read_committed, got isolation_level="
                             f"{consumer_options['isolation_level']!r}")
        # A static member (KIP-345) named after the actor: when Ray restarts the actor
        # within the session timeout it takes its old place and partitions, and the
        # other members are not rebalanced.
        options = {"auto_offset_reset": "earliest", "client_id": f"{group_id}-member-{index}",
                   "group_instance_id": member_actor_name(group_id, index),
                   **({"isolation_level": "read_committed"} if exactly_once else {}),
                   **cluster_client_options(), **consumer_options}
        def new_consumer():
            consumer = Consumer(cluster_bootstrap_servers, group_id=group_id, enable_auto_commit=False, **options)
            consumer.subscribe(topics)
            return consumer
        self._new_consumer = new_consumer
        self.consumer = new_consumer()
        self.handler = handler
        self.index = index
        self.poll_timeout_s = poll_timeout_s
        self.exactly_once = exactly_once
        # the producer of the handler's output, made when first needed: exactly once,
        # transactional with the member's actor name as its id (stable across restarts)
        self._producer_options = {"bootstrap_servers": cluster_bootstrap_servers, **cluster_client_options(),
                                  **({"transactional_id": member_actor_name(group_id, index),
                                      "transaction_timeout_ms": MEMBER_TRANSACTION_TIMEOUT_MS} if exactly_once
                                     else {"acks": "all"}),
                                  **(producer_options or {})}
        self.producer = None
        self._owed = OwedCommits()   # refused STALE_MEMBER_EPOCH, committed again after the next poll
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._progress = {"handled": 0, "batches": 0, "committed": {}, "assignment": [],
                          "member_id": "", "generation": -1, "error": None, "started_s": time.time(),
                          "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                          "refused_commits": 0, "exactly_once": exactly_once, "written": 0,
                          "aborted_batches": 0, "producers": 0, "unreleased_waits": 0}
        self._loop = threading.Thread(target=self._run, daemon=True, name=f"member-{index}")
        self._loop.start()

    def _run(self) -> None:
        try:
            if self.exactly_once:   # before the first poll: ends what a killed predecessor left open
                self._output_producer()
            while not self._stopping.is_set():
                try:
                    records = self.consumer.poll(timeout=self.poll_timeout_s)
                except UnreleasedInstanceId:   # KIP-848: the killed predecessor's session still holds the id
                    self._progress["unreleased_waits"] += 1
                    self.consumer.close(leave_group=False)
                    if self._stopping.wait(UNRELEASED_RETRY_S):
                        break   # stopped while waiting: no new consumer (the closed one is closed again: a no-op)
                    self.consumer = self._new_consumer()
                    continue
                joined = self.consumer.group_metadata()
                self._progress.update(assignment=sorted(tuple(tp) for tp in self.consumer.assignment()),
                                      member_id=joined.member_id, generation=joined.generation_id)
                if self._owed:
                    self._commit_owed()
                if not records:
                    continue
                if self.exactly_once:
                    self._handle_in_transaction(records, joined)
                else:
                    self._handle_then_commit(records, joined)
        except Exception as error:   # a Kafka error the member cannot go on after, or the handler's
            self._progress["error"] = f"{type(error).__name__}: {error}"
            logger.error("member %d stopped on %r", self.index, error)
        finally:
            try:   # stopped: leave at once; an error: keep the place for a restart
                self._close_producer()
                self.consumer.close(leave_group=self._stopping.is_set())
            finally:
                self._stopped.set()

    def _call_handler(self, records, joined) -> list:
        _handling.generation = joined.generation_id
        try:
            return output_records(self.handler(records))
        finally:
            _handling.generation = None

    def _handle_then_commit(self, records, joined) -> None:
        """At least once: the output written and acked, then the offsets committed."""
        output = self._call_handler(records, joined)
        if output:
            producer = self._output_producer()
            sent = [producer.send(*record) for record in output]
            producer.flush()
            for future in sent:
                future.result()   # a record that failed for good stops the member, uncommitted
        ends = batch_span(records).end_offsets
        if self._commit(ends):
            self._batch_committed(records, ends, len(output))

    def _commit(self, offsets: dict) -> bool:
        """commit_sync; False if refused because the group moved on (a stale epoch's
        offsets owed, see the module's note). A success settles what it covers."""
        try:
            self.consumer.commit_sync(dict(offsets))
        except StaleMemberEpoch as error:
            logger.info("member %d: commit refused for a stale member epoch, sent again after the next poll: %s",
                        self.index, error)
            self._progress["refused_commits"] += 1
            self._owed.refused(offsets)
            return False
        except _REFUSED_COMMITS as error:
            logger.info("member %d: commit refused, the group moved on: %s", self.index, error)
            self._progress["refused_commits"] += 1
            return False
        self._owed.settled(offsets)
        self._progress["committed"] = {**self._progress["committed"], **offsets}
        return True

    def _commit_owed(self) -> None:
        """The offsets refused STALE_MEMBER_EPOCH, committed again for the partitions
        still owned after this poll (with the epoch it brought)."""
        owed = self._owed.due(self.consumer.assignment())
        if owed:
            self._commit(owed)

    def _handle_in_transaction(self, records, joined) -> None:
        """Exactly once: the output and the batch's offsets in one transaction; a
        batch that fails is dropped and read again (core.member_batch.recovery_for)."""
        span = batch_span(records)
        producer = self._output_producer()
        try:
            producer.begin_transaction()
            output = self._call_handler(records, joined)
            for record in output:
                producer.send(*record)
            producer.send_offsets_to_transaction(
                {TopicPartition(*tp): offset for tp, offset in span.end_offsets.items()}, joined)
            producer.commit_transaction()
        except Exception as error:
            recovery = recovery_for(error)
            self._progress["aborted_batches"] += 1
            logger.info("member %d: batch dropped (%s) after %r", self.index, recovery.name, error)
            if recovery is not Recovery.NEW_PRODUCER:
                try:
                    producer.abort_transaction()
                except KafkaError as abort_error:   # fatal, or a commit that timed out mid-way
                    logger.info("member %d: abort failed (%r): a new producer", self.index, abort_error)
                    if recovery is Recovery.ABORT:
                        recovery = Recovery.NEW_PRODUCER
            if recovery is not Recovery.ABORT:
                self._close_producer()
            if recovery is Recovery.STOP:
                raise
            if recovery is Recovery.NEW_PRODUCER:
                # its init_transactions ends what the old one left open (aborted, or
                # committed if it got that far), so the committed offsets below are final
                self._output_producer()
            self._rewind(span)
            return
        self._batch_committed(records, span.end_offsets, len(output))

    def _rewind(self, span) -> None:
        """Back to the group's committed offsets for the batch's partitions still held."""
        assignment = self.consumer.assignment()
        held = [TopicPartition(*tp) for tp in span.first_offsets if TopicPartition(*tp) in assignment]
        committed = {tuple(tp): (found.offset if found is not None else None)
                     for tp, found in self.consumer.committed(held).items()} if held else {}
        for tp, offset in rewind_positions(span, committed, held).items():
            self.consumer.seek(TopicPartition(*tp), offset)

    def _batch_committed(self, records, ends: dict, written: int) -> None:
        self._progress["handled"] += len(records)
        self._progress["batches"] += 1
        self._progress["written"] += written
        self._progress["committed"] = {**self._progress["committed"], **ends}

    def _output_producer(self):
        """The member's producer, made (and, exactly once, initialized) when first needed."""
        if self.producer is None:
            from rafka.client.producer import Producer
            options = dict(self._producer_options)
            producer = Producer(options.pop("bootstrap_servers"), **options)
            try:
                if self.exactly_once:
                    producer.init_transactions()
            except BaseException:
                producer.close(timeout=0)
                raise
            self.producer = producer
            self._progress["producers"] += 1
        return self.producer

    def _close_producer(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            try:
                producer.close(timeout=PRODUCER_CLOSE_TIMEOUT_S)
            except Exception as error:   # a fenced producer's unsent records: dropped with it
                logger.info("member %d: producer closed with %r", self.index, error)

    def describe(self) -> dict:
        """Progress as of now: member id, generation, assignment, records handled,
        batches committed, output records written with them, last committed offset
        per partition, error if any; exactly once also the batches dropped
        (aborted or fenced) and how many producers the member initialized."""
        return {"index": self.index, **dict(self._progress),
                "running": not self._stopped.is_set()}

    def stop(self, timeout_s: float = 30.0) -> dict:
        """Finish the batch in hand, close (leave the group); returns describe()."""
        self._stopping.set()
        self._stopped.wait(timeout_s)
        return self.describe()


class ConsumerGroupHandle:
    """The driver's handle on a group rafka runs (`Cluster.run_consumer_group`)."""

    def __init__(self, group_id: str, members: list, group) -> None:
        self.group_id = group_id
        self.members = members
        self._placement_group = group
        self.stopped = False

    def describe(self, timeout_s: float = 10.0) -> list[dict]:
        """Each member's describe(); a member that is restarting shows as None."""
        refs = [m.describe.remote() for m in self.members]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        answers = []
        for ref in refs:
            try:
                answers.append(ray.get(ref) if ref in ready else None)
            except ray.exceptions.RayError:
                answers.append(None)
        return answers

    def assignment(self) -> dict[int, list]:
        """Member index -> its partitions, for members that answered."""
        return {d["index"]: d["assignment"] for d in self.describe() if d is not None}

    def stop(self, timeout_s: float = 30.0) -> list[dict]:
        """Stop every member (each leaves the group), then remove the actors; each
        member's final description. Once stopped, stop() does nothing and answers []."""
        if self.stopped:
            return []
        refs = [m.stop.remote(timeout_s) for m in self.members]
        final = []
        for ref in refs:
            try:
                final.append(ray.get(ref, timeout=timeout_s + 5))
            except ray.exceptions.RayError as error:
                final.append({"error": str(error)})
        for member in self.members:
            ray.kill(member, no_restart=True)
        remove_placement_group(self._placement_group)
        self.stopped = True
        return final


def run_consumer_group(group_id: str, topics: list[str], handler, *, members: int,
                       ready_timeout_s: float = 60.0, exactly_once: bool = False,
                       producer_options: dict | None = None, **consumer_options) -> ConsumerGroupHandle:
    """N ConsumerMember actors, one per bundle of a SPREAD placement group over the
    broker nodes (with fewer nodes than members, some share a node).
    `exactly_once`: each batch's output and offsets in one transaction (module
    docstring); `producer_options`: the output producer's (kafka-python names)."""
    if members < 1:
        raise ValueError(f"members must be at least 1, got {members}")
    group = placement_group([{"CPU": MEMBER_CPU, BROKER_RESOURCE: 0.001} for _ in range(members)],
                            strategy="SPREAD", name=f"rafka:members:{group_id}")
    ready, _ = ray.wait([group.ready()], timeout=ready_timeout_s)
    if not ready:
        remove_placement_group(group)
        raise TimeoutError(f"the placement group of group {group_id!r} was not placed in {ready_timeout_s}s")
    actor = ray.remote(ConsumerMemberActor)
    handles = [actor.options(name=member_actor_name(group_id, i), namespace=NAMESPACE, max_restarts=-1,
                             num_cpus=MEMBER_CPU, max_concurrency=4,
                             scheduling_strategy=in_bundle(group, i)).remote(
                   group_id=group_id, topics=list(topics), handler=handler, index=i, exactly_once=exactly_once,
                   producer_options=producer_options, **consumer_options)
               for i in range(members)]
    ray.get([h.describe.remote() for h in handles], timeout=ready_timeout_s)
    return ConsumerGroupHandle(group_id, handles, group)
