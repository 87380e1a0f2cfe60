"""Transactions on the cluster: confluent-kafka's (librdkafka's) transactional
producer through the brokers' nodes, the transaction coordinator actor of
`__transaction_state` (R3, min ISR 2) behind them, its markers written to the
partition leaders over the wire, and read_committed / read_uncommitted
consumers; zombie fencing; the coordinator actor killed mid-transaction and a
new one finishing it; a producer killed inside a transaction (aborted at its
timeout) and a partition leader killed inside one; consume-transform-produce
exactly once, on confluent-kafka and on rafka's own clients, with aborted
transactions re-processed; `rafka transactions` (kafka-transactions.sh) listing,
describing, finding and aborting the transactions that hold a partition's LSO."""

import asyncio
import dataclasses
import subprocess
import sys
import time

import pytest
import ray
from kio.schema.errors import ErrorCode

from rafka.actors.replica import NAMESPACE
from rafka.core.actor_names import (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, coordinator_actor_name,
                                    transaction_coordinator_actor_name)
from rafka.core.offsets_schema import partition_for_group
from tests.compat.confluent_reads import read_values
from tests.harness import embedded_cluster, replica, wait_for_leader, wait_until

pytestmark = pytest.mark.cluster

TOPIC = "txn-orders"


@pytest.fixture(scope="module")
def cluster():
    """The module's cluster, its transaction coordinators looking for timed-out
    transactions every 500 ms (Kafka's transaction.abort.timed.out.transaction.
    cleanup.interval.ms is 10 s)."""
    with embedded_cluster(transaction_coordinator_options={"abort_timed_out_transactions_interval_ms": 500}) as c:
        yield c


@pytest.fixture(scope="module")
def coordinator(cluster):
    cluster.admin().create_topic(TOPIC, partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})
    handle = ray.get_actor(transaction_coordinator_actor_name(0), namespace=NAMESPACE)
    wait_until(lambda: ray.get(handle.ping.remote(), timeout=5)["loaded"], what="the transaction coordinator loaded")
    return handle


def transactional_producer(cluster, transactional_id):
    from confluent_kafka import Producer
    return Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": transactional_id,
                     "transaction.timeout.ms": 30_000})


def open_transaction(cluster, transactional_id):
    """A producer of the id in a transaction with `<id>-0` sent to partition 0 and `<id>-1` to 1."""
    producer = transactional_producer(cluster, transactional_id)
    producer.init_transactions(60)
    producer.begin_transaction()
    for p in (0, 1):
        producer.produce(TOPIC, value=b"%s-%d" % (transactional_id.encode(), p), partition=p)
    return producer


def state_of(coordinator, transactional_id):
    return ray.get(coordinator.describe_transaction.remote(transactional_id), timeout=5)


def settle(coordinator, transactional_id, state):
    """The coordinator's state for the id once it is `state` (its markers written)."""
    return wait_until(lambda: (found := state_of(coordinator, transactional_id)).state == state and found,
                      what=f"{transactional_id} reaching {state}")


async def ask_every_broker(cluster, request, login=None) -> list:
    """`request`'s answer from each broker's node, in bootstrap order."""
    from rafka.protocol.connection import Connection
    answers = []
    for address in cluster.bootstrap_servers.split(","):
        host, port = address.rsplit(":", 1)
        connection = await Connection.open(host, int(port), sasl=login)
        try:
            answers.append(await connection.request(request))
        finally:
            await connection.close()
    return answers


def committed_and_all(cluster, prefix):
    """(read_committed values, read_uncommitted values) of the records whose value starts with `prefix`."""
    def mine(values):
        return {p: [v for v in vs if v.startswith(prefix)] for p, vs in values.items()}
    return tuple(mine(read_values(cluster.bootstrap_servers, TOPIC, level)) for level in ("read_committed", "read_uncommitted"))


