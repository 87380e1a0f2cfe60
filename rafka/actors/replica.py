"""The partition replica actor: a thin asyncio shell around core.PartitionReplica.

What lives here and not in core: parking a follower's fetch (long poll,
`fetch_max_wait_ms`; an idle follower asks for longer waits, up to
`idle_fetch_max_wait_ms`: core.replication.follower_fetch_wait_ms) until the LEO moves, parking an acks=all produce until the HW
passes its last offset (or leadership is lost, or `request_timeout_ms` ends), and
the follower's fetch loop: Kafka's replica Fetch to the leader's Kafka endpoint
(protocol.fetching), not a Ray call.

Concurrency: Ray runs an async actor's methods as tasks on one event loop, so the
core object is only touched between awaits, from one thread. Waiters are woken by
`_notify()` after every change of LEO, HW or role. The one exception is the log
cleaner's read-only step (`PartitionLog.clean`), which runs on a thread so that a
large compaction does not stall fetches; its result is applied on the loop.

Timers, per replica, on one maintenance task (`_maintain`: an idle replica wakes
once per checkpoint interval, no more): retention every
`log_retention_check_interval_ms` (when cleanup.policy has delete); a log cleaner
pass every `log_cleaner_backoff_ms`, which cleans only a compacted topic and only
when core.log's plan says Kafka's cleaner would (dirty ratio above
min.cleanable.dirty.ratio, a dirty record older than max.compaction.lag.ms, or a
kept tombstone due); the HW / recovery-point checkpoint every
`replica_high_watermark_checkpoint_interval_ms` (Kafka's
replica.high.watermark.checkpoint.interval.ms), written only when it changed; and
the release of memory kept for large frames, once traffic stopped. The leader's
ISR check is a task of its own, while it leads.

Topic configs: the replica runs with the overrides of the newest image it was
pushed (an altered topic: AlterConfigs, IncrementalAlterConfigs), from the next
append and check on; `_follow_topic_config`.

Storage and identity (DESIGN section 4): the replica runs on the broker its
placement group bundle names (node label `rafka-broker-id`); its log is
`<data dir>/broker-<id>/<topic>-<partition>/`, so a replica restarted on that
broker, by Ray or by a whole-cluster restart, reopens its own log. A log dir of
another broker or cluster (meta.properties), or a node without the label, leaves
the replica offline: it answers every request with that typed error and the
controller never elects it; nothing on the disk is touched.

Named `replica:b<broker id>:<controller epoch>-<n>` in namespace `rafka` (a shell's
name, core.actor_names: made before its replica was known); which replica it holds
is in the controller's metadata, and in its assignment file on the broker's disk
(core.replica_assignment), which a restarted actor reopens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Awaitable, Callable

import ray

from rafka.actors.serving import (NodeServing, allocate_producer_id_from_controller,
                                  alter_topic_config_on_controller, node_broker_id)
from rafka.actors.serving import controller as serving_controller
from rafka.core.actor_names import CONTROLLER_NAME, NAMESPACE, broker_of_shell
from rafka.core.broker_identity import (BROKER_ID_LABEL, broker_log_dir, claim_partition_directory,
                                        ensure_identity)
from rafka.core.clock import SystemClock
from rafka.core.config import TopicConfig
from rafka.core.errors import (InconsistentBrokerId, InvalidUpdateVersion, KafkaError, NotLeaderOrFollower,
                               OffsetOutOfRange)
from rafka.core.kafka_metrics import register_partition
from rafka.core.metadata import uuid_as_id
from rafka.core.records import iter_batches
from rafka.core.replica import EARLIEST_TIMESTAMP, FetchResult, PartitionReplica, Role
from rafka.core.replica_assignment import (ReplicaAssignment, read_assignment, remove_assignment,
                                           write_assignment)
from rafka.core.replication import follower_fetch_wait_ms
from rafka.core.scram import salted_password
from rafka.actors.cluster_credential import cluster_login
from rafka.protocol.network import NodeConnections
from rafka.protocol.txn_verification import TransactionVerifier
from rafka.protocol.tls import cluster_client_context
from rafka.protocol import fetching
from rafka.protocol.framing import release_freed_memory
from rafka.protocol.hosted_partition import HostedPartition

REPLICA_SOCKET_TIMEOUT_MS = 30_000   # Kafka's replica.socket.timeout.ms: a fetch unanswered this long past its wait
# A fetch unanswered this long past its wait makes the follower report its leader to
# the controller (the controller's leader_ping_timeout_ms default): the controller
# pings leaders only every few rounds, and a paused leader is found this way.
LEADER_SILENCE_MS = 2_000
SUSPICION_INTERVAL_S = 1.0   # a follower reports its leader at most this often
OFFLINE = "offline"     # the role a replica reports when its log dir cannot be used
STOPPED = "stopped"     # ... and once shut down or its log deleted: only a new process serves it
UNASSIGNED = "unassigned"   # ... and while it holds no replica (a shell of the pool)
logger = logging.getLogger(__name__)


def replica_directory(log_dir, topic: str, partition: int) -> str:
    """Kafka's layout: one directory per partition under the broker's log dir."""
    return os.path.join(log_dir, f"{topic}-{partition}")


def _tell_controller_restarted(name: str, topic: str, partition: int) -> None:
    """The controller pings a settled replica only every few rounds: a restarted
    one says so, to be given its role at the next round (from the constructor:
    no loop runs yet; not awaited)."""
    try:
        ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE).replica_restarted.remote(name, topic, partition)
    except ValueError:   # no controller: the one that starts pings every replica
        pass


async def _report_leader_suspected(topic: str, partition: int, leader_epoch: int, why: str) -> None:
    """Not awaited by the fetch loop; a report lost is found by the controller's sweep."""
    try:
        (await serving_controller()).leader_suspected.remote(topic, partition, leader_epoch, why)
    except Exception as error:
        logger.info("reporting the leader of %s-%d failed: %s", topic, partition, error)


