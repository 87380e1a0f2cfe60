"""ApiVersions v0-4: the API keys and version ranges of the dispatch table, exactly
(issue 14: advertise only what is implemented), and from v3 the features
(core.features): those rafka's software supports (v0-v3 leave out every feature
whose lowest level is 0, as Kafka's brokers do: v4 lists them), the levels the
cluster has finalized (those above 0) and, as their epoch, the version of the
node's image (a Kafka broker's is its metadata image's offset: it moves with
every metadata change, not only with features). Caller: dispatch, via ROUTE.

An unsupported ApiVersions version never reaches this handler: dispatch answers it
(Kafka's RequestContext / ApiVersionsRequest.getErrorResponse). A v3+ request whose
client software name or version does not match Kafka's pattern gets INVALID_REQUEST
with no API list (Kafka's KafkaApis.handleApiVersionsRequest, ApiVersionsRequest
.isValid), with no features.
"""

from __future__ import annotations

import datetime
import re

from kio.schema.api_versions.v0 import response as v0
from kio.schema.api_versions.v1 import response as v1
from kio.schema.api_versions.v2 import response as v2
from kio.schema.api_versions.v3 import response as v3
from kio.schema.api_versions.v4 import response as v4
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32Timedelta, i64

from rafka.core import features
from rafka.protocol.dispatch import API_VERSIONS_KEY, RequestContext, Route

MIN_VERSION = 0
MAX_VERSION = 4
# ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN
SOFTWARE_NAME_VERSION_PATTERN = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
_RESPONSE_MODULES = {0: v0, 1: v1, 2: v2, 3: v3, 4: v4}
_UNKNOWN_EPOCH = i64(-1)


def _is_valid(request, version: int) -> bool:
    if version < 3:
        return True
    return all(SOFTWARE_NAME_VERSION_PATTERN.fullmatch(value) for value in
               (request.client_software_name, request.client_software_version))


async def handle_api_versions(request, context: RequestContext):
    version = context.api_version
    module = _RESPONSE_MODULES[version]
    if not _is_valid(request, version):
        return _response(module, version, ErrorCode.invalid_request, ())
    api_keys = tuple(module.ApiVersion(api_key=i16(r.api_key), min_version=i16(r.min_version),
                                       max_version=i16(r.max_version))
                     for r in context.supported_api_versions)
    if version < 3:
        return _response(module, version, ErrorCode.none, api_keys)
    image = context.image
    if image is not None and image.version < 0:   # no image yet: no finalized levels to tell
        image = None
    finalized = image.finalized_features if image is not None else {}
    return _response(module, version, ErrorCode.none, api_keys, supported_features=tuple(
        module.SupportedFeatureKey(name=name, min_version=i16(low), max_version=i16(high))
        for name, (low, high) in sorted(features.SUPPORTED.items()) if version >= 4 or low > 0),
        finalized_features_epoch=i64(image.version) if image is not None else _UNKNOWN_EPOCH,
        finalized_features=tuple(
            module.FinalizedFeatureKey(name=name, max_version_level=i16(level), min_version_level=i16(level))
            for name, level in sorted(finalized.items()) if level > 0))


def _response(module, version: int, error_code: ErrorCode, api_keys: tuple, **features_fields):
    if version == 0:     # v0 has no throttle time
        return module.ApiVersionsResponse(error_code=error_code, api_keys=api_keys)
    return module.ApiVersionsResponse(error_code=error_code, api_keys=api_keys, throttle_time=_NO_THROTTLE,
                                      **features_fields)


ROUTE = Route(API_VERSIONS_KEY, MIN_VERSION, MAX_VERSION, handle_api_versions)
