"""The cluster credential: the SASL/SCRAM login rafka's own clients use on the
Kafka listeners (followers' fetches, coordinators' offset writes, member actors,
Spark tasks, the Admin and a driver's `cluster.producer()`), whether the
listeners require a login at all, and whether they speak TLS.

TLS is a host's setting, as a listener's keystore is in Kafka's server.properties:
with RAFKA_TLS_CERTFILE (and RAFKA_TLS_KEYFILE, unless the key is in the cert
file) in the environment of `ray start`, every actor's listener on that node
serves TLS only, and rafka's own clients there trust RAFKA_TLS_CAFILE (the CA of
the listeners' certificates; host names are not checked inside the cluster:
brokers are dialled by node IP). Give every node the same settings (cluster.yaml).

Kafka gives its brokers an inter-broker user in server.properties; rafka's is
the reserved user `__rafka` (core.scram.CLUSTER_USER), whose password the
controller makes at the cluster's first start and keeps in its data dir
(`controller/cluster.secret`, mode 0600), and whose salted credential it keeps
in the metadata log like any user's, so every listener knows it from the image.

Invariants:
  * the password is made once per cluster and never changes, is never printed,
    logged or put in a metadata record or an image; it leaves the controller only
    in the answer to `cluster_login`, a Ray call: inside the Ray cluster, which
    Ray's token authentication guards when it is on;
  * TLS is on where RAFKA_TLS_CERTFILE is set, for the listener and rafka's own
    clients alike;
  * SASL is required on every listener once `rafka up --sasl` ran or Ray's token
    authentication is on (the controller commits `require_sasl`, which nothing
    undoes); on an open cluster rafka's clients log in all the same
    (protocol.sasl: the login is optional there).

The node's TLS settings are read by protocol.tls (`node_tls_settings`,
`cluster_client_context`), and a login becomes a client's options in
protocol.network (`login_options`): layers without Ray (client) and without actor
code (spark_bridge) use them too. A client is handed `cluster_login` (the
Admin's network: actors.controller_calls; the actors' NodeConnections), and
it fails as a client expects: "the controller is dead or restarting" is
NETWORK_EXCEPTION (retriable), not Ray's error (protocol.retry never imports Ray).

Callers: the controller (`read_or_make_secret` and core.metadata's
`handle_cluster_credential` at every start, the
`cluster_login` call), every in-cluster client (`cluster_login`, `cluster_client_options`).
"""

from __future__ import annotations

import os
import secrets
import ssl
import threading
from pathlib import Path

import ray

from rafka.core.actor_names import CONTROLLER_NAME, NAMESPACE
from rafka.core.errors import NetworkException
from rafka.protocol import tls
from rafka.protocol.connection import SaslLogin
from rafka.protocol.network import login_options

SECRET_FILE = "cluster.secret"

_logins_lock = threading.Lock()
_logins: dict[str, SaslLogin] = {}   # by Ray node id: one per cluster a process joined


def read_or_make_secret(controller_dir: Path) -> str:
    """The cluster's password, made (random, 256 bits) and fsynced the first time."""
    path = controller_dir / SECRET_FILE
    if path.exists():
        return path.read_text().strip()
    fresh = controller_dir / (SECRET_FILE + ".new")
    descriptor = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as f:
        f.write(secrets.token_urlsafe(32))
        f.flush()
        os.fsync(f.fileno())
    os.replace(fresh, path)
    return path.read_text().strip()


def ray_token_auth_enabled() -> bool:
    """Whether this Ray cluster runs with token authentication (RAY_AUTH_MODE=token,
    which Ray's processes inherit). Ray has no public call for it in 2.60: its
    private one first, the environment variable if that moves."""
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled
        return bool(is_token_auth_enabled())
    except ImportError:
        return os.environ.get("RAY_AUTH_MODE", "").lower() == "token"


async def cluster_login() -> SaslLogin | None:
    """The cluster credential, asked of the controller over Ray once per process and
    cluster. Network clients take this function itself as their `sasl`
    (protocol.network awaits it when it opens a connection): awaited, not `ray.get`,
    as actors' event loops must not block. None where no controller runs (replicas
    started on their own, as tests/ray start them): no image asks for a login there.
    NetworkException (retriable) while the controller is dead or restarting."""
    login = _known()
    if login is None:
        try:
            controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
        except ValueError:   # no such actor
            return None
        try:
            login = _remember(await controller.cluster_login.remote())
        except ray.exceptions.RayActorError as error:
            raise NetworkException(f"the controller did not answer for the cluster login: {error}") from error
    return login


def cluster_client_options() -> dict:
    """Producer/Consumer options (kafka-python's names) that log in as the cluster,
    for threads that may block (drivers, member actors' loops, Spark tasks)."""
    login = _known()
    if login is None:
        controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
        login = _remember(ray.get(controller.cluster_login.remote()))
    return login_options(login)


def listener_tls() -> ssl.SSLContext | None:
    """The listener's TLS context on this node, or None (PLAINTEXT, SASL_PLAINTEXT)."""
    certfile, keyfile, _ = tls.node_tls_settings()
    return tls.server_context(certfile, keyfile) if certfile else None


def _known() -> SaslLogin | None:
    # By the Ray node this process runs on (random per node start, read locally): a
    # driver may join one cluster after another (tests); an actor stays on its node.
    with _logins_lock:
        return _logins.get(ray.get_runtime_context().get_node_id())


def _remember(login: SaslLogin) -> SaslLogin:
    with _logins_lock:
        _logins[ray.get_runtime_context().get_node_id()] = login
    return login
