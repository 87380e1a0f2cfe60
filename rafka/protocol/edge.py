"""A broker's Kafka node: the one address clients see for a broker (node id =
broker id, at the broker's fixed port), routing each request inside the broker
to the actor it is for. Kafka's shape at the edge (DESIGN section 2); the actors
keep their own nodes as the internal listener (core.cluster_image).

Routes, by API:
  * answered here from the broker view of the cluster image: ApiVersions,
    Metadata, FindCoordinator, DescribeConfigs, InitProducerId without a transactional
    id, DescribeAcls, DescribeClientQuotas, DescribeCluster, SASL; DescribeLogDirs and AlterReplicaLogDirs from this
    broker's disk;
  * partition APIs (Produce, Fetch, ListOffsets, OffsetForLeaderEpoch,
    DeleteRecords): each
    partition goes to its leader replica's actor when that replica runs on this
    broker; any other partition is answered here as Kafka's broker answers one it
    does not lead (NOT_LEADER_OR_FOLLOWER; UNKNOWN_TOPIC_OR_PARTITION if no such
    partition exists). DescribeProducers goes to this broker's replica of the
    partition, leader or follower (Kafka answers it from any replica's log:
    kafka-transactions.sh describe-producers --broker-id);
  * WriteTxnMarkers (an operator's abort, kafka-transactions.sh abort; the
    coordinators send theirs to the actors' own nodes): each partition's marker
    to its leader's actor here, a `__consumer_offsets` partition's to its group
    coordinator's actor here, the rest answered here (NOT_LEADER_OR_FOLLOWER);
  * group APIs (TxnOffsetCommit among them): to the group's coordinator actor
    when it runs on this broker, else NOT_COORDINATOR from here; ListGroups asks
    every coordinator here;
  * transaction APIs, as the group APIs: InitProducerId with a transactional
    id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and DescribeTransactions to
    the coordinator of each id's `__transaction_state` partition when it runs on
    this broker, else NOT_COORDINATOR from here; ListTransactions asks every
    transaction coordinator here. InitProducerId without one is answered here
    (an idempotent producer's id, from the controller);
  * topic, config, ACL and client quota administration, leader elections and
    partition reassignments: to the controller's node, from any broker
    (Kafka's brokers forward it to the controller, KIP-590); tried again once on
    a new connection if the first is lost, then answered REQUEST_TIMED_OUT
    (retriable) as Kafka's forwarding answers an unreachable controller
    (`ControllerUnreachable`: the broker's topic administration), never
    NOT_CONTROLLER (librdkafka takes that as the topic's final answer). The
    BROKER_LOGGER resources of an IncrementalAlterConfigs are this broker's
    own, answered here (ITEMS_ANSWERED_HERE), the rest relayed, as Kafka's
    broker keeps them from what it forwards;
A request whose work all goes to one actor is relayed as the bytes it came in
(the hot path: nothing is re-encoded, batches stay bytes); one that spans several
is split into one request per actor (records still as bytes) and the answers
merged. A Fetch spanning several actors answers once one of them has data or all
have waited: the others' waits are abandoned (answered and dropped) and they are
read again without waiting, so no partition waits for another's max_wait.

Upstream connections: each client connection gets its own connections to the
actors it reaches, so its requests keep Kafka's per-connection order and one
client's long poll never holds another's requests. A connection whose requests
were all abandoned is replaced for new requests (at most MAX_CHANNELS per actor
per client connection; beyond that, new requests queue behind). They close with
the client's connection. An actor that cannot be reached (restarting, gone)
gets the answer this node gives for work that is not here: retriable errors that
send the client back to Metadata; one the image still names is first tried again
for a few seconds, the client's later requests to it waiting in order behind (a
request answered for it while a later one reached it would break that order).

Who asks: relayed requests reach the actors on the broker's own connections
(the cluster's login, a super user, on every cluster), so what the client's
principal may do is decided here, before anything is relayed, by the same step
every handler takes (protocol.authorization, on this node's broker view). This is
Kafka's model: a broker authorizes each request in KafkaApis before its
ReplicaManager or group coordinator sees it, and the actors behind this node are
those parts of the broker. Kafka forwards a client's principal (an Envelope,
KIP-590) only to the controller, which authorizes administration itself and
charges it to the client's controller_mutation_rate; so does this edge
(handlers.envelope): the edge decides administration first (the controller's
image and this node's hold the same bindings), and what it relays to the
controller goes in an envelope, run there as the client's. No other actor needs
a second, impersonated principal.
  * a request refused as a whole, or one this node cannot split (a later API
    routed here), with any part refused: answered here whole, by the handler,
    which answers the refusals (and, for the rest, what a broker that hosts none
    of it answers); nothing is relayed;
  * refused topics of a partition API, refused groups of DescribeGroups and
    DeleteGroups, refused topics of an (Txn)OffsetCommit or OffsetDelete, refused
    topics and config resources of topic and config administration: answered
    here (the handler refuses them), the permitted rest relayed, and the answers
    merged, as a split request's are;
  * ListGroups and OffsetFetch are read only: relayed as asked, and the answer
    keeps only what the client may see (groups it may describe; refused topics'
    offsets answered TOPIC_AUTHORIZATION_FAILED, or left out of an all-offsets
    answer).

Client quotas (protocol.throttling): a Produce or a consumer's Fetch of a client
with a byte-rate quota is measured here, per broker, and so is the time this
node spends on each request of a client with a request_percentage; over either,
the answer carries its throttle time, its connection muted for that time (KIP-219).

Invariants: the handlers here read only the image (broker view and internal
endpoints) and never wait on Ray; every upstream request is one the client sent
(or a part of it), so bounds on client requests bound the relayed ones.
Callers: actors.broker (each broker's network processes), tests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from kio.serial import entity_reader
from kio.static.primitive import i32, i32Timedelta

from kio.schema.errors import ErrorCode
from kio.static.primitive import i64

from rafka.core.acl import AclOperation, ResourceType
from rafka.core.actor_names import OFFSETS_TOPIC
from rafka.core.cluster_image import ClusterImage
from rafka.core.errors import NetworkException, RequestTimedOut
from rafka.core.offsets_schema import partition_for_group
from rafka.protocol.authorization import check_of, config_acl_resource, decide, gate
from rafka.core.transaction_log import partition_for as partition_for_transaction
from rafka.protocol.connection import Connection, SaslLogin
from rafka.protocol.dispatch import (ANONYMOUS_SESSION, FETCH_KEY, PRODUCE_KEY, DispatchTable, Dispatcher,
                                    ParsedRequest, RequestContext, Session, encode_response, read_answer,
                                    request_frame)
from rafka.protocol.framing import peek_api_key_and_version
from rafka.protocol.handlers import alter_configs, envelope
from rafka.protocol.hot_writers import WrittenBody
from rafka.protocol.pipelining import admission
from rafka.protocol.retry import retry_until_async
from rafka.protocol.throttling import EdgeQuotas

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
MAX_CHANNELS = 3           # upstream connections per actor per client connection
# An actor the newest image names that refuses a connection (starting, restarting)
# is tried again every UPSTREAM_OPEN_RETRY_MS until UPSTREAM_OPEN_WAIT_MS have
# passed (each connect bounded by what is left), then its requests are answered
# for it (`_open`).
UPSTREAM_OPEN_WAIT_MS = 5_000
UPSTREAM_OPEN_RETRY_MS = 50
Endpoint = tuple[str, int]


@dataclasses.dataclass(frozen=True)
class _PartitionApi:
    """Where a partition API keeps its topics and partitions, request and answer."""
    topics: str
    partitions: str
    partition_index: str | None   # None: the request's partitions are the indexes themselves
    answer_topics: str
    answer_partitions: str
    any_replica: bool = False     # served by this broker's replica in any role, not by the leader only


PARTITION_APIS = {
    0: _PartitionApi("topic_data", "partition_data", "index", "responses", "partition_responses"),
    1: _PartitionApi("topics", "partitions", "partition", "responses", "partitions"),
    2: _PartitionApi("topics", "partitions", "partition_index", "topics", "partitions"),
    23: _PartitionApi("topics", "partitions", "partition", "topics", "partitions"),
    21: _PartitionApi("topics", "partitions", "partition_index", "topics", "partitions"),   # DeleteRecords
    61: _PartitionApi("topics", "partition_indexes", None, "topics", "partitions", any_replica=True),
}
# APIs about one group, named by group_id
# OffsetCommit, Join, Heartbeat, Leave, Sync, TxnOffsetCommit, OffsetDelete, ConsumerGroupHeartbeat
SINGLE_GROUP_APIS = frozenset({8, 11, 12, 13, 14, 28, 47, 68})
OFFSET_FETCH_KEY = 9       # group_id (v0-7) or groups[].group_id (v8+)
# APIs about several groups: request list field (of names or of entries), answer list field
GROUP_LIST_APIS = {9: ("groups", "groups"), 15: ("groups", "groups"), 42: ("groups_names", "results"),
                   69: ("group_ids", "groups")}   # ConsumerGroupDescribe
LIST_GROUPS_KEY = 16
INIT_PRODUCER_ID_KEY = 22
ADD_PARTITIONS_TO_TXN_KEY = 24
FIRST_BATCHED_ADD_PARTITIONS_VERSION = 4   # a batch of transactions (KIP-890) instead of one
# APIs about one transactional id: the request field naming it. InitProducerId,
# AddPartitionsToTxn (v0-3), AddOffsetsToTxn, EndTxn
SINGLE_TRANSACTION_APIS = {22: "transactional_id", 24: "v3_and_below_transactional_id", 25: "transactional_id",
                           26: "transactional_id"}
# APIs about several transactional ids: request list field (of ids or of entries), answer list field.
# AddPartitionsToTxn v4+, DescribeTransactions
TRANSACTION_LIST_APIS = {24: ("transactions", "results_by_transaction"), 65: ("transactional_ids", "transaction_states")}
LIST_TRANSACTIONS_KEY = 66
TRANSACTION_APIS = frozenset(SINGLE_TRANSACTION_APIS) | frozenset(TRANSACTION_LIST_APIS) | {LIST_TRANSACTIONS_KEY}
# the administration relayed to the controller, in envelopes (handlers.envelope)
CONTROLLER_APIS = envelope.FORWARDED_APIS
WRITE_TXN_MARKERS_KEY = 27
# every API routed to the actors (the rest is answered here): one set lookup a request
ROUTED_APIS = (frozenset(PARTITION_APIS) | SINGLE_GROUP_APIS | frozenset(GROUP_LIST_APIS) | CONTROLLER_APIS
               | {LIST_GROUPS_KEY, WRITE_TXN_MARKERS_KEY} | TRANSACTION_APIS)


@dataclasses.dataclass(frozen=True)
class _ItemApi:
    """An API whose request lists items each authorized on its own (a topic, a
    config resource): where they are, request and answer."""
    items: tuple[str, ...]      # the request's list field (the first its version has)
    answer_items: str


# Refused items are answered here, the rest relayed (see the module's note).
ITEM_APIS = {
    8: _ItemApi(("topics",), "topics"),                    # OffsetCommit
    28: _ItemApi(("topics",), "topics"),                   # TxnOffsetCommit
    47: _ItemApi(("topics",), "topics"),                   # OffsetDelete
    19: _ItemApi(("topics",), "topics"),                   # CreateTopics
    20: _ItemApi(("topics", "topic_names"), "responses"),  # DeleteTopics (v6+, v1-5)
    37: _ItemApi(("topics",), "results"),                  # CreatePartitions
    33: _ItemApi(("resources",), "responses"),             # AlterConfigs
    44: _ItemApi(("resources",), "responses"),             # IncrementalAlterConfigs
}
# Items of a relayed API a broker answers itself: its own loggers are altered
# here, never relayed (Kafka's ConfigAdminManager.preprocess; handlers.alter_configs).
ITEMS_ANSWERED_HERE = {44: lambda resource: resource.resource_type == alter_configs.BROKER_LOGGER_RESOURCE}
# Read-only APIs whose answer is trimmed to what the client may see.
FILTERED_ANSWER_APIS = frozenset({LIST_GROUPS_KEY, OFFSET_FETCH_KEY})
_GROUP_DESCRIBE = check_of(LIST_GROUPS_KEY, AclOperation.DESCRIBE, ResourceType.GROUP)
_OFFSETS_DESCRIBE = check_of(OFFSET_FETCH_KEY, AclOperation.DESCRIBE, ResourceType.TOPIC)
_DELETE_TOPICS = (check_of(20, AclOperation.DESCRIBE, ResourceType.TOPIC),
                  check_of(20, AclOperation.DELETE, ResourceType.TOPIC))
_NO_WAIT = i32Timedelta.parse(datetime.timedelta(0))


class EdgeDispatcher(Dispatcher):
    """`table`: the node's routes as a node hosting nothing answers them (its
    partition and group hosts refuse, its Metadata is `view`'s): they answer
    what is local and what no actor here can; `image()`: the newest cluster image
    (internal endpoints); `view()`: its broker view; `upstream_login()`: the
    cluster's SASL login when the actors' listeners require one;
    `quota_options`: protocol.throttling.EdgeQuotas' (clock, quota window)."""

    def __init__(self, table: DispatchTable, *, broker_id: int, image: Callable[[], ClusterImage],
                 view: Callable[[], ClusterImage],
                 upstream_login: Callable[[], Awaitable[SaslLogin | None]] | None = None,
                 upstream_tls=None, quota_options: dict | None = None,
                 upstream_open_wait_ms: int = UPSTREAM_OPEN_WAIT_MS, **dispatcher_options) -> None:
        super().__init__(table, **dispatcher_options)
        self.upstream_open_wait_ms = upstream_open_wait_ms
        self.quotas = EdgeQuotas(self.channel_mutes, **(quota_options or {}))
        self.broker_id = broker_id
        self._image = image
        self._view = view
        self._upstream_login = upstream_login
        self._upstream_tls = upstream_tls
        self._channels: dict[tuple[str, Endpoint], list[Connection]] = {}
        self._opening: dict[tuple[str, Endpoint], asyncio.Lock] = {}
        # (client connection, actor) -> when an open of it was last given up (`_clock_s`)
        self._given_up_s: dict[tuple[str, Endpoint], float] = {}
        self.relayed_requests = 0
        self.split_requests = 0

    # --- routing ---------------------------------------------------------------------

    async def dispatch(self, frame, *, connection_id: str = "", session: Session = ANONYMOUS_SESSION) -> bytes | None:
        api_key, _ = peek_api_key_and_version(frame)
        routed = api_key in ROUTED_APIS
        if not routed and not self.quotas.times(api_key, self._view()):
            return await super().dispatch(frame, connection_id=connection_id, session=session)
        started_s = self._clock_s()
        started_ns = self.quotas.clock.monotonic_ns()
        parsed = self.parse(frame, connection_id=connection_id, session=session)
        serve = self._route if routed and not parsed.is_unsupported_api_versions else self._answer_here
        try:
            if self.quotas.applies(parsed):   # protocol.throttling
                return await self.quotas.serve(parsed, frame, connection_id, serve, started_ns=started_ns)
            return await serve(parsed, frame, connection_id)
        finally:
            self._observe(parsed, started_s)

    async def _answer_here(self, parsed: ParsedRequest, frame, connection_id: str) -> bytes | None:
        return await self.answer(parsed)

    async def _route(self, parsed: ParsedRequest, frame, connection_id: str) -> bytes | None:
        api_key = parsed.context.api_key
        body = parsed.body
        decision = decide(parsed.context, body)   # the client's principal, on this node's view
        if decision.refusal is not None or not (decision.allows_all or api_key in PARTITION_APIS
                                                or api_key in ITEM_APIS or api_key in GROUP_LIST_APIS
                                                or api_key in FILTERED_ANSWER_APIS):
            targets = {None: body}   # answered here whole: the handler refuses what it must
        elif api_key in CONTROLLER_APIS:
            image = self._image()
            controller = image.nodes.get(image.controller_node)
            targets = {(controller.host, controller.port) if controller else None: body}
        elif api_key in PARTITION_APIS:
            targets = self._partition_targets(api_key, body, decision.refused_names(ResourceType.TOPIC))
        elif api_key == WRITE_TXN_MARKERS_KEY:
            targets = self._marker_targets(body)
        elif api_key == LIST_GROUPS_KEY:
            targets = {endpoint: body for endpoint in self._coordinators_here()} or {None: body}
        elif api_key == LIST_TRANSACTIONS_KEY:
            targets = {endpoint: body for endpoint in self._coordinators_here(transactions=True)} or {None: body}
        elif api_key in TRANSACTION_APIS:
            targets = self._transaction_targets(api_key, body, parsed.context.api_version)
        else:
            targets = self._group_targets(api_key, body, parsed.context.api_version,
                                          decision.refused_names(ResourceType.GROUP))
        if (api_key in ITEM_APIS and (not decision.allows_all or api_key in ITEMS_ANSWERED_HERE)
                and next(iter(targets)) is not None):
            targets = self._without_refused_items(api_key, targets, parsed.context)
        trim = api_key in FILTERED_ANSWER_APIS and not gate(parsed.context).everything
        expect_response = not (api_key == 0 and body.acks == 0)
        # A Produce lets the client connection's next request start once it is
        # written to every actor it goes to (each keeps the order it is sent in),
        # as the actor's Produce does once appended: the client's requests in
        # flight (librdkafka keeps 5) reach the actors together, not one per
        # replication round trip.
        written = _Written(admission(), len(targets)) if api_key == PRODUCE_KEY and expect_response else None
        if len(targets) == 1 and not trim:
            (endpoint, _), = targets.items()
            if endpoint is not None:
                enveloped = parsed.context if api_key in CONTROLLER_APIS else None
                answer = await self._relay(connection_id, endpoint, frame, expect_response,
                                           written.one if written else None, enveloped=enveloped)
                if answer is not _UNREACHABLE:
                    self.relayed_requests += 1
                    if enveloped is not None and answer is not None:
                        self._mute_for_controller_throttle(read_answer(parsed.context, bytes(answer)), connection_id)
                    return None if answer is None else _with_correlation_id(answer, parsed.context.correlation_id)
            answer = await parsed.route.handler(body, parsed.context)   # as a broker that hosts none of it
            return None if answer is None else encode_response(parsed.context.correlation_id, answer)
        self.split_requests += len(targets) > 1
        if api_key == FETCH_KEY:
            answers = await self._fetch_each(parsed, targets, connection_id)
        else:
            answers = await asyncio.gather(*(self._ask(parsed, endpoint, sub_body, connection_id, expect_response,
                                                       written.one if written else None)
                                             for endpoint, sub_body in targets.items()))
        if not expect_response:
            return None
        answer = answers[0] if len(answers) == 1 else _merge(api_key, parsed.context.api_version, answers)
        if api_key == FETCH_KEY and len(answers) > 1:
            answer = _within_fetch_max_bytes(answer, body)
        if api_key in ITEMS_ANSWERED_HERE and len(answers) > 1:
            answer = _in_request_order(api_key, body, answer)
        if api_key in CONTROLLER_APIS:   # some of its items refused here, the rest relayed
            self._mute_for_controller_throttle(answer, connection_id)
        if trim:
            answer = _trimmed(api_key, answer, body, gate(parsed.context))
        return encode_response(parsed.context.correlation_id, answer)

    def _without_refused_items(self, api_key: int, targets: dict, context) -> dict[Endpoint | None, Any]:
        """The one relayed part without the items the client may not use and those
        this broker answers itself (ITEMS_ANSWERED_HERE); they make a part answered here."""
        (endpoint, body), = targets.items()
        api = ITEM_APIS[api_key]
        field = next(f for f in api.items if getattr(body, f, None) is not None)
        request_gate = gate(context)
        decision = decide(context, body)
        here = ITEMS_ANSWERED_HERE.get(api_key)
        allowed, refused = [], []
        for item in getattr(body, field):
            answered_here = (here is not None and here(item)) or self._item_refused(api_key, item, decision,
                                                                                    request_gate)
            (refused if answered_here else allowed).append(item)
        if not refused:
            return targets
        parts = {endpoint: dataclasses.replace(body, **{field: tuple(allowed)})} if allowed else {}
        parts[None] = dataclasses.replace(body, **{field: tuple(refused)})
        return parts

    def _item_refused(self, api_key: int, item, decision, request_gate) -> bool:
        if isinstance(item, str):   # DeleteTopics v1-5: names
            return decision.refusal_of(ResourceType.TOPIC, item) is not None
        if hasattr(item, "resource_type"):   # a config resource
            acl_resource = config_acl_resource(item.resource_type, item.resource_name)
            return acl_resource is not None and decision.refusal_of(*acl_resource) is not None
        name = item.name
        if name is None and getattr(item, "topic_id", None) is not None:   # DeleteTopics v6 by id
            found = self._view().topic_by_id(item.topic_id)
            return found is not None and not all(request_gate.allows(c, found.name) for c in _DELETE_TOPICS)
        return decision.refusal_of(ResourceType.TOPIC, name) is not None

    def _partition_targets(self, api_key: int, body, refused: frozenset[str] = frozenset()
                           ) -> dict[Endpoint | None, Any]:
        """The request split by where each partition goes (None: answered here,
        among them every partition of a `refused` topic)."""
        api = PARTITION_APIS[api_key]
        image = self._image()
        split: dict[Endpoint | None, dict[int, tuple[Any, list]]] = {}
        for index, topic in enumerate(getattr(body, api.topics)):
            name = _topic_name(topic, image)
            here = self._replica_here if api.any_replica else self._leader_here
            for partition in getattr(topic, api.partitions):
                endpoint = None if name in refused else here(image, name, int(
                    partition if api.partition_index is None else getattr(partition, api.partition_index)))
                split.setdefault(endpoint, {}).setdefault(index, (topic, []))[1].append(partition)
        if not split:
            return {None: body}
        if len(split) == 1:   # the hot path: one actor, the request as it came (relayed as its bytes)
            return {next(iter(split)): body}
        return {endpoint: _with_topics(body, api, [dataclasses.replace(topic, **{api.partitions: tuple(parts)})
                                                   for topic, parts in topics.values()])
                for endpoint, topics in split.items()}

    def _leader_here(self, image: ClusterImage, topic: str | None, partition: int) -> Endpoint | None:
        found = image.topics.get(topic) if topic is not None else None
        if found is None or not 0 <= partition < len(found.partitions):
            return None
        state = found.partitions[partition]
        node = image.nodes.get(state.leader_node)
        if state.leader_broker != self.broker_id or node is None:
            return None
        return node.host, node.port

    def _replica_here(self, image: ClusterImage, topic: str | None, partition: int) -> Endpoint | None:
        """This broker's replica of the partition, the leader or else a follower (a
        replica's node carries its broker id as its rack)."""
        leader = self._leader_here(image, topic, partition)
        if leader is not None:
            return leader
        found = image.topics.get(topic) if topic is not None else None
        if found is None or not 0 <= partition < len(found.partitions):
            return None
        for node_id in found.partitions[partition].replica_nodes:
            node = image.nodes.get(node_id)
            if node is not None and node.rack == str(self.broker_id):
                return node.host, node.port
        return None

    def _coordinator_here(self, key: str, *, transactions: bool = False) -> Endpoint | None:
        """The endpoint of the coordinator of group `key` (of transactional id `key`
        with `transactions`) if it runs on this broker, else None."""
        image = self._image()
        nodes = image.transaction_coordinator_nodes if transactions else image.coordinator_nodes
        if not nodes:
            return None
        partition = (partition_for_transaction if transactions else partition_for_group)(key, len(nodes))
        return self._coordinator_at(image, nodes, partition)

    def _coordinator_at(self, image: ClusterImage, nodes: tuple[int, ...], partition: int) -> Endpoint | None:
        """The endpoint of the coordinator of `partition` among `nodes` if it runs on
        this broker, else None."""
        node = image.nodes.get(nodes[partition]) if 0 <= partition < len(nodes) else None
        if node is None or image.coordinator_broker(partition, nodes=nodes) != self.broker_id:
            return None
        return node.host, node.port

    def _marker_targets(self, body) -> dict[Endpoint | None, Any]:
        """WriteTxnMarkers split by where each partition's marker is written: its
        leader's actor, a `__consumer_offsets` partition's group coordinator (None:
        answered here)."""
        image = self._image()
        split: dict[Endpoint | None, list] = {}
        for marker in body.markers:
            topics: dict[Endpoint | None, list] = {}
            for topic in marker.topics:
                partitions: dict[Endpoint | None, list] = {}
                for partition in topic.partition_indexes:
                    endpoint = (self._coordinator_at(image, image.coordinator_nodes, int(partition))
                                if topic.name == OFFSETS_TOPIC else self._leader_here(image, topic.name, int(partition)))
                    partitions.setdefault(endpoint, []).append(partition)
                for endpoint, indexes in partitions.items():
                    topics.setdefault(endpoint, []).append(dataclasses.replace(topic, partition_indexes=tuple(indexes)))
            for endpoint, entries in topics.items():
                split.setdefault(endpoint, []).append(dataclasses.replace(marker, topics=tuple(entries)))
        if len(split) <= 1:
            return {next(iter(split), None): body}
        return {endpoint: dataclasses.replace(body, markers=tuple(markers)) for endpoint, markers in split.items()}

    def _coordinators_here(self, *, transactions: bool = False) -> list[Endpoint]:
        image = self._image()
        nodes = image.transaction_coordinator_nodes if transactions else image.coordinator_nodes
        found = []
        for partition, node_id in enumerate(nodes):
            node = image.nodes.get(node_id)
            if node is not None and image.coordinator_broker(partition, nodes=nodes) == self.broker_id:
                found.append((node.host, node.port))
        return sorted(set(found))

    def _transaction_targets(self, api_key: int, body, version: int) -> dict[Endpoint | None, Any]:
        if api_key == INIT_PRODUCER_ID_KEY and body.transactional_id is None:
            return {None: body}   # an idempotent producer's id: answered here
        if api_key in SINGLE_TRANSACTION_APIS and not (
                api_key == ADD_PARTITIONS_TO_TXN_KEY and version >= FIRST_BATCHED_ADD_PARTITIONS_VERSION):
            return {self._coordinator_here(getattr(body, SINGLE_TRANSACTION_APIS[api_key]), transactions=True): body}
        field, _ = TRANSACTION_LIST_APIS[api_key]
        return self._split_by_coordinator(body, field, transactions=True)

    def _group_targets(self, api_key: int, body, version: int, refused: frozenset[str] = frozenset()
                       ) -> dict[Endpoint | None, Any]:
        """By the group's coordinator (None: answered here, among them every
        `refused` group)."""
        if api_key in SINGLE_GROUP_APIS or (api_key == OFFSET_FETCH_KEY and version < 8):
            return {None if body.group_id in refused else self._coordinator_here(body.group_id): body}
        field, _ = GROUP_LIST_APIS[api_key]
        return self._split_by_coordinator(body, field, refused=refused)

    def _split_by_coordinator(self, body, field: str, *, transactions: bool = False,
                              refused: frozenset[str] = frozenset()) -> dict[Endpoint | None, Any]:
        """The request's list `field` (of names, or of entries naming a group or a
        transactional id) split by the coordinator each goes to (None: answered
        here, among them every `refused` one)."""
        split: dict[Endpoint | None, list] = {}
        for item in getattr(body, field):
            key = item if isinstance(item, str) else item.transactional_id if transactions else item.group_id
            split.setdefault(None if key in refused else self._coordinator_here(key, transactions=transactions),
                             []).append(item)
        return {endpoint: dataclasses.replace(body, **{field: tuple(items)}) for endpoint, items in split.items()} \
            or {None: body}

    # --- asking the actors -----------------------------------------------------------

    async def _ask(self, parsed: ParsedRequest, endpoint: Endpoint | None, body, connection_id: str,
                   expect_response: bool = True, on_written=None):
        """One part of a split request: the answer entity (None for acks=0).
        `on_written()` once it is sent on (or answered here: nothing to order)."""
        if endpoint is not None:
            answer = await self._relay(connection_id, endpoint, request_frame(parsed.context, body), expect_response,
                                       on_written, enveloped=parsed.context if parsed.context.api_key in CONTROLLER_APIS
                                       else None)
            if answer is None:
                return None
            if answer is not _UNREACHABLE:
                return read_answer(parsed.context, answer)
        if on_written is not None:
            on_written()
        answer = await parsed.route.handler(body, parsed.context)
        return _as_entity(answer) if answer is not None else None

    async def _fetch_each(self, parsed: ParsedRequest, targets: dict, connection_id: str) -> list:
        """Each part waits as the client asked, until one has data; the parts still
        waiting then are abandoned and read again at once."""
        tasks = {asyncio.ensure_future(self._ask(parsed, endpoint, body, connection_id)): endpoint
                 for endpoint, body in targets.items()}
        answers = []
        pending = set(tasks)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                answers.extend(task.result() for task in done)
                if any(_has_data(answer) for answer in answers):
                    break
        finally:
            for task in pending:
                task.cancel()
        if pending:
            again = [dataclasses.replace(targets[tasks[task]], max_wait=_NO_WAIT, min_bytes=i32(0)) for task in pending]
            answers.extend(await asyncio.gather(*(self._ask(parsed, tasks[task], body, connection_id)
                                                  for task, body in zip(pending, again))))
        return answers

    def _mute_for_controller_throttle(self, answer, connection_id: str) -> None:
        """The controller's throttle time (controller_mutation_rate, in `answer`,
        the client's answer entity) mutes the client's connection here, as Kafka's
        broker does for a forwarded answer (sendForwardedResponse): clients before
        KIP-219 do not wait by themselves."""
        throttle = getattr(answer, "throttle_time", None)
        throttle_ms = int(throttle.total_seconds() * 1000) if throttle is not None else 0
        if throttle_ms > 0:
            self.quotas.mute(connection_id, throttle_ms)

    async def _relay(self, connection_id: str, endpoint: Endpoint, frame, expect_response: bool,
                     on_written=None, *, enveloped: RequestContext | None = None):
        """The actor's answer frame, None (no answer due) or _UNREACHABLE.
        `enveloped`: the client's request context, for a request to the
        controller: it goes in an Envelope (KIP-590, handlers.envelope) so that
        the controller runs it as the client's (its ACLs, its quotas); the inner
        answer comes back. A controller lost on the way is tried once more, on a
        new connection; an envelope it refuses is answered here as an unreachable
        controller's request is, and not tried again (it would be refused again)."""
        for attempt in range(2 if enveloped is not None else 1):
            try:
                channel = await self._channel(connection_id, endpoint)
                if enveloped is None:
                    return await channel.relay(frame, expect_response=expect_response, on_written=on_written)
                answer = await channel.relay(envelope.wrap(enveloped, frame), on_written=on_written)
                break
            except NetworkException as error:
                logger.info("broker %d: %s:%d unreachable (%s)%s", self.broker_id, *endpoint, error,
                            ": answering for it" if attempt or enveloped is None else ": once more")
        else:
            return _UNREACHABLE
        try:
            inner = envelope.unwrap(answer)
        except Exception as error:   # an answer that cannot be read: answered here, as a lost one
            inner, answer = None, error
        if inner is None:   # a bug or a misconfiguration: said loudly; the client gets a retriable answer
            logger.warning("broker %d: the controller at %s:%d refused an envelope (%s): answering for it",
                           self.broker_id, *endpoint, answer)
            return _UNREACHABLE
        return inner

    async def _channel(self, connection_id: str, endpoint: Endpoint) -> Connection:
        key = (connection_id, endpoint)
        lock = self._opening.get(key)
        if lock is None:
            lock = self._opening[key] = asyncio.Lock()
        queued_s = self._clock_s()
        async with lock:
            if self._given_up_s.get(key, -1.0) >= queued_s:
                # queued behind an open given up: fails with it, so that no request read
                # before that failure reaches the actor ahead of it
                raise NetworkException(f"{endpoint[0]}:{endpoint[1]} did not accept a connection")
            channels = [c for c in self._channels.get(key, ()) if not c.closed]
            for old in channels[:-1]:     # done with what was abandoned on them
                if old.unanswered == 0:
                    channels.remove(old)
                    await old.close()
            primary = channels[-1] if channels else None
            if primary is None or (primary.unanswered and not primary.waited_on and len(channels) < MAX_CHANNELS):
                try:
                    primary = await self._open(endpoint)
                except NetworkException:
                    self._given_up_s[key] = self._clock_s()
                    raise
                channels.append(primary)
            self._channels[key] = channels
            return primary

    async def _open(self, endpoint: Endpoint) -> Connection:
        """A new upstream connection to the actor at `endpoint`. One that refuses it
        while the newest image still names it (starting, or restarting after Ray
        restarted its process) is tried again, every UPSTREAM_OPEN_RETRY_MS for up to
        `upstream_open_wait_ms`, while the requests behind this one (same client
        connection, same actor) wait in order behind it, and fail with it if it is
        given up (`_channel`). Answering it for the actor at once and relaying the
        next one a moment later, once the actor listens, reordered a client's
        requests to one partition, which a Kafka broker never does: an idempotent
        producer's second batch was written first, and its first then refused
        OUT_OF_ORDER_SEQUENCE_NUMBER (`rafka demo` and `rafka verify`, on a cluster
        just started). An actor the image no longer names is answered for at once:
        its partitions moved, and the client is sent back to Metadata."""
        async def attempt(remaining_s: float) -> Connection:
            login = await self._upstream_login() if self._upstream_login is not None else None
            return await Connection.open(*endpoint, client_id=f"broker-{self.broker_id}",
                                         connect_timeout_ms=max(1, int(remaining_s * 1000)),
                                         max_in_flight_requests=16, sasl=login, tls=self._upstream_tls)
        try:
            return await retry_until_async(
                attempt, timeout_s=self.upstream_open_wait_ms / 1000, retry_backoff_s=UPSTREAM_OPEN_RETRY_MS / 1000,
                what=f"connecting to {endpoint[0]}:{endpoint[1]}", clock=self._clock_s,
                retriable=lambda error: isinstance(error, NetworkException) and self._names(endpoint))
        except RequestTimedOut as error:   # the wait is over: answered for the actor as unreachable
            raise NetworkException(str(error)) from None

    def _names(self, endpoint: Endpoint) -> bool:
        """Whether the newest image names an actor at `endpoint`."""
        return any((node.host, node.port) == endpoint for node in self._image().nodes.values())

    async def connection_closed(self, connection_id: str) -> None:
        """The client's connection closed: so do its upstream connections (an
        actor drops their parked requests)."""
        self.channel_mutes.pop(connection_id, None)
        for key in [k for k in self._given_up_s if k[0] == connection_id]:
            del self._given_up_s[key]
        for key in [k for k in self._channels if k[0] == connection_id]:
            self._opening.pop(key, None)
            for channel in self._channels.pop(key):
                await channel.close()


