"""`rafka ...`: subcommands mirroring Kafka's tools (see DESIGN.md section 6).

`up`, `down` and `status` act on a running Ray cluster (`--address`, else
RAY_ADDRESS, else "auto"); `topics` speaks kafka-topics.sh; `consumer-groups`,
`lag`, `dump-offsets` and the console clients are in cli_groups.py, `acls` in cli_acls.py,
`configs` (client quotas) in cli_configs.py,
`delete-records` and `log-dirs` in cli_records.py, `transactions` in cli_transactions.py,
`leader-election` and `reassign-partitions` in cli_partitions.py. Errors print as Kafka's tools
print them ("Error while executing topic command : ...") and exit 1.
"""

from __future__ import annotations

import argparse
import os
import sys

from rafka import cli_acls, cli_configs, cli_features, cli_groups, cli_partitions, cli_records, cli_transactions
from rafka.quiet import own_stderr, quiet_logs
from rafka.cluster_errors import NotRunning, UsageError
from rafka.core.errors import KafkaError

DEFAULT_DATA_DIR = "/tmp/rafka-data"


def _address(args) -> str:
    return args.address or os.environ.get("RAY_ADDRESS") or "auto"


def _parse_configs(pairs: list[str] | None) -> dict[str, str]:
    configs = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"Invalid config '{pair}': expected name=value")
        configs[name] = value
    return configs


# --- up / down / status -----------------------------------------------------------

def cmd_up(args) -> int:
    import ray

    from rafka.actors.replica import NAMESPACE
    from rafka.cluster import start_controller

    ray.init(address=_address(args), namespace=NAMESPACE, logging_level="WARNING",
             log_to_driver=args.log_to_driver)
    options = {k: v for k, v in (("replica_lag_time_max_ms", args.replica_lag_time_max_ms),
                                 ("fetch_max_wait_ms", args.fetch_max_wait_ms),
                                 ("idle_fetch_max_wait_ms", args.idle_fetch_max_wait_ms),
                                 ("num_partitions", args.num_partitions),
                                 ("default_replication_factor", args.default_replication_factor),
                                 ("network_processes", args.network_processes),
                                 ("super_users", args.super_users),
                                 ("replica_pool_size", args.replica_pool_size),
                                 ("log_drop_behind_bytes", args.log_drop_behind_bytes)) if v is not None}
    controller = start_controller(args.data_dir, listener_port=args.listener_port, sasl=args.sasl, **options)
    brokers = _wait_for_brokers(controller, args.wait_for_brokers)
    snapshot = ray.get(controller.metadata_snapshot.remote())
    print(f"rafka is up: cluster id {snapshot['cluster_id']}, controller epoch "
          f"{snapshot['controller_epoch']}, {len(brokers)} broker node(s), data in {args.data_dir}")
    print(f"bootstrap servers: {ray.get(controller.bootstrap_address.remote(len(brokers)))}")
    if ray.get(controller.sasl_required.remote()):
        print("listeners require SASL/SCRAM (SASL_PLAINTEXT); add users with `rafka users --add`")
    if not brokers:
        print("warning: no Ray node offers the 'rafka_broker' resource; start nodes with "
              "ray start --resources='{\"rafka_broker\": 1}'", file=own_stderr())
        return 0
    from rafka.cluster import Cluster
    Cluster(controller=controller, data_dir=None).start_group_coordinators(
        offsets_topic_num_partitions=args.offsets_topic_num_partitions,
        offsets_topic_replication_factor=min(3, len(brokers)))
    print(f"group coordinators: {args.offsets_topic_num_partitions} (__consumer_offsets partitions)")
    Cluster(controller=controller, data_dir=None).start_transaction_coordinators(
        transaction_state_num_partitions=args.transaction_state_num_partitions,
        transaction_state_replication_factor=min(3, len(brokers)))
    print(f"transaction coordinators: {args.transaction_state_num_partitions} (__transaction_state partitions)")
    return 0


# Bounded: a broker that never joins is an error an operator sees, not a hang.
WAIT_FOR_BROKERS_TIMEOUT_S = 600.0


