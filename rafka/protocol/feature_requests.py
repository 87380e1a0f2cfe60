"""ApiVersions (v4, for its features) and UpdateFeatures (v1) as rafka's Admin sends
them, and their answers read back (Kafka's AdminClient describeFeatures /
updateFeatures, which kafka-features.sh calls).

A describe reads the features one node supports, the levels the cluster has
finalized (those above 0) and their epoch (None when the node tells none). An
update's error is the request's as a whole (Kafka's controller answers the first
feature that cannot be set at the top, and sets none): it is raised.
Callers: rafka.client.admin (`rafka features`), tests.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata

from kio.schema.api_versions.v4 import request as api_versions_v4
from kio.schema.update_features.v1 import request as update_v1
from kio.static.primitive import i8, i16

from rafka.core.errors import error_or_none
from rafka.protocol.handlers.api_versions import SOFTWARE_NAME_VERSION_PATTERN

CLIENT_SOFTWARE_NAME = "rafka"


@dataclasses.dataclass(frozen=True)
class FeatureMetadata:
    supported: dict[str, tuple[int, int]]   # by feature: (min, max) level the node's software supports
    finalized: dict[str, int]               # by feature: the cluster's finalized level (none at 0)
    epoch: int | None                       # the finalized levels' epoch; None: unknown


def describe_request() -> api_versions_v4.ApiVersionsRequest:
    return api_versions_v4.ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                                              client_software_version=_software_version())


def _software_version() -> str:
    """rafka's version, if Kafka's pattern for it takes it (a local version such as
    0.1.0+g1234 does not: the broker would answer INVALID_REQUEST)."""
    try:
        version = importlib.metadata.version("rafka")
    except importlib.metadata.PackageNotFoundError:   # run from a source tree
        return "unknown"
    return version if SOFTWARE_NAME_VERSION_PATTERN.fullmatch(version) else "unknown"


def describe_answer(response) -> FeatureMetadata:
    error = error_or_none(response.error_code, None)
    if error is not None:
        raise error
    return FeatureMetadata(
        supported={f.name: (int(f.min_version), int(f.max_version)) for f in response.supported_features},
        finalized={f.name: int(f.max_version_level) for f in response.finalized_features},
        epoch=int(response.finalized_features_epoch) if response.finalized_features_epoch >= 0 else None)


def update_request(updates: dict[str, tuple[int, int]], *, validate_only: bool = False
                   ) -> update_v1.UpdateFeaturesRequest:
    """`updates`: by feature, (level, upgrade type: core.features.UPGRADE, ...)."""
    return update_v1.UpdateFeaturesRequest(validate_only=validate_only, feature_updates=tuple(
        update_v1.FeatureUpdateKey(feature=name, max_version_level=i16(level), upgrade_type=i8(upgrade_type))
        for name, (level, upgrade_type) in updates.items()))


def update_answer(response) -> None:
    error = error_or_none(response.error_code, response.error_message)
    if error is not None:
        raise error
