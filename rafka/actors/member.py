"""A member of a consumer group that rafka runs: a Ray actor around one subscribed
Consumer, and the driver's handle on a group of them.

Each member loops: poll, call the user's handler with the batch, commit the
batch's end positions with commit_sync, and only then poll again. So delivery is
at least once: a member that dies between the handler and the commit leaves
those records uncommitted, and whoever gets the partition next handles them
again; no record below a committed offset was left unhandled.

Invariants:
  the member commits only positions of records the handler returned from
  the member's committed offsets come only from its own commit_sync; a commit
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
"""

from __future__ import annotations

import logging
import os
import threading
import time

import ray
from ray.util.placement_group import placement_group, remove_placement_group

from rafka.actors.replica import NAMESPACE
from rafka.core.errors import IllegalGeneration, KafkaError, RebalanceInProgress, UnknownMemberId
from rafka.placement.groups import BROKER_RESOURCE, in_bundle

logger = logging.getLogger(__name__)
MEMBER_CPU = 0.01
_handling = threading.local()   # the generation of the batch the member's handler is handling


def handling_generation() -> int | None:
    """Inside a member actor's handler: the group generation its batch was polled
    in (Kafka's consumer.groupMetadata().generationId); None elsewhere."""
    return getattr(_handling, "generation", None)


def member_actor_name(group_id: str, index: int) -> str:
    return f"member:{group_id}:{index}"


class ConsumerMemberActor:
    def __init__(self, *, group_id: str, topics: list[str], handler, index: int,
                 poll_timeout_s: float = 0.5, **consumer_options) -> None:
        from rafka.actors.cluster_credential import cluster_client_options
        from rafka.actors.controller import cluster_bootstrap_servers
        from rafka.client.consumer import Consumer

        # A static member (KIP-345) named after the actor: when Ray restarts the actor
        # within the session timeout it takes its old place and partitions, and the
        # other members are not rebalanced.
        options = {"auto_offset_reset": "earliest", "client_id": f"{group_id}-member-{index}",
                   "group_instance_id": member_actor_name(group_id, index),
                   **cluster_client_options(), **consumer_options}
        self.consumer = Consumer(cluster_bootstrap_servers, group_id=group_id, enable_auto_commit=False,
                                 **options)
        self.consumer.subscribe(topics)
        self.handler = handler
        self.index = index
        self.poll_timeout_s = poll_timeout_s
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._progress = {"handled": 0, "batches": 0, "committed": {}, "assignment": [],
                          "member_id": "", "generation": -1, "error": None, "started_s": time.time(),
                          "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                          "refused_commits": 0}
        self._loop = threading.Thread(target=self._run, daemon=True, name=f"member-{index}")
        self._loop.start()

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                records = self.consumer.poll(timeout=self.poll_timeout_s)
                joined = self.consumer.group_metadata()
                self._progress.update(assignment=sorted(tuple(tp) for tp in self.consumer.assignment()),
                                      member_id=joined.member_id, generation=joined.generation_id)
                if not records:
                    continue
                _handling.generation = joined.generation_id
                try:
                    self.handler(records)
                finally:
                    _handling.generation = None
                ends = {}
                for record in records:
                    ends[(record.topic, record.partition)] = record.offset + 1
                try:
                    self.consumer.commit_sync({tp: offset for tp, offset in ends.items()})
                except (IllegalGeneration, UnknownMemberId, RebalanceInProgress) as error:
                    logger.info("member %d: commit refused, the group moved on: %s", self.index, error)
                    self._progress["refused_commits"] += 1
                    continue
                self._progress["handled"] += len(records)
                self._progress["batches"] += 1
                self._progress["committed"] = {**self._progress["committed"], **ends}
        except KafkaError as error:
            self._progress["error"] = f"{type(error).__name__}: {error}"
            logger.error("member %d stopped on %s", self.index, error)
        finally:
            try:   # stopped: leave at once; an error: keep the place for a restart
                self.consumer.close(leave_group=self._stopping.is_set())
            finally:
                self._stopped.set()

    def describe(self) -> dict:
        """Progress as of now: member id, generation, assignment, records handled,
        batches committed, last committed offset per partition, error if any."""
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
        """Stop every member (each leaves the group), then remove the actors."""
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
        return final


def run_consumer_group(group_id: str, topics: list[str], handler, *, members: int,
                       ready_timeout_s: float = 60.0, **consumer_options) -> ConsumerGroupHandle:
    """N ConsumerMember actors, one per bundle of a SPREAD placement group over the
    broker nodes (with fewer nodes than members, some share a node)."""
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
                   group_id=group_id, topics=list(topics), handler=handler, index=i, **consumer_options)
               for i in range(members)]
    ray.get([h.describe.remote() for h in handles], timeout=ready_timeout_s)
    return ConsumerGroupHandle(group_id, handles, group)