def _wait_for_brokers(controller, count: int) -> list[dict]:
    """The broker nodes, once `count` of them have joined. Under `ray up` the head's
    commands run while the autoscaler is still starting the workers: the offsets
    topic is created with them, so `rafka up` waits for them (cluster.yaml)."""
    import time

    import ray
    deadline = time.monotonic() + WAIT_FOR_BROKERS_TIMEOUT_S
    while len(brokers := ray.get(controller.list_brokers.remote())) < count:
        if time.monotonic() >= deadline:
            raise UsageError(f"only {len(brokers)} of the {count} broker nodes asked for by --wait-for-brokers "
                             f"joined within {WAIT_FOR_BROKERS_TIMEOUT_S:.0f}s")
        time.sleep(1.0)
    return brokers


def cmd_down(args) -> int:
    import ray
    from ray.util.placement_group import placement_group_table, remove_placement_group

    from rafka.actors.replica import NAMESPACE

    ray.init(address=_address(args), namespace=NAMESPACE, logging_level="WARNING",
             log_to_driver=args.log_to_driver)
    try:   # replicas close their logs cleanly first: the next `rafka up` skips recovery
        from rafka.actors.controller import CONTROLLER_NAME
        closed = ray.get(ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE).shutdown_replicas.remote(),
                         timeout=120)
        print(f"replicas shut down cleanly: {closed['closed']} of {closed['replicas']}")
    except (ValueError, ray.exceptions.RayError) as error:
        print(f"warning: replicas were not shut down cleanly ({error}); their logs recover at the next start",
              file=own_stderr())
    killed = 0
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] == NAMESPACE:
            ray.kill(ray.get_actor(entry["name"], namespace=NAMESPACE), no_restart=True)
            killed += 1
    removed = 0
    for group_id, group in placement_group_table().items():
        if group.get("name", "").startswith("rafka:") and group.get("state") != "REMOVED":
            try:
                found = ray.util.get_placement_group(group["name"])
            except ValueError:   # removed since the table was read (a replica actor's group
                continue         # goes with it): nothing left to remove (CI saw `rafka down` fail on it)
            remove_placement_group(found)
            removed += 1
    print(f"rafka is down: {killed} actor(s) stopped, {removed} placement group(s) removed; "
          f"logs stay on the nodes' disks")
    return 0


def cmd_status(args) -> int:
    cluster = _connect(args)
    import ray
    snapshot = ray.get(cluster.controller.metadata_snapshot.remote())
    brokers = ray.get(cluster.controller.list_brokers.remote())
    partitions = [p for t in snapshot["topics"].values() for p in t["partitions"]]
    offline = sum(1 for p in partitions if p["leader"] < 0)
    under = sum(1 for p in partitions if len(p["isr"]) < len(p["replicas"]))
    print(f"cluster id:        {snapshot['cluster_id']}")
    print(f"controller epoch:  {snapshot['controller_epoch']}")
    print(f"bootstrap servers: {cluster.bootstrap_servers}")
    print(f"brokers:           {len(brokers)}")
    for broker in brokers:
        broker_id = broker["broker_id"] if broker["broker_id"] is not None else "(no broker id label)"
        print(f"  {broker_id}  {broker['address']}  node {broker['node_id']}")
    print(f"topics:            {len(snapshot['topics'])} ({len(partitions)} partitions, "
          f"{under} under-replicated, {offline} offline)")
    pool = ray.get(cluster.controller.replica_pool.remote())
    ready = ", ".join(f"{b}: {len(names)}" for b, names in sorted(pool["ready"].items()))
    print(f"replica pool:      {pool['size_per_broker']} idle replica actors per broker; ready by broker: "
          f"{ready or 'none'}")
    return 0


def _connect(args):
    import rafka
    return rafka.connect(_address(args), log_to_driver=args.log_to_driver)


def cmd_broker_id(args) -> int:
    """Print this host's broker id from its log dir, creating the identity on first
    use; `ray start --labels rafka-broker-id=$(rafka broker-id)` (cluster.yaml)."""
    from rafka.core.broker_identity import identity_in_data_dir
    print(identity_in_data_dir(args.data_dir, broker_id=args.broker_id).broker_id)
    return 0


