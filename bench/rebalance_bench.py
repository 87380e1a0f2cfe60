"""What a member joining costs a consumer group (issue 29): eager vs cooperative
vs KIP-848.

    flock /tmp/rafka-ray.lock python bench/rebalance_bench.py [--rounds 1] [--no-rafka-consumer]

A 1-broker `local_cluster` (this machine has 2 cores: one broker, the topic at
RF1, `__consumer_offsets` at RF1). One topic of 60 partitions; a producer writes
one record to every partition every `--interval-ms` (100 ms: 600 records/s).
For each protocol, a fresh group of 6 members, each polled by its own thread of
this process and started 1/6 of a heartbeat interval after the last (so their
heartbeats are not in step, as members started apart are not), reads the topic at its tail until every partition has been
consumed within the last second (steady); then a 7th member joins (t0). A
partition "stopped" when no member consumed any of its records for longer than
the stop gap at some point after t0: `--stop-gap-ms` (400 ms: four production
intervals), or 1.5 times the longest gap of any partition in the 5 s before t0
when that is longer (this 2-core machine's noise floor: 60 replica actors, 7
consumers and the producer share it); it is
"consumed again" at the end of its last such gap. The run ends once the joiner
consumes every partition it was given and every partition was consumed within
the last `--stop-gap-ms`, plus 3 s of watching (for a late stop). A watcher samples every 10 ms which partitions no member holds (between a
revocation and the next owner's assignment: their consumption stopped). Printed
per protocol:
  rebalance s  from t0 until every partition is consumed again: the latest of
               the first read after a partition's last span without an owner,
               the end of a read stop, and the joiner's first read of each of
               its partitions
  unowned      partitions some sample found without an owner (of 60)
  unowned s    the longest span one partition had no owner
  read stops   partitions with a read gap longer than the stop gap (of 60)
  longest s    the longest such gap
  steady s     the longest gap of any partition in the 5 s before t0
  joiner got   partitions the joiner ended with
Protocols: eager (librdkafka, classic protocol, range), cooperative-sticky
(librdkafka, classic, KIP-429: only what moves is revoked), KIP-848 (librdkafka,
group.protocol=consumer: the coordinator's uniform assignor, revoke before
assign), and KIP-848 with rafka's own Consumer (group_protocol="consumer").
The classic members heartbeat every second; the KIP-848 coordinator names a
1 s heartbeat interval too, so every member learns of the rebalance as fast.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # a checkout's rafka first

from tests.harness import wait_until  # noqa: E402  (after the path: tests.harness from a checkout)

TOPIC, PARTITIONS, MEMBERS = "rebalance-bench", 60, 6
HEARTBEAT_MS = 1_000
STEADY_TIMEOUT_S, SETTLE_TIMEOUT_S, WATCH_AFTER_S, STEADY_WINDOW_S = 90.0, 90.0, 3.0, 5.0


class Reads:
    """Each partition's read times (monotonic s), by any member; and who read them."""

    def __init__(self) -> None:
        self.times: dict[int, list[float]] = collections.defaultdict(list)
        self.by_member: dict[str, set[int]] = collections.defaultdict(set)
        self.first_read: dict[tuple[str, int], float] = {}

    def read(self, member: str, partition: int) -> None:
        now = time.monotonic()
        self.times[partition].append(now)   # list.append: atomic under the GIL
        if (member, partition) not in self.first_read:
            self.first_read[(member, partition)] = now

    def all_read_since(self, since: float) -> bool:
        return all(self.times[p] and self.times[p][-1] >= since for p in range(PARTITIONS))


class Member:
    """One member: its consumer polled by a thread of its own, which records every
    read and what the member owns after each poll. Subclasses make the consumer
    (`_consumer`) and name the partitions one poll read (`_read_partitions`)."""

    def __init__(self, bootstrap: str, group: str, name: str, protocol: str, reads: Reads) -> None:
        self.name, self.reads = name, reads
        self.consumer = self._consumer(bootstrap, group, name, protocol)
        self.consumer.subscribe([TOPIC])
        self.owned: set[int] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=name)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for partition in self._read_partitions():
                self.reads.read(self.name, partition)
            self.owned = {tp.partition for tp in self.consumer.assignment()}
        self.consumer.close()


