"""A consumer's side of its group: the coordinator's address, and membership
(join, sync, heartbeat, leave), as Kafka's ConsumerCoordinator.

`CoordinatorClient` finds the coordinator actor of a group (`abs(hash(group)) % N`
over `__consumer_offsets`) and calls it, retrying retriable errors; the handle is
cached until a call fails.

`GroupMembership` runs the classic protocol for one subscribed consumer. The
consumer's thread joins (the coordinator parks the join until the generation
completes), syncs and gets its assignment; a heartbeat thread then sends a
heartbeat every `heartbeat_interval_ms` and records what the answers mean:
  REBALANCE_IN_PROGRESS   -> rejoin at the next poll (partitions revoked first)
  ILLEGAL_GENERATION,
  UNKNOWN_MEMBER_ID       -> the group moved on without us: partitions lost
                             (the member id is dropped for UNKNOWN_MEMBER_ID)
  no poll for `max_poll_interval_ms` -> leave the group (Kafka's proactive
                             leave: the application is stuck), partitions lost
Invariants:
  heartbeats and commits carry the member id and generation of the last
  completed join; after "lost" they carry none until the next join
  only the consumer's thread joins, syncs and changes the assignment; the
  heartbeat thread only sends heartbeats and sets flags (under `_lock`)
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import ray

from rafka.actors.coordinator import OFFSETS_TOPIC, coordinator_actor_name
from rafka.actors.replica import NAMESPACE
from rafka.client.retry import is_retriable, kafka_cause, retry_until
from rafka.core.errors import IllegalGeneration, RebalanceInProgress, UnknownMemberId
from rafka.core.offsets_schema import partition_for_group

logger = logging.getLogger(__name__)


def _client_host() -> str:
    """Kafka's CONSUMER-ID/HOST column shows "/<address>"."""
    try:
        return "/" + socket.gethostbyname(socket.gethostname())
    except OSError:
        return "/127.0.0.1"


class CoordinatorClient:
    def __init__(self, metadata, group_id: str, *, retry_backoff_s: float, default_timeout_s: float) -> None:
        self.group_id = group_id
        self._metadata = metadata
        self.retry_backoff_s = retry_backoff_s
        self.default_timeout_s = default_timeout_s
        self._handle = None

    def handle(self):
        if self._handle is None:
            count = self._metadata.partition_count(OFFSETS_TOPIC)
            self._handle = ray.get_actor(coordinator_actor_name(partition_for_group(self.group_id, count)),
                                         namespace=NAMESPACE)
        return self._handle

    def invalidate(self) -> None:
        self._handle = None

    def submit(self, method: str, *args, **kwargs):
        """One attempt: the ObjectRef of `coordinator.<method>(group, *args)`."""
        return getattr(self.handle(), method).remote(self.group_id, *args, **kwargs)

    def call(self, method: str, *args, timeout_s: float | None = None, **kwargs):
        """`coordinator.<method>(group, *args)`, retried on retriable errors."""
        return retry_until(lambda remaining_s: ray.get(self.submit(method, *args, **kwargs), timeout=remaining_s),
                           timeout_s=self.default_timeout_s if timeout_s is None else timeout_s,
                           retry_backoff_s=self.retry_backoff_s, on_retry=self.invalidate,
                           what=f"{method} for group {self.group_id!r}")


