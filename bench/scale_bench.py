"""What a partition costs (issue 27): memory and idle CPU of replica actors beside
bare Ray actors, and how long a topic takes to come online, as partitions grow.

    flock /tmp/rafka-ray.lock python bench/scale_bench.py [--partitions 4 16] [--idle-s 10] [--rate-only]

A 3-broker `local_cluster`. For each count N: a topic of N partitions at RF3
(min.insync.replicas 2, as wire_bench's and replication_bench's) is created and
left at rest, then, in the same run,
  * replica USS / RSS: the mean over the topic's 3N replica actors' processes
    (psutil's memory_full_info: USS is what killing the process would free);
  * bare USS / RSS: the same for 3N bare Ray actors (an actor class with one
    method that imports nothing: Ray's own floor), spread over the broker nodes
    as replicas are, started just before the topic and stopped (as many bare
    actors beside 192 replicas would not fit in memory);
  * idle CPU: every rafka actor process (controller, coordinators, every
    replica) over `--idle-s` at rest, in % of one core, beside as many bare
    actors over the same time;
  * create 12: the time for a 12-partition RF3 topic to have a leader in every
    partition (CreateTopics through the controller, which waits for leaders),
    with the controller's pool of idle replica actors full (`--pool`, per broker:
    12 by default, what a 12-partition RF3 topic takes on 3 brokers; the idle
    shells are rafka actors, counted in idle CPU and beside bare actors);
  * Kafka nodes named by a Metadata answer, and TCP connections between the rafka
    actor processes (one end listening in another rafka process);
  * librdkafka threads: one confluent-kafka producer after it sent one record to
    every partition of the topic (acks=all), threads of this process added by it;
    the records it had acked, read back by a librdkafka consumer group.
  * aggregate rate: 1 KiB records, acks=all, published for `--rate-s` round-robin
    over the N partitions, counting acked records only: librdkafka
    (wire_bench.librdkafka_publish, in a process of its own), then rafka's
    Producer (replication_bench.publish, its defaults) from this driver, with the
    CPU the leaders, the followers, this driver and the whole machine took
    meanwhile, in % of one core. The 1-partition row, when counted, is what the others are compared with
    (issue 27: the aggregate over 30 partitions at least the one-partition rate).
Both topics are deleted before the next count. `--rate-only` measures the rate
alone; `--modules` also prints the modules a replica process holds that a bare
actor's does not; `--profile` py-spies partition 0's leader, a follower and this
driver during rafka's publish.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # a checkout's rafka first

from replication_bench import publish, quiesce   # bench/ is the script's directory
from spy import report
from wire_bench import in_own_process, librdkafka_publish, sampled, wait_for_wire

MiB = 1 << 20
RATE_RECORD_BYTES = 1024


def _pid_of(handle) -> int:
    import ray
    return ray.get(handle.__ray_call__.remote(lambda _self: os.getpid()))


def rafka_actor_pids(cluster=None, topic: str | None = None) -> dict[str, int]:
    """name -> pid of every named rafka actor (the pool's idle replica actors too),
    or of one topic's replicas (their actors as the controller's metadata names them)."""
    import ray

    from rafka.core.actor_names import NAMESPACE
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == NAMESPACE]
    if topic is not None:
        partitions = cluster.admin().describe_topics([topic])[topic]["partitions"]
        names = [actor for p in partitions for actor in p["actors"].values()]
    handles = {n: ray.get_actor(n, namespace=NAMESPACE) for n in names}
    refs = {n: h.__ray_call__.remote(lambda _self: os.getpid()) for n, h in handles.items()}
    return {n: ray.get(ref) for n, ref in refs.items()}


def wait_for_full_pool(cluster, timeout_s: float = 300.0) -> None:
    """Until every broker's pool of idle replica actors is full and answered (the
    measures at rest and the creation time are of a cluster whose pool is made)."""
    import ray
    deadline_s = time.monotonic() + timeout_s
    while time.monotonic() < deadline_s:
        pool = ray.get(cluster.controller.replica_pool.remote())
        if all(len(ready) >= pool["size_per_broker"] for ready in pool["ready"].values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the replica pool was not full in {timeout_s}s: {pool}")


def memory_mib(pids) -> tuple[float, float]:
    """(mean USS, mean RSS) in MiB over the processes."""
    import psutil
    infos = [psutil.Process(pid).memory_full_info() for pid in pids]
    return statistics.mean(i.uss for i in infos) / MiB, statistics.mean(i.rss for i in infos) / MiB


@contextlib.contextmanager
def cpu_percent_while(pids):
    """Each process's CPU time while the body runs, in % of one core: the list
    yielded is filled when the body ends."""
    import psutil
    processes = [psutil.Process(pid) for pid in pids]
    shares: list[float] = []
    before = [sum(p.cpu_times()[:2]) for p in processes]
    started_s = time.monotonic()
    yield shares
    after = [sum(p.cpu_times()[:2]) for p in processes]
    elapsed_s = time.monotonic() - started_s
    shares.extend(100 * (a - b) / elapsed_s for a, b in zip(after, before))


@contextlib.contextmanager
def machine_cpu_percent_while():
    """The whole machine's busy CPU time while the body runs (every process, this
    and other sessions' too), in % of one core: a one-element list once the body ends."""
    import psutil
    share: list[float] = []
    before = psutil.cpu_times()
    yield share
    after = psutil.cpu_times()
    total_s = sum(after) - sum(before)
    idle_s = (after.idle + after.iowait) - (before.idle + before.iowait)
    share.append(100 * psutil.cpu_count() * (total_s - idle_s) / total_s)


