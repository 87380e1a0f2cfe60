"""Bad input to the clients and the CLI gets a typed error and changes nothing
(DESIGN.md section 6). No Ray cluster: the producer and consumer are built on a
controller that is never called (the checks run before any request), and the CLI
is pointed at an address where nothing listens."""

import argparse
import os
import subprocess
import sys

import pytest

from rafka import cli_groups
from rafka.client.consumer import Consumer
from rafka.client.producer import Producer, record_fields
from rafka.cluster_errors import UsageError
from rafka.core.errors import InvalidConfig, KafkaError, SerializationError

pytestmark = pytest.mark.core


# --- producer.send's arguments ------------------------------------------------------

def test_record_fields__bytes_like_and_none_pass__copies_are_plain_bytes():
    buffer = bytearray(b"value")
    value, key, partition, timestamp_ms, headers = record_fields(
        buffer, memoryview(b"key"), 2, 1_000, [("trace", bytearray(b"t1")), ("empty", None)])
    assert (value, key, partition, timestamp_ms, headers) == (
        b"value", b"key", 2, 1_000, (("trace", b"t1"), ("empty", None)))
    assert type(value) is bytes and type(key) is bytes and type(headers[0][1]) is bytes
    buffer[0:1] = b"V"
    assert value == b"value"  # a later change to the caller's buffer does not reach the record
    assert record_fields(None, None, None, None, None) == (None, None, None, None, ())


@pytest.mark.parametrize("fields, message", [
    (("a str", None, None, None, None),
     "Can't send value of type str: the producer takes bytes, bytearray, memoryview or None (encode a str first)"),
    ((b"v", "a str key", None, None, None),
     "Can't send key of type str: the producer takes bytes, bytearray, memoryview or None (encode a str first)"),
    ((7, None, None, None, None),
     "Can't send value of type int: the producer takes bytes, bytearray, memoryview or None (encode a str first)"),
    ((b"v", None, "1", None, None), "Can't send partition '1' of type str: expected an int or None"),
    ((b"v", None, 1.0, None, None), "Can't send partition 1.0 of type float: expected an int or None"),
    ((b"v", None, True, None, None), "Can't send partition True of type bool: expected an int or None"),
    ((b"v", None, None, 1.5e12, None), "Can't send timestamp_ms 1500000000000.0 of type float: expected an int "
                                       "or None"),
    ((b"v", None, None, None, {"trace": b"t"}), "Can't send headers of type dict: expected a list of "
                                                "(str, bytes or None) pairs"),
    ((b"v", None, None, None, [("trace", b"t", b"x")]), "Can't send header ('trace', b't', b'x'): expected a "
                                                        "(str, bytes or None) pair"),
    ((b"v", None, None, None, [(b"trace", b"t")]), "Can't send header (b'trace', b't'): expected a "
                                                   "(str, bytes or None) pair"),
    ((b"v", None, None, None, [("trace", "t")]), "Can't send the value of header 'trace' of type str: the producer "
                                                 "takes bytes, bytearray, memoryview or None (encode a str first)"),
    ((b"v", None, None, None, [("\udc80", b"t")]), "Can't send header key '\\udc80': not encodable as UTF-8"),
    ((b"v", None, None, 2 ** 63, None), "Can't send timestamp_ms 9223372036854775808: expected 0 <= timestamp_ms "
                                        "< 2**63"),
    ((b"v", None, None, -5, None), "Can't send timestamp_ms -5: expected 0 <= timestamp_ms < 2**63"),
])
def test_record_fields__not_bytes_like_or_int__serialization_error(fields, message):
    with pytest.raises(SerializationError) as raised:
        record_fields(*fields)
    assert raised.value.message == message
    assert not raised.value.retriable
    assert isinstance(raised.value, (KafkaError, TypeError))


def test_producer_send__str_value__serialization_error_nothing_queued_sender_running():
    producer = Producer(None, acks=1)  # no idempotence: the constructor asks the controller nothing
    try:
        for bad in (dict(value="a str"), dict(value=b"v", key="k"), dict(value=b"v", partition="0"),
                    dict(value=b"v", headers=[("h", "v")])):
            with pytest.raises(SerializationError):
                producer.send("orders", **bad)
        assert (producer._buffered_bytes, producer._open, dict(producer._ready)) == (0, {}, {})
        assert producer._loop.is_running()   # the sender's loop
    finally:
        producer.close(timeout=5)
    assert producer._loop.is_closed()


