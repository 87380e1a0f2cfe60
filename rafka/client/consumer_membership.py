"""A consumer's side of a consumer group of the new protocol (KIP-848,
`group_protocol="consumer"`), as Kafka's ConsumerMembershipManager and its
heartbeat request manager run it.

The coordinator assigns; the member heartbeats (ConsumerGroupHeartbeat) and
reconciles. A heartbeat thread sends one every interval the coordinator names,
and at once when the consumer has something to acknowledge. Every heartbeat is a
full one (rebalance timeout, subscribed topic names, owned partitions, as a
joining one), so every answer carries the member's assignment: the member keeps
no record of what it last sent, and a lost answer costs nothing. What the
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


class MemberState(enum.Enum):
    """Kafka's MemberState, as far as a member that reconciles in poll needs it."""
    UNSUBSCRIBED = "unsubscribed"   # not in the group: no heartbeats
    JOINING = "joining"             # heartbeats at epoch 0
    MEMBER = "member"               # heartbeats at the epoch answered (stable or reconciling)
    FENCED = "fenced"               # waits for the consumer to drop its partitions
    FATAL = "fatal"                 # the next poll raises


class ConsumerGroupMembership:
    """`topic_id(name, fresh)`: the topic's id from the consumer's metadata (`fresh`:
    looked up again, for an assigned id that none of the subscribed topics has). `server_assignor`:
    Kafka's group.remote.assignor ("uniform", "range"), None for the coordinator's default."""

    def __init__(self, coordinator: CoordinatorClient, *, max_poll_interval_ms: int, request_timeout_ms: int,
                 retry_backoff_ms: int, topic_id: Callable[[str, bool], object],
                 group_instance_id: str | None = None, server_assignor: str | None = None,
                 clock=None) -> None:
        self.coordinator = coordinator
        self.max_poll_interval_ms = max_poll_interval_ms
        self.request_timeout_s = request_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.group_instance_id = group_instance_id
        self.server_assignor = server_assignor
        self._topic_id = topic_id
        self._clock = clock or SystemClock()
        self.member_id = str(uuid.uuid4())
        self._lock = threading.Lock()
        self._state = MemberState.UNSUBSCRIBED
        self.member_epoch = JOIN_EPOCH
        self._topics: tuple[str, ...] = ()
        self._owned: frozenset[Partition] = frozenset()    # what the consumer holds, as last acknowledged
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

    def subscribe(self, topics: tuple[str, ...]) -> None:
        """Join (or tell the group a new subscription at the next heartbeat)."""
        with self._lock:
            self._topics = tuple(sorted(topics))
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
            self._topics, self._owned, self._handed, self._target = (), frozenset(), None, None
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
            epoch, topics, owned = self.member_epoch, self._topics, self._owned
        try:
            ids = {topic: self._topic_id(topic, False) for topic in {t for t, _ in owned}}
            by_id: dict = {}
            for topic, partition in owned:
                by_id.setdefault(ids[topic], []).append(partition)
            answer = self.coordinator.submit(
                "consumer_group_heartbeat", self.member_id, epoch, instance_id=self.group_instance_id,
                rebalance_timeout_ms=self.max_poll_interval_ms, subscribed_topic_names=topics,
                server_assignor=self.server_assignor,
                owned=[] if epoch == JOIN_EPOCH else sorted(((topic_id, sorted(parts)) for topic_id, parts in by_id.items()),
                                                      key=lambda item: str(item[0]))
            ).result(timeout=self.request_timeout_s)
        except Exception as error:
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
        except Exception as error:   # an assigned topic id not known yet: the next heartbeat brings it again
            logger.warning("group %s: heartbeat answer not taken: %r", self.coordinator.group_id, error)
            return self.retry_backoff_s
        return self.heartbeat_interval_s

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
        afresh once for an id not known, e.g. a topic made again)."""
        with self._lock:
            topics = self._topics
        names = {self._topic_id(t, False): t for t in topics}
        if any(topic_id not in names for topic_id in assignment):
            names = {self._topic_id(t, True): t for t in topics}
        names.pop(None, None)   # a subscribed topic that does not exist
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
