"""A broker's loggers (BROKER_LOGGER configs, KIP-412) judged by kafka-python's
KafkaAdminClient, at a broker's edge on the in-process node (no Ray): what
kafka-configs.sh --entity-type broker-loggers does. The broker answers them
itself (never relayed to the controller), sets the levels of its process's
loggers, and describes their effective levels in Kafka's names."""

import asyncio
import logging

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as incremental_v1
from kio.static.primitive import i8

from rafka.protocol.connection import Connection
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.compat
TIMEOUT_S = 20
PARENT, CHILD = "rafka.protocol.handlers", "rafka.protocol.handlers.fetch"   # CHILD follows PARENT


@pytest.fixture()
def node(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 1}, edge=True) as node:
        yield node


@pytest.fixture()
def admin(node):
    with node.kafka_python_admin(TIMEOUT_S) as client:
        yield client


def loggers(admin, broker="0", names=None):
    from kafka.admin import ConfigResource, ConfigResourceType
    described = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER_LOGGER, broker, names)])
    return described["broker_logger"][broker]


def test_describe__root_and_every_rafka_logger__effective_levels_dynamic_broker_logger_config(node, admin):
    logging.getLogger(PARENT).setLevel(logging.WARNING)
    try:
        described = loggers(admin)
    finally:
        logging.getLogger(PARENT).setLevel(logging.NOTSET)
    assert {"root", PARENT, CHILD, "rafka.core.replica", "rafka.actors.replica"} <= set(described)
    assert described[CHILD]["value"] == described[PARENT]["value"] == "WARN"
    entry = described[CHILD]
    assert (entry["config_source"], entry["read_only"], entry["is_sensitive"]) == (
        "DYNAMIC_BROKER_LOGGER_CONFIG", False, False)
    assert set(loggers(admin, names={"root": None, "no.such.logger": None})) == {"root"}


def test_alter__set_then_delete__the_processs_loggers_follow_and_describe_shows_it(node, admin):
    from kafka.admin import ConfigResource, ConfigResourceType
    before = logging.getLogger(CHILD).getEffectiveLevel()
    result = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER_LOGGER, "0",
                                                 {PARENT: "TRACE", "rafka.core.log": "ERROR"})])
    assert result == {"broker_logger": {"0": "OK"}}
    assert logging.getLogger(CHILD).getEffectiveLevel() == 5 and logging.getLogger("rafka.core.log").level == 40
    described = loggers(admin)
    assert (described[PARENT]["value"], described[CHILD]["value"], described["rafka.core.log"]["value"]) == (
        "TRACE", "TRACE", "ERROR")
    assert node.image().broker_logger_levels == {0: {PARENT: "TRACE", "rafka.core.log": "ERROR"}}
    admin.reset_configs([ConfigResource(ConfigResourceType.BROKER_LOGGER, "0", {PARENT: None})])
    assert logging.getLogger(CHILD).getEffectiveLevel() == before
    assert node.image().broker_logger_levels == {0: {"rafka.core.log": "ERROR"}}


def ask(node, *resources, validate_only=False):
    request = incremental_v1.IncrementalAlterConfigsRequest(resources=tuple(
        incremental_v1.AlterConfigsResource(resource_type=i8(kind), resource_name=name, configs=tuple(
            incremental_v1.AlterableConfig(name=config, config_operation=i8(op), value=value)
            for op, config, value in ops)) for kind, name, ops in resources), validate_only=validate_only)

    async def send():
        connection = await Connection.open("127.0.0.1", node.port)
        try:
            return await connection.request(request)
        finally:
            await connection.close()
    answer = asyncio.run(send())
    return {(r.resource_type, r.resource_name): (r.error_code, r.error_message) for r in answer.responses}


