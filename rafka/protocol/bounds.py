"""Kafka's bound on declared sizes, checked before kio builds anything.

Why this module exists: kio 0.6.5's native reader allocates an array's storage from
the declared element count before reading any element, so a 5-byte compact array
length of 2**32-2 (or a legacy length of 2**31-1) asks for 16-34 GB and the Rust
allocator aborts the whole process (found by fuzzing; it is not a Python exception,
nothing can catch it). Kafka's generated readers refuse such input first
(MessageDataGenerator: "Tried to allocate a collection of size N, but there are only
M bytes remaining"). `check_entity` walks a message with kio's own schema
descriptions and kio's own primitive readers and makes the same refusal: every
array count and every tagged-field count and size must fit in the bytes left.
Only then does the caller hand the bytes to kio's entity reader.

Invariant: after `check_entity(t, buf, offset, end)` returns, no array or tag count
inside the message exceeds the bytes left where it was read, so kio's reader
allocates O(end - offset) at most. The walk reads each field once: O(bytes), and
a bytes or records field only by its length (reading it with kio's reader copied
a produce's megabyte of records once more, 0.65 ms of a leader's 3.9 per 1 MB
produce).

Callers: framing (header tagged fields) and dispatch (request bodies). Kafka keeps
unknown tagged fields and goes on; so does this walk (kio does not, see dispatch).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from kio._kio_native import get_field_reader, get_reader
from kio.serial.errors import SerialError
from kio.serial._introspect import (EntityField, EntityTupleField, PrimitiveField,
                                    PrimitiveTupleField, classify_field, get_field_tag,
                                    get_schema_field_type, is_optional)
from kio.serial.readers import (read_compact_array_length, read_int8, read_int32,
                                read_legacy_array_length, read_unsigned_varint)

# What kio's readers raise on bad bytes (its own DecodeError family, plus plain
# ValueError for a negative legacy array length or a bool byte other than 0/1, and
# KeyError for a tagged field it does not know). Anything else is a bug and escapes.
KIO_DECODE_ERRORS: tuple[type[BaseException], ...] = (SerialError, ValueError, KeyError,
                                                     OverflowError, IndexError)


class DeclaredSizeTooLarge(ValueError):
    """A count or size on the wire exceeds the bytes that remain (Kafka refuses it)."""


class NullNotAllowed(ValueError):
    """A null array where the schema does not allow one (Kafka's generated readers:
    "non-nullable field ... was serialized as null"); kio would read it as None."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Step:
    kind: str                      # "primitive" | "bytes" | "primitive_array" | "entity" | "entity_array"
    flexible: bool
    reader: Callable[[Any, int], tuple[Any, int]] | None = None
    size: int = 0                  # "skip": the bytes of a run of fixed-size fields
    entity_type: type | None = None
    nullable_entity: bool = False
    nullable_array: bool = False
    name: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    flexible: bool
    steps: tuple[_Step, ...]
    steps_by_tag: dict[int, _Step]


# Fields walked by their length prefix alone: their bytes are never looked into
# here, and may be a megabyte.
_SKIPPED_BY_LENGTH = frozenset({"bytes", "records"})
# Fields of a fixed size hold no count: a run of them is stepped over at once (a
# Fetch's partition is six of them; reading each with kio's reader was most of
# the walk). A bad value in one (a bool that is not 0 or 1) is kio's to refuse.
_FIXED_BYTES = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8, "float64": 8, "bool": 1,
                "error_code": 2, "timedelta_i32": 4, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16}


def _step(entity_type: type, field: dataclasses.Field, *, is_tag: bool) -> _Step:
    flexible = entity_type.__flexible__
    match classify_field(field):
        case PrimitiveField() if field.metadata.get("kafka_type") in _SKIPPED_BY_LENGTH:
            return _Step("bytes", flexible, name=field.name)
        case PrimitiveField() if field.metadata.get("kafka_type") in _FIXED_BYTES:
            return _Step("skip", flexible, size=_FIXED_BYTES[field.metadata["kafka_type"]])
        case PrimitiveField():
            return _Step("primitive", flexible, reader=get_field_reader(
                entity_type, field, False, is_tag))
        case PrimitiveTupleField():
            return _Step("primitive_array", flexible, reader=get_reader(
                get_schema_field_type(field), flexible, False), nullable_array=is_optional(field),
                name=field.name)
        case EntityField(sub_type):
            # kio (as Kafka) writes a tagged struct without the KIP-893 null marker.
            return _Step("entity", flexible, entity_type=sub_type,
                         nullable_entity=is_optional(field) and not is_tag)
        case EntityTupleField(sub_type):
            return _Step("entity_array", flexible, entity_type=sub_type, nullable_array=is_optional(field),
                         name=field.name)
    raise TypeError(f"unclassified field {field.name} of {entity_type.__name__}")


