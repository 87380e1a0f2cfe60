"""The data path's hand-written writers (protocol.hot_writers, and the headers
framing packs) write exactly the bytes kio's generic writer writes, for any
entity of their type: kio's writer is the reference."""

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
from kio.schema.produce.v9 import request as produce_request
from kio.schema.produce.v9 import response as produce_response
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from rafka.protocol.framing import encode_request_header, encode_response_header, pack_request_header
from rafka.protocol.hot_writers import WRITERS, write_body

pytestmark = pytest.mark.core

int8s = st.integers(-2**7, 2**7 - 1).map(i8)
int16s = st.integers(-2**15, 2**15 - 1).map(i16)
int32s = st.integers(-2**31, 2**31 - 1).map(i32)
int64s = st.integers(-2**63, 2**63 - 1).map(i64)
millis = st.integers(0, 2**31 - 1).map(lambda ms: i32Timedelta.parse(datetime.timedelta(milliseconds=ms)))
names = st.text(min_size=0, max_size=20)
records = st.none() | st.binary(max_size=300)
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

produce_responses = st.builds(
    produce_response.ProduceResponse, throttle_time=millis, responses=tuples(st.builds(
        produce_response.TopicProduceResponse, name=names, partition_responses=tuples(st.builds(
            produce_response.PartitionProduceResponse, index=int32s, error_code=errors, base_offset=int64s,
            log_append_time=st.none() | st.datetimes(
                min_value=datetime.datetime(1971, 1, 1), max_value=datetime.datetime(2200, 1, 1),
                timezones=st.just(datetime.timezone.utc)).map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)),
            log_start_offset=int64s, error_message=st.none() | names,
            record_errors=tuples(st.builds(produce_response.BatchIndexAndErrorMessage, batch_index=int32s,
                                           batch_index_error_message=st.none() | names)))))))

fetch_requests = st.builds(
    fetch_request.FetchRequest, cluster_id=st.none() | names, replica_id=int32s, max_wait=millis,
    min_bytes=int32s, max_bytes=int32s, isolation_level=int8s, session_id=int32s, session_epoch=int32s,
    topics=tuples(st.builds(fetch_request.FetchTopic, topic=names, partitions=tuples(st.builds(
        fetch_request.FetchPartition, partition=int32s, current_leader_epoch=int32s, fetch_offset=int64s,
        last_fetched_epoch=int32s, log_start_offset=int64s, partition_max_bytes=int32s)))),
    forgotten_topics_data=tuples(st.builds(fetch_request.ForgottenTopic, topic=names,
                                           partitions=tuples(int32s))),
    rack_id=names)

fetch_responses = st.builds(
    fetch_response.FetchResponse, throttle_time=millis, error_code=errors, session_id=int32s,
    responses=tuples(st.builds(fetch_response.FetchableTopicResponse, topic=names, partitions=tuples(st.builds(
        fetch_response.PartitionData, partition_index=int32s, error_code=errors, high_watermark=int64s,
        last_stable_offset=int64s, log_start_offset=int64s,
        diverging_epoch=st.just(fetch_response.EpochEndOffset()) | st.builds(
            fetch_response.EpochEndOffset, epoch=int32s, end_offset=int64s),
        current_leader=st.just(fetch_response.LeaderIdAndEpoch()) | st.builds(
            fetch_response.LeaderIdAndEpoch, leader_id=int32s, leader_epoch=int32s),
        snapshot_id=st.just(fetch_response.SnapshotId()) | st.builds(
            fetch_response.SnapshotId, end_offset=int64s, epoch=int32s),
        aborted_transactions=st.none() | tuples(st.builds(fetch_response.AbortedTransaction,
                                                          producer_id=int64s, first_offset=int64s)),
        preferred_read_replica=int32s, records=records)))))


commit_requests = st.builds(
    commit_request.OffsetCommitRequest, group_id=names, generation_id_or_member_epoch=int32s, member_id=names,
    group_instance_id=st.none() | names, topics=tuples(st.builds(
        commit_request.OffsetCommitRequestTopic, name=names, partitions=tuples(st.builds(
            commit_request.OffsetCommitRequestPartition, partition_index=int32s, committed_offset=int64s,
            committed_leader_epoch=int32s, committed_metadata=st.none() | names)))))

commit_responses = st.builds(
    commit_response.OffsetCommitResponse, throttle_time=millis, topics=tuples(st.builds(
        commit_response.OffsetCommitResponseTopic, name=names, partitions=tuples(st.builds(
            commit_response.OffsetCommitResponsePartition, partition_index=int32s, error_code=errors)))))


def test_every_hand_written_writer_is_tested_here():
    assert set(WRITERS) == {produce_request.ProduceRequest, produce_response.ProduceResponse,
                            fetch_request.FetchRequest, fetch_response.FetchResponse,
                            commit_request.OffsetCommitRequest, commit_response.OffsetCommitResponse}


@settings(max_examples=400, deadline=None)
@given(st.one_of(produce_requests, produce_responses, fetch_requests, fetch_responses, commit_requests,
                 commit_responses))
def test_hot_writer__the_bytes_kio_writes(entity):
    assert write_body(entity) == kio_bytes(entity)


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
