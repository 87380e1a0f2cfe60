"""CreateTopics v2-7, DeleteTopics v1-6 and CreatePartitions v0-3, on the
controller node (Kafka's admin clients send them to the controller Metadata names).

What Kafka answers (ControllerApis / ReplicationControlManager), and what these
handlers do the same way:
  * per topic, its own error code and message: TOPIC_ALREADY_EXISTS,
    INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR,
    INVALID_CONFIG, UNKNOWN_TOPIC_OR_PARTITION (delete, create partitions);
    the other topics of the request go on; a name CreateTopics or
    CreatePartitions gives twice is answered once, INVALID_REQUEST ("Duplicate
    topic name."), and nothing is done for it; so is a DeleteTopics name or id
    given twice ("Duplicate topic id."), and an entry with both or neither.
  * num_partitions / replication_factor -1: the cluster's defaults (Kafka's
    num.partitions and default.replication.factor, 1 unless the cluster sets
    them); the answer gives the values the topic got.
  * manual replica assignments are not taken: INVALID_REPLICA_ASSIGNMENT (rafka
    assigns replicas to brokers itself, Kafka's rack-unaware way).
  * validate_only: checked as a creation would be, nothing created.
  * v5+: a created topic's configs (every one, with its source), sorted by
    name; none with an error.
  * CreateTopics and CreatePartitions are answered once the controller has
    committed the topic (its replicas start meanwhile), as Kafka's controller
    answers: clients see LEADER_NOT_AVAILABLE until each leader serves, and
    retry. A creation of a name whose deletion is still tearing down waits for
    it. Whatever does not finish within the request's timeout answers
    REQUEST_TIMED_OUT and goes on (the topic appears later).
  * DeleteTopics by topic id (v6): the id is looked up in the image;
    UNKNOWN_TOPIC_ID when no topic has it.
  * controller_mutation_rate (KIP-599, ControllerMutationQuotaManager, on the
    controller as KRaft's): each topic's partitions (created, deleted, added)
    are taken from the client's bucket (core.client_quotas) in the request's
    order; strict from CreateTopics v6, DeleteTopics v5 and CreatePartitions v3
    (a topic met with the bucket below zero answers THROTTLING_QUOTA_EXCEEDED,
    nothing done for it), permissive before; the answer's throttle_time_ms
    says how long to wait either way. A topic refused after all gives its
    partitions back. As KRaft's controller does, a new topic is validated
    before its partitions are taken (an existing one answers
    TOPIC_ALREADY_EXISTS, not THROTTLING_QUOTA_EXCEEDED; for a client with a
    quota only: a validate_only call to the controller first), and a
    validate_only creation or CreatePartitions takes them as a real one. The broker that relayed the
    request mutes the client's connection for the throttle time (protocol.edge,
    as Kafka's sendForwardedResponse), so clients before KIP-219 wait too.
  * authorization (KafkaApis, ControllerApis): CREATE on each topic or on the
    cluster; DESCRIBE and DELETE on each topic deleted (a topic the caller may
    not describe answers TOPIC_AUTHORIZATION_FAILED whether or not it exists);
    ALTER on each topic given partitions. A refused topic answers
    TOPIC_AUTHORIZATION_FAILED and nothing is asked of the controller for it.
Caller: the controller actor's table, through `routes(admin)`.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import uuid
from collections.abc import Awaitable, Callable
from typing import Protocol

from rafka.protocol.entities import load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32, i32Timedelta

from rafka.core.client_quotas import (NO_CLIENT_QUOTAS, ControllerMutationQuotaManager, MutationQuota,
                                      user_of_principal)
from rafka.core.clock import SystemClock
from rafka.core.cluster_image import ClusterImage
from rafka.core.errors import InvalidReplicaAssignment, InvalidRequest, RequestTimedOut
from rafka.core.metadata import id_as_uuid
from rafka.core.acl import AclOperation, ResourceType
from rafka.protocol.authorization import check_of, gate
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import make, module_of
from rafka.protocol.handlers.describe_configs import topic_config_entries
from rafka.protocol.handlers.partitions import error_code_of

CREATE_KEY, DELETE_KEY, CREATE_PARTITIONS_KEY = 19, 20, 37
ZERO_UUID = uuid.UUID(int=0)
# KIP-599: the first versions whose controller mutation quota is strict
STRICT_QUOTA_SINCE = {CREATE_KEY: 6, DELETE_KEY: 5, CREATE_PARTITIONS_KEY: 3}
# KafkaApis' checks: CREATE on each topic (or on the cluster), DESCRIBE and DELETE, ALTER
_CREATE = check_of(CREATE_KEY, AclOperation.CREATE, ResourceType.TOPIC)
_DESCRIBE = check_of(DELETE_KEY, AclOperation.DESCRIBE, ResourceType.TOPIC)
_DELETE = check_of(DELETE_KEY, AclOperation.DELETE, ResourceType.TOPIC)
_ALTER = check_of(CREATE_PARTITIONS_KEY, AclOperation.ALTER, ResourceType.TOPIC)


class TopicAdmin(Protocol):
    """The controller's calls."""

    def cluster_image(self) -> ClusterImage: ...

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           config: dict | None = ..., validate_only: bool = ...) -> dict:
        """-1 for `partitions` or `replication_factor`: the cluster's default; the
        answer's "partitions" list the replicas each partition got, its "config"
        the topic's own configs."""

    async def delete_topic(self, name: str) -> None: ...

    async def add_partitions(self, name: str, count: int, validate_only: bool = ...) -> dict: ...

    async def alter_topic_config(self, name: str, ops: list, validate_only: bool = ...,
                                 replace: bool = ...) -> dict:
        """protocol.handlers.alter_configs' call, on the controller's node."""


