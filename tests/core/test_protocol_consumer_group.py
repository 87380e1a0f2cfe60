"""ConsumerGroupHeartbeat, ConsumerGroupDescribe and ListGroups v5 on the wire
(KIP-848), over a real coordinator shard: the frames a client sends, the
answers it reads, Kafka's codes and messages."""

import asyncio
import datetime
import uuid

import pytest
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest, TopicPartitions
from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.static.primitive import i32, i32Timedelta

from rafka.protocol.dispatch import Dispatcher, DispatchTable
from rafka.protocol.handlers import api_versions, consumer_group, group_admin
from tests.core.test_consumer_group_shard import ORDERS, shard_on
from tests.core.test_coordinator_shard import FakeOffsetsPartition
from tests.core.test_protocol_dispatch import read_response, request_frame
from rafka.core.clock import FakeClock

pytestmark = pytest.mark.core
G = "billing"


class Host:
    """The coordinator's calls over one shard; groups starting "theirs" are coordinated elsewhere."""

    def __init__(self, shard):
        self.shard = shard

    def coordinator_for(self, group_id):
        return None if group_id.startswith("theirs") else self

    async def consumer_group_heartbeat(self, group, **heartbeat):
        return await self.shard.consumer_group_heartbeat(group, **heartbeat)

    async def consumer_group_describe(self, group):
        return self.shard.consumer_group_describe(group)

    async def list_groups(self):
        return self.shard.list_groups()


def heartbeat_request(member_id, epoch, *, owned=(), topics=("orders",), regex=None, group=G, assignor=None):
    return ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=i32(epoch),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), subscribed_topic_names=topics,
        subscribed_topic_regex=regex, server_assignor=assignor,
        topic_partitions=None if owned is None else tuple(
            TopicPartitions(topic_id=t, partitions=tuple(i32(p) for p in parts)) for t, parts in owned))


def test_heartbeat_describe_and_list__as_a_client_reads_them():
    async def scenario():
        host = Host(shard_on(FakeOffsetsPartition(), FakeClock()))
        dispatcher = Dispatcher(DispatchTable([api_versions.ROUTE, *consumer_group.routes(host),
                                               group_admin.list_groups_route(host.list_groups)]))

        async def ask(api_key, version, body):
            frame = await dispatcher.dispatch(request_frame(api_key, version, body), connection_id="c-10.0.0.7:5-1")
            return read_response(frame, api_key, version)[1]
        joined = await ask(68, 1, heartbeat_request("m-1", 0))
        assert (joined.error_code, joined.member_id, joined.member_epoch, joined.heartbeat_interval) == (
            ErrorCode.none, "m-1", 1, datetime.timedelta(seconds=5))
        assert [(t.topic_id, tuple(t.partitions)) for t in joined.assignment.topic_partitions] == [
            (ORDERS, (0, 1, 2, 3))]
        again = await ask(68, 1, heartbeat_request("m-1", 1, owned=None, topics=None))
        assert (again.member_epoch, again.assignment) == (1, None)      # nothing changed: no assignment sent

        fenced = await ask(68, 1, heartbeat_request("m-1", 7, owned=None, topics=None))
        assert fenced.error_code == ErrorCode.fenced_member_epoch and "greater member epoch" in fenced.error_message
        regex = await ask(68, 1, heartbeat_request("m-2", 0, regex="ord("))
        assert regex.error_code == ErrorCode.invalid_regular_expression
        assert regex.error_message.startswith("SubscribedTopicRegex ord( is not a valid regular expression")
        empty_regex = await ask(68, 1, heartbeat_request("m-2", 0, regex=""))   # librdkafka's "no regex"
        assert empty_regex.error_code == ErrorCode.none
        assignor = await ask(68, 1, heartbeat_request("m-3", 0, assignor="sticky"))
        assert assignor.error_code == ErrorCode.unsupported_assignor
        elsewhere = await ask(68, 1, heartbeat_request("m-1", 0, group="theirs"))
        assert elsewhere.error_code == ErrorCode.not_coordinator

        described = await ask(69, 1, ConsumerGroupDescribeRequest(group_ids=(G, "nobody", "theirs"),
                                                                   include_authorized_operations=False))
        group, nobody, theirs = described.groups
        assert (group.error_code, group.group_state, group.group_epoch, group.assignor_name) == (
            ErrorCode.none, "Reconciling", 2, "uniform")
        by_id = {m.member_id: m for m in group.members}
        assert set(by_id) == {"m-1", "m-2"}
        m1 = by_id["m-1"]
        assert (m1.client_host, m1.subscribed_topic_names, m1.member_type) == ("/10.0.0.7", ("orders",), 1)
        assert [(t.topic_name, tuple(t.partitions)) for t in m1.assignment.topic_partitions] == [
            ("orders", (0, 1, 2, 3))]
        assert len(m1.target_assignment.topic_partitions[0].partitions) == 2
        assert nobody.error_code == ErrorCode.group_id_not_found
        assert theirs.error_code == ErrorCode.not_coordinator

        listed = await ask(16, 5, ListGroupsRequest(states_filter=(), types_filter=("Consumer",)))
        assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed.groups] == [
            (G, "consumer", "consumer", "Reconciling")]
        classic_only = await ask(16, 5, ListGroupsRequest(states_filter=(), types_filter=("classic",)))
        assert classic_only.groups == ()
    asyncio.run(scenario())


def test_consumer_group_apis__advertised_in_api_versions():
    from rafka.protocol.node_table import node_table
    table = node_table(image=lambda: None, allocate_producer_id=None)
    versions = {r.api_key: (r.min_version, r.max_version) for r in table.supported_api_versions}
    assert (versions[68], versions[69], versions[16]) == ((0, 1), (0, 1), (0, 5))
    assert (versions[8], versions[9]) == ((2, 9), (1, 9))
