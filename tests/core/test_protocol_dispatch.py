"""ApiVersions end to end through dispatch (bytes in, bytes out, read back with kio
as a client would) and Kafka's answers to unknown keys, unsupported versions and
bad bodies."""

import asyncio
import dataclasses
import datetime
import io
import struct

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i32, i32Timedelta

from rafka.protocol.dispatch import DispatchTable, Dispatcher, Route
from rafka.protocol.errors import (MalformedRequestBody, UnknownApiKey,
                                   UnsupportedApiVersion)
from rafka.protocol.framing import (decode_response_header, encode_request_header,
                                    request_header)
from rafka.protocol.handlers import api_versions

pytestmark = pytest.mark.core

METADATA_KEY = 3


async def metadata_stub(request, context):
    response_type = load_response_schema(METADATA_KEY, context.api_version)
    fields = {"throttle_time": i32Timedelta.parse(datetime.timedelta(0)), "brokers": (),
              "cluster_id": "c", "controller_id": i32(0), "topics": (),
              "cluster_authorized_operations": i32(-2**31)}
    names = {f.name for f in dataclasses.fields(response_type)}
    return response_type(**{k: v for k, v in fields.items() if k in names})


def make_dispatcher() -> Dispatcher:
    return Dispatcher(DispatchTable([api_versions.ROUTE, Route(METADATA_KEY, 10, 12, metadata_stub)]))


def request_frame(api_key: int, api_version: int, body: object | None = None, *,
                  correlation_id: int = 99, client_id: str | None = "test-client",
                  header_version: int | None = None) -> bytes:
    """The bytes a client sends (without the size prefix)."""
    if header_version is None:
        header_version = load_request_schema(api_key, api_version).__header_schema__.__version__
    buffer = io.BytesIO()
    buffer.write(encode_request_header(request_header(
        header_version=header_version, api_key=api_key, api_version=api_version,
        correlation_id=correlation_id, client_id=client_id)))
    if body is not None:
        entity_writer(type(body))(buffer, body)
    return buffer.getvalue()


def read_response(frame: bytes, api_key: int, api_version: int):
    """What a client does: size prefix, response header of the version, the body."""
    (size,) = struct.unpack_from(">i", frame, 0)
    assert size == len(frame) - 4
    response_type = load_response_schema(api_key, api_version)
    header, offset = decode_response_header(frame[4:], header_version=response_type.__header_schema__.__version__)
    body, body_bytes = entity_reader(response_type)(frame[4:], offset)
    assert offset + body_bytes == size
    return header, body


def dispatch(dispatcher: Dispatcher, frame: bytes) -> bytes | None:
    return asyncio.run(dispatcher.dispatch(frame, connection_id="test"))


def advertised(body) -> list[tuple[int, int, int]]:
    return [(k.api_key, k.min_version, k.max_version) for k in body.api_keys]


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions__each_version__lists_exactly_the_dispatch_table(version):
    request_type = load_request_schema(18, version)
    body = (request_type(client_software_name="rafka-test", client_software_version="0.1.0")
            if version >= 3 else request_type())
    frame = dispatch(make_dispatcher(), request_frame(18, version, body, correlation_id=1234))
    header, response = read_response(frame, 18, version)
    assert header.correlation_id == 1234
    assert response.error_code == ErrorCode.none
    assert advertised(response) == [(3, 10, 12), (18, 0, 4)]


def test_api_versions_v3__response_header_is_v0__flexible_body():
    frame = dispatch(make_dispatcher(), request_frame(
        18, 3, load_request_schema(18, 3)(client_software_name="a", client_software_version="1")))
    # size, correlation id (header v0: no tag byte), error 0, compact array of 2 ...
    assert frame[4:8] == (99).to_bytes(4, "big") and frame[8:10] == b"\0\0" and frame[10] == 3


def test_api_versions_v3__bad_client_software_name__invalid_request():
    body = load_request_schema(18, 3)(client_software_name="-bad name", client_software_version="1")
    _, response = read_response(dispatch(make_dispatcher(), request_frame(18, 3, body)), 18, 3)
    assert response.error_code == ErrorCode.invalid_request and response.api_keys == ()


@pytest.mark.parametrize("version", [5, 6, 127, -1])
def test_api_versions__unsupported_version__v0_unsupported_version_with_its_own_range(version):
    # The body is not parsed (Kafka's RequestContext.parseRequest), even when garbage.
    frame = request_frame(18, version, None, header_version=2 if version >= 3 else 1,
                          correlation_id=77) + b"\xff\xfe garbage"
    header, response = read_response(dispatch(make_dispatcher(), frame), 18, 0)
    assert header.correlation_id == 77
    assert response.error_code == ErrorCode.unsupported_version
    assert advertised(response) == [(18, 0, 4)]


