"""An actor's Kafka node: the ProtocolServer it runs on its event loop, and the
newest ClusterImage the controller gave it.

Invariants:
  * the server starts at most once per process, on the first `start()` (an actor
    cannot start tasks in __init__; its first control call does it), on the node's
    address and `listener_port` (0: the OS picks one);
  * `offer_image` keeps the newer image by version: pushes may cross;
  * `stop()` closes the listener and every connection (the actor is shut down);
  * the listener's SASL follows the image it answers from: the users' credentials,
    and whether a login is required (read when a connection is accepted);
  * `metrics`: what the actor exports (every request through its dispatcher is
    counted there; the actor registers its own sources), copied into Ray's metrics
    by the exporter the server's start starts (actors.metrics_export).

Callers: the replica, coordinator (group and transaction), controller and broker actors. The controller learns each endpoint from the actor's ping answer and
registers it (core.metadata.handle_register_node), then pushes images to actors
whose ping shows an older image version. The controller runs its node on a
`NodeThread`: an event loop of its own.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable

import ray

from rafka.actors.cluster_credential import listener_tls
from rafka.actors.metrics_export import RayMetricsExporter
from rafka.core.actor_names import CONTROLLER_NAME, NAMESPACE
from rafka.core.broker_identity import BROKER_ID_LABEL
from rafka.core.broker_loggers import LoggerLevels
from rafka.core.client_quotas import IpConnectionRateManager
from rafka.core.cluster_image import EMPTY_IMAGE, ClusterImage
from rafka.core.errors import CoordinatorLoadInProgress, KafkaError, RequestTimedOut
from rafka.core.kafka_metrics import register_requests
from rafka.core.metrics import MetricsRegistry
from rafka.core.producer_ids import ProducerIdBlock
from rafka.protocol.dispatch import Dispatcher
from rafka.protocol.framing import tune_malloc
from rafka.protocol.handlers.alter_configs import BrokerLoggersHost
from rafka.protocol.node_table import node_table
from rafka.protocol.sasl import SaslListener
from rafka.protocol.server import MAX_PIPELINED_REQUESTS_DEFAULT, ProtocolServer

logger = logging.getLogger(__name__)
FIRST_IMAGE_WAIT_S = 15.0
FORWARD_TIMEOUT_S = 30.0   # a forwarded config change (Kafka's request.timeout.ms default)
CONTROLLER_CALL_TIMEOUT_S = 10.0   # a coordinator epoch asked of the controller (asked again after)


def node_broker_id() -> int | None:
    """The broker id of the node this process runs on (its `rafka-broker-id` label);
    None on a node of no broker."""
    label = ray.get_runtime_context().get_node_labels().get(BROKER_ID_LABEL)
    return int(label) if label is not None and label.isdigit() else None


async def controller():
    """The controller's handle, looked up off the loop (a GCS call: it must not
    stall the node's requests); ValueError if it does not exist."""
    return await asyncio.to_thread(ray.get_actor, CONTROLLER_NAME, namespace=NAMESPACE)


async def allocate_producer_id_from_controller() -> int:
    """InitProducerId on a replica or coordinator node: the controller hands out
    producer ids (as Kafka's ProducerIdManager takes blocks from the controller)."""
    return await (await controller()).allocate_producer_id.remote()


async def allocate_producer_ids_from_controller() -> ProducerIdBlock:
    """A transaction coordinator's next block of producer ids (core.producer_ids),
    from the same controller counter as `allocate_producer_id_from_controller`'s.
    A controller that is gone or restarting: COORDINATOR_LOAD_IN_PROGRESS
    (retriable), what Kafka answers while its coordinator waits for a block."""
    try:
        first, count = await (await controller()).allocate_producer_ids.remote()
    except (ValueError, ray.exceptions.RayError) as error:
        raise CoordinatorLoadInProgress(f"no block of producer ids from the controller: {error}") from None
    return ProducerIdBlock(first, count)


async def next_transaction_coordinator_epoch_from_controller(partition: int, leader_epoch: int) -> int:
    """The coordinator epoch for a transaction coordinator's completed load
    (core.metadata). A controller that is gone or restarting:
    COORDINATOR_LOAD_IN_PROGRESS (retriable): the coordinator serves once it has it."""
    try:
        return await asyncio.wait_for((await controller()).next_transaction_coordinator_epoch.remote(
            partition, leader_epoch), timeout=CONTROLLER_CALL_TIMEOUT_S)
    except (ValueError, ray.exceptions.RayError, asyncio.TimeoutError) as error:
        raise CoordinatorLoadInProgress(f"no coordinator epoch from the controller: {error!r}") from None


