"""The CLI on a Ray cluster started by hand, as an operator would after `ray up`:
`rafka up --sasl`, `status`, `topics --create/--list/--describe/--delete`, `users`, `lag`, `down`.

`up`, `down`, `broker-id`, `lag --watch` and the first `status` run as processes of
their own, as an operator runs them; the other commands run in one CLI session
process (tests/cli_session.py: the same `main`, stdin, stdout, stderr and quiet
mode, one Ray driver connection for all of them instead of one each: ~3 s a
command)."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from tests.cli_session import CliSessions
from rafka.placement.groups import BROKER_RESOURCE

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("rafka-data")


@pytest.fixture(scope="module")
def ray_address(data_dir):
    """Two broker nodes started as cluster.yaml starts them: `rafka broker-id` gives
    each its id from its log dir (here one data dir holds both: ids are explicit)."""
    from ray.cluster_utils import Cluster
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for broker_id in range(2):
        done = subprocess.run([sys.executable, "-m", "rafka.cli", "broker-id", "--data-dir",
                               str(data_dir / f"host-{broker_id}"), "--broker-id", str(broker_id)],
                              capture_output=True, text=True, timeout=60, check=True)
        assert done.stdout == f"{broker_id}\n"
        (data_dir / f"host-{broker_id}" / f"broker-{broker_id}").rename(data_dir / f"broker-{broker_id}")
        cluster.add_node(num_cpus=1, resources={BROKER_RESOURCE: 1}, labels={"rafka-broker-id": done.stdout.strip()})
    cluster.wait_for_nodes()
    yield cluster.address
    cluster.shutdown()


_sessions = CliSessions()


@pytest.fixture(scope="module", autouse=True)
def _close_sessions(ray_address):   # before the Ray cluster stops
    yield
    _sessions.close()


def rafka(address, *args, stdin=None):
    """`rafka <args>` in the module's CLI session: (exit code, stdout, stderr)."""
    return _sessions.run(address, *args, stdin=stdin)


def rafka_process(address, *args, stdin=None):
    """`rafka <args>` as a process of its own."""
    env = dict(os.environ, RAY_ADDRESS=address)
    done = subprocess.run([sys.executable, "-m", "rafka.cli", *args], env=env, capture_output=True,
                          text=True, timeout=120, input=stdin)
    return done.returncode, done.stdout, done.stderr


def offsets_table(out):
    """{partition: (CURRENT-OFFSET, LOG-END-OFFSET, LAG)} from --describe's table."""
    lines = [line for line in out.splitlines() if line.strip()]
    header = lines.index(next(line for line in lines if line.startswith("GROUP ")))
    assert lines[header].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                     "CONSUMER-ID", "HOST", "CLIENT-ID"]
    return {int(cells[2]): tuple(cells[3:6]) for cells in (line.split() for line in lines[header + 1:])}


