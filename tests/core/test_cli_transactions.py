"""`rafka transactions` (kafka-transactions.sh): its arguments and Kafka's messages
for bad ones, its tables laid out as Kafka's ToolsUtils.prettyPrintTable, the
hanging-transaction rule on fakes, and the whole tool on the in-process node
through rafka's Admin: a producer left inside a transaction is listed, described
and its producer shown; a batch its coordinator never heard of is found hanging;
both are aborted by the tool and the last stable offset moves past them."""

from __future__ import annotations

import argparse
import time

import pytest

from rafka.cli import build_parser, main
from rafka.cli_transactions import (DESCRIBE_HEADERS, HANGING_HEADERS, LIST_HEADERS, PRODUCERS_HEADERS,
                                    candidate_transactions, check_arguments, cmd_transactions,
                                    description_row, hanging_rows, hanging_transactions, pretty_table, producer_rows)
from rafka.cluster_errors import UsageError
from rafka.core.errors import InvalidProducerEpoch, TransactionalIdNotFound
from rafka.core.producer_state import ActiveProducer
from rafka.core.structs import TopicPartition
from rafka.core.transaction_shard import TransactionListing
from rafka.protocol.txn_admin_requests import DescribedTransaction

pytestmark = pytest.mark.core
ORDERS_0 = TopicPartition("orders", 0)
MINUTE_MS = 60_000


def parse(line: str) -> argparse.Namespace:
    return build_parser().parse_args(["transactions", *line.split()])


# --- arguments ------------------------------------------------------------------------------

def test_arguments__each_command_and_rafkas_address_before_or_after_it():
    args = parse("abort --topic t --partition 3 --start-offset 17 --address ray://h:1")
    assert (args.transactions_command, args.topic, args.partition, args.start_offset, args.address) == (
        "abort", "t", 3, 17, "ray://h:1")
    assert parse("--address a list --duration-filter 5").address == "a"
    assert parse("list").duration_filter is None
    assert parse("find-hanging --broker-id 2").max_transaction_timeout == 15
    args = parse("describe-producers --topic t --partition 0 --broker-id 1")
    assert (args.broker_id, args.partition) == (1, 0)
    with pytest.raises(SystemExit):   # argparse's own refusals: a required option, a number
        parse("describe")
    with pytest.raises(SystemExit):
        parse("abort --topic t --partition x")


@pytest.mark.parametrize("line, message", [
    ("abort --topic t --partition 0", "The transaction to abort must be identified either with --start-offset "
                                      "(for brokers on 3.0 or above) or with --producer-id, --producer-epoch, "
                                      "and --coordinator-epoch (for older brokers)"),
    ("abort --topic t --partition 0 --producer-id 5 --coordinator-epoch 1", "Missing required argument --producer-epoch"),
    ("abort --topic t --partition 0 --producer-id 5 --producer-epoch 1", "Missing required argument --coordinator-epoch"),
    ("find-hanging", "The `find-hanging` command requires either --topic or --broker-id to limit the scope of the "
                     "search"),
    ("find-hanging --broker-id 1 --partition 0", "The --partition argument requires --topic to be provided"),
    ("find-hanging --topic t --max-transaction-timeout -1", "--max-transaction-timeout takes minutes (0 or more), "
                                                            "not -1"),
])
def test_bad_arguments__usage_error_with_kafkas_message__exit_1_before_ray_is_asked(line, message, capfd):
    with pytest.raises(UsageError) as refused:
        check_arguments(parse(line))
    assert str(refused.value) == message
    assert main(["transactions", *line.split(), "--address", "127.0.0.1:1"]) == 1   # no Ray there: not reached
    assert capfd.readouterr().err.strip() == f"Error while executing transactions command : {message}"


# --- tables ---------------------------------------------------------------------------------

def test_pretty_table__cells_padded_to_the_widest_then_a_tab__as_kafkas_tools():
    assert pretty_table(("A", "LongHeader"), [("xyz", 1), ("b", "None")]) == (
        "A  \tLongHeader\t\n"
        "xyz\t1         \t\n"
        "b  \tNone      \t")
    assert pretty_table(("A",), []) == "A\t"
    with pytest.raises(ValueError):
        pretty_table(("A", "B"), [("only one",)])


