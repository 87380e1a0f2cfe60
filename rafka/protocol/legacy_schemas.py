"""Message versions Kafka still served before 4.0 that kio, generated from Kafka 4's
JSON schemas, no longer has: written here in kio's own form (frozen dataclasses
with kafka_type metadata), so kio's reader and writer, bounds.check_entity and
dispatch treat them as any other version.

Why: ListOffsets v0 was removed in Kafka 4.0 (KIP-896), but Sarama before 1.27
sends it for the broker offsets of every partition, and Debian's Burrow 1.2.1
(Sarama 1.22) is built on that: without v0 Burrow never learns a log end offset
and drops every committed offset it reads ("no topic"). The fields are those of
Kafka 3.x's ListOffsetsRequest.json / ListOffsetsResponse.json at version 0:
MaxNumOffsets in the request and OldStyleOffsets in the response, no
isolation level, no throttle time, no timestamp in the answer.

Besides them, one answer kio reads too narrowly: DescribeTransactions v0, whose
start time is -1 for an Empty transaction (describe_transactions_schema).

Caller: entities.load_request_schema / load_response_schema (OWN_SCHEMAS).
"""

# No `from __future__ import annotations`: kio reads the field types as classes.
from dataclasses import dataclass, field
from typing import ClassVar

from kio import index as _kio_index
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.schema.types import BrokerId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i64

from rafka.protocol import describe_transactions_schema

LIST_OFFSETS_KEY = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartitionV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(LIST_OFFSETS_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    timestamp: i64 = field(metadata={"kafka_type": "int64"})
    max_num_offsets: i32 = field(metadata={"kafka_type": "int32"}, default=i32(1))


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopicV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(LIST_OFFSETS_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    name: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[ListOffsetsPartitionV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsRequestV0:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(LIST_OFFSETS_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    replica_id: BrokerId = field(metadata={"kafka_type": "int32"})
    topics: tuple[ListOffsetsTopicV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartitionResponseV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(LIST_OFFSETS_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    old_style_offsets: tuple[i64, ...] = field(metadata={"kafka_type": "int64"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopicResponseV0:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(LIST_OFFSETS_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[ListOffsetsPartitionResponseV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsResponseV0:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(LIST_OFFSETS_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topics: tuple[ListOffsetsTopicResponseV0, ...]


# (api key, version) -> (request type, response type)
OWN_SCHEMAS: dict[tuple[int, int], tuple[type, type]] = {
    (LIST_OFFSETS_KEY, 0): (ListOffsetsRequestV0, ListOffsetsResponseV0),
    (describe_transactions_schema.DESCRIBE_TRANSACTIONS_KEY, 0): (
        _kio_index.load_request_schema(describe_transactions_schema.DESCRIBE_TRANSACTIONS_KEY, 0),
        describe_transactions_schema.DescribeTransactionsResponse),
}
