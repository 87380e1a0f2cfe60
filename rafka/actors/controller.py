"""The controller actor: owns the cluster metadata and reconciles it into running
replica actors.

State changes go through core.metadata (handlers return records, `replay`
applies them). The controller appends each record to its metadata log (JSON
lines, fsynced) before replaying it, so a killed and restarted controller reads
the log back and has the same topics, leaders, epochs and ISRs; its controller
epoch goes up by one at every start.

Reconciliation: the metadata says which replicas exist and on which broker; the
watch loop makes the running actors match it, every `watch_interval_ms`. A
replica actor that is missing (after `rafka down` + `rafka up`, a whole-cluster
restart, or a first start) is created in its placement group on its broker; one
that restarted (it answers with no role) is given its role again; a leader that is
dead, unresponsive within `leader_ping_timeout_ms` or restarted is replaced by an
ISR member (core.metadata decides which). So every partition comes back online
whenever an ISR member's broker is up, with that broker's log.

Replica actors are shells (core.replica_pool): the controller keeps
`replica_pool_size` idle ones per live broker, made in the background, each in
its placement group on its broker; a new replica (topic creation, new partitions,
a reassignment) takes one and is given its replica by `assign`, recorded in the
metadata first (`replica_actor`: which shell holds which replica), so a restarted
controller knows; an empty pool makes a shell on the spot. A shell whose replica
goes (topic deleted, replica moved away) is killed, never reused. Idle shells
that an earlier controller left are adopted at start.

Brokers: a broker that is down keeps its replicas (they restart with its disk when
it comes back); one gone longer than `broker_replacement_timeout_ms` has its
replicas reassigned to live brokers (Kafka's partition reassignment: the new
replica catches up and joins the ISR before the old one is dropped). Operators
reassign by hand over the wire (AlterPartitionReassignments, `rafka reassign-partitions`).

Brokers' nodes: every live broker runs `network_processes` broker actors
(actors.broker) on the broker's fixed port, the Kafka nodes clients see; the
watch loop creates, registers and updates them as it does replicas. The
controller's own node is internal: brokers forward administration to it.

Named `controller` in namespace `rafka`, detached, pinned to the head node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import json
import logging
import os
import random
import socket
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import ray

from rafka.actors.broker import BrokerActor
from rafka.actors.cluster_credential import ray_token_auth_enabled, read_or_make_secret
from rafka.actors.serving import NodeServing, NodeThread
from rafka.core.acl import parse_super_users
from rafka.core.actor_names import (CONTROLLER_NAME, OFFSETS_TOPIC, REPLICA_SHELL_PREFIX, TRANSACTION_STATE_TOPIC,
                                    broker_actor_name, broker_of_actor_name, broker_of_shell, coordinator_actor_name,
                                    transaction_coordinator_actor_name)
from rafka.core.broker_identity import BROKER_ID_LABEL
from rafka.core.clock import SystemClock
from rafka.core.cluster_image import (EMPTY_IMAGE, IMAGE_FREE_RECORD_TYPES, ClusterImage, broker_view, build_image,
                                     named_controller)
from rafka.actors.replica import NAMESPACE, OFFLINE, STOPPED, UNASSIGNED, ReplicaActor
from rafka.core.kafka_metrics import register_controller
from rafka.core.metrics import Histogram
from rafka.core.scram import CLUSTER_MECHANISM, CLUSTER_USER
from rafka.protocol.connection import SaslLogin
from rafka.protocol.handlers.describe_quorum import QuorumState, ReplicaState
from rafka.protocol.handlers.envelope import CONTROLLER_ADMIN_CALLS
from rafka.core.errors import KafkaError, NetworkException, NotController
from rafka.core.metadata import UNCLEAN_ELECTION, ClusterMetadata, PartitionState, TopicMetadata
from rafka.core.replica_pool import ReplicaPool
from rafka.placement.brokers import broker_nodes, live_broker_ids
from rafka.placement.groups import (existing_replica_group, in_bundle, remove_placement_group,
                                   replica_placement_group)

METADATA_LOG = "metadata.log"
PRODUCER_ID_BLOCK_SIZE = 1_000   # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
logger = logging.getLogger(__name__)

RESTARTED = ("follower", -1)  # a replica actor that came back and was not told its role yet
# Idle replica actors per broker (core.replica_pool) under `rafka up`: a topic of up
# to 4 x brokers / RF partitions (and the __consumer_offsets partition at the
# start) comes online without starting processes; each idle one costs a process
# (~60-70 MB USS, and Ray's idle work of ~0.3% of a core). local_cluster keeps 1.
REPLICA_POOL_SIZE_DEFAULT = 4
# Shells made at once while filling the pool: making one is ~0.6 CPU-s of a new
# process; the pool fills in the background and must leave the cores to the
# replicas that serve.
POOL_FILL_CONCURRENCY = 2
# A replica that answered in the role it should have is not pinged again: the
# controller parks one `watch` call in it (issue 27: a ping every few rounds woke
# every idle replica; 40 Ray calls a second at 64 partitions). The call answers when
# the replica's role or epoch moves, or after this long (then the answer's endpoint
# and image are looked at, as a ping's, and the call parked again); it fails when the
# actor dies, which is how its death is learnt. What a parked call cannot see
# reaches the controller otherwise:
#   * a leader that is paused, silent or unreachable: its followers fetch from it at
#     least every idle_fetch_max_wait_ms and say so (`leader_suspected`: a failed
#     fetch, or one unanswered 2 s past the wait it asked for), and a watch not
#     answered within this plus leader_ping_timeout_ms ends;
#   * a replica that Ray restarted says so from its constructor (`replica_restarted`);
# and either makes every replica of the partition be pinged at the next round. A
# dead follower leaves the ISR by the leader's replica.lag.time.max.ms check.
# Images reach settled replicas by push (`_push_behind_images`), not in ping answers.
REPLICA_WATCH_TIMEOUT_MS = 60_000
# Settled replicas whose image is older than the controller's get it every this many
# rounds (a creation commits many images a second: one push per round to every
# replica would be most of its work).
PUSH_SETTLED_EVERY_ROUNDS = 5
# How long brokers wait for a new leader to be told before they see it all the
# same, in leader pings (`_hold_until_told`): a bound, should an announce never come.
LEADER_HOLD_PINGS = 2
# One actor class for every replica: `ray.remote(cls)` made anew exports the class to
# the GCS again at its first creation (a blocking round trip per replica).
_REPLICA_ACTOR = ray.remote(ReplicaActor)
_BROKER_ACTOR = ray.remote(BrokerActor)
_WALL_CLOCK = SystemClock()
OBSERVER_SESSION_TIMEOUT_MS = 300_000   # Kafka's LeaderState.OBSERVER_SESSION_TIMEOUT_MS
BROKERS_LISTEN_WAIT_S = 60.0
EVERY_BROKER_LISTEN_WAIT_S = 5.0


# Brokers sharing a host (local_cluster) get ports picked here, below the range the
# kernel hands out to bind(0) and to outgoing connections (ip_local_port_range):
# a port picked by bind(0) was free when probed, then a replica's listener or a
# connection took it before the broker bound it, and that broker never listened
# (EADDRINUSE at every restart: its port is kept), holding every client's bootstrap
# for 60 s (CI: "no node answered ... last error: None" in test_restarts.py).
BROKER_PORT_RANGE = (20_000, 32_768)


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return BROKER_PORT_RANGE[1]


def _free_port(taken=()) -> int:
    """A port free now and not in `taken` (other brokers' picks), outside the
    kernel's ephemeral range when it can be."""
    low, high = BROKER_PORT_RANGE[0], min(BROKER_PORT_RANGE[1], _ephemeral_low())
    start = random.randrange(low, high) if high > low else low
    for port in itertools.chain(range(start, high), range(low, start)):
        if port in taken:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("", port))
            except OSError:
                continue
            return port
    with socket.socket() as probe:   # every port of the range taken: any free one
        probe.bind(("", 0))
        return probe.getsockname()[1]


def _starts_or_stops(records: list[dict], brokers: list[int] | None, state: PartitionState) -> bool:
    """Whether a staged move starts or stops a replica: a cancel, or a move that
    adds or removes one (a new order of the same brokers only reorders)."""
    return bool(records) and (brokers is None or bool(state.adding or state.removing))


def cluster_bootstrap_servers() -> str:
    """From inside the Ray cluster (the driver's clients, member actors): every
    live broker's Kafka address, where a client's first metadata request goes.
    Clients take this function itself as their bootstrap_servers (client.metadata
    asks it again when no node it knows answers: a restarted local cluster's
    brokers listen on new ports). A control-plane lookup, by name, so it finds a
    restarted controller. Out of the cluster (Ray shut down, a client left
    open): NETWORK_EXCEPTION, never a Ray call, which would start a local Ray
    instance of its own (seen at the exit of a `rafka verify` run)."""
    if not ray.is_initialized():
        raise NetworkException("not connected to the rafka cluster's Ray: no bootstrap servers to look up")
    return ray.get(ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE).bootstrap_address.remote())


