"""The decisions of the group coordinator of one `__consumer_offsets` partition
(Kafka's GroupCoordinatorShard): offset commits and fetches, membership, member
expiry and offsets retention, over an injected acks=all append. No Ray.

Ordering, the design: one asyncio lock per group, held by a request from its
validation until its records are queued (commits) or written and replayed
(everything else). Every request of a group takes it (commit, join, sync,
heartbeat, leave, delete, and the ticker's member expiry and retention), and the
writes go out in the order they were queued (core.write_queue: one append in
flight, batched), so each request is decided on the state the ones before it
left, and a record is replayed over exactly the state it was decided on. Without
it, a join admitted while a group record was being written was wiped out when that
record replayed over the group, and a retention decision taken while a commit was
in flight wrote a tombstone that deleted the commit once acked (and again at every
reload, the tombstone following it in the log). A JoinGroup holds the lock only to
register and to try to complete its generation, never while it is parked; a
follower's SyncGroup likewise only to register and to look for the leader's
assignment, which the leader's sync writes (and replays) under the lock.
Reads (fetch offsets, describe, list) take no lock: the cache changes only by
replaying acked records, so they never see an unacked commit.

Commits release the lock once queued: a commit decides nothing any later request
of the group depends on but the offsets themselves, and the decisions that read
offsets (delete, delete offsets, retention) first wait for every queued write to
be answered (`WriteQueue.settled`). So a group's commits, like Kafka's, are in
flight together (the next one from a member's connection starts as soon as this
one is queued: `on_queued`), and go out batched behind the append in flight.

Why a lock, not Kafka's CoordinatorRuntime (apply records at once to timeline data
structures, answer once committed, revert to a snapshot when a write fails): that
needs every structure here to be snapshotable and every read to be made at the
committed offset; the lock needs neither, and keeps "the cache is what replaying
the log gives" (loading is the same replay). The cost, as with the group lock that
Kafka's classic coordinator holds around its appends: a group's membership
requests wait behind its membership write in flight (each at most
offsets.commit.timeout.ms). Other groups never wait for this lock.

Invariants:
  the records of one group are appended and replayed in one order, each decided on
  the state every earlier one left (a decision that reads offsets: on the state
  every earlier write left once answered); a failed append replays nothing
  the cache is what replaying the partition's acked records gives, plus the
  transient membership of rebalances in progress (core.group_manager)
  a retention tombstone is decided and written under its group's lock, after every
  earlier write was answered, so it never deletes a commit acked after its
  decision (KIP-211 expiry)
  a group's lock is held only in validation, queueing, append and replay, never
  by a parked join; at most `max_queued_requests_per_group` requests wait for it,
  more are refused COORDINATOR_NOT_AVAILABLE (retriable)
Transactions (KIP-98, KIP-447): a TxnOffsetCommit is decided like a commit
(membership checked as Kafka checks a transactional one) and written as its own
transactional batch with the producer's id and epoch, so the partition's leader
fences a zombie's (older epoch) and the transaction's marker closes it; its
offsets stay pending (core.offset_store) until the marker. Before it is decided,
a producer's first TxnOffsetCommit of a transaction here is verified with the
transaction coordinator (KIP-890, Kafka's CoordinatorRuntime
.scheduleTransactionalWriteOperation): outside every lock and the write queue, so
a verification that waits or fails holds no other write; it is queued only if no
marker of that producer was queued meanwhile (the verification guard: the
transaction it verified may have ended). The marker comes here
(`complete_transaction`: Kafka's coordinator writes the __consumer_offsets
markers itself, KafkaApis.handleWriteTxnMarkersRequest), is queued behind the
writes before it and replayed once acked; loading replays the markers in the
log the same way (`replay_marker`).
Consumer groups of the new protocol (KIP-848, core.consumer_group) share the
partition, the lock, the write queue and the replay: a ConsumerGroupHeartbeat is
decided under its group's lock on the state the writes before it left, written,
then replayed. A group id is either kind: a heartbeat on an empty classic group
takes the id over (the classic group's tombstone written first), as a JoinGroup
does on an empty consumer group (its tombstones), as Kafka's
maybeDeleteEmpty{Classic,Consumer}Group; with members the other kind is refused
(GROUP_ID_NOT_FOUND, INCONSISTENT_GROUP_PROTOCOL: rafka has no mixed groups).
Pure logic over asyncio; the clock, the append and the topic metadata are passed
in. Caller: the group coordinator actor (rafka/actors/coordinator.py), which loads
its partition through `replay` before it serves a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from rafka.core import consumer_group_records
from rafka.core.consumer_group import ConsumerGroups, HeartbeatAnswer
from rafka.core.errors import (CoordinatorNotAvailable, FencedInstanceId, GroupIdNotFound, GroupSubscribedToTopic,
                               IllegalGeneration, InconsistentGroupProtocol, InvalidTxnState, KafkaError, NonEmptyGroup,
                               RebalanceInProgress, UnknownMemberId, UnknownTopicOrPartition, UnstableOffsetCommit,
                               coordinator_append_error)
from rafka.core.group_manager import GroupManager
from rafka.core.group_state import GroupState, validate_offset_commit
from rafka.core.offset_store import BY_COMMIT, OffsetCommit, OffsetStore, Record, Retention
from rafka.core.offsets_schema import GroupKey, OffsetKey
from rafka.core.producer_state import MAX_VERIFICATION_GUARDS
from rafka.core.records import NO_PRODUCER_ID
from rafka.core.write_queue import Append, TransactionalBatch, TxnMarkerWrite, WriteKind, WriteQueue

logger = logging.getLogger(__name__)
# {topic: partition count} of the given topics that exist
PartitionsPerTopic = Callable[[set[str]], Awaitable[dict[str, int]]]
# {topic: (topic id, partition count)} of the given topics that exist (None: of every topic)
TopicMetadataSource = Callable[[set[str] | None], Awaitable[dict]]
# KIP-890: the transaction coordinator's answer whether (transactional id, producer
# id, producer epoch)'s transaction holds this partition: None, or its error as the
# coordinator gave it (TRANSACTION_ABORTABLE, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS,
# NETWORK_EXCEPTION when it could not be asked, ...); never raises
VerifyTransaction = Callable[[str, int, int], Awaitable[KafkaError | None]]


@dataclasses.dataclass
class _GroupLock:
    lock: asyncio.Lock
    users: int = 0     # holding or waiting


class GroupLocks:
    """One lock per group, dropped once nobody holds or waits for it (a partition
    can hold many groups, most of them idle)."""

    def __init__(self, *, max_queued_requests_per_group: int) -> None:
        self.max_queued_requests_per_group = max_queued_requests_per_group
        self._by_group: dict[str, _GroupLock] = {}

    @contextlib.asynccontextmanager
    async def hold(self, group: str):
        entry = self._by_group.get(group)
        if entry is None:
            entry = self._by_group[group] = _GroupLock(asyncio.Lock())
        if entry.users >= self.max_queued_requests_per_group:
            raise CoordinatorNotAvailable(f"group {group!r} has {entry.users} requests queued, the most the "
                                          f"coordinator keeps: retry")
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._by_group[group]

    def held(self, group: str) -> bool:
        entry = self._by_group.get(group)
        return entry is not None and entry.lock.locked()


class CoordinatorShard:
    # max_queued_requests_per_group: room for a join, a heartbeat and a commit from
    # each of group.max.size (1000) members, queued behind one write.
    def __init__(self, *, offsets: OffsetStore, groups: GroupManager, clock, append: Append,
                 partitions_per_topic: PartitionsPerTopic, offsets_retention_check_interval_ms: int = 600_000,
                 join_poll_interval_ms: int = 100, max_queued_requests_per_group: int = 4_000,
                 consumer_groups: ConsumerGroups | None = None,
                 topic_metadata: TopicMetadataSource | None = None,
                 verify_transaction: VerifyTransaction | None = None) -> None:
        """`consumer_groups`, `topic_metadata`: the new protocol's groups and where
        their subscribed topics' ids and partition counts come from (without
        them, a ConsumerGroupHeartbeat finds no topic). `verify_transaction`: the
        question to the transaction coordinator before a TxnOffsetCommit (without
        it every transaction is taken as verified: a test's shard)."""
        self.offsets = offsets
        self.groups = groups
        self.consumer_groups = consumer_groups or ConsumerGroups()
        self._topic_metadata = topic_metadata or _no_topics
        self.clock = clock
        self._partitions_per_topic = partitions_per_topic
        self.offsets_retention_check_interval_ms = offsets_retention_check_interval_ms
        self._next_retention_check_ms = 0
        self.join_poll_interval_ms = join_poll_interval_ms
        self.locks = GroupLocks(max_queued_requests_per_group=max_queued_requests_per_group)
        self._writes = WriteQueue(append, self._replay_write)
        self._verify_transaction = verify_transaction
        self._verification_guards: dict[int, object] = {}   # producer id -> its guard (oldest first)
        self._changed = asyncio.Event()
        self.offset_commits = 0   # partitions' offsets committed and acked (Kafka's offset-commit-count)

    # --- the one way the cache changes ----------------------------------------------

    def replay(self, key, value, *, producer_id: int = NO_PRODUCER_ID) -> None:
        """One record of the partition: when loading, and once an append is acked.
        `producer_id`: of its batch if that is transactional."""
        if type(key) in consumer_group_records.KEY_VERSIONS:
            self.consumer_groups.replay(key, value, self.clock.now_ms())
            return
        self.offsets.replay(key, value, producer_id=producer_id)
        self.groups.replay(key, value, self.clock.now_ms())

    def replay_marker(self, producer_id: int, *, commit: bool) -> None:
        """A transaction marker of the partition: when loading, and once written."""
        self.offsets.replay_marker(producer_id, commit=commit)

    def _replay_write(self, records: list[Record], kind: WriteKind) -> None:
        if isinstance(kind, TxnMarkerWrite):
            self.replay_marker(kind.producer_id, commit=kind.commit)
            return
        producer_id = kind.producer_id if isinstance(kind, TransactionalBatch) else NO_PRODUCER_ID
        for key, value in records:
            self.replay(key, value, producer_id=producer_id)

    async def _write(self, records: list[Record]) -> None:
        """Append, then replay (in the write queue's order). The caller holds the lock
        of every group the records name, so nothing of theirs changes between the
        decision and the replay."""
        if not records:
            return
        try:
            await _appended(self._writes.submit(records))
        except asyncio.CancelledError:
            # The caller went away, the write goes on: the group's lock stays held
            # until it is answered, so no later request decides before its replay.
            await self._writes.settled()
            raise

    def _notify(self) -> None:
        """Wakes parked joins: a group they wait on may have moved."""
        self._changed.set()
        self._changed = asyncio.Event()

    # --- offsets ----------------------------------------------------------------------

    async def commit_offsets(self, group: str, offsets: dict, member_id: str = "", generation: int = -1,
                             group_instance_id: str | None = None, *,
                             on_queued: Callable[[], None] | None = None) -> dict:
        """offsets: {(topic, partition): (offset, leader_epoch, metadata)}. Returns
        {(topic, partition): None or the partition's error}, once written.
        `on_queued()` runs once the commit is decided and its records queued in log
        order (the server then starts the connection's next request).
        A partition of a topic that does not exist, or past its topic's last, gets
        UNKNOWN_TOPIC_OR_PARTITION and is not written; when no partition is known,
        nothing else is checked (KafkaApis.handleOffsetCommitRequest drops them
        before the coordinator sees the request). A commit accepted from a member
        refreshes its session, as a heartbeat would (GroupManager.commit_keeps_session)."""
        offsets, unknown = await self._split_unknown(offsets, on_queued)
        if not offsets:
            return unknown
        async with self.locks.hold(group):
            self._validate_commit(group, member_id, generation, group_instance_id, transactional=False)
            self.groups.commit_keeps_session(group, member_id, self.clock.now_ms())
            commits = {tuple(tp): OffsetCommit(*value) for tp, value in offsets.items()}
            result = self.offsets.handle_commit(group, commits, self.clock.now_ms())
            written = self._writes.submit(result.records) if result.records else None
        if on_queued is not None:
            on_queued()
        if written is not None:
            await _appended(written)
            self.offset_commits += len(result.records)
        return {**result.response, **unknown}

    async def _split_unknown(self, offsets: dict,
                             on_queued: Callable[[], None] | None) -> tuple[dict, dict]:
        """(the offsets of partitions that exist, {(topic, partition):
        UNKNOWN_TOPIC_OR_PARTITION} for the rest): a commit writes only the first.
        With none known, nothing will be queued: `on_queued()` runs here."""
        counts = await self._partitions_per_topic({topic for topic, _ in offsets})
        unknown = {tp: UnknownTopicOrPartition(f"{tp[0]}-{tp[1]}: this topic or partition does not exist")
                   for tp in offsets if not 0 <= tp[1] < counts.get(tp[0], 0)}
        known = {tp: value for tp, value in offsets.items() if tp not in unknown}
        if not known and on_queued is not None:
            on_queued()
        return known, unknown

    def _validate_commit(self, group: str, member_id: str, generation: int, group_instance_id: str | None, *,
                         transactional: bool) -> None:
        """A consumer group's commit names its member's epoch as the generation
        (core.consumer_group); a classic group's, its generation. A transactional
        commit to a group unknown here must name no generation (a simple group's)."""
        if group in self.consumer_groups.groups:
            self.consumer_groups.validate_offset_commit(group, member_id, generation)
            return
        known = self.groups.groups.get(group)
        if transactional and known is None and generation >= 0:
            raise IllegalGeneration(f"group {group} is unknown here: generation {generation} is not its")
        validate_offset_commit(state=known.state if known else GroupState.EMPTY,
                               generation=known.generation if known else -1,
                               members=set(known.members) if known else set(),
                               member_id=member_id, commit_generation=generation,
                               group_instance_id=group_instance_id,
                               static_members=known.static_members if known else {}, transactional=transactional)

    async def commit_transactional_offsets(self, group: str, offsets: dict, *, transactional_id: str,
                                           producer_id: int, producer_epoch: int, member_id: str = "",
                                           generation: int = -1,
                                           group_instance_id: str | None = None,
                                           on_queued: Callable[[], None] | None = None) -> dict:
        """Kafka's TxnOffsetCommit: offsets as commit_offsets', written as one
        transactional batch of the producer (its epoch fenced by the partition's
        leader: INVALID_PRODUCER_EPOCH) and pending until the transaction's marker.
        A producer's first commit of a transaction here is decided only once the
        transaction coordinator says its transaction holds this partition
        (`_verified`): one arriving after its transaction ended is refused with
        the coordinator's answer (TRANSACTION_ABORTABLE, which the handler turns
        into INVALID_TXN_STATE below TxnOffsetCommit v4) and leaves nothing
        pending.
        A group unknown here takes a commit naming no generation (a simple
        group's), else ILLEGAL_GENERATION (Kafka's validateTransactionalOffsetCommit);
        a known one checks membership as Kafka's transactional commit does (no
        state rule for a commit naming no member, none while completing a rebalance).
        {(topic, partition): None or the partition's error}, once written."""
        offsets, unknown = await self._split_unknown(offsets, on_queued)
        if not offsets:
            return unknown
        guard = await self._verified(transactional_id, producer_id, producer_epoch)
        async with self.locks.hold(group):
            if guard is not None and self._verification_guards.get(producer_id) is not guard:
                raise InvalidTxnState(f"producer {producer_id}: its transaction ended while it was verified")
            self._validate_commit(group, member_id, generation, group_instance_id, transactional=True)
            commits = {tuple(tp): OffsetCommit(*value) for tp, value in offsets.items()}
            result = self.offsets.handle_commit(group, commits, self.clock.now_ms())
            written = self._writes.submit(result.records, TransactionalBatch(producer_id, producer_epoch)) \
                if result.records else None
        if on_queued is not None:
            on_queued()
        if written is not None:
            await _appended(written)
        return {**result.response, **unknown}

    async def _verified(self, transactional_id: str, producer_id: int, producer_epoch: int) -> object | None:
        """The producer's verification guard, which its commit must still hold when
        it is queued (a marker of the producer queued meanwhile drops it: the
        transaction it was verified for may be the one that marker ends). The
        transaction coordinator is asked whether the transaction holds this
        partition (its answer raised when not) unless the transaction is open
        here: offsets of it pending, and no marker of the producer unanswered.
        A guard is kept until the producer's next marker is queued; at most
        MAX_VERIFICATION_GUARDS (the oldest goes, and a commit holding it is
        refused). None without a `verify_transaction` (a test's shard)."""
        if self._verify_transaction is None:
            return None
        guards = self._verification_guards
        guard = guards.get(producer_id)
        if guard is None:
            if len(guards) >= MAX_VERIFICATION_GUARDS:
                del guards[next(iter(guards))]
            guard = guards[producer_id] = object()
        if producer_id in self.offsets.pending_by_producer and not self._writes.marker_unanswered(producer_id):
            return guard
        error = await self._verify_transaction(transactional_id, producer_id, producer_epoch)
        if error is not None:
            raise error
        return guard

    async def complete_transaction(self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                                   commit: bool) -> None:
        """Writes a transaction's marker to the partition (the transaction
        coordinator's WriteTxnMarkers for it), behind every write queued before,
        and replays it once acked: the producer's pending offsets become visible
        (COMMIT) or are dropped (ABORT). The partition's leader checks the epochs
        (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED). A verification of
        the producer under way loses its guard: what it verified may be what this
        marker ends."""
        self._verification_guards.pop(producer_id, None)
        await self._writes.submit([], TxnMarkerWrite(producer_id, producer_epoch, coordinator_epoch, commit))

    def fetch_offsets(self, group: str, partitions: list | None = None, *, require_stable: bool = False) -> dict:
        """{(topic, partition): (offset, leader_epoch, metadata) or None}; with
        `require_stable` (KIP-447), a partition whose transactional offset is
        pending gets UNSTABLE_OFFSET_COMMIT (retriable) instead."""
        fetched = self.offsets.fetch(group, partitions)
        pending = self.offsets.pending_partitions(group) if require_stable else set()
        return {tp: UnstableOffsetCommit(f"{tp[0]}-{tp[1]}: group {group} has a transactional offset pending")
                if tp in pending else (v.offset, v.leader_epoch, v.metadata) if v is not None else None
                for tp, v in fetched.items()}

    # --- membership -------------------------------------------------------------------

    async def join_group(self, group: str, member_id: str, *, group_instance_id: str | None = None,
                         client_id: str, client_host: str, protocol_type: str, protocols: list,
                         session_timeout_ms: int, rebalance_timeout_ms: int,
                         skip_assignment_supported: bool = False, reason: str | None = None) -> dict:
        """Kafka's JoinGroup: parks until this join's generation completes (or answers
        at once: a known member rejoining unchanged, a static member replacing its old
        id in a Stable group). {member_id, generation, protocol_type, protocol_name,
        leader, members, skip_assignment}: members, for the leader only, are (member
        id, instance id, metadata) of every member. The assignment comes from
        sync_group. `skip_assignment_supported`: JoinGroup v9+ (KIP-814); `reason`
        (v8+, KIP-800) is logged, as Kafka's coordinator only logs it."""
        if reason:   # Java clients give one with every join: kept short, at debug
            logger.debug("group %s: member %r (instance %s) joins: %.200s", group, member_id, group_instance_id,
                         reason)
        async with self.locks.hold(group):
            await self._write(self._take_over_consumer_group(group))
            result = self.groups.join(group, member_id, group_instance_id=group_instance_id, client_id=client_id,
                                      client_host=client_host, protocol_type=protocol_type,
                                      protocols=[(name, bytes(data)) for name, data in protocols],
                                      session_timeout_ms=session_timeout_ms,
                                      rebalance_timeout_ms=rebalance_timeout_ms, now_ms=self.clock.now_ms(),
                                      skip_assignment_supported=skip_assignment_supported)
            await self._write(result.records)
            member_id = result.member_id
            generation_at_join = self.groups.groups[group].generation
        self._notify()
        if result.answer is not None:
            return dataclasses.asdict(result.answer)
        while True:
            async with self.locks.hold(group):
                state = self.groups.groups.get(group)
                self._check_still_member(state, group, member_id, group_instance_id)
                if state.generation > generation_at_join:
                    return dataclasses.asdict(self.groups.join_answer(group, member_id))
                now_ms = self.clock.now_ms()
                # A member parked in its join is alive: it is waiting on us, not silent.
                state.members[member_id].last_heartbeat_ms = now_ms
                completed, records = self.groups.maybe_complete_join(group, now_ms)
                await self._write(records)
            if completed:
                self._notify()
                continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=self.join_poll_interval_ms / 1000)

    def _take_over_consumer_group(self, group: str) -> list[Record]:
        """A JoinGroup for the id of a consumer group (KIP-848): an empty one is
        deleted (its tombstones) for the classic group to be made; one with members
        refuses (Kafka would run the classic member inside it: rafka has no mixed groups)."""
        known = self.consumer_groups.groups.get(group)
        if known is None:
            return []
        if known.members:
            raise InconsistentGroupProtocol(f"group {group} is a consumer group (KIP-848) with members: join it "
                                            f"with ConsumerGroupHeartbeat")
        return self.consumer_groups.tombstones(group)

    async def consumer_group_heartbeat(self, group: str, *, member_id: str, member_epoch: int,
                                       instance_id: str | None = None, rack_id: str | None = None,
                                       rebalance_timeout_ms: int = -1, client_id: str = "", client_host: str = "",
                                       subscribed_topic_names: list[str] | None = None,
                                       subscribed_topic_regex: str | None = None, server_assignor: str | None = None,
                                       owned: tuple | None = None) -> HeartbeatAnswer:
        """Kafka's ConsumerGroupHeartbeat (core.consumer_group decides), answered
        once its records are written and replayed. `owned`: ((topic id,
        (partition, ...)), ...), or None when unchanged. An empty classic group of
        the id is taken over by a joining member; one with members: GROUP_ID_NOT_FOUND."""
        async with self.locks.hold(group):
            records: list[Record] = []
            classic = self.groups.groups.get(group)
            if classic is not None:
                if classic.members or member_epoch != 0:
                    raise GroupIdNotFound(f"Group {group} is not a consumer group.")
                records.append((GroupKey(group), None))
            known = self.consumer_groups.groups.get(group)
            known_names = known.subscribed_topic_names() if known else set()
            topics = await self._topic_metadata(   # every topic, for a regex to match
                None if subscribed_topic_regex or known_names is None else set(subscribed_topic_names or ()) | known_names)
            decided, answer = self.consumer_groups.heartbeat(
                group, member_id=member_id, member_epoch=member_epoch, instance_id=instance_id, rack_id=rack_id,
                rebalance_timeout_ms=rebalance_timeout_ms, client_id=client_id, client_host=client_host,
                subscribed_topic_names=subscribed_topic_names, subscribed_topic_regex=subscribed_topic_regex,
                server_assignor=server_assignor, owned=owned, topics=topics, now_ms=self.clock.now_ms())
            await self._write(records + decided)
        return answer

    def consumer_group_describe(self, group: str) -> dict:
        """Kafka's ConsumerGroupDescribe of one group: {group, state, group_epoch,
        assignment_epoch, assignor, members: [{member_id, instance_id, rack_id,
        member_epoch, client_id, client_host, subscribed_topic_names, assigned,
        target}]}, assignments as {topic id: [partitions]}; GROUP_ID_NOT_FOUND for
        an id that is no consumer group."""
        known = self.consumer_groups.groups.get(group)
        if known is None:
            raise GroupIdNotFound(f"Group {group} not found.")
        return self.consumer_groups.describe(group)

    @staticmethod
    def _check_still_member(state, group: str, member_id: str, group_instance_id: str | None) -> None:
        """A parked join or sync whose member was replaced (FENCED_INSTANCE_ID) or
        removed (UNKNOWN_MEMBER_ID) meanwhile."""
        if state is not None and member_id in state.members:
            return
        if state is not None and group_instance_id is not None and group_instance_id in state.static_members:
            raise FencedInstanceId(f"member {member_id!r} of group.instance.id {group_instance_id!r} was replaced")
        raise UnknownMemberId(f"member {member_id!r} was removed from group {group} while it waited")

    async def sync_group(self, group: str, member_id: str, generation: int, *, group_instance_id: str | None = None,
                         protocol_type: str | None = None, protocol_name: str | None = None,
                         assignments: dict | None = None) -> dict:
        """Kafka's SyncGroup: {protocol_type, protocol_name, assignment} (the member's
        bytes). The leader's assignments are written with the group (acked once
        replicated); a follower's sync waits for them, at most twice the group's
        rebalance timeout (the leader is removed once it has not synced for one,
        which rebalances the group and answers REBALANCE_IN_PROGRESS here). A
        failed write of the leader's answers its error (as `_appended` maps it) and
        starts a rebalance: the followers' syncs answer REBALANCE_IN_PROGRESS."""
        async with self.locks.hold(group):
            now_ms = self.clock.now_ms()
            records, assignment = self.groups.sync(group, member_id, generation, group_instance_id=group_instance_id,
                                                   protocol_type=protocol_type, protocol_name=protocol_name,
                                                   assignments=assignments, now_ms=now_ms)
            try:
                await self._write(records)
            except (Exception, asyncio.CancelledError):
                if records:   # Kafka's resetAndPropagateAssignmentWithError: the waiting syncs end too
                    self.groups.sync_write_failed(group, generation, self.clock.now_ms())
                    self._notify()
                raise
            if records:
                assignment = self.groups.sync_outcome(group, member_id, generation, group_instance_id)
            give_up_ms = now_ms + 2 * self.groups.groups[group].rebalance_timeout_ms()
        if records:
            self._notify()   # the group is Stable: the followers' syncs answer
        while assignment is None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=self.join_poll_interval_ms / 1000)
            async with self.locks.hold(group):
                state = self.groups.groups.get(group)
                self._check_still_member(state, group, member_id, group_instance_id)
                assignment = self.groups.sync_outcome(group, member_id, generation, group_instance_id)
                if assignment is None and self.clock.now_ms() >= give_up_ms:
                    raise RebalanceInProgress(f"group {group}: the leader's assignment did not come: rejoin")
        state = self.groups.groups[group]
        return {"protocol_type": state.protocol_type, "protocol_name": state.protocol_name,
                "assignment": assignment}

    async def heartbeat(self, group: str, member_id: str, generation: int,
                        group_instance_id: str | None = None) -> None:
        async with self.locks.hold(group):
            self.groups.heartbeat(group, member_id, generation, group_instance_id=group_instance_id,
                                  now_ms=self.clock.now_ms())

    async def leave_group(self, group: str, members: list) -> list:
        """Kafka's LeaveGroup for [(member id, instance id)]: each one's error or
        None (a value); the group's own error (unknown group, Dead) raises."""
        async with self.locks.hold(group):
            records, errors = self.groups.leave(group, [tuple(m) for m in members], self.clock.now_ms())
            await self._write(records)
        self._notify()
        return errors

    def describe_group(self, group: str) -> dict:
        """State, generation, leader, protocol type and protocol, and members (client,
        host, instance id, metadata for the group's protocol, assignment: bytes as the
        members sent them). A group known only by its offsets (assign-mode commits) is
        Empty; an unknown one is Dead, as Kafka's DescribeGroups answers."""
        state = self.groups.groups.get(group)
        if state is None and group in self.consumer_groups.groups:   # Kafka: not a classic group
            return {"group": group, "state": "Dead", "generation": -1, "leader": None, "protocol_type": "",
                    "protocol": None, "members": {}}
        if state is None:
            known = bool(self.offsets.fetch(group))
            return {"group": group, "state": "Empty" if known else "Dead", "generation": -1 if not known else 0,
                    "leader": None, "protocol_type": "", "protocol": None, "members": {}}
        return {"group": group, "state": state.state.value, "generation": state.generation,
                "leader": state.leader, "protocol_type": state.protocol_type or "", "protocol": state.protocol_name,
                "members": {m.member_id: {"client_id": m.client_id, "host": m.client_host,
                                          "group_instance_id": m.group_instance_id,
                                          "metadata": m.metadata(state.protocol_name), "assignment": m.assignment}
                            for m in state.members.values()}}

    def list_groups(self) -> list[dict]:
        """Every group of this partition: [{group, state, protocol_type, type}], those
        known only by their committed offsets included (Empty, protocol type "",
        classic); a consumer group (KIP-848) has protocol type "consumer" and type
        "consumer", as Kafka lists them."""
        names = set(self.groups.groups) | set(self.offsets.offsets_by_group) | set(self.consumer_groups.groups)
        listed = []
        for name in sorted(names):
            modern = self.consumer_groups.groups.get(name)
            if modern is not None:
                listed.append({"group": name, "state": modern.state, "protocol_type": "consumer",
                               "type": "consumer"})
                continue
            group = self.groups.groups.get(name)
            listed.append({"group": name, "state": group.state.value if group is not None else "Empty",
                           "protocol_type": (group.protocol_type or "") if group is not None else "",
                           "type": "classic"})
        return listed

    async def delete_group(self, group: str) -> None:
        """Kafka's DeleteGroups: only a group without members (NON_EMPTY_GROUP),
        only a known one (GROUP_ID_NOT_FOUND); tombstones for its offsets and for
        the group, acknowledged once replicated."""
        async with self.locks.hold(group):
            await self._writes.settled()   # offsets of commits still in flight
            state = self.groups.groups.get(group)
            modern = self.consumer_groups.groups.get(group)
            offsets = self.offsets.fetch(group)
            if state is None and modern is None and not offsets:
                raise GroupIdNotFound(f"Group '{group}' does not exist.")
            if state is not None and state.members:
                raise NonEmptyGroup(f"The group '{group}' is not empty (state {state.state.value}).")
            if modern is not None and modern.members:
                raise NonEmptyGroup(f"The group '{group}' is not empty (state {modern.state}).")
            # pending transactional offsets get theirs too (Kafka's deleteAllOffsets)
            records: list[Record] = [(OffsetKey(group, topic, partition), None) for topic, partition
                                     in sorted(set(offsets) | self.offsets.pending_partitions(group))]
            if state is not None:
                records.append((GroupKey(group), None))
            if modern is not None:
                records += self.consumer_groups.tombstones(group)
            await self._write(records)

    async def delete_offsets(self, group: str, partitions: list) -> dict:
        """Kafka's OffsetDelete: the committed offsets of `partitions`, except those of
        topics a member of the group subscribes to (GROUP_SUBSCRIBED_TO_TOPIC, per
        partition); GROUP_ID_NOT_FOUND for an unknown group. {(topic, partition):
        None or its error}, once the tombstones are replicated."""
        async with self.locks.hold(group):
            await self._writes.settled()   # offsets of commits still in flight
            state = self.groups.groups.get(group)
            modern = self.consumer_groups.groups.get(group)
            offsets = self.offsets.fetch(group)
            if state is None and modern is None and not offsets:
                raise GroupIdNotFound(f"Group '{group}' does not exist.")
            subscribed = {t.name for t in modern.subscribed_topics} if modern is not None \
                else self.groups.subscribed_topics(group) or set()
            answer: dict = {}
            records: list[Record] = []
            for topic, partition in (tuple(tp) for tp in partitions):
                if topic in subscribed:
                    answer[(topic, partition)] = GroupSubscribedToTopic(
                        f"group {group} has members subscribed to {topic}")
                    continue
                answer[(topic, partition)] = None
                if (topic, partition) in offsets or (topic, partition) in self.offsets.pending_partitions(group):
                    records.append((OffsetKey(group, topic, partition), None))
            await self._write(records)
        return answer

    # --- the ticker: member expiry and offsets retention --------------------------------

    async def tick(self) -> None:
        """Expires members silent past their session timeout and, every
        `offsets_retention_check_interval_ms`, offsets past retention. Each group is
        decided again under its lock, right before its records are written. The
        first failed write raises: the next tick retries what is still due."""
        started_ms = self.clock.now_ms()
        retention_due = started_ms >= self._next_retention_check_ms
        if retention_due:
            candidates = set(self.groups.groups) | set(self.offsets.offsets_by_group) | set(self.consumer_groups.groups)
        else:
            candidates = {g for g in self.groups.groups if self.groups.has_silent_members(g, started_ms)}
        candidates |= {g for g in self.consumer_groups.groups
                       if self.consumer_groups.expired_members(g, started_ms)}
        try:
            for group in sorted(candidates):
                async with self.locks.hold(group):
                    if retention_due:
                        await self._writes.settled()   # offsets of commits still in flight
                    now_ms = self.clock.now_ms()
                    records = self.groups.expire_group_members(group, now_ms)
                    modern = self.consumer_groups.groups.get(group)
                    if modern is not None and self.consumer_groups.expired_members(group, now_ms):
                        topics = await self._topic_metadata(modern.subscribed_topic_names())
                        records += self.consumer_groups.expire(group, self.clock.now_ms(), topics)
                    if retention_due:
                        records += self._expired(group, now_ms)
                    await self._write(records)
        finally:
            self._notify()   # parked joins check their deadlines (members may have gone)
        if retention_due:   # only once every group was checked: a failed tick retries at once
            self._next_retention_check_ms = started_ms + self.offsets_retention_check_interval_ms

    def _expired(self, group: str, now_ms: int) -> list[Record]:
        """KIP-211, decided now for one group (its lock held): tombstones for its
        offsets past retention, and if it is Empty past retention with no offsets
        left, a tombstone of the group itself (it becomes Dead). A consumer group
        (KIP-848) with no member and no offset left is deleted at once, every
        record of it (Kafka's cleanupGroupMetadata, maybeDeleteGroup): else each
        group id ever used would stay in memory and in the partition for good."""
        state = self.groups.groups.get(group)
        since_ms = state.state_since_ms if state is not None and state.state is GroupState.EMPTY else None
        records = self.offsets.handle_expire(now_ms, {group: self._retention(group)}, only_group=group).records
        expiring = {(key.topic, key.partition) for key, _ in records}
        modern = self.consumer_groups.groups.get(group)
        offsets_left = bool(set(self.offsets.fetch(group)) - expiring) or self.offsets.has_open_transactions(group)
        if modern is not None and not modern.members and not offsets_left:
            records += self.consumer_groups.tombstones(group)
        elif (since_ms is not None and not offsets_left
                and now_ms - since_ms >= self.offsets.offsets_retention_ms):
            records.append((GroupKey(group), None))
        return records

    def _retention(self, group: str) -> Retention | None:
        """How `group`'s offsets age now (Kafka's offsetExpirationCondition and
        isSubscribedToTopic): a KIP-848 group with members by commit, but never a
        topic they subscribe to (nothing while one subscribes by regex); a classic
        group with a protocol type: Empty, from when it became Empty (by commit
        when a v0/v1 group value left that unknown: -1); Stable with a consumer
        protocol whose subscriptions parse, by commit but never a subscribed
        topic; else nothing. Without group metadata, or its protocol type, by
        commit."""
        modern = self.consumer_groups.groups.get(group)
        if modern is not None and modern.members:
            subscribed = modern.subscribed_topic_names()
            return None if subscribed is None else Retention(subscribed=frozenset(subscribed))
        state = self.groups.groups.get(group)
        if state is None or state.protocol_type is None:
            return BY_COMMIT
        if state.state is GroupState.EMPTY:
            return BY_COMMIT if state.state_since_ms < 0 else Retention(since_ms=state.state_since_ms)
        subscribed = self.groups.subscribed_topics(group) if state.state is GroupState.STABLE else None
        return None if subscribed is None else Retention(subscribed=frozenset(subscribed))


async def _appended(written: Awaitable) -> None:
    """A write of the group coordinator's records, its failure answered as
    Kafka's coordinators answer a failed append (errors.coordinator_append_error)."""
    try:
        await written
    except KafkaError as error:
        mapped = coordinator_append_error(error)
        if mapped is error:
            raise
        raise mapped from error


async def _no_topics(topics: set[str] | None) -> dict:
    return {}
