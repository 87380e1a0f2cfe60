"""Consumer: reads assigned partitions from their leaders, below the HW only.

Design, as Kafka's fetcher: each assigned partition has a position (the next
offset to hand to the caller) and a fetch position (the next offset to ask the
leader for). At most one fetch per partition is in flight; a fetch is Kafka's
Fetch on the leader's endpoint (protocol.network, protocol.fetching), a long poll
(`fetch_max_wait_ms`, or until `fetch_min_bytes` of the partition can be
answered), all partitions' fetches in flight at once; an answer is
decoded into a per-partition
buffer, so the next fetch goes out while the caller still works on the last one.
`poll` hands out up to `max_poll_records` from the buffers, round-robin over the
partitions that have data, and advances positions past what it returns.

Invariants:
  a returned record's offset is >= its partition's position before the poll, and
  < the HW the leader reported with it (the leader reads below the HW; the
  consumer checks again and fails loudly if not)
  positions move forward only by poll, and anywhere only by seek / reset
  a seek, reset, pause or unassign drops that partition's buffered records and
  makes any fetch in flight for it stale (its answer is discarded)
Bounds: one fetch in flight per partition; a partition is fetched again only while
it buffers fewer than `max_poll_records` records, so it holds at most that many
plus one fetch's worth. The next fetch goes out before the last answer is
decoded (its position comes from the batch headers), so decoding overlaps the
round trip to the leader.

Isolation (`isolation_level`, Kafka's): read_uncommitted (the default) reads
below the HW; read_committed below the last stable offset, where the leader
names the aborted transactions of each answer and their batches are skipped
(core.isolation); at both levels transaction markers (control batches) are
never handed out, and a position moves past skipped batches at the end of what
was fetched, as Kafka's does (so that a consumer at the end of a transactional
topic reaches the end offset). end_offsets and seek_to_end / "latest" answer the
HW, read_committed the LSO.

Committed offsets: with a `group_id`, a partition without a position starts at
the group's committed offset (else `auto_offset_reset`: earliest, latest, none,
or KIP-1106's by_duration:<ISO-8601>); read_committed, a stable one (KIP-447:
while a transaction's offset is pending, the fetch waits for its end); commit_sync retries retriable errors until
its timeout; commit_async tries once and reports to its callback from the
consumer's own thread (in the next poll, commit or close), as Kafka's does.
Async commits are sent at once, in call order, several in flight together on
the one connection to the coordinator (which applies a connection's commits in
the order sent, so an older one never lands after a newer one); at most
`ASYNC_COMMITS_UNANSWERED_MAX` are unanswered, a further commit_async waits for
the oldest. commit_sync first waits for every async commit to be answered;
auto-commit commits the positions every `auto_commit_interval_ms` from poll and
once more on close. Commits from assign mode carry no member id and generation
-1 (Kafka's "simple" commits).

Subscribe: the consumer joins its group (client/membership.py) in poll; on every
rebalance it first commits (with auto-commit) and calls the listener's
on_partitions_revoked for all it held (Kafka's eager protocol), then takes the
new assignment, whose positions start from the committed offsets, and calls
on_partitions_assigned. With only cooperative assignors (cooperative-sticky,
KIP-429) it keeps its partitions through the join, and afterwards revokes only
those the leader moved away (then rejoins at once, so that their new owner gets
them in the next round) and tells on_partitions_assigned only the new ones. When the group moved on without it (evicted, fenced,
poll interval exceeded) it calls on_partitions_lost instead: no commit is tried.
With `group_protocol="consumer"` (KIP-848, client.consumer_membership) the
coordinator assigns: poll reconciles to the assignment the heartbeats brought,
revoking what left (commit with auto-commit, on_partitions_revoked) before taking
what is new (on_partitions_assigned), then acknowledges; commits carry the member
epoch. A commit refused STALE_MEMBER_EPOCH (the epoch moved on while it was sent)
is resent, with the new epoch, only by the auto-commit before a revocation, while
the consumer is a member, as Kafka's CommitRequestManager
(maybeAutoCommitSyncBeforeRevocation); commit_sync raises it, as Kafka's
commitSync throws CommitFailedException, and the member stays in the group.
Not thread-safe: one thread uses a consumer, as with Kafka's (the heartbeat
thread touches only the membership's flags).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import re
import threading
import time
from collections.abc import Iterable

from rafka.client.consumer_membership import ConsumerGroupMembership
from rafka.client.membership import CoordinatorClient, GroupMembership
from rafka.client.metadata import MetadataCache
from rafka.protocol.network import ClientNetwork, client_security
from rafka.protocol.retry import ask_leader, is_retriable, kafka_cause, retry_until, submit_to_leader
from rafka.core.config import INT, ConfigDef, at_least
from rafka.core.errors import (FencedInstanceId, FencedMemberEpoch, IllegalGeneration, IllegalStateError,
                               InvalidConfig, KafkaError, NoOffsetForPartitionError, OffsetOutOfRange,
                               RebalanceInProgress, RequestTimedOut, StaleMemberEpoch, UnknownMemberId,
                               UnknownTopicOrPartition)
from rafka.core.isolation import IsolationLevel, batches_to_skip, parse_isolation_level
from rafka.core.offset_reset import parse_auto_offset_reset
from rafka.core.records import decode_batches, iter_batches
from rafka.core.replica import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from rafka.core.structs import (ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp,
                                TopicPartition)
from rafka.protocol import fetching

logger = logging.getLogger(__name__)
_MEMBERSHIP_ERRORS = (RebalanceInProgress, IllegalGeneration, UnknownMemberId, FencedInstanceId, FencedMemberEpoch,
                      StaleMemberEpoch)
GROUP_PROTOCOLS = ("classic", "consumer")   # Kafka's group.protocol
# commit_async's bound: as many as the coordinator starts together on one
# connection (actors.coordinator.PIPELINED_REQUESTS_PER_CONNECTION), all of which
# its next append carries.
ASYNC_COMMITS_UNANSWERED_MAX = 16
CONSUMER_IN_FLIGHT_REQUESTS_PER_CONNECTION = 100
# Checked at construction (InvalidConfig), not at the first fetch: a leader
# refuses a fetch of 0 bytes (Kafka's allows it), so no poll would return a record.
MAX_POLL_RECORDS = ConfigDef("max.poll.records", INT, 500, at_least(1))
MAX_PARTITION_FETCH_BYTES = ConfigDef("max.partition.fetch.bytes", INT, 1_048_576, at_least(1))
FETCH_MIN_BYTES = ConfigDef("fetch.min.bytes", INT, 1, at_least(0))


_INLINE_FLAGS = ((re.IGNORECASE, "i"), (re.MULTILINE, "m"), (re.DOTALL, "s"), (re.VERBOSE, "x"), (re.ASCII, "a"))


def regex_source(pattern: re.Pattern) -> str:
    """The pattern as the text a coordinator compiles (SubscribedTopicRegex): its
    flags as inline ones, so a case-insensitive pattern stays one."""
    letters = "".join(letter for flag, letter in _INLINE_FLAGS if pattern.flags & flag)
    return f"(?{letters}){pattern.pattern}" if letters else pattern.pattern


class ConsumerRebalanceListener:
    """Kafka's ConsumerRebalanceListener. Called from poll, in the consumer's
    thread. By default a lost partition is reported as revoked, as Kafka's is;
    so is it to a listener without on_partitions_lost (kafka-python's has none)."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        pass

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.on_partitions_revoked(lost)


class _RecordBuffer:
    """A partition's fetched records not yet returned: the decoded batches' lists
    as they came, taken from by slices (no Python step per record on the poll path)."""

    __slots__ = ("_chunks", "_head", "_count")

    def __init__(self) -> None:
        self._chunks: collections.deque = collections.deque()
        self._head = 0          # records of the first chunk already taken
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def extend(self, records: list) -> None:
        if records:
            self._chunks.append(records)
            self._count += len(records)

    def clear(self) -> None:
        self._chunks.clear()
        self._head = self._count = 0

    def take(self, limit: int, position: int) -> list:
        """Up to `limit` records at or after offset `position`, in offset order."""
        out: list = []
        while self._chunks and len(out) < limit:
            chunk = self._chunks[0]
            start = self._head
            while start < len(chunk) and chunk[start].offset < position:   # below the position: dropped
                start += 1
            end = min(len(chunk), start + limit - len(out))
            out += chunk[start:end]
            self._count -= end - self._head
            if end == len(chunk):
                self._chunks.popleft()
                self._head = 0
            else:
                self._head = end
        return out


@dataclasses.dataclass
class _PartitionState:
    position: int | None = None          # next offset for the caller; None: needs a reset
    reset_to: str | None = None          # pending reset strategy (seek_to_beginning/end)
    fetch_position: int | None = None    # next offset to ask the leader for
    buffer: _RecordBuffer = dataclasses.field(default_factory=_RecordBuffer)
    paused: bool = False
    not_before_s: float = 0.0            # back-off after a failed fetch
    fetch_generation: int = 0            # bumped on seek/reset: answers to older fetches are stale,
                                         # as are answers to fetches sent for another state object
    high_watermark: int | None = None    # the leader's HW with the last fetch answer (for lag)
    fetched_end: int = -1                # next offset after the last batch taken in (skipped ones too)


class Consumer:
    """`bootstrap_servers`: "host:port[,host:port]" of any of the cluster's nodes
    (`cluster.bootstrap_servers`); options are kafka-python's, defaults Kafka's."""

    def __init__(self, bootstrap_servers, *, auto_offset_reset: str = "latest", max_poll_records: int = 500,
                 fetch_max_wait_ms: int = 500, fetch_min_bytes: int = 1, max_partition_fetch_bytes: int = 1_048_576,
                 retry_backoff_ms: int = 100, request_timeout_ms: int = 30_000,
                 default_api_timeout_ms: int = 60_000, client_id: str = "rafka-consumer",
                 group_id: str | None = None, enable_auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5_000, session_timeout_ms: int = 45_000,
                 heartbeat_interval_ms: int = 3_000, max_poll_interval_ms: int = 300_000,
                 partition_assignment_strategy: str | list[str] | None = None, metadata_max_age_ms: int = 300_000,
                 group_protocol: str = "classic", group_remote_assignor: str | None = None,
                 group_instance_id: str | None = None, client_rack: str | None = None,
                 isolation_level: str = "read_uncommitted",
                 security_protocol: str = "PLAINTEXT", sasl_mechanism: str | None = None,
                 sasl_plain_username: str | None = None, sasl_plain_password: str | None = None,
                 ssl_cafile: str | None = None, ssl_check_hostname: bool = True) -> None:
        self.auto_offset_reset, self._reset_duration_ms = parse_auto_offset_reset(auto_offset_reset)
        if group_protocol not in GROUP_PROTOCOLS:
            raise InvalidConfig(f"Invalid value {group_protocol} for configuration group.protocol: String must be "
                                f"one of: {', '.join(GROUP_PROTOCOLS)}")
        if group_protocol == "consumer" and partition_assignment_strategy is not None:
            raise InvalidConfig("partition.assignment.strategy cannot be set when group.protocol=consumer: the "
                                "coordinator assigns (group.remote.assignor names its assignor)")
        self.group_protocol = group_protocol
        self.isolation_level = parse_isolation_level(isolation_level)
        self.max_poll_records = MAX_POLL_RECORDS.parse(max_poll_records)
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = FETCH_MIN_BYTES.parse(fetch_min_bytes)   # each partition's fetch waits for it
        self.max_partition_fetch_bytes = MAX_PARTITION_FETCH_BYTES.parse(max_partition_fetch_bytes)
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.request_timeout_s = request_timeout_ms / 1000
        self.default_api_timeout_s = default_api_timeout_ms / 1000
        self.client_id = client_id
        # Kafka's KafkaConsumer gives its NetworkClient 100 requests in flight per
        # connection ("a fixed large enough value"): the consumer bounds what it sends
        # itself (one fetch per partition, ASYNC_COMMITS_UNANSWERED_MAX commits), and
        # the node admits 5 of a connection's requests at a time, the rest waiting in
        # its socket, so a pipelined commit starts the moment one is answered.
        security = client_security(security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password,
                                   ssl_cafile, ssl_check_hostname)
        self._network = ClientNetwork(client_id=client_id, request_timeout_ms=request_timeout_ms,
                                      max_in_flight_requests=CONSUMER_IN_FLIGHT_REQUESTS_PER_CONNECTION,
                                      sasl=security.sasl, tls=security.tls)
        self._metadata = MetadataCache(bootstrap_servers, self._network, max_wait_ms=default_api_timeout_ms,
                                       retry_backoff_ms=retry_backoff_ms)
        self._partitions: dict[TopicPartition, _PartitionState] = {}
        # Fetch answer future -> (TopicPartition, the _PartitionState it was sent for,
        # its fetch generation then, fetch offset); at most one per partition
        self._in_flight: dict = {}
        self._next_to_drain = 0
        self._closed = False
        self.group_id = group_id
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self._next_auto_commit_s = time.monotonic() + self.auto_commit_interval_s
        self._commit_completions: list = []   # (callback, offsets, exception) from the network thread
        self._completion_lock = threading.Condition()
        self._async_commits_unanswered = 0
        self._coordinator = (CoordinatorClient(self._metadata, self._network, group_id,
                                               retry_backoff_s=self.retry_backoff_s,
                                               default_timeout_s=self.default_api_timeout_s)
                             if group_id is not None else None)
        self._membership_options = dict(client_id=client_id, session_timeout_ms=session_timeout_ms,
                                        heartbeat_interval_ms=heartbeat_interval_ms,
                                        max_poll_interval_ms=max_poll_interval_ms,
                                        request_timeout_ms=request_timeout_ms,
                                        partition_assignment_strategy=partition_assignment_strategy or "range",
                                        group_instance_id=group_instance_id, partitions_of=self._partitions_of)
        self._consumer_membership_options = dict(
            max_poll_interval_ms=max_poll_interval_ms, request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms, topic_id=self._topic_id, topic_name=self._metadata.topic_name,
            group_instance_id=group_instance_id, server_assignor=group_remote_assignor, rack_id=client_rack)
        self.group_instance_id = group_instance_id
        self._membership: GroupMembership | ConsumerGroupMembership | None = None
        self._subscribed_topics: tuple[str, ...] | None = None
        self._subscribed_pattern: re.Pattern | None = None
        self._listener = ConsumerRebalanceListener()
        self.metadata_max_age_s = metadata_max_age_ms / 1000
        self._pattern_checked_s = 0.0

    # --- assignment ---------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions; positions of partitions kept stay."""
        self._check_open()
        if self._subscribed():
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive")
        self._assign(partitions)

    def _assign(self, partitions) -> None:
        wanted = [TopicPartition(*tp) for tp in partitions]
        for tp in wanted:
            count = self._metadata.partition_count(tp.topic)
            if not 0 <= tp.partition < count:
                raise UnknownTopicOrPartition(f"Partition {tp.topic}-{tp.partition} does not exist.")
        self._partitions = {tp: self._partitions.get(tp) or _PartitionState() for tp in wanted}

    def _partitions_of(self, topics) -> dict[str, int]:
        """{topic: partition count} of those that exist, asked afresh: the group
        leader assigns over them (partitions may have been added)."""
        counts = {}
        for topic in sorted(topics):
            self._metadata.invalidate(topic)
            try:
                counts[topic] = self._metadata.partition_count(topic)
            except UnknownTopicOrPartition:
                continue
        return counts

    def _topic_id(self, topic: str, fresh: bool):
        """The topic's id (None if it does not exist); `fresh`: asked again."""
        if fresh:
            self._metadata.invalidate(topic)
        try:
            return self._metadata.topic_id(topic)
        except UnknownTopicOrPartition:
            return None

    def assignment(self) -> set[TopicPartition]:
        return set(self._partitions)

    def subscribe(self, topics: Iterable[str] = (), pattern: str | re.Pattern | None = None,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        """Join the group for `topics` (or every topic matching `pattern` whole,
        internal topics excluded). Partitions come from the group's assignor in
        poll. The classic protocol matches the pattern here, against the topics
        asked again every `metadata_max_age_ms`; the consumer protocol (KIP-848)
        sends it to the coordinator (SubscribedTopicRegex), which matches it as
        topics come and go, and subscription() is then the assigned topics."""
        self._check_open()
        if self.group_id is None:
            raise IllegalStateError("subscribe needs a group_id (use assign without one)")
        topics = [topics] if isinstance(topics, str) else list(topics)
        if bool(topics) == (pattern is not None):
            raise ValueError("subscribe needs either topics or a pattern")
        if self._partitions and not self._subscribed():
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive")
        self._subscribed_pattern = re.compile(pattern) if pattern is not None else None
        # KIP-848: the coordinator resolves a pattern (SubscribedTopicRegex); the
        # topics are then those of the assignment
        regex = self.group_protocol == "consumer" and pattern is not None
        self._subscribed_topics = tuple(sorted(set(topics))) if topics else () if regex else self._matching_topics()
        self._pattern_checked_s = time.monotonic()
        self._listener = listener or ConsumerRebalanceListener()
        if self._membership is None:
            self._membership = (ConsumerGroupMembership(self._coordinator, **self._consumer_membership_options)
                                if self.group_protocol == "consumer"
                                else GroupMembership(self._coordinator, **self._membership_options))
        if regex:
            self._membership.subscribe(regex=regex_source(self._subscribed_pattern))
        elif self.group_protocol == "consumer":
            self._membership.subscribe(self._subscribed_topics)
        else:
            self._membership.request_rejoin()

    def group_metadata(self) -> ConsumerGroupMetadata:
        """Kafka's groupMetadata(): group id, generation and member id of the last
        join (-1 and "" while not a member), group.instance.id; what
        Producer.send_offsets_to_transaction takes."""
        if self.group_id is None:
            raise IllegalStateError("group_metadata needs a group_id")
        member_id, generation = self._membership.identity() if self._membership else ("", -1)
        return ConsumerGroupMetadata(self.group_id, generation, member_id, self.group_instance_id)

    def subscription(self) -> set[str]:
        return set(self._subscribed_topics or ())

    def unsubscribe(self) -> None:
        """Revoke everything (listener told), leave the group, drop the assignment."""
        if self._subscribed():
            self._revoke_all()
            self._membership.leave()
        self._subscribed_topics = self._subscribed_pattern = None
        self._partitions.clear()

    def _subscribed(self) -> bool:
        return self._subscribed_topics is not None

    def _matching_topics(self) -> tuple[str, ...]:
        topics = self._metadata.topic_names()
        return tuple(sorted(t for t in topics if self._subscribed_pattern.fullmatch(t)))

    def _ensure_membership(self) -> None:
        """In poll: rejoin when the group rebalances or the pattern's topics changed."""
        membership = self._membership
        membership.polled()
        if self._subscribed_pattern is not None and self.group_protocol == "classic" and \
                time.monotonic() - self._pattern_checked_s >= self.metadata_max_age_s:
            self._pattern_checked_s = time.monotonic()
            topics = self._matching_topics()
            if topics != self._subscribed_topics:
                self._subscribed_topics = topics
                membership.request_rejoin()
        if membership.take_lost():
            lost = set(self._partitions)
            self._partitions.clear()
            if lost:   # a listener of kafka-python's shape has no on_partitions_lost: told as revoked
                getattr(self._listener, "on_partitions_lost", self._listener.on_partitions_revoked)(lost)
        if self.group_protocol == "consumer":
            self._reconcile(membership)
            return
        if not membership.rejoin_needed():
            return
        owned = sorted(self._partitions)
        if not membership.cooperative:
            self._revoke_all()
        assigned = {TopicPartition(*tp) for tp in membership.join(list(self._subscribed_topics), owned)}
        if membership.cooperative:
            # KIP-429: keep consuming what stays; give up only what moved, then rejoin
            # at once so that its new owner gets it in the next round.
            revoked = set(owned) - assigned
            if revoked:
                self._revoke(revoked)
                membership.request_rejoin()
            added = assigned - set(owned)
        else:
            added = assigned
        self._assign(sorted(assigned))
        self._listener.on_partitions_assigned(added)

    def _reconcile(self, membership: ConsumerGroupMembership) -> None:
        """KIP-848, as Kafka's ConsumerMembershipManager: revoke what the target
        leaves out, then take what it adds, then acknowledge (the coordinator hands
        a partition to its next owner only once this member reported it gone)."""
        target = membership.take_target()
        if target is None:
            return
        assigned = {TopicPartition(*tp) for tp in target}
        owned = set(self._partitions)
        revoked = owned - assigned
        if revoked:
            self._revoke(revoked)
        self._assign(sorted(assigned))
        if self._subscribed_pattern is not None:   # the coordinator's match: the assigned topics
            self._subscribed_topics = tuple(sorted({tp.topic for tp in assigned}))
        self._listener.on_partitions_assigned(assigned - owned)   # even empty, as Kafka's
        membership.acknowledge(tuple(tp) for tp in assigned)

    def _revoke(self, revoked: set[TopicPartition]) -> None:
        """Commit what was consumed of `revoked` (with auto-commit), tell the
        listener, drop them."""
        if self.enable_auto_commit:
            try:
                self._commit_sync({tp: self._partitions[tp].position for tp in revoked
                                   if self._partitions[tp].position is not None}, None, stale_retried=True)
            except KafkaError as error:  # the next owner re-reads the uncommitted window
                logger.warning("group %s: commit before rebalance failed: %s", self.group_id, error)
        self._listener.on_partitions_revoked(revoked)
        for tp in revoked:
            del self._partitions[tp]

    def _revoke_all(self) -> None:
        """Eager protocol: before rejoining, commit what was consumed (with
        auto-commit) and give everything up."""
        if self._partitions:
            self._revoke(set(self._partitions))

    def current_lag(self, partition: TopicPartition) -> int | None:
        """Records between the position and the HW the leader last reported (Kafka's
        currentLag); None before the first fetch answer or while a reset is pending."""
        state = self._state(partition)
        if state.high_watermark is None or state.position is None:
            return None
        return max(0, state.high_watermark - state.position)

    def lag(self) -> dict[TopicPartition, int | None]:
        """current_lag of every assigned partition."""
        return {tp: self.current_lag(tp) for tp in self._partitions}

    # --- positions ----------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"seek offset must not be a negative number, got {offset!r}")
        self._move(self._state(partition), position=offset, reset_to=None)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._partitions):
            self._move(self._state(tp), position=None, reset_to="earliest")

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._partitions):
            self._move(self._state(tp), position=None, reset_to="latest")

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record poll returns (resolving a pending reset)."""
        state = self._state(partition)
        if state.position is None:
            self._reset(TopicPartition(*partition), state)
        return state.position

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {TopicPartition(*tp): self._list_offset(TopicPartition(*tp), EARLIEST_TIMESTAMP)[0]
                for tp in partitions}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The end of what this consumer may read of each partition: the HW
        (read_committed: the last stable offset)."""
        return {TopicPartition(*tp): self._list_offset(TopicPartition(*tp), LATEST_TIMESTAMP)[0]
                for tp in partitions}

    def offsets_for_times(self, timestamps: dict[TopicPartition, int]
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset below the HW whose timestamp is >= the given one (ms),
        or None when there is no such record."""
        for tp, timestamp_ms in timestamps.items():
            if not isinstance(timestamp_ms, int) or timestamp_ms < 0:
                raise ValueError(f"The target time for partition {tp.topic}-{tp.partition} is "
                                 f"{timestamp_ms}. The target time cannot be negative.")
        answers = {}
        for tp, timestamp_ms in timestamps.items():
            found = self._list_offset(TopicPartition(*tp), timestamp_ms)
            answers[TopicPartition(*tp)] = OffsetAndTimestamp(*found) if found is not None else None
        return answers

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            state = self._state(tp)
            state.paused = True
            self._move(state, position=state.position, reset_to=state.reset_to)

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._partitions.items() if s.paused}

    # --- poll ---------------------------------------------------------------------

    def poll(self, timeout: float = 0.0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned, unpaused partitions: up to `max_records`
        (default `max_poll_records`), waiting up to `timeout` seconds for the first."""
        self._check_open()
        if self._subscribed():
            self._ensure_membership()
        elif not self._partitions:
            raise IllegalStateError("Consumer is not subscribed to any topics or assigned any partitions")
        self._run_commit_callbacks()
        if self.enable_auto_commit and time.monotonic() >= self._next_auto_commit_s:
            self._next_auto_commit_s = time.monotonic() + self.auto_commit_interval_s
            self.commit_async()
        limit = max_records or self.max_poll_records
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            self._complete_ready_fetches()
            self._send_fetches()
            records = self._drain(limit)
            if records:
                self._send_fetches()  # prefetch while the caller handles these
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            if self._in_flight:
                done, _ = concurrent.futures.wait(list(self._in_flight), timeout=remaining,
                                                  return_when=concurrent.futures.FIRST_COMPLETED)
                for answer in done:
                    self._complete_fetch(answer)
            else:  # nothing can be fetched yet (backing off, all paused): wait a little
                time.sleep(min(remaining, self.retry_backoff_s))

    def _complete_ready_fetches(self) -> None:
        """Take in every fetch answer that has arrived, so that one partition's full
        buffer does not hold back the others' (Kafka's fetcher collects them all)."""
        for answer in [answer for answer in self._in_flight if answer.done()]:
            self._complete_fetch(answer)

    def _send_fetches(self) -> None:
        busy = {tp for tp, *_ in self._in_flight.values()}
        now = time.monotonic()
        for tp, state in self._partitions.items():
            if tp not in busy and state.not_before_s <= now:
                self._send_fetch(tp, state)

    def _send_fetch(self, tp: TopicPartition, state: _PartitionState) -> None:
        if state.paused or len(state.buffer) >= self.max_poll_records:
            return
        if state.position is None:
            self._reset(tp, state)
        if state.fetch_position is None:
            state.fetch_position = state.position
        try:
            answer = submit_to_leader(self._metadata, self._network, tp.topic, tp.partition,
                                      lambda leader_epoch: fetching.fetch_request(
                topic=tp.topic, partition=tp.partition, replica_id=fetching.CONSUMER_REPLICA_ID,
                fetch_offset=state.fetch_position, leader_epoch=leader_epoch,
                last_fetched_epoch=fetching.NO_EPOCH, log_start_offset=-1,
                max_bytes=self.max_partition_fetch_bytes, max_wait_ms=self.fetch_max_wait_ms,
                min_bytes=self.fetch_min_bytes, isolation_level=self.isolation_level))
        except Exception as error:
            self._fetch_failed(tp, state, error)
            return
        self._in_flight[answer] = (tp, state, state.fetch_generation, state.fetch_position)

    def _complete_fetch(self, answer) -> None:
        tp, sent_for, generation, fetch_offset = self._in_flight.pop(answer)
        state = self._partitions.get(tp)
        if state is not sent_for or state.fetch_generation != generation:
            # Stale: unassigned, sought or paused since, or assigned again by a
            # rebalance (a new state whose generation count may have reached the old
            # one's: taking the answer would skip what the old state had buffered).
            return
        try:
            result = fetching.leader_answer(answer.result(), topic=tp.topic, partition=tp.partition)
        except Exception as error:
            self._fetch_failed(tp, state, error)
            return
        state.high_watermark = result.high_watermark
        if not result.records:
            return
        *_, (_, last_header) = iter_batches(result.records, verify_crc=False)
        state.fetch_position = max(state.fetch_position or 0, last_header.next_offset)
        self._send_fetch(tp, state)  # the next round trip overlaps this decode
        skipped = batches_to_skip(result.records, isolation_level=self.isolation_level,
                                  aborted_transactions=result.aborted_transactions)

        def shape_for(header):
            return ConsumerRecord, (tp.topic, tp.partition, header.timestamp_type, header.partition_leader_epoch)
        for header, records in decode_batches(result.records, shape_for):
            if header.base_offset in skipped:   # a marker, or an aborted transaction's (read_committed)
                continue
            if records and records[0].offset < fetch_offset:   # a batch begun below the fetch offset
                records = [r for r in records if r.offset >= fetch_offset]
            if records and records[-1].offset >= result.high_watermark:
                raise AssertionError(f"{tp}: leader returned offset {records[-1].offset} at or above "
                                     f"its HW {result.high_watermark}")  # invariant 4, must not happen
            state.buffer.extend(records)
        state.fetched_end = max(state.fetched_end, last_header.next_offset)
        self._maybe_pass_skipped(state)

    @staticmethod
    def _maybe_pass_skipped(state: _PartitionState) -> None:
        """With nothing buffered, the position moves to the end of what was
        fetched: past batches that were not handed out (markers, aborted
        transactions), as Kafka's consumer moves past them."""
        if not state.buffer and state.position is not None and state.position < state.fetched_end:
            state.position = state.fetched_end

    def _fetch_failed(self, tp: TopicPartition, state: _PartitionState, error: BaseException) -> None:
        cause = kafka_cause(error)
        if isinstance(cause, OffsetOutOfRange):
            # The position (or the committed offset) fell out of the log (retention,
            # truncation): reset by auto_offset_reset, not to the committed offset again;
            # with "none" the caller gets the error, as Kafka's OffsetOutOfRangeException.
            if self.auto_offset_reset == "none":
                raise cause
            self._move(state, position=None, reset_to=self.auto_offset_reset)
            return
        if not is_retriable(error):
            raise cause if isinstance(cause, KafkaError) else error
        self._metadata.invalidate(tp.topic)
        state.not_before_s = time.monotonic() + self.retry_backoff_s

    def _drain(self, limit: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        ready = [(tp, s) for tp, s in self._partitions.items() if s.buffer and not s.paused]
        if not ready:
            return out
        start = self._next_to_drain % len(ready)
        for tp, state in ready[start:] + ready[:start]:
            taken = state.buffer.take(limit - len(out), state.position)
            if taken:
                out += taken
                state.position = taken[-1].offset + 1
            self._maybe_pass_skipped(state)
            if len(out) >= limit:
                break
        self._next_to_drain += 1
        return out

    # --- resets and offsets lookups -----------------------------------------------

    def _reset(self, tp: TopicPartition, state: _PartitionState) -> None:
        """A seek_to_* strategy if one is pending, else the group's committed offset,
        else auto_offset_reset."""
        if state.reset_to is None and self.group_id is not None:
            self._load_committed_positions()
            if state.position is not None:
                return
        strategy = state.reset_to or self.auto_offset_reset
        if strategy == "none":
            raise NoOffsetForPartitionError(f"Undefined offset with no reset policy for partitions: [{tp}]")
        if strategy == "by_duration":
            # KIP-1106: the first record at or after now - duration; none that new: the end.
            found = self._list_offset(tp, max(0, int(time.time() * 1000) - self._reset_duration_ms))
            timestamp = None if found is not None else LATEST_TIMESTAMP
        else:
            found, timestamp = None, EARLIEST_TIMESTAMP if strategy == "earliest" else LATEST_TIMESTAMP
        position = found[0] if found is not None else self._list_offset(tp, timestamp)[0]
        self._move(state, position=position, reset_to=None)

    def _load_committed_positions(self) -> None:
        """One offset fetch for every partition waiting for its committed offset (not
        one per partition); those without one are left to auto_offset_reset."""
        waiting = [tp for tp, s in self._partitions.items() if s.position is None and s.reset_to is None]
        for tp, committed in self.committed(waiting).items():
            if committed is not None:
                self._move(self._partitions[tp], position=committed.offset, reset_to=None)
            else:
                self._move(self._partitions[tp], position=None, reset_to=self.auto_offset_reset)

    def _list_offset(self, tp: TopicPartition, timestamp_ms: int):
        self._check_open()
        return ask_leader(
            self._metadata, self._network, tp.topic, tp.partition,
            lambda leader_epoch: fetching.list_offset_request(
                topic=tp.topic, partition=tp.partition, replica_id=fetching.CONSUMER_REPLICA_ID,
                leader_epoch=leader_epoch, timestamp_ms=timestamp_ms, isolation_level=self.isolation_level),
            lambda response: fetching.list_offset_answer(response, topic=tp.topic, partition=tp.partition),
            timeout_s=self.default_api_timeout_s, retry_backoff_s=self.retry_backoff_s)

    @staticmethod
    def _move(state: _PartitionState, *, position: int | None, reset_to: str | None) -> None:
        state.position, state.reset_to = position, reset_to
        state.fetch_position = None
        state.fetched_end = -1
        state.buffer.clear()
        state.fetch_generation += 1

    def _state(self, partition) -> _PartitionState:
        state = self._partitions.get(TopicPartition(*partition))
        if state is None:
            raise IllegalStateError(f"No current assignment for partition {partition[0]}-{partition[1]}")
        return state

    # --- committed offsets ----------------------------------------------------------

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (the next offset to read), None where none.
        read_committed: stable offsets only (KIP-447's require_stable, as Kafka's
        consumer asks): while a transaction's offset for a partition is pending
        this waits (retries UNSTABLE_OFFSET_COMMIT) until the transaction ends, so a
        new owner never starts below what an open transaction may still commit."""
        tps = [TopicPartition(*tp) for tp in partitions]
        fetched = self._group().call("fetch_offsets", [tuple(tp) for tp in tps],
                                     require_stable=self.isolation_level is IsolationLevel.READ_COMMITTED)
        answers = {}
        for tp in tps:
            found = fetched.get(tuple(tp))   # (offset, leader epoch, metadata) or None
            answers[tp] = OffsetAndMetadata(found[0], found[2], found[1]) if found else None
        return answers

    def commit_sync(self, offsets: dict | None = None, timeout: float | None = None) -> None:
        """Commits `offsets` ({tp: offset or OffsetAndMetadata}), default the current
        positions; retries retriable errors until `timeout` (default_api_timeout_ms).
        Earlier async commits finish first (their callbacks run before it returns),
        so none of them can land after this one. KIP-848: STALE_MEMBER_EPOCH is
        raised, not retried (Kafka's commitSync)."""
        self._commit_sync(offsets, timeout, stale_retried=False)

    def _commit_sync(self, offsets: dict | None, timeout: float | None, *, stale_retried: bool) -> None:
        """commit_sync; `stale_retried`: STALE_MEMBER_EPOCH retried with the member's
        latest epoch while it is a member (Kafka's auto-commit before revocation)."""
        self._wait_for_async_commits(timeout)
        self._run_commit_callbacks()
        request = self._commit_request(offsets)
        if not request:
            return
        group = self._group()

        def stale_while_member(error: BaseException) -> bool:
            # KIP-848: the member's epoch moved on while the commit was sent
            return stale_retried and isinstance(kafka_cause(error), StaleMemberEpoch) and self._identity()[1] > 0
        try:
            # the identity read at each attempt: a retry after STALE_MEMBER_EPOCH carries the new epoch
            response = retry_until(
                lambda remaining_s: group.submit("commit_offsets", request, *self._identity()).result(
                    timeout=remaining_s),
                timeout_s=self.default_api_timeout_s if timeout is None else timeout,
                retry_backoff_s=self.retry_backoff_s, what=f"commit_offsets for group {self.group_id!r}",
                retriable=lambda error: is_retriable(error) or stale_while_member(error),
                on_retry=lambda error: None if stale_while_member(error) else group.invalidate())
        except StaleMemberEpoch:   # the epoch moved on, or no longer a member: not a reason to rejoin
            raise
        except _MEMBERSHIP_ERRORS as error:   # Kafka's CommitFailedException: rejoin
            self._membership.commit_failed(error)
            raise
        self._raise_partition_error(response)

    def commit_async(self, offsets: dict | None = None, callback=None) -> None:
        """One attempt, never retried; `callback(offsets, exception)` runs in a later
        poll / commit / close. Sent at once, in call order, on the connection to the
        coordinator (whose commits take effect in the order sent); waits only while
        `ASYNC_COMMITS_UNANSWERED_MAX` earlier ones are unanswered."""
        request = self._commit_request(offsets)
        if not request:
            return
        with self._completion_lock:
            while self._async_commits_unanswered >= ASYNC_COMMITS_UNANSWERED_MAX:
                self._completion_lock.wait()
            self._async_commits_unanswered += 1
        try:
            answer = self._group().submit("commit_offsets", request, *self._identity())
        except Exception as error:
            self._async_commit_done(callback, request, error)
            return

        def done(future) -> None:   # on the network's thread
            try:
                self._raise_partition_error(future.result())
                error = None
            except Exception as failure:
                error = kafka_cause(failure)
            self._async_commit_done(callback, request, error)
        answer.add_done_callback(done)

    def _async_commit_done(self, callback, request: dict, error) -> None:
        self._complete_commit(callback, request, error)
        with self._completion_lock:
            self._async_commits_unanswered -= 1
            self._completion_lock.notify_all()

    def _wait_for_async_commits(self, timeout: float | None) -> None:
        deadline = time.monotonic() + (self.default_api_timeout_s if timeout is None else timeout)
        with self._completion_lock:
            while self._async_commits_unanswered:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RequestTimedOut("async commits still in flight at the commit_sync timeout")
                self._completion_lock.wait(timeout=remaining)

    def _complete_commit(self, callback, request: dict, error) -> None:
        if callback is not None:
            with self._completion_lock:
                self._commit_completions.append((callback, request, error))

    def _run_commit_callbacks(self) -> None:
        with self._completion_lock:
            completions, self._commit_completions = self._commit_completions, []
        for callback, request, error in completions:
            callback({TopicPartition(*tp): OffsetAndMetadata(o, m, e) for tp, (o, e, m) in request.items()}, error)

    def _commit_request(self, offsets: dict | None) -> dict:
        if self.group_id is None:
            raise IllegalStateError("commits need a group_id")
        if offsets is None:
            offsets = {tp: s.position for tp, s in self._partitions.items() if s.position is not None}
        request = {}
        for tp, value in offsets.items():
            committed = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
            request[tuple(tp)] = (committed.offset, committed.leader_epoch, committed.metadata)
        return request

    @staticmethod
    def _raise_partition_error(response: dict) -> None:
        for error in response.values():
            if error is not None:
                raise error

    def _group(self) -> CoordinatorClient:
        if self._coordinator is None:
            raise IllegalStateError("committed offsets need a group_id")
        return self._coordinator

    def _identity(self) -> tuple[str, int, str | None]:
        """(member id, generation, group.instance.id) for a commit: ("", -1, None)
        outside the group protocol."""
        if not self._subscribed():
            return "", -1, None
        return (*self._membership.identity(), self.group_instance_id)

    # --- lifecycle ----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("This consumer has already been closed.")

    def close(self, *, leave_group: bool | None = None) -> None:
        """Commit (auto-commit), revoke and leave. `leave_group`: whether to send
        LeaveGroup; by default a dynamic member does and a static one
        (group_instance_id) does not, as Kafka's consumer (Kafka 4's CloseOptions)."""
        if self._closed:
            return
        try:
            if self._subscribed():
                if self._identity()[1] >= 0:   # a member: commit (auto-commit) and revoke, as Kafka
                    self._revoke_all()
            elif self.enable_auto_commit:
                self.commit_sync()
            if self.group_id is not None:
                self._wait_for_async_commits(self.request_timeout_s)
            self._run_commit_callbacks()
        finally:
            if self._membership is not None:
                self._membership.close(leave_group=leave_group)
        self._closed = True
        self._in_flight.clear()
        self._partitions.clear()
        self._network.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

