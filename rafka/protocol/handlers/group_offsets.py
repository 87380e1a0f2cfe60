"""OffsetCommit v2-9, OffsetFetch v1-9 and OffsetDelete v0, on the group's
coordinator node.

What Kafka answers (KafkaApis.handleOffsetCommitRequest / handleOffsetFetchRequest,
GroupCoordinator), and what these handlers do the same way:
  * a group this node does not coordinate: NOT_COORDINATOR (the client looks the
    coordinator up again); one still loading its offsets partition:
    COORDINATOR_LOAD_IN_PROGRESS. In OffsetCommit each partition carries the
    error; in OffsetFetch the group (v2+) does.
  * a commit with generation -1 and no member id is a simple (assign-mode)
    commit, accepted while the group has no members; a member's commit must name
    the current generation (ILLEGAL_GENERATION) and a known member
    (UNKNOWN_MEMBER_ID); a static member's (v7+ group_instance_id) must be the
    instance's current member (FENCED_INSTANCE_ID). The coordinator acks only once the commit is
    replicated (DESIGN section 5); the shard decides all of it.
  * retention_time (v2-4) is ignored: offsets.retention.minutes rules, as in
    Kafka since KIP-211 for v5+.
  * OffsetFetch: topics null (v2+) means every committed partition of the group;
    a partition with no committed offset: offset -1, metadata "", no error.
    v8 batches groups (KIP-709), each answered on its own. With require_stable
    (v7+, KIP-447: a read_committed consumer sends it) a partition whose
    transactional offset is pending answers UNSTABLE_OFFSET_COMMIT (offset -1),
    per partition in every version, as Kafka's OffsetMetadataManager; the client
    asks again.
  * OffsetDelete (KIP-496): GROUP_ID_NOT_FOUND for an unknown group (the
    request's error); per partition GROUP_SUBSCRIBED_TO_TOPIC while a member
    subscribes to its topic, else the offset is gone once replicated.
  * authorization (KafkaApis): OffsetCommit needs READ on the group (refused:
    GROUP_AUTHORIZATION_FAILED on every partition) and READ on each topic;
    OffsetFetch DESCRIBE on each group (refused: the group's error, v0-1 every
    partition's) and DESCRIBE on each topic named, a topic not describable
    left out of an all-offsets answer; OffsetDelete DELETE on the group (the
    request's error) and READ on each topic. A refused topic's partitions
    answer TOPIC_AUTHORIZATION_FAILED and go nowhere; the rest go on.
Caller: the coordinator actor's table, through `routes(host)`.
"""

from __future__ import annotations

import datetime
from typing import Any, Protocol

from rafka.protocol.entities import load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta, i64

from rafka.core.acl import AclOperation, ResourceType
from rafka.core.errors import KafkaError, coordinator_append_error
from rafka.protocol.authorization import ALLOWED, Decision, Gate, check_of, decide, gate
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import make, module_of
from rafka.protocol.handlers.partitions import error_code_of

COMMIT_KEY, FETCH_KEY, DELETE_KEY = 8, 9, 47
# v9 is what KIP-848 members send (OffsetCommit v9 has v8's fields, its generation
# the member epoch; OffsetFetch v9 adds the member id and epoch, which rafka does
# not check: Kafka answers STALE_MEMBER_EPOCH for a wrong one)
COMMIT_VERSIONS, FETCH_VERSIONS = (2, 9), (1, 9)
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


class GroupCoordinatorEndpoint(Protocol):
    async def commit_offsets(self, group: str, offsets: dict, member_id: str = ...,
                             generation: int = ..., group_instance_id: str | None = ...) -> dict: ...

    async def fetch_offsets(self, group: str, partitions: list | None = ..., *,
                            require_stable: bool = ...) -> dict: ...

    async def commit_transactional_offsets(self, group: str, offsets: dict, *, producer_id: int,
                                           producer_epoch: int, member_id: str = ..., generation: int = ...,
                                           group_instance_id: str | None = ...) -> dict: ...

    async def complete_transaction(self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                                   commit: bool) -> None: ...

    async def delete_offsets(self, group: str, partitions: list) -> dict: ...


class GroupHost(Protocol):
    def coordinator_for(self, group_id: str) -> GroupCoordinatorEndpoint | None: ...

    def offsets_partition_coordinator(self, partition: int) -> GroupCoordinatorEndpoint | None:
        """The coordinator of `__consumer_offsets` partition `partition` if it is
        here (WriteTxnMarkers for that partition goes through it)."""


