"""`rafka demo`: the end-to-end scenario on an embedded 3-node cluster.

Black Friday at a shop: orders stream into `orders` (3 partitions, RF 3, min ISR
2) with acks=all; a partition leader's replica actor is killed mid-stream; the
controller elects a new leader at the next epoch; the producer retries through
it; and a consumer reads back every acknowledged order exactly once. Each step
prints what an operator would look at, and each check prints ok or FAILED. Exits
non-zero if a check fails.
"""

from __future__ import annotations

import time

ORDERS_BEFORE_KILL = 3_000
ORDERS_AFTER_KILL = 3_000
CUSTOMERS = 50


class DemoCheckFailed(Exception):
    pass


def check(condition: bool, what: str) -> None:
    print(f"  [{'ok' if condition else 'FAILED'}] {what}")
    if not condition:
        raise DemoCheckFailed(what)


def wait_for(condition, timeout_s: float, what: str):
    """Poll `condition` until it holds; a failed check if it does not in time."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            check(False, f"{what} within {timeout_s:.0f} s")
        time.sleep(0.2)
    return value


def print_partitions(admin, topic: str) -> dict:
    described = admin.describe_topics([topic])[topic]
    print(f"  {'PARTITION':<10}{'LEADER':<8}{'EPOCH':<7}{'ISR':<12}{'LEO':<8}{'HW':<8}LEADER-NODE")
    for p in described["partitions"]:
        leo = p["log_end_offsets"].get(p["leader"])
        print(f"  {p['partition']:<10}{p['leader']:<8}{p['leader_epoch']:<7}{str(p['isr']):<12}"
              f"{str(leo):<8}{str(p['high_watermark']):<8}{(p['leader_node'] or '?')[:12]}")
    return described


def send_orders(producer, start: int, count: int) -> list:
    return [(b"order-%06d" % i, producer.send("orders", value=b"order-%06d" % i,
                                               key=b"customer-%02d" % (i % CUSTOMERS)))
            for i in range(start, start + count)]


def run_demo(nodes: int = 3) -> int:
    import ray

    import rafka
    from rafka.core.structs import TopicPartition

    started_s = time.monotonic()
    print(f"rafka demo: an embedded cluster of {nodes} broker nodes (plus the head node)")
    with rafka.local_cluster(nodes=nodes, replica_lag_time_max_ms=5_000, leader_ping_timeout_ms=1_000,
                             watch_interval_ms=200) as cluster:
        admin = cluster.admin()
        admin.create_topic("orders", partitions=3, replication_factor=3,
                           config={"min.insync.replicas": "2"})
        described = admin.describe_topics(["orders"])["orders"]
        check(all(len(set(p["replica_nodes"].values())) == 3 for p in described["partitions"]),
              "each partition's 3 replicas run on 3 distinct Ray nodes")

        producer = cluster.producer(acks="all", linger_ms=5)
        print(f"\n1. producing {ORDERS_BEFORE_KILL} orders with acks=all")
        first = send_orders(producer, 0, ORDERS_BEFORE_KILL)
        acked = {value: future.result(timeout=60) for value, future in first}
        before = print_partitions(admin, "orders")

        victim = before["partitions"][0]
        print(f"\n2. killing the leader of orders-0 (replica {victim['leader']}, epoch "
              f"{victim['leader_epoch']}) while {ORDERS_AFTER_KILL} more orders are sent")
        second = send_orders(producer, ORDERS_BEFORE_KILL, ORDERS_AFTER_KILL)
        ray.kill(cluster.replica("orders", 0, victim["leader"]), no_restart=False)
        acked.update({value: future.result(timeout=120) for value, future in second})
        producer.close()
        after = wait_for(lambda: (p := admin.describe_topics(["orders"])["orders"]["partitions"][0])[
            "leader_epoch"] > victim["leader_epoch"] and p["high_watermark"] is not None and p,
            60, "a new leader is elected")
        print(f"  orders-0: new leader replica {after['leader']} at epoch {after['leader_epoch']}, "
              f"ISR {after['isr']}")
        check(after["leader"] != victim["leader"] and after["leader_epoch"] == victim["leader_epoch"] + 1,
              "the controller elected another ISR member at epoch + 1")
        wait_for(lambda: len(admin.describe_topics(["orders"])["orders"]["partitions"][0]["isr"]) == 3,
                 60, "the restarted replica catching up and rejoining the ISR")
        check(True, f"the restarted replica {victim['leader']} caught up and rejoined the ISR")
        print_partitions(admin, "orders")

        print("\n3. reading every partition from the beginning up to its HW")
        partitions = [TopicPartition("orders", p) for p in range(3)]
        with cluster.consumer(auto_offset_reset="earliest", max_poll_records=5_000) as consumer:
            consumer.assign(partitions)
            ends = consumer.end_offsets(partitions)
            read: dict[bytes, list] = {}

            def drained() -> bool:
                for record in consumer.poll(timeout=0.5):
                    read.setdefault(record.value, []).append((record.partition, record.offset))
                return all(consumer.position(tp) >= ends[tp] for tp in partitions)
            wait_for(drained, 60, "the consumer reaching every HW")
        print(f"  read {sum(len(v) for v in read.values())} records; HWs "
              f"{ {tp.partition: ends[tp] for tp in partitions} }")
        check(all(value in read for value in acked), f"all {len(acked)} acknowledged orders were read")
        check(all(len(places) == 1 for places in read.values()), "no order was read twice")
        check(all(read[value] == [(meta.partition, meta.offset)] for value, meta in acked.items()),
              "each order sits at the partition and offset its acknowledgement named")
        keyed = {}
        for value, meta in acked.items():
            keyed.setdefault(b"customer-%02d" % (int(value[6:]) % CUSTOMERS), set()).add(meta.partition)
        check(all(len(parts) == 1 for parts in keyed.values()),
              "every customer's orders went to one partition (murmur2 of the key)")
    print(f"\ndemo passed in {time.monotonic() - started_s:.1f} s")
    return 0


def main() -> int:
    try:
        return run_demo()
    except DemoCheckFailed as failed:
        print(f"demo FAILED: {failed}")
        return 1
