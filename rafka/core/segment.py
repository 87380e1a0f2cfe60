"""One log segment: `<base>.log` and its sparse `.index` and `.timeindex`.

Files, named by the 20-digit base offset:
  .log        whole record batches, back to back, base offsets increasing
  .index      entries (offset - base: int32, file position: int32), big-endian;
              an entry means "the batch at this position starts at this offset";
              one entry per `index.interval.bytes` of appended data
  .timeindex  entries (max timestamp so far: int64, offset - base: int32); a new
              entry only when the segment's max timestamp grew; a last entry is
              written when the segment stops being active, so the last entry of an
              inactive segment holds its max timestamp
  .txnindex   the transactions aborted by a marker in this segment (core.txn_index);
              kept in memory, written as markers are appended; a segment opened
              without one has `txn_index.loaded_from_file` False and the log
              rebuilds it (core.log)

Invariants: the .log holds only whole batches that passed their CRC (checked at
append, or at recovery for an unflushed tail); index entries increase in both
fields; the in-memory indexes are the truth and the files follow them. The
tail (the headers and positions of the batches from the last index entry on,
while `_tail_complete`) is what a lookup at or past the last index entry would
find by reading headers from the file: readers at the log's end (followers,
caught-up consumers) find their batch in memory.
With `drop_behind_bytes` (the controller's log_drop_behind_bytes), the segment
advises the kernel to drop the page cache of what lies more than that many bytes
behind its end (`_drop_behind`); advice never changes the file or what a read
returns.
Caller: PartitionLog only, from one thread.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterator
from pathlib import Path

from rafka.core.errors import CorruptRecord
from rafka.core.records import (HEADER_SIZE, BatchHeader, EndTxnMarker, check_crc, decode_batches,
                                decode_records, end_txn_marker, iter_batches, unpack_header)
from rafka.core.txn_index import TxnIndex

OFFSET_INDEX_ENTRY = struct.Struct(">ii")
TIME_INDEX_ENTRY = struct.Struct(">qi")
SCAN_CHUNK_BYTES = 1 << 20      # recovery and rebuild read whole batches
LOOKUP_CHUNK_BYTES = 8 << 10    # lookups read headers: about one index interval
IOV_MAX = 1024
MAX_TAIL_BATCHES = 256          # past this (a large index.interval.bytes), lookups read the file
NO_TIMESTAMP = -1


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class Segment:
    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int,
                 created_ms: int, drop_behind_bytes: int = 0) -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.log_path = self.directory / segment_file_name(base_offset, ".log")
        self.index_path = self.directory / segment_file_name(base_offset, ".index")
        self.timeindex_path = self.directory / segment_file_name(base_offset, ".timeindex")
        self.txn_index = TxnIndex.open(self.directory / segment_file_name(base_offset, ".txnindex"))
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size_bytes = os.fstat(self._fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.first_batch_max_timestamp: int | None = None
        self._index_offsets: list[int] = []
        self._index_positions: list[int] = []
        self._time_timestamps: list[int] = []
        self._time_offsets: list[int] = []
        self._bytes_since_index_entry = 0
        self._tail_positions: list[int] = []
        self._tail_last_offsets: list[int] = []
        self._tail_headers: list[BatchHeader] = []
        self._tail_complete = True
        self._index_file = None
        self._timeindex_file = None
        self.drop_behind_bytes = drop_behind_bytes
        self._drop_from = 0    # below this, the page cache was asked to drop the file's pages
        self._drop_mark = 0    # below this, writeback was started (the last advice's end)

    # --- opening ------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, *, index_interval_bytes: int,
               created_ms: int, drop_behind_bytes: int = 0) -> Segment:
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            (Path(directory) / segment_file_name(base_offset, suffix)).unlink(missing_ok=True)
        segment = cls(directory, base_offset, index_interval_bytes=index_interval_bytes,
                      created_ms=created_ms, drop_behind_bytes=drop_behind_bytes)
        segment.txn_index.persist()
        segment._open_index_files(truncate=True)
        return segment

    @classmethod
    def open_trusted(cls, directory: Path, base_offset: int, *, index_interval_bytes: int,
                     created_ms: int, drop_behind_bytes: int = 0) -> Segment:
        """A flushed segment (below the recovery point): indexes are loaded if they
        are sane, else rebuilt from batch headers; only the tail after the last
        index entry is scanned."""
        segment = cls(directory, base_offset, index_interval_bytes=index_interval_bytes,
                      created_ms=created_ms, drop_behind_bytes=drop_behind_bytes)
        if not segment._load_indexes():
            segment.rebuild(verify_crc=False)
            return segment
        start = segment._index_positions[-1] if segment._index_positions else 0
        segment._tail_complete = True   # the scan below tracks each batch from `start`
        try:
            for position, header in segment._scan(start):
                segment._track(header, position, index=False)
        except CorruptRecord:  # a flushed segment should not be torn; if it is, recover it
            segment.rebuild(verify_crc=True)
            return segment
        if segment.first_batch_max_timestamp is None and segment.size_bytes > 0:
            for _, header in segment._scan(0):
                segment.first_batch_max_timestamp = header.max_timestamp
                break
        segment._open_index_files(truncate=False)
        return segment

    @classmethod
    def open_recovering(cls, directory: Path, base_offset: int, *, index_interval_bytes: int,
                        created_ms: int, drop_behind_bytes: int = 0) -> tuple[Segment, int]:
        """A segment that may hold an unflushed tail: every batch is checked (framing
        and CRC), the file is cut before the first bad one, indexes are rebuilt.
        Returns the segment and the number of bytes cut."""
        segment = cls(directory, base_offset, index_interval_bytes=index_interval_bytes,
                      created_ms=created_ms, drop_behind_bytes=drop_behind_bytes)
        return segment, segment.rebuild(verify_crc=True)

    def rebuild(self, *, verify_crc: bool) -> int:
        """Re-derive every index and counter from the .log; cut it at the first batch
        that is torn or (with verify_crc) corrupt. Returns the bytes cut."""
        self._reset_tracking()
        valid_end = 0
        try:
            for position, header in self._scan(0, verify_crc=verify_crc):
                if header.base_offset < self.next_offset:
                    raise CorruptRecord(f"offsets go back at position {position}")
                self._track(header, position, index=True)
                valid_end = position + header.size_bytes
        except CorruptRecord:
            pass
        cut_bytes = self.size_bytes - valid_end
        if cut_bytes:
            os.ftruncate(self._fd, valid_end)
            self.size_bytes = valid_end
        self._open_index_files(truncate=True)
        self._write_all_index_entries()
        self.txn_index.truncate_to(self.next_offset)   # markers cut with the tail
        return cut_bytes

    def _reset_tracking(self) -> None:
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_max_timestamp = None
        self._index_offsets, self._index_positions = [], []
        self._time_timestamps, self._time_offsets = [], []
        self._bytes_since_index_entry = 0
        self._tail_positions, self._tail_last_offsets, self._tail_headers = [], [], []
        self._tail_complete = True    # from position 0: the first batch tracked starts the index

    def _load_indexes(self) -> bool:
        try:
            index_bytes = self.index_path.read_bytes()
            time_bytes = self.timeindex_path.read_bytes()
        except FileNotFoundError:
            return False
        if len(index_bytes) % OFFSET_INDEX_ENTRY.size or len(time_bytes) % TIME_INDEX_ENTRY.size:
            return False
        offsets, positions = [], []
        for relative, position in OFFSET_INDEX_ENTRY.iter_unpack(index_bytes):
            if (positions and (position <= positions[-1] or relative <= offsets[-1] - self.base_offset)) \
                    or position >= self.size_bytes or relative < 0:
                return False
            offsets.append(self.base_offset + relative)
            positions.append(position)
        timestamps, time_offsets = [], []
        for timestamp, relative in TIME_INDEX_ENTRY.iter_unpack(time_bytes):
            if (timestamps and timestamp <= timestamps[-1]) or relative < 0:
                return False
            timestamps.append(timestamp)
            time_offsets.append(self.base_offset + relative)
        self._reset_tracking()
        self._tail_complete = False   # the tail is not read yet (open_trusted scans it)
        self._index_offsets, self._index_positions = offsets, positions
        self._time_timestamps, self._time_offsets = timestamps, time_offsets
        if timestamps:
            self.max_timestamp, self.offset_of_max_timestamp = timestamps[-1], time_offsets[-1]
        return True

    def _open_index_files(self, *, truncate: bool) -> None:
        mode = "wb" if truncate else "ab"
        self._index_file = open(self.index_path, mode)
        self._timeindex_file = open(self.timeindex_path, mode)

    def _write_all_index_entries(self) -> None:
        self._index_file.write(b"".join(
            OFFSET_INDEX_ENTRY.pack(o - self.base_offset, p)
            for o, p in zip(self._index_offsets, self._index_positions)))
        self._timeindex_file.write(b"".join(
            TIME_INDEX_ENTRY.pack(t, o - self.base_offset)
            for t, o in zip(self._time_timestamps, self._time_offsets)))

    # --- appending ----------------------------------------------------------------

    def append(self, pieces: list, headers: list[BatchHeader]) -> None:
        """Write whole batches (as buffers `pieces`, concatenated in order; their
        `headers` carry the final offsets) at the end of the file."""
        position = self.size_bytes
        for start in range(0, len(pieces), IOV_MAX):
            chunk = pieces[start:start + IOV_MAX]
            expected = sum(len(p) for p in chunk)
            written = os.writev(self._fd, chunk)
            if written != expected:  # a short write: finish it byte for byte
                rest = b"".join(bytes(p) for p in chunk)[written:]
                while rest:
                    rest = rest[os.write(self._fd, rest):]
        for header in headers:
            self._track(header, position, index=True, write_index=True)
            position += header.size_bytes
        if self.drop_behind_bytes and self.size_bytes - self._drop_mark >= 2 * self.drop_behind_bytes:
            self._drop_behind()

    def _drop_behind(self) -> None:
        """Once per `drop_behind_bytes` appended: one advice (POSIX_FADV_DONTNEED)
        over what lies more than `drop_behind_bytes` behind the end and was not
        dropped yet. The kernel drops the clean pages (those the previous advice
        started writing back) and starts writeback of the dirty ones (the next
        advice drops them if their writeback has finished by then; with other I/O
        on the disk some may not have, and they stay until the kernel evicts
        them, as without the option). Advisory only: no byte of the file changes, reads of a
        dropped range come from the disk, nothing is flushed (durability is the
        log's: replication and the flush at roll and close)."""
        mark = self.size_bytes - self.drop_behind_bytes
        os.posix_fadvise(self._fd, self._drop_from, mark - self._drop_from, os.POSIX_FADV_DONTNEED)
        self._drop_from, self._drop_mark = self._drop_mark, mark

    def _track(self, header: BatchHeader, position: int, *, index: bool,
               write_index: bool = False) -> None:
        """Account for the batch at `position` (already in the file)."""
        if self.first_batch_max_timestamp is None:
            self.first_batch_max_timestamp = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        self.next_offset = header.next_offset
        self.size_bytes = max(self.size_bytes, position + header.size_bytes)
        if index and (self._bytes_since_index_entry > self.index_interval_bytes or not self._index_offsets):
            self._tail_positions, self._tail_last_offsets, self._tail_headers = [], [], []
            self._tail_complete = True
        if self._tail_complete:
            if len(self._tail_headers) < MAX_TAIL_BATCHES:
                self._tail_positions.append(position)
                self._tail_last_offsets.append(header.last_offset)
                self._tail_headers.append(header)
            else:
                self._tail_complete = False
        if not index:
            return
        if self._bytes_since_index_entry > self.index_interval_bytes or not self._index_offsets:
            self._index_offsets.append(header.base_offset)
            self._index_positions.append(position)
            if write_index:
                self._index_file.write(OFFSET_INDEX_ENTRY.pack(header.base_offset - self.base_offset, position))
            self._maybe_add_time_entry(write_index)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += header.size_bytes

    def _maybe_add_time_entry(self, write: bool) -> None:
        if self.max_timestamp == NO_TIMESTAMP:
            return
        if self._time_timestamps and self.max_timestamp <= self._time_timestamps[-1]:
            return
        self._time_timestamps.append(self.max_timestamp)
        self._time_offsets.append(self.offset_of_max_timestamp)
        if write:
            self._timeindex_file.write(TIME_INDEX_ENTRY.pack(
                self.max_timestamp, self.offset_of_max_timestamp - self.base_offset))

    @property
    def index_entry_count(self) -> int:
        return len(self._index_offsets)

    def relative_offset_fits(self, last_offset: int) -> bool:
        return last_offset - self.base_offset <= 2**31 - 1

    # --- reading ------------------------------------------------------------------

    def _scan(self, start_position: int, *, verify_crc: bool = False,
              chunk_bytes: int = SCAN_CHUNK_BYTES) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from `start_position`; CorruptRecord at a
        torn or (with verify_crc) corrupt batch. Reads `chunk_bytes` at a time."""
        position = start_position
        size = self.size_bytes
        buffer = b""
        buffer_start = position
        while position < size:
            offset_in_buffer = position - buffer_start
            if len(buffer) - offset_in_buffer < HEADER_SIZE:
                buffer = os.pread(self._fd, max(chunk_bytes, HEADER_SIZE), position)
                buffer_start, offset_in_buffer = position, 0
            header = unpack_header(buffer, offset_in_buffer)
            if position + header.size_bytes > size:
                raise CorruptRecord(f"batch at position {position} is torn")
            if verify_crc:
                if offset_in_buffer + header.size_bytes > len(buffer):
                    buffer = os.pread(self._fd, max(chunk_bytes, header.size_bytes), position)
                    buffer_start, offset_in_buffer = position, 0
                check_crc(buffer, offset_in_buffer, header)
            yield position, header
            position += header.size_bytes

    def batch_headers(self) -> Iterator[BatchHeader]:
        for _, header in self._scan(0):
            yield header

    def batches_with_markers(self, from_offset: int) -> Iterator[tuple[BatchHeader, EndTxnMarker | None]]:
        """(header, marker) of each batch whose last offset is >= `from_offset`: the
        marker of a control batch (its one record read), None for data. What
        producer state replays: headers, and markers."""
        found = self.find_batch(from_offset)
        if found is None:
            return
        for position, header in self._scan(found[0]):
            marker = None
            if header.is_control:
                marker = end_txn_marker(self.read_position_range(position, position + header.size_bytes), 0, header)
            yield header, marker

    def _position_floor(self, offset: int) -> int:
        slot = bisect.bisect_right(self._index_offsets, offset) - 1
        return self._index_positions[slot] if slot >= 0 else 0

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset is >= `offset`, or None."""
        if self._tail_complete and offset >= (self._index_offsets[-1] if self._index_offsets else 0):
            slot = bisect.bisect_left(self._tail_last_offsets, offset)
            if slot == len(self._tail_headers):
                return None
            return self._tail_positions[slot], self._tail_headers[slot]
        for position, header in self._scan(self._position_floor(offset), chunk_bytes=LOOKUP_CHUNK_BYTES):
            if header.last_offset >= offset:
                return position, header
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int | None) -> bytes | None:
        """Whole batches from the one holding `offset`, at most `max_bytes` unless the
        first batch alone is larger (it is then returned alone), none with a last
        offset >= `max_offset`. None if no batch here reaches `offset`; b"" if the
        first batch is held back by `max_offset`."""
        found = self.find_batch(offset)
        if found is None:
            return None
        start, first = found
        if max_offset is not None and first.last_offset >= max_offset:
            return b""
        want = min(max(max_bytes, first.size_bytes), self.size_bytes - start)
        data = os.pread(self._fd, want, start)
        end = first.size_bytes
        while end + HEADER_SIZE <= len(data):
            header = unpack_header(data, end)
            if end + header.size_bytes > len(data):
                break
            if max_offset is not None and header.last_offset >= max_offset:
                break
            end += header.size_bytes
        return data if end == len(data) else data[:end]

    def read_position_range(self, start: int, end: int) -> bytes:
        return os.pread(self._fd, end - start, start)

    def iter_batches_with_records(self) -> Iterator[tuple[BatchHeader, bytes, list]]:
        """(header, batch bytes, records) for every batch: compaction only."""
        data = os.pread(self._fd, self.size_bytes, 0)
        for position, header in iter_batches(data, verify_crc=True):
            batch = data[position:position + header.size_bytes]
            yield header, batch, decode_records(batch)

    def find_offset_for_timestamp(self, target_ms: int, min_offset: int) -> tuple[int, int, int] | None:
        """(offset, timestamp, its batch's leader epoch) of the first record at or
        after `min_offset` whose timestamp is >= `target_ms`, or None."""
        slot = bisect.bisect_left(self._time_timestamps, target_ms) - 1
        start_offset = max(min_offset, self._time_offsets[slot] if slot >= 0 else self.base_offset)
        found = self.find_batch(start_offset)
        if found is None:
            return None
        for position, header in self._scan(found[0]):
            if header.max_timestamp < target_ms or header.last_offset < min_offset:
                continue
            batch = self.read_position_range(position, position + header.size_bytes)
            for _, records in decode_batches(batch):
                for record in records:
                    if record.offset >= min_offset and record.timestamp_ms >= target_ms:
                        return record.offset, record.timestamp_ms, header.partition_leader_epoch
        return None

    def find_max_timestamp(self) -> tuple[int, int, int] | None:
        """(offset, timestamp, its batch's leader epoch) of the first record whose
        timestamp is the segment's largest, in the first batch that holds it
        (Kafka's offsetOfMaxTimestamp: under LogAppendTime, the batch's first
        record), or None in an empty segment."""
        found = self.find_batch(self.offset_of_max_timestamp) if self.size_bytes else None
        if found is None:
            return None
        _, header = found
        batch = self.read_position_range(found[0], found[0] + header.size_bytes)
        for _, records in decode_batches(batch):
            for record in records:
                if record.timestamp_ms == header.max_timestamp:
                    return record.offset, record.timestamp_ms, header.partition_leader_epoch
        return None

    # --- truncation, flushing, deletion -------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Cut from the batch that holds `offset` (its whole batch goes). Returns the
        segment's new next offset."""
        found = self.find_batch(offset)
        if found is None:
            return self.next_offset
        position, _ = found
        os.ftruncate(self._fd, position)
        self.size_bytes = position
        self._drop_from, self._drop_mark = min(self._drop_from, position), min(self._drop_mark, position)
        self._close_index_files()
        self.rebuild(verify_crc=False)   # cuts the transaction index too
        return self.next_offset

    def seal(self) -> None:
        """The segment stops being active: write its final time index entry, flush."""
        self._maybe_add_time_entry(write=True)
        self.flush()

    def flush(self) -> None:
        for f in (self._index_file, self._timeindex_file):
            if f is not None:
                f.flush()
                os.fsync(f.fileno())
        os.fsync(self._fd)
        self.txn_index.flush()

    def _close_index_files(self) -> None:
        for f in (self._index_file, self._timeindex_file):
            if f is not None:
                f.close()
        self._index_file = self._timeindex_file = None

    def close(self) -> None:
        self.flush()
        self._close_index_files()
        os.close(self._fd)
        self._fd = -1

    def delete(self, *, keep_txn_index: bool = False) -> None:
        """Remove the segment's files; `keep_txn_index`: all but its .txnindex (the
        cleaner swapping cleaned data in keeps the segment's aborted transactions)."""
        self._close_index_files()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        for path in (self.log_path, self.index_path, self.timeindex_path):
            path.unlink(missing_ok=True)
        if not keep_txn_index:
            self.txn_index.delete()
