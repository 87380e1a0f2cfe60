"""CreateTopics, DeleteTopics and CreatePartitions on the wire, over a stand-in
controller that decides with the real ClusterMetadata handlers."""

import asyncio
import dataclasses
import datetime
import importlib
import random

import pytest
from kio.schema.create_partitions.v3 import request as partitions_v3
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.delete_topics.v6 import request as delete_v6
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i32Timedelta

from rafka.core.cluster_image import build_image
from rafka.core.metadata import ClusterMetadata, id_as_uuid
from rafka.protocol.dispatch import DispatchTable, Dispatcher
from rafka.protocol.handlers import api_versions, topic_admin
from tests.core.test_protocol_dispatch import read_response, request_frame

pytestmark = pytest.mark.core
TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=5))


class StandInController:
    def __init__(self, *, num_partitions=1, default_replication_factor=1):
        self.num_partitions, self.default_replication_factor = num_partitions, default_replication_factor
        self.metadata = ClusterMetadata()
        self._apply(self.metadata.handle_start())

    def _apply(self, records):
        for record in records:
            self.metadata.replay(record)

    def cluster_image(self):
        return build_image(self.metadata, version=1)

    async def create_topic(self, name, partitions, replication_factor, config=None, validate_only=False):
        partitions = self.num_partitions if partitions == -1 else partitions   # the controller's defaults
        replication_factor = self.default_replication_factor if replication_factor == -1 else replication_factor
        records, topic = self.metadata.handle_create_topic(name, partitions, replication_factor, config, [0, 1, 2],
                                                           rng=random.Random(0))
        if not validate_only:
            self._apply(records)
        return {"name": name, "topic_id": None if validate_only else topic.topic_id, "config": topic.config,
                "partitions": [{"replicas": list(p.replicas)} for p in topic.partitions]}

    async def delete_topic(self, name):
        self.metadata.topic(name)
        self._apply(self.metadata.handle_delete_topic(name))

    async def add_partitions(self, name, count, validate_only=False):
        records, _ = self.metadata.handle_add_partitions(name, count, [0, 1, 2], rng=random.Random(0))
        if not validate_only:
            self._apply(records)
        return {"name": name}


def ask(controller, api_key, version, request):
    dispatcher = Dispatcher(DispatchTable([api_versions.ROUTE, *topic_admin.routes(controller)]))
    frame = asyncio.run(dispatcher.dispatch(request_frame(api_key, version, request)))
    return read_response(frame, api_key, version)[1]


def creatable(name, partitions=2, factor=3, *, configs=(), assignments=()):
    return create_v7.CreatableTopic(name=name, num_partitions=i32(partitions), replication_factor=i16(factor),
                                    assignments=assignments, configs=tuple(
                                        create_v7.CreatableTopicConfig(name=k, value=v) for k, v in configs))


def test_create_topics__each_topic_its_own_answer(tmp_path):
    controller = StandInController()
    answer = ask(controller, 19, 7, create_v7.CreateTopicsRequest(topics=(
        creatable("good"), creatable("good"), creatable("bad name!"), creatable("too-wide", factor=4),
        creatable("defaults", partitions=-1, factor=-1),
        creatable("bad-config", configs=[("retention.ms", "soon")]),
        creatable("placed", assignments=(create_v7.CreatableReplicaAssignment(partition_index=i32(0),
                                                                              broker_ids=(i32(0),)),)),
        creatable("fine")),
        timeout=TIMEOUT, validate_only=False))
    codes = [(t.name, t.error_code) for t in answer.topics]
    # a name given twice: answered once, INVALID_REQUEST, nothing done (Kafka's ControllerApis)
    assert codes == [("good", ErrorCode.invalid_request),
                     ("bad name!", ErrorCode.invalid_topic_exception),
                     ("too-wide", ErrorCode.invalid_replication_factor), ("defaults", ErrorCode.none),
                     ("bad-config", ErrorCode.invalid_config), ("placed", ErrorCode.invalid_replica_assignment),
                     ("fine", ErrorCode.none)]
    assert answer.topics[0].error_message == "Duplicate topic name."
    fine = answer.topics[-1]
    assert (fine.num_partitions, fine.replication_factor) == (2, 3)
    assert fine.topic_id == id_as_uuid(controller.metadata.topic("fine").topic_id)
    assert len(controller.metadata.topic("defaults").partitions) == 1
    assert set(controller.metadata.topics) == {"fine", "defaults"}
    assert answer.topics[1].error_message


