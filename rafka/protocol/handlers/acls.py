"""DescribeAcls, CreateAcls and DeleteAcls v1-3 (Kafka 4 serves no v0).

DescribeAcls is answered on every node from its image (the bindings every node
holds, core.cluster_image); CreateAcls and DeleteAcls change the controller's
metadata: the controller's node calls the controller, a broker's edge relays them
there (protocol.edge, after authorizing them itself), any other node answers
NOT_CONTROLLER; the in-process test node applies them to its own metadata.

What Kafka answers (AclApis, CreateAcls/DeleteAcls/DescribeAclsRequest,
AclControlManager), and what these handlers do the same way:
  * the caller must be allowed DESCRIBE (DescribeAcls) or ALTER (Create/DeleteAcls)
    on the cluster (authorizeClusterOperation); refused, DescribeAcls answers
    CLUSTER_AUTHORIZATION_FAILED at the top, Create/DeleteAcls the same code for
    every creation or filter, and nothing changes;
  * CreateAcls: one result per creation, in order, each its own error
    (INVALID_REQUEST with Kafka's messages: core.acl.validate_new_binding); a
    binding that exists already is created without error;
  * DeleteAcls: one result per filter, listing every binding it matched (removed);
    a filter with an unknown code: INVALID_REQUEST for it alone;
  * DescribeAcls: the bindings the filter matches, grouped by resource pattern;
    an unknown code in the filter: INVALID_REQUEST at the top.
Not matched: Kafka fails to parse a CreateAcls or DescribeAcls request holding
an UNKNOWN code (the connection closes); here that creation or the describe is
answered INVALID_REQUEST instead. Kafka's SECURITY_DISABLED never occurs: the
authorizer is always on.
Callers: protocol.node_table, through `routes(image, admin)`.
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Callable
from typing import Protocol

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32Timedelta

from rafka.core.acl import CLUSTER, AclBinding, AclBindingFilter, AclOperation, Acls
from rafka.core.cluster_image import ClusterImage
from rafka.core.errors import ClusterAuthorizationFailed, InvalidRequest, KafkaError
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of
from rafka.protocol.handlers.partitions import error_code_of

DESCRIBE_ACLS_KEY, CREATE_ACLS_KEY, DELETE_ACLS_KEY = 29, 30, 31
VERSIONS = (1, 3)
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


class AclAdmin(Protocol):
    """The controller's ACL calls (its node's; NOT_CONTROLLER elsewhere)."""

    async def create_acls(self, bindings: list[AclBinding]) -> list[KafkaError | None]:
        """Per binding: None (created, or there already) or why not."""

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[tuple[AclBinding, ...] | KafkaError]:
        """Per filter: the bindings it removed, or why not."""


def refusal(image: ClusterImage, context: RequestContext, operation: AclOperation) -> KafkaError | None:
    """CLUSTER_AUTHORIZATION_FAILED unless the caller may do `operation` on the cluster."""
    if image.authorize(context.principal, context.client_host, operation, CLUSTER):
        return None
    return ClusterAuthorizationFailed(f"Request {context.principal} {_API_NAMES[context.api_key]} "
                                      f"is not authorized.")


_API_NAMES = {DESCRIBE_ACLS_KEY: "DescribeAcls", CREATE_ACLS_KEY: "CreateAcls", DELETE_ACLS_KEY: "DeleteAcls"}


def _failure(error: BaseException) -> tuple[ErrorCode, str]:
    return error_code_of(error), str(getattr(error, "message", error))


def routes(image: Callable[[], ClusterImage], admin: AclAdmin) -> list[Route]:
    """`image`: the node's newest image (DescribeAcls and every authorization read
    it); `admin`: where bindings are created and deleted."""

    async def describe(request, context: RequestContext):
        response_type = load_response_schema(DESCRIBE_ACLS_KEY, context.api_version)
        module = module_of(response_type)
        current = image()
        acl_filter = AclBindingFilter.of(request.resource_type_filter, request.resource_name_filter,
                                         request.pattern_type_filter, request.principal_filter, request.host_filter,
                                         request.operation, request.permission_type)
        unknown = acl_filter.unknown_field()
        error = refusal(current, context, AclOperation.DESCRIBE) or (InvalidRequest(unknown) if unknown else None)
        if error is not None:
            code, message = _failure(error)
            return make(response_type, throttle_time=_NO_THROTTLE, error_code=code, error_message=message,
                        resources=())
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                    resources=_described(module, current.acls, acl_filter))

    async def create(request, context: RequestContext):
        response_type = load_response_schema(CREATE_ACLS_KEY, context.api_version)
        module = module_of(response_type)
        bindings = [AclBinding.of(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                                  c.operation, c.permission_type) for c in request.creations]
        try:
            error = refusal(image(), context, AclOperation.ALTER)
            if error is not None:
                raise error
            results = await admin.create_acls(bindings) if bindings else []
        except Exception as error:   # the request as a whole: every creation answers it
            results = [error] * len(bindings)
        answers = []
        for result in results:
            code, message = _failure(result) if result is not None else (ErrorCode.none, None)
            answers.append(make(module.AclCreationResult, error_code=code, error_message=message))
        return make(response_type, throttle_time=_NO_THROTTLE, results=tuple(answers))

    async def delete(request, context: RequestContext):
        response_type = load_response_schema(DELETE_ACLS_KEY, context.api_version)
        module = module_of(response_type)
        filters = [AclBindingFilter.of(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                       f.principal_filter, f.host_filter, f.operation, f.permission_type)
                   for f in request.filters]
        try:
            error = refusal(image(), context, AclOperation.ALTER)
            if error is not None:
                raise error
            results = await admin.delete_acls(filters) if filters else []
        except Exception as error:
            results = [error] * len(filters)
        answers = []
        for result in results:
            if isinstance(result, BaseException):
                code, message = _failure(result)
                answers.append(make(module.DeleteAclsFilterResult, error_code=code, error_message=message,
                                    matching_acls=()))
                continue
            answers.append(make(module.DeleteAclsFilterResult, error_code=ErrorCode.none, error_message=None,
                                matching_acls=tuple(make(
                                    module.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None,
                                    resource_type=i8(b.resource_type), resource_name=b.resource_name,
                                    pattern_type=i8(b.pattern_type), principal=b.principal, host=b.host,
                                    operation=i8(b.operation), permission_type=i8(b.permission_type))
                                    for b in result)))
        return make(response_type, throttle_time=_NO_THROTTLE, filter_results=tuple(answers))

    return [Route(DESCRIBE_ACLS_KEY, *VERSIONS, describe), Route(CREATE_ACLS_KEY, *VERSIONS, create),
            Route(DELETE_ACLS_KEY, *VERSIONS, delete)]


def _described(module, acls: Acls, acl_filter: AclBindingFilter) -> tuple:
    """The matched bindings, one DescribeAclsResource per resource pattern (Kafka's
    DescribeAclsResponse.aclsResources), in a stable order."""
    def pattern(binding: AclBinding):
        return binding.resource_type, binding.resource_name, binding.pattern_type
    return tuple(make(module.DescribeAclsResource, resource_type=i8(resource_type), resource_name=name,
                      pattern_type=i8(pattern_type),
                      acls=tuple(make(module.AclDescription, principal=b.principal, host=b.host,
                                      operation=i8(b.operation), permission_type=i8(b.permission_type))
                                 for b in bindings))
                 for (resource_type, name, pattern_type), bindings
                 in itertools.groupby(acls.matching(acl_filter), key=pattern))