def idle_cpu_percent(pids, seconds: float) -> list[float]:
    """Each process's CPU time over `seconds`, in % of one core."""
    with cpu_percent_while(pids) as shares:
        time.sleep(seconds)
    return shares


def connections_between(pids) -> int:
    """Established TCP connections from one of the processes to a port another listens on."""
    import psutil
    listening, established = set(), []
    for pid in pids:
        for c in psutil.Process(pid).net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN:
                listening.add(c.laddr.port)
            elif c.status == psutil.CONN_ESTABLISHED and c.raddr:
                established.append(c.raddr.port)
    return sum(1 for port in established if port in listening)


class Bare:
    """Ray's floor: one method, no imports."""

    def pid(self):
        return os.getpid()


def start_bare(count: int):
    import ray

    from rafka.placement.brokers import BROKER_RESOURCE
    actor = ray.remote(Bare).options(num_cpus=0, resources={BROKER_RESOURCE: 0.001}, scheduling_strategy="SPREAD")
    handles = [actor.remote() for _ in range(count)]
    return handles, ray.get([h.pid.remote() for h in handles])


def _module_names(_self) -> list[str]:
    import sys as s
    return sorted(s.modules)


def metadata_nodes(bootstrap: str) -> int:
    import asyncio

    from rafka.protocol.cluster_requests import metadata_request
    from rafka.protocol.connection import Connection
    host, port = bootstrap.split(",")[0].rsplit(":", 1)   # any broker: they answer alike

    async def ask():
        connection = await Connection.open(host, int(port), client_id="scale-bench")
        try:
            return len((await connection.request(metadata_request(None))).brokers)
        finally:
            await connection.close()
    return asyncio.run(ask())


def producer_threads(bootstrap: str, topic: str, partitions: int) -> tuple[int, int]:
    """(threads one librdkafka producer adds to this process once it has sent to
    every partition, records acked: one per partition, acks=all)."""
    import psutil
    from confluent_kafka import Producer
    before = psutil.Process().num_threads()
    acked = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for p in range(partitions):
        producer.produce(topic, value=b"x", partition=p,
                         on_delivery=lambda error, message: error is None and acked.append(message.partition()))
    producer.flush(30)
    threads = psutil.Process().num_threads() - before
    del producer
    return threads, len(acked)


def read_back_by_group(bootstrap: str, topic: str, records: int, timeout_s: float = 60.0) -> int:
    """Records a librdkafka consumer group (one member) reads from the topic's
    start, up to `records` (what was acked) or the timeout."""
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"scale-read-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(seen) < records and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                seen.add((message.partition(), message.offset()))
    finally:
        consumer.close()
    return len(seen)


