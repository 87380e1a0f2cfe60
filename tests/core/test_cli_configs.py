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
