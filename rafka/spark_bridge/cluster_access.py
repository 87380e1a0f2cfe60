"""spark_bridge's way to the cluster: the controller actor by name, over Ray, as
DESIGN section 1 has it (spark_bridge imports client, protocol, core and Ray; it
needs no actor code). The clients it makes are handed what they need from here:
the bootstrap servers, the cluster login, the Producer's options, an Admin.

Invariant: the cluster login fails as a client expects: "the controller is dead,
restarting or not registered" is NETWORK_EXCEPTION (retriable), as
actors.cluster_credential's.
Callers: spark_bridge.source, sink and stream, in the driver and in Spark's tasks.
"""

from __future__ import annotations

import ray

from rafka.client.admin import Admin
from rafka.core.actor_names import CONTROLLER_NAME, NAMESPACE
from rafka.core.errors import NetworkException
from rafka.protocol.connection import SaslLogin
from rafka.protocol.network import login_options


def controller():
    return ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)


def bootstrap_servers() -> str:
    """host:port of the controller's Kafka listener."""
    return ray.get(controller().bootstrap_address.remote())


async def cluster_login() -> SaslLogin:
    try:
        return await controller().cluster_login.remote()
    except ValueError as error:   # Ray's "no such actor": not registered (yet)
        raise NetworkException(f"the controller is not registered: {error}") from error
    except ray.exceptions.RayActorError as error:
        raise NetworkException(f"the controller did not answer for the cluster login: {error}") from error


def client_options() -> dict:
    """Producer/Consumer options that log in as the cluster (blocking: tasks' threads)."""
    return login_options(ray.get(controller().cluster_login.remote()))


class _WireAdmin:
    """What an Admin is handed here: its reads (offsets, groups, metadata) go over
    the wire and need only the controller's listener and the login."""
    login = staticmethod(cluster_login)

    def call(self, method: str, *args):
        return ray.get(getattr(controller(), method).remote(*args))


def admin() -> Admin:
    return Admin(_WireAdmin())