_UNREACHABLE = object()


class _Written:
    """Calls `admit()` once all `parts` of a request are written on."""

    def __init__(self, admit, parts: int) -> None:
        self._admit = admit
        self._left = parts

    def one(self) -> None:
        self._left -= 1
        if self._left <= 0:
            self._admit()


@envelope.answering_every_admin_call("_unreachable")
class ControllerUnreachable:
    """A broker's topic administration (node_table's topic_admin_host): what the
    edge answers when the controller's node cannot be reached (or is not known
    yet). Retriable, as Kafka's ForwardingManager answers a request it could not
    forward."""

    def __init__(self, image: Callable[[], ClusterImage]) -> None:
        self.cluster_image = image

    async def _unreachable(self, *args, **kwargs):
        raise RequestTimedOut("the controller could not be reached from this broker; retry")


def _trimmed(api_key: int, answer, body, request_gate):
    """A ListGroups or OffsetFetch answer as the client may see it (see the module's note)."""
    if api_key == LIST_GROUPS_KEY:
        return dataclasses.replace(answer, groups=tuple(g for g in answer.groups
                                                        if request_gate.allows(_GROUP_DESCRIBE, g.group_id)))
    if hasattr(answer, "groups"):   # OffsetFetch v8+: per group, as asked
        asked = {g.group_id: g.topics for g in body.groups}
        return dataclasses.replace(answer, groups=tuple(
            dataclasses.replace(g, topics=_trimmed_offsets(g.topics, asked.get(g.group_id), request_gate))
            for g in answer.groups))
    return dataclasses.replace(answer, topics=_trimmed_offsets(answer.topics, body.topics, request_gate))