def replicas_drop_behind_bytes(address) -> set:
    """The log_drop_behind_bytes every replica actor's log runs with (`rafka up`'s
    option, through the controller), asked from a driver of its own."""
    probe = (
        "import ray\n"
        "from rafka.core.actor_names import NAMESPACE\n"
        "ray.init(address=%r, namespace=NAMESPACE, logging_level='ERROR', log_to_driver=False)\n"
        "names = [a['name'] for a in ray.util.list_named_actors(all_namespaces=True) if a['name'].startswith('replica:')]\n"
        "got = ray.get([ray.get_actor(n).__ray_call__.remote(lambda self: self.replica.log.drop_behind_bytes "
        "if self.replica else None) for n in names])\n"
        "print(sorted({g for g in got if g is not None}))\n") % address
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def check_group_commands(address):
    """console-producer / console-consumer with a group, then kafka-consumer-groups's
    --list, --describe, --reset-offsets (dry run, execute, refused while Stable),
    dump-offsets and --delete, on the topic `clicks` (2 partitions)."""
    code, _, _ = rafka(address, "console-producer", "--topic", "clicks", "--key-separator", ":",
                       stdin="".join(f"user-{i}:click-{i}\n" for i in range(6)))
    assert code == 0
    code, out, err = rafka(address, "console-consumer", "--topic", "clicks", "--group", "readers",
                           "--from-beginning", "--max-messages", "6")
    assert code == 0 and sorted(out.split()) == [f"click-{i}" for i in range(6)]
    assert "Processed a total of 6 messages" in err
    assert "readers" in rafka(address, "consumer-groups", "--list")[1].split()

    code, out, _ = rafka(address, "consumer-groups", "--describe", "--group", "readers")
    assert code == 0 and "Consumer group 'readers' has no active members." in out
    table = offsets_table(out)
    assert set(table) == {0, 1} and all(current == end and lag == "0" for current, end, lag in table.values())
    assert sum(int(end) for _, end, _ in table.values()) == 6

    code, out, err = rafka(address, "consumer-groups", "--reset-offsets", "--group", "readers", "--topic", "clicks",
                           "--to-earliest")
    assert code == 0 and "No action will be performed as the --execute option is missing" in err
    assert [line.split() for line in out.splitlines()[1:]] == [["readers", "clicks", "0", "0"],
                                                               ["readers", "clicks", "1", "0"]]
    assert offsets_table(rafka(address, "consumer-groups", "--describe", "--group", "readers")[1]) == table
    code, out, _ = rafka(address, "consumer-groups", "--reset-offsets", "--group", "readers", "--topic",
                         "clicks:1", "--shift-by", "-1", "--execute")
    assert code == 0
    after = offsets_table(rafka(address, "consumer-groups", "--describe", "--group", "readers")[1])
    assert after[0] == table[0] and after[1] == (str(int(table[1][0]) - 1), table[1][1], "1")
    code, _, err = rafka(address, "consumer-groups", "--reset-offsets", "--group", "readers", "--topic",
                         "clicks:x", "--to-earliest", "--execute")
    assert code == 1 and "Traceback" not in err
    assert ("Error while executing consumer-groups command : Invalid --topic 'clicks:x': partitions must be "
            "numbers separated by commas, as in clicks:0,1") in err
    assert offsets_table(rafka(address, "consumer-groups", "--describe", "--group", "readers")[1]) == after

    import rafka as rafka_api
    with rafka_api.connect(address).consumer(group_id="readers", session_timeout_ms=6_000) as member:
        member.subscribe(["clicks"])
        member.poll(timeout=0.5)
        code, _, err = rafka(address, "consumer-groups", "--reset-offsets", "--group", "readers", "--topic",
                             "clicks", "--to-earliest", "--execute")
        assert code == 1 and ("Assignments can only be reset if the group 'readers' is inactive, but the "
                              "current state is Stable.") in err
        code, _, err = rafka(address, "consumer-groups", "--delete", "--group", "readers")
        assert code == 1 and "Group 'readers' could not be deleted due to: NON_EMPTY_GROUP" in err
    import ray
    ray.shutdown()

    code, out, _ = rafka(address, "dump-offsets")
    assert code == 0 and "[readers,clicks,1]::OffsetAndMetadata(offset=" in out
    assert "readers::GroupMetadata(groupId=readers, generation=" in out
    code, out, _ = rafka(address, "consumer-groups", "--delete", "--group", "readers")
    assert (code, out) == (0, "Deletion of requested consumer groups ('readers') was successful.\n")
    code, _, err = rafka(address, "consumer-groups", "--describe", "--group", "readers")
    assert code == 1 and "Consumer group 'readers' does not exist." in err


def lag_tables(out):
    """`rafka lag`'s tables: [(title, {partition: row cells})]."""
    tables = []
    for block in out.strip().split("\n\n"):
        title, header, *rows = block.splitlines()
        assert header.split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                  "CONSUMER-ID", "HOST", "CLIENT-ID", "TIME-LAG", "CONSUME-RATE", "PRODUCE-RATE",
                                  "TREND"]
        tables.append((title, {int(cells[2]): cells for cells in (row.split() for row in rows)}))
    return tables