# --- topics -----------------------------------------------------------------------

def cmd_topics(args) -> int:
    admin = _connect(args).admin()
    if args.create:
        _require(args, "topic", "partitions", "replication_factor")
        admin.create_topic(args.topic, partitions=args.partitions, replication_factor=args.replication_factor,
                           config=_parse_configs(args.config))
        print(f"Created topic {args.topic}.")
    elif args.list:
        for name in admin.list_topics():
            if not (args.exclude_internal and name.startswith("__")):
                print(name)
    elif args.describe:
        described = admin.describe_topics([args.topic] if args.topic else None)
        for name in sorted(described):
            print(format_topic(described[name]))
    elif args.delete:
        _require(args, "topic")
        admin.delete_topic(args.topic)
    elif args.alter:
        _require(args, "topic", "partitions")
        admin.create_partitions(args.topic, args.partitions)
        print(f"Adding partitions succeeded! The topic {args.topic} now has {args.partitions} partitions.")
    else:
        raise UsageError("Command must include exactly one action: --list, --describe, --create, "
                               "--alter or --delete")
    return 0


def cmd_verify(args) -> int:
    """Kafka's verifiable producer and consumer under faults, judged by the checker;
    exit 1 on any anomaly. On a fresh embedded cluster unless --address is given."""
    from rafka.verify import FAULT_KINDS, EmbeddedCluster, VerifyOptions, WorkloadOptions, format_report, run
    kinds = tuple(args.faults.split(",")) if args.faults else FAULT_KINDS
    unknown = [k for k in kinds if k not in FAULT_KINDS and k != "none"]
    if unknown:
        raise UsageError(f"Unknown fault kinds {unknown}: choose from {', '.join(FAULT_KINDS)} (or none)")
    options = VerifyOptions(
        duration_s=args.duration_s, out_dir=args.out, seed=args.seed,
        faults=tuple(k for k in kinds if k != "none"),
        **{field: _gap(text, flag) for field, text, flag in (
            ("fault_gap_s", args.fault_gap_s, "--fault-gap-s"),
            ("process_fault_gap_s", args.process_fault_gap_s, "--process-fault-gap-s")) if text is not None},
        workload=WorkloadOptions(topic=args.topic, partitions=args.partitions, producers=args.producers,
                                 members=args.members, member_actors=args.member_actors, acks=args.acks,
                                 idempotence=not args.no_idempotence, transactions=not args.no_transactions,
                                 group_protocol=args.group_protocol))
    if args.address or os.environ.get("RAY_ADDRESS"):
        result = run(_connect(args), options)
    else:
        with EmbeddedCluster() as embedded:
            result = run(embedded.cluster, options, reopen=embedded.reopen)
    print(format_report(result))
    return 0 if result.ok else 1


def _gap(text: str, flag: str) -> tuple[float, float]:
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"{flag} takes MIN,MAX seconds, got {text!r}") from None
    if not 0 <= low <= high:
        raise UsageError(f"{flag} needs 0 <= MIN <= MAX, got {text!r}")
    return low, high


def format_topic(topic: dict) -> str:
    """kafka-topics.sh --describe's layout, plus each partition's epoch, HW, LEOs, replicas'
    brokers and the leader's Kafka node (id@host:port, as Metadata and kcat -L name it)."""
    configs = ",".join(f"{k}={v}" for k, v in sorted(topic["config"].items()))
    lines = [f"Topic: {topic['name']}\tTopicId: {topic['topic_id']}\tPartitionCount: "
             f"{len(topic['partitions'])}\tReplicationFactor: {len(topic['partitions'][0]['replicas'])}\t"
             f"Configs: {configs}"]
    for p in topic["partitions"]:
        leos = ",".join(f"{r}:{leo}" for r, leo in p.get("log_end_offsets", {}).items())
        lines.append(f"\tTopic: {topic['name']}\tPartition: {p['partition']}\tLeader: "
                     f"{p['leader'] if p['leader'] >= 0 else 'none'}\tReplicas: "
                     f"{','.join(map(str, p['replicas']))}\tIsr: {','.join(map(str, p['isr']))}\t"
                     f"LeaderEpoch: {p['leader_epoch']}\tHighWatermark: {p.get('high_watermark')}\t"
                     f"LogEndOffsets: {leos}\tBrokers: {','.join(map(str, p.get('brokers', [])))}"
                     f"\tLeaderNode: {p.get('leader_kafka_node', -1)}@{p.get('leader_endpoint') or 'none'}"
                     + (f"\tAdding: {','.join(map(str, p['adding']))}\tRemoving: "
                        f"{','.join(map(str, p['removing']))}" if p.get("adding") or p.get("removing") else ""))
    return "\n".join(lines)


