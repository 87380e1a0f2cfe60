"""A broker's loggers (core.broker_loggers): Kafka's levels on Python's scale,
Kafka's checks and wording, the map kept in the metadata log and applied to a
process's loggers; DescribeConfigs and AlterConfigs of BROKER_LOGGER through a
node's table."""

import asyncio
import logging

import pytest
from kio.schema.alter_configs.v2 import request as legacy_v2
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from rafka.core import broker_loggers
from rafka.core.broker_loggers import LoggerLevels, check_changes, kafka_level_name
from rafka.core.cluster_image import build_image
from rafka.core.config import APPEND, DELETE, SET, SUBTRACT
from rafka.core.errors import InvalidConfig, InvalidRequest
from rafka.core.metadata import ClusterMetadata
from rafka.protocol.dispatch import Dispatcher
from rafka.protocol.handlers.alter_configs import BrokerLoggersHost
from rafka.protocol.node_table import node_table
from tests.core.test_protocol_dispatch import read_response, request_frame

pytestmark = pytest.mark.core
TESTED = "rafka.core.test-broker-loggers"


@pytest.fixture()
def restored():
    levels = LoggerLevels()
    yield levels
    levels.apply({})


def test_levels__kafkas_names_on_pythons_scale__the_nearest_at_or_below():
    assert [kafka_level_name(level) for level in (0, 5, 10, 15, 20, 30, 35, 40, 50, 60)] == [
        "TRACE", "TRACE", "DEBUG", "DEBUG", "INFO", "WARN", "WARN", "ERROR", "FATAL", "FATAL"]


