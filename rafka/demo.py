"""`rafka demo`: the end-to-end scenario on an embedded 3-node cluster.

Black Friday at a shop: orders stream into `orders` (3 partitions, RF 3, min ISR
2) with acks=all; a partition leader's replica actor is killed mid-stream; the
controller elects a new leader at the next epoch; the producer retries through
it; and a consumer reads back every acknowledged order exactly once. Then the
`billing` group (3 member actors, one per broker node) bills the orders,
committing after each batch; one member actor is killed mid-stream, restarts,
rejoins, and the group rebalances and finishes from the committed offsets: every
order billed at least once, none skipped. Last, Spark (RayDP, executors on the
broker nodes) sums each customer's revenue over the orders below the HW, checked
against the acknowledged orders. Each step prints what an operator would look at,
and each check prints ok or FAILED. Exits non-zero if a check fails.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from rafka.quiet import Logs, quiet_logs

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
    return [(order_value(i), producer.send("orders", value=order_value(i), key=b"customer-%02d" % (i % CUSTOMERS)))
            for i in range(start, start + count)]


def order_value(i: int) -> bytes:
    """'order-<n>:<amount in cents>'."""
    return b"order-%06d:%d" % (i, 100 + (i * 37) % 9_900)


BILLING_BATCH = 100  # max_poll_records of a billing member: its uncommitted window


def recording_handler(directory: str, pause_s: float = 0.0):
    """A member actor's handler that records what it handled: one 'pid partition
    offset generation' line per record (the group generation the batch was polled
    in), appended to a file per process (what was written survives a kill), then a
    pause per batch (the demo's stands for a billing call; the tests' keeps a
    stream going while they strike)."""
    def handle(records) -> None:
        from rafka.actors.member import handling_generation
        generation = handling_generation()
        with open(os.path.join(directory, f"handled-{os.getpid()}.log"), "a") as out:
            out.write("".join(f"{os.getpid()} {r.partition} {r.offset} {generation}\n" for r in records))
        if pause_s:
            time.sleep(pause_s)
    return handle


def read_recorded(directory: str, *, with_generation: bool = False) -> list[tuple[int, ...]]:
    """(pid, partition, offset) of every record a recording_handler handled, and
    the generation it was handled in if asked (-1: none known)."""
    recorded = []
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as source:
            for line in source:
                if line.strip():
                    pid, partition, offset, generation = line.split()
                    found = (int(pid), int(partition), int(offset))
                    recorded.append(found + ((-1 if generation == "None" else int(generation)),)
                                    if with_generation else found)
    return recorded


def print_group_lag(admin, group: str) -> list[dict]:
    """kafka-consumer-groups --describe --group <group>."""
    from rafka.core.offset_reset import DESCRIBE_OFFSETS_HEADERS, format_table
    rows = admin.consumer_group_lag(group)
    table = format_table(DESCRIBE_OFFSETS_HEADERS, [
        (r["group"], r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"],
         (r["consumer_id"] or "-")[:30], r["host"], r["client_id"]) for r in rows])
    print("\n".join("  " + line for line in table.splitlines()))
    return rows


def run_billing(cluster, acked: dict) -> None:
    import ray

    admin = cluster.admin()
    total = sum(1 for _ in acked)
    billing_dir = tempfile.mkdtemp(prefix="rafka-billing-")
    try:
        print("\n4. the billing group: 3 member actors bill the orders, committing after each batch")
        bill = recording_handler(billing_dir, pause_s=0.1)   # the pause stands for a billing call
        group = cluster.run_consumer_group("billing", ["orders"], bill, members=3,
                                           max_poll_records=BILLING_BATCH, session_timeout_ms=3_000,
                                           heartbeat_interval_ms=300, fetch_max_wait_ms=100)

        def committed() -> int:
            return sum(r["current_offset"] or 0 for r in admin.consumer_group_lag("billing"))
        wait_for(lambda: committed() >= total // 4, 60, "a quarter of the orders billed")
        victim = next(d for d in group.describe() if d and d["assignment"])
        print(f"  mid-stream: member {victim['index']} (pid {victim['pid']}) owns "
              f"{', '.join(f'{t}-{p}' for t, p in victim['assignment'])}")
        print_group_lag(admin, "billing")
        print(f"  killing member actor {victim['index']}")
        ray.kill(group.members[victim["index"]], no_restart=False)
        wait_for(lambda: committed() == total, 120, "the group billing every order")
        described = group.describe()
        restarted = described[victim["index"]]
        print(f"  member {victim['index']} restarted as pid {restarted['pid']} and rejoined at generation "
              f"{restarted['generation']}")
        state = admin.describe_consumer_group("billing")
        check(restarted["pid"] != victim["pid"] and state["state"] == "Stable" and len(state["members"]) == 3,
              "the killed member actor restarted and rejoined: the group is Stable with 3 members again")
        rows = print_group_lag(admin, "billing")
        check(all(r["lag"] == 0 for r in rows), "LAG is 0 on every partition")
        final = group.stop()
        billed = read_recorded(billing_dir)
        by_partition: dict[int, list[int]] = {}
        for _, partition, offset in billed:
            by_partition.setdefault(partition, []).append(offset)
        check(all(set(by_partition.get(meta.partition, ())) >= {meta.offset} for meta in acked.values()),
              f"all {total} acknowledged orders were billed at least once")
        check(all(set(by_partition.get(r["partition"], ())) == set(range(r["current_offset"])) for r in rows),
              "no order was skipped: every offset below each committed offset was billed")
        duplicates = {p: sorted({o for o in offsets if offsets.count(o) > 1}) for p, offsets in by_partition.items()}
        victim_partitions = {p for _, p in victim["assignment"]}
        check(all(not d or (p in victim_partitions and len(d) <= BILLING_BATCH) for p, d in duplicates.items()),
              f"orders billed twice ({sum(map(len, duplicates.values()))}) come only from the killed member's "
              f"uncommitted batch (at most {BILLING_BATCH} per partition)")
        print(f"  since their last start the members committed {sum(d.get('handled', 0) for d in final)} records in "
              f"{sum(d.get('batches', 0) for d in final)} committed batches")
    finally:
        shutil.rmtree(billing_dir, ignore_errors=True)


def run_revenue(cluster, acked: dict) -> None:
    """Spark (RayDP executors on the broker nodes) sums each customer's revenue over
    the orders below the HW; the sums must equal those of the acknowledged orders."""
    from rafka.spark_bridge import executor_nodes, init_spark, read_topic, stop_spark

    print("\n5. Spark on the same Ray cluster: revenue per customer over the orders below the HW")
    started_s = time.monotonic()
    spark = init_spark(cluster, "revenue", num_executors=2, executor_cores=1, executor_memory="512m")
    try:
        print(f"  Spark started in {time.monotonic() - started_s:.1f} s, executors on "
              f"{len(executor_nodes(spark))} nodes")
        orders = read_topic(spark, "orders")
        print(f"  read ranges: {', '.join(f'orders-{r.partition} [{r.start}, {r.end})' for r in orders.offset_ranges)}")
        revenue = (orders.selectExpr("CAST(key AS STRING) AS customer",
                                     "CAST(split(CAST(value AS STRING), ':')[1] AS BIGINT) AS cents")
                   .groupBy("customer").sum("cents").collect())
        by_customer = {row["customer"]: row["sum(cents)"] for row in revenue}
        expected: dict[str, int] = {}
        for value in acked:
            number, cents = value.decode()[6:].split(":")
            customer = "customer-%02d" % (int(number) % CUSTOMERS)
            expected[customer] = expected.get(customer, 0) + int(cents)
        top = sorted(by_customer.items(), key=lambda kv: -kv[1])[:3]
        print("  top customers: " + ", ".join(f"{c} {v / 100:,.2f}" for c, v in top))
        check(by_customer == expected,
              f"Spark's revenue of all {len(expected)} customers equals the sums of the acknowledged orders")
    finally:
        stop_spark()


def run_demo(nodes: int = 3, logs: Logs | None = None) -> int:
    import ray

    import rafka
    from rafka.core.structs import TopicPartition

    started_s = time.monotonic()
    print(f"rafka demo: an embedded cluster of {nodes} broker nodes (plus the head node)")
    # Groups settle in a demo's time: a short initial rebalance delay, sessions from 1 s.
    with rafka.local_cluster(nodes=nodes, replica_lag_time_max_ms=5_000, leader_ping_timeout_ms=1_000,
                             watch_interval_ms=200, log_to_driver=logs is None or logs.log_to_driver,
                             coordinator_options={"group_initial_rebalance_delay_ms": 500,
                                                  "group_min_session_timeout_ms": 1_000}) as cluster:
        admin = cluster.admin()
        admin.create_topic("orders", partitions=3, replication_factor=3,
                           config={"min.insync.replicas": "2"})
        described = admin.describe_topics(["orders"])["orders"]
        check(all(len(set(p["replica_nodes"].values())) == 3 for p in described["partitions"]),
              "each partition's 3 replicas run on 3 distinct Ray nodes")

        producer = cluster.producer(acks="all", linger_ms=5)
        try:   # on a failure too: what it still holds fails, and it closes before the cluster stops
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
        finally:
            producer.close(timeout=10)
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
            keyed.setdefault(b"customer-%02d" % (int(value[6:12]) % CUSTOMERS), set()).add(meta.partition)
        check(all(len(parts) == 1 for parts in keyed.values()),
              "every customer's orders went to one partition (murmur2 of the key)")
        run_billing(cluster, acked)
        run_revenue(cluster, acked)
        where = logs.where() if logs is not None else None   # while Ray's session is known
    print(f"\ndemo passed in {time.monotonic() - started_s:.1f} s")
    if where:
        print(where)
    return 0


def main(verbose: bool = False) -> int:
    """Only the demo's own lines are printed; Ray's and Spark's go to a log file
    (rafka.quiet), whose place the last line names, unless `verbose`."""
    with quiet_logs(verbose, "demo") as logs:
        try:
            return run_demo(logs=logs)
        except DemoCheckFailed as failed:
            print(f"demo FAILED: {failed}")
            print(logs.where())
            return 1