class _ServedPartition:
    """What the actor's Kafka node asks on every request (PartitionHost, and the
    replica if it can serve), kept off the actor class: Ray wraps every method of
    an actor class in a tracing shim (ray.util.tracing), a call layer that a
    produce paid about nine times on the leader."""

    def __init__(self, actor: ReplicaActor) -> None:
        self._actor = actor

    def image(self):
        """PartitionHost: the newest cluster image pushed here."""
        return self._actor.serving.image

    def endpoint(self, topic: str, partition: int):
        """PartitionHost: the actor serves its own partition (as leader; its calls
        refuse as a follower, offline or stopped replica would)."""
        return self._actor.hosted if (topic, partition) == self._actor._partition else None

    async def verify_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                 partitions: list[tuple[str, int]]) -> dict:
        """PartitionHost: KIP-890's question to the transaction coordinator, over
        the actor's own connections to it (made at the first transactional
        Produce that needs one)."""
        actor = self._actor
        if actor.transaction_verifier is None:
            actor.transaction_verifier = TransactionVerifier(self.image, NodeConnections(
                client_id=f"rafka-txn-verifier-{actor.name}", sasl=cluster_login, tls=cluster_client_context()))
        return await actor.transaction_verifier.verify(transactional_id, producer_id, producer_epoch, partitions)

    def usable(self) -> PartitionReplica:
        actor = self._actor
        if actor.storage_error is not None:
            raise actor.storage_error
        if actor._stopped:
            raise NotLeaderOrFollower(f"{actor.name} is shut down")
        if actor.replica is None:
            raise NotLeaderOrFollower(f"{actor.name} holds no replica yet")
        return actor.replica


