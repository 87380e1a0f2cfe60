"""Kafka's batch compression codecs: the records section of a v2 batch
(everything after the 61-byte header) compressed as one block.

  attribute bits 0-2   codec   stream format (what Kafka's clients write)
  1                    gzip    gzip (RFC 1952)
  2                    snappy  xerial framing (Java's SnappyOutputStream), or one
                               raw snappy block (what some clients write; Kafka's
                               reader, xerial's SnappyInputStream, takes both)
  3                    lz4     LZ4 frame (KafkaLZ4BlockOutputStream; v2 batches
                               have the correct header checksum)
  4                    zstd    zstd frame

Invariants: the broker stores compressed batches as they came (the CRC covers the
compressed bytes); it decompresses only to look inside (compaction, the
coordinator loading offsets, consumers, the Spark decoder). A block that does not
decompress, or whose output would pass MAX_DECOMPRESSED_BYTES, is CorruptRecord.
All four codecs come from one pinned library, cramjam (Rust bindings), imported
on the first batch that needs a codec (`_codecs`), not with this module: every
replica process imports this module and most never see a compressed batch
(cramjam's import cost 1.5 MB of private memory per process; issue 27).
Callers: core.records (decode and encode), rafka's Producer (compression_type).
"""

from __future__ import annotations

import functools
import struct

from rafka.core.errors import CorruptRecord

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
CODEC_NAMES = {v: k for k, v in CODECS.items()}
# A bound on one batch's decompressed records: a small batch that inflates past it
# (a compression bomb) is refused rather than held in memory.
MAX_DECOMPRESSED_BYTES = 256 << 20
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_BLOCK_LENGTH = struct.Struct(">i")


@functools.cache
def _codecs():
    """cramjam, imported once, at the first compress or decompress."""
    import cramjam
    return cramjam


def parse_compression_type(value: str) -> int:
    codec = CODECS.get(str(value).lower())
    if codec is None:
        raise ValueError(f"compression_type must be one of {sorted(CODECS)}, not {value!r}")
    return codec


def compress(codec: int, data: bytes) -> bytes:
    cramjam = _codecs()
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return _xerial_frame(data)
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: int, data) -> bytes:
    cramjam = _codecs()
    try:
        if codec == GZIP:
            out = cramjam.gzip.decompress(data)
        elif codec == SNAPPY:
            out = _snappy_decompress(bytes(data))
        elif codec == LZ4:
            out = cramjam.lz4.decompress(data)
        elif codec == ZSTD:
            out = cramjam.zstd.decompress(data)
        else:
            raise CorruptRecord(f"unknown compression codec {codec}")
    except CorruptRecord:
        raise
    except Exception as error:   # cramjam raises its own DecompressionError
        raise CorruptRecord(f"{CODEC_NAMES.get(codec, codec)} records do not decompress: {error}") from None
    out = bytes(out)
    if len(out) > MAX_DECOMPRESSED_BYTES:
        raise CorruptRecord(f"records decompress to {len(out)} bytes, more than {MAX_DECOMPRESSED_BYTES}")
    return out


def _xerial_frame(data: bytes) -> bytes:
    """xerial's stream format, one block: magic, version 1, compatible version 1."""
    cramjam = _codecs()
    block = bytes(cramjam.snappy.compress_raw(data))
    return _XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1) + _BLOCK_LENGTH.pack(len(block)) + block


def _snappy_decompress(data: bytes) -> bytes:
    cramjam = _codecs()
    if not data.startswith(XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out, position = [], _XERIAL_HEADER.size
    total = 0
    while position < len(data):
        if position + _BLOCK_LENGTH.size > len(data):
            raise CorruptRecord("xerial snappy block length cut short")
        (length,) = _BLOCK_LENGTH.unpack_from(data, position)
        position += _BLOCK_LENGTH.size
        if length < 0 or position + length > len(data):
            raise CorruptRecord("xerial snappy block overruns its data")
        block = bytes(cramjam.snappy.decompress_raw(data[position:position + length]))
        total += len(block)
        if total > MAX_DECOMPRESSED_BYTES:
            raise CorruptRecord(f"records decompress to more than {MAX_DECOMPRESSED_BYTES} bytes")
        out.append(block)
        position += length
    return b"".join(out)