def test_confluent_kafka__init_commit_abort_commit__read_committed_reads_the_committed_only(cluster, coordinator):
    producer = transactional_producer(cluster, "ck-txn")
    producer.init_transactions(60)
    first = state_of(coordinator, "ck-txn")
    assert (first.state, first.producer_epoch) == ("Empty", 0)

    producer.begin_transaction()
    for i in range(3):
        producer.produce(TOPIC, value=b"ck-c%d" % i, partition=i % 2)
    producer.commit_transaction(60)
    settle(coordinator, "ck-txn", "CompleteCommit")

    producer.begin_transaction()
    producer.produce(TOPIC, value=b"ck-a0", partition=0)
    producer.produce(TOPIC, value=b"ck-a1", partition=1)
    producer.flush(60)
    producer.abort_transaction(60)
    settle(coordinator, "ck-txn", "CompleteAbort")

    producer.begin_transaction()
    producer.produce(TOPIC, value=b"ck-c3", partition=1)
    producer.commit_transaction(60)
    last = settle(coordinator, "ck-txn", "CompleteCommit")
    assert (last.producer_id, last.producer_epoch) == (first.producer_id, 0)

    committed, everything = committed_and_all(cluster, b"ck-")
    assert committed == {0: [b"ck-c0", b"ck-c2"], 1: [b"ck-c1", b"ck-c3"]}
    assert everything == {0: [b"ck-c0", b"ck-c2", b"ck-a0"], 1: [b"ck-c1", b"ck-a1", b"ck-c3"]}


def test_list_and_describe_transactions__through_the_brokers__the_coordinators_broker_answers(cluster, coordinator):
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
    from kio.schema.list_transactions.v1.request import ListTransactionsRequest
    from kio.static.primitive import i64

    from rafka.protocol.connection import Connection
    open_transaction(cluster, "listed").commit_transaction(60)
    settle(coordinator, "listed", "CompleteCommit")

    async def ask(address, request):
        host, port = address.rsplit(":", 1)
        connection = await Connection.open(host, int(port))
        try:
            return await connection.request(request)
        finally:
            await connection.close()
    listing = ListTransactionsRequest(state_filters=("CompleteCommit",), producer_id_filters=(),
                                      duration_filter=i64(-1))
    answers = {address: (asyncio.run(ask(address, listing)),
                         asyncio.run(ask(address, DescribeTransactionsRequest(transactional_ids=("listed",)))))
               for address in cluster.bootstrap_servers.split(",")}
    listed = [(t.transactional_id, t.transaction_state) for listed, _ in answers.values()
              for t in listed.transaction_states]
    assert ("listed", "CompleteCommit") in listed and len(listed) == len(set(listed))   # from one broker only
    described = sorted(described.transaction_states[0].error_code for _, described in answers.values())
    assert described == sorted([ErrorCode.none] + [ErrorCode.not_coordinator] * (len(answers) - 1))


def test_second_producer_with_the_same_id__fences_the_first__nothing_it_wrote_is_visible(cluster, coordinator):
    from confluent_kafka import KafkaError, KafkaException
    first = open_transaction(cluster, "zombie")
    first.flush(60)
    second = transactional_producer(cluster, "zombie")
    second.init_transactions(60)   # aborts the first's open transaction, then bumps the epoch
    assert state_of(coordinator, "zombie").producer_epoch == 2
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(60)
    assert raised.value.args[0].code() == KafkaError._FENCED and raised.value.args[0].fatal()
    second.begin_transaction()
    second.produce(TOPIC, value=b"zombie-s0", partition=1)
    second.commit_transaction(60)
    settle(coordinator, "zombie", "CompleteCommit")
    committed, everything = committed_and_all(cluster, b"zombie-")
    assert committed == {0: [], 1: [b"zombie-s0"]}
    assert everything == {0: [b"zombie-0"], 1: [b"zombie-1", b"zombie-s0"]}


def restart(coordinator):
    """The coordinator actor killed (Ray restarts it); its successor once loaded."""
    before = ray.get(coordinator.ping.remote(), timeout=5)
    ray.kill(coordinator, no_restart=False)
    return wait_until(lambda: (p := ray.get(coordinator.ping.remote(), timeout=5))["pid"] != before["pid"]
                      and p["loaded"] and p, what="the restarted transaction coordinator loading")