def check_lag(address):
    """`rafka lag --watch 1 --iterations 2` while a producer writes to `clicks` and
    the group `lagging` stays committed on partition 0 at a record a minute old: the first table has no rates, the second a produce rate,
    no consumption and growing lag; the time lag is that record's age. Without
    --watch: one table, with rates."""
    import rafka as rafka_api
    from rafka.core.structs import TopicPartition
    cluster = rafka_api.connect(address)
    minute_ago_ms = int(time.time() * 1000) - 60_000
    with cluster.producer(acks="all") as producer:
        old = producer.send("clicks", value=b"old", partition=0, timestamp_ms=minute_ago_ms).result().offset
        with cluster.consumer(group_id="lagging", enable_auto_commit=False) as consumer:
            consumer.commit_sync({TopicPartition("clicks", 0): old})
        start = cluster.admin().end_offsets([TopicPartition("clicks", 0)])[TopicPartition("clicks", 0)]
        env = dict(os.environ, RAY_ADDRESS=address)
        watching = subprocess.Popen([sys.executable, "-m", "rafka.cli", "lag", "--group", "lagging", "--watch", "1",
                                     "--iterations", "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
        stop = threading.Event()

        def produce():
            while not stop.is_set():
                producer.send("clicks", value=b"new", partition=0).result()
                time.sleep(0.02)
        writer = threading.Thread(target=produce)
        writer.start()
        try:
            out, err = watching.communicate(timeout=120)
        finally:
            stop.set()
            writer.join()
    assert watching.returncode == 0, err
    (first_title, first), (second_title, second) = lag_tables(out)
    assert first_title.startswith("GROUP lagging at ") and ", consume -, produce -" in first_title
    group, topic, partition, current, end, lag, *owner, time_lag, consume, produce, trend = first[0]
    assert (group, topic, partition, current) == ("lagging", "clicks", "0", str(old)) and owner == ["-", "-", "-"]
    assert int(end) >= start and int(lag) == int(end) - old
    assert time_lag.startswith("1m")      # the record at the committed offset is a minute old
    assert (consume, produce, trend) == ("-", "-", "-")
    *_, end2, lag2, _, _, _, time_lag2, consume2, produce2, trend2 = second[0]
    assert int(end2) > int(end) and int(lag2) == int(end2) - old and trend2 == "growing"
    assert consume2 == "0.0/s" and float(produce2.rstrip("/s")) > 0 and time_lag2.startswith("1m")
    assert "(growing)" in second_title

    code, out, _ = rafka(address, "lag", "--group", "lagging", "--interval", "0.2")
    (title, table), = lag_tables(out)
    assert code == 0 and table[0][-2:] == ["0.0/s", "steady"] and table[0][-3] == "0.0/s"
    code, _, err = rafka(address, "lag", "--group", "nobody")
    assert code == 1 and "Error: Consumer group 'nobody' does not exist." in err
    import ray
    ray.shutdown()


def check_alter_and_reassign(address, data_dir):
    """topics --alter --partitions grows `clicks`; reassign-partitions moves an RF=1
    partition to the other broker, with its records, and --verify reports it done;
    leader-election finds its leader already the preferred one."""
    code, out, _ = rafka(address, "topics", "--alter", "--topic", "clicks", "--partitions", "3")
    assert (code, out) == (0, "Adding partitions succeeded! The topic clicks now has 3 partitions.\n")
    code, _, err = rafka(address, "topics", "--alter", "--topic", "clicks", "--partitions", "2")
    assert code == 1 and "Topic currently has 3 partitions, which is higher than the requested 2." in err
    assert "PartitionCount: 3" in rafka(address, "topics", "--describe", "--topic", "clicks")[1]

    assert rafka(address, "topics", "--create", "--topic", "moving", "--partitions", "1",
                 "--replication-factor", "1")[0] == 0
    assert rafka(address, "console-producer", "--topic", "moving",
                 stdin="".join(f"m-{i}\n" for i in range(5)))[0] == 0
    described = rafka(address, "topics", "--describe", "--topic", "moving")[1]
    source = int(described.splitlines()[1].split("Brokers: ")[1].split("\t")[0])
    plan = data_dir / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "moving", "partition": 0, "replicas": [1 - source]}]}))
    code, out, _ = rafka(address, "reassign-partitions", "--reassignment-json-file", str(plan), "--execute")
    assert (code, out) == (0, "Successfully started partition reassignment for moving-0\n")
    deadline = time.monotonic() + 60
    while rafka(address, "reassign-partitions", "--reassignment-json-file", str(plan), "--verify")[0] != 0:
        assert time.monotonic() < deadline, "the reassignment did not complete"
    code, out, _ = rafka(address, "reassign-partitions", "--reassignment-json-file", str(plan), "--verify")
    assert "Reassignment of partition moving-0 is completed." in out
    assert f"Brokers: {1 - source}" in rafka(address, "topics", "--describe", "--topic", "moving")[1]
    code, out, _ = rafka(address, "console-consumer", "--topic", "moving", "--from-beginning", "--max-messages", "5")
    assert code == 0 and out.split() == [f"m-{i}" for i in range(5)]
    assert not (data_dir / f"broker-{source}" / "moving-0").exists()    # the moved-away log is deleted
    code, out, _ = rafka(address, "leader-election", "--election-type", "preferred", "--topic", "moving",
                         "--partition", "0")
    assert (code, out) == (0, "Valid replica already elected for partitions moving-0\n")
    code, _, err = rafka(address, "leader-election", "--election-type", "unclean", "--topic", "moving")
    assert code == 1 and "Missing required option(s): --partition" in err
    assert rafka(address, "topics", "--delete", "--topic", "moving")[0] == 0


