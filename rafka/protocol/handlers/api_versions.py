"""ApiVersions v0-3: the API keys and version ranges of the dispatch table, exactly
(issue 14: advertise only what is implemented). Caller: dispatch, via ROUTE.

An unsupported ApiVersions version never reaches this handler: dispatch answers it
(Kafka's RequestContext / ApiVersionsRequest.getErrorResponse). A v3+ request whose
client software name or version does not match Kafka's pattern gets INVALID_REQUEST
with no API list (Kafka's KafkaApis.handleApiVersionsRequest, ApiVersionsRequest
.isValid). Features (v3 tagged fields) are left empty: rafka has no feature levels.
"""

from __future__ import annotations

import datetime
import re

from kio.schema.api_versions.v0 import response as v0
from kio.schema.api_versions.v1 import response as v1
from kio.schema.api_versions.v2 import response as v2
from kio.schema.api_versions.v3 import response as v3
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32Timedelta

from rafka.protocol.dispatch import API_VERSIONS_KEY, RequestContext, Route

MIN_VERSION = 0
MAX_VERSION = 3
# ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN
SOFTWARE_NAME_VERSION_PATTERN = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
_RESPONSE_MODULES = {0: v0, 1: v1, 2: v2, 3: v3}


def _is_valid(request, version: int) -> bool:
    if version < 3:
        return True
    return all(SOFTWARE_NAME_VERSION_PATTERN.fullmatch(value) for value in
               (request.client_software_name, request.client_software_version))


async def handle_api_versions(request, context: RequestContext):
    version = context.api_version
    module = _RESPONSE_MODULES[version]
    if _is_valid(request, version):
        error_code = ErrorCode.none
        api_keys = tuple(module.ApiVersion(api_key=i16(r.api_key), min_version=i16(r.min_version),
                                           max_version=i16(r.max_version))
                         for r in context.supported_api_versions)
    else:
        error_code, api_keys = ErrorCode.invalid_request, ()
    if version == 0:     # v0 has no throttle time
        return module.ApiVersionsResponse(error_code=error_code, api_keys=api_keys)
    return module.ApiVersionsResponse(error_code=error_code, api_keys=api_keys, throttle_time=_NO_THROTTLE)


ROUTE = Route(API_VERSIONS_KEY, MIN_VERSION, MAX_VERSION, handle_api_versions)
