"""The data path's hand-written writers (protocol.hot_writers, and the headers
framing packs) write exactly the bytes kio's generic writer writes, for any
entity of their type, and for the entity an answer written from values stands
for: kio's writer is the reference."""

import datetime
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_request
from kio.schema.fetch.v12 import response as fetch_response
from kio.schema.offset_commit.v8 import request as commit_request
from kio.schema.offset_commit.v8 import response as commit_response
from kio.schema.offset_commit.v9 import request as commit_request_v9
from kio.schema.offset_commit.v9 import response as commit_response_v9
from kio.schema.produce.v9 import request as produce_request
from kio.schema.produce.v9 import response as produce_response
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from rafka.protocol.framing import encode_request_header, encode_response_header, pack_request_header
from rafka.protocol import hot_writers
from rafka.protocol.hot_writers import WRITERS, fetch_answer_v12, produce_answer_v9, write_body

pytestmark = pytest.mark.core

int8s = st.integers(-2**7, 2**7 - 1).map(i8)
int16s = st.integers(-2**15, 2**15 - 1).map(i16)
int32s = st.integers(-2**31, 2**31 - 1).map(i32)
int64s = st.integers(-2**63, 2**63 - 1).map(i64)
millis = st.integers(0, 2**31 - 1).map(lambda ms: i32Timedelta.parse(datetime.timedelta(milliseconds=ms)))
names = st.text(min_size=0, max_size=20)
records = st.none() | st.just(b"") | st.binary(min_size=1, max_size=300)   # null, empty, a set
errors = st.sampled_from(list(ErrorCode))


def tuples(strategy, max_size=3):
    return st.lists(strategy, max_size=max_size).map(tuple)


def kio_bytes(entity) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


produce_requests = st.builds(
    produce_request.ProduceRequest, transactional_id=st.none() | names, acks=int16s, timeout=millis,
    topic_data=tuples(st.builds(produce_request.TopicProduceData, name=names, partition_data=tuples(
        st.builds(produce_request.PartitionProduceData, index=int32s, records=records)))))

fetch_requests = st.builds(
    fetch_request.FetchRequest, cluster_id=st.none() | names, replica_id=int32s, max_wait=millis,
    min_bytes=int32s, max_bytes=int32s, isolation_level=int8s, session_id=int32s, session_epoch=int32s,
    topics=tuples(st.builds(fetch_request.FetchTopic, topic=names, partitions=tuples(st.builds(
        fetch_request.FetchPartition, partition=int32s, current_leader_epoch=int32s, fetch_offset=int64s,
        last_fetched_epoch=int32s, log_start_offset=int64s, partition_max_bytes=int32s)))),
    forgotten_topics_data=tuples(st.builds(fetch_request.ForgottenTopic, topic=names,
                                           partitions=tuples(int32s))),
    rack_id=names)

def commit_requests_of(module):
    return st.builds(
        module.OffsetCommitRequest, group_id=names, generation_id_or_member_epoch=int32s, member_id=names,
        group_instance_id=st.none() | names, topics=tuples(st.builds(
            module.OffsetCommitRequestTopic, name=names, partitions=tuples(st.builds(
                module.OffsetCommitRequestPartition, partition_index=int32s, committed_offset=int64s,
                committed_leader_epoch=int32s, committed_metadata=st.none() | names)))))


def commit_responses_of(module):
    return st.builds(
        module.OffsetCommitResponse, throttle_time=millis, topics=tuples(st.builds(
            module.OffsetCommitResponseTopic, name=names, partitions=tuples(st.builds(
                module.OffsetCommitResponsePartition, partition_index=int32s, error_code=errors)))))


# v9 has v8's fields: one writer serves both versions
commit_requests = commit_requests_of(commit_request) | commit_requests_of(commit_request_v9)
commit_responses = commit_responses_of(commit_response) | commit_responses_of(commit_response_v9)


def test_every_hand_written_writer_is_tested_here():
    """The entity writers below (the request writers from values, produce_request_v9
    and fetch_request_v12, are what two of them call), and the two answers written
    from values further down: a new writer fails here until it is added."""
    assert set(WRITERS) == {produce_request.ProduceRequest, fetch_request.FetchRequest,
                            commit_request.OffsetCommitRequest, commit_response.OffsetCommitResponse,
                            commit_request_v9.OffsetCommitRequest, commit_response_v9.OffsetCommitResponse}
    written = {name for name in dir(hot_writers) if name.endswith(("_v8", "_v9", "_v12"))}
    assert {name for name in written if not name.startswith("kio_")} == {
        "_produce_request_v9", "produce_request_v9", "produce_answer_v9", "_fetch_request_v12",
        "fetch_request_v12", "fetch_answer_v12", "_offset_commit_request_v8", "_offset_commit_response_v8"}