@pytest.mark.parametrize("ops, error, message", [
    ([(SET, "nope", "DEBUG")], InvalidConfig, "Logger nope does not exist!"),
    ([(DELETE, "nope", None)], InvalidConfig, "Logger nope does not exist!"),
    ([(SET, TESTED, "debug")], InvalidConfig, f"Cannot set the log level of {TESTED} to debug as it is not a "
                                             "supported log level. Valid log levels are DEBUG, ERROR, FATAL, INFO, "
                                             "TRACE, WARN"),
    ([(SET, TESTED, "OFF")], InvalidConfig, "to OFF as it is not a supported log level"),
    ([(DELETE, "root", None)], InvalidRequest, "Removing the log level of the root logger is not allowed"),
    ([(SET, TESTED, "INFO"), (APPEND, TESTED, "INFO")], InvalidRequest,
     "APPEND operation is not allowed for the BROKER_LOGGER resource"),
    ([(SUBTRACT, TESTED, "INFO")], InvalidRequest, "SUBTRACT operation is not allowed for the BROKER_LOGGER resource"),
    ([(7, TESTED, "INFO")], InvalidRequest, "Unknown operation type 7 is not allowed for the BROKER_LOGGER resource"),
])
def test_check_changes__kafkas_refusals_in_kafkas_words(ops, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(")):
        check_changes(ops, {"root", TESTED})


@pytest.mark.parametrize("name, broker_id, message", [
    ("", 1, "Broker id must not be empty"),
    ("one", 1, "Broker id must be an integer, but it is: one"),
    (" 1", 1, "Broker id must be an integer, but it is:  1"),
    ("1_0", 10, "Broker id must be an integer, but it is: 1_0"),
    ("2", 1, "Unexpected broker id, expected 1 but received 2"),
])
def test_described_broker__its_own_id_only(name, broker_id, message):
    with pytest.raises(InvalidRequest, match=message):
        broker_loggers.check_described_broker(name, broker_id)


def test_altered_broker__its_own_id_only__as_java_parses_it():
    broker_loggers.check_altered_broker("+1", 1)
    for name, message in (("", "Node id must be an integer, but it is: "), ("2", "Unexpected node id. Expected 1, "
                                                                                "but received 2"),
                          ("99999999999", "Node id must be an integer")):
        with pytest.raises(InvalidRequest, match=message):
            broker_loggers.check_altered_broker(name, 1)


def test_logger_levels__set_applied__deleted_back_to_the_level_before__root_too(restored):
    tested, root = logging.getLogger(TESTED), logging.getLogger()
    tested.setLevel(logging.ERROR)
    root_before = root.level
    try:
        restored.apply({TESTED: "TRACE", "root": "FATAL"})
        assert (tested.level, root.level) == (5, logging.CRITICAL)
        restored.apply({"root": "DEBUG"})
        assert (tested.level, root.level) == (logging.ERROR, logging.DEBUG)
        restored.apply({})
        assert root.level == root_before
    finally:
        tested.setLevel(logging.NOTSET)


def test_metadata__the_map_per_broker_replayed__empty_removes__the_image_carries_it():
    metadata = ClusterMetadata()
    log = []
    for ops in ([(SET, TESTED, "DEBUG"), (SET, "root", "WARN")], [(DELETE, TESTED, None)]):
        records, _ = metadata.handle_alter_broker_loggers(1, ops)
        log += records
        for record in records:
            metadata.replay(record)
    assert metadata.handle_alter_broker_loggers(1, [(SET, "root", "WARN")]) == ([], {"root": "WARN"})
    with pytest.raises(InvalidConfig):
        metadata.handle_alter_broker_loggers(1, [(SET, "root", "LOUD")])
    replayed = ClusterMetadata()
    for record in log:
        replayed.replay(record)
    assert replayed.broker_logger_levels == {1: {"root": "WARN"}}
    assert build_image(replayed, 1).broker_logger_levels == {1: {"root": "WARN"}}
    records, levels = replayed.handle_alter_broker_loggers(1, [(SET, "root", "INFO")])
    records2, _ = ClusterMetadata().handle_alter_broker_loggers(2, [])
    assert levels == {"root": "INFO"} and records2 == []


def describe_frame(*names):
    return request_frame(32, 4, describe_v4.DescribeConfigsRequest(resources=tuple(
        describe_v4.DescribeConfigsResource(resource_type=i8(8), resource_name=name, configuration_keys=None)
        for name in names), include_synonyms=True, include_documentation=True))


def table(broker_loggers_host):
    metadata = ClusterMetadata()
    for record in metadata.handle_start():
        metadata.replay(record)
    image = build_image(metadata, 1)
    return Dispatcher(node_table(image=lambda: image, allocate_producer_id=None, broker_loggers=broker_loggers_host))


def test_describe_configs__the_brokers_own_loggers_only__config_type_and_documentation_unset():
    async def never(broker_id, ops):
        raise AssertionError("not altered")
    dispatcher = table(BrokerLoggersHost(1, never))
    answer = read_response(asyncio.run(dispatcher.dispatch(describe_frame("1", "2", ""))), 32, 4)[1]
    mine, other, empty = answer.results
    assert (mine.error_code, other.error_code, empty.error_code) == (
        ErrorCode.none, ErrorCode.invalid_request, ErrorCode.invalid_request)
    assert (other.error_message, other.configs) == ("Unexpected broker id, expected 1 but received 2", ())
    assert empty.error_message == "Broker id must not be empty"
    entries = {c.name: c for c in mine.configs}
    assert "root" in entries and "rafka.core.broker_loggers" in entries
    entry = entries["rafka.core.broker_loggers"]
    assert (entry.config_source, entry.config_type, entry.documentation, entry.synonyms, entry.read_only) == (
        6, 0, None, (), False)
    alone = read_response(asyncio.run(table(None).dispatch(describe_frame("1"))), 32, 4)[1].results[0]
    assert (alone.error_code, alone.error_message) == (ErrorCode.invalid_request,
                                                       "Unexpected broker id, expected -1 but received 1")


def test_legacy_alter_configs__unknown_resource_type_8_as_kafka__nothing_altered():
    async def never(broker_id, ops):
        raise AssertionError("not altered")
    request = legacy_v2.AlterConfigsRequest(resources=(legacy_v2.AlterConfigsResource(
        resource_type=i8(8), resource_name="1", configs=(legacy_v2.AlterableConfig(name="root", value="DEBUG"),)),),
        validate_only=False)
    answer = read_response(asyncio.run(table(BrokerLoggersHost(1, never)).dispatch(request_frame(33, 2, request))),
                           33, 2)[1]
    assert [(r.error_code, r.error_message) for r in answer.responses] == [
        (ErrorCode.invalid_request, "Unknown resource type 8")]
