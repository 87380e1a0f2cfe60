"""Feature flags (KIP-584): the features rafka's software supports, the levels the
cluster has finalized, and UpdateFeatures' rules for changing them, as a KRaft
controller applies them (FeatureControlManager.updateFeature).

rafka supports one feature, `group.version` 0-1: level 1 is KIP-848's consumer
group protocol (ConsumerGroupHeartbeat, ConsumerGroupDescribe), which a cluster
at level 0 answers UNSUPPORTED_VERSION, as Kafka's brokers do. It leaves out the
features whose meaning it does not implement: `metadata.version` and
`kraft.version` (its metadata log is not KRaft's), `transaction.version` (TV2's
Produce v12 / EndTxn v5 are not served, and TV1 changes only Kafka's own
transaction log format), `eligible.leader.replicas.version`, `share.version`,
`streams.version`. Asked to set one of those, the controller answers as Kafka's
answers a feature its software does not know.

Invariants:
  * finalized levels are within SUPPORTED (records are written by
    `update_records` only), and a level of 0 is not kept (the feature is not
    finalized);
  * a cluster whose metadata log holds no feature record runs DEFAULT_LEVELS (a
    new Kafka 4.x cluster's `group.version`: 1), so logs written before features
    existed read as they behaved;
  * an update changes nothing unless every feature in it is valid: the first
    invalid one fails the request with INVALID_UPDATE_VERSION (Kafka checks in
    its hash map's order, rafka in the request's; a feature named twice counts
    once, at its last level, as in Kafka's map).

Pure logic, no I/O. Callers: core.metadata (replay, handle_update_features),
core.cluster_image (the finalized levels every image carries),
protocol.handlers.api_versions, update_features and consumer_group, and
rafka.cli_features (the upgrade types).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from rafka.core.errors import InvalidUpdateVersion

GROUP_VERSION = "group.version"
SUPPORTED: Mapping[str, tuple[int, int]] = MappingProxyType({GROUP_VERSION: (0, 1)})   # (min, max) levels
DEFAULT_LEVELS: Mapping[str, int] = MappingProxyType({GROUP_VERSION: 1})
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3   # UpdateFeatures' upgrade_type (v1+; v0: always UPGRADE)
FEATURE_LEVEL_RECORD = "feature_level"


def consumer_group_protocol_enabled(levels: Mapping[str, int]) -> bool:
    """KIP-848's protocol is served at `group.version` 1 and above (a feature not
    finalized is at level 0)."""
    return levels.get(GROUP_VERSION, 0) >= 1


def replayed(levels: dict[str, int], record: dict) -> None:
    """Apply one `feature_level` record: level 0 removes the feature."""
    if record["level"] == 0:
        levels.pop(record["name"], None)
    else:
        levels[record["name"]] = record["level"]


def update_records(finalized: Mapping[str, int], updates: Sequence[tuple[str, int, int]], *,
                   controller_id: int) -> list[dict]:
    """The records for UpdateFeatures' `updates` [(feature, level, upgrade type)],
    or InvalidUpdateVersion for the first that cannot be applied (Kafka's message;
    `controller_id`: the controller as clients know it, named in "Local controller
    <id> ..."). A feature set to the level it has is valid and written again."""
    wanted = {name: (level, upgrade_type) for name, level, upgrade_type in updates}
    for name, (level, upgrade_type) in wanted.items():
        _check(name, level, upgrade_type, finalized.get(name, 0), controller_id)
    return [{"type": FEATURE_LEVEL_RECORD, "name": name, "level": level} for name, (level, _) in wanted.items()]


def _check(name: str, level: int, upgrade_type: int, current: int, controller_id: int) -> None:
    def invalid(reason: str) -> InvalidUpdateVersion:
        return InvalidUpdateVersion(f"Invalid update version {level} for feature {name}. {reason}")
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        raise invalid("The controller does not support the given upgrade type.")
    if level < 0:
        raise invalid("A feature version cannot be less than 0.")
    low, high = SUPPORTED.get(name, (0, 0))
    if not low <= level <= high:
        raise invalid(f"Local controller {controller_id} does not support this feature" if high == 0 else
                      f"Local controller {controller_id} only supports versions "
                      f"{low if low == high else f'{low}-{high}'}")
    if level < current and upgrade_type == UPGRADE:
        raise invalid("Can't downgrade the version of this feature without setting the upgrade type to either "
                      "safe or unsafe downgrade.")
    if level > current and upgrade_type != UPGRADE:
        raise invalid("Can't downgrade to a newer version.")
    if name not in SUPPORTED:   # level 0 of a feature this software does not know
        raise invalid(f"Feature {name} not found.")
