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
client.network makes a client's from its options; actors.cluster_credential
makes the actors' from the node's environment.
"""

from __future__ import annotations

import ssl


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