def check_users(address):
    """users --add (password given, or read from stdin), --list, --delete; a
    credential that does not exist is Kafka's RESOURCE_NOT_FOUND."""
    code, out, _ = rafka(address, "users", "--add", "alice", "--password", "alice-secret")
    assert (code, out) == (0, "Set the SCRAM credentials of user alice (SCRAM-SHA-256, SCRAM-SHA-512).\n")
    code, out, _ = rafka(address, "users", "--add", "bob", "--mechanism", "SCRAM-SHA-512", stdin="bob-secret\n")
    assert (code, out) == (0, "Set the SCRAM credentials of user bob (SCRAM-SHA-512).\n")
    assert rafka(address, "users", "--list")[1] == "alice  SCRAM-SHA-256,SCRAM-SHA-512\nbob  SCRAM-SHA-512\n"
    assert rafka(address, "users", "--delete", "alice")[0] == 0
    code, _, err = rafka(address, "users", "--delete", "alice")
    assert code == 1 and "RESOURCE_NOT_FOUND" in err
    code, _, err = rafka(address, "users", "--add", "carol", "--password", "x", "--iterations", "100")
    assert code == 1 and "below SCRAM's minimum" in err
    assert rafka(address, "users", "--list")[1] == "bob  SCRAM-SHA-512\n"


def check_configs(ray_address):
    """kafka-configs.sh for a topic and a broker's loggers: the change holds when
    the command returns, and --describe shows it."""
    code, out, _ = rafka(ray_address, "configs", "--alter", "--topic", "clicks", "--add-config",
                         "retention.ms=60000,cleanup.policy=[compact,delete]")
    assert (code, out) == (0, "Completed updating config for topic clicks.\n")
    code, out, _ = rafka(ray_address, "configs", "--describe", "--topic", "clicks")
    assert (code, out) == (0, "Dynamic configs for topic clicks are:\n"
                              "  cleanup.policy=compact,delete sensitive=false synonyms={}\n"
                              "  min.insync.replicas=2 sensitive=false synonyms={}\n"
                              "  retention.ms=60000 sensitive=false synonyms={}\n")
    code, _, err = rafka(ray_address, "configs", "--alter", "--topic", "clicks", "--delete-config", "segment.ms")
    assert code != 0 and "Invalid config(s): segment.ms" in err
    code, out, _ = rafka(ray_address, "configs", "--alter", "--broker-logger", "1", "--add-config",
                         "rafka.core.replica=DEBUG")
    assert (code, out) == (0, "Completed updating config for broker-logger 1.\n")
    code, out, _ = rafka(ray_address, "configs", "--describe", "--broker-logger", "1")
    assert code == 0 and "  rafka.core.replica=DEBUG sensitive=false synonyms={}\n" in out
    assert rafka(ray_address, "configs", "--alter", "--broker-logger", "1", "--delete-config",
                 "rafka.core.replica")[0] == 0


