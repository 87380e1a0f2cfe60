"""UpdateFeatures v0-2: finalize feature levels cluster-wide (KIP-584), as
kafka-features.sh upgrade / downgrade / disable and the AdminClients'
updateFeatures send it. The levels are the controller's metadata (core.features):
the controller's node calls the controller, a broker relays the request to it in
an envelope (Kafka's brokers forward it), any other node answers NOT_CONTROLLER.

What Kafka answers (ControllerApis.handleUpdateFeatures, QuorumController
.updateFeatures, UpdateFeaturesResponse), and what this handler does the same way:
  * ALTER on the cluster; refused: the top-level CLUSTER_AUTHORIZATION_FAILED,
    no results, nothing changed;
  * v0's allow_downgrade is not read: every v0 update is an upgrade (Kafka's
    controller reads only v1's upgrade_type, which v0 lacks), so a v0 downgrade
    fails; timeout_ms is not read either (Kafka's controller sets no deadline);
  * a feature that cannot be set fails the whole request: the top-level
    INVALID_UPDATE_VERSION, its message "The update failed for all features
    since the following feature had an error: " and the reason, no results;
  * otherwise every update is written together (none with validate_only), and
    v0/v1 answer one result per update named, each NONE with the message "NONE"
    (Kafka's Errors.NONE.message()); v2 answers no results.
Caller: protocol.node_table, through `route(admin)`.
"""

from __future__ import annotations

import datetime
from typing import Protocol

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from rafka.core.errors import InvalidUpdateVersion
from rafka.core.features import UPGRADE
from rafka.protocol.authorization import decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of
from rafka.protocol.handlers.partitions import error_code_of, error_message_of

API_KEY = 57
MIN_VERSION, MAX_VERSION = 0, 2
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
_FAILED_FOR_ALL = "The update failed for all features since the following feature had an error: "
_NONE_MESSAGE = "NONE"


class FeatureAdmin(Protocol):
    """The controller's call (its node's; NOT_CONTROLLER elsewhere)."""

    async def update_features(self, updates: list[tuple[str, int, int]], validate_only: bool) -> None:
        """[(feature, level, upgrade type)]: written together, or the typed error of
        the first that cannot be (core.features); nothing written with validate_only."""


def route(admin: FeatureAdmin) -> Route:
    async def handle_update_features(request, context: RequestContext):
        response_type = load_response_schema(API_KEY, context.api_version)
        updates = [(u.feature, int(u.max_version_level), int(getattr(u, "upgrade_type", UPGRADE)))
                   for u in request.feature_updates]
        try:
            refusal = decide(context, request).refusal
            if refusal is not None:
                raise refusal
            await admin.update_features(updates, bool(getattr(request, "validate_only", False)))
        except Exception as error:   # the request as a whole (anything but a KafkaError: UNKNOWN_SERVER_ERROR)
            message = _FAILED_FOR_ALL + error.message if isinstance(error, InvalidUpdateVersion) else \
                error_message_of(error)
            return _response(response_type, context.api_version, error_code_of(error), message, [])
        return _response(response_type, context.api_version, ErrorCode.none, None,
                         [u.feature for u in request.feature_updates])
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_update_features)


def _response(response_type, version: int, error_code: ErrorCode, message: str | None, succeeded: list[str]):
    if version >= 2:   # results are gone from v2
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=error_code, error_message=message)
    return make(response_type, throttle_time=_NO_THROTTLE, error_code=error_code, error_message=message,
                results=tuple(make(module_of(response_type).UpdatableFeatureResult, feature=feature,
                                   error_code=ErrorCode.none, error_message=_NONE_MESSAGE) for feature in succeeded))