def test_coordinator_killed_mid_transaction__the_new_one_loads_it_and_the_commit_completes(cluster, coordinator):
    producer = open_transaction(cluster, "failover")
    producer.flush(60)
    open_before = state_of(coordinator, "failover")
    restart(coordinator)
    loaded = state_of(coordinator, "failover")
    assert (loaded.state, loaded.producer_id, loaded.producer_epoch, loaded.topic_partitions) == (
        "Ongoing", open_before.producer_id, open_before.producer_epoch, frozenset({(TOPIC, 0), (TOPIC, 1)}))
    producer.commit_transaction(60)   # librdkafka finds the coordinator again and ends the transaction
    settle(coordinator, "failover", "CompleteCommit")
    committed, _ = committed_and_all(cluster, b"failover-")
    assert committed == {0: [b"failover-0"], 1: [b"failover-1"]}


def test_coordinator_killed_after_prepare_commit__the_new_one_writes_the_markers(cluster, coordinator):
    """Killed as soon as EndTxn is answered (PrepareCommit written; its markers
    in flight or not sent): the new coordinator, at a higher coordinator epoch,
    completes the commit on every partition (Kafka's failover), and a new
    producer of the id fences the old one."""
    from confluent_kafka import KafkaError, KafkaException
    producer = open_transaction(cluster, "prepared")
    producer.commit_transaction(60)
    before = ray.get(coordinator.ping.remote(), timeout=5)
    restarted = restart(coordinator)
    done = settle(coordinator, "prepared", "CompleteCommit")
    # no leader election here: the epoch rises all the same, so a marker of the
    # killed coordinator still in flight is fenced by those of its successor
    assert restarted["coordinator_epoch"] > before["coordinator_epoch"] >= 0
    committed, _ = committed_and_all(cluster, b"prepared-")
    assert committed == {0: [b"prepared-0"], 1: [b"prepared-1"]}

    successor = transactional_producer(cluster, "prepared")
    successor.init_transactions(60)
    assert state_of(coordinator, "prepared").producer_epoch == done.producer_epoch + 1
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"prepared-zombie", partition=0)
    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(60)
    assert raised.value.args[0].code() == KafkaError._FENCED


def test_transaction_state_leader_killed__the_coordinator_loads_again_at_the_new_epoch_and_the_commit_completes(
        cluster, coordinator):
    """A leader election of __transaction_state-0: the coordinator's shard resigns
    and a new one loads the partition at the new leader epoch (its coordinator
    epoch, which its markers carry); the open transaction survives and commits."""
    producer = open_transaction(cluster, "reelected")
    producer.flush(60)
    before = wait_for_leader(cluster, TRANSACTION_STATE_TOPIC, 0)
    ray.kill(replica(TRANSACTION_STATE_TOPIC, 0, before["leader"]), no_restart=False)
    after = wait_for_leader(cluster, TRANSACTION_STATE_TOPIC, 0, newer_than_epoch=before["leader_epoch"])
    wait_until(lambda: (p := ray.get(coordinator.ping.remote(), timeout=5))["loaded"]
               and p["coordinator_epoch"] >= after["leader_epoch"],
               what="the coordinator loaded again at the new leader epoch")
    assert state_of(coordinator, "reelected").state == "Ongoing"
    producer.commit_transaction(60)
    settle(coordinator, "reelected", "CompleteCommit")
    committed, _ = committed_and_all(cluster, b"reelected-")
    assert committed == {0: [b"reelected-0"], 1: [b"reelected-1"]}