async def within(coroutine, timeout_ms: int):
    """Run to the end in any case; wait for it at most `timeout_ms` (then
    REQUEST_TIMED_OUT, the work goes on)."""
    task = asyncio.ensure_future(coroutine)
    try:
        return await asyncio.wait_for(asyncio.shield(task), max(timeout_ms, 1) / 1000)
    except asyncio.TimeoutError:
        raise RequestTimedOut(f"not finished within {timeout_ms} ms; it goes on") from None


def _refuse_here(topic, duplicates: set[str], request_gate, check) -> None:
    """What this node refuses of a CreateTopics / CreatePartitions topic before the
    controller is asked: a name given twice, the client's ACLs (`check`), replica
    assignments (rafka assigns replicas to brokers)."""
    if topic.name in duplicates:
        raise InvalidRequest("Duplicate topic name.")
    request_gate.require(check, topic.name)
    if topic.assignments:
        raise InvalidReplicaAssignment("manual replica assignments are not taken: rafka assigns replicas to brokers")


def _once_each(items, name_of) -> tuple[list, set[str]]:
    """The items with each name's first only, and the names given more than once:
    Kafka's controller answers such a name once, INVALID_REQUEST ("Duplicate topic
    name."), and does nothing for it."""
    first: dict[str, object] = {}
    for item in items:
        first.setdefault(name_of(item), item)
    counts = collections.Counter(name_of(item) for item in items)
    return list(first.values()), {name for name, times in counts.items() if times > 1}


def _failure(error: Exception) -> tuple[ErrorCode, str]:
    return error_code_of(error), str(getattr(error, "message", error))


def _throttle(quota: MutationQuota) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=quota.throttle_time_ms))


async def _mutate(quota: MutationQuota, partitions: int, mutation: Callable[[], Awaitable]):
    """`mutation()` run with `partitions` taken from the quota first (what was
    taken given back if it fails, unless it timed out: then it goes on)."""
    taken = quota.record(partitions)
    try:
        return await mutation()
    except RequestTimedOut:
        raise
    except Exception:
        quota.refund(taken)
        raise


