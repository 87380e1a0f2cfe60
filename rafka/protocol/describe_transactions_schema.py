"""DescribeTransactions v0's answer with its start time read as Kafka writes it: an
int64 of milliseconds, -1 for a transaction not started (Empty). kio types the
field datetime_i64 and its reader refuses a negative value, so rafka's own
clients (the Admin, `rafka transactions`) and the broker's edge (which reads an
answer it merges) could not read the answer about an Empty transactional id.
The bytes are those of kio's schema; only the Python type of one field differs.

Same class names as kio's module, so `entities.module_of` finds the nested types.
Caller: legacy_schemas.OWN_SCHEMAS (entities.load_response_schema).
"""

# No `from __future__ import annotations`: kio reads the field types as classes.
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64

DESCRIBE_TRANSACTIONS_KEY = 65


class _Version0:
    """What kio reads off every entity class of the answer, besides its fields."""
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_TRANSACTIONS_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicData(_Version0):
    __type__: ClassVar = EntityType.nested
    topic: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionState(_Version0):
    __type__: ClassVar = EntityType.nested
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    transactional_id: TransactionalId = field(metadata={"kafka_type": "string"})
    transaction_state: str = field(metadata={"kafka_type": "string"})
    transaction_timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_start_time: i64 = field(metadata={"kafka_type": "int64"})   # ms; -1: not started
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    topics: tuple[TopicData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTransactionsResponse(_Version0):
    __type__: ClassVar = EntityType.response
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    transaction_states: tuple[TransactionState, ...]
