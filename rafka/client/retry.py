"""The clients' one rule for what a retry may fix, and the one blocking retry loop.

Retriable: a KafkaError marked retriable (leader moved, epoch fenced, ISR short for
a while, coordinator loading), a replica actor that is dead or restarting, or an
actor name not registered yet (`ray.get_actor` raises ValueError while a replica
is being re-created). Everything else is final and reaches the caller as it is.
Before a retry the caller's metadata for the topic is dropped, so the next attempt
asks the controller who leads now.
"""

from __future__ import annotations

import time

import ray

from rafka.core.errors import KafkaError, RequestTimedOut

_ACTOR_GONE = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
               ray.exceptions.GetTimeoutError, ValueError)


def kafka_cause(error: BaseException) -> BaseException:
    """The KafkaError behind a Ray task error, else the error itself."""
    return getattr(error, "cause", None) or error


def is_retriable(error: BaseException) -> bool:
    cause = kafka_cause(error)
    if isinstance(cause, KafkaError):
        return cause.retriable
    return isinstance(error, _ACTOR_GONE)


def call_leader(metadata, topic: str, partition: int, method: str, *args, timeout_s: float,
                retry_backoff_s: float):
    """`leader.<method>(*args, leader_epoch=<current>)` on the partition's leader,
    retried on retriable errors until `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            leader, leader_epoch = metadata.leader_and_epoch(topic, partition)
            return ray.get(getattr(leader, method).remote(*args, leader_epoch=leader_epoch),
                           timeout=max(0.001, deadline - time.monotonic()))
        except Exception as error:
            if not is_retriable(error):
                raise kafka_cause(error) if isinstance(kafka_cause(error), KafkaError) else error
            metadata.invalidate(topic)
            if time.monotonic() + retry_backoff_s >= deadline:
                raise RequestTimedOut(f"{method} on {topic}-{partition} did not succeed in "
                                      f"{timeout_s:.1f}s; last error: {error}") from error
            time.sleep(retry_backoff_s)
