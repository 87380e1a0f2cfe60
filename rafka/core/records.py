"""Record batches: Kafka's v2 (magic 2) format, byte for byte.

A batch is the unit that moves and is stored. Its 61-byte header:

    offset  size  field
    0       8     base_offset
    8       4     batch_length          bytes after this field (total size - 12)
    12      4     partition_leader_epoch
    16      1     magic                 always 2
    17      4     crc                   CRC32C (Castagnoli) of bytes [21, end)
    21      2     attributes            bits 0-2 compression (core.compression),
                                        bit 3 timestamp type, 4 transactional, 5 control
    23      4     last_offset_delta
    27      8     base_timestamp        first timestamp (ms)
    35      8     max_timestamp
    43      8     producer_id
    51      2     producer_epoch
    53      4     base_sequence
    57      4     record_count

then `record_count` records, each varint-framed: length, attributes (int8),
timestamp delta (varlong), offset delta (varint), key length + key (-1 = null),
value length + value (-1 = null: a tombstone), header count, and per header a
key (UTF-8) and a value (-1 = null). All varints are zigzag, as in protobuf.

The CRC covers neither the base offset nor the leader epoch, so the leader sets
both by rewriting the first 16 bytes (`restamp`) without decoding a record or
recomputing the CRC. Decode checks the CRC and the framing; a batch that fails
either raises CorruptRecord and is never returned as data.

Transactions (KIP-98): a transactional producer's batches carry attribute bit 4;
a transaction ends with a control batch (bits 4 and 5) written by the leader for
the transaction coordinator, holding one control record: key (version int16,
type int16: 0 ABORT, 1 COMMIT), value (version int16, coordinator epoch int32).
The broker reads only headers of data batches; a control batch's one record is
the only record it decodes (`end_txn_marker`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from crc32c import crc32c

from rafka.core import compression
from rafka.core.errors import CorruptRecord
from rafka.core.schema_primitives import VarintTable

MAGIC = 2
HEADER_SIZE = 61
LENGTH_PREFIX_SIZE = 12  # base_offset + batch_length: bytes not counted in batch_length
CRC_START = 21           # the CRC covers [CRC_START, end)
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_LOG_APPEND = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

CONTROL_ABORT = 0   # a control record's type (Kafka's ControlRecordType)
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")          # version, type
_END_TXN_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch

TIMESTAMP_TYPE_CREATE = 0
TIMESTAMP_TYPE_LOG_APPEND = 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_FIRST_16 = struct.Struct(">qii")  # base_offset, batch_length, partition_leader_epoch
assert _HEADER.size == HEADER_SIZE


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_bytes(self) -> int:
        return self.batch_length + LENGTH_PREFIX_SIZE

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def timestamp_type(self) -> int:
        return TIMESTAMP_TYPE_LOG_APPEND if self.attributes & ATTR_TIMESTAMP_LOG_APPEND else TIMESTAMP_TYPE_CREATE

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)


    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)


class Record(NamedTuple):
    """One decoded record. `value is None` is a tombstone."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class RecordInput(NamedTuple):
    """What a producer hands to `encode_batch`; offsets come from the leader. A
    NamedTuple: one is made per record sent (a frozen dataclass's __init__ cost
    three times as much)."""

    value: bytes | None
    key: bytes | None = None
    timestamp_ms: int = NO_TIMESTAMP
    headers: tuple[tuple[str, bytes | None], ...] = ()


# --- varints ---------------------------------------------------------------------

def _zigzag_varint_uncached(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_VARINT_CACHE = VarintTable(_zigzag_varint_uncached, low=-1, high=1 << 14)   # filled as used


def zigzag_varint(n: int) -> bytes:
    return _VARINT_CACHE[n]


def read_zigzag_varint(buf, pos: int, end: int) -> tuple[int, int]:
    """(value, next position); CorruptRecord if the varint runs past `end` or 10 bytes."""
    if pos + 1 < end:   # one or two bytes: nearly every length, delta and count a record holds
        byte = buf[pos]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), pos + 1
        second = buf[pos + 1]
        if second < 0x80:
            z = (byte & 0x7F) | (second << 7)
            return (z >> 1) ^ -(z & 1), pos + 2
    shift = 0
    z = 0
    while True:
        if pos >= end or shift > 63:
            raise CorruptRecord("varint runs past the end of the record")
        byte = buf[pos]
        pos += 1
        z |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7