async def alter_topic_config_on_controller(name: str, ops: list, validate_only: bool = False,
                                           replace: bool = False) -> dict:
    """IncrementalAlterConfigs / AlterConfigs on a replica or coordinator node:
    forwarded to the controller (Kafka's brokers forward them, KIP-590)."""
    return await _forward("alter_topic_config", name, ops, validate_only, replace)


async def alter_broker_loggers_on_controller(broker_id: int, ops: list) -> dict:
    """A broker's loggers altered (protocol.handlers.alter_configs, checked there):
    the controller records the broker's new map and pushes it to every process."""
    return await _forward("alter_broker_loggers", broker_id, ops)


async def _forward(method: str, *args):
    """A change forwarded to the controller, whose typed error is raised here as
    itself. A controller that is gone, restarting or silent for
    FORWARD_TIMEOUT_S: REQUEST_TIMED_OUT, as Kafka's forwarding answers (retriable)."""
    try:
        found = await controller()
        return await asyncio.wait_for(getattr(found, method).remote(*args), FORWARD_TIMEOUT_S)
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, KafkaError):
            raise error.cause from None
        raise
    except (ValueError, asyncio.TimeoutError, ray.exceptions.RayActorError) as error:
        raise RequestTimedOut(f"the controller did not answer: {error}") from None