def routes(host: GroupHost) -> list[Route]:
    async def handle_commit(request, context: RequestContext):
        return await commit(host, request, context.api_version, decide(context, request))

    async def handle_fetch(request, context: RequestContext):
        return await fetch(host, request, context.api_version, gate(context))

    async def handle_delete(request, context: RequestContext):
        return await delete(host, request, context.api_version, decide(context, request))
    return [Route(COMMIT_KEY, *COMMIT_VERSIONS, handle_commit), Route(FETCH_KEY, *FETCH_VERSIONS, handle_fetch),
            Route(DELETE_KEY, 0, 0, handle_delete)]


async def coordinator_call(host: GroupHost, group_id: str, method: str, *args,
                           **kwargs) -> tuple[ErrorCode, Any, str | None]:
    """(code, the coordinator's answer or None, the error's message or None): a
    group's call on its coordinator here (NOT_COORDINATOR without one), its typed
    error as Kafka's code, mapped as Kafka's coordinator maps an operation's
    exception (core.errors.coordinator_append_error: a Java consumer treats
    REQUEST_TIMED_OUT or NETWORK_EXCEPTION from most group APIs as fatal). The
    group handlers' one way to ask."""
    coordinator = host.coordinator_for(group_id)
    if coordinator is None:
        return ErrorCode.not_coordinator, None, None
    try:
        return ErrorCode.none, await getattr(coordinator, method)(group_id, *args, **kwargs), None
    except Exception as error:
        error = coordinator_append_error(error)
        return error_code_of(error), None, error.message if isinstance(error, KafkaError) else None


async def _call(host: GroupHost, group_id: str, method: str, *args, **kwargs) -> tuple[ErrorCode, Any]:
    code, answer, _ = await coordinator_call(host, group_id, method, *args, **kwargs)
    return code, answer


async def commit(host: GroupHost, request, version: int, decision: Decision = ALLOWED):
    response_type = load_response_schema(COMMIT_KEY, version)
    module = module_of(response_type)
    refused = decision.refused_names(ResourceType.TOPIC)
    offsets = {(t.name, int(p.partition_index)): (int(p.committed_offset),
                                                  int(getattr(p, "committed_leader_epoch", -1)),
                                                  p.committed_metadata or "")
               for t in request.topics if t.name not in refused for p in t.partitions}
    if decision.refusal is not None:
        code, per_partition = error_code_of(decision.refusal), None
    elif refused and not offsets:   # nothing left to commit: the coordinator is not asked
        code, per_partition = ErrorCode.none, None
    else:
        code, per_partition = await _call(host, request.group_id, "commit_offsets", offsets, request.member_id,
                                          int(request.generation_id_or_member_epoch),
                                          getattr(request, "group_instance_id", None))
    # Every version's partition answer is (partition_index, error_code): built
    # directly, with plain ints (kio's checked ones cost more than the rest).
    partition_type, topic_type = module.OffsetCommitResponsePartition, module.OffsetCommitResponseTopic
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            error = (decision.refused[ResourceType.TOPIC][t.name] if t.name in refused and code == ErrorCode.none
                     else per_partition.get((t.name, p.partition_index)) if per_partition else None)
            partitions.append(partition_type(partition_index=p.partition_index, error_code=(
                code if code != ErrorCode.none else error_code_of(error) if error is not None else ErrorCode.none)))
        topics.append(topic_type(name=t.name, partitions=tuple(partitions)))
    return make(response_type, throttle_time=_NO_THROTTLE, topics=tuple(topics))


_FETCH_GROUP = check_of(FETCH_KEY, AclOperation.DESCRIBE, ResourceType.GROUP)
_FETCH_TOPIC = check_of(FETCH_KEY, AclOperation.DESCRIBE, ResourceType.TOPIC)


