"""`rafka leader-election` and `rafka reassign-partitions` arguments, refused as
Kafka's LeaderElectionCommand and ReassignPartitionsCommand refuse them, before
anything is asked of a cluster; and how results print."""

import json

import pytest

from rafka import cli
from rafka.cli_partitions import cmd_leader_election, election_partitions
from rafka.cluster_errors import UsageError
from rafka.core.errors import ElectionNotNeeded, PreferredLeaderNotAvailable
from rafka.core.structs import TopicPartition

pytestmark = pytest.mark.core


def parsed(*argv):
    return cli.build_parser().parse_args(["leader-election", *argv])


@pytest.mark.parametrize("argv, message", [
    (["--election-type", "preferred"], "One and only one of the following options is required: --topic, "
                                       "--all-topic-partitions, --path-to-json-file"),
    (["--election-type", "preferred", "--topic", "t", "--all-topic-partitions"], "One and only one"),
    (["--election-type", "preferred", "--topic", "t"], "Missing required option(s): --partition"),
    (["--election-type", "preferred", "--all-topic-partitions", "--partition", "0"],
     "Option --partition is only allowed if --topic is used"),
])
def test_leader_election__bad_options__refused_as_kafka(argv, message):
    with pytest.raises(UsageError) as raised:
        election_partitions(parsed(*argv))
    assert message in str(raised.value)


def test_leader_election__election_type_any_case__json_file_read_duplicates_refused(tmp_path):
    assert parsed("--election-type", "Unclean", "--all-topic-partitions").election_type == "UNCLEAN"
    assert election_partitions(parsed("--election-type", "preferred", "--all-topic-partitions")) is None
    assert election_partitions(parsed("--election-type", "preferred", "--topic", "t", "--partition", "2")) == [
        TopicPartition("t", 2)]
    path = tmp_path / "e.json"
    path.write_text(json.dumps({"partitions": [{"topic": "t", "partition": 0}, {"topic": "u", "partition": 1}]}))
    assert election_partitions(parsed("--election-type", "preferred", "--path-to-json-file", str(path))) == [
        TopicPartition("t", 0), TopicPartition("u", 1)]
    path.write_text(json.dumps({"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]}))
    with pytest.raises(UsageError, match="Replica election data contains duplicate partitions: t-0"):
        election_partitions(parsed("--election-type", "preferred", "--path-to-json-file", str(path)))
    path.write_text(json.dumps({"version": 1}))
    with pytest.raises(UsageError, match='Replica election data is missing "partitions" field'):
        election_partitions(parsed("--election-type", "preferred", "--path-to-json-file", str(path)))


class _Elections:
    def __init__(self, results):
        self.results = results
        self.asked = []

    def elect_leaders(self, election_type, partitions):
        self.asked.append((election_type, partitions))
        return self.results


def test_leader_election__results_print_as_kafkas_tool__failures_exit_1(capsys):
    admin = _Elections({TopicPartition("t", 1): None, TopicPartition("t", 0): None,
                        TopicPartition("u", 0): ElectionNotNeeded(),
                        TopicPartition("v", 0): PreferredLeaderNotAvailable("The preferred replica 0 is not alive")})
    printed = []
    assert cmd_leader_election(lambda: admin, parsed("--election-type", "preferred", "--all-topic-partitions"),
                               out=printed.append) == 1
    assert admin.asked == [(0, None)]
    assert printed == [
        "Successfully completed leader election (PREFERRED) for partitions t-0, t-1",
        "Valid replica already elected for partitions u-0",
        "Error completing leader election (PREFERRED) for partition: v-0: PREFERRED_LEADER_NOT_AVAILABLE: "
        "The preferred replica 0 is not alive"]
    assert "1 replica(s) could not be elected" in capsys.readouterr().err


def test_leader_election__bad_options__no_cluster_is_asked():
    asked = []
    with pytest.raises(UsageError):
        cmd_leader_election(lambda: asked.append("admin"), parsed("--election-type", "unclean", "--topic", "t"))
    assert asked == []