class NodeServing:
    def __init__(self, name: str, *, allocate_producer_id: Callable[[], Awaitable[int]], partitions=None,
                 groups=None, transactions=None, topic_admin_host=None, list_groups: Callable[[], Awaitable[list[dict]]] | None = None,
                 alter_topic_config: Callable[..., Awaitable[dict]] | None = None, listener_port: int = 0,
                 image_source: Callable[[], ClusterImage] | None = None,
                 max_pipelined_requests: int = MAX_PIPELINED_REQUESTS_DEFAULT,
                 view: Callable[[ClusterImage], ClusterImage] | None = None,
                 dispatcher_factory: Callable[..., Dispatcher] = Dispatcher, reuse_port: bool = False,
                 log_dirs=None, client_listener: bool = False, envelopes: bool = False, quorum=None,
                 broker_loggers: BrokerLoggersHost | None = None) -> None:
        """The hosts are what this actor answers for (protocol.node_table): its
        partition, its groups, its transactional ids, topic administration; `alter_topic_config`: how a
        node that is not the controller reaches it (alter_topic_config_on_controller);
        `image_source`: where Metadata answers come from, by default the newest
        image offered (the controller passes its own, always current);
        `max_pipelined_requests`: the server's bound on a connection's started,
        unanswered requests; `view`: what the node answers from, made of each image
        offered (a broker answers the broker view); `dispatcher_factory(table,
        **options)`: the dispatcher (a broker's routes requests to actors);
        `reuse_port`: several processes listen on the port (a broker's);
        `log_dirs`: what DescribeLogDirs describes here (a broker's log dir);
        `client_listener`: clients connect here (a broker's node): each client IP's
        connection_creation_rate applies (KIP-612; not on the actors' nodes, which
        only the brokers and the cluster's own clients reach, as Kafka exempts its
        inter-broker listener); `envelopes`, `quorum`: the controller's node
        (protocol.node_table)."""
        tune_malloc()
        self.name = name
        self._table_options = dict(allocate_producer_id=allocate_producer_id, partitions=partitions, groups=groups,
                                   transactions=transactions,
                                   topic_admin_host=topic_admin_host, list_groups=list_groups,
                                   alter_topic_config=alter_topic_config, log_dirs=log_dirs, envelopes=envelopes,
                                   quorum=quorum, broker_loggers=broker_loggers)
        self._logger_levels = LoggerLevels()
        # the broker whose log levels this process takes: a broker's own, else its Ray
        # node's; none for an in-process test's node (no Ray)
        self._broker_id: int | None = (broker_loggers.broker_id if broker_loggers is not None
                                       else node_broker_id() if ray.is_initialized() else None)
        self._image_source = image_source
        self.listener_port = listener_port
        self.max_pipelined_requests = max_pipelined_requests
        self.image: ClusterImage = EMPTY_IMAGE
        self._view = view
        self._answered: ClusterImage = EMPTY_IMAGE   # view(image), made once per image
        self._dispatcher_factory = dispatcher_factory
        self.reuse_port = reuse_port
        self.client_listener = client_listener
        self._has_image = asyncio.Event()   # binds to the actor's loop at its first wait
        self.server: ProtocolServer | None = None
        self.host: str | None = None
        self._starting: asyncio.Lock | None = None
        self.metrics = MetricsRegistry()
        self.metrics_exporter = RayMetricsExporter(self.metrics)

    def current_image(self) -> ClusterImage:
        """The image this node answers from."""
        if self._image_source is not None:
            return self._image_source()
        return self._answered if self._view is not None else self.image

    def offer_image(self, image: ClusterImage) -> None:
        if image.version > self.image.version:
            if self._view is not None:
                self._answered = self._view(image)
            self.image = image
            self._has_image.set()
            self._apply_logger_levels(image)

    def _apply_logger_levels(self, image: ClusterImage) -> None:
        """This process's loggers at its broker's levels (core.broker_loggers). A
        failure is logged, never raised: the image is taken whatever happens here."""
        if self._broker_id is None:
            return
        try:
            self._logger_levels.apply(image.broker_logger_levels.get(self._broker_id, {}))
        except Exception:
            logger.exception("%s: broker %d's log levels not applied", self.name, self._broker_id)

    async def _first_image(self) -> None:
        """Until this node has a cluster image (its users, whether SASL is required),
        at most FIRST_IMAGE_WAIT_S: the controller pushes one within a watch round."""
        if self._image_source is None and not self._has_image.is_set():
            try:
                await asyncio.wait_for(self._has_image.wait(), FIRST_IMAGE_WAIT_S)
            except asyncio.TimeoutError:
                pass

    def _sasl_required(self) -> bool:
        image = self.current_image()
        return image.sasl_required or image.version < 0   # no image yet (EMPTY_IMAGE): ask for a login

    @property
    def endpoint(self) -> tuple[str, int] | None:
        """(host, port) once serving."""
        if self.server is None:
            return None
        return self.host, self.server.port

    async def start(self) -> tuple[str, int]:
        if self._starting is None:   # created on the actor's event loop, by its first call
            self._starting = asyncio.Lock()
        async with self._starting:   # two first calls at once start one server
            return await self._start()

    async def _start(self) -> tuple[str, int]:
        if self.server is None:
            table = node_table(image=self.current_image, **self._table_options)
            # SASL/SCRAM, required or optional by the image (actors/cluster_credential.py)
            sasl = SaslListener(credential_for=lambda user, mechanism: self.current_image().scram_credential(
                user, mechanism), required=self._sasl_required, settled=self._first_image)
            server = ProtocolServer(self._dispatcher_factory(table), host="0.0.0.0", port=self.listener_port,
                                    max_pipelined_requests=self.max_pipelined_requests, sasl=sasl,
                                    tls=listener_tls(), reuse_port=self.reuse_port,
                                    ip_connection_rates=IpConnectionRateManager() if self.client_listener else None)
            await server.start()
            self.host = ray.util.get_node_ip_address()
            self.server = server
            register_requests(self.metrics, server.dispatcher.request_metrics)
            self.metrics_exporter.start()
            logger.info("%s serves the Kafka protocol at %s:%d", self.name, self.host, server.port)
        return self.endpoint

    async def stop(self) -> None:
        await self.metrics_exporter.stop()
        if self.server is not None:
            await self.server.stop()


class NodeThread:
    """A Kafka node served on a thread and event loop of its own, for an actor whose
    own loop makes Ray control calls: the controller. Ray's core worker blocks the
    thread that submits an actor task while another thread creates actors (py-spy
    showed the controller's loop inside `submit_actor_task` for 0.4-7.5 s while a
    topic's replicas were created), and every Metadata answer of the bootstrap node
    waited behind it. Here requests never wait on the actor's loop; the calls that
    change metadata (`on_actor_loop`) run there and are awaited from this loop.
    The node reads only immutable values the actor publishes (its cluster image)."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=f"kafka-node {name}", daemon=True)
        self._thread.start()

    async def start(self, serving: NodeServing) -> tuple[str, int]:
        """Start `serving` on this thread's loop; its endpoint."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(serving.start(), self.loop))

    @staticmethod
    def on_actor_loop(coroutine_function: Callable[..., Awaitable], actor_loop: Callable[[], asyncio.AbstractEventLoop]):
        """`coroutine_function` called from the node's loop, run on the actor's
        (`actor_loop()`: known once the actor's first call runs) and awaited here."""
        async def hop(*args, **kwargs):
            future = asyncio.run_coroutine_threadsafe(coroutine_function(*args, **kwargs), actor_loop())
            return await asyncio.wrap_future(future)
        return hop