def _require(args, *names: str) -> None:
    missing = [n for n in names if getattr(args, n) is None]
    if missing:
        raise UsageError("Missing required argument(s): "
                               + ", ".join("--" + n.replace("_", "-") for n in missing))


# --- main -------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rafka", description="Kafka's log and offset model on Ray.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="the embedded end-to-end scenario")

    up = sub.add_parser("up", help="start rafka (the controller) on a running Ray cluster")
    up.add_argument("--data-dir", default=os.environ.get("RAFKA_DATA_DIR", DEFAULT_DATA_DIR),
                    help="where each node keeps its replicas' logs, and the head its metadata log")
    up.add_argument("--sasl", action="store_true",
                    help="require a SASL/SCRAM login on every listener (always, once Ray's token auth is on); "
                         "it stays required for the cluster's life")
    up.add_argument("--super-users", metavar="PRINCIPALS",
                    help="Kafka's super.users: principals allowed everything, ';'-separated "
                         "(User:admin;User:ops); rafka's own user always is one")
    up.add_argument("--replica-lag-time-max-ms", type=int)
    up.add_argument("--fetch-max-wait-ms", type=int, help="Kafka's replica.fetch.wait.max.ms (500)")
    up.add_argument("--idle-fetch-max-wait-ms", type=int,
                    help="the longest long poll of a follower that finds nothing new (5000; at most half "
                         "of --replica-lag-time-max-ms)")
    up.add_argument("--listener-port", type=int, default=9092,
                    help="every broker's Kafka port, on its host: clients' bootstrap.servers "
                         "(0: a free port per broker)")
    up.add_argument("--network-processes", type=int, metavar="N",
                    help="processes serving each broker's port (Kafka's num.network.threads; default 1)")
    up.add_argument("--replica-pool-size", type=int, metavar="N",
                    help="idle replica actors kept on each broker, so that new replicas start without "
                         "starting processes (default 4; each idle one is a process of ~60-70 MB)")
    up.add_argument("--log-drop-behind-bytes", type=int, metavar="BYTES",
                    help="each replica's log asks the kernel to drop from the page cache what it wrote "
                         "more than BYTES ago (README, 'Page cache'); default 0: kept, as Kafka leaves it")
    up.add_argument("--num-partitions", type=int, metavar="N",
                    help="Kafka's num.partitions: a topic created with -1 partitions gets N (default 1)")
    up.add_argument("--default-replication-factor", type=int, metavar="N",
                    help="Kafka's default.replication.factor: for a replication factor of -1 (default 1)")
    up.add_argument("--offsets-topic-num-partitions", type=int, default=1,
                    help="partitions of __consumer_offsets, one group coordinator each (Kafka: 50)")
    up.add_argument("--transaction-state-num-partitions", type=int, default=1,
                    help="partitions of __transaction_state, one transaction coordinator each (Kafka: 50)")
    up.add_argument("--wait-for-brokers", type=int, default=0, metavar="N",
                    help="wait until N broker nodes have joined before creating __consumer_offsets "
                         "(as `ray up` starts the workers after the head's commands began)")
    sub.add_parser("down", help="stop rafka's actors (logs stay on disk)")
    broker_id = sub.add_parser("broker-id", help="print this host's broker id from its log dir "
                                                 "(created on first use), for ray start --labels")
    broker_id.add_argument("--data-dir", default=os.environ.get("RAFKA_DATA_DIR", DEFAULT_DATA_DIR),
                           help="the data dir given to `rafka up`; the log dir is <data dir>/broker-<id>")
    broker_id.add_argument("--broker-id", type=int, help="the id to take on first use (default: generated)")
    sub.add_parser("status", help="cluster id, controller epoch, brokers, topics")

    topics = sub.add_parser("topics", help="create, list, describe, delete topics (kafka-topics.sh)")
    action = topics.add_mutually_exclusive_group()
    for name in ("create", "list", "describe", "delete", "alter"):
        action.add_argument(f"--{name}", action="store_true")
    topics.add_argument("--topic")
    topics.add_argument("--partitions", type=int)
    topics.add_argument("--replication-factor", type=int)
    topics.add_argument("--config", action="append", metavar="NAME=VALUE")
    topics.add_argument("--exclude-internal", action="store_true", help="leave out __consumer_offsets")
    users = sub.add_parser("users", help="SASL/SCRAM users of the Kafka listeners (kafka-configs.sh "
                                         "--entity-type users)")
    user_action = users.add_mutually_exclusive_group(required=True)
    user_action.add_argument("--add", metavar="USER", help="set USER's credentials (added or replaced)")
    user_action.add_argument("--delete", metavar="USER")
    user_action.add_argument("--list", action="store_true")
    users.add_argument("--password", help="with --add (default: read from stdin, never echoed)")
    users.add_argument("--mechanism", action="append", choices=["SCRAM-SHA-256", "SCRAM-SHA-512"],
                       help="with --add or --delete (default: both)")
    users.add_argument("--iterations", type=int, default=4096, help="with --add (4096 to 16384)")
    cli_groups.add_parsers(sub)
    cli_acls.add_parser(sub)
    cli_configs.add_parser(sub)
    cli_records.add_parsers(sub)
    cli_features.add_parser(sub)
    cli_transactions.add_parser(sub)
    verify = sub.add_parser("verify", help="a verifiable producer and consumers under faults, checked "
                                           "for lost, duplicated or reordered records (exit 1 on any)")
    verify.add_argument("--duration-s", type=float, default=60.0)
    verify.add_argument("--topic", default="verify")
    verify.add_argument("--partitions", type=int, default=3)
    verify.add_argument("--producers", type=int, default=2)
    verify.add_argument("--members", type=int, default=2, help="group members in this process")
    verify.add_argument("--member-actors", type=int, default=2, help="group members as Ray actors")
    verify.add_argument("--acks", default="all")
    verify.add_argument("--no-idempotence", action="store_true")
    verify.add_argument("--faults", help="comma-separated fault kinds (default: all; 'none' for none)")
    verify.add_argument("--out", default="verify-out", help="where history.jsonl and report.txt go")
    verify.add_argument("--seed", type=int, default=0)
    verify.add_argument("--group-protocol", default="eager", choices=["eager", "cooperative", "static", "consumer"],
                        help="how the driver-side members run their group (consumer: KIP-848)")
    verify.add_argument("--no-transactions", action="store_true",
                        help="without the transactional producers and read_committed readers")
    verify.add_argument("--fault-gap-s",
                        help="MIN,MAX seconds between the cluster healing and the next replica fault "
                             "(default: rafka.verify.VerifyOptions.fault_gap_s)")
    verify.add_argument("--process-fault-gap-s",
                        help="MIN,MAX seconds between two process faults "
                             "(default: rafka.verify.VerifyOptions.process_fault_gap_s)")

    cli_partitions.add_parsers(sub)

    for p in sub.choices.values():
        if p.prog.split()[-1] not in ("demo", "broker-id"):
            p.add_argument("--address", help="Ray cluster address (default: $RAY_ADDRESS, else auto)")
        if p.prog.split()[-1] != "consumer-groups":   # it has its own --verbose, which shows the logs too
            p.add_argument("--verbose", action="store_true",
                           help="show Ray's and Spark's output too (default: written to a log file)")
    return parser


