"""An assign-mode reader of `rafka verify`: one consumer follows partitions from
where `auto_offset_reset` puts it until the run stops, logging every record it is
handed as a Poll (no group, no generation). The workload's tail readers
(read_uncommitted, from the latest offsets) and the transactional workload's
read_committed reader (from the start) are both this.

Invariants: a retriable error (a leader change mid-poll) is retried by the next
poll; any other error is noted in `errors` and polling goes on, so a reader never
ends before the run does. Callers: rafka.verify.workload, rafka.verify.transactions.
"""

from __future__ import annotations

import threading

from rafka.core.errors import KafkaError
from rafka.core.history import READ_UNCOMMITTED, Poll


def follow_partitions(cluster, partitions: list, *, name: str, incarnation: int, stopping: threading.Event,
                      errors: list[str], history, clock, auto_offset_reset: str,
                      isolation_level: str = READ_UNCOMMITTED) -> None:
    with cluster.consumer(isolation_level=isolation_level, auto_offset_reset=auto_offset_reset,
                          fetch_max_wait_ms=100, client_id=name, request_timeout_ms=10_000,
                          default_api_timeout_ms=20_000) as consumer:
        consumer.assign(partitions)
        while not stopping.is_set():
            try:
                records = consumer.poll(timeout=0.5)
            except KafkaError as error:
                if not error.retriable:
                    errors.append(f"{name}: poll: {error}")
                continue
            now_ms = clock.now_ms()
            for record in records:
                history.log(Poll(name, incarnation, None, None, record.topic, record.partition, record.offset,
                                 record.value.decode(errors="replace"), now_ms, isolation_level))
