"""`rafka consumer-groups`, `lag`, `dump-offsets`, `console-producer`, `console-consumer`:
kafka-consumer-groups.sh, the offsets formatter of kafka-console-consumer.sh, and
the console clients, with Kafka's columns and messages (core/offset_reset.py holds
the layouts and the reset rules). `lag` is --describe's table over time: rates,
trend and time lag from samples some seconds apart (core/lag.py computes and
prints them; here they are only taken).

--reset-offsets changes nothing without --execute (Kafka's default is a dry run,
with a warning), and only for a group with no members: Kafka's
"Assignments can only be reset if the group 'G' is inactive, but the current
state is Stable." otherwise.
"""

from __future__ import annotations

import sys
import time

from rafka.cluster_errors import UsageError
from rafka.core.clock import SystemClock
from rafka.core.errors import GroupIdNotFound, NonEmptyGroup
from rafka.core.lag import LagSample, PartitionPosition, watch
from rafka.core.offset_reset import (DESCRIBE_OFFSETS_HEADERS, RESET_OFFSETS_HEADERS, ByDuration, ShiftBy, ToCurrent,
                                     ToDatetime, ToEarliest, ToLatest, ToOffset, format_offsets_record, format_table,
                                     parse_datetime_ms, parse_iso_duration_ms, plan_reset)
from rafka.core.structs import TopicPartition
from rafka.quiet import own_stderr

RESET_OPTIONS = ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime", "by_duration")


def add_parsers(sub) -> None:
    groups = sub.add_parser("consumer-groups", help="list, describe, reset offsets of, delete consumer groups")
    action = groups.add_mutually_exclusive_group()
    for name in ("list", "describe", "reset-offsets", "delete"):
        action.add_argument(f"--{name}", action="store_true")
    groups.add_argument("--group")
    groups.add_argument("--topic", action="append", help="T or T:0,1 (reset-offsets); repeatable")
    groups.add_argument("--all-topics", action="store_true")
    view = groups.add_mutually_exclusive_group()
    for name in ("members", "state", "offsets"):
        view.add_argument(f"--{name}", action="store_true")
    groups.add_argument("--verbose", action="store_true")
    spec = groups.add_mutually_exclusive_group()
    spec.add_argument("--to-earliest", action="store_true")
    spec.add_argument("--to-latest", action="store_true")
    spec.add_argument("--to-current", action="store_true")
    spec.add_argument("--to-offset", type=int)
    spec.add_argument("--shift-by", type=int)
    spec.add_argument("--to-datetime", help="YYYY-MM-DDTHH:mm:SS.sss[zone] (no zone: UTC)")
    spec.add_argument("--by-duration", help="ISO-8601 duration, e.g. PT1H")
    run = groups.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true")
    run.add_argument("--execute", action="store_true")

    lag = sub.add_parser("lag", help="a group's lag per partition with consume and produce rates, trend and "
                                     "time lag (the oldest unconsumed record's age)")
    lag.add_argument("--group", required=True)
    lag.add_argument("--watch", type=float, metavar="N", help="print again every N seconds, until Ctrl-C")
    lag.add_argument("--iterations", type=int, metavar="K", help="with --watch: stop after K tables")
    lag.add_argument("--interval", type=float, default=1.0, metavar="S",
                     help="without --watch: seconds between the two looks the rates come from (default 1)")

    sub.add_parser("dump-offsets", help="__consumer_offsets below its HW, one line per record")

    producer = sub.add_parser("console-producer", help="send stdin's lines to a topic")
    producer.add_argument("--topic", required=True)
    producer.add_argument("--key-separator", help="split each line into key and value at this string")
    consumer = sub.add_parser("console-consumer", help="print a topic's records")
    consumer.add_argument("--topic", required=True)
    consumer.add_argument("--from-beginning", action="store_true")
    consumer.add_argument("--group")
    consumer.add_argument("--max-messages", type=int)
    consumer.add_argument("--timeout-ms", type=int, help="exit when no record came for this long")
    consumer.add_argument("--print-key", action="store_true")


# --- consumer-groups ------------------------------------------------------------------

def cmd_consumer_groups(admin, args) -> int:
    if args.list:
        groups = admin.list_consumer_groups()
        if args.state:
            print(format_table(("GROUP", "STATE"), [(g["group"], g["state"]) for g in groups]))
        else:
            for group in groups:
                print(group["group"])
        return 0
    if not args.group:
        raise UsageError("Missing required argument(s): --group")
    if args.describe:
        return _describe(admin, args)
    if args.reset_offsets:
        return _reset(admin, args)
    if args.delete:
        try:
            admin.delete_consumer_group(args.group)
        except (GroupIdNotFound, NonEmptyGroup) as error:
            print(f"Error: Deletion of some consumer groups failed:\n* Group '{args.group}' could not be "
                  f"deleted due to: {error.kafka_name}", file=own_stderr())
            return 1
        print(f"Deletion of requested consumer groups ('{args.group}') was successful.")
        return 0
    raise UsageError("Command must include exactly one action: --list, --describe, --delete, --reset-offsets")