def _trimmed_offsets(topics, asked, request_gate) -> tuple:
    """Committed offsets of topics the client may describe; of one it may not,
    TOPIC_AUTHORIZATION_FAILED when it named it, nothing when it asked for all."""
    kept = []
    for topic in topics:
        if request_gate.allows(_OFFSETS_DESCRIBE, topic.name):
            kept.append(topic)
        elif asked is not None:
            kept.append(dataclasses.replace(topic, partitions=tuple(dataclasses.replace(
                p, committed_offset=i64(-1), metadata="", error_code=ErrorCode.topic_authorization_failed,
                **({"committed_leader_epoch": i32(-1)} if hasattr(p, "committed_leader_epoch") else {}))
                for p in topic.partitions)))
    return tuple(kept)


def _with_correlation_id(answer, correlation_id: int) -> bytes:
    return b"".join((_SIZE.pack(len(answer)), _SIZE.pack(correlation_id), answer[4:]))


def _topic_name(topic, image: ClusterImage) -> str | None:
    name = getattr(topic, "name", None) or getattr(topic, "topic", None)
    if name is None and getattr(topic, "topic_id", None) is not None:
        found = image.topic_by_id(topic.topic_id)
        name = found.name if found is not None else None
    return name


def _with_topics(body, api: _PartitionApi, topics: list):
    changes = {api.topics: tuple(topics)}
    if hasattr(body, "forgotten_topics_data"):   # no fetch sessions: every part is a full fetch
        changes["forgotten_topics_data"] = ()
    return dataclasses.replace(body, **changes)


