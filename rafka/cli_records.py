"""`rafka delete-records` and `rafka log-dirs`, as kafka-delete-records.sh and
kafka-log-dirs.sh (Kafka's DeleteRecordsCommand and LogDirsCommand), over the
wire through rafka's Admin (DeleteRecords to each leader; DescribeCluster, then
DescribeLogDirs to each broker).

    rafka delete-records --offset-json-file offsets.json
        {"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}
        (offset -1: the high watermark)
    rafka log-dirs --describe [--topic-list t1,t2] [--broker-list 0,1]

Output as the Kafka tools print it: "Executing records delete operation",
"Records delete operation completed:", then "partition: foo-1<TAB>low_watermark:
1" or "partition: foo-1<TAB>error: ..." per partition; "Querying brokers for log
directories information", "Received log directory information from brokers
0,1", then the JSON ({"version": 1, "brokers": [{"broker", "logDirs": [{"logDir",
"error", "partitions": [{"partition", "size", "offsetLag", "isFuture"}]}]}]}).
Callers: rafka.cli.
"""

from __future__ import annotations

import json

from rafka.cluster_errors import UsageError
from rafka.core.errors import KafkaError
from rafka.core.structs import TopicPartition


def add_parsers(sub) -> None:
    delete = sub.add_parser("delete-records", help="delete records below offsets (kafka-delete-records.sh)")
    delete.add_argument("--offset-json-file", required=True,
                        help='{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}')
    log_dirs = sub.add_parser("log-dirs", help="describe brokers' log dirs (kafka-log-dirs.sh)")
    log_dirs.add_argument("--describe", action="store_true", required=True)
    log_dirs.add_argument("--topic-list", default="", help="topic1,topic2 (default: all)")
    log_dirs.add_argument("--broker-list", default="", help="0,1,2 (default: all)")


def parse_offset_json(text: str) -> dict[TopicPartition, int]:
    """Kafka's DeleteRecordsCommand.parseOffsetJsonStringWithoutDedup, then its
    duplicate check."""
    try:
        document = json.loads(text)
        version = document.get("version", 1)
        if version != 1:
            raise UsageError(f"Not supported version field value {version}")
        if "partitions" not in document:
            raise UsageError("Missing partitions field")
        entries = [(TopicPartition(str(p["topic"]), int(p["partition"])), int(p["offset"]))
                   for p in document["partitions"]]
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise UsageError(f"the offset json file does not parse: {error}") from None
    offsets: dict[TopicPartition, int] = {}
    duplicates = []
    for tp, offset in entries:
        if tp in offsets:
            duplicates.append(f"{tp.topic}-{tp.partition}")
        offsets.setdefault(tp, offset)
    if duplicates:
        raise UsageError(f"Offset json file contains duplicate topic partitions: {','.join(duplicates)}")
    return offsets


def cmd_delete_records(admin, args, out=print) -> int:
    with open(args.offset_json_file) as file:
        offsets = parse_offset_json(file.read())
    out("Executing records delete operation")
    results = admin.delete_records(offsets)
    out("Records delete operation completed:")
    for tp, result in results.items():   # a partition's error is printed, not the exit status (Kafka's)
        if isinstance(result, KafkaError):
            out(f"partition: {tp.topic}-{tp.partition}\terror: {result}")
        else:
            out(f"partition: {tp.topic}-{tp.partition}\tlow_watermark: {result}")
    return 0


def cmd_log_dirs(admin, args, out=print) -> int:
    topics = {t for t in args.topic_list.split(",") if t}
    try:
        wanted = sorted({int(b) for b in args.broker_list.split(",") if b})
    except ValueError:
        raise UsageError(f"--broker-list {args.broker_list!r} is not a list of broker ids") from None
    cluster_brokers = sorted(b["node_id"] for b in admin.describe_cluster()["brokers"])
    missing = [b for b in wanted if b not in cluster_brokers]
    if missing:
        raise UsageError(f"ERROR: The given brokers do not exist from --broker-list: "
                         f"{','.join(map(str, missing))}. Current existent brokers: "
                         f"{','.join(map(str, cluster_brokers))}")
    brokers = wanted or cluster_brokers
    out("Querying brokers for log directories information")
    described = admin.describe_log_dirs(brokers=brokers)
    out(f"Received log directory information from brokers {','.join(map(str, brokers))}")
    out(json.dumps({"version": 1, "brokers": [
        {"broker": broker, "logDirs": [
            {"logDir": d["log_dir"], "error": type(d["error"]).__name__ if d["error"] is not None else None,
             "partitions": [{"partition": f"{p['topic']}-{p['partition']}", "size": p["size"],
                             "offsetLag": p["offset_lag"], "isFuture": p["is_future"]}
                            for p in d["partitions"] if not topics or p["topic"] in topics]}
            for d in dirs]}
        for broker, dirs in described.items()]}, separators=(",", ":")))
    return 0