# --- encode ----------------------------------------------------------------------

def encode_batch(records: Sequence[RecordInput], *, base_offset: int = 0,
                 partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                 base_sequence: int = NO_SEQUENCE, now_ms: int | None = None,
                 offset_deltas: Sequence[int] | None = None,
                 last_offset_delta: int | None = None, attributes: int = 0,
                 compression_codec: int = compression.NONE) -> bytes:
    """One batch holding `records` (at least one), its records section compressed
    with `compression_codec` (core.compression) unless NONE.

    A record without a timestamp takes `now_ms`. `offset_deltas` and
    `last_offset_delta` exist for log compaction, which keeps a subset of a batch's
    records at their original offsets and keeps the batch's original last offset.
    """
    if not records:
        raise ValueError("a batch holds at least one record")
    if offset_deltas is not None and len(offset_deltas) != len(records):
        raise ValueError("one offset delta per record")
    timestamps = [r.timestamp_ms if r.timestamp_ms >= 0 else (now_ms if now_ms is not None else 0)
                  for r in records]
    base_timestamp = timestamps[0]
    parts: list[bytes] = []
    varint, null = zigzag_varint, zigzag_varint(-1)
    for index, record in enumerate(records):   # inlined: this loop runs for every record a producer sends
        key, value, headers = record.key, record.value, record.headers
        body = [b"\x00", varint(timestamps[index] - base_timestamp),
                varint(index if offset_deltas is None else offset_deltas[index])]
        if key is None:
            body.append(null)
        else:
            body += (varint(len(key)), key if type(key) is bytes else bytes(key))
        if value is None:
            body.append(null)
        else:
            body += (varint(len(value)), value if type(value) is bytes else bytes(value))
        body.append(varint(len(headers)))
        for header_key, header_value in headers:
            _append_bytes(body, header_key.encode("utf-8"))
            _append_bytes(body, header_value)
        encoded = b"".join(body)
        parts += (varint(len(encoded)), encoded)
    if last_offset_delta is None:
        last_offset_delta = len(records) - 1 if offset_deltas is None else offset_deltas[-1]
    records_section = b"".join(parts)
    if compression_codec != compression.NONE:
        records_section = compression.compress(compression_codec, records_section)
        attributes = (attributes & ~ATTR_COMPRESSION_MASK) | compression_codec
    body_after_crc = _HEADER.pack(
        0, 0, 0, 0, 0, attributes, last_offset_delta, base_timestamp, max(timestamps),
        producer_id, producer_epoch, base_sequence, len(records))[CRC_START:] + records_section
    crc = crc32c(body_after_crc)
    batch_length = CRC_START + len(body_after_crc) - LENGTH_PREFIX_SIZE
    prefix = struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, MAGIC, crc)
    return prefix + body_after_crc


def _append_bytes(parts: list[bytes], data: bytes | None) -> None:
    if data is None:
        parts.append(zigzag_varint(-1))
    else:
        parts.append(zigzag_varint(len(data)))
        parts.append(data if type(data) is bytes else bytes(data))


# --- framing: headers only, no record is decoded ---------------------------------

