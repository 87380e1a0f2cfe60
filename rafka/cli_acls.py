"""`rafka acls`, as kafka-acls.sh: add, list and remove ACL bindings over the wire
(CreateAcls, DescribeAcls, DeleteAcls through rafka's Admin), so a change takes
effect on every node as soon as the command returns (the controller pushes the
image before it answers).

    rafka acls --add --allow-principal User:alice --operation Read --operation Write --topic orders
    rafka acls --add --deny-principal User:bob --operation Write --topic ord --resource-pattern-type prefixed
    rafka acls --list [--topic T | --group G | --cluster | --transactional-id T] [--principal P]
    rafka acls --remove --allow-principal User:alice --operation Read --topic orders
    rafka acls --remove --topic orders          (every binding of that resource pattern)

What kafka-acls.sh does, and what this does the same way (AclCommand):
  * resources: --topic, --group, --transactional-id (repeatable) and --cluster;
    --resource-pattern-type literal (default for --add and --remove), prefixed,
    and for --list and --remove also match and any (default for --list);
  * --add needs a principal (--allow-principal / --deny-principal, repeatable;
    hosts --allow-host / --deny-host, default `*`); --operation is repeatable and
    defaults to All; each (resource, principal, host, operation) is one binding;
  * --remove without principals removes every binding of the resource patterns;
    with them, exactly those bindings;
  * --list prints, per resource pattern, "Current ACLs for resource
    `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:" and one
    "(principal=..., host=..., operation=..., permissionType=...)" line per binding.
Not offered: --producer / --consumer shortcuts, --force prompts (nothing asks).
Callers: rafka.cli.
"""

from __future__ import annotations

import itertools

from rafka.cluster_errors import UsageError
from rafka.core.acl import (CLUSTER_NAME, WILDCARD, AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                            PatternType, ResourceType)

_OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation
               if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
_PATTERNS = {"literal": PatternType.LITERAL, "prefixed": PatternType.PREFIXED, "match": PatternType.MATCH,
             "any": PatternType.ANY}


def add_parser(sub) -> None:
    acls = sub.add_parser("acls", help="add, list and remove ACL bindings (kafka-acls.sh)")
    action = acls.add_mutually_exclusive_group(required=True)
    for name in ("add", "remove", "list"):
        action.add_argument(f"--{name}", action="store_true")
    acls.add_argument("--topic", action="append", default=[])
    acls.add_argument("--group", action="append", default=[])
    acls.add_argument("--transactional-id", action="append", default=[])
    acls.add_argument("--cluster", action="store_true")
    acls.add_argument("--resource-pattern-type", choices=sorted(_PATTERNS), type=str.lower)
    acls.add_argument("--allow-principal", action="append", default=[])
    acls.add_argument("--deny-principal", action="append", default=[])
    acls.add_argument("--allow-host", action="append", default=[])
    acls.add_argument("--deny-host", action="append", default=[])
    acls.add_argument("--operation", action="append", default=[],
                      help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                           "AlterConfigs, IdempotentWrite, All (default All); repeatable")
    acls.add_argument("--principal", help="--list: only this principal's bindings")


def _patterns(args, pattern_type: PatternType) -> list[tuple[ResourceType, str | None, PatternType]]:
    found = [(ResourceType.TOPIC, name, pattern_type) for name in args.topic]
    found += [(ResourceType.GROUP, name, pattern_type) for name in args.group]
    found += [(ResourceType.TRANSACTIONAL_ID, name, pattern_type) for name in args.transactional_id]
    if args.cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME, pattern_type))
    return found


def _operations(args) -> list[AclOperation]:
    operations = []
    for name in args.operation or ["All"]:
        operation = _OPERATIONS.get(name.replace("_", "").replace("-", "").lower())
        if operation is None:
            raise UsageError(f"Invalid operation {name!r}: one of {', '.join(sorted(_OPERATIONS))}")
        operations.append(operation)
    return operations


def _entries(args) -> list[tuple[str, str, AclPermissionType]]:
    """(principal, host, permission) of each principal given, with each of its hosts."""
    entries = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
                                          (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        for principal, host in itertools.product(principals, hosts or [WILDCARD]):
            if ":" not in principal:
                raise UsageError(f"Invalid principal {principal!r}: expected principalType:name (User:alice)")
            entries.append((principal, host, permission))
    return entries


def cmd_acls(admin, args, *, out=print) -> int:
    if args.list:
        return _list(admin, args, out)
    pattern_type = _PATTERNS[args.resource_pattern_type or "literal"]
    patterns = _patterns(args, pattern_type)
    if not patterns:
        raise UsageError("give a resource: --topic, --group, --transactional-id or --cluster")
    entries = _entries(args)
    if args.add:
        if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise UsageError("A '--resource-pattern-type' value of 'literal' or 'prefixed' is required to add ACLs")
        if not entries:
            raise UsageError("--add needs --allow-principal or --deny-principal")
        bindings = [AclBinding(resource_type, name, pattern, principal, host, operation, permission)
                    for (resource_type, name, pattern), (principal, host, permission), operation
                    in itertools.product(patterns, entries, _operations(args))]
        for pattern, added in _by_pattern(bindings):
            out(f"Adding ACLs for resource `{_pattern_text(*pattern)}`: ")
            for binding in added:
                out(f" \t{_entry_text(binding)} ")
            out("")
        errors = [error for error in admin.create_acls(bindings) if error is not None]
        if errors:
            raise errors[0]
    else:
        filters = ([AclBindingFilter(resource_type, name, pattern, principal, host, operation, permission)
                    for (resource_type, name, pattern), (principal, host, permission), operation
                    in itertools.product(patterns, entries, _operations(args))] if entries else
                   [AclBindingFilter(resource_type, name, pattern) for resource_type, name, pattern in patterns])
        for result in admin.delete_acls(filters):
            if isinstance(result, BaseException):
                raise result
            for pattern, removed in _by_pattern(result):
                out(f"Removing ACLs from resource `{_pattern_text(*pattern)}`: ")
                for binding in removed:
                    out(f" \t{_entry_text(binding)} ")
                out("")
    return _list(admin, args, out, pattern_type=PatternType.ANY if args.remove else None)


def _list(admin, args, out, *, pattern_type: PatternType | None = None) -> int:
    if pattern_type is None:
        pattern_type = _PATTERNS[args.resource_pattern_type or "any"]
    patterns = _patterns(args, pattern_type) or [(ResourceType.ANY, None, PatternType.ANY)]
    principal = args.principal if args.list else None
    for resource_type, name, pattern in patterns:
        found = admin.describe_acls(AclBindingFilter(resource_type, name, pattern, principal=principal))
        for key, bindings in _by_pattern(found):
            out(f"Current ACLs for resource `{_pattern_text(*key)}`: ")
            for binding in bindings:
                out(f" \t{_entry_text(binding)} ")
            out("")
    return 0


def _by_pattern(bindings):
    def key(binding: AclBinding):
        return binding.resource_type, binding.resource_name, binding.pattern_type
    return itertools.groupby(sorted(bindings, key=lambda b: (key(b), b.principal, b.host, b.operation)), key=key)


def _pattern_text(resource_type: ResourceType, name: str, pattern_type: PatternType) -> str:
    return f"ResourcePattern(resourceType={resource_type.name}, name={name}, patternType={pattern_type.name})"


def _entry_text(binding: AclBinding) -> str:
    return (f"(principal={binding.principal}, host={binding.host}, operation={binding.operation.name}, "
            f"permissionType={binding.permission_type.name})")