def wait_until_at_rest(cluster, topic: str, quiet_s: float, timeout_s: float = 600.0) -> float:
    """Until every partition of the topic has its whole ISR and the controller's
    metadata has not changed for `quiet_s` (no endpoint registered, no ISR change:
    the creation's churn is over); seconds waited."""
    import ray

    from rafka.core.actor_names import CONTROLLER_NAME, NAMESPACE
    controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    started_s = time.monotonic()
    version, since_s = None, time.monotonic()
    while time.monotonic() - started_s < timeout_s:
        now_version = ray.get(controller.cluster_image.remote()).version
        if now_version != version:
            version, since_s = now_version, time.monotonic()
        partitions = cluster.admin().describe_topics([topic])[topic]["partitions"]
        if all(len(p["isr"]) == len(p["replicas"]) for p in partitions) and time.monotonic() - since_s >= quiet_s:
            return time.monotonic() - started_s
        time.sleep(1.0)
    raise TimeoutError(f"{topic} never came to rest within {timeout_s:.0f}s")


def leader_and_follower_pids(cluster, topic: str, timeout_s: float = 60.0) -> tuple[list[int], list[int]]:
    """The topic's leaders' and followers' pids, once every partition has a leader
    (a partition the watch loop found unanswering on a saturated machine is offline
    until its next round): each offline partition is printed, and waited for."""
    pids = rafka_actor_pids(cluster, topic)
    deadline_s = time.monotonic() + timeout_s
    while True:
        partitions = cluster.admin().describe_topics([topic])[topic]["partitions"]
        offline = [p["partition"] for p in partitions if p["leader"] < 0]
        if not offline:
            break
        print(f"{topic}: partitions {offline} have no leader", flush=True)
        if time.monotonic() > deadline_s:
            raise TimeoutError(f"{topic}: partitions {offline} had no leader for {timeout_s:.0f}s")
        time.sleep(1.0)
    leaders = {p["actors"][p["leader"]] for p in partitions}
    return [pid for n, pid in pids.items() if n in leaders], [pid for n, pid in pids.items() if n not in leaders]


def follower_fetches(cluster, topic: str) -> tuple[int, int]:
    """(fetch answers that brought records, bytes they brought) summed over the
    topic's replicas since their processes started (the actors' describe)."""
    import ray

    from rafka.core.actor_names import NAMESPACE
    partitions = cluster.admin().describe_topics([topic])[topic]["partitions"]
    handles = [ray.get_actor(actor, namespace=NAMESPACE) for p in partitions for actor in p["actors"].values()]
    described = ray.get([h.describe.remote() for h in handles])
    return (sum(d.get("fetches_with_records", 0) for d in described),
            sum(d.get("fetched_bytes", 0) for d in described))


def aggregate_rates(cluster, topic: str, partitions: int, seconds: float, *, librdkafka: bool,
                    profile: bool) -> tuple[float | None, float, float, float, float, float, float, float, float, list]:
    """(librdkafka acked records/s or None, rafka's acked records/s, CPU % of the
    leaders, of the followers, of the brokers' network processes, of this driver
    and of the whole machine during rafka's publish, the followers' fetch round
    trips that brought records per second and KiB per such round trip during it,
    samplers)."""
    wait_for_wire(cluster, topic)
    rdk_rate = None
    if librdkafka:
        quiesce()
        acked, elapsed_s = in_own_process(librdkafka_publish, cluster.bootstrap_servers, topic, RATE_RECORD_BYTES,
                                          seconds, partitions)
        rdk_rate = acked / elapsed_s
    leader_pids, follower_pids = leader_and_follower_pids(cluster, topic)
    from rafka.core.actor_names import BROKER_ACTOR_PREFIX
    broker_pids = [pid for name, pid in rafka_actor_pids().items() if name.startswith(BROKER_ACTOR_PREFIX)]
    quiesce()
    fetches_before, fetched_before = follower_fetches(cluster, topic)
    with (cpu_percent_while(leader_pids) as leader_cpu, cpu_percent_while(follower_pids) as follower_cpu,
          cpu_percent_while(broker_pids) as broker_cpu,
          cpu_percent_while([os.getpid()]) as driver_cpu, machine_cpu_percent_while() as machine_cpu,
          sampled(profile, cluster, topic, "rafka") as samplers):
        acked, elapsed_s = publish(cluster, topic, RATE_RECORD_BYTES, seconds, partitions=partitions)
    fetches_after, fetched_after = follower_fetches(cluster, topic)   # after the flush: every ack replicated
    fetches = fetches_after - fetches_before
    return (rdk_rate, acked / elapsed_s, sum(leader_cpu), sum(follower_cpu), sum(broker_cpu), sum(driver_cpu),
            machine_cpu[0], fetches / elapsed_s, (fetched_after - fetched_before) / 1024 / max(1, fetches), samplers)


