"""Kafka's ACLs: bindings, filters, and the decision whether a principal may do an
operation on a resource (Kafka's StandardAuthorizer, as a pure function).

A binding is (resource pattern, entry): the pattern a resource type, a name and a
pattern type (LITERAL, with `*` meaning every name of the type, or PREFIXED); the
entry a principal (`User:<name>`, `User:*` for everyone), a host (`*` or an
address), an operation and ALLOW or DENY. The codes are Kafka's (the wire carries
them, and the controller's records keep them).

The decision, as Kafka makes it:
  * a super user may do anything (no binding is read);
  * the bindings that apply to a resource are those of its type whose pattern
    matches its name: LITERAL of that name, LITERAL `*`, PREFIXED of a prefix of it;
  * of those, one matches the request when its principal is the caller's or
    `User:*`, its host is the caller's or `*`, and its operation is the one asked
    for, or ALL, or (ALLOW bindings only) one that implies it: READ, WRITE, DELETE
    and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS;
  * a matching DENY refuses, whatever else matches; else a matching ALLOW allows;
  * when bindings apply to the resource but none matches: refused;
  * when none applies to it at all: `allow_everyone_if_no_acl_found` decides
    (Kafka's allow.everyone.if.no.acl.found; in rafka true on an open cluster,
    false once SASL is required).

Invariants: bindings, filters and `Acls` are immutable and hashable (`Acls` is
built once per change of the bindings and shared by every request that reads
it); the decision reads a bounded number of dict entries per distinct prefix
length, never every binding; nothing here does I/O.

Callers: core.metadata (the bindings the controller keeps, its records and
their validation), core.cluster_image (the bindings every node holds),
core.api_authorization (what each API checks), the ACL handlers
(protocol.handlers.acls).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from rafka.core.errors import InvalidRequest


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1              # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1              # filters only: a pattern of any type, its name equal to the filter's
    MATCH = 2            # filters only: every pattern that would apply to the filter's name
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1              # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1              # filters only
    DENY = 2
    ALLOW = 3


WILDCARD = "*"                       # a LITERAL resource name or a host: every one
WILDCARD_PRINCIPAL = "User:*"
ANONYMOUS = "User:ANONYMOUS"         # a connection that did not log in (Kafka's KafkaPrincipal.ANONYMOUS)
CLUSTER_NAME = "kafka-cluster"       # the one CLUSTER resource's name
# Kafka's controller takes at most this many records per user operation
# (QuorumController.MAX_RECORDS_PER_USER_OP): the bound on one Create/DeleteAcls.
MAX_ACL_CHANGES_PER_REQUEST = 10_000

# ALLOW bindings of these operations allow the key operation too (an ALLOW of
# READ lets the principal DESCRIBE); DENY bindings deny only their own operation.
IMPLIED_BY: Mapping[AclOperation, frozenset[AclOperation]] = MappingProxyType({
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
})


class Resource(NamedTuple):
    """What a request acts on: a resource type and one name (never a pattern)."""
    resource_type: ResourceType
    name: str


CLUSTER = Resource(ResourceType.CLUSTER, CLUSTER_NAME)


def parse_super_users(value: str | Iterable[str] | None) -> frozenset[str]:
    """Kafka's super.users: principals separated by `;` ("User:admin;User:ops"),
    or given as a list. ValueError for one that is not `Type:name`."""
    if value is None:
        return frozenset()
    names = value.split(";") if isinstance(value, str) else list(value)
    principals = frozenset(name.strip() for name in names if name.strip())
    for principal in principals:
        kind, sep, name = principal.partition(":")
        if not (sep and kind and name):
            raise ValueError(f"super.users: expected principalType:principalName, not {principal!r}")
    return principals


def user_principal(user: str | None) -> str:
    """The principal of a connection: `User:<name>` after a SASL login, else ANONYMOUS."""
    return ANONYMOUS if user is None else f"User:{user}"


@dataclasses.dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL. Hashable: the controller keeps a set of them (a binding added twice
    is one binding, as Kafka's AclControlManager keeps them)."""
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def to_record(self) -> dict[str, Any]:
        """The fields of Kafka's AccessControlEntryRecord (codes as ints), without its id."""
        return {"resource_type": int(self.resource_type), "resource_name": self.resource_name,
                "pattern_type": int(self.pattern_type), "principal": self.principal, "host": self.host,
                "operation": int(self.operation), "permission_type": int(self.permission_type)}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> AclBinding:
        return cls(ResourceType(record["resource_type"]), record["resource_name"],
                   PatternType(record["pattern_type"]), record["principal"], record["host"],
                   AclOperation(record["operation"]), AclPermissionType(record["permission_type"]))

    @classmethod
    def of(cls, resource_type: int, resource_name: str, pattern_type: int, principal: str, host: str,
           operation: int, permission_type: int) -> AclBinding:
        """A binding from wire codes; a code Kafka does not define becomes UNKNOWN
        (Kafka's fromCode), which validate_new_binding refuses."""
        return cls(_code(ResourceType, resource_type), resource_name, _code(PatternType, pattern_type),
                   principal, host, _code(AclOperation, operation), _code(AclPermissionType, permission_type))