def test_create_topics__minus_one__the_cluster_defaults_and_the_answer_says_them():
    controller = StandInController(num_partitions=4, default_replication_factor=3)
    answer = ask(controller, 19, 7, create_v7.CreateTopicsRequest(topics=(
        creatable("both", partitions=-1, factor=-1), creatable("factor-only", partitions=2, factor=-1)),
        timeout=TIMEOUT, validate_only=False))
    assert [(t.name, t.error_code, t.num_partitions, t.replication_factor) for t in answer.topics] == [
        ("both", ErrorCode.none, 4, 3), ("factor-only", ErrorCode.none, 2, 3)]
    assert len(controller.metadata.topic("both").partitions) == 4
    assert all(len(p.replicas) == 3 for p in controller.metadata.topic("both").partitions)


def test_create_topics__validate_only_creates_nothing():
    controller = StandInController()
    answer = ask(controller, 19, 7, create_v7.CreateTopicsRequest(topics=(creatable("checked"),), timeout=TIMEOUT,
                                                                  validate_only=True))
    assert answer.topics[0].error_code == ErrorCode.none and controller.metadata.topics == {}


def test_delete_topics__by_name_and_by_id():
    controller = StandInController()
    asyncio.run(controller.create_topic("by-name", 1, 1))
    asyncio.run(controller.create_topic("by-id", 1, 1))
    topic_id = id_as_uuid(controller.metadata.topic("by-id").topic_id)
    import uuid
    answer = ask(controller, 20, 6, delete_v6.DeleteTopicsRequest(topics=(
        delete_v6.DeleteTopicState(name="by-name", topic_id=uuid.UUID(int=0)),
        delete_v6.DeleteTopicState(name=None, topic_id=topic_id),
        delete_v6.DeleteTopicState(name="missing", topic_id=uuid.UUID(int=0)),
        delete_v6.DeleteTopicState(name=None, topic_id=uuid.uuid4())), timeout=TIMEOUT))
    assert [(r.name, r.error_code) for r in answer.responses] == [
        ("by-name", ErrorCode.none), ("by-id", ErrorCode.none), ("missing", ErrorCode.unknown_topic_or_partition),
        (None, ErrorCode.unknown_topic_id)]
    assert controller.metadata.topics == {}


def test_delete_topics__kafkas_invalid_requests__a_name_or_id_twice_both_or_neither__nothing_deleted():
    import uuid
    controller = StandInController()
    for name in ("twice", "kept", "both"):
        asyncio.run(controller.create_topic(name, 1, 1))
    kept_id = id_as_uuid(controller.metadata.topic("kept").topic_id)
    zero = uuid.UUID(int=0)
    answer = ask(controller, 20, 6, delete_v6.DeleteTopicsRequest(topics=(
        delete_v6.DeleteTopicState(name="twice", topic_id=zero), delete_v6.DeleteTopicState(name=None, topic_id=kept_id),
        delete_v6.DeleteTopicState(name="twice", topic_id=zero), delete_v6.DeleteTopicState(name=None, topic_id=kept_id),
        delete_v6.DeleteTopicState(name="both", topic_id=kept_id), delete_v6.DeleteTopicState(name=None, topic_id=zero)),
        timeout=TIMEOUT))
    assert [(r.name, r.topic_id or zero, r.error_code, r.error_message) for r in answer.responses] == [
        ("twice", zero, ErrorCode.invalid_request, "Duplicate topic name."),
        (None, kept_id, ErrorCode.invalid_request, "Duplicate topic id."),
        ("both", kept_id, ErrorCode.invalid_request, "You may not specify both topic name and topic id."),
        (None, zero, ErrorCode.invalid_request, "Neither topic name nor id were specified.")]
    assert set(controller.metadata.topics) == {"twice", "kept", "both"}


def test_create_partitions__grows_only():
    controller = StandInController()
    asyncio.run(controller.create_topic("growing", 1, 1))
    asyncio.run(controller.create_topic("shrinking", 2, 1))
    answer = ask(controller, 37, 3, partitions_v3.CreatePartitionsRequest(topics=(
        partitions_v3.CreatePartitionsTopic(name="growing", count=i32(3), assignments=None),
        partitions_v3.CreatePartitionsTopic(name="shrinking", count=i32(1), assignments=None),
        partitions_v3.CreatePartitionsTopic(name="missing", count=i32(2), assignments=None),
        partitions_v3.CreatePartitionsTopic(name="twice", count=i32(2), assignments=None),
        partitions_v3.CreatePartitionsTopic(name="twice", count=i32(3), assignments=None)),
        timeout=TIMEOUT, validate_only=False))
    assert [(r.name, r.error_code) for r in answer.results] == [
        ("growing", ErrorCode.none), ("shrinking", ErrorCode.invalid_partitions),
        ("missing", ErrorCode.unknown_topic_or_partition), ("twice", ErrorCode.invalid_request)]
    assert len(controller.metadata.topic("growing").partitions) == 3


