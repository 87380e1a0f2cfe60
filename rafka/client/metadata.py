"""A client's one metadata cache, filled over the Kafka protocol from any node:
topics, each partition's leader and leader epoch, the nodes' endpoints, group
and transaction coordinators and each topic's max.message.bytes.

As Kafka's client Metadata: a topic is looked up (Metadata v12) on first use and
again after `invalidate(topic)` (NOT_LEADER_OR_FOLLOWER, a lost connection, a
stale epoch); a group's coordinator is found with FindCoordinator and dropped by
`invalidate_coordinator`, a transactional id's likewise (key type
transaction). Every question goes to a bootstrap address first (in
rafka, the controller's listener: its image is the newest; other nodes hold
images it pushed, which can lag), else the node that answered last, else any
node the cluster listed: the controller may be down and its endpoint gone while
the replicas still answer. Nodes in their reconnect backoff are tried last
(Kafka's leastLoadedNode skips them).

`bootstrap_servers` may be a callable that returns them: rafka's clients inside
the cluster pass one that asks the controller (over Ray) for its listener, and
the cache asks it again after a bootstrap address failed to answer. A local cluster's
actors listen on ports of the moment, so after a whole-cluster restart every
address a client knew is gone; under `rafka up` the controller keeps 9092.

Invariants:
  * an answer never moves a partition back to an older leader epoch (KIP-320:
    nodes hold images pushed at different moments, so a node may answer from an
    older one); a topic whose id changed (deleted and created again) is taken
    whole from the newer answer;
  * a lookup is a blocking request: never made on the network's own loop thread
    (it would wait on itself), and bounded by `max_wait_ms` overall (Kafka's
    max.block.ms for a producer's send, default.api.timeout.ms otherwise);
  * thread-safe; the lookups every send makes (a cached topic) take no lock.

Callers: the producer and the consumer (leader endpoints, producer ids),
client.membership (coordinator endpoints), the admin (offset lookups, every
node for ListGroups) and Spark read tasks (leader endpoints).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from rafka.core.errors import (LeaderNotAvailable, NetworkException, RequestTimedOut,
                               UnknownTopicOrPartition)
from rafka.protocol import cluster_requests
from rafka.protocol.cluster_requests import MetadataAnswer, TopicMetadata

Address = tuple[str, int]


def parse_bootstrap_servers(servers: str | Iterable[str | Address] | None) -> list[Address]:
    """"host:port[,host:port...]", or a list of such strings or (host, port) pairs."""
    if servers is None:
        return []
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    found = []
    for item in items:
        if isinstance(item, str):
            host, colon, port = item.strip().rpartition(":")
            if not colon or not host or not port.isdigit():
                raise ValueError(f"bootstrap server {item!r} is not host:port")
            item = (host, int(port))
        found.append((str(item[0]), int(item[1])))
    return found


class MetadataCache:
    def __init__(self, bootstrap_servers, network, *, max_wait_ms: int = 60_000, retry_backoff_ms: int = 100) -> None:
        self._discover = bootstrap_servers if callable(bootstrap_servers) else None
        self._bootstrap = [] if self._discover else parse_bootstrap_servers(bootstrap_servers)
        self._network = network
        self.max_wait_s = max_wait_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._lock = threading.Lock()
        self._nodes: dict[int, Address] = {}
        self._topics: dict[str, TopicMetadata] = {}
        self._stale: set[str] = set()                  # topics to look up afresh
        self._coordinators: dict[str, Address] = {}    # group id -> its coordinator
        self._transaction_coordinators: dict[str, Address] = {}   # transactional id -> its coordinator
        self._max_message_bytes: dict[str, int] = {}
        self._answered_last: Address | None = None
        self._bootstrap_failed = False   # a bootstrap address did not answer: discover them again

    # --- topics and leaders -------------------------------------------------------------

    def needs_refresh(self, topic: str) -> bool:
        """Whether asking about `topic` now would ask a node (a blocking request)."""
        return topic not in self._topics or topic in self._stale

    def partition_count(self, topic: str) -> int:
        return len(self._topic(topic).partitions)

    def topic_id(self, topic: str):
        """The topic's id (KIP-516), as the cache holds it: a KIP-848 member names
        its partitions by topic id."""
        return self._topic(topic).topic_id

    def topic_name(self, topic_id) -> str | None:
        """The name of the topic with this id (a KIP-848 regex member's assignment
        names topics the consumer never asked for): the cache's, else every topic
        asked afresh; None if no topic has it."""
        found = self._cached_name(topic_id)
        if found is None:
            self.topic_names()   # every topic, asked afresh
            found = self._cached_name(topic_id)
        return found

    def _cached_name(self, topic_id) -> str | None:
        with self._lock:
            return next((name for name, topic in self._topics.items() if topic.topic_id == topic_id), None)

    def leader_address(self, topic: str, partition: int) -> tuple[Address, int]:
        """((host, port) of the partition's leader, its leader epoch);
        LeaderNotAvailable while it has no leader or the leader's endpoint is not
        listed (retriable: the topic is looked up again next time)."""
        found = self._topic(topic)
        if not 0 <= partition < len(found.partitions):
            raise UnknownTopicOrPartition(f"Partition {topic}-{partition} does not exist.")
        state = found.partitions[partition]
        address = self._nodes.get(state.leader_node)
        if address is None:
            self.invalidate(topic)
            raise LeaderNotAvailable(f"{topic}-{partition} has no leader with a Kafka endpoint yet")
        return address, state.leader_epoch

    def max_message_bytes(self, topic: str) -> int:
        """The topic's max.message.bytes: the largest record batch its leader takes."""
        return self._cached(self._max_message_bytes, topic, cluster_requests.max_message_bytes_request,
                            cluster_requests.max_message_bytes_answer, what=f"the configs of topic {topic!r}")

    def topic_names(self) -> list[str]:
        """Every topic but the internal ones, asked afresh (pattern subscriptions)."""
        answer = self._ask(cluster_requests.metadata_request(None), cluster_requests.metadata_answer,
                           what="the metadata of every topic")
        self._take(answer, asked=None)
        return sorted(name for name, topic in answer.topics.items() if not topic.is_internal)

    def invalidate(self, topic: str) -> None:
        with self._lock:
            self._stale.add(topic)

    # --- nodes and coordinators -----------------------------------------------------

    def coordinator_address(self, group_id: str) -> Address:
        """(host, port) of the group's coordinator (FindCoordinator);
        COORDINATOR_NOT_AVAILABLE (retriable) while it has no endpoint."""
        return self._cached(self._coordinators, group_id, cluster_requests.find_coordinator_request,
                            cluster_requests.find_coordinator_answer, what=f"the coordinator of group {group_id!r}")

    def invalidate_coordinator(self, group_id: str) -> None:
        """The coordinator moved, restarted or is loading: find it afresh."""
        self._coordinators.pop(group_id, None)

    def transaction_coordinator_address(self, transactional_id: str) -> Address:
        """(host, port) of the transactional id's coordinator (FindCoordinator with
        key type transaction: the coordinator of its __transaction_state partition)."""
        return self._cached(self._transaction_coordinators, transactional_id,
                            lambda key: cluster_requests.find_coordinator_request(
                                key, key_type=cluster_requests.TRANSACTION_KEY_TYPE),
                            cluster_requests.find_coordinator_answer,
                            what=f"the coordinator of transactional id {transactional_id!r}")

    def invalidate_transaction_coordinator(self, transactional_id: str) -> None:
        self._transaction_coordinators.pop(transactional_id, None)

    def node_addresses(self) -> list[Address]:
        """Every node the cluster lists, asked afresh (Kafka's admin sends ListGroups
        to every broker)."""
        answer = self._ask(cluster_requests.metadata_request(()), cluster_requests.metadata_answer,
                           what="the cluster's nodes")
        self._take(answer, asked=())
        return sorted(set(answer.nodes.values()))

    def ask_any_node(self, request: Any, read: Callable[[Any], Any], *, what: str) -> Any:
        """`read(answer)` of `request` sent to a node chosen as for metadata (e.g.
        InitProducerId)."""
        return self._ask(request, read, what=what)

    # --- the lookups ------------------------------------------------------------------

    def _cached(self, cache: dict, key: str, request_for, read, *, what: str):
        """cache[key], else `read(answer, key)` of `request_for(key)` from a node, kept."""
        found = cache.get(key)
        if found is None:
            found = cache[key] = self._ask(request_for(key), lambda response: read(response, key), what=what)
        return found

    def _topic(self, topic: str) -> TopicMetadata:
        found = self._topics.get(topic)   # the fast path, every send: one read, no lock (the GIL orders it)
        if found is not None and topic not in self._stale:
            return found
        answer = self._ask(cluster_requests.metadata_request([topic]), cluster_requests.metadata_answer,
                           what=f"the metadata of topic {topic!r}")
        self._take(answer, asked=[topic])
        error = answer.topic_errors.get(topic)
        if error is not None:
            raise error
        found = self._topics.get(topic)
        if found is None:
            raise UnknownTopicOrPartition(f"Topic '{topic}' does not exist.")
        return found

    def _take(self, answer: MetadataAnswer, *, asked: Iterable[str] | None) -> None:
        """Merge an answer: nodes replaced, topics taken unless they would go back
        in leader epoch; a topic the node does not know (deleted) is dropped."""
        with self._lock:
            if answer.nodes:
                self._nodes = dict(answer.nodes)
            for name, topic in answer.topics.items():
                self._topics[name] = _newer(self._topics.get(name), topic)
                self._stale.discard(name)
            gone = set(answer.topic_errors) if asked is not None else set(self._topics) - set(answer.topics)
            for name in gone:
                self._topics.pop(name, None)
                self._max_message_bytes.pop(name, None)
                self._stale.discard(name)

    def _ask(self, request: Any, read: Callable[[Any], Any], *, what: str) -> Any:
        """`read(answer)` from the first node that answers: the bootstrap addresses,
        the one that answered last, then every listed node, round after round
        (retry_backoff_ms between rounds) until max_wait_ms. When they come from a
        callable, the bootstrap addresses are discovered again before a round
        after one of them failed. A refused or lost connection moves on to the
        next node; an error the node answered is the caller's."""
        if threading.current_thread() is self._network.thread:
            raise RuntimeError(f"looking up {what} on the network's own loop would wait on itself")
        deadline = time.monotonic() + self.max_wait_s
        last_error: Exception | None = None
        while True:
            if self._discover is not None and (self._bootstrap_failed or not self._bootstrap):
                try:
                    self._bootstrap = parse_bootstrap_servers(self._discover())
                    self._bootstrap_failed = False
                except Exception as error:   # the controller restarting: the next round asks again
                    last_error = error
            known = list(dict.fromkeys(self._bootstrap + ([self._answered_last] if self._answered_last else [])
                                       + list(self._nodes.values())))
            if not known and self._discover is None:
                raise NetworkException(f"no bootstrap server to ask for {what}")
            # Nodes in their reconnect backoff would each wait it out (up to a second):
            # a round asks the others, or only the first of them when all are.
            candidates = [a for a in known if not self._network.nodes.backing_off(a)] or known[:1]
            for address in candidates:
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0:
                    break
                try:
                    timeout_ms = max(1, min(int(remaining_s * 1000), self._network.nodes.request_timeout_ms))
                    answered = self._network.submit(address, request, timeout_ms=timeout_ms)
                    result = read(answered.result(timeout=timeout_ms / 1000 + 1))
                except NetworkException as error:
                    last_error = error
                    if address in self._bootstrap:
                        self._bootstrap_failed = True
                    continue
                self._answered_last = address
                return result
            if time.monotonic() + self.retry_backoff_s >= deadline:
                raise RequestTimedOut(f"no node answered {what} in {self.max_wait_s:.1f}s; last error: {last_error}")
            time.sleep(self.retry_backoff_s)


def _newer(cached: TopicMetadata | None, answered: TopicMetadata) -> TopicMetadata:
    """`answered`, but each partition kept as cached where the answer's leader epoch
    is older (a node with an older image); a new topic id replaces the topic whole."""
    if cached is None or cached.topic_id != answered.topic_id:
        return answered
    if len(answered.partitions) < len(cached.partitions):
        return cached   # an image from before partitions were added
    partitions = tuple(old if old.leader_epoch > new.leader_epoch else new
                       for old, new in zip(cached.partitions, answered.partitions))
    partitions += answered.partitions[len(cached.partitions):]
    return TopicMetadata(answered.name, answered.topic_id, answered.is_internal, partitions)