def print_rates(rate_rows, seconds: float, replication_factor: int = 3) -> None:
    """One row per partition count; `x 1p` is the rate over the 1-partition row's."""
    one = next((row for row in rate_rows if row[0] == 1), None)

    def times_one(rate, column: int) -> str:
        return "-" if rate is None or one is None or one[column] is None else f"{rate / one[column]:.2f}"
    print(f"\naggregate acks=all rate, {RATE_RECORD_BYTES} B records round-robin over every partition, "
          f"RF{replication_factor}, min ISR {min(2, replication_factor)}, {seconds:g} s each, {os.cpu_count()} cores")
    print(f"{'partitions':>10}{'rdk agg rec/s':>15}{'x 1p':>6}{'rafka agg rec/s':>17}{'x 1p':>6}{'rafka MB/s':>11}"
          f"{'leaders CPU%':>13}{'followers CPU%':>15}{'brokers CPU%':>13}{'driver CPU%':>12}{'machine CPU%':>13}"
          f"{'fetches/s':>10}{'KiB/fetch':>10}")
    for (count, rdk_rate, rafka_rate, leader_cpu, follower_cpu, broker_cpu, driver_cpu, machine_cpu, fetch_rate,
         fetch_kib) in rate_rows:
        print(f"{count:>10}{f'{rdk_rate:,.0f}' if rdk_rate is not None else '-':>15}{times_one(rdk_rate, 1):>6}"
              f"{rafka_rate:>17,.0f}{times_one(rafka_rate, 2):>6}{rafka_rate * RATE_RECORD_BYTES / 1e6:>11.1f}"
              f"{leader_cpu:>13.0f}{follower_cpu:>15.0f}{broker_cpu:>13.0f}{driver_cpu:>12.0f}{machine_cpu:>13.0f}"
              f"{fetch_rate:>10,.0f}{fetch_kib:>10.1f}")
    print("x 1p: over the 1-partition row; CPU%: during rafka's publish, % of one core, summed over the "
          "partitions' leaders, their followers, the brokers' network processes, this driver (rafka's Producer), "
          "and every process on the machine; fetches/s: the followers' fetch answers that brought records, "
          "per second of rafka's publish, and the KiB each brought")
    if one is None:
        return
    for count, rdk_rate, rafka_rate, *_ in rate_rows:
        if count == 1:
            continue
        for client, rate, base in (("librdkafka", rdk_rate, one[1]), ("rafka", rafka_rate, one[2])):
            if rate is not None and base is not None:
                print(f"{client}: {count} partitions' aggregate {rate:,.0f} rec/s >= the 1-partition "
                      f"{base:,.0f} rec/s: {'yes' if rate >= base else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--idle-s", type=float, default=10.0, help="how long CPU is measured at rest")
    parser.add_argument("--settle-s", type=float, default=5.0, help="rest before measuring")
    parser.add_argument("--rate-s", type=float, default=5.0,
                        help="how long each client publishes for the aggregate rate")
    parser.add_argument("--modules", action="store_true", help="print the modules a replica adds to a bare actor")
    parser.add_argument("--no-librdkafka", action="store_true")
    parser.add_argument("--replication-factor", type=int, default=3, choices=(1, 2, 3),
                        help="of the measured topic (1 separates replication's cost from the processes')")
    parser.add_argument("--profile", action="store_true", help="py-spy partition 0's leader during rafka's publish")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--only-idle", action="store_true",
                      help="memory and idle CPU only (no creation, no producer, no rate)")
    only.add_argument("--rate-only", action="store_true", help="the aggregate rate only (no idle, no creation)")
    parser.add_argument("--controller", nargs="*", default=[], metavar="OPTION=MS",
                        help="controller options, e.g. watch_interval_ms=1000")
    parser.add_argument("--creations", type=int, default=3,
                        help="12-partition topics created one after another; create12 is their median")
    parser.add_argument("--pool", type=int, default=12,
                        help="idle replica actors per broker (the controller's replica_pool_size)")
    args = parser.parse_args()

    import ray

    import rafka

    rows, rate_rows, profiles = [], [], []
    controller_options = {"replica_pool_size": args.pool,
                          **{k: int(v) for k, v in (o.split("=", 1) for o in args.controller)}}
    with rafka.local_cluster(nodes=3, log_to_driver=False, **controller_options) as cluster:
        admin = cluster.admin()
        for count in args.partitions:
            topic = f"scale-{count}"
            if not args.rate_only:
                # Ray's floor first, as many bare actors as rafka will run, then gone:
                # both at once would not fit in memory at 64 partitions (~400 processes).
                wait_for_full_pool(cluster)   # as many as every rafka actor, the pool's idle ones too
                bare, bare_pids = start_bare(len(rafka_actor_pids()) + 3 * count)
                time.sleep(args.settle_s)
                bare_uss, bare_rss = memory_mib(bare_pids[:3 * count])
                bare_cpu = sum(idle_cpu_percent(bare_pids, args.idle_s))
                bare_modules = set(ray.get(bare[0].__ray_call__.remote(_module_names)))
                for handle in bare:
                    ray.kill(handle)
            admin.create_topic(topic, partitions=count, replication_factor=args.replication_factor,
                               config={"min.insync.replicas": str(min(2, args.replication_factor))})
            if not args.rate_only:
                # the pool refills after the creation (new processes: not at rest), then
                # the creation's churn ends (endpoints registered, images pushed, first
                # fetches), then the idle followers' long polls lengthen
                wait_for_full_pool(cluster)
                wait_until_at_rest(cluster, topic, quiet_s=args.settle_s)
                time.sleep(args.settle_s)
                replicas = rafka_actor_pids(cluster, topic)
                every = rafka_actor_pids()
                uss, rss = memory_mib(replicas.values())
                cpu_by_actor = dict(zip(every, idle_cpu_percent(every.values(), args.idle_s)))
                cpu = sum(cpu_by_actor.values())
                controller_cpu = cpu_by_actor.get("controller", 0.0)
                print_idle_by_kind(cluster, topic, cpu_by_actor, bare_cpu / len(bare_pids))
                connections = connections_between(every.values())
                nodes = metadata_nodes(cluster.bootstrap_servers)
                if args.modules:
                    replica = ray.get_actor(next(iter(replicas)), namespace="rafka")
                    extra = sorted(set(ray.get(replica.__ray_call__.remote(_module_names))) - bare_modules)
                    tops = sorted({m.split(".")[0] for m in extra})
                    print(f"\n{len(extra)} modules in a replica and not in a bare actor; packages: {' '.join(tops)}")
                if args.only_idle:
                    rows.append((count, len(replicas), len(every), uss, rss, bare_uss, bare_rss, cpu, controller_cpu,
                                 bare_cpu, float("nan"), nodes, None, None, connections))
                    admin.delete_topic(topic)
                    continue
                threads, acked_read = None, None
                if not args.no_librdkafka:
                    threads, acked = producer_threads(cluster.bootstrap_servers, topic, count)
                    acked_read = (acked, read_back_by_group(cluster.bootstrap_servers, topic, acked))
                create_times_s = []   # one creation is too noisy to judge by on this machine
                for attempt in range(args.creations):
                    wait_for_full_pool(cluster)
                    started_s = time.monotonic()
                    admin.create_topic(f"scale-create-{count}-{attempt}", partitions=12, replication_factor=3)
                    create_times_s.append(time.monotonic() - started_s)
                    admin.delete_topic(f"scale-create-{count}-{attempt}")
                create_s = statistics.median(create_times_s)
                print(f"{count} partitions: create12 {', '.join(f'{t:.2f}' for t in create_times_s)} s "
                      f"(median {create_s:.2f})", flush=True)
                rows.append((count, len(replicas), len(every), uss, rss, bare_uss, bare_rss, cpu, controller_cpu,
                             bare_cpu, create_s, nodes, threads, acked_read, connections))
            wait_for_full_pool(cluster)   # the pool refills after the last creation: not during the rate
            *rates, samplers = aggregate_rates(cluster, topic, count, args.rate_s, librdkafka=not args.no_librdkafka,
                                               profile=args.profile)
            rate_rows.append((count, *rates))
            profiles += [(count, sampler) for sampler in samplers]
            admin.delete_topic(topic)

    if rows:
        print(f"\nreplica pool: {controller_options['replica_pool_size']} idle replica actors per broker")
        print_idle(rows)
    if rate_rows:
        print_rates(rate_rows, args.rate_s, args.replication_factor)
    for count, sampler in profiles:
        print(f"\n{count} partitions, partition 0:")
        print(report(sampler))