def test_cli__before_up__status_says_to_run_up(ray_address):
    code, _, err = rafka_process(ray_address, "status")
    assert code == 1 and "rafka is not up" in err and "run `rafka up`" in err


def test_cli__up_topics_status_down(ray_address, data_dir):
    # --sasl: every command below (console clients, groups, users) logs in as the cluster;
    # --listener-port 0: both brokers run on this one host (a port each, not 9092 for both)
    code, out, _ = rafka_process(ray_address, "up", "--data-dir", str(data_dir), "--sasl", "--listener-port", "0",
                         "--replica-pool-size", "2", "--log-drop-behind-bytes", str(1 << 20))
    assert code == 0 and "2 broker node(s)" in out and "controller epoch 1" in out
    assert replicas_drop_behind_bytes(ray_address) == {1 << 20}
    assert "listeners require SASL/SCRAM" in out
    assert "group coordinators: 1" in out and "transaction coordinators: 1" in out

    code, out, _ = rafka(ray_address, "topics", "--create", "--topic", "clicks", "--partitions", "2",
                         "--replication-factor", "2", "--config", "min.insync.replicas=2")
    assert (code, out) == (0, "Created topic clicks.\n")
    code, _, err = rafka(ray_address, "topics", "--create", "--topic", "clicks", "--partitions", "1",
                         "--replication-factor", "1")
    assert code == 1 and "TOPIC_ALREADY_EXISTS: Topic 'clicks' already exists." in err
    code, _, err = rafka(ray_address, "topics", "--create", "--topic", "wide", "--partitions", "1",
                         "--replication-factor", "3")
    assert code == 1 and "larger than available brokers: 2" in err

    assert rafka(ray_address, "topics", "--list")[1] == "__consumer_offsets\n__transaction_state\nclicks\n"
    assert rafka(ray_address, "topics", "--list", "--exclude-internal")[1] == "clicks\n"
    code, out, _ = rafka(ray_address, "topics", "--describe", "--topic", "clicks")
    lines = out.splitlines()
    assert lines[0].startswith("Topic: clicks\tTopicId: ") and "PartitionCount: 2\tReplicationFactor: 2" in lines[0]
    assert "Configs: min.insync.replicas=2" in lines[0]
    assert [line.split("\t")[2] for line in lines[1:]] == ["Partition: 0", "Partition: 1"]
    assert all("LeaderEpoch: 0\tHighWatermark: 0" in line for line in lines[1:])

    code, out, _ = rafka(ray_address, "status")
    assert code == 0 and "brokers:           2" in out and "topics:            3 (4 partitions" in out

    check_group_commands(ray_address)
    check_lag(ray_address)
    check_alter_and_reassign(ray_address, data_dir)
    check_users(ray_address)
    code, out, _ = rafka(ray_address, "features", "describe")
    assert code == 0 and out.startswith("Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
                                        "FinalizedVersionLevel: 1\tEpoch: ")
    code, out, _ = rafka(ray_address, "features", "disable", "--feature", "group.version", "--dry-run")
    assert (code, out) == (0, "group.version can be disabled.\n")
    check_configs(ray_address)

    assert rafka(ray_address, "topics", "--delete", "--topic", "clicks")[0] == 0
    assert rafka(ray_address, "topics", "--list", "--exclude-internal")[1] == ""
    deadline = time.monotonic() + 120   # the pool refills in the background after each creation
    while "ready by broker: 0: 2, 1: 2\n" not in (status := rafka(ray_address, "status")[1]):
        assert time.monotonic() < deadline, status
        time.sleep(0.5)
    assert "replica pool:      2 idle replica actors per broker" in status
    code, out, _ = rafka_process(ray_address, "down")
    # the controller, 2 replicas of __consumer_offsets and 2 of __transaction_state, a group and a
    # transaction coordinator, 2 brokers' nodes, 2 idle replica actors each
    assert code == 0 and "rafka is down: 13 actor(s) stopped" in out
    assert "replicas shut down cleanly: 4 of 4" in out
    assert rafka(ray_address, "status")[0] == 1
