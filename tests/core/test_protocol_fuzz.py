"""Fuzz: generated and mutated frames, derived from valid ApiVersions and Metadata
requests, go through the frame decoder and the dispatcher. Whatever the bytes: no
exception but a ProtocolError, bounded time, and the dispatch table unchanged
(issue 14: no crash, no hang, no state change)."""

import asyncio
import dataclasses
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema

from rafka.protocol.dispatch import Dispatcher
from rafka.protocol.errors import ProtocolError
from rafka.protocol.framing import FrameDecoder, encode_frame
from tests.core.test_protocol_dispatch import make_dispatcher, request_frame

pytestmark = pytest.mark.core

FRAME_MAX_BYTES = 4096
WORK_SECONDS_MAX = 1.0       # per example, far above the ~1 ms a frame takes


def metadata_body(version: int):
    request_type = load_request_schema(3, version)
    topic_type = request_type.__dataclass_fields__["topics"].type.__args__[0].__args__[0] \
        if version >= 1 else request_type.__dataclass_fields__["topics"].type.__args__[0]
    topic_names = {f.name for f in dataclasses.fields(topic_type)}
    topic = topic_type(**{"name": "orders", **({"topic_id": uuid.UUID(int=7)} if "topic_id" in topic_names else {})})
    values = {"topics": (topic, topic), "allow_auto_topic_creation": True,
              "include_cluster_authorized_operations": False, "include_topic_authorized_operations": True}
    return request_type(**{f.name: values[f.name] for f in dataclasses.fields(request_type)})


def api_versions_body(version: int):
    request_type = load_request_schema(18, version)
    return request_type(client_software_name="x", client_software_version="1") if version >= 3 else request_type()


SEEDS = ([request_frame(18, v, api_versions_body(v), correlation_id=v) for v in range(0, 5)]
         + [request_frame(3, v, metadata_body(v), correlation_id=100 + v) for v in range(0, 13)])


@st.composite
def mutated(draw, seeds: list[bytes], min_mutations: int = 0) -> bytes:
    """One of `seeds`, flipped, cut, grown or given huge counts in a few places."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(min_mutations, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "huge_varint"]))
        at = draw(st.integers(0, len(data)))
        if kind == "flip" and data:
            data[min(at, len(data) - 1)] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 4))]
        else:   # the counts that made kio allocate gigabytes
            data[at:at] = draw(st.sampled_from([b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xff", b"\xff\xff\xff\x7f"]))
    return bytes(data)


def mutated_frame():
    return mutated(SEEDS)


def framed(frames: list[bytes], noise: bytes) -> bytes:
    return b"".join(encode_frame(f) for f in frames) + noise


def table_state(dispatcher: Dispatcher):
    table = dispatcher.table
    return (dict(table.routes_by_api_key), table.supported_api_versions)


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def run_connection(loop, dispatcher: Dispatcher, stream: bytes, cuts: list[int]) -> list[bytes]:
    """One connection as the server drives it: decode frames from chunks, dispatch
    each; the first ProtocolError closes the connection."""
    decoder = FrameDecoder(socket_request_max_bytes=FRAME_MAX_BYTES)
    responses, start = [], 0
    try:
        for cut in sorted(set(c % (len(stream) + 1) for c in cuts)) + [len(stream)]:
            for frame in decoder.feed(stream[start:cut]):
                response = loop.run_until_complete(dispatcher.dispatch(frame, connection_id="fuzz"))
                if response is not None:
                    responses.append(response)
            start = cut
    except ProtocolError:
        pass
    return responses


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=st.lists(mutated_frame() | st.binary(max_size=64), min_size=1, max_size=4),
       noise=st.binary(max_size=12), cuts=st.lists(st.integers(0, 5000), max_size=10))
def test_fuzz__mutated_frames__only_protocol_errors__bounded__table_unchanged(loop, frames, noise, cuts):
    dispatcher = make_dispatcher()
    before = table_state(dispatcher)
    started = time.perf_counter()
    run_connection(loop, dispatcher, framed(frames, noise), cuts)
    assert time.perf_counter() - started < WORK_SECONDS_MAX
    assert table_state(dispatcher) == before


@settings(max_examples=200, deadline=None)
@given(prefix=st.binary(min_size=4, max_size=4), rest=st.binary(max_size=64))
def test_fuzz__garbage_stream__only_protocol_errors(loop, prefix, rest):
    dispatcher = make_dispatcher()
    before = table_state(dispatcher)
    run_connection(loop, dispatcher, prefix + rest, [1, 5, 9])
    assert table_state(dispatcher) == before


def test_fuzz__seeds_are_valid__each_gets_its_answer_or_its_close(loop):
    # The unmutated seeds: ApiVersions 0-4 and Metadata 10-12 are answered; Metadata 0-9
    # closes (asserted in test_protocol_dispatch).
    dispatcher = make_dispatcher()
    answered = [s for s in SEEDS if run_connection(loop, dispatcher, encode_frame(s), [])]
    assert len(answered) == 5 + 3