def test_create_topics_v5_plus__the_answer_lists_the_topics_configs_sorted_none_with_an_error():
    """ControllerApis answers a created topic's configs (every one, with its
    source) sorted by name; a refused topic gets an empty list."""
    controller = StandInController()
    answer = ask(controller, 19, 7, create_v7.CreateTopicsRequest(topics=(
        creatable("compacted", configs=[("cleanup.policy", "compact"), ("min.insync.replicas", "2")]),
        creatable("bad name!")), timeout=TIMEOUT, validate_only=False))
    created, refused = answer.topics
    names = [c.name for c in created.configs]
    assert names == sorted(names) and {"cleanup.policy", "retention.ms", "min.cleanable.dirty.ratio"} <= set(names)
    by_name = {c.name: c for c in created.configs}
    assert (by_name["cleanup.policy"].value, by_name["cleanup.policy"].config_source) == ("compact", 1)
    assert (by_name["min.insync.replicas"].value, by_name["retention.ms"].value) == ("2", "604800000")
    assert by_name["retention.ms"].config_source == 5
    assert refused.error_code == ErrorCode.invalid_topic_exception and refused.configs == ()


@pytest.mark.parametrize("version", [2, 3, 4, 5, 6, 7])
def test_create_topics__every_version__created_with_the_cluster_defaults(version):
    """librdkafka sends CreateTopics v4: an answer field of v5+ (configs) must not
    be built for it (a handler error closes the client's connection)."""
    request = importlib.import_module(f"kio.schema.create_topics.v{version}.request")
    topic = request.CreatableTopic(name="any-version", num_partitions=i32(-1), replication_factor=i16(-1),
                                   assignments=(), configs=(request.CreatableTopicConfig(
                                       name="min.insync.replicas", value="2"),))
    controller = StandInController(num_partitions=4, default_replication_factor=3)
    (answer,) = ask(controller, 19, version, request.CreateTopicsRequest(
        topics=(topic,), timeout=TIMEOUT, validate_only=False)).topics
    assert answer.error_code == ErrorCode.none
    assert len(controller.metadata.topic("any-version").partitions) == 4
    if version >= 5:
        assert (answer.num_partitions, answer.replication_factor) == (4, 3)
        assert {c.name: c.value for c in answer.configs}["min.insync.replicas"] == "2"


def test_controller_mutation_rate__strict_from_create_topics_v6__the_topic_met_below_zero_refused__throttle_time():
    """KIP-599 on the controller: 2 partitions/s (a bucket of 20). In one v7
    request 15 + 10 partitions are taken (the second overdraws to -5) and the
    third topic is refused; v4 (permissive) takes its topic and says a longer
    wait; DeleteTopics v6 (strict) is refused while the bucket is below zero,
    and taken again once it refilled."""
    from rafka.core.client_quotas import CONTROLLER_MUTATION_RATE, ClientQuotas
    from rafka.core.clock import FakeClock
    from kio.schema.create_topics.v4 import request as create_v4
    controller, clock = StandInController(), FakeClock()
    quotas = ClientQuotas(by_entity={frozenset({("client-id", "test-client")}): {CONTROLLER_MUTATION_RATE: 2.0}})
    dispatcher = Dispatcher(DispatchTable([api_versions.ROUTE, *topic_admin.routes(controller, clock=clock)],
                                          image=lambda: dataclasses.replace(controller.cluster_image(),
                                                                            client_quotas=quotas)))

    def send(api_key, version, request):
        return read_response(asyncio.run(dispatcher.dispatch(request_frame(api_key, version, request))),
                             api_key, version)[1]
    answer = send(19, 7, create_v7.CreateTopicsRequest(topics=(
        creatable("first", 15, 1), creatable("second", 10, 1), creatable("third", 1, 1)),
        timeout=TIMEOUT, validate_only=False))
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("first", ErrorCode.none), ("second", ErrorCode.none), ("third", ErrorCode.throttling_quota_exceeded)]
    assert answer.throttle_time == datetime.timedelta(milliseconds=2_500)
    assert set(controller.metadata.topics) == {"first", "second"}
    older = send(19, 4, create_v4.CreateTopicsRequest(topics=(create_v4.CreatableTopic(
        name="fourth", num_partitions=i32(3), replication_factor=i16(1), assignments=(), configs=()),),
        timeout=TIMEOUT, validate_only=False))
    assert older.topics[0].error_code == ErrorCode.none and older.throttle_time == datetime.timedelta(seconds=4)
    deleted = send(20, 6, delete_v6.DeleteTopicsRequest(topics=(delete_v6.DeleteTopicState(
        name="first", topic_id=topic_admin.ZERO_UUID),), timeout=TIMEOUT))
    assert deleted.responses[0].error_code == ErrorCode.throttling_quota_exceeded and "first" in controller.metadata.topics
    clock.advance(4_000)                                       # back to zero: the next mutation is taken
    deleted = send(20, 6, delete_v6.DeleteTopicsRequest(topics=(delete_v6.DeleteTopicState(
        name="first", topic_id=topic_admin.ZERO_UUID),), timeout=TIMEOUT))
    assert deleted.responses[0].error_code == ErrorCode.none and "first" not in controller.metadata.topics
    assert deleted.throttle_time == datetime.timedelta(0)   # strict: a throttle time only with a refusal