@settings(max_examples=400, deadline=None)
@given(st.one_of(produce_requests, fetch_requests, commit_requests, commit_responses))
def test_hot_writer__the_bytes_kio_writes(entity):
    assert write_body(entity) == kio_bytes(entity)


codes = errors.map(lambda code: code.value)
append_times_ms = st.just(-1) | st.integers(0, 2**42)

record_errors = tuples(st.tuples(int32s, st.none() | names))   # KIP-467: (batch index, message)
produce_answers = tuples(st.tuples(names, tuples(st.tuples(
    int32s, codes, int64s, append_times_ms, int64s, record_errors, st.none() | names))))


@settings(max_examples=400, deadline=None)
@given(produce_answers)
def test_produce_answer_written_from_values__the_bytes_kio_writes_for_that_answer(topics):
    entity = produce_response.ProduceResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), responses=tuple(
            produce_response.TopicProduceResponse(name=name, partition_responses=tuple(
                produce_response.PartitionProduceResponse(
                    index=index, error_code=ErrorCode(code), base_offset=base_offset,
                    log_append_time=None if append_ms < 0 else datetime.datetime.fromtimestamp(
                        append_ms / 1000, tz=datetime.timezone.utc),
                    log_start_offset=log_start, record_errors=tuple(
                        produce_response.BatchIndexAndErrorMessage(batch_index=batch_index,
                                                                   batch_index_error_message=why)
                        for batch_index, why in errors_of_records), error_message=message)
                for index, code, base_offset, append_ms, log_start, errors_of_records, message in partitions))
            for name, partitions in topics))
    written = produce_answer_v9(topics)
    assert written.entity_type is produce_response.ProduceResponse
    assert write_body(written) == kio_bytes(entity)


aborted_transactions = st.none() | tuples(st.tuples(int64s, int64s))   # (producer id, first offset)
fetch_answers = tuples(st.tuples(names, tuples(st.tuples(
    int32s, codes, int64s, int64s, int64s, aborted_transactions, int32s, records,
    st.none() | st.tuples(int32s, int64s)))))   # the diverging epoch: tagged field 0


@settings(max_examples=400, deadline=None)
@given(fetch_answers, codes, int32s)
def test_fetch_answer_written_from_values__the_bytes_kio_writes_for_that_answer(topics, error_code, session_id):
    entity = fetch_response.FetchResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode(error_code),
        session_id=session_id, responses=tuple(
            fetch_response.FetchableTopicResponse(topic=topic, partitions=tuple(
                fetch_response.PartitionData(
                    partition_index=index, error_code=ErrorCode(code), high_watermark=high_watermark,
                    last_stable_offset=last_stable, log_start_offset=log_start,
                    aborted_transactions=None if aborted is None else tuple(
                        fetch_response.AbortedTransaction(producer_id=producer_id, first_offset=first_offset)
                        for producer_id, first_offset in aborted),
                    preferred_read_replica=preferred, records=partition_records,
                    diverging_epoch=fetch_response.EpochEndOffset() if diverging is None else
                    fetch_response.EpochEndOffset(epoch=diverging[0], end_offset=diverging[1]))
                for index, code, high_watermark, last_stable, log_start, aborted, preferred, partition_records,
                diverging in partitions))
            for topic, partitions in topics))
    written = fetch_answer_v12(topics, error_code=error_code, session_id=session_id)
    assert written.entity_type is fetch_response.FetchResponse
    assert write_body(written) == kio_bytes(entity)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([RequestHeaderV1, RequestHeaderV2]), int16s, int16s, int32s, st.none() | names)
def test_request_header__the_bytes_kio_writes(header_type, api_key, api_version, correlation_id, client_id):
    header = header_type(request_api_key=api_key, request_api_version=api_version,
                         correlation_id=correlation_id, client_id=client_id)
    assert encode_request_header(header) == kio_bytes(header) == pack_request_header(
        header_version=header_type.__version__, api_key=api_key, api_version=api_version,
        correlation_id=correlation_id, client_id=client_id)


@given(int32s)
def test_response_header__the_bytes_kio_writes(correlation_id):
    for header_type in (ResponseHeaderV0, ResponseHeaderV1):
        assert encode_response_header(header_version=header_type.__version__, correlation_id=correlation_id) \
            == kio_bytes(header_type(correlation_id=correlation_id))


def test_other_types__written_by_kio():
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    request = ApiVersionsRequest(client_software_name="rafka", client_software_version="1")
    assert write_body(request) == kio_bytes(request)