def cmd_transactions(args) -> int:
    cli_transactions.check_arguments(args)   # bad arguments refused before Ray is asked anything
    return cli_transactions.cmd_transactions(_connect(args).admin(), args)


def cmd_users(args) -> int:
    admin = _connect(args).admin()
    if args.add:
        password = args.password
        if password is None:
            import getpass
            password = getpass.getpass(f"password for {args.add}: ") if sys.stdin.isatty() else sys.stdin.readline()
            password = password.rstrip("\n")
        if not password:
            raise UsageError("an empty password is not allowed")
        mechanisms = args.mechanism or ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        if args.iterations < 4096:
            raise UsageError(f"--iterations {args.iterations} is below SCRAM's minimum, 4096")
        if args.iterations > 16384:
            raise UsageError(f"--iterations {args.iterations} is above Kafka's maximum, 16384")
        admin.upsert_user(args.add, password, mechanisms=mechanisms, iterations=args.iterations)
        print(f"Set the SCRAM credentials of user {args.add} ({', '.join(mechanisms)}).")
    elif args.delete:
        admin.delete_user(args.delete, args.mechanism)
        print(f"Deleted the SCRAM credentials of user {args.delete}.")
    else:
        for user, mechanisms in admin.list_users().items():
            print(f"{user}  {','.join(mechanisms)}")
    return 0