def test_controller_mutation_rate__a_topic_kafka_refuses_answers_its_own_error_not_the_throttle():
    """KRaft's controller validates a topic before it takes the quota, and takes
    it for a validate_only creation too: with the bucket below zero, an existing
    topic answers TOPIC_ALREADY_EXISTS and a bad name INVALID_TOPIC_EXCEPTION; a
    valid new one is throttled."""
    from rafka.core.client_quotas import CONTROLLER_MUTATION_RATE, ClientQuotas
    from rafka.core.clock import FakeClock
    controller = StandInController()
    quotas = ClientQuotas(by_entity={frozenset({("client-id", "test-client")}): {CONTROLLER_MUTATION_RATE: 1.0}})
    dispatcher = Dispatcher(DispatchTable([api_versions.ROUTE, *topic_admin.routes(controller, clock=FakeClock())],
                                          image=lambda: dataclasses.replace(controller.cluster_image(),
                                                                            client_quotas=quotas)))

    def create(*topics, validate_only=False):
        request = create_v7.CreateTopicsRequest(topics=topics, timeout=TIMEOUT, validate_only=validate_only)
        answer = read_response(asyncio.run(dispatcher.dispatch(request_frame(19, 7, request))), 19, 7)[1]
        return [(t.name, t.error_code) for t in answer.topics]
    # validate_only takes its partitions as a real creation does (KRaft's): a bucket of 10, -5 now
    assert create(creatable("big", 15, 1), validate_only=True) == [("big", ErrorCode.none)]
    assert "big" not in controller.metadata.topics
    assert create(creatable("new", 1, 1)) == [("new", ErrorCode.throttling_quota_exceeded)]
    asyncio.run(controller.create_topic("big", 1, 1))   # exists, made without the client's quota
    assert create(creatable("big", 1, 1), creatable("bad name!", 1, 1), creatable("new", 1, 1)) == [
        ("big", ErrorCode.topic_already_exists), ("bad name!", ErrorCode.invalid_topic_exception),
        ("new", ErrorCode.throttling_quota_exceeded)]


def test_controller_mutation_rate__a_create_partitions_refused_for_shrinking__takes_nothing_from_the_bucket():
    from rafka.core.client_quotas import CONTROLLER_MUTATION_RATE, ClientQuotas
    from rafka.core.clock import FakeClock
    controller = StandInController()
    quotas = ClientQuotas(by_entity={frozenset({("client-id", "test-client")}): {CONTROLLER_MUTATION_RATE: 1.0}})
    dispatcher = Dispatcher(DispatchTable([api_versions.ROUTE, *topic_admin.routes(controller, clock=FakeClock())],
                                          image=lambda: dataclasses.replace(controller.cluster_image(),
                                                                            client_quotas=quotas)))

    def send(api_key, version, request):
        return read_response(asyncio.run(dispatcher.dispatch(request_frame(api_key, version, request))),
                             api_key, version)[1]
    created = send(19, 7, create_v7.CreateTopicsRequest(topics=(creatable("small", 10, 1),), timeout=TIMEOUT,
                                                        validate_only=False))
    assert created.topics[0].error_code == ErrorCode.none                     # the bucket of 10: empty now
    shrunk = send(37, 3, partitions_v3.CreatePartitionsRequest(topics=(partitions_v3.CreatePartitionsTopic(
        name="small", count=i32(2), assignments=None),), timeout=TIMEOUT, validate_only=False))
    assert shrunk.results[0].error_code == ErrorCode.invalid_partitions
    created = send(19, 7, create_v7.CreateTopicsRequest(topics=(creatable("one-more", 1, 1),), timeout=TIMEOUT,
                                                        validate_only=False))
    assert created.topics[0].error_code == ErrorCode.none                     # at zero, not below: taken
