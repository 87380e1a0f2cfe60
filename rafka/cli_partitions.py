"""`rafka leader-election` and `rafka reassign-partitions`, as kafka-leader-election.sh
and kafka-reassign-partitions.sh (Kafka's LeaderElectionCommand and
ReassignPartitionsCommand), over the wire through rafka's Admin (ElectLeaders,
Alter/ListPartitionReassignments, which any broker relays to the controller).

    rafka leader-election --election-type preferred|unclean
        (--topic T --partition P | --all-topic-partitions | --path-to-json-file F)
        F: {"partitions": [{"topic": "t", "partition": 0}]}
    rafka reassign-partitions --reassignment-json-file plan.json (--execute | --verify | --cancel)
        plan: {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [3, 1, 2]}]}

Output as the Kafka tools print it: "Successfully completed leader election
(PREFERRED) for partitions t-0, t-1", "Valid replica already elected for
partitions t-2", "Error completing leader election (PREFERRED) for partition:
t-3: <error>" and then "N replica(s) could not be elected" (exit 1); for a
reassignment "Successfully started partition reassignment for t-0", "Status of
partition reassignment:" with "Reassignment of partition t-0 is completed." or
"... is still in progress." per partition (exit 1 while any is), and "Error
reassigning partition(s):" with one "t-0: <error>" line each.
Callers: rafka.cli.
"""

from __future__ import annotations

import json

from rafka.cluster_errors import UsageError
from rafka.core.errors import ElectionNotNeeded
from rafka.core.metadata import PREFERRED_ELECTION, UNCLEAN_ELECTION
from rafka.core.structs import TopicPartition
from rafka.quiet import own_stderr

ELECTION_TYPES = {"PREFERRED": PREFERRED_ELECTION, "UNCLEAN": UNCLEAN_ELECTION}


def add_parsers(sub) -> None:
    elect = sub.add_parser("leader-election", help="elect preferred or unclean leaders (kafka-leader-election.sh)")
    elect.add_argument("--election-type", type=str.upper, choices=sorted(ELECTION_TYPES), required=True,
                       help="preferred: the first replica leads again if in sync; unclean: a live replica "
                            "outside the ISR may lead a partition that has no leader")
    elect.add_argument("--topic")
    elect.add_argument("--partition", type=int)
    elect.add_argument("--all-topic-partitions", action="store_true")
    elect.add_argument("--path-to-json-file", help='{"partitions": [{"topic": "t", "partition": 0}]}')
    reassign = sub.add_parser("reassign-partitions", help="move replicas between brokers "
                                                          "(kafka-reassign-partitions.sh)")
    reassign.add_argument("--reassignment-json-file", required=True)
    reassign_action = reassign.add_mutually_exclusive_group(required=True)
    reassign_action.add_argument("--execute", action="store_true")
    reassign_action.add_argument("--verify", action="store_true")
    reassign_action.add_argument("--cancel", action="store_true")


def _name(tp) -> str:
    return f"{tp[0]}-{tp[1]}"


def election_partitions(args) -> list[TopicPartition] | None:
    """The partitions asked for (None: all), checked as LeaderElectionCommand
    validates its options and reads its JSON file."""
    given = [flag for flag, used in (("--topic", args.topic is not None), ("--all-topic-partitions",
                                     args.all_topic_partitions), ("--path-to-json-file", args.path_to_json_file))
             if used]
    if len(given) != 1:
        raise UsageError("One and only one of the following options is required: --topic, "
                         "--all-topic-partitions, --path-to-json-file")
    if args.topic is not None and args.partition is None:
        raise UsageError("Missing required option(s): --partition")
    if args.topic is None and args.partition is not None:
        raise UsageError("Option --partition is only allowed if --topic is used")
    if args.all_topic_partitions:
        return None
    if args.topic is not None:
        return [TopicPartition(args.topic, args.partition)]
    try:
        with open(args.path_to_json_file) as file:
            document = json.load(file)
        if "partitions" not in document:
            raise UsageError('Replica election data is missing "partitions" field')
        partitions = [TopicPartition(str(p["topic"]), int(p["partition"])) for p in document["partitions"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise UsageError(f"Replica election data in {args.path_to_json_file!r} does not parse: {error}") from None
    twice = sorted({_name(tp) for tp in partitions if partitions.count(tp) > 1})
    if twice:
        raise UsageError(f"Replica election data contains duplicate partitions: {','.join(twice)}")
    return partitions


def cmd_leader_election(admin_of, args, out=print) -> int:
    """`admin_of()`: the Admin, asked for once the arguments are checked (bad ones
    are refused before Ray is asked anything)."""
    partitions = election_partitions(args)
    results = admin_of().elect_leaders(ELECTION_TYPES[args.election_type], partitions)
    done = sorted(tp for tp, error in results.items() if error is None)
    needless = sorted(tp for tp, error in results.items() if isinstance(error, ElectionNotNeeded))
    failed = sorted(((tp, error) for tp, error in results.items()
                     if error is not None and not isinstance(error, ElectionNotNeeded)), key=lambda item: item[0])
    if done:
        out(f"Successfully completed leader election ({args.election_type}) for partitions "
            + ", ".join(map(_name, done)))
    if needless:
        out("Valid replica already elected for partitions " + ", ".join(map(_name, needless)))
    for tp, error in failed:
        out(f"Error completing leader election ({args.election_type}) for partition: {_name(tp)}: {error}")
    if failed:
        print(f"{len(failed)} replica(s) could not be elected", file=own_stderr())
        return 1
    return 0


def parse_reassignment_json(path: str) -> dict[tuple[str, int], list[int]]:
    try:
        with open(path) as file:
            plan = json.load(file)
        return {(entry["topic"], int(entry["partition"])): [int(b) for b in entry["replicas"]]
                for entry in plan["partitions"]}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"Invalid reassignment JSON file {path!r}: {error}") from None


def cmd_reassign_partitions(admin, args, out=print) -> int:
    """--execute starts the moves; --verify reports each one as complete or in
    progress (exit 1 while any is); --cancel stops them (the replicas being added
    are dropped)."""
    moves = parse_reassignment_json(args.reassignment_json_file)
    plural = "s" if len(moves) > 1 else ""
    if args.execute or args.cancel:
        results = (admin.alter_partition_reassignments(moves) if args.execute
                   else admin.cancel_partition_reassignments(moves))
        failed = {tp: error for tp, error in results.items() if error is not None}
        if failed:
            out("Error reassigning partition(s):" if args.execute else "Error cancelling partition reassignment(s):")
            for tp, error in sorted(failed.items()):
                out(f"{_name(tp)}: {error}")
            return 1
        out(f"Successfully {'started' if args.execute else 'cancelled'} partition reassignment{plural} for "
            + ",".join(_name(tp) for tp in moves))
        return 0
    ongoing = admin.list_partition_reassignments(list(moves))
    replicas = admin.partition_replicas(sorted({t for t, _ in moves}))
    out("Status of partition reassignment:")
    done = True
    for (topic, partition), brokers in moves.items():
        if (topic, partition) in ongoing:
            done = False
            out(f"Reassignment of partition {topic}-{partition} is still in progress.")
            continue
        current = replicas.get((topic, partition), [])
        if sorted(current) == sorted(brokers):
            out(f"Reassignment of partition {topic}-{partition} is completed.")
        else:
            done = False
            out(f"There is no active reassignment of partition {topic}-{partition}, but replica set is "
                f"{current} rather than {brokers}.")
    return 0 if done else 1
