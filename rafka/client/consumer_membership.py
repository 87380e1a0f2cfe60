"""A consumer's side of a consumer group of the new protocol (KIP-848,
`group_protocol="consumer"`), as Kafka's ConsumerMembershipManager and its
heartbeat request manager run it.

The coordinator assigns; the member heartbeats (ConsumerGroupHeartbeat) and
reconciles. A heartbeat thread sends one every interval the coordinator names,
and at once when the consumer has something to acknowledge. Heartbeats are
partial, as Kafka's HeartbeatState builds them: a joining member sends every
field (rebalance timeout, subscribed topic names or regex, server assignor, rack
id, owned partitions); later heartbeats send a field only when it changed since
the last one sent (null: unchanged), owned partitions once after each
reconciliation. After any failed heartbeat (an error answer, a lost connection, an
answer not taken) the next one is full again, so the coordinator answers it with
the whole assignment: what was lost costs one full heartbeat. A regex
subscription (`subscribe(regex=...)`) is the coordinator's to resolve
(SubscribedTopicRegex): it matches it against every topic as topics come and go,
and the member learns the topics' names from its assignment's ids. What the
answers mean:
  an assignment other than the one last handed to the consumer -> a target:
      the consumer's thread, in poll, revokes what it owns outside the target
      (commit with auto-commit, on_partitions_revoked), then takes what is new
      (on_partitions_assigned), then acknowledges: the next heartbeat, sent at
      once, reports the new owned set (Kafka's RECONCILING -> ACKNOWLEDGING). The
      coordinator gives a partition to its new owner only once the old owner
      reported it gone, so this order is what keeps a partition to one owner.
  FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID -> fenced: the partitions are lost
      (on_partitions_lost, no commit); only then, at the next poll, the member
      rejoins with epoch 0 under its member id
  FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED,
  UNSUPPORTED_ASSIGNOR, INVALID_REQUEST, ... -> fatal: the next poll raises it
  retriable (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, a lost
      connection) -> the coordinator looked up afresh, the heartbeat sent again
      after the retry backoff
  no poll for `max_poll_interval_ms` -> the member leaves (epoch -1, a static
      one -2), its partitions lost; the next poll rejoins
Leaving (unsubscribe, close) sends epoch -1; a static member
(`group_instance_id`) sends -2 by default: it keeps its place and partitions
until its session times out, and a restart within it takes them back.

Invariants:
  the member id is the client's own (v1), made once and kept for the
  consumer's life, as Kafka's; the epoch commits carry is the last one the
  coordinator answered, ("", -1) while not a member
  a heartbeat joining (epoch 0) reports no owned partitions; a fenced member
  sends nothing until the consumer has dropped its partitions
  only the consumer's thread changes what the consumer owns; the heartbeat
  thread only sends, and sets fields under `_lock`
Callers: client.consumer (subscribe with group_protocol="consumer"), through it
the member actors.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import uuid
from collections.abc import Callable

from rafka.client.membership import CoordinatorClient
from rafka.core.clock import SystemClock
from rafka.core.errors import FencedMemberEpoch, KafkaError, UnknownMemberId
from rafka.protocol.retry import is_retriable, kafka_cause

logger = logging.getLogger(__name__)
JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2
_FENCED = (FencedMemberEpoch, UnknownMemberId)
Partition = tuple[str, int]


@dataclasses.dataclass
class SentFields:
    """What the heartbeats sent last (Kafka's HeartbeatState.SentFields): a field
    equal to its value here goes as null. `owned_version`: the reconciliation
    whose owned partitions were reported."""
    rebalance_timeout_ms: int = -1
    topics: tuple[str, ...] | None = None
    regex: str | None = None
    server_assignor: str | None = None
    owned_version: int | None = None


class MemberState(enum.Enum):
    """Kafka's MemberState, as far as a member that reconciles in poll needs it."""
    UNSUBSCRIBED = "unsubscribed"   # not in the group: no heartbeats
    JOINING = "joining"             # heartbeats at epoch 0
    MEMBER = "member"               # heartbeats at the epoch answered (stable or reconciling)
    FENCED = "fenced"               # waits for the consumer to drop its partitions
    FATAL = "fatal"                 # the next poll raises


class ConsumerGroupMembership:
    """`topic_id(name, fresh)`: the topic's id from the consumer's metadata (`fresh`:
    looked up again, for an assigned id that none of the subscribed topics has);
    `topic_name(id)`: the name of a topic by id, for a regex subscription's
    assigned topics (None if no topic has it). `server_assignor`: Kafka's
    group.remote.assignor ("uniform", "range"), None for the coordinator's
    default. `rack_id`: Kafka's client.rack, sent when joining."""

    def __init__(self, coordinator: CoordinatorClient, *, max_poll_interval_ms: int, request_timeout_ms: int,
                 retry_backoff_ms: int, topic_id: Callable[[str, bool], object],
                 topic_name: Callable[[object], str | None] | None = None,
                 group_instance_id: str | None = None, server_assignor: str | None = None,
                 rack_id: str | None = None, clock=None) -> None:
        self.coordinator = coordinator
        self.max_poll_interval_ms = max_poll_interval_ms
        self.request_timeout_s = request_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.group_instance_id = group_instance_id
        self.server_assignor = server_assignor
        self.rack_id = rack_id
        self._topic_id = topic_id
        self._topic_name = topic_name
        self._clock = clock or SystemClock()
        self.member_id = str(uuid.uuid4())
        self._lock = threading.Lock()
        self._state = MemberState.UNSUBSCRIBED
        self.member_epoch = JOIN_EPOCH
        self._topics: tuple[str, ...] = ()
        self._regex: str | None = None
        self._owned: frozenset[Partition] = frozenset()    # what the consumer holds, as last acknowledged
        self._owned_version = 0                             # acknowledgments so far
        self._sent = SentFields()
        self._handed: frozenset[Partition] | None = None   # the assignment last handed to the consumer
        self._target: frozenset[Partition] | None = None   # a newer one, not yet taken
        self._lost = False
        self._fatal: KafkaError | None = None
        self.heartbeat_interval_s = 3.0                     # until the coordinator names one
        self._last_poll_ms = self._clock.monotonic_ms()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._heartbeats: threading.Thread | None = None

    # --- the consumer's thread ----------------------------------------------------------

    def subscribe(self, topics: tuple[str, ...] = (), *, regex: str | None = None) -> None:
        """Join (or tell the group a new subscription at the next heartbeat):
        topic names, or a regex the coordinator matches whole against every topic."""
        with self._lock:
            self._topics, self._regex = tuple(sorted(topics)), regex
            if self._state is MemberState.UNSUBSCRIBED:
                self._state, self.member_epoch = MemberState.JOINING, JOIN_EPOCH
        self._start_heartbeats()
        self._wake.set()

    def polled(self) -> None:
        self._last_poll_ms = self._clock.monotonic_ms()
        with self._lock:
            fatal = self._fatal
        if fatal is not None:
            raise fatal

    def identity(self) -> tuple[str, int]:
        """(member id, member epoch) for commits: ("", -1) while not a member."""
        with self._lock:
            if self._state is MemberState.MEMBER and self.member_epoch > 0:
                return self.member_id, self.member_epoch
            return "", -1

    def take_lost(self) -> bool:
        """True once after the member was fenced (or left for a stuck poll): the
        consumer drops its partitions (on_partitions_lost); the member then rejoins."""
        with self._lock:
            lost, self._lost = self._lost, False
            if lost:
                self._owned, self._handed, self._target = frozenset(), None, None
                if self._state is MemberState.FENCED or (self._state is MemberState.UNSUBSCRIBED and self._topics):
                    # fenced, or left for a stuck poll: back with epoch 0, owning nothing
                    self._state, self.member_epoch = MemberState.JOINING, JOIN_EPOCH
                    self._wake.set()
            return lost

    def take_target(self) -> frozenset[Partition] | None:
        """The assignment to reconcile to, once, when it differs from the last one taken."""
        with self._lock:
            target, self._target = self._target, None
            if target is not None:
                self._handed = target
            return target

    def acknowledge(self, owned) -> None:
        """The consumer now holds exactly `owned`: report it at once."""
        with self._lock:
            self._owned = frozenset(owned)
            self._owned_version += 1
        self._wake.set()

    def commit_failed(self, error: BaseException) -> None:
        """A commit answered FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: fenced, as a heartbeat would be."""
        if isinstance(kafka_cause(error), _FENCED):
            self._fence(self.member_epoch, kafka_cause(error))

    def leave(self, *, leave_group: bool | None = None) -> None:
        """Leave the group: epoch -1, a static member -2 (Kafka 4's CloseOptions:
        `leave_group` True sends -1 for either, False sends nothing). The caller
        has revoked (or lost) every partition first."""
        with self._lock:
            was_member = self._state is MemberState.MEMBER
            epoch = LEAVE_EPOCH if self.group_instance_id is None or leave_group else STATIC_LEAVE_EPOCH
            self._state, self.member_epoch = MemberState.UNSUBSCRIBED, JOIN_EPOCH
            self._topics, self._regex, self._owned, self._handed, self._target = (), None, frozenset(), None, None
            self._sent = SentFields()
        if was_member and leave_group is not False:
            self._send_leave(epoch)

    def close(self, *, leave_group: bool | None = None) -> None:
        self.leave(leave_group=leave_group)
        self._closing.set()
        self._wake.set()
        if self._heartbeats is not None:
            self._heartbeats.join(timeout=self.request_timeout_s + 1)

    # --- the heartbeat thread -------------------------------------------------------------

    def _start_heartbeats(self) -> None:
        if self._heartbeats is None:
            self._heartbeats = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                                name=f"rafka-consumer-heartbeat-{self.coordinator.group_id}")
            self._heartbeats.start()

    def _heartbeat_loop(self) -> None:
        pause_s = 0.0
        while not self._closing.is_set():
            self._wake.wait(pause_s)
            self._wake.clear()
            if self._closing.is_set():
                return
            if self._clock.monotonic_ms() - self._last_poll_ms > self.max_poll_interval_ms:
                self._poll_timer_expired()
            pause_s = self._heartbeat_once()

    def _heartbeat_once(self) -> float:
        """One heartbeat if the member is in (or joining) the group; the pause before the next."""
        with self._lock:
            if self._state not in (MemberState.JOINING, MemberState.MEMBER):
                return self.heartbeat_interval_s
            epoch = self.member_epoch
            fields = self._changed_fields()
        try:
            if "owned" in fields:
                fields["owned"] = self._by_topic_id(fields["owned"])
            answer = self.coordinator.submit("consumer_group_heartbeat", self.member_id, epoch,
                                             instance_id=self.group_instance_id, **fields
                                             ).result(timeout=self.request_timeout_s)
        except Exception as error:
            self._reset_sent()
            cause = kafka_cause(error)
            if isinstance(cause, _FENCED):
                self._fence(epoch, cause)
            elif is_retriable(error):
                self.coordinator.invalidate()
                return self.retry_backoff_s
            else:
                logger.error("group %s: heartbeat failed for good: %r", self.coordinator.group_id, cause)
                with self._lock:
                    self._state, self._fatal = MemberState.FATAL, cause if isinstance(cause, KafkaError) \
                        else KafkaError(str(cause))
            return self.heartbeat_interval_s
        try:
            self._take_answer(epoch, answer)
        except Exception as error:   # an assigned topic id not known yet: the next (full) heartbeat brings it again
            self._reset_sent()
            logger.warning("group %s: heartbeat answer not taken: %r", self.coordinator.group_id, error)
            return self.retry_backoff_s
        return self.heartbeat_interval_s

    def _changed_fields(self) -> dict:
        """The heartbeat's fields that changed since the last one sent (all of them
        when joining), as Kafka's HeartbeatState.buildRequestData; marks them sent.
        Called under `_lock`."""
        full, sent = self._state is MemberState.JOINING, self._sent
        fields: dict = {}
        if full or sent.rebalance_timeout_ms != self.max_poll_interval_ms:
            fields["rebalance_timeout_ms"] = sent.rebalance_timeout_ms = self.max_poll_interval_ms
        if full or sent.topics != self._topics:
            fields["subscribed_topic_names"] = sent.topics = self._topics
        # "" clears a regex the coordinator holds: sent when one was and is no more
        if (full and self._regex is not None) or sent.regex != self._regex:
            fields["subscribed_topic_regex"] = self._regex if self._regex is not None else ""
            sent.regex = self._regex
        if self.server_assignor is not None and (full or sent.server_assignor != self.server_assignor):
            fields["server_assignor"] = sent.server_assignor = self.server_assignor
        if full and self.rack_id is not None:
            fields["rack_id"] = self.rack_id
        if full or sent.owned_version != self._owned_version:
            # joining owns nothing (epoch 0 must report no partitions)
            fields["owned"] = frozenset() if self.member_epoch == JOIN_EPOCH else self._owned
            sent.owned_version = self._owned_version
        return fields

    def _reset_sent(self) -> None:
        """The next heartbeat is a full one (Kafka resets its HeartbeatState after
        any failed heartbeat): the coordinator answers it with the whole assignment."""
        with self._lock:
            self._sent = SentFields()

    def _by_topic_id(self, owned) -> list:
        """[(topic id, sorted partitions)] of owned partitions, sorted by topic id."""
        by_id: dict = {}
        for topic, partition in owned:
            by_id.setdefault(self._topic_id(topic, False), []).append(partition)
        return sorted(((topic_id, sorted(parts)) for topic_id, parts in by_id.items()), key=lambda item: str(item[0]))

    def _take_answer(self, sent_epoch: int, answer: dict) -> None:
        assignment = None
        if answer["assignment"] is not None:
            names = self._names_of(answer["assignment"])
            assignment = frozenset((names[topic_id], p) for topic_id, parts in answer["assignment"].items()
                                   for p in parts)
        with self._lock:
            if self._state not in (MemberState.JOINING, MemberState.MEMBER) or sent_epoch != self.member_epoch:
                return   # fenced, left or closed meanwhile: the answer is about a membership gone
            self.member_epoch = answer["member_epoch"]
            self._state = MemberState.MEMBER
            self.heartbeat_interval_s = answer["heartbeat_interval_ms"] / 1000 or self.heartbeat_interval_s
            if assignment is not None and assignment != (self._target if self._target is not None
                                                         else self._handed):
                self._target = assignment

    def _names_of(self, assignment: dict) -> dict:
        """{topic id: name} of the assignment's topics (subscribed ones; looked up
        afresh once for an id not known, e.g. a topic made again; with a regex, any
        topic the coordinator matched)."""
        with self._lock:
            topics, regex = self._topics, self._regex
        names = {self._topic_id(t, False): t for t in topics}
        if any(topic_id not in names for topic_id in assignment):
            names = {self._topic_id(t, True): t for t in topics}
        names.pop(None, None)   # a subscribed topic that does not exist
        if regex is not None and self._topic_name is not None:
            for topic_id in assignment:
                if topic_id not in names:
                    name = self._topic_name(topic_id)
                    if name is not None:
                        names[topic_id] = name
        missing = [topic_id for topic_id in assignment if topic_id not in names]
        if missing:
            raise KafkaError(f"assigned topic ids {missing} are not subscribed topics")
        return names

    def _fence(self, epoch: int, cause: BaseException) -> None:
        with self._lock:
            if self._state is not MemberState.MEMBER and self._state is not MemberState.JOINING:
                return
            if epoch != self.member_epoch:
                return
            logger.info("group %s: member %s fenced at epoch %d (%s): its partitions are lost, it rejoins",
                        self.coordinator.group_id, self.member_id, epoch, type(cause).__name__)
            self._state, self._lost = MemberState.FENCED, True

    def _poll_timer_expired(self) -> None:
        """Kafka's proactive leave: the application is stuck; its partitions are lost."""
        with self._lock:
            if self._state is not MemberState.MEMBER:
                return
            self._state, self._lost = MemberState.UNSUBSCRIBED, True
            epoch = LEAVE_EPOCH if self.group_instance_id is None else STATIC_LEAVE_EPOCH
        logger.warning("group %s: no poll for max.poll.interval.ms (%d ms): leaving the group; its partitions "
                       "are lost", self.coordinator.group_id, self.max_poll_interval_ms)
        self._send_leave(epoch)

    def _send_leave(self, epoch: int) -> None:
        try:
            self.coordinator.call("consumer_group_heartbeat", self.member_id, epoch,
                                  instance_id=self.group_instance_id, timeout_s=self.request_timeout_s)
        except Exception as error:   # its session timeout will remove it instead
            logger.warning("group %s: leaving failed: %s", self.coordinator.group_id, error)
