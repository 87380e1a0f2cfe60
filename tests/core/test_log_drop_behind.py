"""log_drop_behind_bytes: a log asks the kernel to drop from the page cache what it
wrote more than that many bytes ago, and nothing else changes (core.segment).
Residency is read with mincore(2) over a mapping of the segment file."""

import ctypes
import mmap
import os

import pytest

from rafka.core.clock import FakeClock
from rafka.core.config import TopicConfig
from rafka.core.errors import InvalidConfig
from rafka.core.log import PartitionLog
from rafka.core.records import decode_records

from tests.core.helpers import batch

pytestmark = pytest.mark.core

PAGE = mmap.PAGESIZE
WINDOW = 64 << 10


def _filesystem_type(path) -> str:
    """The type of the filesystem holding `path` (the longest mount point above it)."""
    best, kind = "", ""
    with open("/proc/mounts") as mounts:
        for line in mounts:
            _, point, fs_type = line.split()[:3]
            if str(path).startswith(point) and len(point) > len(best):
                best, kind = point, fs_type
    return kind


def resident_pages(path) -> list[bool]:
    """Whether each page of the file at `path` is in the page cache (mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert address not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            pages = (size + PAGE - 1) // PAGE
            vector = ctypes.create_string_buffer(pages)
            assert libc.mincore(address, size, vector) == 0, os.strerror(ctypes.get_errno())
            return [byte & 1 == 1 for byte in vector.raw[:pages]]
        finally:
            libc.munmap(address, size)
    finally:
        os.close(fd)


@pytest.fixture
def log_dir(tmp_path):
    if _filesystem_type(tmp_path) == "tmpfs":
        pytest.skip("tmpfs pages are memory, never dropped: the advice does nothing there")
    return tmp_path


def _fill(log, byte_count: int, values: list) -> None:
    """Append 4 KiB records (incompressible) until the log holds `byte_count` bytes."""
    while log.active_segment.size_bytes < byte_count:
        value = os.urandom(4000)
        values.append(value)
        log.append_as_leader(batch(value), leader_epoch=0)


def _open(path, drop_behind_bytes: int) -> PartitionLog:
    return PartitionLog(path, TopicConfig.from_dict({}), FakeClock(), drop_behind_bytes=drop_behind_bytes)


@pytest.mark.parametrize("drop_behind_bytes", [0, WINDOW])
def test_drop_behind__pages_older_than_the_window_leave_the_cache_the_newest_stay(log_dir, drop_behind_bytes,
                                                                                monkeypatch):
    """Written-back pages the log advises about leave the cache; the newest window
    stays. Which pages are clean when advised is the kernel's timing (a dirty page
    is only sent to writeback, and with other I/O on the disk that can outlast the
    next advice): the test writes everything back first, and then asks about the
    pages the advice given after that covered."""
    from rafka.core import segment as segment_module
    advised = []
    real = os.posix_fadvise

    def recording(fd, offset, length, advice):
        advised.append((offset, length))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(segment_module.os, "posix_fadvise", recording)
    log = _open(log_dir, drop_behind_bytes)
    values = []
    _fill(log, 6 * WINDOW, values)
    log.flush()    # every page written back: clean pages are dropped at the next advice
    advised.clear()
    _fill(log, 8 * WINDOW + 1, values)
    size = log.active_segment.size_bytes
    resident = resident_pages(log.active_segment.log_path)
    newest = resident[(size - WINDOW) // PAGE + 1:]
    assert all(newest), "what was written within the window stays in the page cache"
    if drop_behind_bytes:
        flushed_and_advised = [resident[page] for offset, length in advised
                               for page in range(-(-offset // PAGE), min(offset + length, 6 * WINDOW) // PAGE)]
        assert len(flushed_and_advised) >= WINDOW // PAGE, f"the advice after the flush covered {advised}"
        assert not any(flushed_and_advised), \
            f"{sum(flushed_and_advised)} of {len(flushed_and_advised)} written-back pages advised about still cached"
    else:
        assert not advised
        flushed = resident[:(6 * WINDOW) // PAGE]
        assert all(flushed), "with 0 the log gives no advice: the kernel keeps the pages"
    # Advice only: every record reads back as written, the dropped ones from the disk.
    data = log.read(0, 64 << 20, None)
    assert [r.value for r in decode_records(data)] == values


def test_drop_behind__one_advice_per_window_appended_over_what_lies_behind_it(log_dir, monkeypatch):
    from rafka.core import segment as segment_module
    advised = []
    real = os.posix_fadvise

    def recording(fd, offset, length, advice):
        advised.append((offset, length, advice))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(segment_module.os, "posix_fadvise", recording)
    log = _open(log_dir, WINDOW)
    _fill(log, 2 * WINDOW - 4200, [])   # each record is ~4.1 KiB: stays below 2 windows
    assert advised == [], "nothing lies a window behind before 2 windows are written"
    _fill(log, 10 * WINDOW, [])
    assert all(advice == os.POSIX_FADV_DONTNEED for _, _, advice in advised)
    assert 7 <= len(advised) <= 9, advised
    # Each advice starts where the one before the last ended (its pages were under
    # writeback then) and ends a window behind the end: the ranges chain, none is skipped.
    ends = [offset + length for offset, length, _ in advised]
    assert advised[0][0] == 0
    assert [offset for offset, _, _ in advised[1:]] == [0] + ends[:-2]
    assert all(later - earlier >= WINDOW for earlier, later in zip(ends, ends[1:]))
    assert ends[-1] <= log.active_segment.size_bytes - WINDOW


def test_drop_behind__truncation_below_the_marks_restarts_them_at_the_new_end(log_dir, monkeypatch):
    log = _open(log_dir, WINDOW)
    _fill(log, 5 * WINDOW, [])
    segment = log.active_segment
    assert segment._drop_mark > 0
    log.truncate_to(3)   # a follower's truncation: the file is cut to 3 records
    assert segment._drop_mark <= segment.size_bytes and segment._drop_from <= segment.size_bytes
    _fill(log, 5 * WINDOW, [])   # advice goes on over the new bytes without error
    assert segment._drop_mark >= 3 * WINDOW


def test_drop_behind__a_negative_window_is_refused_and_nothing_is_made(tmp_path):
    directory = tmp_path / "topic-0"
    with pytest.raises(InvalidConfig):
        _open(directory, -1)
    assert not directory.exists()