def test_send_offsets_to_transaction__visible_on_commit_not_on_abort__and_after_the_group_coordinator_restarts(
        cluster, coordinator):
    """TxnOffsetCommit to the group's coordinator actor (a transactional batch in
    __consumer_offsets), the transaction coordinator's markers through it to the
    partition's leader; a restarted group coordinator loads the same offsets
    (the markers replayed from the log), nothing of the aborted transaction."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    group = "eos-cluster"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                         "enable.auto.commit": False, "isolation.level": "read_committed"})

    def committed():
        return {tp.partition: tp.offset for tp in consumer.committed(
            [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)], timeout=30)}
    try:
        producer = open_transaction(cluster, "eos-offsets")
        producer.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 5), TopicPartition(TOPIC, 1, 7)],
                                             consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        settle(coordinator, "eos-offsets", "CompleteCommit")
        assert committed() == {0: 5, 1: 7}
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 9)], consumer.consumer_group_metadata(), 60)
        producer.abort_transaction(60)
        settle(coordinator, "eos-offsets", "CompleteAbort")
        assert committed() == {0: 5, 1: 7}
        offsets_partitions = len(cluster.admin().describe_topics([OFFSETS_TOPIC])[OFFSETS_TOPIC]["partitions"])
        group_coordinator = ray.get_actor(coordinator_actor_name(partition_for_group(group, offsets_partitions)),
                                          namespace=NAMESPACE)
        loaded = restart(group_coordinator)
        assert not loaded["load_failed"]

        def committed_again():   # the restarted actor may run on another broker: NOT_COORDINATOR, looked up again
            try:
                return committed()
            except KafkaException:
                return None
        assert wait_until(committed_again, what="the committed offsets after the restart") == {0: 5, 1: 7}
    finally:
        consumer.close()


def test_txn_offset_commit__its_transaction_never_held_the_group__invalid_txn_state__nothing_pending(
        cluster, coordinator):
    """KIP-890 at the group coordinator: a TxnOffsetCommit whose transaction does not
    hold the group's __consumer_offsets partition (its AddOffsetsToTxn never came,
    or the transaction ended before the commit arrived) is written under its
    transactional id, so that partition's leader asks the transaction coordinator
    and refuses it INVALID_TXN_STATE. Before, it went in as a transactional batch no
    coordinator knew of: the group's offset stayed pending for good
    (UNSTABLE_OFFSET_COMMIT to every require_stable fetch)."""
    from rafka.protocol.txn_requests import txn_offset_commit_request
    group = "late-txn-offsets"
    never_added = cluster.producer(transactional_id="late-offsets")
    never_added.init_transactions()   # Empty at its coordinator: nothing added, nothing begun
    request = txn_offset_commit_request("late-offsets", never_added.producer_id, never_added.producer_epoch,
                                        group_id=group, generation_id=-1, member_id="", group_instance_id=None,
                                        offsets={(TOPIC, 0): (3, -1, "")})
    codes = [answer.topics[0].partitions[0].error_code for answer in asyncio.run(ask_every_broker(cluster, request))]
    assert codes.count(ErrorCode.invalid_txn_state) == 1, codes   # the group's coordinator's broker
    assert set(codes) <= {ErrorCode.invalid_txn_state, ErrorCode.not_coordinator}, codes
    offsets_partitions = len(cluster.admin().describe_topics([OFFSETS_TOPIC])[OFFSETS_TOPIC]["partitions"])
    group_coordinator = ray.get_actor(coordinator_actor_name(partition_for_group(group, offsets_partitions)),
                                      namespace=NAMESPACE)
    assert ray.get(group_coordinator.fetch_offsets.remote(group, [(TOPIC, 0)], require_stable=True),
                   timeout=30) == {(TOPIC, 0): None}
    never_added.close()


# A transactional producer in a process of its own, killed (SIGKILL) inside its
# transaction: it wrote to both partitions and never ends it.
KILLED_PRODUCER = """
import sys
from confluent_kafka import Producer
producer = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "killed", "transaction.timeout.ms": 5000})
producer.init_transactions(60)
producer.begin_transaction()
for partition in (0, 1):
    producer.produce(sys.argv[2], value=b"killed-%d" % partition, partition=partition)
