"""`rafka transactions`, as kafka-transactions.sh (Kafka's TransactionsCommand):
look at transactions and producers, and find and abort hanging transactions,
over the wire through rafka's Admin.

    rafka transactions list [--duration-filter MS]
    rafka transactions describe --transactional-id T
    rafka transactions describe-producers --topic T --partition P [--broker-id B]
    rafka transactions abort --topic T --partition P (--start-offset O |
          --producer-id I --producer-epoch E --coordinator-epoch C)
    rafka transactions find-hanging (--broker-id B | --topic T [--partition P]) [--max-transaction-timeout MIN]

What kafka-transactions.sh does, and what this does the same way:
  * tables with Kafka's column names, each cell padded to its column's width and
    followed by a tab (ToolsUtils.prettyPrintTable); an absent start offset or
    start time prints "None", an absent coordinator epoch -1;
  * `abort --start-offset` finds the producer whose open transaction starts there
    (DescribeProducers) and aborts with its id, epoch and coordinator epoch (0 when
    it has none, as with a negative --coordinator-epoch); without a start offset
    all three ids are needed. The marker goes to the partition's leader
    (WriteTxnMarkers ABORT, CLUSTER_ACTION); nothing is printed on success;
  * `find-hanging`: the open transactions of the partitions searched (the topic's,
    or every partition with a replica on --broker-id) whose producer's last write
    is older than --max-transaction-timeout minutes (15), that the coordinator
    does not know about: no transactional id lists the producer id, the id is
    not found, or its transaction does not include the partition. A transaction
    the coordinator still holds with the partition is not hanging (the
    coordinator ends it, at its timeout at the latest);
  * a failed call prints Kafka's sentence ("Failed to describe producers for
    partition t-0 on leader: ...") and exits 1; bad arguments raise UsageError
    (exit 1) before anything is sent.
Not offered: --command-config and --bootstrap-server (rafka reaches its cluster
through Ray: --address, as every rafka command).
Callers: rafka.cli (`add_parser`, `check_arguments`, `cmd_transactions`).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from rafka.cluster_errors import UsageError
from rafka.core.errors import KafkaError, TransactionalIdNotFound
from rafka.core.producer_state import ActiveProducer
from rafka.core.structs import TopicPartition
from rafka.quiet import own_stderr

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                     "CurrentTransactionStartOffset")
HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)")
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15
_MS_PER_MINUTE = 60_000


def add_parser(sub) -> None:
    transactions = sub.add_parser("transactions", help="list and describe transactions and producers, find and "
                                                       "abort hanging transactions (kafka-transactions.sh)")
    commands = transactions.add_subparsers(dest="transactions_command", required=True, metavar="COMMAND",
                                           title="commands")
    listing = commands.add_parser("list", help="list transactions")
    listing.add_argument("--duration-filter", type=int, metavar="MS",
                         help="only transactions running longer than this (ms); below 0: all")
    describe = commands.add_parser("describe", help="describe the state of an active transactional-id")
    describe.add_argument("--transactional-id", required=True)
    producers = commands.add_parser("describe-producers",
                                    help="describe the states of active producers for a topic partition")
    producers.add_argument("--broker-id", type=int, help="describe the producer state on this broker's replica")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    abort = commands.add_parser("abort", help="abort a hanging transaction (requires administrative privileges)")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    abort.add_argument("--producer-id", type=int)
    abort.add_argument("--producer-epoch", type=int)
    abort.add_argument("--coordinator-epoch", type=int)
    hanging = commands.add_parser("find-hanging", help="find hanging transactions")
    hanging.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    hanging.add_argument("--max-transaction-timeout", type=int, default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
                         metavar="MINUTES", help="maximum transaction timeout in minutes to limit the scope of "
                                                 "the search (15 minutes by default)")
    hanging.add_argument("--topic", help="topic name to limit search to (required if --partition is specified)")
    hanging.add_argument("--partition", type=int)
    for command in commands.choices.values():   # also after the command (rafka's parser adds them before it)
        command.add_argument("--address", default=argparse.SUPPRESS,
                             help="Ray cluster address (default: $RAY_ADDRESS, else auto)")
        command.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                             help="show Ray's output too (default: written to a log file)")


def check_arguments(args) -> None:
    """Kafka's argument checks, made before the cluster is asked anything."""
    command = args.transactions_command
    if command == "abort" and args.start_offset is None:
        if args.producer_id is None:
            raise UsageError("The transaction to abort must be identified either with --start-offset (for "
                             "brokers on 3.0 or above) or with --producer-id, --producer-epoch, and "
                             "--coordinator-epoch (for older brokers)")
        for name in ("producer_epoch", "coordinator_epoch"):
            if getattr(args, name) is None:
                raise UsageError(f"Missing required argument --{name.replace('_', '-')}")
    if command == "find-hanging":
        if args.topic is None and args.broker_id is None:
            raise UsageError("The `find-hanging` command requires either --topic or --broker-id to limit the "
                             "scope of the search")
        if args.partition is not None and args.topic is None:
            raise UsageError("The --partition argument requires --topic to be provided")
        if args.max_transaction_timeout < 0:
            raise UsageError(f"--max-transaction-timeout takes minutes (0 or more), not "
                             f"{args.max_transaction_timeout}")