@functools.cache
def _plan(entity_type: type) -> _Plan:
    steps, steps_by_tag = [], {}
    for field in dataclasses.fields(entity_type):
        tag = get_field_tag(field)
        if tag is None:
            step = _step(entity_type, field, is_tag=False)
            if step.kind == "skip" and steps and steps[-1].kind == "skip":
                step = _Step("skip", step.flexible, size=steps.pop().size + step.size)
            steps.append(step)
        else:
            steps_by_tag[int(tag)] = _step(entity_type, field, is_tag=True)
    return _Plan(entity_type.__flexible__, tuple(steps), steps_by_tag)


def _need(count: int, offset: int, end: int, what: str) -> None:
    if count > end - offset:
        raise DeclaredSizeTooLarge(
            f"Tried to allocate {what} of size {count}, but there are only "
            f"{max(end - offset, 0)} bytes remaining.")


def _array_count(flexible: bool, buf: Any, offset: int) -> tuple[int | None, int]:
    if flexible:
        return read_compact_array_length(buf, offset)
    count, size = read_legacy_array_length(buf, offset)
    return (None if count == -1 else count), size


def _walk_step(step: _Step, buf: Any, offset: int, end: int) -> int:
    if step.kind == "skip":   # past `end`: the entity's own end check refuses it
        return offset + step.size
    if step.kind == "primitive":
        return offset + step.reader(buf, offset)[1]
    if step.kind == "bytes":   # compact: length + 1 (0 is null); legacy: int32 length (-1 is null)
        length, size = (read_unsigned_varint if step.flexible else read_int32)(buf, offset)
        offset += size
        length -= 1 if step.flexible else 0
        if length > 0:
            _need(length, offset, end, f"the bytes of {step.name}")
            offset += length
        return offset
    if step.kind == "entity":
        if step.nullable_entity:
            marker, size = read_int8(buf, offset)
            offset += size
            if marker < 0:
                return offset
        return check_entity(step.entity_type, buf, offset, end)
    count, size = _array_count(step.flexible, buf, offset)
    offset += size
    if count is None:
        if not step.nullable_array:
            raise NullNotAllowed(f"non-nullable field {step.name} was serialized as null")
        return offset
    if count < 0:
        raise DeclaredSizeTooLarge(f"negative array length {count}")
    # Every element takes at least one byte, except a struct with no fields in a
    # non-flexible version, which no request schema has; Kafka's bound holds anyway.
    _need(count, offset, end, "a collection")
    if step.kind == "primitive_array":
        for _ in range(count):
            offset += step.reader(buf, offset)[1]
    else:
        for _ in range(count):
            offset = check_entity(step.entity_type, buf, offset, end)
    return offset


def skip_tagged_fields(buf: Any, offset: int, end: int,
                       steps_by_tag: dict[int, _Step] | None = None) -> int:
    """Offset after a tagged-field section. Known tags are walked inside their own
    size; unknown ones skipped, as Kafka's readUnknownTaggedField keeps them."""
    count, size = read_unsigned_varint(buf, offset)
    offset += size
    _need(count, offset, end, "tagged fields")
    for _ in range(count):
        tag, size = read_unsigned_varint(buf, offset)
        offset += size
        value_bytes, size = read_unsigned_varint(buf, offset)
        offset += size
        _need(value_bytes, offset, end, "a tagged field")
        step = (steps_by_tag or {}).get(tag)
        if step is not None:
            value_end = _walk_step(step, buf, offset, offset + value_bytes)
            _need(value_end - offset, offset, offset + value_bytes, "a tagged field value")
        offset += value_bytes
    return offset


def check_entity(entity_type: type, buf: Any, offset: int, end: int) -> int:
    """Walk one entity of `entity_type` at `offset`; return the offset after it.
    Raises DeclaredSizeTooLarge or one of KIO_DECODE_ERRORS on bad bytes."""
    plan = _plan(entity_type)
    for step in plan.steps:
        offset = _walk_step(step, buf, offset, end)
    if plan.flexible:
        offset = skip_tagged_fields(buf, offset, end, plan.steps_by_tag)
    if offset > end:
        raise DeclaredSizeTooLarge(f"{entity_type.__name__} runs {offset - end} bytes past its end")
    return offset