# --- consumer configs -----------------------------------------------------------------

@pytest.mark.parametrize("options, message", [
    (dict(max_partition_fetch_bytes=0), "Invalid value 0 for configuration max.partition.fetch.bytes: "
                                        "Value must be at least 1"),
    (dict(max_partition_fetch_bytes=-1), "Invalid value -1 for configuration max.partition.fetch.bytes: "
                                         "Value must be at least 1"),
    (dict(max_partition_fetch_bytes=1.5), "Invalid value 1.5 for configuration max.partition.fetch.bytes: "
                                          "Not a number of type INT"),
    (dict(max_partition_fetch_bytes="lots"), "Invalid value lots for configuration max.partition.fetch.bytes: "
                                             "Not a number of type INT"),
    (dict(max_poll_records=0), "Invalid value 0 for configuration max.poll.records: Value must be at least 1"),
    (dict(max_poll_records=2.5), "Invalid value 2.5 for configuration max.poll.records: Not a number of type INT"),
])
def test_consumer__fetch_size_or_poll_records_below_1__invalid_config_at_construction(options, message):
    with pytest.raises(InvalidConfig) as raised:
        Consumer(None, **options)
    assert raised.value.message == message


def test_consumer__valid_sizes__kept():
    consumer = Consumer(None, max_partition_fetch_bytes=1, max_poll_records=1)
    assert (consumer.max_partition_fetch_bytes, consumer.max_poll_records) == (1, 1)


# --- CLI --------------------------------------------------------------------------------

@pytest.mark.parametrize("text, parsed", [
    ("clicks", ("clicks", None)), ("clicks:", ("clicks", None)), ("clicks:1", ("clicks", [1])),
    ("clicks:0,2", ("clicks", [0, 2])),
])
def test_parse_topic_partitions__kafka_forms(text, parsed):
    assert cli_groups.parse_topic_partitions(text) == parsed


@pytest.mark.parametrize("text, message", [
    ("clicks:x", "Invalid --topic 'clicks:x': partitions must be numbers separated by commas, as in clicks:0,1"),
    ("clicks:0,,1", "Invalid --topic 'clicks:0,,1': partitions must be numbers separated by commas, "
                    "as in clicks:0,1"),
    ("clicks:-1", "Invalid --topic 'clicks:-1': partitions must be numbers separated by commas, as in clicks:0,1"),
    (":0", "Invalid --topic ':0': expected T or T:0,1 (a topic, then partition numbers)"),
])
def test_parse_topic_partitions__not_numbers__usage_error(text, message):
    with pytest.raises(UsageError) as raised:
        cli_groups.parse_topic_partitions(text)
    assert str(raised.value) == message


class RecordingAdmin:
    """An admin that records every call: a usage error must come before any."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.calls.append(name)


def test_reset_offsets__bad_topic_partitions__usage_error_before_the_cluster_is_asked():
    parser = argparse.ArgumentParser()
    cli_groups.add_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["consumer-groups", "--reset-offsets", "--group", "readers", "--topic", "clicks:x",
                              "--to-earliest", "--execute"])
    admin = RecordingAdmin()
    with pytest.raises(UsageError, match="Invalid --topic 'clicks:x'"):
        cli_groups.cmd_consumer_groups(admin, args)
    assert admin.calls == []


def test_cli__no_ray_cluster_at_the_address__one_error_line_exit_1():
    """ray.init only connects to an address it is given (it starts no cluster);
    nothing listens on port 1. Ray's connect retries are cut short here."""
    env = dict(os.environ, RAY_ADDRESS="127.0.0.1:1", RAY_NUM_REDIS_GET_RETRIES="1",
               RAY_py_gcs_connect_timeout_s="1", RAY_gcs_rpc_server_connect_timeout_s="1")
    done = subprocess.run([sys.executable, "-m", "rafka.cli", "topics", "--list"], env=env, capture_output=True,
                          text=True, timeout=120)
    expected = "Error: no Ray cluster at '127.0.0.1:1': start one with `ray start --head` or pass --address"
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    # Ray's own C++ client logs its failed attempts (timestamped "W" lines) before it gives up
    ours = [line for line in done.stderr.splitlines() if not line.startswith("[")]
    assert ours == [expected], done.stderr


def test_producer__unknown_compression_type__value_error_before_anything_starts():
    with pytest.raises(ValueError, match="compression_type"):
        Producer(None, acks=1, compression_type="brotli")