def unpack_header(buf, pos: int = 0) -> BatchHeader:
    """The header at `pos`, checked for magic and a possible length, not for the
    batch's bytes being present (a file scanner reads headers alone)."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecord(f"batch header at {pos} is cut short")
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC:
        raise CorruptRecord(f"batch at {pos} has magic {header.magic}, expected {MAGIC}")
    if (header.batch_length < HEADER_SIZE - LENGTH_PREFIX_SIZE or header.last_offset_delta < 0
            or header.record_count < 0):
        raise CorruptRecord(f"batch at {pos} has impossible length {header.batch_length}")
    return header


def read_header(buf, pos: int = 0) -> BatchHeader:
    """The header at `pos` of a buffer that must hold the whole batch. Does not check
    the CRC (see `check_crc`)."""
    header = unpack_header(buf, pos)
    if pos + header.size_bytes > len(buf):
        raise CorruptRecord(f"batch at {pos} runs past the end of the buffer")
    return header


def check_crc(buf, pos: int, header: BatchHeader) -> None:
    end = pos + header.size_bytes
    actual = crc32c(memoryview(buf)[pos + CRC_START:end])
    if actual != header.crc:
        raise CorruptRecord(f"batch at offset {header.base_offset} failed its CRC "
                            f"(stored {header.crc:#010x}, computed {actual:#010x})")


def iter_batches(buf, *, verify_crc: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch in `buf`, which must hold whole batches."""
    pos = 0
    end = len(buf)
    while pos < end:
        header = read_header(buf, pos)
        if verify_crc:
            check_crc(buf, pos, header)
        yield pos, header
        pos += header.size_bytes


_INT32 = struct.Struct(">i")
_BATCH_LENGTH_AT = 8
_RECORD_COUNT_AT = HEADER_SIZE - 4


def count_records(buf) -> int:
    """The records in `buf` (whole batches, as a log read returns them): the sum of
    each batch header's record count, read in place (a batch's length and count,
    no record decoded; a consumer fetch's messages out)."""
    total, pos, end = 0, 0, len(buf)
    while pos + HEADER_SIZE <= end:
        total += _INT32.unpack_from(buf, pos + _RECORD_COUNT_AT)[0]
        pos += LENGTH_PREFIX_SIZE + _INT32.unpack_from(buf, pos + _BATCH_LENGTH_AT)[0]
    return total


def next_offset_after(buf) -> int | None:
    """The offset after the last batch in `buf` (whole batches), from the length
    fields and the last header alone; None for an empty buffer."""
    pos, end, last = 0, len(buf), None
    while pos + HEADER_SIZE <= end:
        last = pos
        pos += LENGTH_PREFIX_SIZE + _INT32.unpack_from(buf, pos + _BATCH_LENGTH_AT)[0]
    if last is None:
        return None
    return struct.unpack_from(">q", buf, last)[0] + _INT32.unpack_from(buf, last + 23)[0] + 1


def restamp(batch, base_offset: int, partition_leader_epoch: int) -> bytes:
    """The first 16 bytes of `batch` with a new base offset and leader epoch.

    The caller writes these, then `batch[16:]` unchanged: the records are not
    touched and the CRC stays valid, since it covers neither field.
    """
    (_, batch_length, _) = _FIRST_16.unpack_from(batch, 0)
    return _FIRST_16.pack(base_offset, batch_length, partition_leader_epoch)


def restamped_batch(batch, base_offset: int, partition_leader_epoch: int) -> bytes:
    return restamp(batch, base_offset, partition_leader_epoch) + bytes(memoryview(batch)[16:])


def with_log_append_time(batch, now_ms: int) -> bytes:
    """`batch` marked LogAppendTime with max timestamp `now_ms`, CRC recomputed.

    Used only for topics with message.timestamp.type=LogAppendTime: the fields are
    inside the CRC, so this is the one header change that costs a checksum pass.
    """
    header = read_header(batch, 0)
    after_crc = bytearray(memoryview(batch)[CRC_START:header.size_bytes])
    struct.pack_into(">h", after_crc, 0, header.attributes | ATTR_TIMESTAMP_LOG_APPEND)
    struct.pack_into(">q", after_crc, 35 - CRC_START, now_ms)
    prefix = struct.pack(">qiibI", header.base_offset, header.batch_length,
                         header.partition_leader_epoch, MAGIC, crc32c(after_crc))
    return prefix + bytes(after_crc)


# --- transaction markers (control batches) ---------------------------------------

class EndTxnMarker(NamedTuple):
    """What a COMMIT or ABORT control record says (Kafka's EndTransactionMarker)."""

    commit: bool
    coordinator_epoch: int


