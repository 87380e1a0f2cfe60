"""An actor's Kafka node: the ProtocolServer it runs on its event loop, and the
newest ClusterImage the controller gave it.

Invariants:
  * the server starts at most once per process, on the first `start()` (an actor
    cannot start tasks in __init__; its first control call does it), on the node's
    address and `listener_port` (0: the OS picks one);
  * `offer_image` keeps the newer image by version: pushes may cross;
  * `stop()` closes the listener and every connection (the actor is shut down).

Callers: the replica and controller actors (the coordinator's group APIs come
next). The controller learns each endpoint from the actor's ping answer and
registers it (core.metadata.handle_register_node), then pushes images to actors
whose ping shows an older image version.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

import ray

from rafka.core.cluster_image import EMPTY_IMAGE, ClusterImage
from rafka.protocol.dispatch import DispatchTable, Dispatcher, Route
from rafka.protocol.handlers import api_versions, describe_configs, find_coordinator, group_admin, metadata
from rafka.protocol.server import ProtocolServer

logger = logging.getLogger(__name__)


class NodeServing:
    def __init__(self, name: str, routes: Callable[[NodeServing], Iterable[Route]], *,
                 listener_port: int = 0, image_source: Callable[[], ClusterImage] | None = None,
                 list_groups: Callable[[], Awaitable[list[dict]]] | None = None) -> None:
        """`image_source`: where Metadata answers come from; by default the newest
        image offered (the controller passes its own, always current).
        `list_groups`: a coordinator's groups, for ListGroups (others list none)."""
        self.name = name
        self._list_groups = list_groups
        self._routes = routes
        self._image_source = image_source
        self.listener_port = listener_port
        self.image: ClusterImage = EMPTY_IMAGE
        self.server: ProtocolServer | None = None
        self.host: str | None = None
        self._starting: asyncio.Lock | None = None

    def current_image(self) -> ClusterImage:
        return self._image_source() if self._image_source is not None else self.image

    def offer_image(self, image: ClusterImage) -> None:
        if image.version > self.image.version:
            self.image = image

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
            table = DispatchTable([api_versions.ROUTE, metadata.route(self.current_image),
                                   find_coordinator.route(self.current_image),
                                   group_admin.list_groups_route(self._list_groups),
                                   describe_configs.route(self.current_image), *self._routes(self)])
            server = ProtocolServer(Dispatcher(table), host="0.0.0.0", port=self.listener_port)
            await server.start()
            self.host = ray.util.get_node_ip_address()
            self.server = server
            logger.info("%s serves the Kafka protocol at %s:%d", self.name, self.host, server.port)
        return self.endpoint

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