class ConfluentMember(Member):
    def _consumer(self, bootstrap: str, group: str, name: str, protocol: str):
        from confluent_kafka import Consumer
        config = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                  "auto.offset.reset": "latest", "fetch.wait.max.ms": 100, "enable.auto.commit": True}
        if protocol == "kip848":
            config["group.protocol"] = "consumer"
        else:
            config.update({"session.timeout.ms": 10_000, "heartbeat.interval.ms": HEARTBEAT_MS,
                           "partition.assignment.strategy": "range" if protocol == "eager"
                           else "cooperative-sticky"})
        return Consumer(config)

    def _read_partitions(self) -> list[int]:
        message = self.consumer.poll(0.05)
        return [message.partition()] if message is not None and message.error() is None else []


class RafkaMember(Member):
    def _consumer(self, bootstrap: str, group: str, name: str, protocol: str):
        from rafka.client.consumer import Consumer
        return Consumer(bootstrap, group_id=group, client_id=name, group_protocol="consumer",
                        auto_offset_reset="latest", fetch_max_wait_ms=100)

    def _read_partitions(self) -> list[int]:
        return [record.partition for record in self.consumer.poll(timeout=0.05)]


def produce_forever(bootstrap: str, interval_s: float, stop: threading.Event) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1})
    next_s = time.monotonic()
    while not stop.is_set():
        for p in range(PARTITIONS):
            producer.produce(TOPIC, value=b"x" * 64, partition=p)
        producer.poll(0)
        next_s += interval_s
        stop.wait(max(0.0, next_s - time.monotonic()))
    producer.flush(10)


