"""TLS on the Kafka listener and on rafka's client connections (Python's ssl), as
Kafka's SSL and SASL_SSL listeners serve it: the whole connection is TLS from its
first byte, and SASL (protocol.sasl) runs inside it when asked for.

Invariants: TLS 1.2 at least; a client verifies the listener's certificate
against `cafile` (or the system's roots) always, and its host name unless told
not to (kafka-python's ssl_check_hostname; rafka's own connections inside the
cluster do not check names, as brokers are reached by node IP, and trust only the
cluster's CA file). Contexts are made once per listener or client, not per
connection.

Callers: protocol.server and protocol.connection take the contexts;
protocol.network makes a client's from its options; `node_tls_settings` and
`cluster_client_context` read the node's environment for rafka's own clients
(actors, the Admin's network, Spark's tasks) and actors.cluster_credential's
listener.
"""

from __future__ import annotations

import os
import ssl

TLS_CERTFILE_ENV, TLS_KEYFILE_ENV, TLS_CAFILE_ENV = "RAFKA_TLS_CERTFILE", "RAFKA_TLS_KEYFILE", "RAFKA_TLS_CAFILE"


def server_context(certfile: str, keyfile: str | None = None) -> ssl.SSLContext:
    """A listener's context: its certificate chain and private key (PEM)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    return context


def client_context(cafile: str | None = None, *, check_hostname: bool = True) -> ssl.SSLContext:
    """A client's context: the listener's certificate must chain to `cafile` (PEM;
    None: the system's roots), and name the host dialled when `check_hostname`."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = check_hostname
    return context


def node_tls_settings() -> tuple[str | None, str | None, str | None]:
    """(cert file, key file, CA file) from this process's environment (the node's:
    TLS is a host's setting, actors.cluster_credential)."""
    return tuple(os.environ.get(name) or None for name in (TLS_CERTFILE_ENV, TLS_KEYFILE_ENV, TLS_CAFILE_ENV))


def cluster_client_context() -> ssl.SSLContext | None:
    """rafka's own clients' TLS context on this node, or None."""
    certfile, _, cafile = node_tls_settings()
    return client_context(cafile, check_hostname=False) if certfile else None