def test_unknown_api_key__connection_closed():
    with pytest.raises(UnknownApiKey, match="Unknown API key 0"):   # Produce is not registered
        dispatch(make_dispatcher(), request_frame(0, 9, None))
    with pytest.raises(UnknownApiKey, match="Unknown API key 32767"):
        dispatch(make_dispatcher(), struct.pack(">hhi", 32767, 0, 1) + b"\xff\xff")


@pytest.mark.parametrize("version", [0, 9, 13])
def test_metadata__version_outside_range__connection_closed(version):
    with pytest.raises(UnsupportedApiVersion, match=f"api key 3 with version {version} which is not enabled"):
        dispatch(make_dispatcher(), request_frame(3, version, None, header_version=1))


def test_metadata_v12__end_to_end__stub_response_with_header_v1():
    request_type = load_request_schema(3, 12)
    body = request_type(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    header, response = read_response(dispatch(make_dispatcher(), request_frame(3, 12, body, correlation_id=5)), 3, 12)
    assert header.correlation_id == 5 and response.cluster_id == "c"


@pytest.mark.parametrize("body_hex", [
    "",                         # truncated: no body at all
    "0161",                     # client_software_name "a", then nothing
    "02ff",                     # invalid UTF-8
    "02610261 01",              # both strings, then one tagged field that is not there
])
def test_api_versions_v3__truncated_or_garbage_body__malformed_request_body(body_hex):
    with pytest.raises(MalformedRequestBody, match="apiKey: 18, apiVersion: 3"):
        dispatch(make_dispatcher(), request_frame(18, 3, None) + bytes.fromhex(body_hex))


@pytest.mark.parametrize("topics_count_hex", ["ffffffff0f", "feffffff0f", "ffffff7f"])
def test_metadata_v12__huge_array_count__refused_before_kio_allocates(topics_count_hex):
    # kio 0.6.5 would allocate count * 8 bytes first and abort the process; Kafka's
    # generated readers refuse a count larger than the bytes left, and so do we.
    with pytest.raises(MalformedRequestBody, match="Tried to allocate a collection of size"):
        dispatch(make_dispatcher(), request_frame(3, 12, None) + bytes.fromhex(topics_count_hex) + b"\0\0\0")


def test_metadata_v4__huge_legacy_array_count__refused():
    with pytest.raises(MalformedRequestBody, match="Tried to allocate a collection of size 2147483647"):
        asyncio.run(Dispatcher(DispatchTable([Route(3, 4, 4, metadata_stub)])).dispatch(
            request_frame(3, 4, None) + bytes.fromhex("7fffffff") + b"\0" * 8))


def test_response_header_rule__flexible_v1__api_versions_always_v0():
    for api_key, name in api_key_map.items():
        for version, types in schema_name_map[name].items():
            if EntityType.response not in types:
                continue
            response_type = load_response_schema(api_key, version)
            expected = 0 if api_key == 18 else int(response_type.__flexible__)
            assert response_type.__header_schema__.__version__ == expected, (name, version)


def test_dispatch_table__two_routes_for_one_key__refused():
    with pytest.raises(ValueError, match="two routes for API key 18"):
        DispatchTable([api_versions.ROUTE, api_versions.ROUTE])


def test_route__version_kio_does_not_know__refused_at_construction():
    with pytest.raises(Exception, match="no schema for API key 18 version 5"):
        Route(18, 0, 99, api_versions.handle_api_versions)


def test_bounds__records_walked_by_length__whole_request_ends_where_kio_ends_and_an_overlong_length_is_refused():
    from rafka.protocol import producing
    from rafka.protocol.bounds import DeclaredSizeTooLarge, check_entity
    from rafka.protocol.hot_writers import write_body
    for records in (b"r" * 5000, b"", None):
        request = producing.produce_request(topic="t", partition=0, records=records, acks=-1, timeout_ms=1)
        body = write_body(request)
        assert check_entity(request.entity_type, body, 0, len(body)) == len(body)
        assert entity_reader(request.entity_type)(body, 0)[0].topic_data[0].partition_data[0].records == records
    body = write_body(producing.produce_request(topic="t", partition=0, records=b"r" * 5000, acks=-1, timeout_ms=1))
    with pytest.raises(DeclaredSizeTooLarge, match="the bytes of records of size 5000"):
        check_entity(request.entity_type, body[:-100], 0, len(body) - 100)
