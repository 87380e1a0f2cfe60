"""The controller actor: owns the cluster metadata and the replica actors' lives.

State changes go through core.metadata (handlers return records, `replay`
applies them). The controller appends each record to its metadata log (JSON
lines, fsynced) before replaying it, so a killed and restarted controller reads
the log back and has the same topics, leaders, epochs and ISRs; its controller
epoch goes up by one at every start.

The controller creates one placement group per partition (STRICT_SPREAD) and a
named, restartable replica actor per bundle; it tells each replica its role. A
watch loop pings every leader: a leader that is dead or does not answer within
`leader_ping_timeout_ms` is replaced by the first available ISR member.

Named `controller` in namespace `rafka`, detached, pinned to the head node.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import ray

from rafka.actors.replica import NAMESPACE, ReplicaActor, replica_actor_name
from rafka.core.metadata import ClusterMetadata, PartitionState
from rafka.placement.groups import (BROKER_RESOURCE, in_bundle, partition_group_name,
                                   partition_placement_group, remove_placement_group)

CONTROLLER_NAME = "controller"
METADATA_LOG = "metadata.log"
logger = logging.getLogger(__name__)


def live_broker_nodes() -> list[str]:
    return [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get(BROKER_RESOURCE, 0) > 0]


RESTARTED = ("follower", -1)  # a replica actor that came back and was not told its role yet


class ControllerActor:
    def __init__(self, *, data_dir: str, replica_lag_time_max_ms: int = 30_000,
                 fetch_max_wait_ms: int = 500, leader_ping_timeout_ms: int = 2_000,
                 log_retention_check_interval_ms: int = 300_000, log_cleaner_backoff_ms: int = 15_000,
                 watch_interval_ms: int = 250) -> None:
        self.data_dir = data_dir
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.log_retention_check_interval_ms = log_retention_check_interval_ms
        self.log_cleaner_backoff_ms = log_cleaner_backoff_ms
        self.leader_ping_timeout_ms = leader_ping_timeout_ms
        self.watch_interval_ms = watch_interval_ms
        directory = Path(data_dir) / "controller"
        directory.mkdir(parents=True, exist_ok=True)
        self.metadata = ClusterMetadata()
        self._log_path = directory / METADATA_LOG
        self._load()
        self._commit(self.metadata.handle_start())
        self._lock = asyncio.Lock()
        self._watcher: asyncio.Task | None = None
        self._starting: set[tuple[str, int]] = set()  # partitions not yet announced: not watched
        # An actor cannot start tasks in __init__: ask ourselves for a ping, which starts
        # the watch loop, so a restarted controller watches leaders again at once. The
        # ping is retried: a restarting actor's call to itself from __init__ can fail
        # with ACTOR_UNAVAILABLE ("the actor is restarting"; seen with Ray 2.60), and
        # then only the next caller's ping would start the loop.
        ray.get_runtime_context().current_actor.ping.options(max_task_retries=-1).remote()

    # --- the metadata log ---------------------------------------------------------

    def _load(self) -> None:
        if not self._log_path.exists():
            return
        lines = self._log_path.read_bytes().split(b"\n")
        valid = 0
        for line in lines:
            if not line:
                break
            try:
                record = json.loads(line)
            except ValueError:
                break  # a torn last line: everything after it is unwritten
            self.metadata.replay(record)
            valid += len(line) + 1
        with open(self._log_path, "r+b") as f:
            f.truncate(valid)

    def _commit(self, records: list[dict]) -> None:
        with open(self._log_path, "ab") as f:
            f.write(b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records))
            f.flush()
            os.fsync(f.fileno())
        for record in records:
            self.metadata.replay(record)

    # --- topics -------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           config: dict | None = None) -> dict:
        async with self._lock:
            records, topic = self.metadata.handle_create_topic(
                name, partitions, replication_factor, config, len(live_broker_nodes()))
            self._commit(records)
            self._starting.update((name, p) for p in range(partitions))
        try:
            await asyncio.gather(*(self._start_partition(name, p) for p in range(partitions)))
        finally:
            self._starting.difference_update((name, p) for p in range(partitions))
        self._ensure_watcher()
        return self._describe_topic(name)

    async def _start_partition(self, topic: str, partition: int) -> None:
        state = self.metadata.partition(topic, partition)
        group = partition_placement_group(topic, partition, len(state.replicas))
        await group.ready()
        config = self.metadata.topic(topic).config
        actor = ray.remote(ReplicaActor)
        for replica_id in state.replicas:
            actor.options(name=replica_actor_name(topic, partition, replica_id), namespace=NAMESPACE,
                          lifetime="detached", max_restarts=-1, max_task_retries=0, num_cpus=0,
                          scheduling_strategy=in_bundle(group, replica_id)).remote(
                topic=topic, partition=partition, replica_id=replica_id, data_dir=self.data_dir,
                config=config, replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                fetch_max_wait_ms=self.fetch_max_wait_ms,
                log_retention_check_interval_ms=self.log_retention_check_interval_ms,
                log_cleaner_backoff_ms=self.log_cleaner_backoff_ms)
        await self._announce(topic, partition, state)

    async def _announce(self, topic: str, partition: int, state: PartitionState) -> None:
        """Tell the leader, then the followers, their roles at the current epoch."""
        if not state.online:
            return
        leader = self._replica(topic, partition, state.leader)
        await leader.become_leader.remote(state.leader_epoch, list(state.replicas), list(state.isr),
                                          state.partition_epoch)
        followers = [self._replica(topic, partition, r) for r in state.replicas if r != state.leader]
        results = await asyncio.gather(*(f.become_follower.remote(state.leader, state.leader_epoch)
                                         for f in followers), return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                logger.info("%s-%d: a follower did not take its role yet: %s", topic, partition, result)

    @staticmethod
    def _replica(topic: str, partition: int, replica_id: int):
        return ray.get_actor(replica_actor_name(topic, partition, replica_id), namespace=NAMESPACE)

    async def allocate_producer_id(self) -> int:
        async with self._lock:
            records, producer_id = self.metadata.handle_allocate_producer_id()
            self._commit(records)
        return producer_id

    async def delete_topic(self, name: str) -> None:
        """Remove the topic from the metadata first (clients stop finding it), then
        its replicas' logs, actors and placement groups."""
        async with self._lock:
            topic = self.metadata.topic(name)
            self._commit(self.metadata.handle_delete_topic(name))
        for partition, state in enumerate(topic.partitions):
            replicas = []
            for replica_id in state.replicas:
                try:
                    replicas.append(self._replica(name, partition, replica_id))
                except ValueError:
                    continue
            results = await asyncio.gather(*(r.delete_log.remote() for r in replicas), return_exceptions=True)
            for replica, result in zip(replicas, results):
                if isinstance(result, Exception):
                    logger.warning("%s-%d: a replica's log was not deleted: %s", name, partition, result)
                ray.kill(replica, no_restart=True)
            try:
                remove_placement_group(ray.util.get_placement_group(partition_group_name(name, partition)))
            except ValueError:
                pass

    async def list_brokers(self) -> list[dict]:
        """The broker registry: live Ray nodes that offer the rafka broker resource. A
        node that dies leaves it (Ray's node table is the source of liveness)."""
        return [{"node_id": n["NodeID"], "address": n["NodeManagerAddress"]}
                for n in ray.nodes() if n["Alive"] and n["Resources"].get(BROKER_RESOURCE, 0) > 0]

    async def list_topics(self) -> list[str]:
        return sorted(self.metadata.topics)

    async def metadata_snapshot(self) -> dict:
        return {"cluster_id": self.metadata.cluster_id, "controller_epoch": self.metadata.controller_epoch,
                "topics": {name: self._describe_topic(name) for name in self.metadata.topics}}

    def _describe_topic(self, name: str) -> dict:
        topic = self.metadata.topic(name)
        return {"name": name, "topic_id": topic.topic_id, "config": topic.config,
                "partitions": [{"partition": p, "leader": s.leader, "leader_epoch": s.leader_epoch,
                                "partition_epoch": s.partition_epoch, "replicas": list(s.replicas),
                                "isr": list(s.isr)} for p, s in enumerate(topic.partitions)]}

    # --- ISR changes and elections ------------------------------------------------

    async def alter_isr(self, topic: str, partition: int, leader: int, leader_epoch: int,
                        partition_epoch: int, new_isr: list[int]) -> dict:
        async with self._lock:
            records, state = self.metadata.handle_alter_isr(topic, partition, leader, leader_epoch,
                                                            partition_epoch, new_isr)
            self._commit(records)
        return {"isr": list(state.isr), "partition_epoch": state.partition_epoch}

    async def elect_leader(self, topic: str, partition: int, unavailable: list[int]) -> dict:
        async with self._lock:
            records, state = self.metadata.handle_elect_leader(topic, partition, unavailable)
            self._commit(records)
        await self._announce(topic, partition, state)
        return {"leader": state.leader, "leader_epoch": state.leader_epoch, "isr": list(state.isr)}

    def _ensure_watcher(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch_leaders())

    async def _watch_leaders(self) -> None:
        """Every partition is checked concurrently: a paused node makes each of its
        pings wait `leader_ping_timeout_ms`, which must not delay the failover of
        partitions elsewhere."""
        while True:
            await asyncio.sleep(self.watch_interval_ms / 1000)
            partitions = [(name, p) for name, topic in list(self.metadata.topics.items())
                          for p in range(len(topic.partitions)) if (name, p) not in self._starting]
            results = await asyncio.gather(*(self._check_partition(name, p) for name, p in partitions),
                                           return_exceptions=True)
            for (name, partition), result in zip(partitions, results):
                if isinstance(result, Exception):  # keep watching the other partitions
                    logger.warning("checking %s-%d failed: %s", name, partition, result)

    async def _check_partition(self, topic: str, partition: int) -> None:
        """Replace a leader that is gone, unresponsive or restarted (a restarted actor
        has no role); give restarted followers their role back."""
        state = self.metadata.partition(topic, partition)
        roles = await asyncio.gather(*(self._role_of(topic, partition, r) for r in state.replicas))
        role_by_replica = dict(zip(state.replicas, roles))
        # Gone, paused or restarted (its log may be gone with its node) replicas may not lead.
        unavailable = [r for r, role in role_by_replica.items() if role is None or role == RESTARTED]
        if state.online and role_by_replica[state.leader] != ("leader", state.leader_epoch):
            await self.elect_leader(topic, partition, sorted(set(unavailable) | {state.leader}))
            return
        if not state.online:
            if any(r in state.isr for r in state.replicas if r not in unavailable):
                await self.elect_leader(topic, partition, unavailable)
            return
        restarted = [r for r, role in role_by_replica.items() if role == RESTARTED and r in state.isr]
        if restarted:
            await self._remove_from_isr(topic, partition, restarted)
            state = self.metadata.partition(topic, partition)
        for replica_id, role in role_by_replica.items():
            if replica_id != state.leader and role is not None and role != ("follower", state.leader_epoch):
                await self._replica(topic, partition, replica_id).become_follower.remote(
                    state.leader, state.leader_epoch)

    async def _remove_from_isr(self, topic: str, partition: int, replica_ids: list[int]) -> None:
        async with self._lock:
            records, state = self.metadata.handle_remove_from_isr(topic, partition, replica_ids)
            self._commit(records)
        if records:
            logger.info("%s-%d: restarted replicas %s leave the ISR", topic, partition, replica_ids)
            await self._replica(topic, partition, state.leader).apply_isr.remote(
                list(state.isr), state.partition_epoch)

    async def _role_of(self, topic: str, partition: int, replica_id: int):
        try:
            replica = self._replica(topic, partition, replica_id)
            answer = await asyncio.wait_for(replica.ping.remote(), timeout=self.leader_ping_timeout_ms / 1000)
            return answer["role"], answer["leader_epoch"]
        except (asyncio.TimeoutError, ValueError, ray.exceptions.RayActorError):
            return None

    async def ping(self) -> int:
        self._ensure_watcher()
        return self.metadata.controller_epoch