async def _fetch_group(host: GroupHost, group_id: str, topics, module, names, request_gate: Gate,
                       require_stable: bool = False):
    error = request_gate.refusal(_FETCH_GROUP, group_id)
    if error is not None:
        return error_code_of(error), ()
    allowed = lambda topic: request_gate.allows(_FETCH_TOPIC, topic)   # noqa: E731
    wanted = None if topics is None else [(t.name, int(p)) for t in topics for p in t.partition_indexes
                                          if allowed(t.name)]
    stable = {"require_stable": True} if require_stable else {}
    code, found = await _call(host, group_id, "fetch_offsets", wanted, **stable) if wanted != [] \
        else (ErrorCode.none, {})
    refused = {} if topics is None else {(t.name, int(p)): ErrorCode.topic_authorization_failed
                                         for t in topics for p in t.partition_indexes if not allowed(t.name)}
    by_topic: dict[str, list] = {}
    for (topic, partition), committed in sorted([*(found or {}).items(), *refused.items()]):
        if committed is ErrorCode.topic_authorization_failed:
            offset, epoch, metadata, partition_code = -1, -1, "", committed
        elif isinstance(committed, Exception):   # UNSTABLE_OFFSET_COMMIT
            offset, epoch, metadata, partition_code = -1, -1, "", error_code_of(committed)
        elif topics is None and not allowed(topic):   # all offsets: the topics it may describe only
            continue
        else:
            offset, epoch, metadata = committed if committed is not None else (-1, -1, "")
            partition_code = ErrorCode.none
        by_topic.setdefault(topic, []).append(make(
            getattr(module, names[1]), partition_index=i32(partition), committed_offset=i64(offset),
            committed_leader_epoch=i32(epoch), metadata=metadata, error_code=partition_code))
    return code, tuple(make(getattr(module, names[0]), name=topic, partitions=tuple(partitions))
                       for topic, partitions in by_topic.items())


async def fetch(host: GroupHost, request, version: int, request_gate: Gate | None = None):
    request_gate = request_gate or Gate(None, "", "")
    response_type = load_response_schema(FETCH_KEY, version)
    module = module_of(response_type)
    if version >= 8:
        groups = []
        for group in request.groups:
            code, topics = await _fetch_group(host, group.group_id, group.topics, module,
                                              ("OffsetFetchResponseTopics", "OffsetFetchResponsePartitions"),
                                              request_gate, bool(request.require_stable))
            groups.append(make(module.OffsetFetchResponseGroup, group_id=group.group_id, topics=topics,
                               error_code=code))
        return make(response_type, throttle_time=_NO_THROTTLE, groups=tuple(groups))
    code, topics = await _fetch_group(host, request.group_id, request.topics, module,
                                      ("OffsetFetchResponseTopic", "OffsetFetchResponsePartition"), request_gate,
                                      bool(getattr(request, "require_stable", False)))
    if version < 2 and code != ErrorCode.none:   # v0-1 have no group error: each partition says it
        topics = tuple(make(module.OffsetFetchResponseTopic, name=t.name, partitions=tuple(
            make(module.OffsetFetchResponsePartition, partition_index=i32(p), committed_offset=i64(-1),
                 metadata="", error_code=code) for p in t.partition_indexes)) for t in request.topics or ())
    return make(response_type, throttle_time=_NO_THROTTLE, topics=topics, error_code=code)


async def delete(host: GroupHost, request, version: int, decision: Decision = ALLOWED):
    response_type = load_response_schema(DELETE_KEY, version)
    module = module_of(response_type)
    asked = [(t.name, int(p.partition_index)) for t in request.topics for p in t.partitions]
    refused = decision.refused_names(ResourceType.TOPIC)
    wanted = [(topic, partition) for topic, partition in asked if topic not in refused]
    if decision.refusal is not None:
        code, per_partition = error_code_of(decision.refusal), {}
    elif refused and not wanted:   # nothing left to delete: the coordinator is not asked
        code, per_partition = ErrorCode.none, {}
    else:
        code, per_partition = await _call(host, request.group_id, "delete_offsets", wanted)
    topics = []
    if code == ErrorCode.none:
        by_topic: dict[str, list] = {}
        for (topic, partition) in asked:
            error = decision.refusal_of(ResourceType.TOPIC, topic) or per_partition.get((topic, partition))
            by_topic.setdefault(topic, []).append(make(
                module.OffsetDeleteResponsePartition, partition_index=i32(partition),
                error_code=error_code_of(error) if error is not None else ErrorCode.none))
        topics = [make(module.OffsetDeleteResponseTopic, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()]
    return make(response_type, error_code=code, throttle_time=_NO_THROTTLE, topics=tuple(topics))