def test_rows__none_for_absent_offsets_and_times__durations_from_the_clock():
    described = DescribedTransaction("t1", "Ongoing", 7, 2, 60_000, 1_000, frozenset({("b", 1), ("a", 0)}),
                                     coordinator_id=3)
    assert description_row(described, now_ms=4_000) == (3, "t1", 7, 2, "Ongoing", 60_000, 1_000, 3_000, "a-0,b-1")
    empty = DescribedTransaction("t2", "Empty", 8, 0, 60_000, -1, frozenset(), coordinator_id=0)
    assert description_row(empty, now_ms=4_000)[6:] == ("None", "None", "")
    assert producer_rows([ActiveProducer(7, 2, 11, 900, -1, 40), ActiveProducer(8, 0, -1, 950, 3, -1)]) == [
        (7, 2, -1, 11, 900, 40), (8, 0, 3, -1, 950, "None")]
    assert len(DESCRIBE_HEADERS) == 9 and len(PRODUCERS_HEADERS) == 6 and len(LIST_HEADERS) == 4


def test_hanging_rule__old_open_transactions_their_coordinator_does_not_cover():
    now = 100 * MINUTE_MS
    covered = ActiveProducer(1, 0, 3, now - 20 * MINUTE_MS, 0, 10)     # the coordinator has orders-0 in it
    unknown = ActiveProducer(2, 0, 0, now - 20 * MINUTE_MS, -1, 11)    # no transactional id lists producer 2
    moved_on = ActiveProducer(3, 1, 5, now - 16 * MINUTE_MS, 2, 12)    # its id's transaction is elsewhere
    not_found = ActiveProducer(4, 0, 0, now - 30 * MINUTE_MS, 0, 13)   # its id is gone from the coordinator
    recent = ActiveProducer(5, 0, 0, now - 14 * MINUTE_MS, 0, 14)      # younger than the timeout: not a candidate
    closed = ActiveProducer(6, 0, 0, now - 60 * MINUTE_MS, 0, -1)      # no open transaction
    candidates = candidate_transactions({ORDERS_0: [covered, unknown, moved_on, not_found, recent, closed]},
                                        now_ms=now, max_transaction_timeout_ms=15 * MINUTE_MS)
    assert [c.producer.producer_id for c in candidates] == [1, 2, 3, 4]
    descriptions = {"a": DescribedTransaction("a", "Ongoing", 1, 0, 60_000, 0, frozenset({("orders", 0)})),
                    "c": DescribedTransaction("c", "Ongoing", 3, 1, 60_000, 0, frozenset({("orders", 1)})),
                    "d": None}
    hanging = hanging_transactions(candidates, {1: "a", 3: "c", 4: "d"}, descriptions)
    assert [h.producer.producer_id for h in hanging] == [2, 3, 4]
    assert hanging_rows(hanging[:1], now) == [("orders", 0, 2, 0, -1, 11, now - 20 * MINUTE_MS, 20)]


# --- the commands on a fake admin -------------------------------------------------------------

class FakeAdmin:
    def __init__(self):
        self.listings = {0: [TransactionListing("t1", 7, "Ongoing")], 2: [TransactionListing("t2", 8, "Empty")]}
        self.descriptions = {"t1": DescribedTransaction("t1", "Ongoing", 7, 2, 60_000, 1_000,
                                                        frozenset({("orders", 0)}), coordinator_id=0)}
        self.producers = {ORDERS_0: [ActiveProducer(7, 2, 4, 1_500, -1, 40)]}
        self.aborted = []
        self.abort_error = None

    def list_transactions(self, *, states=(), producer_ids=(), duration_ms=-1):
        self.asked_duration_ms = duration_ms
        return {b: [t for t in ts if not producer_ids or t.producer_id in producer_ids]
                for b, ts in self.listings.items()}

    def describe_transactions(self, ids):
        return {i: self.descriptions.get(i) or TransactionalIdNotFound(f"no {i}") for i in ids}

    def describe_producers(self, partitions, *, broker_id=None):
        self.asked_broker = broker_id
        return {tp: self.producers[tp] for tp in partitions}

    def topic_partitions(self, topic):
        return [ORDERS_0]

    def replica_brokers(self, names=None):
        return {ORDERS_0: [0, 1], TopicPartition("orders", 1): [1, 2]}

    def abort_transaction(self, topic, partition, **spec):
        if self.abort_error is not None:
            raise self.abort_error
        self.aborted.append((topic, partition, spec))


