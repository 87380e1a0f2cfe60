"""`rafka configs` as kafka-configs.sh for client quotas, on a stand-in Admin:
the entity each option combination names, the ops, Kafka's lines and usage errors."""

import pytest

from rafka.cli import build_parser
from rafka.cli_configs import cmd_configs
from rafka.cluster_errors import UsageError
from rafka.core.errors import InvalidRequest

pytestmark = pytest.mark.core


class FakeAdmin:
    def __init__(self, result=None, described=()):
        self.altered = []
        self.described = []
        self.result = result
        self.found = list(described)

    def alter_client_quotas(self, entries, validate_only=False):
        self.altered.append(entries)
        return [self.result]

    def describe_client_quotas(self, components, *, strict=False, any_name=frozenset()):
        self.described.append((components, strict, any_name))
        return self.found


def run(argv, admin):
    lines = []
    code = cmd_configs(admin, build_parser().parse_args(["configs", *argv]), out=lines.append)
    return code, lines


def test_alter__user_and_client__entity_ops_and_kafka_line():
    admin = FakeAdmin()
    code, lines = run(["--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                       "--entity-name", "app", "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048",
                       "--delete-config", "request_percentage"], admin)
    assert code == 0 and lines == ["Completed updating config for user alice."]
    assert admin.altered == [[([("user", "alice"), ("client-id", "app")],
                               [("producer_byte_rate", 1024.0), ("consumer_byte_rate", 2048.0),
                                ("request_percentage", None)])]]


def test_alter__default_clients__kafka_line():
    admin = FakeAdmin()
    _, lines = run(["--alter", "--entity-type", "clients", "--entity-default", "--add-config",
                    "consumer_byte_rate=10"], admin)
    assert lines == ["Completed updating default config for clients in the cluster."]
    assert admin.altered[0][0][0] == [("client-id", None)]


def test_alter__refused__typed_error_raised():
    with pytest.raises(InvalidRequest):
        run(["--alter", "--user", "alice", "--add-config", "producer_byte_rate=1.5"],
            FakeAdmin(result=InvalidRequest("producer_byte_rate cannot be a fractional value.")))


@pytest.mark.parametrize("argv, message", [
    (["--alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1"],
     "--entity-name or --entity-default must be specified with each --entity-type for --alter"),
    (["--alter", "--user", "alice"], "At least one of --add-config or --delete-config must be specified"),
    (["--alter", "--user", "alice", "--add-config", "producer_byte_rate"], "must be in the format"),
    (["--describe"], "--entity-type"),
])
def test_usage_errors(argv, message):
    with pytest.raises(UsageError, match=message):
        run(argv, FakeAdmin())


def test_describe__strict_filter__kafka_lines():
    admin = FakeAdmin(described=[([("user", "alice"), ("client-id", None)], {"producer_byte_rate": 1024.0}),
                                 ([("user", "alice")], {"consumer_byte_rate": 5.0, "producer_byte_rate": 7.0})])
    _, lines = run(["--describe", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients"],
                   admin)
    assert admin.described == [([("user", "alice")], True, frozenset({"client-id"}))]
    assert lines == ["Quota configs for user-principal 'alice', the default client-id are producer_byte_rate=1024.0",
                     "Quota configs for user-principal 'alice' are consumer_byte_rate=5.0, producer_byte_rate=7.0"]


class ResourceAdmin:
    """describe_configs / incremental_alter_configs as rafka's Admin answers them."""

    def __init__(self, configs, result=None):
        self.configs = configs   # by resource: [DescribedConfig] or an error
        self.result = result
        self.altered = []

    def describe_configs(self, resources, names=None):
        return {r: self.configs[r] for r in resources}

    def incremental_alter_configs(self, changes, validate_only=False):
        self.altered.append(changes)
        return {r: self.result for r in changes}


def topic_configs():
    from rafka.protocol.config_requests import DescribedConfig
    return {(2, "orders"): [DescribedConfig("segment.ms", "604800000", 5, False, False),
                            DescribedConfig("retention.ms", "60000", 1, False, False),
                            DescribedConfig("cleanup.policy", "compact,delete", 1, False, False)]}


def test_topic__describe_the_topics_own_settings_sorted__all_with_all():
    admin = ResourceAdmin(topic_configs())
    assert run(["--describe", "--topic", "orders"], admin)[1] == [
        "Dynamic configs for topic orders are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={}",
        "  retention.ms=60000 sensitive=false synonyms={}"]
    lines = run(["--describe", "--entity-type", "topics", "--entity-name", "orders", "--all"], admin)[1]
    assert lines[0] == "All configs for topic orders are:" and len(lines) == 4


def test_topic__alter__deletes_first_then_sets__brackets_group_a_list__kafka_line():
    from rafka.core.config import DELETE, SET
    admin = ResourceAdmin(topic_configs())
    code, lines = run(["--alter", "--topic", "orders", "--add-config", "cleanup.policy=[compact,delete],max.message.bytes=2048",
                       "--delete-config", "retention.ms"], admin)
    assert (code, lines) == (0, ["Completed updating config for topic orders."])
    assert admin.altered == [{(2, "orders"): [(DELETE, "retention.ms", ""), (SET, "cleanup.policy", "compact,delete"),
                                              (SET, "max.message.bytes", "2048")]}]


def test_topic__alter__a_config_it_does_not_set_or_an_error__nothing_or_the_typed_error():
    admin = ResourceAdmin(topic_configs())
    with pytest.raises(UsageError, match=r"Invalid config\(s\): segment.ms"):
        run(["--alter", "--topic", "orders", "--delete-config", "segment.ms"], admin)
    assert admin.altered == []
    with pytest.raises(InvalidRequest):
        run(["--alter", "--topic", "orders", "--add-config", "retention.ms=1"],
            ResourceAdmin(topic_configs(), result=InvalidRequest("no")))


def test_broker_logger__every_logger_described__unknown_ones_refused_before_asking():
    from rafka.protocol.config_requests import DescribedConfig
    admin = ResourceAdmin({(8, "1"): [DescribedConfig("root", "INFO", 6, False, False),
                                      DescribedConfig("rafka.core.log", "WARN", 6, False, False)]})
    assert run(["--describe", "--broker-logger", "1"], admin)[1] == [
        "Dynamic configs for broker-logger 1 are:", "  rafka.core.log=WARN sensitive=false synonyms={}",
        "  root=INFO sensitive=false synonyms={}"]
    with pytest.raises(UsageError, match=r"Invalid broker logger\(s\): kafka"):
        run(["--alter", "--broker-logger", "1", "--add-config", "kafka=DEBUG"], admin)
    assert run(["--alter", "--broker-logger", "1", "--add-config", "root=DEBUG"], admin)[1] == [
        "Completed updating config for broker-logger 1."]
    with pytest.raises(UsageError, match="must be a valid integer broker id, but it is: one"):
        run(["--describe", "--entity-type", "broker-loggers", "--entity-name", "one"], admin)
    with pytest.raises(UsageError, match="exactly one named entity"):
        run(["--describe", "--entity-type", "brokers"], admin)