@dataclasses.dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which bindings DescribeAcls lists and DeleteAcls removes (Kafka's
    AclBindingFilter). None for a name, principal or host matches any; ANY for a
    type, operation or permission matches any. The pattern type: ANY matches
    bindings of any pattern type whose name equals the filter's; MATCH matches
    every binding that would apply to a resource of the filter's name (LITERAL
    of it, LITERAL `*`, PREFIXED of a prefix of it); LITERAL or PREFIXED only
    bindings of that type and name."""
    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def of(cls, resource_type: int, resource_name: str | None, pattern_type: int, principal: str | None,
           host: str | None, operation: int, permission_type: int) -> AclBindingFilter:
        return cls(_code(ResourceType, resource_type), resource_name, _code(PatternType, pattern_type),
                   principal, host, _code(AclOperation, operation), _code(AclPermissionType, permission_type))

    def matches(self, binding: AclBinding) -> bool:
        return self._matches_pattern(binding) and self._matches_entry(binding)

    def _matches_pattern(self, binding: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, binding.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, binding.pattern_type):
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, binding.pattern_type):
            return self.resource_name == binding.resource_name
        # MATCH: the bindings that apply to a resource named resource_name
        if binding.pattern_type == PatternType.LITERAL:
            return binding.resource_name in (self.resource_name, WILDCARD)
        return self.resource_name.startswith(binding.resource_name)

    def _matches_entry(self, binding: AclBinding) -> bool:
        return ((self.principal is None or self.principal == binding.principal)
                and (self.host is None or self.host == binding.host)
                and self.operation in (AclOperation.ANY, binding.operation)
                and self.permission_type in (AclPermissionType.ANY, binding.permission_type))

    def unknown_field(self) -> str | None:
        """What makes this filter one Kafka refuses (INVALID_REQUEST), or None."""
        for name, value in (("resource type", self.resource_type), ("pattern type", self.pattern_type),
                            ("operation", self.operation), ("permission type", self.permission_type)):
            if value == 0:   # every enum's UNKNOWN
                return f"Unknown {name} in the filter."
        return None


MATCH_EVERY_BINDING = AclBindingFilter()


def validate_new_binding(binding: AclBinding) -> None:
    """InvalidRequest for a binding Kafka does not create (CreateAclsRequest's,
    AclApis' and AclControlManager.validateNewAcl's checks, in their order)."""
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidRequest(f"Invalid resourceType {binding.resource_type.name}")
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidRequest(f"Invalid patternType {binding.pattern_type.name}")
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidRequest(f"Invalid operation {binding.operation.name}")
    if binding.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidRequest(f"Invalid permissionType {binding.permission_type.name}")
    if binding.resource_type == ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        raise InvalidRequest(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not binding.resource_name:
        raise InvalidRequest("Invalid empty resource name")
    if ":" not in binding.principal:   # Kafka's SecurityUtils.parseKafkaPrincipal asks no more
        raise InvalidRequest(f"expected a string in format principalType:principalName but got "
                             f"{binding.principal}")


@dataclasses.dataclass(frozen=True, slots=True)
class _Section:
    """The bindings of one resource type, by pattern: LITERAL ones by name (`*`
    among them), PREFIXED ones by prefix, and the lengths those prefixes have
    (a lookup tries each length once, shortest first)."""
    literal: Mapping[str, tuple[AclBinding, ...]]
    prefixed: Mapping[str, tuple[AclBinding, ...]]
    prefix_lengths: tuple[int, ...]


class Acls:
    """The bindings of a cluster at one `version`, indexed by resource type and
    pattern. Immutable: a change of the bindings makes a new one (`with_changes`).
    `version` counts the ACL records the controller applied (a node keeps the newer
    image; this says which bindings an image holds)."""

    __slots__ = ("version", "bindings", "_sections")

    def __init__(self, bindings: Iterable[AclBinding] = (), *, version: int = 0) -> None:
        self.version = version
        self.bindings: frozenset[AclBinding] = frozenset(bindings)
        literal: dict[ResourceType, dict[str, list[AclBinding]]] = {}
        prefixed: dict[ResourceType, dict[str, list[AclBinding]]] = {}
        for binding in self.bindings:
            by_pattern = literal if binding.pattern_type == PatternType.LITERAL else prefixed
            by_pattern.setdefault(binding.resource_type, {}).setdefault(binding.resource_name, []).append(binding)
        self._sections: dict[ResourceType, _Section] = {
            resource_type: _Section(
                literal={name: tuple(b) for name, b in literal.get(resource_type, {}).items()},
                prefixed={name: tuple(b) for name, b in prefixed.get(resource_type, {}).items()},
                prefix_lengths=tuple(sorted({len(name) for name in prefixed.get(resource_type, {})})))
            for resource_type in literal.keys() | prefixed.keys()}

    def __reduce__(self):   # pickled as its bindings (Ray carries images to every node); re-indexed on arrival
        return (_rebuilt, (tuple(self.bindings), self.version))

    def __len__(self) -> int:
        return len(self.bindings)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Acls) and (self.version, self.bindings) == (other.version, other.bindings)

    def __hash__(self) -> int:
        return hash((self.version, self.bindings))

    def __repr__(self) -> str:
        return f"Acls(version={self.version}, bindings={len(self.bindings)})"

    def with_changes(self, *, added: Iterable[AclBinding] = (), removed: Iterable[AclBinding] = (),
                     version: int) -> Acls:
        return Acls((self.bindings - frozenset(removed)) | frozenset(added), version=version)

    def applying_to(self, resource: Resource) -> list[AclBinding]:
        """Every binding whose pattern matches the resource's name."""
        section = self._sections.get(resource.resource_type)
        if section is None:
            return []
        found = list(section.literal.get(resource.name, ()))
        if resource.name != WILDCARD:
            found += section.literal.get(WILDCARD, ())
        name = resource.name
        for length in section.prefix_lengths:
            if length > len(name):
                break
            found += section.prefixed.get(name[:length], ())
        return found

    def matching(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings the filter matches, in a stable order (DescribeAcls, DeleteAcls)."""
        return sorted((b for b in self.bindings if acl_filter.matches(b)), key=_binding_order)


def _rebuilt(bindings: tuple[AclBinding, ...], version: int) -> Acls:
    return Acls(bindings, version=version)


NO_ACLS = Acls()


def _binding_order(binding: AclBinding) -> tuple:
    return (binding.resource_type, binding.resource_name, binding.pattern_type, binding.principal,
            binding.host, binding.operation, binding.permission_type)


def _entry_matches(binding: AclBinding, principal: str, host: str, operation: AclOperation) -> bool:
    if binding.principal != principal and binding.principal != WILDCARD_PRINCIPAL:
        return False
    if binding.host != WILDCARD and binding.host != host:
        return False
    if binding.operation == AclOperation.ALL or binding.operation == operation:
        return True
    return (binding.permission_type == AclPermissionType.ALLOW
            and binding.operation in IMPLIED_BY.get(operation, ()))


def authorize(acls: Acls, principal: str, host: str, operation: AclOperation, resource: Resource, *,
              super_users: frozenset[str] | set[str] = frozenset(),
              allow_everyone_if_no_acl_found: bool = False) -> bool:
    """Whether `principal` connected from `host` may do `operation` on `resource`
    (Kafka's rules, in the module's note). `operation` is a concrete one (not ANY)."""
    if principal in super_users:
        return True
    applying = acls.applying_to(resource)
    if not applying:
        return allow_everyone_if_no_acl_found
    allowed = False
    for binding in applying:
        if _entry_matches(binding, principal, host, operation):
            if binding.permission_type == AclPermissionType.DENY:
                return False
            allowed = True
    return allowed


def authorize_by_resource_type(acls: Acls, principal: str, host: str, operation: AclOperation,
                               resource_type: ResourceType, *, super_users: frozenset[str] | set[str] = frozenset(),
                               allow_everyone_if_no_acl_found: bool = False) -> bool:
    """Whether `principal` may do `operation` on some resource of the type (Kafka's
    Authorizer.authorizeByResourceType; InitProducerId without a transactional id
    asks it for WRITE on any topic): a resource that no binding names would do
    when everyone may use those, else an ALLOW binding (or an ALL one) for the
    principal or `User:*` whose names are not all denied by a DENY of the same
    literal name or of a prefix of it; a DENY of LITERAL `*` refuses."""
    if authorize(acls, principal, host, operation, Resource(resource_type, "hardcode"),
                 super_users=super_users, allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found):
        return True
    denied_literal: set[str] = set()
    denied_prefixes: set[str] = set()
    allowed: list[AclBinding] = []
    for binding in acls.bindings:
        if (binding.resource_type != resource_type
                or binding.host not in (WILDCARD, host)
                or binding.principal not in (principal, WILDCARD_PRINCIPAL)
                or binding.operation not in (operation, AclOperation.ALL)):
            continue
        if binding.permission_type == AclPermissionType.DENY:
            if binding.pattern_type == PatternType.LITERAL:
                if binding.resource_name == WILDCARD:
                    return False
                denied_literal.add(binding.resource_name)
            else:
                denied_prefixes.add(binding.resource_name)
        else:
            allowed.append(binding)
    for binding in allowed:
        name = binding.resource_name
        if binding.pattern_type == PatternType.LITERAL and name == WILDCARD:
            return True
        if binding.pattern_type == PatternType.LITERAL and name in denied_literal:
            continue
        if not any(name[:length] in denied_prefixes for length in range(1, len(name) + 1)):
            return True
    return False


def _code(enum_type: type[enum.IntEnum], value: int):
    try:
        return enum_type(int(value))
    except ValueError:
        return enum_type(0)   # UNKNOWN


def supported_operations(resource_type: ResourceType) -> frozenset[AclOperation]:
    """The operations a resource of this type can be authorized for (Kafka's
    AclEntry.supportedOperations): what authorized-operations answers list."""
    return _SUPPORTED_OPERATIONS[resource_type]


def operations_bitfield(operations) -> int:
    """Kafka's authorized-operations int32: bit `code` set for each operation
    (Utils.to32BitField)."""
    bits = 0
    for operation in operations:
        bits |= 1 << int(operation)
    return bits - (1 << 32) if bits >= 1 << 31 else bits


_SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                                   AclOperation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                                   AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                                     AclOperation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
}