COMMANDS = {"up": cmd_up, "users": cmd_users, "down": cmd_down, "status": cmd_status, "topics": cmd_topics,
            "broker-id": cmd_broker_id, "verify": cmd_verify,
            "reassign-partitions": lambda args: cli_partitions.cmd_reassign_partitions(_connect(args).admin(), args),
            "leader-election": lambda args: cli_partitions.cmd_leader_election(lambda: _connect(args).admin(), args),
            "consumer-groups": lambda args: cli_groups.cmd_consumer_groups(_connect(args).admin(), args),
            "lag": lambda args: cli_groups.cmd_lag(_connect(args).admin(), args),
            "dump-offsets": lambda args: cli_groups.cmd_dump_offsets(_connect(args), args),
            "console-producer": lambda args: cli_groups.cmd_console_producer(_connect(args), args),
            "console-consumer": lambda args: cli_groups.cmd_console_consumer(_connect(args), args),
            "acls": lambda args: cli_acls.cmd_acls(_connect(args).admin(), args),
            "configs": lambda args: cli_configs.cmd_configs(_connect(args).admin(), args),
            "delete-records": lambda args: cli_records.cmd_delete_records(_connect(args).admin(), args),
            "log-dirs": lambda args: cli_records.cmd_log_dirs(_connect(args).admin(), args),
            "features": lambda args: cli_features.cmd_features(_connect(args).admin(), args),
            "transactions": cmd_transactions}


# An address with no Ray cluster behind it: Ray 2.60 retries its GCS connection 20
# times (about 14 minutes with its timeouts). A command line should say so within
# seconds; an operator's own RAY_* settings win.
FAST_RAY_CONNECT = {"RAY_NUM_REDIS_GET_RETRIES": "3", "RAY_py_gcs_connect_timeout_s": "3",
                    "RAY_gcs_rpc_server_connect_timeout_s": "3"}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command not in ("demo", "broker-id"):
        for name, value in FAST_RAY_CONNECT.items():   # read when ray is imported: before that
            os.environ.setdefault(name, value)
    if args.command == "demo":
        from rafka.demo import main as demo_main
        return demo_main(verbose=args.verbose)
    with quiet_logs(args.verbose, args.command) as logs:
        args.log_to_driver = logs.log_to_driver
        try:
            return COMMANDS[args.command](args)
        except (KafkaError, UsageError, NotRunning) as error:
            print(f"Error while executing {args.command} command : {error}", file=own_stderr())
            return 1
        except ConnectionError:  # ray.init's answer when no Ray cluster is at the address (or "auto" finds none)
            print(f"Error: no Ray cluster at {_address(args)!r}: start one with `ray start --head` or pass "
                  f"--address", file=own_stderr())
            return 1


if __name__ == "__main__":
    sys.exit(main())
