"""The clients' one rule for what a retry may fix, and the one blocking retry loop.

Retriable: a KafkaError marked retriable (leader moved, epoch fenced, ISR short for
a while, coordinator loading, a connection lost), an answer not in time
(TimeoutError, which Ray's GetTimeoutError also is), or a ValueError (what Ray's
`get_actor` raises for a name not registered yet, e.g. a replica being
re-created). Everything else is final and reaches the caller as it is.
Before a retry the caller's metadata for the topic is dropped, so the next attempt
asks a node (client.metadata) who leads now.

Invariant: no Ray import (DESIGN section 1: `client` and `protocol` never load
Ray). Whatever a client is handed that calls into Ray (the cluster login, a
bootstrap lookup) fails in this vocabulary: actors.cluster_credential turns "the
controller is dead or restarting" into NETWORK_EXCEPTION; an actor that calls Ray
itself adds Ray's errors to this rule where it calls (actors.coordinator).
Callers: client.producer, client.consumer, client.membership, client.admin,
actors.coordinator, spark_bridge.source.
"""

from __future__ import annotations

import time

from rafka.core.errors import KafkaError, RequestTimedOut

# an answer not in time, an actor name not registered yet
_GONE_FOR_NOW = (TimeoutError, ValueError)


def kafka_cause(error: BaseException) -> BaseException:
    """The KafkaError behind a Ray task error (its `cause`), else the error itself."""
    return getattr(error, "cause", None) or error


def is_retriable(error: BaseException) -> bool:
    cause = kafka_cause(error)
    if isinstance(cause, KafkaError):
        return cause.retriable
    return isinstance(error, _GONE_FOR_NOW)


def retry_until(call, *, timeout_s: float, retry_backoff_s: float, what: str, on_retry=None):
    """`call(remaining_s)` until it returns, retrying retriable errors (after
    `on_retry()`, e.g. dropping cached metadata) until `timeout_s`; then
    REQUEST_TIMED_OUT naming the last error. Final errors reach the caller as the
    KafkaError behind them."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call(max(0.001, deadline - time.monotonic()))
        except Exception as error:
            if not is_retriable(error):
                cause = kafka_cause(error)
                raise cause if isinstance(cause, KafkaError) else error
            if on_retry is not None:
                on_retry()
            if time.monotonic() + retry_backoff_s >= deadline:
                raise RequestTimedOut(f"{what} did not succeed in {timeout_s:.1f}s; "
                                      f"last error: {error}") from error
            time.sleep(retry_backoff_s)


def ask_leader(metadata, network, topic: str, partition: int, request_for, read, *, timeout_s: float,
               retry_backoff_s: float):
    """`read(response)` of `request_for(leader_epoch)` sent over `network` (a
    protocol.network.ClientNetwork) to the partition's leader, retried on retriable
    errors (after the topic's metadata is dropped) until `timeout_s`."""
    def call(remaining_s: float):
        address, leader_epoch = metadata.leader_address(topic, partition)
        return read(network.submit(address, request_for(leader_epoch)).result(timeout=remaining_s))
    return retry_until(call, timeout_s=timeout_s, retry_backoff_s=retry_backoff_s,
                       what=f"a request to the leader of {topic}-{partition}",
                       on_retry=lambda: metadata.invalidate(topic))