producer.flush(60)
print("open", flush=True)
sys.stdin.read()
"""


def test_producer_killed_inside_a_transaction__aborted_at_its_timeout__later_commits_readable_its_records_never(
        cluster, coordinator):
    """Kafka's transaction.timeout.ms: the coordinator aborts (epoch bumped, so the
    dead producer is fenced too) and its ABORT markers move every partition's LSO
    past the dead transaction; a transaction committed after it, held behind that
    LSO until then, is read read_committed."""
    process = subprocess.Popen([sys.executable, "-c", KILLED_PRODUCER, cluster.bootstrap_servers, TOPIC],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "open"
    finally:
        process.kill()
        process.wait()
    opened = state_of(coordinator, "killed")
    assert (opened.state, opened.topic_partitions) == ("Ongoing", frozenset({(TOPIC, 0), (TOPIC, 1)}))
    later = transactional_producer(cluster, "killed-later")
    later.init_transactions(60)
    later.begin_transaction()
    for p in (0, 1):
        later.produce(TOPIC, value=b"killed-later-%d" % p, partition=p)
    later.commit_transaction(60)
    aborted = settle(coordinator, "killed", "CompleteAbort")
    assert aborted.producer_epoch > opened.producer_epoch
    committed, everything = committed_and_all(cluster, b"killed-")
    assert committed == {0: [b"killed-later-0"], 1: [b"killed-later-1"]}
    assert everything == {0: [b"killed-0", b"killed-later-0"], 1: [b"killed-1", b"killed-later-1"]}


def test_partition_leader_killed_inside_a_transaction__the_commit_completes_on_every_partition(cluster, coordinator):
    """The markers go to the partition's new leader (the records it holds were
    replicated with acks=all), so no reader sees a torn transaction."""
    producer = open_transaction(cluster, "leader-lost")
    producer.flush(60)
    before = wait_for_leader(cluster, TOPIC, 0)
    ray.kill(replica(TOPIC, 0, before["leader"]), no_restart=False)
    wait_for_leader(cluster, TOPIC, 0, newer_than_epoch=before["leader_epoch"])
    producer.commit_transaction(60)
    settle(coordinator, "leader-lost", "CompleteCommit")
    committed, everything = committed_and_all(cluster, b"leader-lost-")
    assert committed == everything == {0: [b"leader-lost-0"], 1: [b"leader-lost-1"]}


# --- rafka transactions: hanging transactions found and aborted (issue 28) ----------

def transactions_tool(capsys, line: str) -> list[list[str]]:
    """`rafka transactions ...` run in this driver (its `connect` joins the fixture's
    Ray cluster): the table's rows, cells stripped, the headers first."""
    from rafka.cli import main
    capsys.readouterr()
    assert main(["transactions", *line.split()]) == 0, capsys.readouterr().err
    return [[cell.strip() for cell in row.split("\t")[:-1]] for row in capsys.readouterr().out.splitlines()]


