"""Kafka's group APIs as rafka's own clients send them: a builder per request (a
kio request entity) and a reader per answer (plain values, or the typed
KafkaError raised). Pure: no I/O, no Ray; the callers own connections, retries
and coordinator lookups.

Invariants:
  a reader of offsets and administration returns what the coordinator's own
  method of the same name returns (actors.coordinator, core.coordinator_shard),
  less what the wire cannot carry (describe_answer: no leader or generation, as
  Kafka's AdminClient); the membership readers and describe_answer read the
  members' bytes, which the coordinator keeps opaque, as Kafka's consumer
  protocol (subscriptions and assignments);
  an error the coordinator raises is raised here with the same type
  (core.errors.error_for_code); an error it returns as a value (per partition in
  OffsetCommit and OffsetDelete) is a value here too;
  one fixed version per API, the newest the handlers route: JoinGroup v7,
  SyncGroup v5, Heartbeat v4, LeaveGroup v5, OffsetCommit v9 (v8's fields; a
  KIP-848 member's epoch in generation_id_or_member_epoch), OffsetFetch v8,
  DescribeGroups v5, ListGroups v4, DeleteGroups v2, OffsetDelete v0,
  ConsumerGroupHeartbeat v1, ConsumerGroupDescribe v1
  (handlers.group_membership, group_offsets, group_admin). rafka's clients find
  a group's coordinator with FindCoordinator (protocol.cluster_requests).

Membership as Kafka's consumer runs it: a join offers the consumer's assignors
as protocols, each with Kafka's consumer protocol subscription as metadata (and
a group.instance.id for a static member); the leader's join answer lists every
member's subscription, the leader's sync carries every member's assignment
(encoded here), and every member reads its own from its sync answer. The new
protocol's member (KIP-848) sends ConsumerGroupHeartbeat: partitions by topic id
both ways.

Callers: client.membership's CoordinatorClient (for client.consumer, the member
actors, client.admin and spark_bridge.stream), client.admin (ListGroups), tests.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping

from kio.schema.consumer_group_describe.v1 import request as consumer_group_describe_v1
from kio.schema.consumer_group_heartbeat.v1 import request as consumer_group_heartbeat_v1
from kio.schema.delete_groups.v2 import request as delete_groups_v2
from kio.schema.describe_groups.v5 import request as describe_groups_v5
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4 import request as heartbeat_v4
from kio.schema.join_group.v7 import request as join_group_v7
from kio.schema.leave_group.v5 import request as leave_group_v5
from kio.schema.list_groups.v4 import request as list_groups_v4
from kio.schema.offset_commit.v9 import request as offset_commit_v9
from kio.schema.offset_delete.v0 import request as offset_delete_v0
from kio.schema.offset_fetch.v8 import request as offset_fetch_v8
from kio.schema.sync_group.v5 import request as sync_group_v5
from kio.static.primitive import i32, i32Timedelta

from rafka.core.errors import KafkaError, UnknownServerError, error_for_code
from rafka.protocol.consumer_protocol import (decode_assignment, decode_subscription, encode_assignment,
                                              encode_subscription)

PROTOCOL_TYPE = "consumer"
NO_GENERATION = -1           # a commit from outside the group protocol (assign mode)
NO_OFFSET = -1               # OffsetFetch: nothing committed for the partition

# OffsetCommit v9 has no group-level error: the handler writes a refused commit's
# error (NOT_COORDINATOR, ILLEGAL_GENERATION, ...) on every partition. The Ray
# method raises those and returns only these as values (core.offset_store's
# per-partition checks, and Kafka's other per-partition ones), so every other
# code is raised.
_COMMIT_PARTITION_CODES = frozenset({ErrorCode.offset_metadata_too_large, ErrorCode.invalid_request,
                                     ErrorCode.invalid_commit_offset_size, ErrorCode.unknown_topic_or_partition,
                                     ErrorCode.topic_authorization_failed})


def _error(code: ErrorCode, what: str) -> KafkaError:
    name = getattr(code, "name", str(int(code))).upper()
    return error_for_code(code, f"{what}: {name}")


def _check(code: ErrorCode, what: str, message: str | None = None) -> None:
    if code != ErrorCode.none:
        raise _error(code, f"{what}: {message}" if message else what)


def _ms(duration_ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=duration_ms))


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted({(t, int(p)) for t, p in partitions}):
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


# --- membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup ---------------------------

def join_request(group_id: str, member_id: str, *, protocols: Iterable[tuple[str, bytes]],
                 session_timeout_ms: int, rebalance_timeout_ms: int,
                 group_instance_id: str | None = None) -> join_group_v7.JoinGroupRequest:
    """JoinGroup v7 of protocol type "consumer": `protocols` are (assignor name,
    subscription bytes) in order of preference (`subscription`). member_id "" for
    a new member."""
    return join_group_v7.JoinGroupRequest(
        group_id=group_id, session_timeout=_ms(session_timeout_ms), rebalance_timeout=_ms(rebalance_timeout_ms),
        member_id=member_id, group_instance_id=group_instance_id, protocol_type=PROTOCOL_TYPE,
        protocols=tuple(join_group_v7.JoinGroupRequestProtocol(name=name, metadata=metadata)
                        for name, metadata in protocols))


def subscription(topics: Iterable[str], owned: Iterable[tuple[str, int]] = ()) -> bytes:
    """A member's JoinGroup metadata: Kafka's consumer protocol subscription."""
    return encode_subscription(topics, owned)


def join_answer(response) -> dict:
    """{member_id, generation, leader, protocol_name, members}: members (the
    leader's only) as {member_id: (instance id, subscribed topics, owned partitions)}."""
    _check(response.error_code, "JoinGroup")
    members = {}
    for m in response.members:
        topics, owned = decode_subscription(m.metadata)
        members[m.member_id] = (m.group_instance_id, topics, owned)
    return {"member_id": response.member_id, "generation": int(response.generation_id), "leader": response.leader,
            "protocol_name": response.protocol_name, "members": members}


def sync_request(group_id: str, member_id: str, generation: int, *, protocol_name: str | None,
                 assignments: Mapping[str, Iterable[tuple[str, int]]] | None = None,
                 group_instance_id: str | None = None) -> sync_group_v5.SyncGroupRequest:
    """SyncGroup v5; the leader's carries every member's assignment (Kafka's
    consumer protocol bytes), a follower's none."""
    return sync_group_v5.SyncGroupRequest(
        group_id=group_id, generation_id=i32(generation), member_id=member_id, group_instance_id=group_instance_id,
        protocol_type=PROTOCOL_TYPE, protocol_name=protocol_name,
        assignments=tuple(sync_group_v5.SyncGroupRequestAssignment(member_id=m, assignment=encode_assignment(tps))
                          for m, tps in sorted((assignments or {}).items())))


def sync_answer(response) -> list[tuple[str, int]]:
    """The member's assignment, [(topic, partition)] sorted."""
    _check(response.error_code, "SyncGroup")
    return decode_assignment(response.assignment)


def heartbeat_request(group_id: str, member_id: str, generation: int,
                      group_instance_id: str | None = None) -> heartbeat_v4.HeartbeatRequest:
    return heartbeat_v4.HeartbeatRequest(group_id=group_id, generation_id=i32(generation), member_id=member_id,
                                         group_instance_id=group_instance_id)


def heartbeat_answer(response) -> None:
    """None, or raises (REBALANCE_IN_PROGRESS: rejoin)."""
    _check(response.error_code, "Heartbeat")


def leave_request(group_id: str, member_id: str, *, group_instance_id: str | None = None,
                  reason: str | None = None) -> leave_group_v5.LeaveGroupRequest:
    """LeaveGroup v5 for one member (v3+ batches members)."""
    return leave_group_v5.LeaveGroupRequest(group_id=group_id, members=(
        leave_group_v5.MemberIdentity(member_id=member_id, group_instance_id=group_instance_id, reason=reason),))


def leave_answer(response) -> None:
    """None, or raises: the request's error first, then the member's."""
    _check(response.error_code, "LeaveGroup")
    for member in response.members:
        _check(member.error_code, f"LeaveGroup of member {member.member_id!r}")


def consumer_group_heartbeat_request(
        group_id: str, member_id: str, member_epoch: int, *, instance_id: str | None = None,
        rack_id: str | None = None, rebalance_timeout_ms: int = -1,
        subscribed_topic_names: Iterable[str] | None = None, subscribed_topic_regex: str | None = None,
        server_assignor: str | None = None, owned: Iterable[tuple[object, Iterable[int]]] | None = None
) -> consumer_group_heartbeat_v1.ConsumerGroupHeartbeatRequest:
    """ConsumerGroupHeartbeat v1 (KIP-848): `member_epoch` 0 joins, -1 leaves, -2 a
    static member's temporary leave; None (or -1 for the timeout) is "unchanged
    since the last heartbeat"; `subscribed_topic_regex` "" drops the member's regex;
    `owned`: [(topic id, partitions)]."""
    module = consumer_group_heartbeat_v1
    return module.ConsumerGroupHeartbeatRequest(
        group_id=group_id, member_id=member_id, member_epoch=i32(member_epoch), instance_id=instance_id,
        rack_id=rack_id, rebalance_timeout=_ms(rebalance_timeout_ms),
        subscribed_topic_names=None if subscribed_topic_names is None else tuple(subscribed_topic_names),
        subscribed_topic_regex=subscribed_topic_regex, server_assignor=server_assignor,
        topic_partitions=None if owned is None else tuple(
            module.TopicPartitions(topic_id=topic_id, partitions=tuple(i32(p) for p in sorted(parts)))
            for topic_id, parts in owned))


def consumer_group_heartbeat_answer(response) -> dict:
    """{member_id, member_epoch, heartbeat_interval_ms, assignment}: the assignment
    as {topic id: [partitions]}, or None when the coordinator left it out
    (unchanged); an error raises with the coordinator's message."""
    _check(response.error_code, "ConsumerGroupHeartbeat", response.error_message)
    assignment = None if response.assignment is None else {
        t.topic_id: sorted(int(p) for p in t.partitions) for t in response.assignment.topic_partitions}
    return {"member_id": response.member_id, "member_epoch": int(response.member_epoch),
            "heartbeat_interval_ms": int(response.heartbeat_interval.total_seconds() * 1000),
            "assignment": assignment}


# --- offsets: OffsetCommit, OffsetFetch, OffsetDelete -----------------------------------

def commit_request(group_id: str, offsets: Mapping[tuple[str, int], tuple[int, int, str]],
                   member_id: str = "", generation: int = NO_GENERATION,
                   group_instance_id: str | None = None) -> offset_commit_v9.OffsetCommitRequest:
    """OffsetCommit v9. offsets: {(topic, partition): (offset, leader_epoch, metadata)};
    no member id and generation -1: a commit from outside the group protocol;
    a KIP-848 member sends its member epoch as the generation."""
    # plain ints where kio says i32/i64 (the same ints at runtime; its checked
    # constructors were most of a commit's cost in its member)
    by_topic: dict[str, list] = {}
    partition_type = offset_commit_v9.OffsetCommitRequestPartition
    for (topic, partition), (offset, leader_epoch, metadata) in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append(partition_type(
            partition_index=partition, committed_offset=offset, committed_leader_epoch=leader_epoch,
            committed_metadata=metadata))
    return offset_commit_v9.OffsetCommitRequest(
        group_id=group_id, generation_id_or_member_epoch=generation, member_id=member_id,
        group_instance_id=group_instance_id, topics=tuple(offset_commit_v9.OffsetCommitRequestTopic(name=t, partitions=tuple(ps))
                                             for t, ps in by_topic.items()))


def commit_answer(response) -> dict[tuple[str, int], KafkaError | None]:
    """{(topic, partition): None or its error (a value, not raised)}; an error of the
    whole commit (the group's: see _COMMIT_PARTITION_CODES) raises."""
    answer: dict[tuple[str, int], KafkaError | None] = {}
    for topic in response.topics:
        for p in topic.partitions:
            key = (topic.name, int(p.partition_index))
            if p.error_code == ErrorCode.none:
                answer[key] = None
            elif p.error_code in _COMMIT_PARTITION_CODES:
                answer[key] = _error(p.error_code, f"OffsetCommit of {key[0]}-{key[1]}")
            else:
                raise _error(p.error_code, "OffsetCommit")
    return answer


def offset_fetch_request(group_id: str, partitions: Iterable[tuple[str, int]] | None = None, *,
                         require_stable: bool = False) -> offset_fetch_v8.OffsetFetchRequest:
    """OffsetFetch v8 for one group: `partitions`, or None for every committed one.
    `require_stable` (KIP-447, what a read_committed consumer sends): a partition
    with a transaction's offset pending answers UNSTABLE_OFFSET_COMMIT (retriable)."""
    topics = None if partitions is None else tuple(
        offset_fetch_v8.OffsetFetchRequestTopics(name=t, partition_indexes=tuple(i32(p) for p in ps))
        for t, ps in _by_topic(partitions).items())
    return offset_fetch_v8.OffsetFetchRequest(
        groups=(offset_fetch_v8.OffsetFetchRequestGroup(group_id=group_id, topics=topics),),
        require_stable=require_stable)


def offset_fetch_answer(response, group_id: str) -> dict[tuple[str, int], tuple[int, int, str] | None]:
    """{(topic, partition): (offset, leader_epoch, metadata) or None}: every asked
    partition (None where nothing is committed), or, asked for all, the committed
    ones only. The group's error raises (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR)."""
    group = _only([g for g in response.groups if g.group_id == group_id], f"OffsetFetch of group {group_id!r}")
    _check(group.error_code, f"OffsetFetch of group {group_id!r}")
    answer: dict[tuple[str, int], tuple[int, int, str] | None] = {}
    for topic in group.topics:
        for p in topic.partitions:
            _check(p.error_code, f"OffsetFetch of {topic.name}-{int(p.partition_index)}")
            offset = int(p.committed_offset)
            answer[(topic.name, int(p.partition_index))] = (
                None if offset == NO_OFFSET else (offset, int(p.committed_leader_epoch), p.metadata or ""))
    return answer


def offset_delete_request(group_id: str,
                          partitions: Iterable[tuple[str, int]]) -> offset_delete_v0.OffsetDeleteRequest:
    return offset_delete_v0.OffsetDeleteRequest(group_id=group_id, topics=tuple(
        offset_delete_v0.OffsetDeleteRequestTopic(name=t, partitions=tuple(
            offset_delete_v0.OffsetDeleteRequestPartition(partition_index=i32(p)) for p in ps))
        for t, ps in _by_topic(partitions).items()))


def offset_delete_answer(response) -> dict[tuple[str, int], KafkaError | None]:
    """{(topic, partition): None or its error (GROUP_SUBSCRIBED_TO_TOPIC), a value};
    the request's error raises (GROUP_ID_NOT_FOUND)."""
    _check(response.error_code, "OffsetDelete")
    return {(t.name, int(p.partition_index)): None if p.error_code == ErrorCode.none
            else _error(p.error_code, f"OffsetDelete of {t.name}-{int(p.partition_index)}")
            for t in response.topics for p in t.partitions}


# --- administration: DescribeGroups, ListGroups, DeleteGroups, FindCoordinator ------------

def describe_request(group_id: str) -> describe_groups_v5.DescribeGroupsRequest:
    return describe_groups_v5.DescribeGroupsRequest(groups=(group_id,), include_authorized_operations=False)


def describe_answer(response, group_id: str) -> dict:
    """{group, state, protocol_type, assignor, members: {member_id: {client_id, host,
    group_instance_id, topics, assignment}}}, as Kafka's AdminClient describes a
    consumer group: DescribeGroups carries no generation or leader. The assignor
    (the group's protocol) is named, and topics and assignments read, only while the
    group is Stable ("" and empty otherwise, as Kafka answers); a group of another
    protocol type than "consumer" has its members' bytes unread (no topics, no
    assignment). An unknown group is state "Dead", no error; the group's error
    raises (NOT_COORDINATOR)."""
    group = _only([g for g in response.groups if g.group_id == group_id], f"DescribeGroups of group {group_id!r}")
    _check(group.error_code, f"DescribeGroups of group {group_id!r}")
    consumer = group.protocol_type == PROTOCOL_TYPE
    members = {}
    for m in group.members:
        topics = list(decode_subscription(m.member_metadata)[0]) if consumer and m.member_metadata else []
        assignment = decode_assignment(m.member_assignment) if consumer else []
        members[m.member_id] = {"client_id": m.client_id, "host": m.client_host,
                                "group_instance_id": m.group_instance_id, "topics": sorted(topics),
                                "assignment": assignment}
    return {"group": group_id, "state": group.group_state, "protocol_type": group.protocol_type,
            "assignor": group.protocol_data, "members": members}


def consumer_group_describe_request(group_id: str) -> consumer_group_describe_v1.ConsumerGroupDescribeRequest:
    return consumer_group_describe_v1.ConsumerGroupDescribeRequest(group_ids=(group_id,),
                                                                   include_authorized_operations=False)


def consumer_group_describe_answer(response, group_id: str) -> dict:
    """A consumer group of the new protocol (KIP-848) in describe_answer's shape
    (the assignor is the server's; a member's assignment is its current one, by
    topic name), plus the group epoch; GROUP_ID_NOT_FOUND (not a consumer group) raises."""
    group = _only([g for g in response.groups if g.group_id == group_id],
                  f"ConsumerGroupDescribe of group {group_id!r}")
    _check(group.error_code, f"ConsumerGroupDescribe of group {group_id!r}")
    members = {m.member_id: {"client_id": m.client_id, "host": m.client_host, "group_instance_id": m.instance_id,
                             "rack_id": m.rack_id, "topics": sorted(m.subscribed_topic_names),
                             "topic_regex": m.subscribed_topic_regex,
                             "assignment": sorted((t.topic_name, int(p)) for t in m.assignment.topic_partitions
                                                  for p in t.partitions)}
               for m in group.members}
    return {"group": group_id, "state": group.group_state, "protocol_type": PROTOCOL_TYPE,
            "assignor": group.assignor_name, "group_epoch": int(group.group_epoch), "members": members}


def list_groups_request() -> list_groups_v4.ListGroupsRequest:
    """ListGroups v4, no state filter. A node lists the groups it coordinates:
    ask every node and merge."""
    return list_groups_v4.ListGroupsRequest(states_filter=())


def list_groups_answer(response) -> list[dict]:
    """[{group, state}] of the node that answered."""
    _check(response.error_code, "ListGroups")
    return [{"group": g.group_id, "state": g.group_state} for g in response.groups]


def delete_groups_request(group_id: str) -> delete_groups_v2.DeleteGroupsRequest:
    return delete_groups_v2.DeleteGroupsRequest(groups_names=(group_id,))


def delete_groups_answer(response, group_id: str) -> None:
    """None once deleted, or raises (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND)."""
    result = _only([r for r in response.results if r.group_id == group_id], f"DeleteGroups of group {group_id!r}")
    _check(result.error_code, f"DeleteGroups of group {group_id!r}")


def _only(matches: list, what: str):
    """The one entry of a batched answer that a one-key request asked for."""
    if len(matches) != 1:
        raise UnknownServerError(f"{what}: {len(matches)} entries for it in the answer, 1 expected")
    return matches[0]
