"""CreateAcls, DescribeAcls and DeleteAcls (v3) as rafka's Admin sends them, and
their answers read back into core.acl's bindings and typed errors (Kafka's
AdminClient createAcls / describeAcls / deleteAcls).

A refusal of the whole request (DescribeAcls' top-level error) raises it; a
creation's or a filter's own error is returned in its place, as Kafka's
AdminClient completes each future on its own.
Callers: rafka.client.admin (`rafka acls`).
"""

from __future__ import annotations

from kio.schema.create_acls.v3 import request as create_acls_v3
from kio.schema.delete_acls.v3 import request as delete_acls_v3
from kio.schema.describe_acls.v3 import request as describe_acls_v3
from kio.static.primitive import i8

from rafka.core.acl import AclBinding, AclBindingFilter
from rafka.core.errors import KafkaError, error_or_none

def create_acls_request(bindings: list[AclBinding]) -> create_acls_v3.CreateAclsRequest:
    return create_acls_v3.CreateAclsRequest(creations=tuple(create_acls_v3.AclCreation(
        resource_type=i8(b.resource_type), resource_name=b.resource_name, resource_pattern_type=i8(b.pattern_type),
        principal=b.principal, host=b.host, operation=i8(b.operation), permission_type=i8(b.permission_type))
        for b in bindings))


def create_acls_answer(response) -> list[KafkaError | None]:
    return [error_or_none(r.error_code, r.error_message) for r in response.results]


def describe_acls_request(acl_filter: AclBindingFilter) -> describe_acls_v3.DescribeAclsRequest:
    return describe_acls_v3.DescribeAclsRequest(
        resource_type_filter=i8(acl_filter.resource_type), resource_name_filter=acl_filter.resource_name,
        pattern_type_filter=i8(acl_filter.pattern_type), principal_filter=acl_filter.principal,
        host_filter=acl_filter.host, operation=i8(acl_filter.operation),
        permission_type=i8(acl_filter.permission_type))


def describe_acls_answer(response) -> list[AclBinding]:
    error = error_or_none(response.error_code, response.error_message)
    if error is not None:
        raise error
    return [AclBinding.of(resource.resource_type, resource.resource_name, resource.pattern_type, acl.principal,
                          acl.host, acl.operation, acl.permission_type)
            for resource in response.resources for acl in resource.acls]


def delete_acls_request(filters: list[AclBindingFilter]) -> delete_acls_v3.DeleteAclsRequest:
    return delete_acls_v3.DeleteAclsRequest(filters=tuple(delete_acls_v3.DeleteAclsFilter(
        resource_type_filter=i8(f.resource_type), resource_name_filter=f.resource_name,
        pattern_type_filter=i8(f.pattern_type), principal_filter=f.principal, host_filter=f.host,
        operation=i8(f.operation), permission_type=i8(f.permission_type)) for f in filters))


def delete_acls_answer(response) -> list[list[AclBinding] | KafkaError]:
    results: list[list[AclBinding] | KafkaError] = []
    for result in response.filter_results:
        error = error_or_none(result.error_code, result.error_message)
        results.append(error if error is not None else [
            AclBinding.of(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                          m.permission_type) for m in result.matching_acls])
    return results