def test_hanging_transactions__rafka_transactions_lists_describes_finds_and_aborts_them__the_lso_moves_on(
        cluster, coordinator, capsys):
    """A confluent-kafka producer left inside a transaction (its coordinator holds it
    Ongoing, with the partition) and a transactional batch of a producer whose
    coordinator never added the partition (what a produce arriving after its
    transaction ended left behind before KIP-890: the leader now asks the
    coordinator and refuses it INVALID_TXN_STATE, and refuses it without a
    transactional id too, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, but to a super
    user, as which it is written here): both hold the partition's
    LSO, so a read_committed reader stops at the first. `rafka transactions` shows
    them as kafka-transactions.sh does; find-hanging reports only the second (the
    coordinator will end the first itself), from the leader and from a
    follower's broker; `abort` ends each by its start offset, and the reader then
    reads the record written between them."""
    from confluent_kafka import Producer

    from rafka.actors.cluster_credential import cluster_login
    from rafka.core.records import ATTR_TRANSACTIONAL, RecordInput, encode_batch
    from tests.core.test_protocol_partitions import produce_request

    topic = "txn-hanging"
    cluster.admin().create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    left_open = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "hanging-open",
                          "transaction.timeout.ms": 900_000})   # the coordinators' maximum: not ended meanwhile
    left_open.init_transactions(60)
    left_open.begin_transaction()
    left_open.produce(topic, value=b"open", partition=0)
    left_open.flush(60)
    plain = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True})
    plain.produce(topic, value=b"between", partition=0)
    assert plain.flush(60) == 0
    never_added = cluster.producer(transactional_id="hanging-never-added")
    never_added.init_transactions()   # Empty at its coordinator: no partition added, nothing begun
    late = dataclasses.replace(produce_request(encode_batch(
        [RecordInput(b"late", b"k", int(time.time() * 1000))], producer_id=never_added.producer_id,
        producer_epoch=never_added.producer_epoch, base_sequence=0, attributes=ATTR_TRANSACTIONAL),
        topic=topic), transactional_id="hanging-never-added")

    def produce_at_the_leader(request, login=None):   # only the leader's broker takes it
        return [answer.responses[0].partition_responses[0].error_code
                for answer in asyncio.run(ask_every_broker(cluster, request, login))]
    refused = produce_at_the_leader(late)   # KIP-890: the coordinator says it is not added
    assert refused.count(ErrorCode.invalid_txn_state) == 1 and ErrorCode.none not in refused, refused
    unverified = dataclasses.replace(late, transactional_id=None)   # refused too, but to a super user
    assert ErrorCode.transactional_id_authorization_failed in produce_at_the_leader(unverified)
    assert produce_at_the_leader(unverified, asyncio.run(cluster_login())).count(0) == 1   # at 2
    assert read_values(cluster.bootstrap_servers, topic, "read_committed", partitions=(0,)) == {0: []}
    opened = state_of(coordinator, "hanging-open")
    assert (opened.state, opened.topic_partitions) == ("Ongoing", frozenset({(topic, 0)}))

    listed = transactions_tool(capsys, "list")
    assert listed[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    rows = {row[0]: row for row in listed[1:]}
    assert rows["hanging-open"][2:] == [str(opened.producer_id), "Ongoing"]
    assert rows["hanging-never-added"][2:] == [str(never_added.producer_id), "Empty"]
    headers, described = transactions_tool(capsys, "describe --transactional-id hanging-open")
    assert headers[-1] == "TopicPartitions" and described[0] == rows["hanging-open"][1]   # the same coordinator
    assert described[1:6] + described[8:] == ["hanging-open", str(opened.producer_id), "0", "Ongoing", "900000",
                                              f"{topic}-0"]
    producers = {row[0]: row for row in transactions_tool(capsys, f"describe-producers --topic {topic} "
                                                                 f"--partition 0")[1:]}
    assert producers[str(opened.producer_id)][5] == "0" and producers[str(never_added.producer_id)][5] == "2"

    def hanging(line):
        return [(row[0], row[1], row[2], row[5]) for row in transactions_tool(capsys, line)[1:] if row[0] == topic]
    expected = [(topic, "0", str(never_added.producer_id), "2")]
    assert hanging(f"find-hanging --topic {topic} --partition 0 --max-transaction-timeout 0") == expected
    partition = cluster.admin().describe_topics([topic])[topic]["partitions"][0]
    leader_broker = partition["brokers"][partition["replicas"].index(partition["leader"])]
    follower_broker = next(b for b in partition["brokers"] if b != leader_broker)
    wait_until(lambda: hanging(f"find-hanging --broker-id {follower_broker} --max-transaction-timeout 0")
               == expected, what="the follower's broker finding the hanging transaction")
    assert hanging(f"find-hanging --topic {topic} --max-transaction-timeout 60") == []   # not that old

    transactions_tool(capsys, f"abort --topic {topic} --partition 0 --start-offset 2")
    assert read_values(cluster.bootstrap_servers, topic, "read_committed", partitions=(0,)) == {0: []}
    transactions_tool(capsys, f"abort --topic {topic} --partition 0 --start-offset 0")
    assert read_values(cluster.bootstrap_servers, topic, "read_committed", partitions=(0,)) == {0: [b"between"]}
    assert read_values(cluster.bootstrap_servers, topic, "read_uncommitted", partitions=(0,)) == {
        0: [b"open", b"between", b"late"]}
    assert all(row[5] == "None" for row in transactions_tool(
        capsys, f"describe-producers --topic {topic} --partition 0")[1:])
    left_open.abort_transaction(60)   # its coordinator ends it too (its marker finds nothing open there)
    settle(coordinator, "hanging-open", "CompleteAbort")
    never_added.close()


# --- consume-transform-produce, exactly once (issue 28's must-show) ------------------
#
# One loop, two clients: an application reads a batch of the input as a group
# member at read_committed, writes each record transformed to the same partition
# of the output in a transaction, and commits the consumed offsets with it
# (send_offsets_to_transaction); every `abort_every`-th transaction it aborts
# instead and rewinds to the group's committed offsets, as a Kafka EOS
# application does. The clients differ only in their adapter (ConfluentApp,
# RafkaApp): poll, begin, produce, commit, abort, committed, seek, end_offsets,
# read_output.

CTP_PARTITIONS = 3
CTP_RECORDS_PER_PARTITION = 12
CTP_BATCH_RECORDS = 4


def transformed(value: bytes) -> bytes:
    return b"out:" + value


def create_ctp_topics(cluster, name):
    """Input and output of 3 partitions at R3 (min ISR 2); the input holds
    CTP_RECORDS_PER_PARTITION plain records per partition, written by an
    idempotent producer (no transaction, so its end offsets are its record counts)."""
    from confluent_kafka import Producer
    admin = cluster.admin()
    for topic in (f"{name}-in", f"{name}-out"):
        admin.create_topic(topic, partitions=CTP_PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True})
    for p in range(CTP_PARTITIONS):
        for i in range(CTP_RECORDS_PER_PARTITION):
            producer.produce(f"{name}-in", value=b"%s-%d-%d" % (name.encode(), p, i), partition=p)
    assert producer.flush(60) == 0
    return f"{name}-in", f"{name}-out"


