"""Compressed batches: each codec round-trips through encode and decode, the log
stores them as sent, and bad or oversized compressed records are CorruptRecord."""

import pytest
import cramjam

from rafka.core import compression
from rafka.core.clock import FakeClock
from rafka.core.config import TopicConfig
from rafka.core.errors import CorruptRecord, InvalidRecord
from rafka.core.log import PartitionLog
from rafka.core.records import RecordInput, decode_batches, decode_records, encode_batch, read_header

pytestmark = pytest.mark.core

RECORDS = [RecordInput(b"value-%d" % i * 20, b"key-%d" % i, 1_000 + i, (("h", b"x"),)) for i in range(50)]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_each_codec__round_trips_and_is_smaller(codec):
    plain = encode_batch(RECORDS)
    packed = encode_batch(RECORDS, compression_codec=compression.parse_compression_type(codec))
    assert len(packed) < len(plain)
    assert read_header(packed).attributes & 0x07 == compression.CODECS[codec]
    assert decode_records(packed) == decode_records(plain)


def test_snappy__a_raw_block_without_xerial_framing_is_read_too():
    plain = encode_batch(RECORDS)
    records_section = plain[61:]
    raw = encode_batch(RECORDS, compression_codec=compression.SNAPPY)
    assert raw[61:].startswith(compression.XERIAL_MAGIC)
    unframed = bytes(cramjam.snappy.compress_raw(records_section))
    assert compression.decompress(compression.SNAPPY, unframed) == records_section


def test_the_log__stores_a_compressed_batch_as_sent(tmp_path):
    log = PartitionLog(tmp_path, TopicConfig.from_dict({}), FakeClock())
    packed = encode_batch(RECORDS, compression_codec=compression.ZSTD)
    log.append_as_leader(packed, 0)
    log.high_watermark = log.log_end_offset
    stored = log.read(0, 1 << 20)
    assert stored[61:] == packed[61:] and len(stored) == len(packed)   # base offset and epoch restamped only
    assert [r.value for r in decode_records(stored)] == [r.value for r in RECORDS]


def test_a_compacted_topic__looks_inside_compressed_batches_for_keys(tmp_path):
    log = PartitionLog(tmp_path, TopicConfig.from_dict({"cleanup.policy": "compact"}), FakeClock())
    keyless = encode_batch([RecordInput(b"v", None, 1_000)], compression_codec=compression.LZ4)
    with pytest.raises(InvalidRecord):
        log.append_as_leader(keyless, 0)
    assert log.log_end_offset == 0


def test_records_that_do_not_decompress__corrupt_record():
    mislabelled = encode_batch(RECORDS, attributes=compression.GZIP)   # says gzip, holds plain records
    with pytest.raises(CorruptRecord):
        list(decode_batches(mislabelled))


def test_a_compression_bomb__corrupt_record(monkeypatch):
    monkeypatch.setattr(compression, "MAX_DECOMPRESSED_BYTES", 1_000)
    bomb = encode_batch([RecordInput(b"\0" * 100_000)], compression_codec=compression.ZSTD)
    assert len(bomb) < 1_000
    with pytest.raises(CorruptRecord):
        decode_records(bomb)


def test_parse_compression_type__names_and_bad_values():
    assert compression.parse_compression_type("LZ4") == compression.LZ4
    with pytest.raises(ValueError):
        compression.parse_compression_type("brotli")


def test_import__no_codec_library_until_a_batch_needs_one():
    """A replica process imports core.records; cramjam comes with the first
    compressed batch only (issue 27: memory per replica)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import rafka
    checkout = str(Path(rafka.__file__).resolve().parents[1])   # this rafka, not an installed one
    probe = ("import sys; from rafka.core import records; "
             "assert 'cramjam' not in sys.modules, 'imported eagerly'; "
             "from rafka.core.compression import ZSTD, compress, decompress; "
             "assert decompress(ZSTD, compress(ZSTD, b'x' * 100)) == b'x' * 100; "
             "assert 'cramjam' in sys.modules")
    subprocess.run([sys.executable, "-c", probe], check=True, env={**os.environ, "PYTHONPATH": checkout})
