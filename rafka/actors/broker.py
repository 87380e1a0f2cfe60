"""A broker's network process: the Kafka node clients see for broker
`broker_id` (node id = broker id), at the broker's fixed port, routing each
request to the replica and coordinator actors of this broker (protocol.edge).

Invariants:
  * it runs on its broker's Ray node (the controller pins it by the broker-id
    label) and listens on the port the controller gave it at creation, which a
    Ray restart of this actor keeps (the same constructor arguments): the
    broker's address survives restarts of its replicas, its coordinators and
    itself;
  * a broker may run several of these processes on one port (SO_REUSEPORT: the
    kernel spreads connections over them, as Kafka's num.network.threads); with
    one, the port is its alone;
  * it holds no state but its image and its client connections: the controller
    registers it from its ping (`broker:<id>:<k>`) and pushes images to it like
    every actor; it answers from the broker view of the newest image
    (core.cluster_image.broker_view).

Callers: the controller (creates, pings, pushes images), operators (describe).
"""

from __future__ import annotations

import logging
import os

from rafka.actors.cluster_credential import cluster_login
from rafka.protocol.tls import cluster_client_context
from rafka.actors.serving import (NodeServing, allocate_producer_id_from_controller,
                                  alter_broker_loggers_on_controller, alter_topic_config_on_controller)
from rafka.core.actor_names import broker_actor_name
from rafka.core.broker_identity import broker_log_dir
from rafka.core.log_dirs import describe_log_dir
from rafka.core.cluster_image import broker_view
from rafka.protocol.connection import SaslLogin
from rafka.protocol.edge import ControllerUnreachable, EdgeDispatcher
from rafka.protocol.handlers.alter_configs import BrokerLoggersHost
from rafka.protocol.handlers.describe_quorum import CONTROLLER_UNREACHABLE

logger = logging.getLogger(__name__)


class BrokerActor:
    def __init__(self, *, broker_id: int, process: int = 0, listener_port: int, shared_port: bool = False,
                 data_dir: str | None = None) -> None:
        """`shared_port`: the broker runs several processes on its port (SO_REUSEPORT);
        with one, a port another process holds (two brokers of one host given the
        same port) fails this one's start with EADDRINUSE instead of splitting the
        port's connections between two brokers. `data_dir`: the cluster's, under
        which this broker's log dir is (DescribeLogDirs); None: none described."""
        self.broker_id = broker_id
        self.data_dir = data_dir
        self.name = broker_actor_name(broker_id, process)
        self._edge: EdgeDispatcher | None = None
        self.serving = NodeServing(self.name, allocate_producer_id=allocate_producer_id_from_controller,
                                   alter_topic_config=alter_topic_config_on_controller,
                                   topic_admin_host=ControllerUnreachable(lambda: self.serving.current_image()),
                                   listener_port=listener_port, view=broker_view,
                                   dispatcher_factory=self._dispatcher, reuse_port=shared_port,
                                   log_dirs=self._log_dirs if data_dir is not None else None, client_listener=True,
                                   quorum=CONTROLLER_UNREACHABLE,   # what it relays to the controller otherwise
                                   broker_loggers=BrokerLoggersHost(broker_id, alter_broker_loggers_on_controller))

    def _log_dirs(self) -> list:
        """This broker's log dir, with the partitions the image assigns a replica
        of to this broker (protocol.handlers.describe_log_dirs)."""
        log_dir = broker_log_dir(self.data_dir, self.broker_id)
        image = self.serving.image
        hosted = [(name, p.partition) for name, topic in sorted(image.topics.items()) for p in topic.partitions
                  if self.broker_id in p.replica_brokers]
        return [(str(log_dir.absolute()), lambda: describe_log_dir(log_dir, hosted))]

    def _dispatcher(self, table, **options) -> EdgeDispatcher:
        self._edge = EdgeDispatcher(table, broker_id=self.broker_id, image=lambda: self.serving.image,
                                    view=self.serving.current_image, upstream_login=self._upstream_login,
                                    upstream_tls=cluster_client_context(), **options)
        return self._edge

    async def _upstream_login(self) -> SaslLogin | None:
        """The cluster's login, on every cluster: the edge relays what it has
        authorized for the client (protocol.edge), and the actors must serve it
        whatever bindings name the client's resources (the cluster user is a super
        user); an anonymous relay would be refused by any binding."""
        return await cluster_login()

    async def ping(self) -> dict:
        endpoint = await self.serving.start()
        return {"broker_id": self.broker_id, "pid": os.getpid(), "endpoint": endpoint,
                "rack": str(self.broker_id), "image_version": self.serving.image.version}

    async def update_image(self, image) -> None:
        self.serving.offer_image(image)

    async def describe(self) -> dict:
        server = self.serving.server
        return {"name": self.name, "broker_id": self.broker_id, "pid": os.getpid(),
                "endpoint": self.serving.endpoint, "image_version": self.serving.image.version,
                "connections": server.connection_count if server else 0,
                "relayed_requests": self._edge.relayed_requests if self._edge else 0,
                "split_requests": self._edge.split_requests if self._edge else 0}

    async def shutdown(self) -> None:
        await self.serving.stop()