class GroupMembership:
    def __init__(self, coordinator: CoordinatorClient, *, client_id: str, session_timeout_ms: int,
                 heartbeat_interval_ms: int, max_poll_interval_ms: int, request_timeout_ms: int,
                 partition_assignment_strategy: str) -> None:
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError(f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be smaller than "
                             f"session_timeout_ms ({session_timeout_ms})")
        self.coordinator = coordinator
        self.client_id = client_id
        self.client_host = _client_host()
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.max_poll_interval_ms = max_poll_interval_ms
        self.request_timeout_s = request_timeout_ms / 1000
        self.assignor_name = partition_assignment_strategy
        self._lock = threading.Lock()
        self.member_id = ""
        self.generation = -1
        self._active = False          # joined and synced: heartbeats go out
        self._rejoin_needed = True
        self._lost = False            # the group moved on without us since the last join
        self._last_poll_s = time.monotonic()
        self._closing = threading.Event()
        self._heartbeats: threading.Thread | None = None

    # --- the consumer's thread ----------------------------------------------------------

    def polled(self) -> None:
        self._last_poll_s = time.monotonic()

    def identity(self) -> tuple[str, int]:
        """(member id, generation) for commits: ("", -1) while not a member."""
        with self._lock:
            return (self.member_id, self.generation) if self._active else ("", -1)

    def rejoin_needed(self) -> bool:
        with self._lock:
            return self._rejoin_needed

    def request_rejoin(self) -> None:
        with self._lock:
            self._rejoin_needed = True

    def take_lost(self) -> bool:
        """True once after the group moved on without this member."""
        with self._lock:
            lost, self._lost = self._lost, False
            return lost

    def commit_failed(self, error: BaseException) -> None:
        """A commit answered as a heartbeat would: learn from it."""
        self._learn(kafka_cause(error), self.member_id, self.generation)

    def join(self, topics: list[str], owned: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """Join (parked until the generation completes) and sync; returns this
        member's assignment. Rejoins for as long as the coordinator asks to."""
        timeout_s = self.max_poll_interval_ms / 1000 + self.request_timeout_s
        while True:
            with self._lock:
                self._active, self._rejoin_needed = False, False
                member_id = self.member_id
            try:
                answer = self.coordinator.call(
                    "join_group", member_id, client_id=self.client_id, client_host=self.client_host,
                    topics=sorted(topics), session_timeout_ms=self.session_timeout_ms,
                    rebalance_timeout_ms=self.max_poll_interval_ms, assignor_name=self.assignor_name,
                    owned=list(owned), timeout_s=timeout_s)
                assignment = self.coordinator.call("sync_group", answer["member_id"], answer["generation"])
            except UnknownMemberId:
                with self._lock:
                    self.member_id, self.generation = "", -1
                continue
            except (RebalanceInProgress, IllegalGeneration):
                continue
            with self._lock:
                self.member_id, self.generation = answer["member_id"], answer["generation"]
                self._active, self._lost = True, False
            self._last_poll_s = time.monotonic()
            self._start_heartbeats()
            return [tuple(tp) for tp in assignment]

    def leave(self, *, lost: bool = False) -> None:
        """Leave the group now (unsubscribe, close; `lost` when the heartbeat thread
        leaves for a stuck application): the others rebalance at once instead of
        waiting out the session timeout."""
        with self._lock:
            member_id, was_active = self.member_id, self._active
            self._active, self._rejoin_needed = False, True
            self._lost = self._lost or (lost and was_active)   # set before anyone can see the leave
            self.member_id, self.generation = "", -1
        if member_id and was_active:
            try:
                self.coordinator.call("leave_group", member_id, timeout_s=self.request_timeout_s)
            except Exception as error:  # the session timeout will remove it instead
                logger.warning("group %s: leaving failed: %s", self.coordinator.group_id, error)

    def close(self) -> None:
        self.leave()
        self._closing.set()
        if self._heartbeats is not None:
            self._heartbeats.join(timeout=self.heartbeat_interval_s + self.request_timeout_s)

    # --- the heartbeat thread -------------------------------------------------------------

    def _start_heartbeats(self) -> None:
        if self._heartbeats is None:
            self._heartbeats = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                                name=f"rafka-heartbeat-{self.coordinator.group_id}")
            self._heartbeats.start()

    def _heartbeat_loop(self) -> None:
        while not self._closing.wait(self.heartbeat_interval_s):
            if not ray.is_initialized():
                return  # the driver shut Ray down under an unclosed consumer
            with self._lock:
                if not self._active:
                    continue
                member_id, generation = self.member_id, self.generation
            if (time.monotonic() - self._last_poll_s) * 1000 > self.max_poll_interval_ms:
                logger.warning("group %s: no poll for max.poll.interval.ms (%d ms): leaving the group; "
                               "its partitions are lost", self.coordinator.group_id, self.max_poll_interval_ms)
                self.leave(lost=True)
                continue
            try:
                ray.get(self.coordinator.submit("heartbeat", member_id, generation), timeout=self.request_timeout_s)
            except Exception as error:
                self._learn(kafka_cause(error), member_id, generation)

    def _learn(self, cause: BaseException, member_id: str, generation: int) -> None:
        with self._lock:
            if (member_id, generation) != (self.member_id, self.generation):
                return  # an answer about a membership we no longer hold
            if isinstance(cause, RebalanceInProgress):
                self._rejoin_needed = True
            elif isinstance(cause, (IllegalGeneration, UnknownMemberId)):
                self._active, self._lost, self._rejoin_needed = False, True, True
                self.generation = -1
                if isinstance(cause, UnknownMemberId):
                    self.member_id = ""
            elif is_retriable(cause):
                self.coordinator.invalidate()
