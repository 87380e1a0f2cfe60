"""The clients' one rule for what a retry may fix, and the one "ask a partition's
leader" primitive built on it, blocking and asyncio.

Retriable: a KafkaError marked retriable (leader moved, epoch fenced, ISR short for
a while, coordinator loading, a connection lost, a new leader's HW not caught up),
or an answer not in time (TimeoutError, which Ray's GetTimeoutError and asyncio's
TimeoutError also are). Everything else is final and reaches the caller as the
KafkaError behind it: a ValueError too, which is what a bug or a record that does
not decode raises, and what Ray's `get_actor` raises for a name not registered
(yet): where a caller looks an actor up, it says what that means there
(actors.coordinator and spark_bridge.cluster_access: NETWORK_EXCEPTION, retriable;
actors.cluster_credential: no login where no controller runs). A caller that calls Ray itself widens the rule where it calls (`retriable=`,
actors.coordinator_load).

The rule is written once (`RetryRule.pause_after`: final or retriable; then
`on_retry(error)`, e.g. the topic's metadata dropped so the next attempt asks who
leads now; then the deadline) and driven by two loops of four lines, blocking
(`retry_until`) and asyncio (`retry_until_async`); time and sleep are handed in.

Asking a leader: one attempt looks the leader up (`leaders.leader_address(topic,
partition)` -> (address, leader epoch)), sends `request_for(leader_epoch)` and
returns `read(response)` (protocol.fetching builds and reads the requests);
`ask_leader` retries attempts by the rule, dropping `leaders.invalidate(topic)`
before each retry. `ask_leader_once` and its asyncio twin `ask_leader_once_async`
are one attempt, errors as they are, for callers that retry at a level of their
own (a coordinator retries its whole load with `retry_until_async`,
actors.coordinator_load, so that the end it read and the records it fetched come from one leader) or not at all (a lag
sample, an admin's record lookup: one look).

Invariant: no Ray import (DESIGN section 1: `client` and `protocol` never load
Ray). Whatever a client is handed that calls into Ray (the cluster login, a
bootstrap lookup) fails in this vocabulary: actors.cluster_credential turns "the
controller is dead or restarting" into NETWORK_EXCEPTION.
Callers: client.producer (the rule), client.consumer (its fetches and offset
lookups), client.membership (the rule), client.admin (offset and record lookups),
actors.coordinator_load (a coordinator's load), actors.coordinator (its appends), actors.consumer_lag (one look a round),
spark_bridge.source (read tasks); the readers of protocol.range_reads bind their
asks from these.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rafka.core.errors import KafkaError, RequestTimedOut

# an answer not in time
_GONE_FOR_NOW = (TimeoutError,)


def kafka_cause(error: BaseException) -> BaseException:
    """The KafkaError behind a Ray task error (its `cause`), else the error itself."""
    return getattr(error, "cause", None) or error


def is_retriable(error: BaseException) -> bool:
    cause = kafka_cause(error)
    if isinstance(cause, KafkaError):
        return cause.retriable
    return isinstance(error, _GONE_FOR_NOW)


@dataclasses.dataclass(frozen=True)
class RetryRule:
    """One call's retries: which errors a retry may fix, the pause, the deadline
    (`math.inf`: retry for as long as the errors are retriable)."""
    what: str
    timeout_s: float
    retry_backoff_s: float
    deadline_s: float
    retriable: Callable[[BaseException], bool] = is_retriable

    def remaining_s(self, now_s: float) -> float:
        return max(0.001, self.deadline_s - now_s)

    def pause_after(self, error: BaseException, now_s: float, on_retry=None) -> float:
        """The pause before the next attempt, `on_retry(error)` called first; or
        raises: a final error as the KafkaError behind it, REQUEST_TIMED_OUT naming
        `error` when the pause would reach the deadline. Call it from the `except`."""
        if not self.retriable(error):
            cause = kafka_cause(error)
            raise cause if isinstance(cause, KafkaError) else error
        if on_retry is not None:
            on_retry(error)
        if now_s + self.retry_backoff_s >= self.deadline_s:
            raise RequestTimedOut(f"{self.what} did not succeed in {self.timeout_s:.1f}s; "
                                  f"last error: {error}") from error
        return self.retry_backoff_s


def retry_until(call: Callable[[float], Any], *, timeout_s: float, retry_backoff_s: float, what: str,
                on_retry=None, retriable=is_retriable, clock=time.monotonic, sleep=time.sleep):
    """`call(remaining_s)` until it returns, by the rule (`RetryRule.pause_after`)."""
    rule = RetryRule(what, timeout_s, retry_backoff_s, clock() + timeout_s, retriable)
    while True:
        try:
            return call(rule.remaining_s(clock()))
        except Exception as error:
            sleep(rule.pause_after(error, clock(), on_retry))


async def retry_until_async(call: Callable[[float], Awaitable[Any]], *, timeout_s: float, retry_backoff_s: float,
                            what: str, on_retry=None, retriable=is_retriable, clock=time.monotonic,
                            sleep=asyncio.sleep):
    """`await call(remaining_s)` until it returns, by the same rule."""
    rule = RetryRule(what, timeout_s, retry_backoff_s, clock() + timeout_s, retriable)
    while True:
        try:
            return await call(rule.remaining_s(clock()))
        except Exception as error:
            pause_s = rule.pause_after(error, clock(), on_retry)
        await sleep(pause_s)


# --- asking a partition's leader -------------------------------------------------

def submit_to_leader(leaders, network, topic: str, partition: int, request_for) -> concurrent.futures.Future:
    """One attempt's send: `request_for(leader_epoch)` over `network` (a
    protocol.network.ClientNetwork) to the leader `leaders` (client.metadata's
    cache) knows; the answer's future. Callers that ask many leaders at once send
    with this and read the futures after."""
    address, leader_epoch = leaders.leader_address(topic, partition)
    return network.submit(address, request_for(leader_epoch))


def ask_leader_once(leaders, network, topic: str, partition: int, request_for, read, *, timeout_s: float):
    """One attempt, blocking: `read(response)`, errors as they are."""
    return read(submit_to_leader(leaders, network, topic, partition, request_for).result(timeout=timeout_s))


def ask_leader(leaders, network, topic: str, partition: int, request_for, read, *, timeout_s: float,
               retry_backoff_s: float, clock=time.monotonic, sleep=time.sleep):
    """`ask_leader_once`, retried by the rule (the topic's leaders dropped before
    each retry) until `timeout_s`."""
    return retry_until(
        lambda remaining_s: ask_leader_once(leaders, network, topic, partition, request_for, read,
                                            timeout_s=remaining_s),
        timeout_s=timeout_s, retry_backoff_s=retry_backoff_s, what=f"a request to the leader of {topic}-{partition}",
        on_retry=lambda _: leaders.invalidate(topic), clock=clock, sleep=sleep)


@dataclasses.dataclass(frozen=True)
class PinnedLeader:
    """`leaders` for asks that must all reach one leader at one epoch (a
    coordinator's load: the end it read and the records it fetches come from the
    same leader)."""
    address: tuple
    leader_epoch: int

    async def leader_address(self, topic: str, partition: int) -> tuple[tuple, int]:
        return self.address, self.leader_epoch


async def ask_leader_once_async(leaders, nodes, topic: str, partition: int, request_for, read, *,
                                timeout_s: float | None = None):
    """One attempt on the event loop: `leaders.leader_address` is awaited, the
    request goes over `nodes` (protocol.network.NodeConnections, or anything with
    its `request`), bounded by `timeout_s` (None: the connection's own timeout);
    errors as they are."""
    address, leader_epoch = await leaders.leader_address(topic, partition)
    return read(await asyncio.wait_for(nodes.request(address, request_for(leader_epoch)), timeout_s))