def _describe(admin, args) -> int:
    group = args.group
    description = admin.describe_consumer_group(group)
    if description["state"] == "Dead":
        print(f"Error: Consumer group '{group}' does not exist.", file=own_stderr())
        return 1
    members = description["members"]
    if args.state:
        print(format_table(("GROUP", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
                           [(group, description["assignor"] or "", description["state"], len(members))]))
        return 0
    if not members:
        print(f"\nConsumer group '{group}' has no active members.\n")
    if args.members:
        headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (["ASSIGNMENT"] if args.verbose
                                                                                  else [])
        rows = []
        for member_id, member in sorted(members.items()):
            row = [group, member_id, member["host"], member["client_id"], len(member["assignment"])]
            if args.verbose:
                row.append(",".join(f"{t}({p})" for t, p in sorted(member["assignment"])) or "-")
            rows.append(row)
        print(format_table(headers, rows))
        return 0
    rows = [(r["group"], r["topic"], r["partition"], r["current_offset"], r["log_end_offset"], r["lag"],
             r["consumer_id"], r["host"], r["client_id"]) for r in admin.consumer_group_lag(group)]
    print(format_table(DESCRIBE_OFFSETS_HEADERS, rows))
    return 0


# --- lag ----------------------------------------------------------------------------

def cmd_lag(admin, args, *, clock=None, sleep=time.sleep) -> int:
    """`--watch N`: a table every N seconds (the first without rates: nothing to
    compare with yet) until Ctrl-C or --iterations; without it, two looks
    --interval apart and one table."""
    if args.watch is not None and args.watch <= 0:
        raise UsageError(f"--watch takes a positive number of seconds, not {args.watch:g}")
    if args.iterations is not None and (args.watch is None or args.iterations < 1):
        raise UsageError("--iterations takes a positive count, with --watch")
    if args.interval <= 0:
        raise UsageError(f"--interval takes a positive number of seconds, not {args.interval:g}")
    if admin.describe_consumer_group(args.group)["state"] == "Dead":
        print(f"Error: Consumer group '{args.group}' does not exist.", file=own_stderr())
        return 1
    clock = clock or SystemClock()

    def take() -> LagSample:
        return sample_lag(admin, args.group, clock)
    try:
        if args.watch is not None:
            watch(take, interval_s=args.watch, sleep=sleep, emit=lambda text: print(text, flush=True),
                  refreshes=args.iterations)
        else:
            watch(take, interval_s=args.interval, sleep=sleep, emit=print, refreshes=2, print_first=False)
    except KeyboardInterrupt:
        pass
    return 0


def sample_lag(admin, group: str, clock) -> LagSample:
    """One look at `group`: --describe's rows, then, for each partition with lag,
    the timestamp of the record at its committed offset."""
    rows = admin.consumer_group_lag(group)
    wall_ms, monotonic_ms = clock.now_ms(), clock.monotonic_ms()
    behind = {TopicPartition(r["topic"], r["partition"]): r["current_offset"] for r in rows if r["lag"]}
    timestamps = admin.record_timestamps(behind) if behind else {}
    return LagSample(group=group, wall_ms=wall_ms, monotonic_ms=monotonic_ms, positions=tuple(
        PartitionPosition(topic=r["topic"], partition=r["partition"], committed_offset=r["current_offset"],
                          log_end_offset=r["log_end_offset"],
                          oldest_unconsumed_timestamp_ms=timestamps.get(TopicPartition(r["topic"], r["partition"])),
                          consumer_id=r["consumer_id"], host=r["host"], client_id=r["client_id"])
        for r in rows))


def _reset_spec(args):
    chosen = [name for name in RESET_OPTIONS if getattr(args, name) not in (None, False)]
    if len(chosen) != 1:
        raise UsageError("Option --reset-offsets takes exactly one of: "
                         + ", ".join("--" + n.replace("_", "-") for n in RESET_OPTIONS))
    name = chosen[0]
    value = getattr(args, name)
    try:
        return {"to_earliest": lambda: ToEarliest(), "to_latest": lambda: ToLatest(),
                "to_current": lambda: ToCurrent(), "to_offset": lambda: ToOffset(value),
                "shift_by": lambda: ShiftBy(value), "to_datetime": lambda: ToDatetime(parse_datetime_ms(value)),
                "by_duration": lambda: ByDuration(parse_iso_duration_ms(value))}[name]()
    except ValueError as error:
        raise UsageError(str(error)) from None


def parse_topic_partitions(text: str) -> tuple[str, list[int] | None]:
    """--topic's value: "T" (every partition: None) or "T:0,1" (those partitions);
    UsageError for anything else, before the cluster is asked anything."""
    topic, _, listed = text.partition(":")
    if not topic:
        raise UsageError(f"Invalid --topic '{text}': expected T or T:0,1 (a topic, then partition numbers)")
    if not listed:
        return topic, None
    numbers = listed.split(",")
    if not all(n.isascii() and n.isdigit() for n in numbers):
        raise UsageError(f"Invalid --topic '{text}': partitions must be numbers separated by commas, "
                         f"as in {topic}:0,1")
    return topic, [int(n) for n in numbers]


def _reset_topics(args) -> list[tuple[str, list[int] | None]] | None:
    """--topic values parsed (None: --all-topics); UsageError before the cluster is asked."""
    if args.all_topics:
        return None
    if not args.topic:
        raise UsageError("Option --reset-offsets needs --topic or --all-topics")
    return [parse_topic_partitions(text) for text in args.topic]


def _reset_partitions(admin, topics, committed) -> list[TopicPartition]:
    if topics is None:
        return sorted(committed)
    partitions = []
    for topic, listed in topics:
        if listed is not None:
            partitions += [TopicPartition(topic, p) for p in listed]
        else:
            partitions += admin.topic_partitions(topic)
    return partitions


def _reset(admin, args) -> int:
    spec = _reset_spec(args)
    topics = _reset_topics(args)
    state = admin.describe_consumer_group(args.group)["state"]
    if state not in ("Empty", "Dead"):
        print(f"Error: Assignments can only be reset if the group '{args.group}' is inactive, but the current "
              f"state is {state}.", file=own_stderr())
        return 1
    committed = admin.list_consumer_group_offsets(args.group)
    partitions = _reset_partitions(admin, topics, committed)
    beginning, end = admin.beginning_offsets(partitions), admin.end_offsets(partitions)

    def offsets_for_time(tp, timestamp_ms):
        found = admin.list_offsets([tp], timestamp_ms)[TopicPartition(*tp)]
        return found[0] if found is not None else None
    try:
        plan = plan_reset(spec, partitions, committed=committed, beginning=beginning, end=end,
                          offsets_for_time=offsets_for_time, now_ms=int(time.time() * 1000))
    except ValueError as error:
        raise UsageError(str(error)) from None
    for warning in plan.warnings:
        print(f"WARN: {warning}", file=own_stderr())
    if args.execute:
        admin.alter_consumer_group_offsets(args.group, plan.offsets)
    elif not args.dry_run:
        print("WARN: No action will be performed as the --execute option is missing. In a future major release, "
              "the default behavior of this command will be to prompt the user before executing the reset "
              "rather than doing a dry run. You should add the --dry-run option explicitly if you are "
              "scripting this command and want to keep the current default behavior without prompting.",
              file=own_stderr())
    print(format_table(RESET_OFFSETS_HEADERS, [(args.group, tp.topic, tp.partition, offset)
                                                for tp, offset in plan.offsets.items()]))
    return 0


# --- dump-offsets and the console clients ---------------------------------------------

def cmd_dump_offsets(cluster, args) -> int:
    """Every record of __consumer_offsets below its HW (as the offsets formatter of
    kafka-console-consumer.sh prints them), partition by partition."""
    from rafka.actors.coordinator import OFFSETS_TOPIC
    from rafka.core.offsets_schema import decode_key, decode_value
    admin = cluster.admin()
    partitions = admin.topic_partitions(OFFSETS_TOPIC)
    end = admin.end_offsets(partitions)
    with cluster.consumer(auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.assign(partitions)
        while any(consumer.position(tp) < end[tp] for tp in partitions):
            for record in consumer.poll(timeout=1.0):
                key = decode_key(record.key)
                print(format_offsets_record(key, decode_value(key, record.value)))
    return 0


def cmd_console_producer(cluster, args) -> int:
    sent = []
    with cluster.producer(acks="all") as producer:
        for line in sys.stdin:
            line = line.rstrip("\n")
            key = None
            if args.key_separator:
                key_text, found, line = line.partition(args.key_separator)
                if not found:
                    raise UsageError(f"No key separator found on line: {key_text}")
                key = key_text.encode()
            sent.append(producer.send(args.topic, value=line.encode(), key=key))
        producer.flush()
    for future in sent:
        future.result()
    return 0


def cmd_console_consumer(cluster, args) -> int:
    options = {"auto_offset_reset": "earliest" if args.from_beginning else "latest"}
    if args.group:
        options.update(group_id=args.group)
    count = 0
    idle_since = time.monotonic()
    with cluster.consumer(**options) as consumer:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            consumer.assign(cluster.admin().topic_partitions(args.topic))
        try:
            while args.max_messages is None or count < args.max_messages:
                records = consumer.poll(timeout=0.5, max_records=None if args.max_messages is None
                                        else args.max_messages - count)
                for record in records:
                    value = record.value.decode(errors="replace") if record.value is not None else "null"
                    if args.print_key:
                        key = record.key.decode(errors="replace") if record.key is not None else "null"
                        value = f"{key}\t{value}"
                    print(value, flush=True)
                count += len(records)
                if records:
                    idle_since = time.monotonic()
                elif args.timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
                    break
        except KeyboardInterrupt:
            pass
    print(f"Processed a total of {count} messages", file=own_stderr())
    return 0