def encode_end_txn_marker(*, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                          timestamp_ms: int, base_offset: int = 0,
                          partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """The control batch a leader appends for a WriteTxnMarkers entry: one record,
    transactional and control bits set, no sequence."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _END_TXN_MARKER_VALUE.pack(0, coordinator_epoch)
    return encode_batch([RecordInput(value, key, timestamp_ms)], base_offset=base_offset,
                        partition_leader_epoch=partition_leader_epoch, producer_id=producer_id,
                        producer_epoch=producer_epoch, attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL)


def end_txn_marker(batch, pos: int, header: BatchHeader) -> EndTxnMarker | None:
    """The marker of the control batch at `pos` (whole in `batch`); None for an
    empty control batch (the cleaner emptied it) or a control type other than
    COMMIT / ABORT. CorruptRecord if its record does not parse (Kafka's
    InvalidRecordException: a marker is never guessed)."""
    if not header.is_control:
        raise ValueError(f"batch at offset {header.base_offset} is not a control batch")
    records = _decode_records(batch, pos, header)
    if not records:
        return None
    return control_record_marker(records[0].key, records[0].value, offset=header.base_offset)


def control_record_marker(key: bytes | None, value: bytes | None, *, offset: int) -> EndTxnMarker | None:
    """The marker a control batch's record (at `offset`) says; None for a control
    type other than COMMIT / ABORT; CorruptRecord if it does not parse."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecord(f"control record at offset {offset} has a key of "
                            f"{0 if key is None else len(key)} bytes, not at least 4")
    version, control_type = _CONTROL_KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptRecord(f"control record at offset {offset} has version {version}")
    if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    if value is None or len(value) < _END_TXN_MARKER_VALUE.size:
        raise CorruptRecord(f"end transaction marker at offset {offset} has a value of "
                            f"{0 if value is None else len(value)} bytes, not at least 6")
    value_version, coordinator_epoch = _END_TXN_MARKER_VALUE.unpack_from(value, 0)
    if value_version < 0:
        raise CorruptRecord(f"end transaction marker at offset {offset} has version {value_version}")
    return EndTxnMarker(control_type == CONTROL_COMMIT, coordinator_epoch)


# --- decode -----------------------------------------------------------------------

def decode_batches(buf, shape_for=None) -> Iterator[tuple[BatchHeader, list]]:
    """Every batch in `buf` with its records; CorruptRecord on the first bad one.
    `shape_for(header)` gives (a NamedTuple class, the fields before offset,
    timestamp, key, value, headers that are the same for the whole batch): the
    consumer builds its ConsumerRecords directly, with no second pass. Default:
    Record, nothing before."""
    for pos, header in iter_batches(buf, verify_crc=True):
        cls, prefix = shape_for(header) if shape_for else (Record, ())
        yield header, _decode_records(buf, pos, header, cls, prefix)


def decode_records(buf) -> list[Record]:
    return [record for _, records in decode_batches(buf) for record in records]


def _records_section(buf, pos: int, header: BatchHeader):
    """(buffer, start, end) of a batch's records: in place, or decompressed."""
    end = pos + header.size_bytes
    codec = header.attributes & ATTR_COMPRESSION_MASK
    if codec == compression.NONE:
        return buf, pos + HEADER_SIZE, end
    inflated = compression.decompress(codec, memoryview(buf)[pos + HEADER_SIZE:end])
    return inflated, 0, len(inflated)