def run(admin, line, now_ms=5_000):
    printed, errors = [], []
    code = cmd_transactions(admin, parse(line), out=printed.append, err=errors.append, now_ms=lambda: now_ms)
    return code, "\n".join(printed), "\n".join(errors)


def test_list_describe_and_describe_producers__kafkas_tables():
    admin = FakeAdmin()
    assert run(admin, "list --duration-filter 10") == (0, pretty_table(LIST_HEADERS, [
        ("t1", 0, 7, "Ongoing"), ("t2", 2, 8, "Empty")]), "")
    assert admin.asked_duration_ms == 10
    assert run(admin, "describe --transactional-id t1") == (0, pretty_table(DESCRIBE_HEADERS, [
        (0, "t1", 7, 2, "Ongoing", 60_000, 1_000, 4_000, "orders-0")]), "")
    assert run(admin, "describe --transactional-id nobody") == (
        1, "", "Failed to describe transaction state of transactional-id `nobody`: TRANSACTIONAL_ID_NOT_FOUND: "
               "no nobody.")
    assert run(admin, "describe-producers --topic orders --partition 0 --broker-id 1") == (
        0, pretty_table(PRODUCERS_HEADERS, [(7, 2, -1, 4, 1_500, 40)]), "")
    assert admin.asked_broker == 1


def test_abort__by_start_offset_finds_the_producer__by_ids_coordinator_epoch_at_least_0():
    admin = FakeAdmin()
    assert run(admin, "abort --topic orders --partition 0 --start-offset 40") == (0, "", "")
    assert run(admin, "abort --topic orders --partition 0 --producer-id 9 --producer-epoch 1 "
                      "--coordinator-epoch -1") == (0, "", "")
    assert admin.aborted == [
        ("orders", 0, dict(producer_id=7, producer_epoch=2, coordinator_epoch=0)),
        ("orders", 0, dict(producer_id=9, producer_epoch=1, coordinator_epoch=0))]
    assert run(admin, "abort --topic orders --partition 0 --start-offset 41") == (
        1, "", "Could not find any open transactions starting at offset 41 on partition orders-0")
    admin.abort_error = InvalidProducerEpoch("the producer moved on")
    assert run(admin, "abort --topic orders --partition 0 --start-offset 40") == (
        1, "", "Failed to abort transaction AbortTransactionSpec(topicPartition=orders-0, producerId=7, "
               "producerEpoch=2, coordinatorEpoch=0): INVALID_PRODUCER_EPOCH: the producer moved on.")
    assert len(admin.aborted) == 2


def test_find_hanging__by_broker__only_partitions_with_a_replica_there__covered_ones_left_out():
    admin = FakeAdmin()
    now = 1_500 + 20 * MINUTE_MS
    assert run(admin, "find-hanging --broker-id 0", now_ms=now) == (0, pretty_table(HANGING_HEADERS, []), "")
    assert admin.asked_broker == 0   # the producer state of broker 0's replicas
    admin.descriptions["t1"] = DescribedTransaction("t1", "Empty", 7, 2, 60_000, -1, frozenset(), coordinator_id=0)
    assert run(admin, "find-hanging --broker-id 0", now_ms=now) == (0, pretty_table(HANGING_HEADERS, [
        ("orders", 0, 7, 2, -1, 40, 1_500, 20)]), "")
    assert run(admin, "find-hanging --topic orders --partition 0 --max-transaction-timeout 21", now_ms=now) == (
        0, pretty_table(HANGING_HEADERS, []), "")


# --- the tool on the in-process node, through rafka's Admin -----------------------------------