class ControllerActor:
    def __init__(self, *, data_dir: str, replica_lag_time_max_ms: int = 30_000,
                 fetch_max_wait_ms: int = 500, idle_fetch_max_wait_ms: int = 5_000,
                 leader_ping_timeout_ms: int = 2_000,
                 log_retention_check_interval_ms: int = 300_000, log_cleaner_backoff_ms: int = 15_000,
                 replica_high_watermark_checkpoint_interval_ms: int = 5_000, log_drop_behind_bytes: int = 0,
                 broker_replacement_timeout_ms: int = 1_800_000, watch_interval_ms: int = 1_000,
                 listener_port: int = 0, sasl: bool = False, num_partitions: int = 1,
                 default_replication_factor: int = 1, network_processes: int = 1,
                 super_users: str | tuple[str, ...] = (),
                 replica_pool_size: int = REPLICA_POOL_SIZE_DEFAULT) -> None:
        """`listener_port`: every broker's Kafka port (Kafka's 9092 under `rafka up`;
        0: a free port per broker, chosen once, for brokers sharing a host as
        local_cluster's do); `network_processes`: processes serving each broker's
        port (Kafka's num.network.threads); `super_users`: Kafka's super.users
        ("User:admin;User:ops"), carried in every image beside rafka's own user
        (a setting of the controller's start, as super.users is of a broker's);
        `replica_pool_size`: idle replica actors kept per broker
        (core.replica_pool), what a topic takes to come online without starting
        processes; `log_drop_behind_bytes`: each replica's log asks the kernel to
        drop from the page cache what it wrote more than this many bytes ago
        (core.segment; README, "Page cache"); 0, Kafka's way: the kernel keeps it."""
        self.super_users = parse_super_users(super_users)
        if network_processes < 1:
            raise ValueError(f"network_processes must be at least 1, not {network_processes}")
        if log_drop_behind_bytes < 0:
            raise ValueError(f"log_drop_behind_bytes must be at least 0, not {log_drop_behind_bytes}")
        self.log_drop_behind_bytes = log_drop_behind_bytes
        self.data_dir = data_dir
        self.listener_port = listener_port
        self.network_processes = network_processes
        self._live_brokers: set[int] = set()     # from Ray's node table, at its last reading
        # Kafka's num.partitions and default.replication.factor: what CreateTopics'
        # -1 stands for (cluster settings: `rafka up` options, local_cluster arguments).
        self.num_partitions = num_partitions
        self.default_replication_factor = default_replication_factor
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.idle_fetch_max_wait_ms = idle_fetch_max_wait_ms
        self.log_retention_check_interval_ms = log_retention_check_interval_ms
        self.log_cleaner_backoff_ms = log_cleaner_backoff_ms
        self.replica_high_watermark_checkpoint_interval_ms = replica_high_watermark_checkpoint_interval_ms
        self.leader_ping_timeout_ms = leader_ping_timeout_ms
        self.replica_start_timeout_ms = 120_000
        # Like Cruise Control's broker-failure self-healing threshold (30 min): a
        # reboot or a disk swap comes back long before; a host that is gone does not.
        self.broker_replacement_timeout_ms = broker_replacement_timeout_ms
        self._broker_down_since_s: dict[int, float] = {}   # not persisted: a new controller waits afresh
        self._next_broker_check_s = 0.0
        # Each round pings every replica and coordinator (a Ray call each). At 250 ms a
        # cluster of 6 idle R3 topics kept 20% of a 2-core machine busy (the watch
        # 7% of a core, each replica 1.2%), 11.5% at 1 s; librdkafka's 1 KiB publish
        # to a seventh topic went from 62k to 76k records/s. A lost leader is replaced
        # within this plus leader_ping_timeout_ms (3 s), Kafka's broker session
        # timeout being 9 s. Tests and `rafka verify` watch every 100 ms.
        self.watch_interval_ms = watch_interval_ms
        # Ray warns at every replica started in a placement group with restarts on:
        # "the actor cannot restart once its group is removed". rafka removes a
        # replica's group only after killing the replica on purpose (delete_topic,
        # `rafka down`), so the warning says nothing here; it would flood the logs.
        logging.getLogger("ray.actor").setLevel(logging.ERROR)
        directory = Path(data_dir) / "controller"
        directory.mkdir(parents=True, exist_ok=True)
        self.metadata = ClusterMetadata()
        self._log_path = directory / METADATA_LOG
        self._metadata_version = 0   # records in the metadata log: the version of images built from it
        self._image = EMPTY_IMAGE
        self._brokers_listen = asyncio.Event()   # some broker's node registered: clients can bootstrap
        self._broker_push: asyncio.Task | None = None
        self._brokers_behind = False
        # Partitions whose new leader is committed and not told yet (`_commit`,
        # `_announce`): brokers get no image naming it until then (`_push_to_brokers`).
        self._leaders_untold: dict[tuple[str, int], asyncio.Future] = {}
        # Ping answers whose endpoints wait for the next group commit (`_sync_nodes`),
        # and the task writing them.
        self._answers_to_register: list[tuple] = []
        self._registrar: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None   # the actor's, known at its first call
        self._load()
        self._commit(self.metadata.handle_start())
        self._pool = ReplicaPool(size_per_broker=replica_pool_size, controller_epoch=self.metadata.controller_epoch)
        self._pool_filler: asyncio.Task | None = None
        self._pool_adopted = False   # idle shells of an earlier controller looked for
        self._shells_made: dict[str, asyncio.Future] = {}   # shells being made: name -> its handle, once made
        # A metadata log of before shells names no actor for its replicas: each gets
        # a shell's name now (created by the watch loop, told its replica by `assign`,
        # it reopens the replica's log on its broker).
        self._commit([record for name, topic in list(self.metadata.topics.items())
                      for record in self.metadata.handle_assign_replica_actors(topic, {
                          (p, r): self._pool.new_name(state.broker_of(r))
                          for p, state in enumerate(topic.partitions) for r in state.replicas
                          if self.metadata.replica_actor(name, p, r) is None})])
        # The cluster credential (actors/cluster_credential.py); `sasl` (rafka up --sasl)
        # or Ray's token authentication make every listener require a login.
        password = read_or_make_secret(directory)
        self._cluster_login = SaslLogin(CLUSTER_MECHANISM, CLUSTER_USER, password)
        require_sasl = sasl or ray_token_auth_enabled()
        self._commit(self.metadata.handle_cluster_credential(password, require_sasl=require_sasl))
        self._lock = asyncio.Lock()
        self._watcher: asyncio.Task | None = None
        self._starting: set[tuple[str, int]] = set()  # partitions not yet announced: not watched
        self._stopping = False    # shutdown_replicas ran: watch nothing, elect nobody
        self._replacer: asyncio.Task | None = None
        self._deleting: dict[str, asyncio.Event] = {}   # topics whose replicas are being torn down: set when gone
        self._background: set[asyncio.Task] = set()      # partitions starting after the answer (held: not collected)
        # Partitions of each topic whose replica actors are being created: a deletion
        # waits for them, so that it finds every actor it must stop.
        self._creating_by_topic: Counter[str] = Counter()
        self._creations_done = asyncio.Condition()
        # Actor handles by name. A handle stays valid across its actor's restarts; it
        # is dropped when the controller kills the actor or a call finds it dead for
        # good. Looking one up is a blocking GCS call: the watch loop made one per
        # replica per round, on the loop that also serves the bootstrap node.
        self._handles: dict[str, ray.actor.ActorHandle] = {}
        self._watch_round = 0
        # replica name -> (topic id, (role, leader epoch)) for replicas that answered in
        # their expected role, each with its parked `watch` call (REPLICA_WATCH_TIMEOUT_MS)
        self._settled: dict[str, tuple[str, tuple[str, int]]] = {}
        self._watches: dict[str, tuple[tuple, asyncio.Task]] = {}   # name -> (what it was settled as, its watch)
        self._image_versions: dict[str, int] = {}   # settled replicas: the image version each holds
        # brokers' network processes: (the image version it last reported, wall-clock ms of
        # that answer, ms of the last answer reporting the newest image), for DescribeQuorum
        self._nodes_synced: dict[str, tuple[int, int, int]] = {}
        self._image_pusher: asyncio.Task | None = None
        # The controller is a Kafka node too: the bootstrap address (DESIGN section 2),
        # served on a thread of its own (NodeThread says why); topic administration
        # and producer ids run on this actor's loop.
        self._node_thread = NodeThread(CONTROLLER_NAME)
        hop = lambda method: NodeThread.on_actor_loop(method, lambda: self._loop)   # noqa: E731
        # Its node is internal (brokers forward administration to it): a port the OS picks.
        self.serving = NodeServing(CONTROLLER_NAME, topic_admin_host=_TopicAdminOnActorLoop(self, hop),
                                   allocate_producer_id=hop(self.allocate_producer_id),
                                   image_source=self.cluster_image, envelopes=True, quorum=self._quorum)
        self.leader_elections = Histogram()   # ms from deciding an election to the new leader's role
        register_controller(self.serving.metrics, lambda: self.metadata, self.leader_elections)
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
            self._metadata_version += 1
            valid += len(line) + 1
        with open(self._log_path, "r+b") as f:
            f.truncate(valid)

    def _commit(self, records: list[dict]) -> None:
        if not records:
            return
        self._hold_until_told(self.metadata.leaders_moved_by(records))
        with open(self._log_path, "ab") as f:
            f.write(b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records))
            f.flush()
            os.fsync(f.fileno())
        for record in records:
            self.metadata.replay(record)
        if all(record["type"] in IMAGE_FREE_RECORD_TYPES for record in records):
            return   # no image holds any of it: no new version to push everywhere
        self._metadata_version += len(records)
        self._image = build_image(self.metadata, self._metadata_version, super_users=self.super_users)
        if self._image.brokers:
            self._brokers_listen.set()
        self._tell_brokers()

    def _hold_until_told(self, partitions: list[tuple[str, int]]) -> None:
        """Brokers see these partitions' new leaders only once `_announce` told them
        (or gave up on it), at most LEADER_HOLD_PINGS leader pings later. Kafka's
        controller sends LeaderAndIsr before UpdateMetadata for the same reason:
        a broker that names a leader before it leads sends a producer there, whose
        first batch is answered NOT_LEADER_OR_FOLLOWER and whose next one, on the
        same connection, is written once it leads, a sequence the new leader cannot
        check against a producer it has never seen; the first batch's retry is
        then refused OUT_OF_ORDER_SEQUENCE_NUMBER (`rafka verify`, restart-cluster:
        every partition elected at once on a busy machine). A second election of a
        partition before the first is told shares the first's hold."""
        if self._loop is None:   # loading, before any broker could be told
            return
        for key in partitions:
            if key not in self._leaders_untold:
                held = self._leaders_untold[key] = self._loop.create_future()
                self._loop.call_later(LEADER_HOLD_PINGS * self.leader_ping_timeout_ms / 1000,
                                      self._hold_expired, key, held)

    def _hold_expired(self, key: tuple[str, int], held: asyncio.Future) -> None:
        """The bound of one hold: it ends, not a later hold of the same partition."""
        if self._leaders_untold.get(key) is held:
            self._leader_told(*key)

    def _leader_told(self, topic: str, partition: int) -> None:
        held = self._leaders_untold.pop((topic, partition), None)
        if held is not None:
            held.set_result(None)
            self._tell_brokers()

    def _tell_brokers(self) -> None:
        """Every commit's image to the brokers' nodes at once, where clients read
        it (a client told a topic exists must find its leaders there), not at
        their next watch round. Coalesced: one push at a time, the newest image."""
        self._brokers_behind = True
        if self._loop is None or (self._broker_push is not None and not self._broker_push.done()):
            return
        self._broker_push = self._loop.create_task(self._push_to_brokers())

    async def brokers_current(self) -> None:
        """Until the brokers hold the current image (bounded per broker): an answer
        to topic administration goes back once every broker's Metadata and
        DescribeConfigs show the change."""
        self._tell_brokers()
        if self._broker_push is not None:
            await asyncio.shield(self._broker_push)

    async def _push_to_brokers(self) -> None:
        """The newest image to every broker process, once the leaders it moves are
        told (`_hold_until_told`): the image is taken first, so the wait is for its
        own moves, and one committed meanwhile goes in the next round's."""
        while self._brokers_behind:
            self._brokers_behind = False
            image, untold = self._image, list(self._leaders_untold.values())
            if untold:
                await asyncio.wait(untold)
            handles = [h for name, h in list(self._handles.items())
                       if broker_of_actor_name(name) is not None and name in self.metadata.nodes]
            if not handles:
                continue
            image = ray.put(image)   # one copy for every broker process, not one pickled per call
            await asyncio.gather(*(asyncio.wait_for(h.update_image.remote(image), self.leader_ping_timeout_ms / 1000)
                                   for h in handles), return_exceptions=True)

    # --- Kafka nodes: endpoints and the cluster image ------------------------------

    def cluster_image(self) -> ClusterImage:
        """The image of the current metadata (built at every commit, on the actor's
        loop; read from the node's thread too: an immutable value)."""
        return self._image

    async def _register_node(self, actor: str, endpoint, rack: str | None) -> None:
        host, port = endpoint
        known = self.metadata.nodes.get(actor)
        if known is not None and (known.host, known.port, known.rack) == (host, port, rack):
            return
        async with self._lock:
            records, node = self.metadata.handle_register_node(actor, host, port, rack)
            if records:
                self._commit(records)
                logger.info("%s is Kafka node %d at %s:%d", actor, node.node_id, host, port)

    async def _sync_node(self, handle, actor: str, answer: dict) -> None:
        """From an actor's ping answer: register its endpoint if new, and push the
        current image if the actor's is older (not awaited: the watch loop must not
        wait on one actor)."""
        if answer.get("endpoint") is not None:
            await self._register_node(actor, tuple(answer["endpoint"]), answer.get("rack"))
        image = self.cluster_image()
        version = reported = answer.get("image_version", image.version)
        if version < image.version:
            if broker_of_actor_name(actor) is not None:   # through the one push that waits for untold leaders
                self._tell_brokers()
            else:
                handle.update_image.remote(image)
            version = image.version
        self._image_versions[actor] = version   # (settled replicas: `_push_behind_images`)
        if broker_of_actor_name(actor) is not None:   # DescribeQuorum's observers: what it reported, and when
            seen_ms = _WALL_CLOCK.now_ms()
            caught_up_ms = seen_ms if reported >= image.version else self._nodes_synced.get(actor, (0, 0, -1))[2]
            self._nodes_synced[actor] = (reported, seen_ms, caught_up_ms)

    def _quorum(self) -> QuorumState:
        """The metadata log's quorum as DescribeQuorum tells it (handlers.describe_quorum),
        in the ids clients know, as a Kafka cluster in combined mode: the voter and
        leader is the broker Metadata and DescribeCluster name as the controller
        (`named_controller`), at the log's end, its controller listener this actor's
        node; the other brokers observe, each at the lowest image version its network
        processes reported, seen when the last of them answered, caught up when one
        last reported the newest image; one silent for OBSERVER_SESSION_TIMEOUT_MS
        is left out, as Kafka's leader forgets such an observer. Called on the
        node's thread: it reads the published image and a copy of the synced table
        (one C-level copy, atomic under the GIL)."""
        image = self.cluster_image()
        now_ms = _WALL_CLOCK.now_ms()
        voter = named_controller(image)
        observed: dict[int, tuple[int, int, int]] = {}
        for actor, (version, seen_ms, caught_up_ms) in dict(self._nodes_synced).items():
            broker_id = broker_of_actor_name(actor)
            if broker_id != voter and now_ms - seen_ms < OBSERVER_SESSION_TIMEOUT_MS:
                held, last_ms, last_caught_up_ms = observed.get(broker_id, (version, seen_ms, caught_up_ms))
                observed[broker_id] = (min(held, version), max(last_ms, seen_ms),
                                       min(last_caught_up_ms, caught_up_ms))
        node = image.nodes.get(image.controller_node)
        return QuorumState(
            leader_id=voter, leader_epoch=self.metadata.controller_epoch, high_watermark=image.version,
            voters=(ReplicaState(voter, image.version, now_ms, now_ms),),
            observers=tuple(ReplicaState(b, version, seen_ms, caught_up_ms)
                            for b, (version, seen_ms, caught_up_ms) in sorted(observed.items())),
            leader_endpoint=(node.host, node.port) if node is not None else None)

    async def _sync_nodes(self, answers: list[tuple]) -> None:
        """`_sync_node` for several replica actors' answers [(handle, actor, answer)], their
        endpoints registered in one commit (a new topic's replicas: one metadata
        write and one image, not one per replica), with those of every other caller
        arriving meanwhile (group commit: a topic's partitions, each answering when
        its replicas took their roles, share one or two writes, not one each)."""
        self._answers_to_register.extend(answers)
        if self._registrar is None or self._registrar.done():
            self._registrar = asyncio.get_running_loop().create_task(self._register_answers())
        await asyncio.shield(self._registrar)

    async def _register_answers(self) -> None:
        """The group commits of `_sync_nodes`, until none waits. It starts at the
        loop's next turn, so callers answered in the same turn share the first."""
        while self._answers_to_register:
            answers, self._answers_to_register = self._answers_to_register, []
            await self._register_now(answers)
            await asyncio.sleep(0)   # callers answered meanwhile join the next commit

    async def _register_now(self, answers: list[tuple]) -> None:
        async with self._lock:   # replicas only, and only those a deletion did not retire meanwhile
            records, _ = self.metadata.handle_register_nodes([
                (actor, *answer["endpoint"], answer.get("rack")) for _, actor, answer in answers
                if answer.get("endpoint") is not None and actor in self.metadata.actor_replicas])
            self._commit(records)
        for record in records:
            logger.info("%s is Kafka node %d at %s:%d", record["actor"], record["node_id"], record["host"],
                        record["port"])
        image = self.cluster_image()
        behind = [handle for handle, _, answer in answers if answer.get("image_version", image.version) < image.version]
        if behind:
            image_ref = ray.put(image)   # one copy for all of them
            for handle in behind:
                handle.update_image.remote(image_ref)

    def _endpoint_of(self, actor: str) -> tuple[str, int] | None:
        """An actor's registered Kafka endpoint (None: not registered yet)."""
        node = self.metadata.nodes.get(actor)
        return None if node is None else (node.host, node.port)

    async def _node_down(self, actor: str, why: str) -> None:
        """The actor no longer listens (died, restarting, retired): Metadata and
        FindCoordinator stop naming its endpoint until it registers again."""
        async with self._lock:
            records = self.metadata.handle_node_down(actor)
            if records:
                self._commit(records)
                logger.info("%s is down (%s): its endpoint is no longer named", actor, why)

    async def _push_image(self) -> None:
        """The current image to every actor the controller has a handle on, now,
        rather than at their next watch round (a change that takes endpoints away
        must reach the nodes before those endpoints close); to the brokers through
        `brokers_current` (it waits for untold leaders). Bounded: an actor that
        does not answer gets it from the watch loop."""
        image = ray.put(self.cluster_image())
        handles = [h for name, h in list(self._handles.items())
                   if name in self.metadata.nodes and broker_of_actor_name(name) is None]
        await asyncio.gather(self.brokers_current(), *(
            asyncio.wait_for(h.update_image.remote(image), self.leader_ping_timeout_ms / 1000) for h in handles),
            return_exceptions=True)

    # --- actor handles: every blocking Ray call runs off the event loop ------------
    # The controller's loop also serves the bootstrap node: a blocking GCS call here
    # (an actor lookup, a placement group, an actor creation, the node table) held
    # every Metadata answer for its whole length, seconds on a busy machine while a
    # topic's replicas started (issue 26). Each runs in a worker thread instead.

    async def _handle(self, name: str):
        """The named actor's handle; ValueError if no such actor exists."""
        handle = self._handles.get(name)
        if handle is None:
            handle = await asyncio.to_thread(ray.get_actor, name, namespace=NAMESPACE)
            self._handles[name] = handle
        return handle

    async def _kill(self, name: str, handle, *, remove_group: bool) -> None:
        """Kill the actor for good (no restart) and, for a replica actor, remove its
        placement group."""
        self._handles.pop(name, None)
        await asyncio.to_thread(ray.kill, handle, no_restart=True)
        if remove_group:
            await self._remove_replica_group(name)

    @staticmethod
    async def _remove_replica_group(shell: str) -> None:
        group = await asyncio.to_thread(existing_replica_group, shell)
        if group is not None:
            await asyncio.to_thread(remove_placement_group, group)

    async def node_endpoints(self) -> dict[str, tuple[str, int]]:
        """Every registered actor's Kafka endpoint, by actor name."""
        return {actor: self._endpoint_of(actor) for actor in self.metadata.nodes}

    # --- topics -------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           config: dict | None = None, validate_only: bool = False, *,
                           wait_for_leaders: bool = True) -> dict:
        """`validate_only`: every check a creation makes, nothing created. -1 for
        `partitions` or `replication_factor`: the cluster's default. A topic of
        this name still being deleted is waited for (the caller bounds the wait).
        `wait_for_leaders`: answer once every partition's leader serves (rafka's
        Admin); False: once the topic is committed and its replicas are starting,
        as Kafka's controller answers CreateTopics (the wire: clients see
        LEADER_NOT_AVAILABLE until the leaders serve, and retry)."""
        partitions = self.num_partitions if partitions == -1 else partitions
        replication_factor = self.default_replication_factor if replication_factor == -1 else replication_factor
        while (deleted := self._deleting.get(name)) is not None:
            await deleted.wait()
        async with self._lock:
            records, topic = self.metadata.handle_create_topic(
                name, partitions, replication_factor, config, await self._read_live_brokers())
            if validate_only:
                return {"name": name, "topic_id": None, "config": topic.config,
                        "partitions": [{"replicas": list(state.replicas)} for state in topic.partitions]}
            self._commit(records + self._take_shells(topic, range(partitions)))
            self._starting.update((name, p) for p in range(partitions))
        await self._start_partitions(name, range(partitions), wait_for_leaders)
        self._ensure_watcher()
        await self.brokers_current()   # every broker's Metadata knows it before the answer
        return self._describe_topic(name)

    def _take_shells(self, topic: TopicMetadata, partitions, replica_ids=None) -> list[dict]:
        """The records giving each new replica (of `partitions`; of `replica_ids`
        only, if given) a shell of its broker's pool, or a new shell's name when
        the pool has none there (made by `_ensure_replica`)."""
        actors = {}
        for p in partitions:
            state = topic.partitions[p]
            for r in state.replicas if replica_ids is None else replica_ids:
                broker_id = state.broker_of(r)
                actors[p, r] = self._pool.take(broker_id) or self._pool.new_name(broker_id)
        return self.metadata.handle_assign_replica_actors(topic, actors)

    async def _start_partitions(self, topic: str, partitions: range, wait: bool) -> None:
        """Start the new partitions' replicas (all at once); with `wait`, until each
        leader serves and the brokers have the image naming them, else in the
        background. The pool is refilled after: new processes starting take the
        CPU a creation has (one core of two here, the rest is the idle cluster's)."""
        async def start() -> None:
            try:
                await asyncio.gather(*(self._start_partition(topic, p) for p in partitions))
                await self.brokers_current()
            finally:
                self._starting.difference_update((topic, p) for p in partitions)
                self._fill_pool()
        if wait:
            await start()
            return
        task = asyncio.get_running_loop().create_task(start())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _start_partition(self, topic: str, partition: int) -> None:
        """A new partition's replicas, started and told their roles: one call each
        (`assign` with the partition's state, as Kafka's LeaderAndIsr gives a broker
        its new partitions), all at once. The partition is not watched meanwhile
        (`_starting`): replicas still starting would look like restarted ones, and
        the watch loop would elect one of them alone. A topic deleted meanwhile (the
        wire answers CreateTopics before its replicas start) ends it quietly: the
        deletion stops what was started. A replica that does not answer in time (a
        new process still starting) is left to the watch loop, which gives it its
        role as it does a restarted one's."""
        state = self.metadata.partition(topic, partition)
        topic_id = self.metadata.topic(topic).topic_id
        actors = self._actors_of(topic, partition, state.replicas)   # read now: a deletion meanwhile drops them

        def deleted() -> bool:   # meanwhile: its replicas are retired, their endpoints never named
            return topic not in self.metadata.topics or self.metadata.topic(topic).topic_id != topic_id
        self._creating_by_topic[topic] += 1
        try:   # assign sent before a deletion may send delete_log (an actor runs them in order)
            replicas = await asyncio.gather(*(self._ensure_replica(topic, partition, r, state, actors[r])
                                              for r in state.replicas))
            taken = [self._assign(topic, partition, r, handle, state) for r, handle in zip(state.replicas, replicas)]
        finally:
            self._creating_by_topic[topic] -= 1
            async with self._creations_done:
                self._creations_done.notify_all()
        # a shell of the pool takes it at once; a new one is a process to start: seconds
        answers = await asyncio.gather(*(asyncio.wait_for(ref, timeout=self.replica_start_timeout_ms / 1000)
                                         for ref in taken), return_exceptions=True)
        for replica_id, answer in zip(state.replicas, answers):
            if isinstance(answer, BaseException):
                if not isinstance(answer, (asyncio.TimeoutError, ray.exceptions.RayError)):
                    raise answer
                logger.warning("%s-%d: replica %d did not take its role in %d ms (the watch loop takes over): %r",
                               topic, partition, replica_id, self.replica_start_timeout_ms, answer)
        # Their endpoints only now, once the leader leads (Kafka's controller sends
        # LeaderAndIsr before UpdateMetadata): a broker's Metadata names a leader only
        # when its replica listens, and a leader named before it led answered a
        # producer's first batch NOT_LEADER_OR_FOLLOWER and took the next one, a
        # sequence it could not check against a producer it had never seen: those
        # records went in before the first batch's, whose retry was then refused
        # OUT_OF_ORDER_SEQUENCE_NUMBER (a CI run, test_restarts.py). Now, not at the
        # next watch round: brokers route to them at once; the followers start
        # fetching once this image names their leader's endpoint.
        if not deleted():
            await self._sync_nodes([(handle, actors[replica_id], answer)
                                    for replica_id, handle, answer in zip(state.replicas, replicas, answers)
                                    if not isinstance(answer, BaseException)])

    async def _ensure_replica(self, topic: str, partition: int, replica_id: int, state: PartitionState,
                              name: str | None = None):
        """The actor the metadata names for the replica: a shell taken from the pool,
        or one created now (with its placement group on its broker) if it does not
        exist (the pool had none; a whole-cluster restart). A replica whose broker
        is down is created all the same: Ray starts it when the broker's node comes
        back. It is not told its replica here (`_assign`): a recreated one reopens
        it from its assignment file. `name`: the actor, as read before an await
        (a deletion meanwhile drops it from the metadata; the deletion then kills
        what was made); ValueError if the replica has none."""
        name = name or self._replica_actor(topic, partition, replica_id)
        if name is None:
            raise ValueError(f"{topic}-{partition} replica {replica_id} has no actor")
        try:
            return await self._handle(name)
        except ValueError:
            pass
        if name not in self._shells_made:
            logger.info("%s-%d: starting replica %d on broker %d (%s)", topic, partition, replica_id,
                        state.broker_of(replica_id), name)
        return await self._make_shell(name, state.broker_of(replica_id))

    async def _make_shell(self, name: str, broker_id: int):
        """The shell's handle, once made (with its group); made once however many
        ask at a time (the pool making it while a replica takes it)."""
        made = self._shells_made.get(name)
        if made is None:
            made = self._shells_made[name] = asyncio.ensure_future(asyncio.to_thread(self._create_shell, name,
                                                                                     broker_id))
            made.add_done_callback(lambda _: self._shells_made.pop(name, None))
        handle = self._handles[name] = await asyncio.shield(made)
        return handle

    def _create_shell(self, name: str, broker_id: int):
        """A replica actor holding no replica yet, in its own placement group on
        broker `broker_id`. Blocking (GCS calls): run off the loop."""
        group = replica_placement_group(name, broker_id)
        return _REPLICA_ACTOR.options(
            name=name, namespace=NAMESPACE, get_if_exists=True,
            lifetime="detached", max_restarts=-1, max_task_retries=0, num_cpus=0,
            scheduling_strategy=in_bundle(group, 0)).remote(
            name=name, data_dir=self.data_dir, cluster_id=self.metadata.cluster_id,
            replica_lag_time_max_ms=self.replica_lag_time_max_ms,
            fetch_max_wait_ms=self.fetch_max_wait_ms, idle_fetch_max_wait_ms=self.idle_fetch_max_wait_ms,
            log_retention_check_interval_ms=self.log_retention_check_interval_ms,
            log_cleaner_backoff_ms=self.log_cleaner_backoff_ms,
            replica_high_watermark_checkpoint_interval_ms=self.replica_high_watermark_checkpoint_interval_ms,
            log_drop_behind_bytes=self.log_drop_behind_bytes)

    def _assign(self, topic: str, partition: int, replica_id: int, handle, state: PartitionState | None = None):
        """Tell the replica's actor which replica it holds (it answers as `ping`);
        with `state` (an online partition's), the role it gives the replica too."""
        topic_metadata = self.metadata.topic(topic)
        leader_and_isr = None if state is None or not state.online else {
            "leader": state.leader, "leader_epoch": state.leader_epoch, "replicas": list(state.replicas),
            "isr": list(state.isr), "partition_epoch": state.partition_epoch}
        return handle.assign.remote(topic=topic, partition=partition, replica_id=replica_id,
                                    topic_id=topic_metadata.topic_id, config=topic_metadata.config,
                                    leader_and_isr=leader_and_isr)

    # --- the pool of idle replica actors (core.replica_pool) -----------------------

    def _fill_pool(self) -> None:
        """Make the pool full again, in the background (one filler at a time)."""
        if self._stopping or self._loop is None:
            return
        if self._pool_filler is None or self._pool_filler.done():
            self._pool_filler = self._loop.create_task(self._fill_pool_now())

    async def _fill_pool_now(self) -> None:
        if not self._pool_adopted:
            self._pool_adopted = True
            await self._adopt_idle_shells()
        bound = asyncio.Semaphore(POOL_FILL_CONCURRENCY)

        async def make(broker_id: int) -> bool:
            async with bound:
                if self._stopping:
                    return False
                name = self._pool.new_name(broker_id)
                self._pool.starting(name)
                try:
                    handle = await self._make_shell(name, broker_id)
                    answer = await asyncio.wait_for(handle.ping.remote(), self.replica_start_timeout_ms / 1000)
                except (asyncio.TimeoutError, ray.exceptions.RayError) as error:
                    logger.warning("replica pool: %s on broker %d did not start: %s", name, broker_id, error)
                    self._pool.drop(name)
                    if name not in self.metadata.actor_replicas:   # taken meanwhile: the watch loop has it
                        handle = self._handles.get(name)
                        if handle is not None:
                            await self._kill(name, handle, remove_group=True)
                    return False
                if answer["role"] != UNASSIGNED:
                    logger.warning("replica pool: %s answered %s", name, answer["role"])
                credential = self.metadata.scram_credentials.get((CLUSTER_USER, CLUSTER_MECHANISM))
                if credential is not None:
                    try:   # its one-time work now, not in the creation that takes it
                        await asyncio.wait_for(handle.prepare.remote(credential.salt, credential.iterations),
                                               self.replica_start_timeout_ms / 1000)
                    except (asyncio.TimeoutError, ray.exceptions.RayError) as error:
                        logger.info("replica pool: %s not prepared (it will be when taken): %s", name, error)
                self._pool.ready(name)
                return True
        # Again while shells were taken meanwhile; not after a failure (a broker that
        # cannot place one): the next creation or a broker joining tries again.
        while not self._stopping:
            missing = self._pool.missing(await self._read_live_brokers())
            if not missing:
                return
            made = await asyncio.gather(*(make(b) for b, count in missing.items() for _ in range(count)))
            if not all(made):
                return

    async def _adopt_idle_shells(self) -> None:
        """Shells an earlier controller made (running, named, holding no replica in
        the metadata) join the pool; one that holds a replica the metadata no longer
        has (its topic's deletion was cut short) is deleted and killed."""
        names = await asyncio.to_thread(lambda: [
            a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == NAMESPACE and a["name"].startswith(REPLICA_SHELL_PREFIX)])

        async def one(name: str) -> None:
            try:   # one still starting answers once started
                handle = await self._handle(name)
                answer = await asyncio.wait_for(handle.ping.remote(), self.replica_start_timeout_ms / 1000)
            except (ValueError, asyncio.TimeoutError, ray.exceptions.RayError):
                return   # gone, or its broker is down: not taken now
            if name in self.metadata.actor_replicas:
                return
            if answer["role"] == UNASSIGNED:
                self._pool.adopt(name)
                return
            logger.warning("%s holds a replica of no topic (%s): deleted", name, answer.get("topic_id"))
            try:
                await asyncio.wait_for(handle.delete_log.remote(), self.leader_ping_timeout_ms / 1000)
            except (asyncio.TimeoutError, ray.exceptions.RayError):
                pass
            await self._kill(name, handle, remove_group=True)
        # a shell of a broker that is down would keep the pool waiting for its answer
        live = set(await self._read_live_brokers())
        await asyncio.gather(*(one(name) for name in names
                               if name not in self.metadata.actor_replicas and broker_of_shell(name) in live))

    async def replica_pool(self) -> dict:
        """The pool as it is now, per live broker: {"size_per_broker", "idle": {broker
        id: [shell names, ready ones first]}, "ready": {broker id: [the idle shells
        whose process answered]}, "missing": {broker id: shells not yet being made}}."""
        brokers = sorted(self._live_brokers)
        return {"size_per_broker": self._pool.size_per_broker,
                "idle": {b: self._pool.idle(b) for b in brokers},
                "ready": {b: self._pool.ready_names(b) for b in brokers},
                "missing": self._pool.missing(self._live_brokers)}

    async def _announce(self, topic: str, partition: int, state: PartitionState) -> None:
        """Tell the leader, then the followers, their roles at the current epoch. A
        replica that cannot take its role now (its broker is down, it is still
        starting) is told again by the watch loop."""
        try:
            if not state.online:
                return
            leader = await self._replica(topic, partition, state.leader)
            leader_endpoint = await asyncio.wait_for(leader.become_leader.remote(
                state.leader_epoch, list(state.replicas), list(state.isr), state.partition_epoch),
                timeout=self.leader_ping_timeout_ms / 1000)
        except (asyncio.TimeoutError, ray.exceptions.RayError) as error:
            logger.info("%s-%d: the leader did not take its role yet: %s", topic, partition, error)
            return
        finally:   # brokers may name it now: it leads, or the watch loop tells it
            self._leader_told(topic, partition)
        followers = [await self._replica(topic, partition, r) for r in state.replicas if r != state.leader]
        results = await asyncio.gather(*(asyncio.wait_for(
            f.become_follower.remote(state.leader, state.leader_epoch, leader_endpoint),
            timeout=self.leader_ping_timeout_ms / 1000) for f in followers), return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                logger.info("%s-%d: a follower did not take its role yet: %s", topic, partition, result)

    def _replica_actor(self, topic: str, partition: int, replica_id: int) -> str | None:
        return self.metadata.replica_actor(topic, partition, replica_id)

    async def _replica(self, topic: str, partition: int, replica_id: int):
        """The handle of the replica's actor; ValueError if it has none (yet)."""
        name = self._replica_actor(topic, partition, replica_id)
        if name is None:
            raise ValueError(f"{topic}-{partition} replica {replica_id} has no actor")
        return await self._handle(name)

    async def allocate_producer_id(self) -> int:
        """An idempotent producer's id (InitProducerId without a transactional id,
        on any node)."""
        async with self._lock:
            records, producer_id = self.metadata.handle_allocate_producer_id()
            self._commit(records)
        return producer_id

    async def allocate_producer_ids(self, count: int = PRODUCER_ID_BLOCK_SIZE) -> tuple[int, int]:
        """A block of producer ids for a transaction coordinator (Kafka's
        AllocateProducerIds): (first id, count), committed to the metadata log before
        it is answered, so no id is handed out twice, by this controller or the next.
        Ids of both kinds come from the one counter."""
        async with self._lock:
            records, block = self.metadata.handle_allocate_producer_ids(count)
            self._commit(records)
        return block

    async def next_transaction_coordinator_epoch(self, partition: int, leader_epoch: int) -> int:
        """A transaction coordinator's epoch for the load of its partition it has
        just made (core.metadata's handle_next_transaction_coordinator_epoch),
        committed to the metadata log before it is answered."""
        async with self._lock:
            records, epoch = self.metadata.handle_next_transaction_coordinator_epoch(partition, leader_epoch)
            self._commit(records)
        return epoch

    async def alter_topic_config(self, name: str, ops: list, validate_only: bool = False,
                                 replace: bool = False) -> dict:
        """IncrementalAlterConfigs (`ops`: [(operation, name, value)], core.config's
        SET, DELETE, APPEND, SUBTRACT) or, with `replace`, AlterConfigs, for topic
        `name`. The merge happens here, under the lock, against the committed
        overrides (as Kafka's controller merges), so two clients altering one topic
        through different nodes never lose a change. The new image goes to every
        node before the answer: its replicas run with the new config (the replica
        actor reconfigures on update_image) and DescribeConfigs anywhere shows it.
        Answers {"name", "config": the topic's overrides}; typed errors as
        core.metadata.handle_alter_topic_config raises them."""
        async with self._lock:
            records, overrides = self.metadata.handle_alter_topic_config(
                name, [tuple(op) for op in ops], replace=replace)
            if validate_only or not records:
                return {"name": name, "config": overrides}
            self._commit(records)
        logger.info("topic %s: configs now %s", name, overrides)
        await self._push_image()
        return {"name": name, "config": overrides}

    async def alter_broker_loggers(self, broker_id: int, ops: list) -> dict:
        """Broker `broker_id`'s logger levels altered (`ops` checked by the broker,
        which knows its loggers: core.broker_loggers): its new map, committed and
        pushed to every node before the answer, so each of the broker's processes
        logs by it when the client hears. Answers the map."""
        levels = await self._commit_and_push(
            lambda: self.metadata.handle_alter_broker_loggers(broker_id, [tuple(op) for op in ops]),
            f"broker {broker_id}'s loggers")
        return dict(levels)

    async def _commit_and_push(self, handle: Callable[[], tuple[list, list]], what: str, *,
                               commit: bool = True) -> list:
        """`handle()` (a core.metadata handler: its records and per-item results) run
        under the lock and its records committed (unless `commit` is False:
        validate_only), then the new image pushed to every node before the
        answer, so every node decides by the change once the client hears of it
        (its ACLs, quotas, users)."""
        async with self._lock:
            records, results = handle()
            if not commit or not records:
                return results
            self._commit(records)
        logger.info("%s: %d records committed", what, len(records))
        await self._push_image()   # the brokers' included
        return results

    async def create_acls(self, bindings: list) -> list:
        """CreateAcls (core.acl.AclBinding each): per binding None or its typed error
        (core.metadata.handle_create_acls); pushed before the answer."""
        return await self._commit_and_push(lambda: self.metadata.handle_create_acls(bindings), "ACLs created")

    async def delete_acls(self, filters: list) -> list:
        """DeleteAcls (core.acl.AclBindingFilter each): per filter the bindings it
        removed or its typed error; pushed before the answer."""
        return await self._commit_and_push(lambda: self.metadata.handle_delete_acls(filters), "ACLs deleted")

    async def alter_client_quotas(self, entries: list, validate_only: bool = False) -> list:
        """AlterClientQuotas (protocol.handlers.client_quotas.Alteration each): per
        entry None or its typed error (core.metadata.handle_alter_client_quotas);
        pushed before the answer, so every broker throttles by the new quotas."""
        return await self._commit_and_push(lambda: self.metadata.handle_alter_client_quotas(entries),
                                           "client quotas", commit=not validate_only)

    async def update_features(self, updates: list, validate_only: bool = False) -> None:
        """UpdateFeatures [(feature, level, upgrade type)] (core.features): written
        together and pushed before the answer, so every node tells and gates by the
        new levels; InvalidUpdateVersion for the first that cannot be, nothing written."""
        def handle():
            return self.metadata.handle_update_features(
                updates, controller_id=named_controller(self.cluster_image())), None
        await self._commit_and_push(handle, "feature levels", commit=not validate_only)

    async def delete_topic(self, name: str) -> None:
        """Remove the topic from the metadata first (clients stop finding it), then
        its replicas' logs, actors and placement groups. A replica whose broker is
        down keeps its log; partition.metadata names the old topic id, so a topic
        created again under this name never reopens it."""
        async with self._lock:
            topic = self.metadata.topic(name)
            actors = {(partition, replica_id): self._replica_actor(name, partition, replica_id)
                      for partition, state in enumerate(topic.partitions) for replica_id in state.replicas}
            self._commit(self.metadata.handle_delete_topic(name) + [
                record for actor in actors.values() if actor is not None
                for record in self.metadata.handle_node_down(actor)])
            self._deleting[name] = asyncio.Event()
        await self._push_image()   # no node names the replicas' endpoints before they close
        async with self._creations_done:   # a creation answered before its replicas exist
            await self._creations_done.wait_for(lambda: self._creating_by_topic[name] <= 0)
        self._creating_by_topic.pop(name, None)
        try:
            await asyncio.gather(*(self._retire_replica(name, partition, replica_id, actor)
                                   for (partition, replica_id), actor in actors.items() if actor is not None))
        finally:
            self._deleting.pop(name).set()

    async def _retire_replica(self, topic: str, partition: int, replica_id: int, name: str) -> None:
        """A replica leaves for good (its topic deleted, or moved off its broker):
        its log is deleted if its broker is up (else it stays, and partition.metadata
        keeps it from ever being reopened as another topic's), then its actor (the
        shell `name`: never reused) and placement group go. Its endpoint is named
        nowhere before it closes."""
        self._settled.pop(name, None)   # its watch ends quietly when the log goes
        if name in self.metadata.nodes:
            await self._node_down(name, "retired")
            await self._push_image()
        try:
            handle = await self._handle(name)
        except ValueError:
            handle = None
        if handle is not None:
            try:
                await asyncio.wait_for(handle.delete_log.remote(), self.leader_ping_timeout_ms / 1000)
            except (asyncio.TimeoutError, ray.exceptions.RayError) as error:
                logger.info("%s-%d: replica %d kept its log (its broker down?): %s", topic, partition,
                            replica_id, error)
            await self._kill(name, handle, remove_group=True)
        else:
            await self._remove_replica_group(name)

    async def add_partitions(self, name: str, count: int, validate_only: bool = False, *,
                             wait_for_leaders: bool = True) -> dict:
        """kafka-topics.sh --alter --partitions: the new partitions are assigned to
        live brokers and started as at creation (`wait_for_leaders` as there)."""
        async with self._lock:
            before = len(self.metadata.topic(name).partitions)
            records, grown = self.metadata.handle_add_partitions(name, count, await self._read_live_brokers())
            if validate_only:
                return {"name": name}
            self._commit(records + self._take_shells(grown, range(before, count)))
            self._starting.update((name, p) for p in range(before, count))
        await self._start_partitions(name, range(before, count), wait_for_leaders)
        await self.brokers_current()
        return self._describe_topic(name)

    async def reassign_partition(self, topic: str, partition: int, brokers: list[int] | None) -> dict:
        """Move the partition's replicas onto `brokers` (None: cancel its move, the
        replicas being added go): new replicas start now and catch up; the watch
        loop drops the replaced ones once every new one is in the ISR. The broker
        replacement check's; the wire's is alter_partition_reassignments."""
        async with self._lock:
            live = await self._read_live_brokers() if brokers is not None else ()
            records, state, removed = self._stage_reassignment(topic, partition, brokers, live)
        if _starts_or_stops(records, brokers, state):
            await self._after_replica_change(topic, partition, state, removed=removed)
        return self._describe_topic(topic)["partitions"][partition]

    def _stage_reassignment(self, topic: str, partition: int, brokers: list[int] | None, live, *,
                            allow_replication_factor_change: bool = True
                            ) -> tuple[list[dict], PartitionState, dict[int, str]]:
        """Under the lock: one partition's move onto `brokers` (None: its cancel)
        validated (core.metadata.handle_alter_reassignment, its typed errors) and
        committed; (the records, the new state, the replicas to stop: {id: actor})."""
        adding = self._actors_of(topic, partition, self.metadata.partition(topic, partition).adding)
        records, state = self.metadata.handle_alter_reassignment(
            topic, partition, brokers, live, allow_replication_factor_change=allow_replication_factor_change)
        if brokers is None:
            self._commit(records)
            logger.info("%s-%d: reassignment cancelled, replicas %s stopped", topic, partition, list(adding))
            return records, state, adding
        return self._commit_reassignment(topic, partition, records, state), state, {}

    def _commit_reassignment(self, topic: str, partition: int, records: list[dict],
                             state: PartitionState) -> list[dict]:
        """Under the lock: a reassignment's records committed with the shells of its
        new replicas, on their brokers; the records written."""
        if records:
            staged = self.metadata.topic(topic)
            staged = dataclasses.replace(staged, partitions=staged.partitions[:partition] + (state,)
                                         + staged.partitions[partition + 1:])
            records = records + self._take_shells(staged, [partition], state.adding)
            logger.info("%s-%d: reassigning to brokers %s (adding replicas %s, removing %s)", topic, partition,
                        [state.broker_of(r) for r in state.replicas if r not in state.removing],
                        list(state.adding), list(state.removing))
        self._commit(records)
        return records

    async def alter_partition_reassignments(self, moves: list, allow_replication_factor_change: bool = True
                                            ) -> list:
        """AlterPartitionReassignments (protocol.handlers.partition_admin): per
        (topic, partition, broker ids or None to cancel), in order, None or its
        typed error (core.metadata.handle_alter_reassignment). Answered once the
        changes are committed and every node has the image; the new replicas start
        and catch up in the background (the watch loop completes each move), the
        cancelled ones stop, as Kafka's controller answers once its records are
        written."""
        results: list = []
        changed: list[tuple[str, int, PartitionState, dict[int, str]]] = []
        async with self._lock:
            live = await self._read_live_brokers()
            for topic, partition, brokers in moves:
                try:
                    records, state, removed = self._stage_reassignment(
                        topic, partition, brokers, live, allow_replication_factor_change=allow_replication_factor_change)
                except KafkaError as error:
                    results.append(error)
                    continue
                if _starts_or_stops(records, brokers, state):
                    changed.append((topic, partition, state, removed))
                results.append(None)
        if changed:
            await self.brokers_current()

            async def after() -> None:
                results = await asyncio.gather(*(self._after_replica_change(topic, partition, state, removed=removed)
                                                 for topic, partition, state, removed in changed),
                                               return_exceptions=True)
                for (topic, partition, _, _), result in zip(changed, results):
                    if isinstance(result, Exception):   # the watch loop completes what is left
                        logger.warning("%s-%d: starting or stopping the moved replicas failed: %s",
                                       topic, partition, result)
            task = asyncio.get_running_loop().create_task(after())
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return results

    async def list_partition_reassignments(self, partitions: list | None = None) -> list:
        """ListPartitionReassignments: (topic, partition, replicas, adding,
        removing) of each partition moving, as broker ids (core.metadata.reassignments)."""
        return self.metadata.reassignments(partitions)

    async def _complete_reassignment(self, topic: str, partition: int) -> bool:
        """True if the reassignment completed now (every staying replica in the ISR)."""
        async with self._lock:
            removing = self._actors_of(topic, partition, self.metadata.partition(topic, partition).removing)
            records, state = self.metadata.handle_complete_reassignment(topic, partition)
            self._commit(records)
        if records:
            logger.info("%s-%d: reassignment complete, replicas %s on brokers %s", topic, partition,
                        list(state.replicas), list(state.brokers))
            await self._after_replica_change(topic, partition, state, removed=removing)
        return bool(records)

    def _actors_of(self, topic: str, partition: int, replica_ids) -> dict[int, str]:
        """{replica id: its actor}, read before a record that drops the replicas."""
        return {r: a for r in replica_ids if (a := self._replica_actor(topic, partition, r)) is not None}

    async def _after_replica_change(self, topic: str, partition: int, state: PartitionState,
                                    removed: dict[int, str]) -> None:
        """Start replicas the metadata names (the ones being added are given their
        replica), announce the new epoch, then stop the removed ones ({replica id:
        actor}): their logs are deleted where their broker is up."""
        actors = self._actors_of(topic, partition, state.replicas)
        for replica_id in state.replicas:
            handle = await self._ensure_replica(topic, partition, replica_id, state, actors.get(replica_id))
            if replica_id in state.adding:
                try:
                    answer = await asyncio.wait_for(self._assign(topic, partition, replica_id, handle),
                                                    self.replica_start_timeout_ms / 1000)
                except (asyncio.TimeoutError, ray.exceptions.RayError) as error:
                    logger.info("%s-%d: replica %d not started yet (the watch loop takes over): %s", topic,
                                partition, replica_id, error)
                else:
                    if self._replica_actor(topic, partition, replica_id) == actors[replica_id]:   # still there
                        await self._sync_node(handle, actors[replica_id], answer)
        await self._announce(topic, partition, state)
        await asyncio.gather(*(self._retire_replica(topic, partition, r, actor) for r, actor in removed.items()))
        self._fill_pool()

    async def _read_live_brokers(self) -> list[int]:
        """Ray's node table, off the loop; remembered for the brokers' nodes."""
        live = await asyncio.to_thread(live_broker_ids)
        joined = set(live) - self._live_brokers
        self._live_brokers = set(live)
        if joined:
            self._fill_pool()   # a broker that joined gets its pool
        return live

    async def _replace_lost_brokers(self) -> None:
        """Reassign the replicas of brokers gone longer than the replacement timeout
        to the live brokers holding the fewest replicas (online partitions only: an
        offline one has no leader to copy from)."""
        now_s = time.monotonic()
        if now_s < self._next_broker_check_s:
            return
        # ray.nodes() is a GCS round trip that stalls this loop (and the bootstrap
        # node it serves) for most of a second on a busy machine: asked once per
        # tenth of the replacement timeout, at most every 10 s, not every round.
        self._next_broker_check_s = now_s + min(10.0, self.broker_replacement_timeout_ms / 10_000)
        live = await self._read_live_brokers()
        partitions = [(name, p, state) for name, topic in list(self.metadata.topics.items())
                      for p, state in enumerate(topic.partitions)]
        referenced = {b for _, _, state in partitions for b in state.brokers}
        for broker_id in referenced - set(live):
            self._broker_down_since_s.setdefault(broker_id, now_s)
        for broker_id in list(self._broker_down_since_s):
            if broker_id in live or broker_id not in referenced:
                del self._broker_down_since_s[broker_id]
        lost = {b for b, since_s in list(self._broker_down_since_s.items())
                if (now_s - since_s) * 1000 >= self.broker_replacement_timeout_ms}
        if not lost:
            return
        load = Counter(b for _, _, state in partitions for b in state.brokers)
        for name, partition, state in partitions:
            moving_to_lost = [r for r in state.adding if state.broker_of(r) in lost]
            if moving_to_lost and state.online:   # a move onto a broker that left: undo it first
                try:
                    await self.reassign_partition(name, partition, None)
                    state = self.metadata.partition(name, partition)
                except Exception as error:
                    logger.warning("%s-%d: cancelling the move to a lost broker failed: %s", name, partition, error)
                    continue
            if not state.online or state.adding or state.removing or not set(state.brokers) & lost:
                continue
            target = list(state.brokers)
            for i, broker_id in enumerate(target):
                if broker_id in lost:
                    candidates = [c for c in live if c not in target]
                    if not candidates:
                        break
                    target[i] = min(candidates, key=lambda c: (load[c], c))
                    load[target[i]] += 1
            else:
                logger.warning("%s-%d: brokers %s gone for %d ms: replicas move to %s", name, partition,
                               sorted(set(state.brokers) & lost), self.broker_replacement_timeout_ms, target)
                try:
                    await self.reassign_partition(name, partition, target)
                except Exception as error:   # the next check tries again
                    logger.warning("%s-%d: reassignment failed: %s", name, partition, error)

    # --- users (SASL/SCRAM) ----------------------------------------------------------

    async def alter_user_scram_credentials(self, deletions: list, upsertions: list) -> list:
        """AlterUserScramCredentials (core.scram_admin's Deletion and Upsertion each,
        salted by the client: no password reaches the controller): per user named
        None or its typed error; pushed before the answer, so every listener logs
        the user in with the new credential."""
        return await self._commit_and_push(
            lambda: self.metadata.handle_alter_user_scram_credentials(deletions, upsertions), "SCRAM credentials")

    async def sasl_required(self) -> bool:
        return self.metadata.sasl_required

    async def cluster_login(self) -> SaslLogin:
        """The cluster credential, for rafka's own clients (cluster_credential.cluster_login)."""
        return self._cluster_login

    async def list_brokers(self) -> list[dict]:
        """The broker registry (placement/brokers.py): [{broker_id, node_id, address}]
        of the live Ray nodes that offer the rafka broker resource."""
        return await asyncio.to_thread(broker_nodes)

    async def replica_actor(self, topic: str, partition: int, replica_id: int) -> str | None:
        """The name of the actor holding the replica (None: none), for operators'
        tools and tests that reach a replica's actor (`ray.get_actor(name,
        namespace="rafka")`)."""
        return self._replica_actor(topic, partition, replica_id)

    async def list_topics(self) -> list[str]:
        return sorted(self.metadata.topics)

    async def metadata_snapshot(self) -> dict:
        return {"cluster_id": self.metadata.cluster_id, "controller_epoch": self.metadata.controller_epoch,
                "topics": {name: self._describe_topic(name) for name in self.metadata.topics}}

    def _describe_topic(self, name: str) -> dict:
        topic = self.metadata.topic(name)
        image = broker_view(self.cluster_image())
        in_image = image.topics.get(name)

        def leader_endpoint(p: int) -> tuple[int, str | None]:
            """(Kafka node id, host:port) of the leader as clients' Metadata names it:
            its broker's."""
            node_id = in_image.partitions[p].leader_node if in_image else -1
            node = image.nodes.get(node_id)
            return node_id, (f"{node.host}:{node.port}" if node else None)
        return {"name": name, "topic_id": topic.topic_id, "config": topic.config,
                "partitions": [{"partition": p, "leader": s.leader, "leader_epoch": s.leader_epoch,
                                "partition_epoch": s.partition_epoch, "replicas": list(s.replicas),
                                "isr": list(s.isr), "brokers": list(s.brokers),
                                "adding": list(s.adding), "removing": list(s.removing),
                                "actors": {r: self._replica_actor(name, p, r) for r in s.replicas},
                                "leader_kafka_node": leader_endpoint(p)[0],
                                "leader_endpoint": leader_endpoint(p)[1]}
                               for p, s in enumerate(topic.partitions)]}

    # --- ISR changes and elections ------------------------------------------------

    async def partition_record(self, topic: str, partition: int) -> dict:
        """One partition's committed record, for its leader reading back an ISR
        change (actors.replica `_keep_isr`): {"topic_id", "leader", "leader_epoch",
        "partition_epoch", "isr"}; UNKNOWN_TOPIC_OR_PARTITION if there is none."""
        state = self.metadata.partition(topic, partition)
        return {"topic_id": self.metadata.topic(topic).topic_id, "leader": state.leader,
                "leader_epoch": state.leader_epoch, "partition_epoch": state.partition_epoch,
                "isr": list(state.isr)}

    async def alter_isr(self, topic: str, partition: int, leader: int, leader_epoch: int,
                        partition_epoch: int, new_isr: list[int]) -> dict:
        async with self._lock:
            records, state = self.metadata.handle_alter_isr(topic, partition, leader, leader_epoch,
                                                            partition_epoch, new_isr)
            self._commit(records)
        return {"isr": list(state.isr), "partition_epoch": state.partition_epoch}

    async def elect_leader(self, topic: str, partition: int, unavailable: list[int],
                           restarted: list[int] = (), *, partition_epoch: int | None = None) -> dict:
        """`partition_epoch`: the state the caller judged `unavailable` and
        `restarted` on; if the partition changed since, nothing is elected (the
        watch loop looks again)."""
        started_s = time.monotonic()
        async with self._lock:
            state = self.metadata.partition(topic, partition)
            if partition_epoch is not None and state.partition_epoch != partition_epoch:
                return {"leader": state.leader, "leader_epoch": state.leader_epoch, "isr": list(state.isr)}
            records, state = self.metadata.handle_elect_leader(topic, partition, unavailable, restarted)
            self._commit(records)
        logger.info("%s-%d: leader %d at epoch %d, ISR %s", topic, partition, state.leader,
                    state.leader_epoch, list(state.isr))
        await self._announce(topic, partition, state)
        if state.online:
            self.leader_elections.observe((time.monotonic() - started_s) * 1000)
        return {"leader": state.leader, "leader_epoch": state.leader_epoch, "isr": list(state.isr)}

    async def elect_leaders(self, election_type: int, partitions: list | None = None) -> list:
        """ElectLeaders (protocol.handlers.partition_admin): per partition (None:
        every one, those needing no election left out) its typed error or None,
        decided by core.metadata.elect_on_request on the replicas that could serve
        now (`_serving_replicas`). Every election is committed, then the new
        leaders and their followers are told, then the answer goes out (Kafka's
        controller answers once the records are written; here the roles too, so
        that Metadata names the new leader when the client asks next)."""
        started_s = time.monotonic()
        async with self._lock:
            if self._stopping:
                raise NotController("the controller is stopping: no elections")
            await self._read_live_brokers()
            records, results = self.metadata.handle_elect_leaders(election_type, partitions,
                                                                  self._serving_replicas)
            elected = [(topic, partition) for topic, partition, error in results if error is None]
            self._commit(records)
        for topic, partition in elected:
            state = self.metadata.partition(topic, partition)
            logger.info("%s-%d: %s election: leader %d at epoch %d, ISR %s", topic, partition,
                        "unclean" if election_type == UNCLEAN_ELECTION else "preferred", state.leader,
                        state.leader_epoch, list(state.isr))
        await asyncio.gather(*(self._announce(topic, partition, self.metadata.partition(topic, partition))
                               for topic, partition in elected))
        if elected:
            self.leader_elections.observe((time.monotonic() - started_s) * 1000)
            await self.brokers_current()
        return results

    def _serving_replicas(self, topic: str, partition: int) -> set[int]:
        """The replicas of the partition that could serve now: their actor has an
        endpoint (it registered and was not seen down since) on a broker Ray counts
        live (Kafka's unfenced brokers)."""
        state = self.metadata.partition(topic, partition)
        return {r for r in state.replicas
                if self._replica_actor(topic, partition, r) in self.metadata.nodes
                and state.broker_of(r) in self._live_brokers}

    def _ensure_watcher(self) -> None:
        if self._stopping:
            return
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch_leaders())

    async def _watch_leaders(self) -> None:
        """Every partition is checked concurrently: a paused node makes each of its
        pings wait `leader_ping_timeout_ms`, which must not delay the failover of
        partitions elsewhere."""
        while not self._stopping:
            await asyncio.sleep(self.watch_interval_ms / 1000)
            self._watch_round += 1
            if self._replacer is None or self._replacer.done():
                # its own task: reassignments announce to new replicas (seconds each)
                # and must never delay a leader election in this loop
                self._replacer = asyncio.get_running_loop().create_task(self._replace_lost_brokers())
            if (self._watch_round % PUSH_SETTLED_EVERY_ROUNDS == 0
                    and (self._image_pusher is None or self._image_pusher.done())):
                self._image_pusher = asyncio.get_running_loop().create_task(self._push_behind_images())
            partitions = [(name, p) for name, topic in list(self.metadata.topics.items())
                          for p in range(len(topic.partitions)) if (name, p) not in self._starting]
            results = await asyncio.gather(*(self._check_partition(name, p) for name, p in partitions),
                                           self._check_coordinators(), self._check_brokers(), return_exceptions=True)
            for failure in results[-2:]:
                if isinstance(failure, Exception):
                    logger.warning("checking coordinators or brokers failed: %s", failure)
            results = results[:-2]
            for (name, partition), result in zip(partitions, results):
                if isinstance(result, Exception):  # keep watching the other partitions
                    logger.warning("checking %s-%d failed: %s", name, partition, result)

    async def _check_partition(self, topic: str, partition: int) -> None:
        """Make the partition's actors match its metadata: create missing replicas,
        replace a leader that is gone, unresponsive or restarted, bring an offline
        partition back when an ISR member is up, give restarted replicas their role."""
        if self._stopping:
            return
        state = self.metadata.partition(topic, partition)
        if (state.adding or state.removing) and await self._complete_reassignment(topic, partition):
            return
        roles = await asyncio.gather(*(self._role_seen(topic, partition, r, state) for r in state.replicas))
        role_by_replica = dict(zip(state.replicas, roles))
        # Gone, paused, still starting or with an unusable log dir: may not lead.
        unavailable = sorted(r for r, role in role_by_replica.items() if role is None or role[0] == OFFLINE)
        # Came back with its log and no role: may lead only if no running ISR member can.
        restarted = sorted(r for r, role in role_by_replica.items() if role == RESTARTED)
        if self._stopping or self.metadata.partition(topic, partition) != state:
            return   # changed meanwhile (an ISR change, another check): look again next round
        seen = role_by_replica[state.leader] if state.online else None
        if state.online and seen != ("leader", state.leader_epoch):
            if (seen is not None and seen != RESTARTED and seen[0] in ("leader", "follower")
                    and seen[1] < state.leader_epoch):
                # Alive, at an epoch before the one a commit gave it (an election, a
                # reassignment's start, cancel or completion) and not told yet: told,
                # not taken for lost (electing another would move leadership for
                # nothing). A restarted one is elected anew, at a new epoch, as before.
                await self._announce(topic, partition, state)
                return
            if state.leader not in restarted:
                unavailable = sorted(set(unavailable) | {state.leader})
            await self.elect_leader(topic, partition, unavailable, restarted, partition_epoch=state.partition_epoch)
            return
        if not state.online:
            if any(r in state.isr for r in state.replicas if r not in unavailable):
                await self.elect_leader(topic, partition, unavailable, restarted,
                                        partition_epoch=state.partition_epoch)
            return
        restarted_in_isr = [r for r in restarted if r in state.isr]
        if restarted_in_isr:
            await self._remove_from_isr(topic, partition, restarted_in_isr)
            state = self.metadata.partition(topic, partition)
        for replica_id, role in role_by_replica.items():
            if (replica_id != state.leader and role is not None and role[0] != OFFLINE
                    and role != ("follower", state.leader_epoch)):
                await self._bounded((await self._replica(topic, partition, replica_id)).become_follower.remote(
                    state.leader, state.leader_epoch,
                    self._endpoint_of(self._replica_actor(topic, partition, state.leader))),
                    f"{topic}-{partition} replica {replica_id}: become_follower")

    async def _check_coordinators(self) -> None:
        """Each group and transaction coordinator's Kafka endpoint registered and its
        image current (they hold no replica: nothing else here watches them)."""
        names = [name_of(p) for topic, name_of in ((OFFSETS_TOPIC, coordinator_actor_name),
                                                   (TRANSACTION_STATE_TOPIC, transaction_coordinator_actor_name))
                 for p in range(len(self.metadata.topics[topic].partitions) if topic in self.metadata.topics else 0)]

        async def one(name: str) -> None:
            try:
                handle = await self._handle(name)
                answer = await asyncio.wait_for(handle.ping.remote(), timeout=self.leader_ping_timeout_ms / 1000)
            except (ValueError, asyncio.TimeoutError):
                return   # not started yet, or paused: the next round
            except ray.exceptions.RayError as error:   # dead or restarting: not listening
                self._lost(name, error)
                await self._node_down(name, type(error).__name__)
                return
            await self._sync_node(handle, name, answer)
        await asyncio.gather(*(one(name) for name in names))

    async def _check_brokers(self) -> None:
        """Every live broker runs its network processes (created here, pinned to the
        broker by its label, on the broker's port), registered, with a current image.
        A broker's processes that cannot run (its node is gone) wait for it: Ray
        restarts them there when it is back, on the same port."""
        if not self._live_brokers:
            await self._read_live_brokers()
        referenced = {b for topic in list(self.metadata.topics.values()) for state in topic.partitions
                      for b in state.brokers}

        async def one(broker_id: int, process: int) -> None:
            name = broker_actor_name(broker_id, process)
            try:
                handle = self._handles.get(name)
                if handle is None:
                    try:
                        handle = await self._handle(name)
                    except ValueError:   # not created yet
                        port = await self._broker_port(broker_id, process) \
                            if broker_id in self._live_brokers else None
                        if port is None:
                            return   # the next round
                        handle = self._handles[name] = await asyncio.to_thread(
                            self._create_broker_process, broker_id, process, port)
                answer = await asyncio.wait_for(handle.ping.remote(), timeout=self.leader_ping_timeout_ms / 1000)
            except asyncio.TimeoutError:
                if name in self.metadata.nodes and broker_id not in self._live_brokers:
                    await self._node_down(name, "its broker is not live")
                return
            except ray.exceptions.RayError as error:   # dead, restarting, or its port is taken: not listening
                if isinstance(error, ray.exceptions.RayTaskError):
                    logger.warning("broker %d's node does not listen on port %s: %s", broker_id,
                                   self.listener_port or self.metadata.broker_ports.get(broker_id), error.cause)
                self._lost(name, error)
                await self._node_down(name, type(error).__name__)
                return
            if not self.listener_port and broker_id not in self.metadata.broker_ports:   # a log from before
                async with self._lock:                                                    # ports were kept
                    if broker_id not in self.metadata.broker_ports:
                        self._commit(self.metadata.handle_broker_port(broker_id, answer["endpoint"][1]))
            await self._sync_node(handle, name, answer)
        await asyncio.gather(*(one(b, k) for b in sorted(self._live_brokers | referenced)
                               for k in range(self.network_processes)))

    async def _broker_port(self, broker_id: int, process: int) -> int | None:
        """The port a new process of the broker listens on; None: not known yet (the
        next round). All of a broker's processes share one port: the listener port,
        or, when it is 0 (brokers sharing a host), a free one chosen once by process
        0 and kept in the metadata log, so a restarted controller creates a missing
        process on it whether or not the broker's other processes answer. Chosen
        and committed under the lock with no await between: two processes of one
        broker created in one round once took a free port each (CI saw the broker
        refuse connections while the process Metadata named restarted). A log
        written before ports were kept has none: an existing process's ping
        records it, and process 0 waits while any other process of the broker exists."""
        if self.listener_port:
            return self.listener_port
        port = self.metadata.broker_ports.get(broker_id)
        if port is not None:
            return port
        if process > 0:
            return None
        for other in range(1, self.network_processes):
            try:
                await self._handle(broker_actor_name(broker_id, other))
                return None
            except ValueError:
                pass
        async with self._lock:   # chosen and recorded with no await between
            port = self.metadata.broker_ports.get(broker_id)
            if port is None:
                port = _free_port(set(self.metadata.broker_ports.values()))
                self._commit(self.metadata.handle_broker_port(broker_id, port))
        return port

    def _create_broker_process(self, broker_id: int, process: int, port: int):
        """(In a worker thread: Ray calls that block.) Process `process` of broker
        `broker_id`, listening on `port` (`_broker_port`)."""
        return _BROKER_ACTOR.options(
            name=broker_actor_name(broker_id, process), namespace=NAMESPACE, lifetime="detached",
            max_restarts=-1, num_cpus=0, get_if_exists=True,
            label_selector={BROKER_ID_LABEL: str(broker_id)}).remote(
            broker_id=broker_id, process=process, listener_port=port, shared_port=self.network_processes > 1,
            data_dir=self.data_dir)

    def _lost(self, name: str, error: Exception) -> None:
        """A call found the actor gone for good (killed without restart): its
        handle is dropped, so the next lookup finds a new actor of that name."""
        if isinstance(error, ray.exceptions.ActorDiedError):
            self._handles.pop(name, None)

    async def _remove_from_isr(self, topic: str, partition: int, replica_ids: list[int]) -> None:
        async with self._lock:
            records, state = self.metadata.handle_remove_from_isr(topic, partition, replica_ids)
            self._commit(records)
        if records:
            logger.info("%s-%d: restarted replicas %s leave the ISR", topic, partition, replica_ids)
            await self._bounded((await self._replica(topic, partition, state.leader)).apply_isr.remote(
                list(state.isr), state.partition_epoch), f"{topic}-{partition}: apply_isr")

    async def _bounded(self, ref, what: str) -> None:
        """A control call from the watch loop, bounded: one paused replica must not
        stall the loop (and every other partition's failover). Not answered in
        time: the next round sees the replica's role and tries again."""
        try:
            await asyncio.wait_for(ref, timeout=self.leader_ping_timeout_ms / 1000)
        except (asyncio.TimeoutError, ray.exceptions.RayError) as error:
            logger.info("%s not done: %s", what, error)

    async def _role_seen(self, topic: str, partition: int, replica_id: int, state: PartitionState):
        """`_role_of`, except for a replica that answered in the role it should have
        and whose `watch` is parked (REPLICA_WATCH_TIMEOUT_MS): its answer stands
        until the watch ends or the replica is reported."""
        name = self._replica_actor(topic, partition, replica_id)
        topic_id = self.metadata.topic(topic).topic_id
        expected = ("leader" if replica_id == state.leader else "follower", state.leader_epoch)
        if self._settled.get(name) == (topic_id, expected):
            return expected
        role = await self._role_of(topic, partition, replica_id, state)
        if role == expected and not self._stopping and name in self._handles:
            settled = self._settled[name] = (topic_id, role)
            watch = self._watches.get(name)
            if watch is None or watch[0] != settled or watch[1].done():   # one of an earlier role ends by itself
                self._watches[name] = (settled, asyncio.get_running_loop().create_task(
                    self._watch_replica(name, topic, partition, settled)))
        else:
            self._settled.pop(name, None)
        return role

    async def _watch_replica(self, name: str, topic: str, partition: int, settled: tuple) -> None:
        """The parked `watch` of a settled replica, parked again after each timeout,
        for as long as the replica stays settled as `settled`. Its death: the
        endpoint is named no more and the partition's replicas are pinged at the
        next round (it may have led). A move of its role, or a watch unanswered (a
        paused process): it is pinged at the next round."""
        (role, leader_epoch) = settled[1]
        try:
            while not self._stopping and self._settled.get(name) == settled:
                handle = self._handles.get(name)
                if handle is None:
                    return
                try:
                    answer = await asyncio.wait_for(
                        handle.watch.remote(role, leader_epoch, REPLICA_WATCH_TIMEOUT_MS),
                        (REPLICA_WATCH_TIMEOUT_MS + self.leader_ping_timeout_ms) / 1000)
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as error:
                    if self._settled.get(name) == settled and not self._stopping:   # not retired meanwhile
                        self._settled.pop(name, None)
                        self._lost(name, error)
                        await self._node_down(name, type(error).__name__)
                        self._unsettle(topic, partition)
                    return
                except (asyncio.TimeoutError, ray.exceptions.RayError):
                    return
                if (answer.get("topic_id"), (answer["role"], answer["leader_epoch"])) != settled:
                    return
                await self._sync_node(handle, name, answer)
        finally:
            if self._watches.get(name, (None, None))[1] is asyncio.current_task():
                del self._watches[name]
            if self._settled.get(name) == settled:
                del self._settled[name]
            if name not in self._settled:
                self._image_versions.pop(name, None)

    async def _push_behind_images(self) -> None:
        """The current image to each settled replica that holds an older one (its
        pings no longer show it), at one ray.put for all. An idle cluster's image
        does not change: nothing is sent."""
        image = self.cluster_image()
        behind = [(name, handle) for name in list(self._settled)
                  if self._image_versions.get(name, -1) < image.version
                  and (handle := self._handles.get(name)) is not None]
        if not behind:
            return
        image_ref = ray.put(image)
        answers = await asyncio.gather(*(asyncio.wait_for(handle.update_image.remote(image_ref),
                                                          self.leader_ping_timeout_ms / 1000)
                                         for _, handle in behind), return_exceptions=True)
        for (name, _), answer in zip(behind, answers):
            if not isinstance(answer, BaseException) and name in self._settled:
                self._image_versions[name] = max(self._image_versions.get(name, -1), image.version)

    def _unsettle(self, topic: str, partition: int) -> None:
        """Every replica of the partition is pinged at the next watch round."""
        state = self.metadata.partition(topic, partition) if topic in self.metadata.topics else None
        if state is not None:
            for replica_id in state.replicas:
                self._settled.pop(self._replica_actor(topic, partition, replica_id), None)

    async def replica_restarted(self, name: str, topic: str, partition: int) -> None:
        """A replica actor that Ray restarted says so from its constructor, with the
        partition it reopened: the partition's replicas are pinged at the next
        watch round (it is given its role; a leader it followed may have died with
        it, on one node)."""
        self._settled.pop(name, None)
        self._unsettle(topic, partition)

    async def leader_suspected(self, topic: str, partition: int, leader_epoch: int, why: str) -> None:
        """A follower's fetch from the leader of `leader_epoch` failed or went
        unanswered: the partition's replicas are pinged at the next watch round (a
        leader that is gone, restarted or silent is replaced then). A report about
        an earlier epoch is stale and changes nothing."""
        if topic not in self.metadata.topics or partition >= len(self.metadata.topic(topic).partitions):
            return
        if self.metadata.partition(topic, partition).leader_epoch != leader_epoch:
            return
        logger.info("%s-%d: a follower suspects the leader of epoch %d: %s", topic, partition, leader_epoch, why)
        self._unsettle(topic, partition)

    async def _role_of(self, topic: str, partition: int, replica_id: int, state: PartitionState):
        """(role, leader epoch) as the replica answers, or None if it does not in time.
        A replica with no actor is created (reconciliation) and counts as None."""
        name = self._replica_actor(topic, partition, replica_id)
        try:
            replica = await self._replica(topic, partition, replica_id)
        except ValueError:
            if not self._stopping and name is not None:
                await self._ensure_replica(topic, partition, replica_id, state)
            return None
        try:
            answer = await asyncio.wait_for(replica.ping.remote(), timeout=self.leader_ping_timeout_ms / 1000)
        except asyncio.TimeoutError:
            return None   # paused or busy: its socket still takes connections
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as error:
            self._lost(name, error)
            await self._node_down(name, type(error).__name__)
            return None
        stale = answer.get("topic_id") not in (None, self.metadata.topic(topic).topic_id)
        if (stale or answer["role"] == STOPPED) and not self._stopping:
            # a replica of an earlier topic of this name (deleted while the controller
            # was down or mid-teardown) must never serve the new topic's log; one shut
            # down by an earlier `rafka down` that was not killed has closed its log:
            # a new process reopens it
            logger.warning("%s-%d: replica %d (topic id %s, %s) replaced", topic, partition, replica_id,
                           answer.get("topic_id"), answer["role"])
            await self._node_down(name, "replaced")
            await self._kill(name, replica, remove_group=True)
            return None
        if answer["role"] == UNASSIGNED:   # recreated without its assignment file: told again
            if not self._stopping:
                await self._bounded(self._assign(topic, partition, replica_id, replica),
                                    f"{topic}-{partition} replica {replica_id}: assign")
            return None
        await self._sync_node(replica, name, answer)
        return answer["role"], answer["leader_epoch"]

    async def shutdown_replicas(self) -> dict:
        """A planned stop of every replica (`rafka down`, leaving `local_cluster`):
        the watch loop stops first, so nothing is elected while replicas close;
        each replica flushes and checkpoints its log and marks it cleanly shut
        down. The metadata is untouched: the next start brings back the same
        leaders (at a new epoch) from the same logs."""
        self._stopping = True
        if self._watcher is not None:
            self._watcher.cancel()
        self._settled.clear()   # their watches end as the replicas close; a resume pings every one
        # shells being made for the pool exist before this answers (`rafka down`
        # then kills every named actor: none may appear after)
        await asyncio.gather(*(asyncio.shield(made) for made in list(self._shells_made.values())),
                             return_exceptions=True)
        replicas = []
        for name, topic in list(self.metadata.topics.items()):
            for partition, state in enumerate(topic.partitions):
                for replica_id in state.replicas:
                    try:
                        replicas.append(await self._replica(name, partition, replica_id))
                    except ValueError:
                        continue
        results = await asyncio.gather(*(asyncio.wait_for(r.shutdown.remote(), timeout=30) for r in replicas),
                                       return_exceptions=True)
        closed = sum(1 for r in results if isinstance(r, dict) and r.get("closed"))
        return {"replicas": len(replicas), "closed": closed}

    async def resume(self) -> int:
        """`rafka up` found this controller after a `shutdown_replicas` whose `rafka
        down` did not finish: watch again; the shut-down replicas are replaced by new
        processes, which reopen their logs."""
        self._stopping = False
        self._ensure_watcher()
        self._fill_pool()
        return self.metadata.controller_epoch

    async def ping(self) -> int:
        self._loop = asyncio.get_running_loop()
        self._ensure_watcher()
        if not self._pool_adopted:
            self._fill_pool()
        if self.serving.server is None:
            await self._register_node(CONTROLLER_NAME, await self._node_thread.start(self.serving), None)
        return self.metadata.controller_epoch

    async def bootstrap_address(self, min_brokers: int = 0) -> str:
        """Clients' bootstrap.servers: every live broker's host:port. Waits (up to
        BROKERS_LISTEN_WAIT_S) until at least one and at least `min_brokers` listen
        (`rafka up --wait-for-brokers` has just seen them join); then, for at most
        EVERY_BROKER_LISTEN_WAIT_S more, for the other live brokers (after a start
        they register within a round or two; one that cannot listen, or a node
        whose loss Ray has not noticed yet, must not hold every client's bootstrap:
        any broker bootstraps, and Metadata names the rest)."""
        await self.ping()
        started_s = time.monotonic()
        if len(self._live_brokers) < max(min_brokers, 1):
            await self._read_live_brokers()
        if not self._live_brokers and not self._image.brokers:
            return ""   # no broker node has joined: nothing to bootstrap at (`rafka up` warns)
        while not self._live_brokers <= set(self._image.brokers) or len(self._image.brokers) < min_brokers:
            enough = len(self._image.brokers) >= max(min_brokers, 1)
            deadline_s = started_s + (EVERY_BROKER_LISTEN_WAIT_S if enough else BROKERS_LISTEN_WAIT_S)
            if time.monotonic() >= deadline_s:
                break
            self._brokers_listen.clear()
            try:   # set at every commit naming a broker
                await asyncio.wait_for(self._brokers_listen.wait(), deadline_s - time.monotonic())
            except asyncio.TimeoutError:
                pass
        if not self._image.brokers:
            raise RuntimeError(f"no broker listens after {BROKERS_LISTEN_WAIT_S} s: are broker nodes "
                               f"up? (`rafka brokers`)")
        return ",".join(f"{b.host}:{b.port}" for b in self._image.brokers.values())


class _TopicAdminOnActorLoop:
    """The controller's topic administration as the node's handlers call it
    (protocol.handlers.topic_admin.TopicAdmin), from the node's thread: the
    changes run on the actor's loop, the image is read where it is."""

    def __init__(self, controller: ControllerActor, hop) -> None:
        self.cluster_image = controller.cluster_image
        # Kafka's controller answers CreateTopics and CreatePartitions once the
        # metadata is committed; clients wait for leaders through Metadata
        for name in CONTROLLER_ADMIN_CALLS:
            setattr(self, name, hop(getattr(controller, name)))
        self.create_topic = hop(functools.partial(controller.create_topic, wait_for_leaders=False))
        self.add_partitions = hop(functools.partial(controller.add_partitions, wait_for_leaders=False))
