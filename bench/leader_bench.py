"""The leader's Python work per sync acks=all R3 produce, in this process, with no
sockets and no Ray: the same Dispatcher, handlers, HostedPartition and core
PartitionReplica an actor runs, on uvloop.

    bash scripts/run.sh python bench/leader_bench.py [--ops 4000] [--profile]

One op is what a leader handles per record sent one at a time: a Produce v9
(acks=all) that wakes both followers' parked Fetch v12, their answers, and both
followers' next fetches (which move the HW, answer the produce and park again).
Frames are built before the clock starts. Prints us per op (the best of
`--rounds`); with --profile, cProfile's top functions. No target: the sync p50 of
replication_bench is this plus two followers, the producer, the kernel and the
scheduler. Stable where the cluster benchmarks are not (no processes to
schedule), so it is the one to compare code by.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pathlib
import pstats
import tempfile
import time

import uvloop

from rafka.core.clock import SystemClock
from rafka.core.config import TopicConfig
from rafka.core.records import RecordInput, encode_batch
from rafka.core.replica import PartitionReplica
from rafka.protocol import fetching, producing
from rafka.protocol.dispatch import Dispatcher
from rafka.protocol.framing import pack_request_header
from rafka.protocol.hosted_partition import HostedPartition
from rafka.protocol.hot_writers import body_pieces
from rafka.protocol.node_table import node_table

TOPIC = "bench"


def frame(body, correlation_id: int = 1) -> bytes:
    """A request frame as the server hands it to dispatch (no size prefix)."""
    header = pack_request_header(header_version=body.__header_schema__.__version__, api_key=body.__api_key__,
                                 api_version=body.__version__, correlation_id=correlation_id, client_id="bench")
    return header + b"".join(body_pieces(body))


class OnePartition:
    def __init__(self, hosted: HostedPartition) -> None:
        self.hosted = hosted

    def image(self):
        return None

    def endpoint(self, topic: str, partition: int):
        return self.hosted if (topic, partition) == (TOPIC, 0) else None


async def measure(ops: int, rounds: int, profile: bool) -> float:
    directory = pathlib.Path(tempfile.mkdtemp(prefix="rafka-leader-bench-"))
    replica = PartitionReplica(topic=TOPIC, partition=0, replica_id=0, directory=directory / f"{TOPIC}-0",
                               config=TopicConfig.from_dict({"min.insync.replicas": 2}), clock=SystemClock(),
                               replica_lag_time_max_ms=30_000)
    replica.become_leader(leader_epoch=0, replicas=[0, 1, 2], isr=[0, 1, 2], partition_epoch=0)

    async def producer_id() -> int:
        return 0
    dispatcher = Dispatcher(node_table(image=lambda: None, allocate_producer_id=producer_id,
                                       partitions=OnePartition(HostedPartition(lambda: replica))))
    batch = encode_batch([RecordInput(b"x" * 100, None, int(time.time() * 1000), ())], producer_id=-1,
                         producer_epoch=-1, base_sequence=-1)
    produce = frame(producing.produce_request(topic=TOPIC, partition=0, records=batch, acks=-1, timeout_ms=30_000))
    total = ops * rounds + 500
    fetches = {(follower, offset): frame(fetching.fetch_request(
        topic=TOPIC, partition=0, replica_id=follower, fetch_offset=offset, leader_epoch=0,
        last_fetched_epoch=0 if offset else -1, log_start_offset=0, max_bytes=1 << 20, max_wait_ms=500))
        for follower in (1, 2) for offset in range(total + 1)}
    loop = asyncio.get_running_loop()
    log_end_offset = 0
    parked = [loop.create_task(dispatcher.dispatch(fetches[f, 0])) for f in (1, 2)]
    await asyncio.sleep(0)

    async def op() -> None:
        nonlocal parked, log_end_offset
        answered = loop.create_task(dispatcher.dispatch(produce))
        await asyncio.gather(*parked)          # woken by the append, answered with the batch
        log_end_offset += 1
        parked = [loop.create_task(dispatcher.dispatch(fetches[f, log_end_offset])) for f in (1, 2)]
        await answered                         # the second follower's fetch moved the HW

    for _ in range(500):
        await op()
    best = float("inf")
    profiler = cProfile.Profile() if profile else None
    for _ in range(rounds):
        if profiler:
            profiler.enable()
        started = time.perf_counter()
        for _ in range(ops):
            await op()
        best = min(best, (time.perf_counter() - started) / ops)
        if profiler:
            profiler.disable()
    for task in parked:
        task.cancel()
    replica.close()
    if profiler:
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(25)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=4_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    best_s = uvloop.run(measure(args.ops, args.rounds, args.profile))
    print(f"\nleader work per sync acks=all R3 op (a produce, two follower fetches answered and two parked, in-process): {best_s * 1e6:.1f} us "
          f"(best of {args.rounds} rounds of {args.ops:,})")


if __name__ == "__main__":
    main()