def _decode_records(buf, pos: int, header: BatchHeader, cls=Record, prefix: tuple = ()) -> list:
    """The batch's records, each `cls(*prefix, offset, timestamp, key, value,
    headers)` (made as a tuple, with no Python call per record).

    The per-record loop reads its varints of one or two bytes inline: the
    record's length, its deltas (two bytes once a batch spans 64 records or 64
    ms: a producer under load merges batches), the key's and value's lengths, a
    null key and empty headers. It runs for every record a consumer or
    coordinator reads, and a call per field was most of its cost. Anything
    longer or malformed goes through read_zigzag_varint / _read_bytes, which
    raise CorruptRecord."""
    buf, cursor, end = _records_section(buf, pos, header)
    records: list = []
    append = records.append
    new = tuple.__new__
    base_offset = header.base_offset
    log_append_time = header.max_timestamp if header.timestamp_type == TIMESTAMP_TYPE_LOG_APPEND else None
    base_timestamp = header.base_timestamp
    varint = read_zigzag_varint
    copy = type(buf) is not bytes   # a memoryview's slices are views: records own their bytes
    for _ in range(header.record_count):
        # record length
        z = buf[cursor] if cursor < end else 0xFF
        if z < 0x80:
            cursor += 1
        elif cursor + 1 < end and buf[cursor + 1] < 0x80:
            z = (z & 0x7F) | (buf[cursor + 1] << 7)
            cursor += 2
        else:
            z = -1
        if z >= 0:
            length = (z >> 1) ^ -(z & 1)
        else:
            length, cursor = varint(buf, cursor, end)
        record_end = cursor + length
        if length < 1 or record_end > end:
            raise CorruptRecord(f"record in batch {base_offset} overruns its batch")
        cursor += 1  # record attributes, unused in v2
        # timestamp delta, then offset delta
        z = buf[cursor] if cursor < record_end else 0xFF
        if z < 0x80:
            cursor += 1
        elif cursor + 1 < record_end and buf[cursor + 1] < 0x80:
            z = (z & 0x7F) | (buf[cursor + 1] << 7)
            cursor += 2
        else:
            z = -1
        if z >= 0:
            timestamp_delta = (z >> 1) ^ -(z & 1)
        else:
            timestamp_delta, cursor = varint(buf, cursor, record_end)
        z = buf[cursor] if cursor < record_end else 0xFF
        if z < 0x80:
            cursor += 1
        elif cursor + 1 < record_end and buf[cursor + 1] < 0x80:
            z = (z & 0x7F) | (buf[cursor + 1] << 7)
            cursor += 2
        else:
            z = -1
        if z >= 0:
            offset_delta = (z >> 1) ^ -(z & 1)
        else:
            offset_delta, cursor = varint(buf, cursor, record_end)
        # key
        if cursor < record_end and buf[cursor] == 1:   # zigzag -1: a null key
            key, cursor = None, cursor + 1
        else:
            key, cursor = _read_bytes(buf, cursor, record_end)
        # value: its length inline when one or two bytes (values under 8 KiB)
        value_start = cursor
        z = buf[cursor] if cursor < record_end else 0xFF
        if z < 0x80:
            cursor += 1
        elif cursor + 1 < record_end and buf[cursor + 1] < 0x80:
            z = (z & 0x7F) | (buf[cursor + 1] << 7)
            cursor += 2
        else:
            z = -1
        if z == 1:   # zigzag -1: a null value
            value = None
        elif z >= 0 and not z & 1 and cursor + (z >> 1) <= record_end:
            value = buf[cursor:cursor + (z >> 1)]
            cursor += z >> 1
            if copy:
                value = bytes(value)
        else:
            value, cursor = _read_bytes(buf, value_start, record_end)
        # headers
        if cursor < record_end and buf[cursor] == 0:   # no headers
            headers, cursor = (), cursor + 1
        else:
            headers, cursor = _read_headers(buf, cursor, record_end)
        if cursor != record_end:
            raise CorruptRecord(f"record in batch {base_offset} has trailing bytes")
        append(new(cls, prefix + (base_offset + offset_delta,
                                  log_append_time if log_append_time is not None else base_timestamp + timestamp_delta,
                                  key, value, headers)))
    if cursor != end:
        raise CorruptRecord(f"batch {base_offset} has bytes after its last record")
    return records


def _read_headers(buf, cursor: int, record_end: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    header_count, cursor = read_zigzag_varint(buf, cursor, record_end)
    if header_count < 0:
        raise CorruptRecord("negative header count")
    headers = []
    for _ in range(header_count):
        header_key, cursor = _read_bytes(buf, cursor, record_end)
        header_value, cursor = _read_bytes(buf, cursor, record_end)
        if header_key is None:
            raise CorruptRecord("null header key")
        headers.append((header_key.decode("utf-8", errors="replace"), header_value))
    return tuple(headers), cursor


def _read_bytes(buf, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = read_zigzag_varint(buf, pos, end)
    if length == -1:
        return None, pos
    if length < -1 or pos + length > end:
        raise CorruptRecord("field length overruns its record")
    field = buf[pos:pos + length]
    return field if type(field) is bytes else bytes(field), pos + length