def print_idle_by_kind(cluster, topic: str, cpu_by_actor: dict[str, float], bare_each: float) -> None:
    """Where the idle CPU goes: each kind of rafka actor's count, total and mean,
    beside a bare actor's mean in the same run."""
    from rafka.core.actor_names import BROKER_ACTOR_PREFIX, CONTROLLER_NAME, REPLICA_SHELL_PREFIX
    partitions = cluster.admin().describe_topics([topic])[topic]["partitions"]
    leaders = {p["actors"][p["leader"]] for p in partitions if p["leader"] in p["actors"]}
    replicas = {actor for p in partitions for actor in p["actors"].values()}

    def kind(name: str) -> str:
        if name == CONTROLLER_NAME:
            return "controller"
        if name.startswith(BROKER_ACTOR_PREFIX):
            return "broker process"
        if name in leaders:
            return "leader"
        if name in replicas:
            return "follower"
        if name.startswith(REPLICA_SHELL_PREFIX):
            return "pool shell or other topic"
        return "coordinator"
    by_kind: dict[str, list[float]] = {}
    for name, share in cpu_by_actor.items():
        by_kind.setdefault(kind(name), []).append(share)
    print(f"\nidle CPU by kind of actor ({topic}), % of one core; a bare actor: {bare_each:.2f}")
    print(f"{'kind':>26}{'actors':>8}{'total':>8}{'mean':>7}{'max':>7}")
    for name, shares in sorted(by_kind.items(), key=lambda item: -sum(item[1])):
        print(f"{name:>26}{len(shares):>8}{sum(shares):8.1f}{statistics.mean(shares):7.2f}{max(shares):7.2f}")


