"""Produce as rafka's clients send it (v9, one partition per request) and what its
answer says: the base offset the leader gave the batch, or the partition's error
as the typed KafkaError.

Pure: builds the request and reads the answer; the callers own the connections
and the retries. Callers: client.producer, actors.coordinator (its
__consumer_offsets writes, acks=all).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from rafka.core.errors import error_for_code
from rafka.protocol.hot_writers import WrittenBody, produce_request_v9


def produce_request(*, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int,
                    transactional_id: str | None = None) -> WrittenBody:
    """`records`: one or more encoded record batches, as the log stores them; the
    request is written from these values (no kio entity for it).
    `transactional_id`: a transactional producer's (the leader authorizes it)."""
    return produce_request_v9(transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms,
                              topics=[(topic, [(partition, records)])])


def produce_answer(response, *, topic: str, partition: int) -> int:
    """The base offset of the batch written; its error raised as the typed KafkaError."""
    (answered,) = [p for t in response.responses if t.name == topic for p in t.partition_responses
                   if int(p.index) == partition]
    if answered.error_code != ErrorCode.none:
        raise error_for_code(answered.error_code, answered.error_message or f"producing to {topic}-{partition}")
    return int(answered.base_offset)
