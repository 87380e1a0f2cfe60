"""A one-node Kafka cluster in this process, without Ray: core PartitionReplicas
(replication factor 1) served by the real ProtocolServer and handlers, on a thread
with its own event loop. The wire-protocol tests drive it with our Connection and
with clients nobody here wrote (kafka-python, librdkafka's kcat).

The endpoint below stands in for the replica actor: the same calls, the same
parking (a fetch waits for data or its max wait), no Ray.
"""

from __future__ import annotations

import asyncio
import random
import threading

from rafka.core.actor_names import CONTROLLER_NAME, replica_actor_name
from rafka.core.clock import SystemClock
from rafka.core.cluster_image import build_image
from rafka.core.config import TopicConfig
from rafka.core.metadata import ClusterMetadata
from rafka.core.replica import ACKS_ALL, PartitionReplica
from rafka.protocol.dispatch import DispatchTable, Dispatcher
from rafka.protocol.handlers import (api_versions, fetch, find_coordinator, init_producer_id, list_offsets,
                                     metadata, produce)
from rafka.protocol.server import ProtocolServer


class LocalEndpoint:
    def __init__(self, replica: PartitionReplica) -> None:
        self.replica = replica
        self.changed = asyncio.Event()

    async def produce(self, records: bytes, acks: int, request_timeout_ms: int = 30_000):
        result = self.replica.append(records, acks=acks)
        self.changed.set()
        self.changed = asyncio.Event()
        if acks == ACKS_ALL:
            assert self.replica.is_committed(result.last_offset)   # replication factor 1
        return result

    async def consumer_fetch(self, fetch_offset: int, max_bytes: int, max_wait_ms: int, leader_epoch=None):
        deadline = asyncio.get_running_loop().time() + max_wait_ms / 1000
        while True:
            result = self.replica.fetch_for_consumer(fetch_offset=fetch_offset, max_bytes=max_bytes,
                                                     leader_epoch=leader_epoch)
            remaining = deadline - asyncio.get_running_loop().time()
            if result.records or remaining <= 0:
                return result
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    async def list_offset(self, timestamp_ms: int, leader_epoch=None):
        return self.replica.list_offset(timestamp_ms=timestamp_ms, leader_epoch=leader_epoch)


class ProtocolNode:
    """Start with `with ProtocolNode(tmp_path, {"orders": 2}) as node:`;
    `node.bootstrap` is host:port."""

    def __init__(self, directory, topics: dict[str, int]) -> None:
        self.directory = directory
        self.topics = topics
        self.metadata = ClusterMetadata()
        self.endpoints: dict[tuple[str, int], LocalEndpoint] = {}
        self._image = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="protocol-node", daemon=True)
        self.port = None

    def image(self):
        return self._image

    def endpoint(self, topic: str, partition: int):
        return self.endpoints.get((topic, partition))

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> ProtocolNode:
        self._thread.start()
        self.port = self.call(self._start())
        return self

    def __exit__(self, *exc) -> None:
        self.call(self.server.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        for endpoint in self.endpoints.values():
            endpoint.replica.close()

    def call(self, coroutine, timeout_s: float = 30):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)

    async def _start(self) -> int:
        apply = self._apply
        apply(self.metadata.handle_start())
        clock = SystemClock()
        for name, count in self.topics.items():
            records, _ = self.metadata.handle_create_topic(name, count, 1, {"min.insync.replicas": 1}, [0],
                                                           rng=random.Random(0))
            apply(records)
            for p in range(count):
                replica = PartitionReplica(topic=name, partition=p, replica_id=0,
                                           directory=self.directory / f"{name}-{p}",
                                           config=TopicConfig.from_dict({"min.insync.replicas": 1}), clock=clock,
                                           replica_lag_time_max_ms=30_000)
                replica.become_leader(leader_epoch=0, replicas=[0], isr=[0], partition_epoch=0)
                self.endpoints[(name, p)] = LocalEndpoint(replica)
        self.server = ProtocolServer(Dispatcher(DispatchTable([
            api_versions.ROUTE, metadata.route(self.image), find_coordinator.route(self.image),
            produce.route(self), fetch.route(self),
            list_offsets.route(self), init_producer_id.route(self._allocate_producer_id)])), host="127.0.0.1")
        port = await self.server.start()
        # One process, one port: every actor of this cluster is this one node.
        apply(self.metadata.handle_register_node(CONTROLLER_NAME, "127.0.0.1", port)[0])
        for name, count in self.topics.items():
            for p in range(count):
                records, node = self.metadata.handle_register_node(replica_actor_name(name, p, 0), "127.0.0.1",
                                                                   port, "0")
                apply(records)
        # Every actor shares the port, so every node id must be the one node: Kafka
        # clients key connections by node id, and ids mapping to one address are fine.
        self._image = build_image(self.metadata, version=1)
        return port

    async def _allocate_producer_id(self) -> int:
        records, producer_id = self.metadata.handle_allocate_producer_id()
        self._apply(records)
        return producer_id

    def _apply(self, records) -> None:
        for record in records:
            self.metadata.replay(record)
