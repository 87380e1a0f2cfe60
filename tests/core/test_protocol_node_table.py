"""Every node advertises the same APIs (kafka-python takes one node's ApiVersions
for the cluster) and redirects what it does not host with Kafka's codes."""

import asyncio
import datetime

import pytest
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.update_features.v1 import request as update_v1
from kio.static.primitive import i8, i16, i32, i32Timedelta

from rafka.core.cluster_image import EMPTY_IMAGE
from rafka.core.records import RecordInput, encode_batch
from rafka.protocol.dispatch import Dispatcher
from rafka.protocol.node_table import node_table
from tests.core.test_protocol_dispatch import read_response, request_frame

pytestmark = pytest.mark.core


async def never_allocated() -> int:
    raise AssertionError("not asked")


def bare_node() -> Dispatcher:
    return Dispatcher(node_table(image=lambda: EMPTY_IMAGE, allocate_producer_id=never_allocated))


def ask(dispatcher, api_key, version, request):
    frame = asyncio.run(dispatcher.dispatch(request_frame(api_key, version, request)))
    return read_response(frame, api_key, version)[1]


def test_every_node_advertises_the_same_apis():
    hosting_nothing = bare_node().table.supported_api_versions
    assert {r.api_key for r in hosting_nothing} >= {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 22,
                                                     23, 32, 37, 42, 47}


def test_a_node_hosting_nothing_redirects_with_kafkas_codes():
    node = bare_node()
    timeout = i32Timedelta.parse(datetime.timedelta(seconds=1))
    produced = ask(node, 0, 9, produce_v9.ProduceRequest(transactional_id=None, acks=i16(-1), timeout=timeout,
                                                         topic_data=(produce_v9.TopicProduceData(
                                                             name="t", partition_data=(produce_v9.PartitionProduceData(
                                                                 index=i32(0), records=encode_batch(
                                                                     [RecordInput(b"v")])),)),)))
    assert produced.responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
    beat = ask(node, 12, 4, HeartbeatRequest(group_id="g", generation_id=i32(1), member_id="m",
                                             group_instance_id=None))
    assert beat.error_code == ErrorCode.not_coordinator
    created = ask(node, 19, 7, create_v7.CreateTopicsRequest(topics=(create_v7.CreatableTopic(
        name="t", num_partitions=i32(1), replication_factor=i16(1), assignments=(), configs=()),),
        timeout=timeout, validate_only=False))
    assert created.topics[0].error_code == ErrorCode.not_controller
    featured = ask(node, 57, 1, update_v1.UpdateFeaturesRequest(feature_updates=(update_v1.FeatureUpdateKey(
        feature="group.version", max_version_level=i16(1), upgrade_type=i8(1)),), validate_only=False))
    assert (featured.error_code, featured.results) == (ErrorCode.not_controller, ())