def print_idle(rows) -> None:
    print()
    print(f"{'partitions':>10}{'replicas':>9}{'actors':>7}{'USS MiB':>9}{'RSS MiB':>9}{'bare USS':>9}"
          f"{'bare RSS':>9}{'idle CPU%':>10}{'ctrl CPU%':>10}{'bare CPU%':>10}{'create12 s':>11}{'nodes':>6}"
          f"{'rdk thr':>8}{'acked/read':>11}{'conns':>6}")
    for (count, n_replicas, n_actors, uss, rss, bare_uss, bare_rss, cpu, controller_cpu, bare_cpu, create_s, nodes,
         threads, acked_read, connections) in rows:
        read = "-" if acked_read is None else f"{acked_read[0]}/{acked_read[1]}"
        print(f"{count:>10}{n_replicas:>9}{n_actors:>7}{uss:9.1f}{rss:9.1f}{bare_uss:9.1f}{bare_rss:9.1f}"
              f"{cpu:10.1f}{controller_cpu:10.1f}{bare_cpu:10.1f}{create_s:11.2f}{nodes:>6}"
              f"{threads if threads is not None else '-':>8}{read:>11}{connections:>6}")
    print("USS/RSS: mean per process over the topic's replicas and as many bare actors (measured just before "
          "the topic, then stopped); idle CPU: every rafka actor (controller, coordinators, brokers, replicas) at "
          "rest, % of one core, beside as many bare actors; ctrl: the controller's share of it; create12: "
          "the median over --creations 12-partition RF3 topics, each until every partition has a leader; "
          "nodes: Kafka nodes in Metadata; rdk thr: threads of one librdkafka producer; acked/read: records a "
          "librdkafka producer had acked (one per partition, acks=all) / of them read back by a librdkafka "
          "consumer group; conns: TCP connections between rafka actors")


if __name__ == "__main__":
    main()
