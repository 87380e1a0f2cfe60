"""Envelope (KIP-590) on the controller's node: a broker's relay of a client's
administration request runs as the client's principal (its quotas: here a
user's controller_mutation_rate), only a principal allowed CLUSTER_ACTION may
send one, and a malformed one runs nothing."""

import asyncio
import dataclasses
import datetime

import pytest
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i32Timedelta

from rafka.core.client_quotas import CONTROLLER_MUTATION_RATE, USER, ClientQuotas
from rafka.core.clock import FakeClock
from rafka.protocol.dispatch import DispatchTable, Dispatcher, RequestContext, Session, read_answer
from rafka.protocol.handlers import api_versions, envelope, topic_admin
from tests.core.test_protocol_dispatch import request_frame
from tests.core.test_protocol_topic_admin import StandInController

pytestmark = pytest.mark.core
TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=5))


def controller_node():
    controller, target = StandInController(), envelope.EnvelopeTarget()
    image = dataclasses.replace(
        controller.cluster_image(), sasl_required=True, super_users=frozenset({"User:broker", "User:alice"}),
        client_quotas=ClientQuotas(by_entity={frozenset({(USER, "alice")}): {CONTROLLER_MUTATION_RATE: 2.0}}))
    table = DispatchTable([api_versions.ROUTE, *topic_admin.routes(controller, clock=FakeClock()),
                           envelope.route(target)], image=lambda: image, envelope_target=target)
    return controller, Dispatcher(table)


def create_topics(*sizes):
    return create_v7.CreateTopicsRequest(topics=tuple(
        create_v7.CreatableTopic(name=f"t{i}", num_partitions=i32(n), replication_factor=i16(1), assignments=(),
                                 configs=()) for i, n in enumerate(sizes)), timeout=TIMEOUT, validate_only=False)


def client_context(principal="User:alice"):
    return RequestContext(api_key=19, api_version=7, correlation_id=41, client_id="admin-app", connection_id="c",
                          supported_api_versions=(), principal=principal, client_host="10.0.0.7")


def relay(dispatcher, sender, inner_frame, context):
    """What a broker's edge does: the client's frame in an envelope, sent as `sender`."""
    outer = envelope.wrap(context, inner_frame)
    answer = asyncio.run(dispatcher.dispatch(outer, session=Session(principal=sender, client_host="10.0.0.2")))
    return answer[4:]


def test_principal__serialized_as_kafkas_default_principal_data_and_back():
    data = envelope.serialize_principal("User:alice")
    assert data[:2] == b"\x00\x00" and envelope.deserialize_principal(data) == "User:alice"


def test_envelope__runs_the_request_as_the_clients_principal__its_user_quota_applies():
    controller, dispatcher = controller_node()
    inner = envelope.unwrap(relay(dispatcher, "User:broker", request_frame(19, 7, create_topics(15, 10, 1),
                                                                            correlation_id=41), client_context()))
    answer = read_answer(client_context(), inner)
    assert [t.error_code for t in answer.topics] == [ErrorCode.none, ErrorCode.none,
                                                     ErrorCode.throttling_quota_exceeded]
    assert answer.throttle_time == datetime.timedelta(milliseconds=2_500)
    assert int.from_bytes(inner[:4], "big") == 41                    # the client's correlation id inside
    assert set(controller.metadata.topics) == {"t0", "t1"}
    counted = dispatcher.request_metrics.by_request
    assert counted[("CreateTopics", 7)].count == 1 and counted[("Envelope", 0)].count == 1   # both in the metrics


def test_envelope__from_a_principal_without_cluster_action__refused_nothing_run():
    controller, dispatcher = controller_node()
    outer_answer = relay(dispatcher, "User:bob", request_frame(19, 7, create_topics(1), correlation_id=41),
                         client_context())
    assert envelope.unwrap(outer_answer) is None
    response = read_answer(RequestContext(api_key=58, api_version=0, correlation_id=0, client_id="",
                                          connection_id="", supported_api_versions=()), bytes(outer_answer))
    assert response.error_code == ErrorCode.cluster_authorization_failed and controller.metadata.topics == {}


def test_envelope__an_inner_request_that_cannot_be_read__invalid_request_nothing_run():
    controller, dispatcher = controller_node()
    outer_answer = relay(dispatcher, "User:broker", b"\x00\x13\x00\x07garbage", client_context())
    response = read_answer(RequestContext(api_key=58, api_version=0, correlation_id=0, client_id="",
                                          connection_id="", supported_api_versions=()), bytes(outer_answer))
    assert response.error_code == ErrorCode.invalid_request and controller.metadata.topics == {}


def test_envelope__routed_only_on_the_controllers_node__and_only_for_the_administration_brokers_relay():
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from rafka.core.cluster_image import EMPTY_IMAGE
    from rafka.protocol.node_table import node_table

    async def no_ids():
        return 0
    assert envelope.ENVELOPE_KEY not in node_table(image=lambda: EMPTY_IMAGE,
                                                   allocate_producer_id=no_ids).routes_by_api_key
    assert envelope.ENVELOPE_KEY in node_table(image=lambda: EMPTY_IMAGE, allocate_producer_id=no_ids,
                                               envelopes=True).routes_by_api_key
    controller, dispatcher = controller_node()
    outer_answer = relay(dispatcher, "User:broker", request_frame(18, 3, ApiVersionsRequest(
        client_software_name="x", client_software_version="1")), client_context())
    response = read_answer(RequestContext(api_key=58, api_version=0, correlation_id=0, client_id="",
                                          connection_id="", supported_api_versions=()), bytes(outer_answer))
    assert response.error_code == ErrorCode.invalid_request
