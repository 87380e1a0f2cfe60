"""Feature levels (core.features) as a KRaft controller finalizes them: the rules of
UpdateFeatures with Kafka's messages, the records they write, the defaults a
metadata log without feature records reads as, and the image every node gets."""

import pytest

from rafka.core import features
from rafka.core.cluster_image import build_image
from rafka.core.errors import InvalidUpdateVersion
from rafka.core.features import GROUP_VERSION, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE, UPGRADE
from rafka.core.metadata import ClusterMetadata

pytestmark = pytest.mark.core


def updated(metadata: ClusterMetadata, *updates) -> list[dict]:
    records = metadata.handle_update_features(list(updates), controller_id=7)
    for record in records:
        metadata.replay(record)
    return records


def test_a_new_cluster__group_version_1__and_its_image_tells_it():
    metadata = ClusterMetadata()
    assert metadata.feature_levels == {GROUP_VERSION: 1}
    assert build_image(metadata, 3).finalized_features == {GROUP_VERSION: 1}
    assert features.consumer_group_protocol_enabled(metadata.feature_levels)


def test_downgrade_to_0_removes_the_feature_and_an_upgrade_brings_it_back():
    metadata = ClusterMetadata()
    assert updated(metadata, (GROUP_VERSION, 0, SAFE_DOWNGRADE)) == [
        {"type": "feature_level", "name": GROUP_VERSION, "level": 0}]
    assert metadata.feature_levels == {} and build_image(metadata, 4).finalized_features == {}
    assert not features.consumer_group_protocol_enabled(metadata.feature_levels)
    updated(metadata, (GROUP_VERSION, 1, UPGRADE))
    assert metadata.feature_levels == {GROUP_VERSION: 1}


def test_the_same_level_again__valid_with_any_upgrade_type():
    metadata = ClusterMetadata()
    for upgrade_type in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        assert len(updated(metadata, (GROUP_VERSION, 1, upgrade_type))) == 1
    assert metadata.feature_levels == {GROUP_VERSION: 1}


@pytest.mark.parametrize("update, current, reason", [
    ((GROUP_VERSION, 1, 0), 1, "The controller does not support the given upgrade type."),
    ((GROUP_VERSION, 1, 4), 1, "The controller does not support the given upgrade type."),
    ((GROUP_VERSION, -1, UPGRADE), 1, "A feature version cannot be less than 0."),
    ((GROUP_VERSION, 2, UPGRADE), 1, "Local controller 7 only supports versions 0-1"),
    (("metadata.version", 27, UPGRADE), 0, "Local controller 7 does not support this feature"),
    (("transaction.version", 2, UPGRADE), 0, "Local controller 7 does not support this feature"),
    ((GROUP_VERSION, 0, UPGRADE), 1, "Can't downgrade the version of this feature without setting the upgrade "
                                     "type to either safe or unsafe downgrade."),
    ((GROUP_VERSION, 1, SAFE_DOWNGRADE), 0, "Can't downgrade to a newer version."),
    (("no.such.feature", 0, UPGRADE), 0, "Feature no.such.feature not found."),
])
def test_an_update_that_cannot_be_applied__invalid_update_version_with_kafkas_message(update, current, reason):
    metadata = ClusterMetadata()
    if current == 0:
        updated(metadata, (GROUP_VERSION, 0, SAFE_DOWNGRADE))
    before = dict(metadata.feature_levels)
    name, level, _ = update
    with pytest.raises(InvalidUpdateVersion) as raised:
        metadata.handle_update_features([update], controller_id=7)
    assert raised.value.message == f"Invalid update version {level} for feature {name}. {reason}"
    assert raised.value.code == 95 and not raised.value.retriable
    assert metadata.feature_levels == before


def test_one_bad_update_fails_the_request__nothing_written__and_a_feature_named_twice_counts_at_its_last_level():
    metadata = ClusterMetadata()
    with pytest.raises(InvalidUpdateVersion, match="Feature x.y not found"):
        metadata.handle_update_features([(GROUP_VERSION, 0, SAFE_DOWNGRADE), ("x.y", 0, UPGRADE)],
                                        controller_id=7)
    assert metadata.feature_levels == {GROUP_VERSION: 1}
    assert updated(metadata, (GROUP_VERSION, 0, SAFE_DOWNGRADE), (GROUP_VERSION, 1, SAFE_DOWNGRADE)) == [
        {"type": "feature_level", "name": GROUP_VERSION, "level": 1}]
    assert updated(metadata) == []   # no update: valid, nothing written


def test_a_log_written_before_features__replays_to_the_defaults():
    metadata = ClusterMetadata()
    for record in [{"type": "cluster", "cluster_id": "c"}, {"type": "controller_epoch", "epoch": 3}]:
        metadata.replay(record)
    assert metadata.feature_levels == {GROUP_VERSION: 1}
