"""The authorization step every handler takes before it acts: Kafka's KafkaApis
checks (core.api_authorization's table) made against the node's image, for the
request's principal and host.

Every node's dispatch table (protocol.node_table) carries its image source, so
each request's context holds the image it arrived under (RequestContext.image):
the decision reads that image and nothing else, no Ray call and no I/O. `decide`
reads the table for a request: its REQUEST checks (each under its `when`) answer
the whole request; its EACH checks name the resources refused, which the handler
answers with the check's error while it serves the rest; FILTER checks and the
conditions only a handler can judge (a topic that does not exist, the offsets a
group holds) are the handler's, through `Gate.allows`. The broker's edge takes
the same decision to relay only what the client may do (protocol.edge).

Trade-off: the table's `field` and `when` are read as data (dotted paths, a
condition per string), so a new API needs its row and, for a new condition, a
predicate here; a test reads every row against these maps, so none is silently
skipped. A context without an image (a handler called directly by a test's own
table) is authorized as everything allowed: every node's table has one.

Invariants: a refused request or resource changes nothing (the handler answers it
before calling its host); a super user's decision reads no binding (the relayed
requests of a broker, on rafka's cluster user, cost one set lookup).
Callers: the handlers, protocol.edge, tests.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from rafka.core.acl import (CLUSTER_NAME, AclOperation, Resource, ResourceType, operations_bitfield,
                            supported_operations)
from rafka.core.api_authorization import KAFKA_API_AUTHORIZATION, Check, Scope, permits
from rafka.core.cluster_image import ClusterImage
from rafka.core.errors import KafkaError, TransactionalIdAuthorizationFailed
from rafka.core.records import ATTR_TRANSACTIONAL

# Kafka's config resource types (DescribeConfigs, AlterConfigs): the ACL resource
# each is authorized on, and the condition string the table names it by.
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_GROUP = 2, 4, 8, 32
_CONFIG_RESOURCE_WHEN = {CONFIG_TOPIC: "resource_type == TOPIC",
                         CONFIG_BROKER: "resource_type in (BROKER, BROKER_LOGGER)",
                         CONFIG_BROKER_LOGGER: "resource_type in (BROKER, BROKER_LOGGER)",
                         CONFIG_GROUP: "resource_type == GROUP"}

PRODUCE_KEY = 0

# The table's request-level conditions, as predicates on (body, version).
WHEN: Mapping[str, Callable[[Any, int], bool]] = MappingProxyType({
    "": lambda body, version: True,
    "transactional_id is not None": lambda body, version: getattr(body, "transactional_id", None) is not None,
    "transactional_id is None": lambda body, version: getattr(body, "transactional_id", None) is None,
    "replica_id >= 0 (a follower's fetch)": lambda body, version: int(body.replica_id) >= 0,
    "replica_id < 0 (a consumer's fetch)": lambda body, version: int(body.replica_id) < 0,
    "topics listed": lambda body, version: body.topics is not None and (version > 0 or bool(body.topics)),
    "key_type == 0 (group)": lambda body, version: int(getattr(body, "key_type", 0)) == 0,
    "key_type == 1 (transaction)": lambda body, version: int(getattr(body, "key_type", 0)) == 1,
    "version <= 3": lambda body, version: version <= 3,
    "version >= 4 (brokers verifying)": lambda body, version: version >= 4,
})
# Conditions on one config resource of a request's `resources[]` (judged per resource).
PER_RESOURCE_WHEN = frozenset(_CONFIG_RESOURCE_WHEN.values())
# Conditions only the handler can judge (on what exists, or on its answer):
# `decide` leaves their checks to it.
HANDLER_WHEN = frozenset({"topics is None (all topics)", "topics empty (all topics)",
                          "allow_auto_topic_creation and the topic does not exist",
                          "topics is None (all offsets)", "include_cluster_authorized_operations"})


class Gate:
    """The authorizer of one request: the image it arrived under and its caller."""

    __slots__ = ("image", "principal", "host", "everything")

    def __init__(self, image: ClusterImage | None, principal: str, host: str) -> None:
        self.image = image
        self.principal = principal
        self.host = host
        # no image: a test's own table (see the module's note); a super user: no binding is read
        self.everything = image is None or principal in image.super_users

    def allows(self, check: Check, name: str = CLUSTER_NAME) -> bool:
        """Whether `check` passes for the resource `name` (the cluster's for a cluster check)."""
        return self.everything or permits(check, self._allowed, name)

    def refusal(self, check: Check, name: str = CLUSTER_NAME) -> KafkaError | None:
        """The check's error when it refuses `name`, else None."""
        return None if self.allows(check, name) else refusal_error(check, self.principal, name)

    def require(self, check: Check, name: str = CLUSTER_NAME) -> None:
        error = self.refusal(check, name)
        if error is not None:
            raise error

    def authorized_operations(self, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
        """Kafka's authorized-operations bitfield of the resource for this caller
        (AuthHelper.authorizedOperations): each supported operation it may do."""
        return operations_bitfield(
            operation for operation in supported_operations(resource_type)
            if self.everything or self._allowed(operation, resource_type, name))

    def _allowed(self, operation: AclOperation, resource_type: ResourceType, name: str | None) -> bool:
        if name is None:   # a by-resource-type check (core.api_authorization.Check.by_resource_type)
            return self.image.authorize_by_resource_type(self.principal, self.host, operation, resource_type)
        return self.image.authorize(self.principal, self.host, operation, Resource(resource_type, name))


def refusal_error(check: Check, principal: str, name: str) -> KafkaError:
    """The check's error, with Kafka's wording for a cluster refusal."""
    if check.resource_type == ResourceType.CLUSTER:
        return check.error(f"Request {principal} {check.operation.name} on the cluster is not authorized.")
    return check.error(f"{principal} is not authorized to {check.operation.name} "
                       f"{check.resource_type.name} {name!r}.")


def gate(context) -> Gate:
    """The gate of a request (its RequestContext)."""
    return Gate(context.image, context.principal, context.client_host)


def checks(api_key: int) -> tuple[Check, ...]:
    return KAFKA_API_AUTHORIZATION[api_key].checks


def check_of(api_key: int, operation: AclOperation, resource_type: ResourceType) -> Check:
    """The API's check of `operation` on `resource_type` (the first in the table)."""
    return next(c for c in checks(api_key) if (c.operation, c.resource_type) == (operation, resource_type))


def config_check(api_key: int, config_resource_type: int) -> Check | None:
    """The check a DescribeConfigs / (Incremental)AlterConfigs resource of this type
    takes (None: a type Kafka authorizes no way, answered INVALID_REQUEST anyway)."""
    when = _CONFIG_RESOURCE_WHEN.get(int(config_resource_type))
    return next((c for c in checks(api_key) if c.when == when), None) if when else None


def config_acl_resource(config_resource_type: int, name: str) -> tuple[ResourceType, str] | None:
    """The ACL resource a config resource is authorized on."""
    check_type = {CONFIG_TOPIC: ResourceType.TOPIC, CONFIG_GROUP: ResourceType.GROUP,
                  CONFIG_BROKER: ResourceType.CLUSTER, CONFIG_BROKER_LOGGER: ResourceType.CLUSTER}.get(
        int(config_resource_type))
    if check_type is None:
        return None
    return check_type, CLUSTER_NAME if check_type == ResourceType.CLUSTER else name


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """What a request may do: `refusal` refuses all of it; else `refused` names,
    by resource type, the resources its EACH checks refuse (each with its error)."""
    refusal: KafkaError | None = None
    refused: Mapping[ResourceType, Mapping[str, KafkaError]] = dataclasses.field(default_factory=dict)

    @property
    def allows_all(self) -> bool:
        return self.refusal is None and not self.refused

    def refusal_of(self, resource_type: ResourceType, name: str | None) -> KafkaError | None:
        """The error refusing this resource (the whole request's first), or None."""
        if self.refusal is not None:
            return self.refusal
        return self.refused.get(resource_type, {}).get(name) if name is not None else None

    def refused_names(self, resource_type: ResourceType) -> frozenset[str]:
        return frozenset(self.refused.get(resource_type, ()))


ALLOWED = Decision()


def decide(context, body) -> Decision:
    """The table's checks of the request's API, for its caller (see the module's note),
    and one rule the table cannot hold, Kafka's whatever the ACLs: a Produce with
    transactional records and no transactional id is refused whole
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaApis.handleProduceRequest), as it
    would skip the leader's transaction verification (KIP-890). A super user's is
    not, where Kafka refuses it too: a group coordinator writes its TxnOffsetCommit
    batches so (its log is remote; it verified the transaction itself before
    queueing them, core.coordinator_shard), and an operator can write what a log
    from before KIP-890 can hold (the hanging-transactions test does)."""
    request_gate = gate(context)
    if request_gate.everything:
        return ALLOWED
    if context.api_key == PRODUCE_KEY and body.transactional_id is None and _any_transactional(body):
        return Decision(refusal=TransactionalIdAuthorizationFailed("transactional records need a transactional id"))
    return decide_with(request_gate, context.api_key, context.api_version, body)


def _any_transactional(body) -> bool:
    """Whether a Produce's batch has the transactional attribute (the low byte of a
    v2 batch's attributes is its byte 22; one too short is refused by the handler)."""
    return any(p.records is not None and len(p.records) > 22 and p.records[22] & ATTR_TRANSACTIONAL
               for t in body.topic_data for p in t.partition_data)


def decide_with(request_gate: Gate, api_key: int, version: int, body) -> Decision:
    refused: dict[ResourceType, dict[str, KafkaError]] = {}
    for check in checks(api_key):
        if check.scope == Scope.FILTER or check.when in HANDLER_WHEN:
            continue
        if check.when in PER_RESOURCE_WHEN:
            for resource in body.resources:
                if _CONFIG_RESOURCE_WHEN.get(int(resource.resource_type)) == check.when:
                    name = CLUSTER_NAME if check.resource_type == ResourceType.CLUSTER else resource.resource_name
                    error = request_gate.refusal(check, name)
                    if error is not None:
                        refused.setdefault(check.resource_type, {}).setdefault(name, error)
            continue
        if not WHEN[check.when](body, version):
            continue
        names = [CLUSTER_NAME] if check.resource_type == ResourceType.CLUSTER else names_at(body, check.field)
        for name in names:
            error = request_gate.refusal(check, name)
            if error is None:
                continue
            if check.scope == Scope.REQUEST:
                return Decision(refusal=error)
            refused.setdefault(check.resource_type, {}).setdefault(name, error)
    return Decision(refused=refused) if refused else ALLOWED


_MISSING = object()
_NOTE = re.compile(r"\s*\([^)]*\)")


def names_at(body, field: str) -> list[str]:
    """The resource names at a table field of a request: a dotted path where `x[]`
    is a list (`topics[].name`), the first of ` / ` alternatives the request's
    version has (`topics[].name / topic_names[]`); notes in parentheses ignored.
    Null names (a topic given by id) are left out: the handler resolves those."""
    for alternative in _NOTE.sub("", field).split(" / "):
        found = _resolve(body, alternative.strip().split("."))
        if found is not _MISSING:
            return [name for name in found if isinstance(name, str)]
    return []


def _resolve(value, segments: list[str]):
    if not segments:
        return [value]
    segment = segments[0]
    attribute = segment.removesuffix("[]")
    if not hasattr(value, attribute):
        return _MISSING
    found = getattr(value, attribute)
    if found is None:
        return []
    out: list = []
    for item in (found if segment.endswith("[]") else (found,)):
        resolved = _resolve(item, segments[1:])
        if resolved is _MISSING:
            return _MISSING
        out += resolved
    return out


def allowed_names(request_gate: Gate, check: Check, names: Iterable[str]) -> list[str]:
    """The names a FILTER check lets through, in their order."""
    return [name for name in names if request_gate.allows(check, name)]


class _Refusing:
    """A coordinator that answers every call with `error` (nothing reaches the real one)."""

    def __init__(self, error: KafkaError) -> None:
        self._error = error

    def __getattr__(self, name: str):
        async def refuse(*args, **kwargs):
            raise self._error
        return refuse


class _DecidedHost:
    """A group or transaction host seen through a request's decision: the
    coordinator of a refused group or transactional id refuses every call."""

    def __init__(self, host, decision: Decision) -> None:
        self._host = host
        self._decision = decision

    def coordinator_for(self, group_id: str):
        error = self._decision.refusal_of(ResourceType.GROUP, group_id)
        return _Refusing(error) if error is not None else self._host.coordinator_for(group_id)

    def transaction_coordinator_for(self, transactional_id: str):
        error = self._decision.refusal_of(ResourceType.TRANSACTIONAL_ID, transactional_id)
        return (_Refusing(error) if error is not None
                else self._host.transaction_coordinator_for(transactional_id))

    def __getattr__(self, name: str):
        return getattr(self._host, name)


def decided_host(host, context, body):
    """`host` for a request its decision allows all of; else one whose coordinator
    of each refused group or transactional id (of all, when the whole request is
    refused) answers the refusal: the handlers' own error paths answer it."""
    decision = decide(context, body)
    return host if decision.allows_all else _DecidedHost(host, decision)