class ConfluentApp:
    """The application on confluent-kafka (librdkafka)."""

    def __init__(self, cluster, name):
        from confluent_kafka import Consumer, Producer
        self.bootstrap_servers = cluster.bootstrap_servers
        self.input, self.output = create_ctp_topics(cluster, name)
        self.consumer = Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": name,
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest"})
        self.consumer.subscribe([self.input])
        self.producer = Producer({"bootstrap.servers": self.bootstrap_servers, "transactional.id": name,
                                  "transaction.timeout.ms": 30_000, "linger.ms": 5})
        self.producer.init_transactions(60)

    def _partitions(self, offsets=None):
        from confluent_kafka import TopicPartition
        if offsets is None:
            return [TopicPartition(self.input, p) for p in range(CTP_PARTITIONS)]
        return [TopicPartition(self.input, p, o) for p, o in offsets.items()]

    def poll(self):
        messages = self.consumer.consume(CTP_BATCH_RECORDS, 0.5)
        for m in messages:
            assert not m.error(), m.error()
        return [(m.partition(), m.offset(), m.value()) for m in messages]

    def begin(self):
        self.producer.begin_transaction()

    def produce(self, partition, value):
        self.producer.produce(self.output, value=value, partition=partition)

    def commit(self, offsets):
        self.producer.send_offsets_to_transaction(self._partitions(offsets), self.consumer.consumer_group_metadata(),
                                                  60)
        self.producer.commit_transaction(60)

    def abort(self):
        self.producer.flush(60)   # the records on the log, so that read_uncommitted shows them
        self.producer.abort_transaction(60)

    def committed(self):
        return {tp.partition: tp.offset if tp.offset >= 0 else None
                for tp in self.consumer.committed(self._partitions(), timeout=60)}

    def seek(self, offsets):
        for tp in self._partitions(offsets):
            self.consumer.seek(tp)

    def end_offsets(self):
        return {tp.partition: self.consumer.get_watermark_offsets(tp, timeout=30)[1] for tp in self._partitions()}

    def read_output(self, isolation_level):
        return read_values(self.bootstrap_servers, self.output, isolation_level, partitions=range(CTP_PARTITIONS))

    def close(self):
        self.consumer.close()