def test_alter__kafkas_refusals_each_resource_whole__validate_only_changes_nothing(node):
    SET, DELETE, APPEND = 0, 1, 2
    valid = "Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN"
    cases = [
        ([(SET, PARENT, "debug")], ErrorCode.invalid_config,
         f"Cannot set the log level of {PARENT} to debug as it is not a supported log level. {valid}"),
        ([(SET, PARENT, "DEBUG"), (SET, "no.such.logger", "DEBUG")], ErrorCode.invalid_config,
         "Logger no.such.logger does not exist!"),
        ([(DELETE, "root", None)], ErrorCode.invalid_request, "Removing the log level of the root logger is not allowed"),
        ([(APPEND, PARENT, "DEBUG")], ErrorCode.invalid_request,
         "APPEND operation is not allowed for the BROKER_LOGGER resource"),
        ([(SET, PARENT, "DEBUG"), (SET, PARENT, "INFO")], ErrorCode.invalid_request, "Error due to duplicate config keys"),
    ]
    for ops, code, message in cases:
        assert ask(node, (8, "0", ops)) == {(8, "0"): (code, message)}, ops
    assert ask(node, (8, "1", [(SET, PARENT, "DEBUG")]), (8, "x", [])) == {
        (8, "1"): (ErrorCode.invalid_request, "Unexpected node id. Expected 0, but received 1"),
        (8, "x"): (ErrorCode.invalid_request, "Node id must be an integer, but it is: x")}
    assert ask(node, (8, "0", [(SET, PARENT, "DEBUG")]), validate_only=True) == {(8, "0"): (ErrorCode.none, None)}
    assert node.image().broker_logger_levels == {} and logging.getLogger(PARENT).level == logging.NOTSET


def test_alter_with_a_topic__the_loggers_answered_by_the_broker_the_topic_relayed_to_the_controller(node):
    """The in-process controller node has no topic administration (NOT_CONTROLLER):
    the topic's answer shows it went there, the loggers' that they did not. The
    answer keeps the request's order, the broker's own item first here."""
    answer = ask(node, (8, "0", [(0, PARENT, "ERROR")]), (2, "orders", [(0, "retention.ms", "60000")]))
    assert answer[(8, "0")] == (ErrorCode.none, None) and logging.getLogger(PARENT).level == logging.ERROR
    assert answer[(2, "orders")][0] == ErrorCode.not_controller
    assert list(answer) == [(8, "0"), (2, "orders")]   # the request's order, as Kafka's broker reassembles it


def test_rafkas_admin_and_cli__describe_and_alter_a_brokers_loggers_and_a_topics_configs(node):
    """`rafka configs` through rafka's Admin over the wire: a broker's loggers to
    that broker, a topic's configs from any broker; a broker no one runs:
    BROKER_NOT_AVAILABLE without asking."""
    from rafka.cli import build_parser
    from rafka.cli_configs import cmd_configs
    from rafka.core.errors import BrokerNotAvailable
    admin = node.wire_admin()

    def configs(*argv):
        lines = []
        assert cmd_configs(admin, build_parser().parse_args(["configs", *argv]), out=lines.append) == 0
        return lines
    assert configs("--alter", "--broker-logger", "0", "--add-config", f"{PARENT}=ERROR") == [
        "Completed updating config for broker-logger 0."]
    assert f"  {CHILD}=ERROR sensitive=false synonyms={{}}" in configs("--describe", "--broker-logger", "0")
    assert logging.getLogger(CHILD).getEffectiveLevel() == logging.ERROR
    assert configs("--describe", "--topic", "orders") == [
        "Dynamic configs for topic orders are:", "  min.insync.replicas=1 sensitive=false synonyms={}"]
    assert len(configs("--describe", "--topic", "orders", "--all")) > 20
    found = admin.describe_configs([(8, "7"), (2, "orders")], names=["retention.ms"])
    assert isinstance(found[(8, "7")], BrokerNotAvailable)
    assert [(c.name, c.value, c.source) for c in found[(2, "orders")]] == [("retention.ms", "604800000", 5)]