def routes(admin: TopicAdmin, *, clock=None, mutation_quotas: bool = True) -> list[Route]:
    """`clock`: core.clock's (SystemClock by default), for the mutation quotas;
    `mutation_quotas`: this is the controller's node, which charges them."""
    quota_manager = ControllerMutationQuotaManager((clock or SystemClock()).monotonic_ms)

    def quota_of(context: RequestContext, api_key: int) -> MutationQuota:
        quotas = context.image.client_quotas if context.image is not None and mutation_quotas else None
        if quotas is None:
            return quota_manager.quota_for(NO_CLIENT_QUOTAS, "", "", strict=False)
        return quota_manager.quota_for(quotas, user_of_principal(context.principal), context.client_id,
                                         strict=context.api_version >= STRICT_QUOTA_SINCE[api_key])

    async def create(request, context: RequestContext):
        response_type = load_response_schema(CREATE_KEY, context.api_version)
        module = module_of(response_type)
        timeout_ms = int(request.timeout.total_seconds() * 1000)
        request_gate = gate(context)
        quota = quota_of(context, CREATE_KEY)
        loop = asyncio.get_running_loop()
        started_s = loop.time()
        topics, duplicates = _once_each(request.topics, lambda t: t.name)

        def checked(topic) -> dict:
            """The topic's configs, once what is refused here is ruled out."""
            _refuse_here(topic, duplicates, request_gate, _CREATE)
            return {c.name: c.value for c in topic.configs}

        async def validate(topic):
            try:
                return await within(admin.create_topic(topic.name, int(topic.num_partitions),
                                                       int(topic.replication_factor), checked(topic),
                                                       validate_only=True), timeout_ms)
            except Exception as error:
                return error
        # KRaft validates a topic before it takes the quota, and charges a
        # validate_only creation too: those are validated first, every topic at
        # once, then charged in the request's order. A strict client with a quota
        # asks the controller twice (the creation within what is left of the
        # timeout); the others' order of validating and charging changes no answer.
        validate_first = request.validate_only or (quota.limited and quota.strict)
        validated = (await asyncio.gather(*(validate(t) for t in topics)) if validate_first
                     else [None] * len(topics))

        async def one(topic, validation):
            code, message, described = ErrorCode.none, None, None
            partitions, factor = int(topic.num_partitions), int(topic.replication_factor)
            taken = max(partitions, 1)   # -1: the default, made exact below
            try:
                if isinstance(validation, Exception):
                    raise validation
                config = checked(topic)
                if request.validate_only:
                    described = validation
                    quota.record(taken)
                else:
                    left_ms = timeout_ms - int((loop.time() - started_s) * 1000)
                    described = await _mutate(quota, taken, lambda: within(admin.create_topic(
                        topic.name, partitions, factor, config, validate_only=False), left_ms))
            except Exception as error:
                code, message = _failure(error)
            ok = code == ErrorCode.none
            if ok and described:   # what -1 became
                partitions, factor = len(described["partitions"]), len(described["partitions"][0]["replicas"])
                if taken:
                    quota.refund(taken - partitions)   # the default's own count (a negative refund takes more)
            topic_id = id_as_uuid(described["topic_id"]) if described and described.get("topic_id") else ZERO_UUID
            # v5+: the topic's configs as it got them, sorted by name (an empty list
            # with an error), as ControllerApis answers
            configs = tuple(make(module.CreatableTopicConfigs, name=entry.name, value=entry.value, read_only=False,
                                 config_source=i8(entry.source), is_sensitive=False)
                            for entry in sorted(topic_config_entries(described["config"]), key=lambda e: e.name)
                            ) if ok and described and hasattr(module, "CreatableTopicConfigs") else ()
            return make(module.CreatableTopicResult, name=topic.name, topic_id=topic_id, error_code=code,
                        error_message=message, topic_config_error_code=i16(0),
                        num_partitions=i32(partitions if ok else -1), replication_factor=i16(factor if ok else -1),
                        configs=configs)
        results = await asyncio.gather(*(one(t, v) for t, v in zip(topics, validated)))
        return make(response_type, throttle_time=_throttle(quota), topics=tuple(results))

    async def delete(request, context: RequestContext):
        response_type = load_response_schema(DELETE_KEY, context.api_version)
        module = module_of(response_type)
        timeout_ms = int(request.timeout.total_seconds() * 1000)
        if context.api_version >= 6:
            given = [(t.name, t.topic_id if t.topic_id != ZERO_UUID else None) for t in request.topics]
        else:
            given = [(name, None) for name in request.topic_names]
        # Kafka's ControllerApis.deleteTopics: a name and an id in one entry, neither,
        # or a name or id given twice, answered INVALID_REQUEST (a duplicate once)
        wanted, duplicates = _once_each(given, lambda entry: entry)
        refused = {entry: "You may not specify both topic name and topic id." for entry in wanted
                   if entry[0] is not None and entry[1] is not None}
        refused.update({entry: "Neither topic name nor id were specified." for entry in wanted if entry == (None, None)})
        refused.update({entry: f"Duplicate topic {'name' if entry[0] is not None else 'id'}."
                        for entry in duplicates})
        request_gate = gate(context)
        quota = quota_of(context, DELETE_KEY)

        async def one(name, topic_id):
            code, message = ErrorCode.none, None
            if (name, topic_id) in refused:
                return make(module.DeletableTopicResult, name=name, topic_id=topic_id or ZERO_UUID,
                            error_code=ErrorCode.invalid_request, error_message=refused[name, topic_id])
            if name is None:
                found = admin.cluster_image().topic_by_id(topic_id)
                if found is None:
                    return make(module.DeletableTopicResult, name=None, topic_id=topic_id,
                                error_code=ErrorCode.unknown_topic_id, error_message="no topic has this id")
                name = found.name
            try:
                request_gate.require(_DESCRIBE, name)   # an unknown topic's existence is not told
                request_gate.require(_DELETE, name)
                found = admin.cluster_image().topics.get(name)
                await _mutate(quota, len(found.partitions) if found is not None else 0,
                              lambda: within(admin.delete_topic(name), timeout_ms))
            except Exception as error:
                code, message = _failure(error)
            return make(module.DeletableTopicResult, name=name, topic_id=topic_id or ZERO_UUID, error_code=code,
                        error_message=message)
        results = await asyncio.gather(*(one(n, i) for n, i in wanted))
        return make(response_type, throttle_time=_throttle(quota), responses=tuple(results))

    async def create_partitions(request, context: RequestContext):
        response_type = load_response_schema(CREATE_PARTITIONS_KEY, context.api_version)
        module = module_of(response_type)
        timeout_ms = int(request.timeout.total_seconds() * 1000)
        request_gate = gate(context)
        quota = quota_of(context, CREATE_PARTITIONS_KEY)
        topics, duplicates = _once_each(request.topics, lambda t: t.name)

        async def one(topic):
            code, message = ErrorCode.none, None
            try:
                _refuse_here(topic, duplicates, request_gate, _ALTER)
                found = admin.cluster_image().topics.get(topic.name)
                added = 0 if found is None else int(topic.count) - len(found.partitions)
                if request.validate_only:   # validated, then charged as a real one (KRaft's controller)
                    await within(admin.add_partitions(topic.name, int(topic.count), validate_only=True), timeout_ms)
                    quota.record(added)
                else:
                    await _mutate(quota, added, lambda: within(admin.add_partitions(
                        topic.name, int(topic.count), validate_only=False), timeout_ms))
            except Exception as error:
                code, message = _failure(error)
            return make(module.CreatePartitionsTopicResult, name=topic.name, error_code=code, error_message=message)
        results = await asyncio.gather(*(one(t) for t in topics))
        return make(response_type, throttle_time=_throttle(quota), results=tuple(results))
    return [Route(CREATE_KEY, 2, 7, create), Route(DELETE_KEY, 1, 6, delete),
            Route(CREATE_PARTITIONS_KEY, 0, 3, create_partitions)]