class RafkaApp:
    """The application on rafka's own Producer and Consumer (rafka.client)."""

    def __init__(self, cluster, name):
        from rafka.core.structs import TopicPartition
        self.cluster = cluster
        self.input, self.output = create_ctp_topics(cluster, name)
        self.tps = [TopicPartition(self.input, p) for p in range(CTP_PARTITIONS)]
        self.consumer = cluster.consumer(group_id=name, isolation_level="read_committed", enable_auto_commit=False,
                                         auto_offset_reset="earliest", fetch_max_wait_ms=100)
        self.consumer.subscribe([self.input])
        self.producer = cluster.producer(transactional_id=name, transaction_timeout_ms=30_000, linger_ms=5)
        self.producer.init_transactions(60)

    def poll(self):
        records = self.consumer.poll(timeout=0.5, max_records=CTP_BATCH_RECORDS)
        return [(r.partition, r.offset, r.value) for r in records]

    def begin(self):
        self.producer.begin_transaction()

    def produce(self, partition, value):
        self.producer.send(self.output, value=value, partition=partition)

    def commit(self, offsets):
        self.producer.send_offsets_to_transaction({self.tps[p]: o for p, o in offsets.items()},
                                                  self.consumer.group_metadata(), 60)
        self.producer.commit_transaction(60)

    def abort(self):
        self.producer.flush(60)   # the records on the log, so that read_uncommitted shows them
        self.producer.abort_transaction(60)

    def committed(self):
        return {tp.partition: None if found is None else found.offset
                for tp, found in self.consumer.committed(self.tps).items()}

    def seek(self, offsets):
        for p, offset in offsets.items():
            self.consumer.seek(self.tps[p], offset)

    def end_offsets(self):
        return {tp.partition: offset for tp, offset in self.consumer.end_offsets(self.tps).items()}

    def read_output(self, isolation_level):
        """Every value of the output, by partition, read from the start by rafka's
        Consumer at `isolation_level` up to the end offset it is given."""
        from rafka.core.structs import TopicPartition
        tps = [TopicPartition(self.output, p) for p in range(CTP_PARTITIONS)]
        with self.cluster.consumer(isolation_level=isolation_level, auto_offset_reset="earliest",
                                   fetch_max_wait_ms=50) as reader:
            reader.assign(tps)
            ends = reader.end_offsets(tps)
            values = {tp.partition: [] for tp in tps}
            deadline_s = time.monotonic() + 60
            while not all(reader.position(tp) >= ends[tp] for tp in tps):
                assert time.monotonic() < deadline_s, f"the output not read to {ends} {isolation_level}: {values}"
                for record in reader.poll(timeout=0.2):
                    values[record.partition].append(record.value)
            return values

    def close(self):
        self.producer.close()
        self.consumer.close()


def consume_transform_produce(app, *, abort_every=3, timeout_s=120.0):
    """Runs the application over the whole input; returns (the transformed values
    written in aborted transactions by partition, transactions). Checks as it goes
    that the input is read in order from where the application stands (nothing
    skipped, nothing twice) and that an abort leaves the group's committed offsets
    where the last commit put them."""
    ends = app.end_offsets()
    committed = {p: None for p in ends}        # the group's offsets, as this application committed them
    position = {}                              # the next input offset to read, of the partitions read so far
    aborted = {p: [] for p in ends}
    transactions = 0
    deadline_s = time.monotonic() + timeout_s
    while any(committed[p] != end for p, end in ends.items()):
        assert time.monotonic() < deadline_s, f"not done in {timeout_s}s: committed {committed}, ends {ends}"
        records = app.poll()
        if not records:
            continue
        transactions += 1
        app.begin()
        for partition, offset, value in records:
            assert offset == position.get(partition, 0), (partition, offset, position)
            position[partition] = offset + 1
            app.produce(partition, transformed(value))
        if transactions % abort_every:
            app.commit(position)
            committed.update(position)
            continue
        app.abort()
        for partition, _, value in records:
            aborted[partition].append(transformed(value))
        assert app.committed() == committed   # the aborted offsets were dropped
        position = {p: offset for p, offset in committed.items() if offset is not None}
        app.seek({p: position.get(p, 0) for p in ends})
    return aborted, transactions


@pytest.mark.parametrize("client", [ConfluentApp, RafkaApp], ids=["confluent-kafka", "rafka"])
def test_consume_transform_produce__aborts_reprocessed__output_holds_every_input_exactly_once(
        cluster, coordinator, client):
    name = f"ctp-{client.__name__.lower()}"
    app = client(cluster, name)
    try:
        aborted, transactions = consume_transform_produce(app)
        ends = app.end_offsets()
        assert ends == {p: CTP_RECORDS_PER_PARTITION for p in range(CTP_PARTITIONS)}
        assert app.committed() == ends
        expected = {p: [transformed(b"%s-%d-%d" % (name.encode(), p, i)) for i in range(CTP_RECORDS_PER_PARTITION)]
                    for p in range(CTP_PARTITIONS)}
        assert sum(map(len, aborted.values())) > 0 and transactions > CTP_PARTITIONS
        assert app.read_output("read_committed") == expected
        everything = app.read_output("read_uncommitted")
        assert {p: sorted(vs) for p, vs in everything.items()} == {
            p: sorted(expected[p] + aborted[p]) for p in expected}
    finally:
        app.close()