def one_round(bootstrap: str, protocol: str, member_class, group: str, stop_gap_s: float) -> dict:
    reads = Reads()
    members = []
    for i in range(MEMBERS):
        members.append(member_class(bootstrap, group, f"{protocol}-{i}", protocol, reads))
        time.sleep(HEARTBEAT_MS / 1000 / MEMBERS)
    try:
        wait_until(lambda: sorted(p for m in members for p in m.owned) == list(range(PARTITIONS))
                   and reads.all_read_since(time.monotonic() - 1.0), STEADY_TIMEOUT_S,
                   what=f"{protocol}: six members steady")
        time.sleep(STEADY_WINDOW_S)
        t0 = time.monotonic()
        steady_gap_s = max(max((b - a for a, b in zip(ts, ts[1:])), default=0.0)
                           for ts in ([t for t in reads.times[p] if t0 - STEADY_WINDOW_S <= t <= t0]
                                      for p in range(PARTITIONS)))
        stop_gap_s = max(stop_gap_s, 1.5 * steady_gap_s)
        watching = threading.Event()
        unowned: dict[int, list[list[float]]] = collections.defaultdict(list)   # partition -> [[from, to]]

        def watch_owners() -> None:
            """Every 10 ms: the partitions no member holds (their consumption stopped)."""
            while not watching.wait(0.01):
                now, held = time.monotonic(), {p for m in list(members) for p in m.owned}
                for p in range(PARTITIONS):
                    spans = unowned[p]
                    if p not in held and not (spans and spans[-1][1] is None):
                        spans.append([now, None])
                    elif p in held and spans and spans[-1][1] is None:
                        spans[-1][1] = now
        watcher = threading.Thread(target=watch_owners, daemon=True)
        watcher.start()
        joiner = member_class(bootstrap, group, f"{protocol}-joiner", protocol, reads)
        members.append(joiner)

        def settled() -> bool:
            now = time.monotonic()
            owned = sorted(p for m in members for p in m.owned)
            return (joiner.owned and owned == list(range(PARTITIONS))
                    and all((joiner.name, p) in reads.first_read for p in joiner.owned)
                    and reads.all_read_since(now - stop_gap_s))
        wait_until(settled, SETTLE_TIMEOUT_S, what=f"{protocol}: the joiner's rebalance settled")
        time.sleep(WATCH_AFTER_S)
        end = time.monotonic()
        watching.set()
        watcher.join(5)
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.thread.join(30)
    resumed_at, stops = {}, {}
    for p in range(PARTITIONS):
        times = [t0] + [t for t in reads.times[p] if t0 <= t <= end] + [end]
        gaps = [(b - a, b) for a, b in zip(times, times[1:]) if b - a > stop_gap_s]
        if gaps:
            stops[p] = max(g for g, _ in gaps)
            resumed_at[p] = max(b for _, b in gaps)
    joined_reads = [reads.first_read[(joiner.name, p)] for p in joiner.owned]
    unowned = {p: spans for p, spans in unowned.items() if spans}
    owned_again = {}   # partition -> its first read after its last span without an owner
    for p, spans in unowned.items():
        back = spans[-1][1] if spans[-1][1] is not None else end
        owned_again[p] = next((t for t in reads.times[p] if t >= back), end)
    done = max([*resumed_at.values(), *joined_reads, *owned_again.values()])
    longest_unowned = max((b - a for spans in unowned.values() for a, b in spans if b is not None), default=0.0)
    return {"protocol": protocol, "rebalance_s": done - t0, "unowned": len(unowned),
            "longest_unowned_s": longest_unowned, "stopped": len(stops),
            "longest_s": max(stops.values(), default=0.0), "joiner": len(joiner.owned), "steady_s": steady_gap_s,
            "stop_gap_s": stop_gap_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval-ms", type=int, default=100)
    parser.add_argument("--stop-gap-ms", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--no-rafka-consumer", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")

    import rafka
    rows = []
    runs = [("eager", ConfluentMember, "librdkafka, range"),
            ("cooperative", ConfluentMember, "librdkafka, cooperative-sticky"),
            ("kip848", ConfluentMember, "librdkafka, group.protocol=consumer")]
    if not args.no_rafka_consumer:
        runs.append(("kip848", RafkaMember, "rafka Consumer, group_protocol=consumer"))
    with rafka.local_cluster(nodes=1, coordinator_options={"group_initial_rebalance_delay_ms": 0,
                                                           "group_consumer_heartbeat_interval_ms": HEARTBEAT_MS,
                                                           "group_consumer_session_timeout_ms": 10_000}) as cluster:
        started = time.monotonic()
        cluster.admin().create_topic(TOPIC, partitions=PARTITIONS, replication_factor=1)
        print(f"topic of {PARTITIONS} partitions online in {time.monotonic() - started:.1f} s", flush=True)
        stop = threading.Event()
        producer = threading.Thread(target=produce_forever, args=(cluster.bootstrap_servers,
                                                                   args.interval_ms / 1000, stop), daemon=True)
        producer.start()
        try:
            for round_index in range(args.rounds):
                for i, (protocol, member_class, client) in enumerate(runs):
                    row = one_round(cluster.bootstrap_servers, protocol, member_class,
                                    f"bench-{protocol}-{i}-{round_index}", args.stop_gap_ms / 1000)
                    row["client"] = client
                    rows.append(row)
                    print(f"  {client}: {row}", flush=True)
        finally:
            stop.set()
            producer.join(30)
    print()
    print(f"A 7th member joins a group of {MEMBERS} over {PARTITIONS} partitions (a stop: no read of a partition "
          f"for longer than the row's stop gap: {args.stop_gap_ms} ms or 1.5 x the steady gap)")
    header = (f"{'protocol':<13}{'client':<42}{'rebalance s':>12}{'unowned':>9}{'unowned s':>11}"
              f"{'read stops':>12}{'longest s':>11}{'steady s':>10}{'stop gap s':>12}{'joiner got':>12}")
    print(header)
    print("-" * len(header))
    for row in rows:
        print(f"{row['protocol']:<13}{row['client']:<42}{row['rebalance_s']:>12.2f}{row['unowned']:>9}"
              f"{row['longest_unowned_s']:>11.2f}{row['stopped']:>12}"
              f"{row['longest_s']:>11.2f}{row['steady_s']:>10.2f}{row['stop_gap_s']:>12.2f}{row['joiner']:>12}")


if __name__ == "__main__":
    main()