def test_in_process__left_open_and_never_added__listed_found_and_aborted__the_lso_moves_past_both(tmp_path):
    from rafka.client.producer import Producer
    from rafka.core.records import ATTR_TRANSACTIONAL, RecordInput, encode_batch
    from tests.core.protocol_node import ProtocolNode

    with ProtocolNode(tmp_path, {"orders": 1}, edge=True) as node:
        admin = node.wire_admin(default_api_timeout_ms=20_000)
        producer = Producer(node.bootstrap, transactional_id="left-open", transaction_timeout_ms=600_000,
                            linger_ms=0)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send("orders", value=b"open", partition=0).result(timeout=20)
            # a transactional batch no coordinator added to a transaction (what a produce
            # that arrived after its transaction ended left behind before KIP-890)
            assert node.append_unverified("orders", 0, encode_batch(
                [RecordInput(b"lost", b"k", int(time.time() * 1000))], producer_id=4242, producer_epoch=0,
                base_sequence=0, attributes=ATTR_TRANSACTIONAL)) == 1
            log = node.endpoints[("orders", 0)].replica.log
            assert (log.last_stable_offset, log.high_watermark) == (0, 2)
            pid = producer.producer_id
            later = int(time.time() * 1000) + MINUTE_MS

            def tool(line):
                return run(admin, line, now_ms=later)
            code, table, _ = tool("list")
            assert code == 0 and [c.strip() for c in table.splitlines()[1].split("\t")] == [
                "left-open", "0", str(pid), "Ongoing", ""]
            code, table, _ = tool("describe --transactional-id left-open")
            row = [cell.strip() for cell in table.splitlines()[1].split("\t")]
            assert code == 0 and row[:6] + row[8:9] == ["0", "left-open", str(pid), "0", "Ongoing", "600000",
                                                        "orders-0"]
            assert 0 < later - int(row[6]) == int(row[7])
            idle = Producer(node.bootstrap, transactional_id="idle", transaction_timeout_ms=60_000)
            idle.init_transactions()   # Empty: no transaction started, its start time -1 on the wire
            code, table, _ = tool("describe --transactional-id idle")
            assert code == 0 and [c.strip() for c in table.splitlines()[1].split("\t")][4:9] == [
                "Empty", "60000", "None", "None", ""]
            idle.close()
            code, table, _ = tool("describe-producers --topic orders --partition 0")
            rows = {int(line.split("\t")[0]): [c.strip() for c in line.split("\t")[:6]]
                    for line in table.splitlines()[1:]}
            assert code == 0 and rows[pid][1:4] + rows[pid][5:] == ["0", "-1", "0", "0"]
            assert rows[4242][5] == "1"

            code, table, _ = tool("find-hanging --topic orders --partition 0 --max-transaction-timeout 0")
            assert code == 0 and [line.split("\t")[2].strip() for line in table.splitlines()[1:]] == ["4242"]
            assert table.splitlines()[1].split("\t")[7].strip() == "1"   # Duration(min)

            assert tool("abort --topic orders --partition 0 --start-offset 1") == (0, "", "")
            assert log.last_stable_offset == 0   # the open transaction from offset 0 still holds it
            refused = tool("abort --topic orders --partition 0 --producer-id 4242 --producer-epoch -1 "
                           "--coordinator-epoch 0")   # an older epoch: refused, nothing written
            assert refused[0] == 1 and "): INVALID_PRODUCER_EPOCH" in refused[2] and log.log_end_offset == 3
            assert tool(f"abort --topic orders --partition 0 --producer-id {pid} --producer-epoch 0 "
                        f"--coordinator-epoch -1") == (0, "", "")
            assert log.last_stable_offset == log.high_watermark == 4   # two markers: every record is stable
            code, table, _ = tool("find-hanging --topic orders --max-transaction-timeout 0")
            assert (code, table) == (0, pretty_table(HANGING_HEADERS, []))
            assert tool("describe-producers --topic nope --partition 0")[2].startswith(
                "Failed to describe producers for partition nope-0 on leader: UNKNOWN_TOPIC_OR_PARTITION")
        finally:
            producer.close()
