"""Produce as rafka's clients send it (v9, one partition per request) and what its
answer says: the base offset the leader gave the batch, or the partition's error
as the typed KafkaError.

Pure: builds the request and reads the answer; the callers own the connections
and the retries. Callers: client.producer, actors.coordinator (its
__consumer_offsets writes, acks=all).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce_v9

from rafka.core.errors import error_for_code
from rafka.protocol.entities import timedelta_ms


def produce_request(*, topic: str, partition: int, records: bytes, acks: int,
                    timeout_ms: int) -> produce_v9.ProduceRequest:
    """`records`: one or more encoded record batches, as the log stores them.
    Plain ints where kio's types say i16/i32 (they are ints at runtime; the range
    checks cost more than the rest of the request, and these values are ours)."""
    return produce_v9.ProduceRequest(
        transactional_id=None, acks=acks, timeout=timedelta_ms(timeout_ms),
        topic_data=(produce_v9.TopicProduceData(name=topic, partition_data=(
            produce_v9.PartitionProduceData(index=partition, records=records),)),))


def produce_answer(response, *, topic: str, partition: int) -> int:
    """The base offset of the batch written; its error raised as the typed KafkaError."""
    (answered,) = [p for t in response.responses if t.name == topic for p in t.partition_responses
                   if int(p.index) == partition]
    if answered.error_code != ErrorCode.none:
        raise error_for_code(answered.error_code, answered.error_message or f"producing to {topic}-{partition}")
    return int(answered.base_offset)