def _as_entity(answer):
    if type(answer) is WrittenBody:
        return entity_reader(answer.entity_type)(b"".join(answer.pieces), 0)[0]
    return answer


def _has_data(answer) -> bool:
    """A Fetch answer with records or an error for some partition."""
    return answer is not None and any(p.error_code != 0 or (p.records is not None and len(p.records) > 0)
                                      for t in answer.responses for p in t.partitions)


def _within_fetch_max_bytes(answer, body):
    """A split Fetch's merged answer in the request's order and held to its
    max_bytes, as Kafka's one budget for the whole request (ReplicaManager
    .readFromLog): each part was read with the whole budget, so a partition whose
    records would take the total past it answers none this time (its offsets as
    read; the client asks again), except the first with records, which is whole
    however large (minOneMessage). The request's order decides which (clients move
    a partition that brought records to the end of their next request, as the Java
    consumer and librdkafka do), not which actor answered first."""
    max_bytes = int(body.max_bytes)
    position = {(topic.topic, int(partition.partition)): index for index, (topic, partition) in
                enumerate((topic, partition) for topic in body.topics for partition in topic.partitions)}

    def at(topic, partition) -> int:
        return position.get((topic.topic, int(partition.partition_index)), len(position))
    ordered = sorted(((topic, partition) for topic in answer.responses for partition in topic.partitions),
                     key=lambda pair: at(*pair))
    total = 0
    topics: list = []   # (the topic's entry, its partitions), in the request's order
    for topic, partition in ordered:
        if not topics or topics[-1][0].topic != topic.topic:
            topics.append((topic, []))
        size = len(partition.records) if partition.records else 0
        if size and total and total + size > max_bytes:
            aborted = None if partition.aborted_transactions is None else ()
            partition = dataclasses.replace(partition, records=b"", aborted_transactions=aborted)
        else:
            total += size
        topics[-1][1].append(partition)
    return dataclasses.replace(answer, responses=tuple(dataclasses.replace(topic, partitions=tuple(partitions))
                                                       for topic, partitions in topics))


