"""DescribeUserScramCredentials v0 and AlterUserScramCredentials v0: users' SCRAM
credentials as Kafka's tools manage them (kafka-configs.sh --entity-type users,
AdminClient.describe/alterUserScramCredentials).

Describe is answered on every node from its image (the credentials every image
carries: mechanisms and iterations only, never a secret); Alter changes the
controller's metadata: the controller's node calls the controller, a broker's
edge relays it there in an envelope (protocol.edge, handlers.envelope), any other
node answers NOT_CONTROLLER; the in-process test node applies it to its own
metadata. The rules of both are Kafka's (core.scram_admin).

What Kafka answers (KafkaApis.handleDescribeUserScramCredentialsRequest,
ControllerApis.handleAlterUserScramCredentials and the requests' getErrorResponse),
and what these handlers do the same way:
  * DESCRIBE (Describe) or ALTER (Alter) on the cluster; refused,
    CLUSTER_AUTHORIZATION_FAILED: Describe at the top and on each user named,
    Alter on every user named (sorted, once each); nothing changes;
  * a mechanism type on the wire that is not SCRAM-SHA-256 (1) or SCRAM-SHA-512
    (2) is UNSUPPORTED_SASL_MECHANISM for its user;
  * Alter answers one result per user named; an error reaching the controller
    (NOT_CONTROLLER, REQUEST_TIMED_OUT) answers every user with it.
Caller: protocol.node_table, through `routes(image, admin)`.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Protocol

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i32Timedelta

from rafka.core.cluster_image import ClusterImage
from rafka.core.errors import KafkaError
from rafka.core.scram import MECHANISM_TYPES, mechanism_name
from rafka.core.scram_admin import Deletion, Upsertion, describe
from rafka.protocol.authorization import decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of
from rafka.protocol.handlers.partitions import error_code_of, error_message_of

DESCRIBE_USER_SCRAM_CREDENTIALS_KEY, ALTER_USER_SCRAM_CREDENTIALS_KEY = 50, 51
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


class ScramAdmin(Protocol):
    """The controller's call (its node's; NOT_CONTROLLER elsewhere)."""

    async def alter_user_scram_credentials(self, deletions: list[Deletion], upsertions: list[Upsertion]
                                           ) -> list[tuple[str, KafkaError | None]]:
        """Per user named, once each: None (altered) or why not."""


def routes(image: Callable[[], ClusterImage], admin: ScramAdmin) -> list[Route]:
    """`image`: the node's newest image (Describe reads it); `admin`: where
    alterations go."""

    async def describe_credentials(request, context: RequestContext):
        response_type = load_response_schema(DESCRIBE_USER_SCRAM_CREDENTIALS_KEY, context.api_version)
        module = module_of(response_type)
        refusal = decide(context, request).refusal
        users = None if request.users is None else [u.name for u in request.users]
        if refusal is not None:
            code, message = error_code_of(refusal), error_message_of(refusal)
            return make(response_type, throttle_time=_NO_THROTTLE, error_code=code, error_message=message,
                        results=tuple(make(module.DescribeUserScramCredentialsResult, user=user, error_code=code,
                                           error_message=message, credential_infos=())
                                      for user in users or ()))
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                    results=tuple(make(module.DescribeUserScramCredentialsResult, user=user,
                                       error_code=error_code_of(error), error_message=error_message_of(error),
                                       credential_infos=tuple(
                                           make(module.CredentialInfo, mechanism=i8(MECHANISM_TYPES[m]),
                                                iterations=i32(n)) for m, n in infos))
                                  for user, error, infos in describe(image().scram_credentials, users)))

    async def alter_credentials(request, context: RequestContext):
        response_type = load_response_schema(ALTER_USER_SCRAM_CREDENTIALS_KEY, context.api_version)
        module = module_of(response_type)
        deletions = [Deletion(d.name, mechanism_name(d.mechanism)) for d in request.deletions]
        upsertions = [Upsertion(u.name, mechanism_name(u.mechanism), int(u.iterations), bytes(u.salt),
                                bytes(u.salted_password)) for u in request.upsertions]
        try:
            refusal = decide(context, request).refusal
            if refusal is not None:
                raise refusal
            results = await admin.alter_user_scram_credentials(deletions, upsertions)
        except Exception as error:   # the request as a whole: every user answers it
            results = [(user, error) for user in sorted({a.user for a in [*deletions, *upsertions]})]
        return make(response_type, throttle_time=_NO_THROTTLE, results=tuple(
            make(module.AlterUserScramCredentialsResult, user=user, error_code=error_code_of(error),
                 error_message=error_message_of(error)) for user, error in results))

    return [Route(DESCRIBE_USER_SCRAM_CREDENTIALS_KEY, 0, 0, describe_credentials),
            Route(ALTER_USER_SCRAM_CREDENTIALS_KEY, 0, 0, alter_credentials)]
