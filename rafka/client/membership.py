"""A consumer's side of its group: the coordinator's address, and membership
(join, sync, heartbeat, leave), as Kafka's ConsumerCoordinator.

`CoordinatorClient` sends a group's requests (Kafka's JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, ConsumerGroupHeartbeat (client.consumer_membership, the
new protocol's member), OffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups,
DeleteGroups) to its coordinator's Kafka endpoint: the coordinator of the
group's `__consumer_offsets` partition (`abs(hash(group)) % N`), found with
FindCoordinator (client.metadata) and looked up afresh after a retriable error
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, a lost connection), which is
retried.

`GroupMembership` runs the classic protocol for one subscribed consumer. The
consumer's thread joins (the coordinator parks the join until the generation
completes); the leader assigns every member's partitions with the group's
chosen assignor; each member syncs (the leader with the assignment) and gets its
own; a heartbeat thread then sends a
heartbeat every `heartbeat_interval_ms` and records what the answers mean:
  REBALANCE_IN_PROGRESS   -> rejoin at the next poll (partitions revoked first)
  ILLEGAL_GENERATION,
  UNKNOWN_MEMBER_ID       -> the group moved on without us: partitions lost
                             (the member id is dropped for UNKNOWN_MEMBER_ID)
  FENCED_INSTANCE_ID      -> another member took our group.instance.id: lost,
                             and the next poll raises it (fatal, as Kafka's)
  no poll for `max_poll_interval_ms` -> leave the group (Kafka's proactive
                             leave: the application is stuck), partitions lost
Invariants:
  heartbeats and commits carry the member id and generation of the last
  completed join; after "lost" they carry none until the next join
  only the consumer's thread joins, syncs and changes the assignment; the
  heartbeat thread only sends heartbeats and sets flags (under `_lock`)
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time

from collections.abc import Sequence

from rafka.protocol.retry import is_retriable, kafka_cause, retry_until
from rafka.core.assignors import Subscription, assignor, is_cooperative
from rafka.core.errors import FencedInstanceId, IllegalGeneration, RebalanceInProgress, UnknownMemberId
from rafka.protocol import group_requests
from rafka.protocol.network import coordinator_channel

logger = logging.getLogger(__name__)


# What each group call sends and how its answer reads: (request builder, answer
# reader), by the name the callers use. The builders take the group id first.
_CALLS = {
    "join_group": (group_requests.join_request, lambda response, _: group_requests.join_answer(response)),
    "sync_group": (group_requests.sync_request, lambda response, _: group_requests.sync_answer(response)),
    "heartbeat": (group_requests.heartbeat_request, lambda response, _: group_requests.heartbeat_answer(response)),
    "leave_group": (group_requests.leave_request, lambda response, _: group_requests.leave_answer(response)),
    "commit_offsets": (group_requests.commit_request, lambda response, _: group_requests.commit_answer(response)),
    "fetch_offsets": (group_requests.offset_fetch_request, group_requests.offset_fetch_answer),
    "delete_offsets": (group_requests.offset_delete_request,
                       lambda response, _: group_requests.offset_delete_answer(response)),
    "describe_group": (group_requests.describe_request, group_requests.describe_answer),
    "consumer_group_heartbeat": (group_requests.consumer_group_heartbeat_request,
                                 lambda response, _: group_requests.consumer_group_heartbeat_answer(response)),
    "consumer_group_describe": (group_requests.consumer_group_describe_request,
                                group_requests.consumer_group_describe_answer),
    "delete_group": (group_requests.delete_groups_request, group_requests.delete_groups_answer),
}


class CoordinatorClient:
    """One group's coordinator, on the wire: its endpoint from the metadata cache
    (FindCoordinator: the coordinator of the group's __consumer_offsets partition), the requests
    and answers of protocol.group_requests, sent over the client's network."""

    def __init__(self, metadata, network, group_id: str, *, retry_backoff_s: float,
                 default_timeout_s: float) -> None:
        self.group_id = group_id
        self._metadata = metadata
        self._network = network
        self.retry_backoff_s = retry_backoff_s
        self.default_timeout_s = default_timeout_s

    def invalidate(self) -> None:
        """The coordinator moved, restarted or is loading: look it up afresh."""
        self._metadata.invalidate_coordinator(self.group_id)

    def submit(self, method: str, *args, timeout_ms: int | None = None, **kwargs) -> concurrent.futures.Future:
        """One attempt: a future of `method`'s answer (or its typed error).
        `timeout_ms`: the request's own limit (a join parks up to the rebalance
        timeout), else the network's request timeout."""
        build, read = _CALLS[method]
        request = build(self.group_id, *args, **kwargs)
        sent = self._network.submit(coordinator_channel(self._metadata.coordinator_address(self.group_id)), request,
                                    timeout_ms=timeout_ms)
        answer: concurrent.futures.Future = concurrent.futures.Future()

        def done(future: concurrent.futures.Future) -> None:
            try:
                answer.set_result(read(future.result(), self.group_id))
            except BaseException as error:
                answer.set_exception(error)
        sent.add_done_callback(done)
        return answer

    def call(self, method: str, *args, timeout_s: float | None = None, timeout_ms: int | None = None, **kwargs):
        """`method`'s answer, retried on retriable errors until `timeout_s`."""
        return retry_until(lambda remaining_s: self.submit(method, *args, timeout_ms=timeout_ms, **kwargs)
                           .result(timeout=remaining_s),
                           timeout_s=self.default_timeout_s if timeout_s is None else timeout_s,
                           retry_backoff_s=self.retry_backoff_s, on_retry=lambda _: self.invalidate(),
                           what=f"{method} for group {self.group_id!r}")


class GroupMembership:
    """`partitions_of(topics)`: {topic: partition count} of the known ones (the
    consumer's metadata), which the leader assigns over. `partition_assignment_strategy`:
    assignor names (core.assignors), a list or a comma-separated string, in order
    of preference: each is offered as a protocol, the group's vote picks one.
    `group_instance_id`: a static member (KIP-345): it keeps its place across a
    restart within its session timeout and never sends LeaveGroup (as Kafka's
    consumer), so its partitions wait for it instead of moving."""

    def __init__(self, coordinator: CoordinatorClient, *, client_id: str, session_timeout_ms: int,
                 heartbeat_interval_ms: int, max_poll_interval_ms: int, request_timeout_ms: int,
                 partition_assignment_strategy: str | Sequence[str], partitions_of=None,
                 group_instance_id: str | None = None) -> None:
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError(f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be smaller than "
                             f"session_timeout_ms ({session_timeout_ms})")
        self.coordinator = coordinator
        self.client_id = client_id
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.max_poll_interval_ms = max_poll_interval_ms
        self.request_timeout_s = request_timeout_ms / 1000
        self.assignor_names = assignor_names(partition_assignment_strategy)
        self.cooperative = is_cooperative(self.assignor_names)   # KIP-429: revoke only what moves
        self.partitions_of = partitions_of or (lambda topics: {})
        self.group_instance_id = group_instance_id
        self._lock = threading.Lock()
        self.member_id = ""
        self.generation = -1
        self.protocol_name: str | None = None
        self._active = False          # joined and synced: heartbeats go out
        self._rejoin_needed = True
        self._lost = False            # the group moved on without us since the last join
        self._fenced: FencedInstanceId | None = None   # another member took our group.instance.id
        self._last_poll_s = time.monotonic()
        self._closing = threading.Event()
        self._heartbeats: threading.Thread | None = None

    # --- the consumer's thread ----------------------------------------------------------

    def polled(self) -> None:
        self._last_poll_s = time.monotonic()
        with self._lock:
            fenced = self._fenced
        if fenced is not None:   # fatal, as Kafka's FencedInstanceIdException
            raise fenced

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
        member's assignment. The leader assigns every member's partitions with the
        group's chosen assignor (Kafka's ConsumerCoordinator.onLeaderElected).
        Rejoins for as long as the coordinator asks to."""
        timeout_s = self.max_poll_interval_ms / 1000 + self.request_timeout_s
        metadata = group_requests.subscription(sorted(topics), owned)
        while True:
            with self._lock:
                self._active, self._rejoin_needed = False, False
                member_id = self.member_id
            try:
                answer = self.coordinator.call(
                    "join_group", member_id, protocols=[(name, metadata) for name in self.assignor_names],
                    session_timeout_ms=self.session_timeout_ms, rebalance_timeout_ms=self.max_poll_interval_ms,
                    group_instance_id=self.group_instance_id, timeout_s=timeout_s,
                    timeout_ms=int(timeout_s * 1000))
                assignments = None
                if answer["leader"] == answer["member_id"]:
                    assignments = self._assign(answer["protocol_name"], answer["members"])
                assignment = self.coordinator.call(
                    "sync_group", answer["member_id"], answer["generation"], protocol_name=answer["protocol_name"],
                    assignments=assignments, group_instance_id=self.group_instance_id, timeout_s=timeout_s,
                    timeout_ms=int(timeout_s * 1000))
            except UnknownMemberId:
                with self._lock:
                    self.member_id, self.generation = "", -1
                continue
            except (RebalanceInProgress, IllegalGeneration):
                continue
            except FencedInstanceId as error:
                with self._lock:
                    self._fenced = error
                raise
            with self._lock:
                self.member_id, self.generation = answer["member_id"], answer["generation"]
                self.protocol_name = answer["protocol_name"]
                self._active, self._lost = True, False
            self._last_poll_s = time.monotonic()
            self._start_heartbeats()
            return [tuple(tp) for tp in assignment]

    def _assign(self, protocol_name: str, members: dict) -> dict[str, list[tuple[str, int]]]:
        """The leader's part: every member's partitions, by the group's assignor over
        the members' subscriptions (topics not in the metadata are skipped, as Kafka's
        assignors skip them)."""
        subscriptions = {member_id: Subscription(tuple(topics), tuple(owned), self.generation)
                         for member_id, (_instance_id, topics, owned) in members.items()}
        wanted = {t for s in subscriptions.values() for t in s.topics}
        return assignor(protocol_name).assign(self.partitions_of(wanted), subscriptions)

    def leave(self, *, lost: bool = False, leave_group: bool | None = None) -> None:
        """Leave the group now (unsubscribe, close; `lost` when the heartbeat thread
        leaves for a stuck application): the others rebalance at once instead of
        waiting out the session timeout. A static member sends no LeaveGroup unless
        `leave_group` (Kafka 4's CloseOptions LEAVE_GROUP): it stays in the group
        until its session times out, so a restart within it gets its partitions back
        without a rebalance."""
        send = self.group_instance_id is None if leave_group is None else leave_group
        with self._lock:
            member_id, was_active = self.member_id, self._active
            self._active, self._rejoin_needed = False, True
            self._lost = self._lost or (lost and was_active)   # set before anyone can see the leave
            if send or self.group_instance_id is None:
                self.member_id, self.generation = "", -1
        if member_id and was_active and send:
            try:
                self.coordinator.call("leave_group", member_id, group_instance_id=self.group_instance_id,
                                      timeout_s=self.request_timeout_s)
            except Exception as error:  # the session timeout will remove it instead
                logger.warning("group %s: leaving failed: %s", self.coordinator.group_id, error)

    def close(self, *, leave_group: bool | None = None) -> None:
        self.leave(leave_group=leave_group)
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
                self.coordinator.submit("heartbeat", member_id, generation,
                                        self.group_instance_id).result(timeout=self.request_timeout_s)
            except Exception as error:
                self._learn(kafka_cause(error), member_id, generation)

    def _learn(self, cause: BaseException, member_id: str, generation: int) -> None:
        with self._lock:
            if (member_id, generation) != (self.member_id, self.generation):
                return  # an answer about a membership we no longer hold
            if isinstance(cause, RebalanceInProgress):
                self._rejoin_needed = True
            elif isinstance(cause, FencedInstanceId):
                self._active, self._lost, self._fenced = False, True, cause
            elif isinstance(cause, (IllegalGeneration, UnknownMemberId)):
                self._active, self._lost, self._rejoin_needed = False, True, True
                self.generation = -1
                if isinstance(cause, UnknownMemberId):
                    self.member_id = ""
            elif is_retriable(cause):
                self.coordinator.invalidate()


def assignor_names(strategy: str | Sequence[str]) -> list[str]:
    """partition.assignment.strategy as names core.assignors knows, in order; Kafka's
    class names (org.apache.kafka...RangeAssignor) are taken as their names."""
    raw = strategy.split(",") if isinstance(strategy, str) else list(strategy)
    names = []
    for item in (r.strip() for r in raw if r.strip()):
        name = _KAFKA_CLASS_NAMES.get(item.rsplit(".", 1)[-1], item)
        assignor(name)   # an unknown name fails here, before any join
        if name not in names:
            names.append(name)
    if not names:
        raise ValueError("partition_assignment_strategy names no assignor")
    return names


_KAFKA_CLASS_NAMES = {"RangeAssignor": "range", "RoundRobinAssignor": "roundrobin", "StickyAssignor": "sticky",
                      "CooperativeStickyAssignor": "cooperative-sticky"}