def cmd_transactions(admin, args, *, out: Callable[[str], None] = print, err: Callable[[str], None] | None = None,
                     now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> int:
    """Runs one subcommand with `admin` (rafka.client.admin.Admin, or anything with
    its transaction calls): tables to `out`, a failure's sentence to `err` (the
    terminal's stderr) and exit code 1; `now_ms()`: the wall clock durations are
    measured by."""
    check_arguments(args)
    command = _COMMANDS[args.transactions_command]
    try:
        return command(admin, args, out, now_ms)
    except _Failed as failed:
        (err or (lambda line: print(line, file=own_stderr())))(str(failed))
        return 1


class _Failed(Exception):
    """A call failed: Kafka's printErrorAndExit sentence."""

    def __init__(self, message: str, error: BaseException | None = None) -> None:
        super().__init__(message if error is None else f"{message}: {error}.")


# --- tables -----------------------------------------------------------------------------

def pretty_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Kafka's ToolsUtils.prettyPrintTable: each cell left-aligned in its column's
    width (the widest of header and cells) and followed by a tab, one line per row,
    the headers first. No final newline."""
    lines = [list(headers)] + [[str(cell) for cell in row] for row in rows]
    if any(len(line) != len(headers) for line in lines):
        raise ValueError(f"every row needs {len(headers)} cells, one per header")
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return "\n".join("".join(f"{cell.ljust(width)}\t" for cell, width in zip(line, widths)) for line in lines)


def _or_none(value: int) -> object:
    """An optional value Kafka prints as "None" when absent (-1 on the wire)."""
    return "None" if value < 0 else value


def listing_rows(by_broker: Mapping[int, Sequence]) -> list[tuple]:
    return [(t.transactional_id, broker, t.producer_id, t.state)
            for broker, listings in sorted(by_broker.items()) for t in listings]


def description_row(described, now_ms: int) -> tuple:
    started = described.txn_start_timestamp_ms
    return (described.coordinator_id, described.transactional_id, described.producer_id, described.producer_epoch,
            described.state, described.txn_timeout_ms, _or_none(started),
            "None" if started < 0 else now_ms - started,
            ",".join(f"{topic}-{partition}" for topic, partition in sorted(described.topic_partitions)))


def producer_rows(producers: Iterable[ActiveProducer]) -> list[tuple]:
    return [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp_ms,
             _or_none(p.current_txn_start_offset)) for p in producers]


# --- hanging transactions ---------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class OpenTransaction:
    """A transaction a partition holds open: the partition and its producer's state."""
    partition: TopicPartition
    producer: ActiveProducer


def candidate_transactions(producers_by_partition: Mapping[TopicPartition, Iterable[ActiveProducer]], *,
                           now_ms: int, max_transaction_timeout_ms: int) -> list[OpenTransaction]:
    """The open transactions whose producer wrote last more than the timeout ago
    (no live transaction lasts longer than the coordinators' maximum timeout)."""
    return [OpenTransaction(tp, p) for tp, producers in producers_by_partition.items() for p in producers
            if p.current_txn_start_offset >= 0 and now_ms - p.last_timestamp_ms > max_transaction_timeout_ms]


def hanging_transactions(candidates: Iterable[OpenTransaction], transactional_ids: Mapping[int, str],
                         descriptions: Mapping[str, object | None]) -> list[OpenTransaction]:
    """Those of `candidates` their coordinator will not end: no transactional id
    names the producer (`transactional_ids`: producer id -> id), the id is not
    found (None in `descriptions`), or its transaction does not include the
    partition (DescribeTransactions lists the partitions of an ongoing transaction,
    and those still waiting for a marker of one being completed)."""
    hanging = []
    for candidate in candidates:
        transactional_id = transactional_ids.get(candidate.producer.producer_id)
        described = descriptions.get(transactional_id) if transactional_id is not None else None
        if described is None or (candidate.partition.topic, candidate.partition.partition) \
                not in described.topic_partitions:
            hanging.append(candidate)
    return hanging


def hanging_rows(hanging: Iterable[OpenTransaction], now_ms: int) -> list[tuple]:
    return [(t.partition.topic, t.partition.partition, t.producer.producer_id, t.producer.producer_epoch,
             t.producer.coordinator_epoch, t.producer.current_txn_start_offset, t.producer.last_timestamp_ms,
             (now_ms - t.producer.last_timestamp_ms) // _MS_PER_MINUTE) for t in hanging]


# --- the commands -------------------------------------------------------------------------

def _list(admin, args, out, now_ms) -> int:
    duration_ms = args.duration_filter if args.duration_filter is not None else -1
    try:
        by_broker = admin.list_transactions(duration_ms=duration_ms)
    except KafkaError as error:
        raise _Failed("Failed to list transactions", error) from None
    out(pretty_table(LIST_HEADERS, listing_rows(by_broker)))
    return 0


def _describe(admin, args, out, now_ms) -> int:
    transactional_id = args.transactional_id
    try:
        described = admin.describe_transactions([transactional_id])[transactional_id]
    except KafkaError as error:
        described = error
    if isinstance(described, KafkaError):
        raise _Failed(f"Failed to describe transaction state of transactional-id `{transactional_id}`", described)
    out(pretty_table(DESCRIBE_HEADERS, [description_row(described, now_ms())]))
    return 0


def _producers_of(admin, tp: TopicPartition, broker_id: int | None, what: str) -> list[ActiveProducer]:
    try:
        return admin.describe_producers([tp], broker_id=broker_id)[tp]
    except KafkaError as error:
        raise _Failed(what, error) from None


def _describe_producers(admin, args, out, now_ms) -> int:
    tp = TopicPartition(args.topic, args.partition)
    where = "leader" if args.broker_id is None else f"broker {args.broker_id}"
    producers = _producers_of(admin, tp, args.broker_id,
                              f"Failed to describe producers for partition {tp.topic}-{tp.partition} on {where}")
    out(pretty_table(PRODUCERS_HEADERS, producer_rows(producers)))
    return 0


def _abort(admin, args, out, now_ms) -> int:
    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is None:
        producer_id, producer_epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
    else:
        producers = _producers_of(admin, tp, None,
                                  f"Failed to validate producer state for partition {tp.topic}-{tp.partition}")
        found = next((p for p in producers if p.current_txn_start_offset == args.start_offset), None)
        if found is None:
            raise _Failed(f"Could not find any open transactions starting at offset {args.start_offset} on "
                          f"partition {tp.topic}-{tp.partition}")
        producer_id, producer_epoch, coordinator_epoch = found.producer_id, found.producer_epoch, \
            found.coordinator_epoch
    # A transaction hanging before its producer's first marker has coordinator epoch
    # -1: 0 is at most any coordinator's epoch (Kafka's rule).
    coordinator_epoch = max(0, coordinator_epoch)
    try:
        admin.abort_transaction(tp.topic, tp.partition, producer_id=producer_id, producer_epoch=producer_epoch,
                                coordinator_epoch=coordinator_epoch)
    except KafkaError as error:
        raise _Failed(f"Failed to abort transaction AbortTransactionSpec(topicPartition={tp.topic}-{tp.partition}, "
                      f"producerId={producer_id}, producerEpoch={producer_epoch}, "
                      f"coordinatorEpoch={coordinator_epoch})", error) from None
    return 0


def _partitions_to_search(admin, args) -> list[TopicPartition]:
    """--topic's partition, or its partitions, or every partition of the topic (all
    topics, internal ones too) with a replica on --broker-id."""
    if args.topic is not None and args.partition is not None:
        return [TopicPartition(args.topic, args.partition)]
    try:
        if args.broker_id is None:
            return admin.topic_partitions(args.topic)
        replicas = admin.replica_brokers(None if args.topic is None else [args.topic])
    except KafkaError as error:
        raise _Failed(f"Failed to describe {'1 topics' if args.topic else 'the topics'}", error) from None
    return [tp for tp, brokers in replicas.items() if args.broker_id in brokers]


def _find_hanging(admin, args, out, now_ms) -> int:
    partitions = _partitions_to_search(admin, args)
    try:
        producers = admin.describe_producers(partitions, broker_id=args.broker_id) if partitions else {}
    except KafkaError as error:
        raise _Failed(f"Failed to describe producers for {len(partitions)} partitions on broker "
                      f"{args.broker_id if args.broker_id is not None else 'leaders'}", error) from None
    candidates = candidate_transactions(producers, now_ms=now_ms(),
                                        max_transaction_timeout_ms=args.max_transaction_timeout * _MS_PER_MINUTE)
    hanging: list[OpenTransaction] = []
    if candidates:
        producer_ids = sorted({c.producer.producer_id for c in candidates})
        try:
            listed = admin.list_transactions(producer_ids=producer_ids)
        except KafkaError as error:
            raise _Failed(f"Failed to list transactions for {len(producer_ids)} producers", error) from None
        transactional_ids = {t.producer_id: t.transactional_id for listings in listed.values() for t in listings
                             if t.producer_id in producer_ids}
        described = admin.describe_transactions(sorted(set(transactional_ids.values()))) if transactional_ids else {}
        descriptions = {}
        for transactional_id, found in described.items():
            if isinstance(found, KafkaError) and not isinstance(found, TransactionalIdNotFound):
                raise _Failed(f"Failed to describe {len(described)} transactions", found)
            descriptions[transactional_id] = None if isinstance(found, KafkaError) else found
        hanging = hanging_transactions(candidates, transactional_ids, descriptions)
    out(pretty_table(HANGING_HEADERS, hanging_rows(hanging, now_ms())))
    return 0


_COMMANDS = {"list": _list, "describe": _describe, "describe-producers": _describe_producers, "abort": _abort,
             "find-hanging": _find_hanging}