class ReplicaActor:
    """Made as a "shell" holding no replica (core.replica_pool: a broker's pool of
    processes made ahead of time), given its replica by `assign`, which it holds
    until it is killed. Ray restarts it with the arguments it was made with: the
    constructor then reopens the replica its assignment file names
    (core.replica_assignment), as the replica's own constructor did before shells."""

    def __init__(self, *, name: str, data_dir: str, cluster_id: str, replica_lag_time_max_ms: int = 30_000,
                 replica_fetch_max_bytes: int = 1 << 20, fetch_max_wait_ms: int = 500,
                 idle_fetch_max_wait_ms: int = 5_000, log_retention_check_interval_ms: int = 300_000,
                 log_cleaner_backoff_ms: int = 15_000,
                 replica_high_watermark_checkpoint_interval_ms: int = 5_000,
                 log_drop_behind_bytes: int = 0) -> None:
        """`name`: this actor's own name (`replica:b<broker>:<epoch>-<n>`), its
        Kafka node's identity on the internal listener; `log_drop_behind_bytes`:
        the controller's (core.segment)."""
        self.actor_name = name
        self.node_id = ray.get_runtime_context().get_node_id()
        self.broker_id = node_broker_id()
        self.data_dir = data_dir
        self.cluster_id = cluster_id
        self.name = name   # in logs: the replica it holds, once assigned
        self._partition: tuple[str, int] | None = None   # (topic, partition) once assigned
        self.topic_id: str | None = None
        self._config_overrides: dict = {}   # what the replica runs with (see _follow_topic_config)
        self.replica: PartitionReplica | None = None
        self.storage_error: KafkaError | None = None
        self.opened_log_end_offset = -1
        self.opened_after_clean_shutdown = False
        self.fetched_bytes = 0    # appended from the leader since this process started
        self.fetches_with_records = 0   # the leader's answers that brought records (bytes per round trip)
        self.replica_fetch_max_bytes = replica_fetch_max_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.idle_fetch_max_wait_ms = idle_fetch_max_wait_ms
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.log_drop_behind_bytes = log_drop_behind_bytes
        self.served = _ServedPartition(self)   # what each request calls (PartitionHost)
        self.hosted = HostedPartition(self.served.usable)   # the partition calls, with their waiting
        self.serving: NodeServing | None = None   # its Kafka node, once assigned
        self.transaction_verifier: TransactionVerifier | None = None   # at its first transactional Produce
        self._fetcher: asyncio.Task | None = None
        self._fetcher_stop = asyncio.Event()   # set to stop the fetch loop (see _stop_fetcher)
        self._leader_endpoint: tuple[str, int] | None = None   # given with the follower role
        self._suspected_at_s = float("-inf")   # the last report of the leader (_suspect_leader)
        self._reports: set[asyncio.Task] = set()   # reports in flight (held: not collected)
        self._isr_keeper: asyncio.Task | None = None
        self.log_retention_check_interval_ms = log_retention_check_interval_ms
        self.log_cleaner_backoff_ms = log_cleaner_backoff_ms
        self.replica_high_watermark_checkpoint_interval_ms = replica_high_watermark_checkpoint_interval_ms
        self._timers: list[asyncio.Task] = []   # the maintenance task (see _start_log_maintenance)
        self._bytes_moved_at_tick = 0
        # -1: the first quiet tick releases too. What starting freed (the imports'
        # compilation, the log's opening, the first images) is otherwise kept by the
        # trim threshold (protocol.framing) for good in a replica that never sees
        # traffic: 2.4 MB of its 71 MB USS at rest (4 partitions RF3, issue 27).
        self._bytes_moved_at_release = -1
        self._compaction_lock = asyncio.Lock()   # one pass at a time (the timer, or a call to compact)
        self._role_lock = asyncio.Lock()
        # Set (and replaced) at every change a `watch` waits for: a role, an epoch, a
        # closed or deleted log.
        self._role_moved = asyncio.Event()
        self._stopped = False
        try:
            assignment = read_assignment(self._log_dir(), name)
        except KafkaError as error:   # no usable log dir: offline until it is fixed
            logger.error("%s: log dir unusable, replica offline: %s", self.name, error)
            self.storage_error = error
            return
        if assignment is not None:   # restarted (by Ray, or recreated by name after a cluster restart)
            self._open(assignment)
            if ray.get_runtime_context().was_current_actor_reconstructed:
                _tell_controller_restarted(name, assignment.topic, assignment.partition)

    def _log_dir(self):
        """The broker's log dir; InconsistentBrokerId on a node that is not a
        broker or not the broker this shell was made for."""
        if self.broker_id is None:
            raise InconsistentBrokerId(f"node {self.node_id} has no {BROKER_ID_LABEL} label: "
                                       f"it cannot hold replicas")
        if broker_of_shell(self.actor_name) not in (None, self.broker_id):
            raise InconsistentBrokerId(f"{self.actor_name} was made for broker {broker_of_shell(self.actor_name)} "
                                       f"and runs on broker {self.broker_id}")
        return broker_log_dir(self.data_dir, self.broker_id)

    async def assign(self, *, topic: str, partition: int, replica_id: int, topic_id: str, config: dict,
                     leader_and_isr: dict | None = None) -> dict:
        """Hold this replica from now on: the assignment is written to the broker's
        disk (so a restart reopens it), the log opened (created empty if new) and
        the Kafka node started. Answers as `ping` does. Again for the same replica:
        nothing changes; for another one: ValueError (one shell, one replica).
        `leader_and_isr` ({"leader", "leader_epoch", "replicas", "isr",
        "partition_epoch"}, the partition's state as Kafka's LeaderAndIsr carries
        it): then also take the role it gives this replica, in the same call (a
        new topic's replicas: one call each, not three in turn). A follower told
        this way finds its leader's endpoint in the image the controller pushes
        once the partition's replicas answered."""
        assignment = ReplicaAssignment(topic=topic, partition=partition, replica_id=replica_id,
                                       topic_id=topic_id, config=dict(config))
        if self.storage_error is None and self._partition is None:
            try:   # a log dir of another broker or cluster is refused before anything is written
                log_dir = self._log_dir()
                ensure_identity(log_dir, broker_id=self.broker_id, cluster_id=self.cluster_id)
                write_assignment(log_dir, self.actor_name, assignment)
            except KafkaError as error:
                logger.error("%s: log dir unusable, replica offline: %s", self.name, error)
                self.storage_error = error
            else:
                self._open(assignment)
        elif self._partition is not None and (self._partition, self.topic_id) != ((topic, partition), topic_id):
            raise ValueError(f"{self.actor_name} holds {self.name} (topic id {self.topic_id}): it cannot take "
                             f"{topic}-{partition} replica {replica_id}")
        if leader_and_isr is not None and self.storage_error is None and self.replica is not None:
            state = leader_and_isr
            if state["leader"] == replica_id:
                await self.become_leader(state["leader_epoch"], state["replicas"], state["isr"],
                                         state["partition_epoch"])
            else:
                await self.become_follower(state["leader"], state["leader_epoch"])
        return await self.ping()

    def _open(self, assignment: ReplicaAssignment) -> None:
        """Open the assigned replica's log on this broker and make its Kafka node."""
        topic, partition, replica_id = assignment.topic, assignment.partition, assignment.replica_id
        self.name = f"{topic}-{partition} replica {replica_id}"
        self._partition = (topic, partition)
        self.topic_id = assignment.topic_id
        self._config_overrides = dict(assignment.config)
        try:
            log_dir = self._log_dir()
            ensure_identity(log_dir, broker_id=self.broker_id, cluster_id=self.cluster_id)
            directory = replica_directory(log_dir, topic, partition)
            stray = claim_partition_directory(directory, assignment.topic_id)
            if stray is not None:
                logger.warning("%s: a log of an earlier topic %r was moved aside to %s", self.name, topic, stray)
            self.replica = PartitionReplica(
                topic=topic, partition=partition, replica_id=replica_id, directory=directory,
                config=TopicConfig.from_dict(assignment.config), clock=SystemClock(),
                replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                drop_behind_bytes=self.log_drop_behind_bytes)
        except KafkaError as error:   # offline: answer every request with it, never lead
            logger.error("%s: log dir unusable, replica offline: %s", self.name, error)
            self.storage_error = error
        # What the log held when this process opened it, before any fetch: a
        # restarted replica reopened its own log if this is its LEO before the restart.
        self.opened_log_end_offset = self.replica.log.log_end_offset if self.replica else -1
        self.opened_after_clean_shutdown = self.replica.log.opened_after_clean_shutdown if self.replica else False
        self.serving = NodeServing(self.actor_name, partitions=self.served,
                                   allocate_producer_id=allocate_producer_id_from_controller,
                                   alter_topic_config=alter_topic_config_on_controller)
        register_partition(self.serving.metrics, topic=topic, partition=partition, traffic=self.hosted,
                           replica=lambda: None if self.storage_error or self._stopped else self.replica,
                           replication_bytes_in=lambda: self.fetched_bytes)   # its metrics (core.kafka_metrics)

    # --- the Kafka protocol -------------------------------------------------------

    async def update_image(self, image) -> None:
        """The controller's newest cluster image (Metadata answers, partition lookups,
        the topic's config)."""
        if self.serving is None:   # a shell holding no replica serves nothing
            return
        self.serving.offer_image(image)
        self._follow_topic_config()
        self._notify()   # a fetcher may be waiting for its leader's endpoint; a parked
        #                  acks=all produce re-checks min.insync.replicas

    def _follow_topic_config(self) -> None:
        """Run with the topic's overrides as the newest image has them (an altered
        topic, or a restarted actor, which Ray starts with its creation-time
        config): from the next append and check on (core's reconfigure). An image
        of another topic of this name (re-created) is not ours to follow."""
        topic = self.serving.image.topics.get(self._partition[0])
        if (self.replica is None or self._stopped or topic is None or uuid_as_id(topic.topic_id) != self.topic_id
                or dict(topic.config) == self._config_overrides):
            return
        try:
            config = TopicConfig.from_dict(topic.config)
        except KafkaError as error:   # the controller validated it: a bug if seen
            logger.error("%s: the image's topic config %s is not valid: %s", self.name, dict(topic.config), error)
            return
        self.replica.reconfigure(config)
        self._config_overrides = dict(topic.config)
        logger.info("%s: topic configs now %s", self.name, self._config_overrides)

    def _notify(self) -> None:
        self.hosted.notify()

    async def _wait_for_change(self, timeout_s: float) -> None:
        await self.hosted.wait_for_change(timeout_s)

    # --- role changes -------------------------------------------------------------

    def _start_log_maintenance(self) -> None:
        if self._timers:
            return
        # One timer for all of the replica's periodic work (issue 27: every replica
        # is a process, and each wake-up of an idle one is paid by every replica):
        # a job runs at multiples of its interval from the start, so jobs whose
        # intervals divide each other (5 s, 15 s, 300 s by default) share wake-ups.
        self._timers.append(asyncio.get_running_loop().create_task(self._maintain([
            # Kafka's log.retention.check.interval.ms: every replica deletes its own
            # segments past retention.ms / retention.bytes (only below its HW), which
            # moves its log start offset; a consumer below it gets OFFSET_OUT_OF_RANGE.
            (self.log_retention_check_interval_ms, self.enforce_retention, "retention"),
            # The HW, recovery point and log start survive a crash up to this interval
            # old (a restart then truncates and catches up by leader epoch, as Kafka's).
            (self.replica_high_watermark_checkpoint_interval_ms, self._checkpoint, "checkpoint"),
            # Kafka's log cleaner, per replica (each cleans its own log, as each broker
            # does): if a segment became cleanable or a kept tombstone is due, the
            # cleaned bytes are computed on a thread (reads of sealed segments only)
            # and swapped in on the event loop, between requests. On every replica, not
            # only compacted ones: cleanup.policy may change at any time (the pass plans
            # nothing while the topic is not compacted).
            (self.log_cleaner_backoff_ms, self.compact, "compaction"),
            # Memory kept for large frames (protocol.framing) goes back once traffic stops.
            (self.replica_high_watermark_checkpoint_interval_ms, self._release_memory_if_quiet, "memory release"),
        ])))

    async def _checkpoint(self) -> None:
        self.replica.log.checkpoint()   # writes only what changed since the last one

    def _bytes_moved(self) -> int:
        hosted = self.hosted
        return hosted.bytes_in + hosted.bytes_out + hosted.replication_bytes_out + self.fetched_bytes

    async def _release_memory_if_quiet(self) -> None:
        """Once per quiet spell: no bytes in or out since the last tick, some since
        the last release (or none released yet: the start's garbage)."""
        moved = self._bytes_moved()
        if moved == self._bytes_moved_at_tick and moved != self._bytes_moved_at_release:
            release_freed_memory()
            self._bytes_moved_at_release = moved
        self._bytes_moved_at_tick = moved

    async def _maintain(self, jobs: list[tuple[int, Callable[[], Awaitable], str]]) -> None:
        """Each `(interval_ms, step, what)`: `await step()` at every multiple of
        interval_ms from now, for good, one timer for all; a failed step (a full
        disk, a vanished file) is logged and tried at its next time. A step that
        overran its next time runs once, then keeps to its multiples."""
        loop = asyncio.get_running_loop()
        started_s = loop.time()
        due_s = [started_s + interval_ms / 1000 for interval_ms, _, _ in jobs]
        while True:
            await asyncio.sleep(max(0.0, min(due_s) - loop.time()))
            for index, (interval_ms, step, what) in enumerate(jobs):
                if due_s[index] > loop.time():
                    continue
                try:
                    await step()
                except Exception as error:
                    logger.warning("%s: %s failed: %s", self.replica.name, what, error)
                interval_s = interval_ms / 1000
                ticks = int((loop.time() - started_s) / interval_s) + 1
                due_s[index] = started_s + ticks * interval_s

    async def compact(self) -> dict | None:
        async with self._compaction_lock:
            log = self.replica.log
            plan = log.plan_compaction()
            if plan is None:
                return None
            cleaned = await asyncio.to_thread(log.clean, plan)
            # a truncation meanwhile voids the plan: apply_compaction then changes nothing
            return dataclasses.asdict(log.apply_compaction(plan, cleaned))

    async def enforce_retention(self) -> int:
        return self.replica.log.enforce_retention()

    # Role changes run one at a time (`_role_lock`), and a stale one is refused before
    # it touches anything: the controller's calls can arrive late and interleave at
    # the await that stops the fetcher. (A stale become_follower used to stop the
    # current epoch's fetcher and then fail, leaving a follower with the right role
    # and no fetcher: stuck for good, since the controller saw nothing to correct.)

    async def become_leader(self, leader_epoch: int, replicas: list[int], isr: list[int],
                            partition_epoch: int) -> tuple[str, int]:
        """Lead at this epoch; answers the Kafka endpoint followers fetch from."""
        self.served.usable()
        endpoint = await self.serving.start()
        async with self._role_lock:
            self.replica.check_new_epoch(leader_epoch)
            self._start_log_maintenance()
            await self._stop_fetcher()
            self.replica.become_leader(leader_epoch=leader_epoch, replicas=replicas, isr=isr,
                                       partition_epoch=partition_epoch)
            self._notify()
            self._role_changed()
            if self._isr_keeper is None or self._isr_keeper.done():
                self._isr_keeper = asyncio.get_running_loop().create_task(self._keep_isr())
        return endpoint

    async def become_follower(self, leader_id: int, leader_epoch: int,
                              leader_endpoint: tuple[str, int] | None = None) -> None:
        """Follow `leader_id` at this epoch, fetching from `leader_endpoint` (what its
        become_leader answered; as Kafka's LeaderAndIsr named the live leaders) or,
        while that is unknown, from the leader's endpoint in the newest image."""
        self.served.usable()
        async with self._role_lock:
            self.replica.check_new_epoch(leader_epoch)
            self._start_log_maintenance()
            await self._stop_fetcher()
            self.replica.become_follower(leader_id=leader_id, leader_epoch=leader_epoch)
            self._leader_endpoint = tuple(leader_endpoint) if leader_endpoint is not None else None
            self._notify()  # parked acks=all produces of a deposed leader fail now
            self._role_changed()
            self._start_fetcher()

    def _start_fetcher(self) -> None:
        self._fetcher_stop = stop = asyncio.Event()
        self._fetcher = asyncio.get_running_loop().create_task(
            self._fetch_loop(self.replica.leader_id, self.replica.leader_epoch, stop))

    async def apply_isr(self, isr: list[int], partition_epoch: int) -> None:
        self.served.usable()
        if self.replica.apply_isr(isr, partition_epoch):
            self._notify()

    async def _stop_fetcher(self) -> None:
        """Stop the fetch loop and wait until it has ended. The loop is told by its
        stop flag as well as cancelled: Python 3.11's asyncio.wait_for can swallow a
        cancellation that arrives as the awaited operation completes (fixed in 3.12;
        here a refused connect every 100 ms made it likely), and a loop that lost its
        cancel kept fetching from a gone leader while this wait, holding the role
        lock, blocked every later role change: the follower never caught up
        (`rafka verify`, a replaced broker that had led)."""
        if self._fetcher is not None:
            self._fetcher_stop.set()
            self._fetcher.cancel()
            try:
                await self._fetcher
            except (asyncio.CancelledError, Exception):
                pass
            self._fetcher = None

    # --- leader side --------------------------------------------------------------

    async def _keep_isr(self) -> None:
        """Leader only: propose ISR shrinks (followers lagging for longer than
        replica.lag.time.max.ms) and expansions (caught-up followers) to the
        controller, with this leader's epochs, one change at a time (KIP-497). The
        change is recorded in core before the call, so a follower being added holds
        the HW back while the controller may already count it. The controller's
        answer becomes the committed ISR; a refusal (a typed error: it applied
        nothing) drops the change, and one for a stale partition epoch (a change
        the controller made whose push this leader missed) reads the record it
        missed (`_read_missed_isr`). A call that failed otherwise (the controller died
        or the answer was lost) may have been applied: the change stays in flight,
        holding the HW back, until the controller's record is read back."""
        try:
            controller = ray.get_actor("controller", namespace=NAMESPACE)
        except ValueError:
            logger.warning("%s: no controller: the ISR stays as it is", self.replica.name)
            return
        interval_s = max(0.05, self.replica.replica_lag_time_max_ms / 4000)
        unanswered = None   # a change whose outcome is unknown
        while self.replica.role is Role.LEADER:
            await asyncio.sleep(interval_s)
            if self.replica.role is not Role.LEADER:
                return
            if unanswered is not None and unanswered.leader_epoch != self.replica.leader_epoch:
                unanswered = None   # led again since, at a new epoch: a fresh ISR state
            change = unanswered or self.replica.maybe_propose_isr_change()
            if change is None:
                continue
            topic, partition = self.replica.topic, self.replica.partition
            proposing = unanswered is None
            try:
                if proposing:
                    answer = await controller.alter_isr.remote(
                        topic, partition, self.replica.replica_id, change.leader_epoch,
                        change.partition_epoch, sorted(change.proposed_isr))
                else:
                    answer = await controller.partition_record.remote(topic, partition)
                    if answer["leader_epoch"] != change.leader_epoch:
                        # Deposed: the change stays in flight (holding the HW back)
                        # until the controller tells this replica its new role.
                        unanswered = None
                        continue
                unanswered = None
            except KafkaError as error:
                if not proposing:   # the read-back failed: still unknown, try again
                    logger.warning("%s: reading the controller's record failed: %s", self.replica.name, error)
                    continue
                # refused (fenced, stale partition epoch, not the leader): nothing applied
                logger.info("%s: ISR change to %s refused: %s", self.replica.name,
                            sorted(change.proposed_isr), error)
                if self.replica.leader_epoch == change.leader_epoch and self.replica.role is Role.LEADER:
                    if self.replica.isr_change_refused(change):
                        self._notify()
                    if isinstance(error, InvalidUpdateVersion):
                        await self._read_missed_isr(controller, change.leader_epoch)
                continue
            except (ray.exceptions.RayError, KeyError, IndexError) as error:
                logger.warning("%s: ISR change to %s: no answer (%s); reading the controller's record next",
                               self.replica.name, sorted(change.proposed_isr), error)
                unanswered = change
                continue
            if self.replica.role is Role.LEADER and self.replica.leader_epoch == change.leader_epoch:
                if self.replica.isr_change_answered(change, isr=answer["isr"],
                                                    partition_epoch=answer["partition_epoch"]):
                    self._notify()

    async def _read_missed_isr(self, controller, leader_epoch: int) -> None:
        """The controller changed this partition's ISR at this leader's epoch and
        its push (`apply_isr`, a bounded call) never came: a proposal at the older
        partition epoch was refused INVALID_UPDATE_VERSION. Kafka's leader waits for
        the newer partition state from the metadata log; rafka's reads the
        controller's record and applies it, else every later proposal is refused
        the same way and a follower the controller removed holds the HW back for
        good. A failed read is retried at the next refusal."""
        topic, partition = self.replica.topic, self.replica.partition
        try:
            record = await controller.partition_record.remote(topic, partition)
        except (ray.exceptions.RayError, KafkaError) as error:
            logger.warning("%s: reading the controller's ISR record failed: %s", self.replica.name, error)
            return
        if (record["topic_id"] == self.topic_id and record["leader"] == self.replica.replica_id
                and record["leader_epoch"] == leader_epoch == self.replica.leader_epoch
                and self.replica.role is Role.LEADER):
            logger.info("%s: applying the ISR %s at partition epoch %d it missed", self.replica.name,
                        record["isr"], record["partition_epoch"])
            if self.replica.apply_isr(record["isr"], record["partition_epoch"]):
                self._notify()

    # --- follower side ------------------------------------------------------------

    async def _fetch_loop(self, leader_id: int, leader_epoch: int, stop: asyncio.Event) -> None:
        """Fetch from the leader for as long as this replica follows it at this epoch,
        over Kafka's replica Fetch on one connection to the leader's endpoint (its
        address from the newest cluster image: a restarted leader may listen on a
        new port). protocol.fetching builds the requests and reads the answers;
        a diverging epoch (KIP-320) truncates here and fetches again.
        The loop never ends on an error: a follower whose loop died would answer the
        controller's ping with the right role and never catch up again (`rafka
        verify` found one: a move's new replica stuck at offset 0 for good). Every
        failure is retried after a pause; the controller tells us when to stop."""
        topic, partition = self._partition
        loop = asyncio.get_running_loop()
        wait_ms = self.fetch_max_wait_ms   # this poll's wait: core.replication.follower_fetch_wait_ms
        nodes = NodeConnections(client_id=f"rafka-replica-fetcher-{self.name}", max_in_flight_requests=1,
                                sasl=cluster_login, tls=cluster_client_context())
        try:
            while (not stop.is_set() and self.replica.role is Role.FOLLOWER
                   and self.replica.leader_epoch == leader_epoch):
                address = self._replica_address(leader_id)
                try:
                    if address is None:   # the leader's endpoint is not in this image yet
                        await self._wait_for_change(0.1)
                        continue
                    log = self.replica.log
                    silence_s = (wait_ms + LEADER_SILENCE_MS) / 1000
                    silent = loop.call_later(silence_s, self._suspect_leader, leader_epoch,
                                             f"a fetch unanswered for {silence_s:.1f}s")
                    try:
                        response = await nodes.request(address, fetching.fetch_request(
                            topic=topic, partition=partition, replica_id=self.replica.replica_id,
                            fetch_offset=log.log_end_offset, leader_epoch=leader_epoch,
                            last_fetched_epoch=log.latest_epoch, log_start_offset=log.log_start_offset,
                            max_bytes=self.replica_fetch_max_bytes, max_wait_ms=wait_ms),
                            timeout_ms=REPLICA_SOCKET_TIMEOUT_MS + wait_ms)
                    finally:
                        silent.cancel()
                    answer = fetching.leader_answer(response, topic=topic, partition=partition)
                    wait_ms = follower_fetch_wait_ms(
                        wait_ms, answered_records=bool(answer.records) or answer.diverging_epoch is not None,
                        fetch_max_wait_ms=self.fetch_max_wait_ms, idle_fetch_max_wait_ms=self.idle_fetch_max_wait_ms,
                        replica_lag_time_max_ms=self.replica_lag_time_max_ms)
                    if answer.diverging_epoch is not None:
                        self.replica.truncate_to_leader_epoch_end(answer.diverging_epoch)
                        continue
                    self.replica.apply_fetched(FetchResult(
                        records=answer.records, high_watermark=answer.high_watermark,
                        log_start_offset=answer.log_start_offset, log_end_offset=-1, leader_epoch=leader_epoch))
                    self.fetched_bytes += len(answer.records)
                    self.fetches_with_records += bool(answer.records)
                    self._notify()
                except asyncio.CancelledError:
                    raise
                except OffsetOutOfRange:
                    # Kafka's handleOutOfRangeError: below the leader's log start,
                    # start empty there (the leader's retention passed us by).
                    try:
                        start, _ = fetching.list_offset_answer(await nodes.request(
                            address, fetching.list_offset_request(
                                topic=topic, partition=partition, replica_id=self.replica.replica_id,
                                leader_epoch=leader_epoch, timestamp_ms=EARLIEST_TIMESTAMP)),
                            topic=topic, partition=partition)
                    except KafkaError as error:
                        logger.info("%s: the leader's log start is unknown: %s", self.name, error)
                        await asyncio.sleep(0.1)
                        continue
                    if self.replica.log.log_end_offset < start:
                        self.replica.restart_from(start)
                    else:
                        await asyncio.sleep(0.1)
                except KafkaError as error:
                    # The leader is gone, fenced, not ready or unreachable: the
                    # controller will tell us who leads next; until then retry slowly.
                    logger.info("%s: fetch from replica %d failed: %s", self.name, leader_id, error)
                    self._suspect_leader(leader_epoch, f"{type(error).__name__}: {error}")
                    await asyncio.sleep(0.1)
                except Exception:   # a bug: said loudly, but the replica keeps following
                    logger.exception("%s: fetching from replica %d failed unexpectedly", self.name, leader_id)
                    await asyncio.sleep(1.0)
        finally:
            await nodes.close()

    def _suspect_leader(self, leader_epoch: int, why: str) -> None:
        """Tell the controller that the leader of `leader_epoch` failed a fetch or
        went silent (it pings the partition's replicas at its next round), at most
        once per SUSPICION_INTERVAL_S."""
        now_s = asyncio.get_running_loop().time()
        if now_s - self._suspected_at_s < SUSPICION_INTERVAL_S:
            return
        self._suspected_at_s = now_s
        task = asyncio.get_running_loop().create_task(_report_leader_suspected(*self._partition, leader_epoch, why))
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    def _replica_address(self, replica_id: int) -> tuple[str, int] | None:
        """The leader's Kafka endpoint: the one given with the role (the leader's own
        answer at this epoch: a leader that restarts loses the epoch with it), else,
        while none was given, the newest image's."""
        if self._leader_endpoint is not None:
            return self._leader_endpoint
        image = self.serving.image
        actor = image.replica_actor(*self._partition, replica_id)
        node = image.nodes.get(image.node_of_actor(actor)) if actor is not None else None
        return None if node is None else (node.host, node.port)

    async def delete_log(self) -> None:
        """The topic was deleted: stop replicating and remove the log's files."""
        self.served.usable()
        await self._stop_fetcher()
        self.replica.become_follower(leader_id=-1, leader_epoch=max(self.replica.leader_epoch, 0) + 1)
        self._notify()
        self.replica.log.delete()
        remove_assignment(self._log_dir(), self.actor_name)   # the shell is killed next, never reused
        # Until it is: nothing reads the log that is gone (a request, describe, the
        # metrics export, which read a log of no segments: IndexError in the logs).
        self._stopped = True
        self._role_changed()

    # --- introspection ------------------------------------------------------------

    async def describe(self) -> dict:
        identity = {"node_id": self.node_id, "broker_id": self.broker_id, "topic_id": self.topic_id, "pid": os.getpid(),
                    "actor": self.actor_name, "opened_log_end_offset": self.opened_log_end_offset,
                    "opened_after_clean_shutdown": self.opened_after_clean_shutdown,
                    "fetched_bytes": self.fetched_bytes, "fetches_with_records": self.fetches_with_records}
        if self.storage_error is not None:
            return {**identity, "role": OFFLINE, "leader_epoch": -1, "error": str(self.storage_error)}
        if self.replica is None:
            return {**identity, "role": UNASSIGNED, "leader_epoch": -1}
        if self._stopped:   # its log is closed
            return {**identity, "role": STOPPED, "leader_epoch": -1}
        log = self.replica.log
        leader = self.replica.leader
        return {**identity, "topic": self.replica.topic, "partition": self.replica.partition,
                "replica_id": self.replica.replica_id,
                "role": self.replica.role.value, "leader_epoch": self.replica.leader_epoch,
                "leader_id": self.replica.leader_id, "log_start_offset": log.log_start_offset,
                "high_watermark": log.high_watermark, "log_end_offset": log.log_end_offset,
                "isr": sorted(leader.isr) if leader else None,
                "parked_follower_fetches": self.hosted.parked_follower_fetches,
                "parked_produces": self.hosted.parked_produces,
                "remote_log_end_offsets": ({r: p.log_end_offset for r, p in leader.followers.items()}
                                           if leader else None)}

    async def read_below_high_watermark(self) -> bytes:
        """Every byte of the log below the HW (tests compare replicas with it)."""
        log = self.served.usable().log
        chunks, position = [], log.log_start_offset
        while position < log.high_watermark:   # a read stops at its segment's end
            data = log.read(position, 1 << 30, max_offset=log.high_watermark)
            if not data:
                break
            chunks.append(data)
            position = max(header.next_offset for _, header in iter_batches(data, verify_crc=False))
        return b"".join(chunks)

    async def ping(self) -> dict:
        """Liveness and role, for the controller's watch loop. A restarted actor
        answers with role follower and epoch -1 until it is told its role; one
        whose log dir cannot be used answers `offline`."""
        if self.storage_error is not None or self._stopped or self.replica is None:
            role = OFFLINE if self.storage_error is not None else STOPPED if self._stopped else UNASSIGNED
            return {"node_id": self.node_id, "topic_id": self.topic_id, "role": role, "leader_epoch": -1,
                    "endpoint": None, "image_version": self.serving.image.version if self.serving else -1}
        endpoint = await self.serving.start()
        if (self.replica.role is Role.FOLLOWER and self.replica.leader_id >= 0 and self._fetcher is not None
                and self._fetcher.done() and not self._role_lock.locked()):
            # never expected (the loop retries every failure), but a follower that
            # stopped fetching would never catch up: start it again, and say so
            logger.error("%s: the fetch loop had stopped: started again", self.name)
            self._start_fetcher()
        return {"node_id": self.node_id, "topic_id": self.topic_id, "role": self.replica.role.value,
                "leader_epoch": self.replica.leader_epoch, "endpoint": endpoint, "rack": str(self.broker_id),
                "image_version": self.serving.image.version}

    async def watch(self, role: str, leader_epoch: int, timeout_ms: int) -> dict:
        """The controller's watch of a replica that answered in its expected role,
        in place of a ping every few seconds (issue 27: those pings woke every idle
        replica): parked here until this replica's (role, leader epoch) is no longer
        (`role`, `leader_epoch`) or its log is closed or deleted, or `timeout_ms`
        passed; answers as `ping`. Nothing wakes this process while the call is
        parked. If the actor dies, Ray fails the call: that is how the controller
        learns of it."""
        loop = asyncio.get_running_loop()
        deadline_s = loop.time() + timeout_ms / 1000
        while True:
            moved = self._role_moved   # taken before the role is read: a change after it wakes us
            answer = await self.ping()
            remaining_s = deadline_s - loop.time()
            if (answer["role"], answer["leader_epoch"]) != (role, leader_epoch) or remaining_s <= 0:
                return answer
            try:
                await asyncio.wait_for(moved.wait(), remaining_s)
            except asyncio.TimeoutError:
                pass

    def _role_changed(self) -> None:
        """Wake the parked `watch` calls (they answer if the change is theirs)."""
        self._role_moved.set()
        self._role_moved = asyncio.Event()

    async def prepare(self, salt: bytes, iterations: int) -> None:
        """A pool shell's one-time work, done before a topic takes it (the pool fills
        after a creation's answer, and a creation has one core here): the cluster
        login, whose lookup of the controller makes Ray load the controller's actor
        class into this process (its modules imported, its methods inspected), and
        the login's PBKDF2 over the cluster credential's `salt` and `iterations` (a
        follower's first SASL login to its leader). A replica would do each at its
        first need; a shell that was not prepared works all the same."""
        if self._partition is not None:
            return
        login = await cluster_login()
        if login is not None:
            salted_password(login.mechanism, login.password, salt, iterations)   # kept (lru_cache)

    async def shutdown(self) -> dict:
        """A planned stop (`rafka down`, leaving `local_cluster`): stop replicating,
        fail parked produces, then flush, checkpoint the HW and recovery point and
        leave the clean-shutdown marker, so the next open skips the recovery scan.
        The actor answers nothing after this; the caller then kills it."""
        if self.storage_error is not None or self._stopped or self.replica is None:
            return {"closed": False}
        self._stopped = True
        self._role_changed()
        await self.serving.stop()
        await self._stop_fetcher()
        for task in [self._isr_keeper, *self._timers]:
            if task is not None:
                task.cancel()
        async with self._compaction_lock:   # never close under a cleaner pass
            self.replica.become_follower(leader_id=-1, leader_epoch=self.replica.leader_epoch)
            self._notify()
            log_end_offset = self.replica.log.log_end_offset
            self.replica.log.close(clean_shutdown=True)
        return {"closed": True, "log_end_offset": log_end_offset}