def _merge(api_key: int, version: int, answers: list):
    """One answer from the answers to a split request's parts: their topics (or
    groups) together, a topic split over parts made one entry again."""
    first = answers[0]
    changes: dict[str, Any] = {}
    if hasattr(first, "throttle_time"):
        changes["throttle_time"] = max(a.throttle_time for a in answers)
    if api_key in PARTITION_APIS:
        api = PARTITION_APIS[api_key]
        merged: dict[Any, Any] = {}
        for answer in answers:
            for topic in getattr(answer, api.answer_topics):
                key = getattr(topic, dataclasses.fields(topic)[0].name)
                if key in merged:
                    before = merged[key]
                    topic = dataclasses.replace(before, **{api.answer_partitions: getattr(
                        before, api.answer_partitions) + getattr(topic, api.answer_partitions)})
                merged[key] = topic
        changes[api.answer_topics] = tuple(merged.values())
    elif api_key == WRITE_TXN_MARKERS_KEY:   # one entry per producer id, one per topic in it, as Kafka's
        by_producer: dict[int, tuple[Any, dict[str, Any]]] = {}
        for answer in answers:
            for result in answer.markers:
                _, topics = by_producer.setdefault(int(result.producer_id), (result, {}))
                for topic in result.topics:
                    before = topics.get(topic.name)
                    topics[topic.name] = topic if before is None else dataclasses.replace(
                        before, partitions=before.partitions + topic.partitions)
        changes["markers"] = tuple(dataclasses.replace(result, topics=tuple(topics.values()))
                                   for result, topics in by_producer.values())
    else:
        field = (ITEM_APIS[api_key].answer_items if api_key in ITEM_APIS else _ANSWER_LISTS.get(api_key)
                 or GROUP_LIST_APIS.get(api_key, TRANSACTION_LIST_APIS.get(api_key))[1])
        changes[field] = tuple(item for answer in answers for item in getattr(answer, field))
        if api_key in (LIST_GROUPS_KEY, LIST_TRANSACTIONS_KEY, ADD_PARTITIONS_TO_TXN_KEY):   # a top-level code
            changes["error_code"] = next((a.error_code for a in answers if a.error_code != 0), first.error_code)
        if api_key == LIST_TRANSACTIONS_KEY:
            changes["unknown_state_filters"] = tuple(sorted({f for a in answers for f in a.unknown_state_filters}))
    return dataclasses.replace(first, **changes)


def _in_request_order(api_key: int, body, answer):
    """A split IncrementalAlterConfigs answered in the request's order, as Kafka's
    broker reassembles the answer it forwarded (ConfigAdminManager
    .reassembleIncrementalResponse): its own items are not put last."""
    api = ITEM_APIS[api_key]
    def key(resource):
        return int(resource.resource_type), resource.resource_name
    position = {}
    for index, resource in enumerate(getattr(body, api.items[0])):
        position.setdefault(key(resource), index)
    items = sorted(getattr(answer, api.answer_items), key=lambda item: position.get(key(item), len(position)))
    return dataclasses.replace(answer, **{api.answer_items: tuple(items)})


# the answer's list field of the APIs asked of every coordinator here
_ANSWER_LISTS = {LIST_GROUPS_KEY: "groups", LIST_TRANSACTIONS_KEY: "transaction_states"}
