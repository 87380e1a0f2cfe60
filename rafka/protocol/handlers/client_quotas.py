"""DescribeClientQuotas v0-1 and AlterClientQuotas v0-1.

DescribeClientQuotas is answered on every node from its image (the quota configs
every image carries, core.cluster_image); AlterClientQuotas changes the
controller's metadata: the controller's node calls the controller, a broker's
edge relays it there (protocol.edge, after authorizing it itself), any other
node answers NOT_CONTROLLER; the in-process test node applies it to its own
metadata.

What Kafka answers (KafkaApis.handleDescribeClientQuotasRequest and
handleAlterClientQuotasRequest, ClientQuotasImage.describe,
ClientQuotaControlManager), and what these handlers do the same way:
  * DESCRIBE_CONFIGS (Describe) or ALTER_CONFIGS (Alter) on the cluster; refused,
    CLUSTER_AUTHORIZATION_FAILED at the top (Describe, no entries) or on every
    entry (Alter), and nothing changes;
  * Describe: the entities the filter matches (exact name, default, any
    specified name; `strict` leaves out entities with other types), each with
    every value it holds; a bad filter answers its error at the top with Kafka's
    message (INVALID_REQUEST, UNSUPPORTED_VERSION for an unknown entity type) and
    null entries;
  * Alter: one result per entry, in order, each its own error (INVALID_REQUEST
    with Kafka's messages: an empty entity or name, a duplicate type, key or
    entity, an unknown type or key, a value not above 0, too large for its type
    or fractional where integral); `validate_only` checks and changes nothing.
Caller: protocol.node_table, through `routes(image, admin)`.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Protocol

from kio.schema.errors import ErrorCode
from kio.static.primitive import f64, i32Timedelta

from rafka.core.client_quotas import describe
from rafka.core.cluster_image import ClusterImage
from rafka.core.errors import KafkaError
from rafka.protocol.authorization import decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of
from rafka.protocol.handlers.partitions import error_code_of, error_message_of

DESCRIBE_CLIENT_QUOTAS_KEY, ALTER_CLIENT_QUOTAS_KEY = 48, 49
VERSIONS = (0, 1)
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))

# (entity pairs (type, name or None for the default), ops (key, value or None to remove))
Alteration = tuple[list[tuple[str, "str | None"]], list[tuple[str, "float | None"]]]


class QuotaAdmin(Protocol):
    """The controller's call (its node's; NOT_CONTROLLER elsewhere)."""

    async def alter_client_quotas(self, entries: list[Alteration], validate_only: bool
                                  ) -> list[KafkaError | None]:
        """Per entry, in order: None (altered, or valid with validate_only) or why not."""


def routes(image: Callable[[], ClusterImage], admin: QuotaAdmin) -> list[Route]:
    """`image`: the node's newest image (Describe reads it); `admin`: where
    alterations go."""

    async def describe_quotas(request, context: RequestContext):
        response_type = load_response_schema(DESCRIBE_CLIENT_QUOTAS_KEY, context.api_version)
        module = module_of(response_type)
        error: KafkaError | None = decide(context, request).refusal
        found = []
        if error is None:
            try:
                found = describe(image().client_quotas,
                                 [(c.entity_type, int(c.match_type), c.match) for c in request.components],
                                 strict=bool(request.strict))
            except KafkaError as refused:
                error = refused
        if error is not None:
            return make(response_type, throttle_time=_NO_THROTTLE, error_code=error_code_of(error),
                        error_message=error_message_of(error), entries=None)
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                    entries=tuple(make(module.EntryData,
                                       entity=tuple(module.EntityData(entity_type=t, entity_name=n)
                                                    for t, n in sorted(entity, key=lambda p: p[0])),
                                       values=tuple(make(module.ValueData, key=k, value=f64(v))
                                                    for k, v in sorted(values.items())))
                                  for entity, values in found))

    async def alter_quotas(request, context: RequestContext):
        response_type = load_response_schema(ALTER_CLIENT_QUOTAS_KEY, context.api_version)
        module = module_of(response_type)
        entries: list[Alteration] = [
            ([(e.entity_type, e.entity_name) for e in entry.entity],
             [(op.key, None if op.remove else float(op.value)) for op in entry.ops])
            for entry in request.entries]
        try:
            refusal = decide(context, request).refusal
            if refusal is not None:
                raise refusal
            results = await admin.alter_client_quotas(entries, bool(request.validate_only)) if entries else []
        except Exception as error:   # the request as a whole: every entry answers it
            results = [error] * len(entries)
        return make(response_type, throttle_time=_NO_THROTTLE, entries=tuple(
            make(module.EntryData, error_code=error_code_of(result), error_message=error_message_of(result),
                 entity=tuple(module.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                              for e in entry.entity))
            for entry, result in zip(request.entries, results)))

    return [Route(DESCRIBE_CLIENT_QUOTAS_KEY, *VERSIONS, describe_quotas),
            Route(ALTER_CLIENT_QUOTAS_KEY, *VERSIONS, alter_quotas)]
