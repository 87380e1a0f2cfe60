"""Feature flags (KIP-584) judged by kafka-python's KafkaAdminClient
(describe_features: ApiVersions v4's features; update_features: UpdateFeatures v2,
kafka-features.sh's requests), on the in-process node (no Ray): at the actors'
nodes and through a broker's edge, which relays UpdateFeatures to the controller's
node in an envelope, as Kafka's brokers forward it. `group.version` 0 turns
KIP-848's protocol off (UNSUPPORTED_VERSION), 1 back on; Kafka's errors, v0/v1
answers and ApiVersions v3's omissions on the wire."""

import asyncio
import datetime
import uuid

import pytest
from kio.schema.api_versions.v3 import request as api_versions_v3
from kio.schema.api_versions.v4 import request as api_versions_v4
from kio.schema.consumer_group_describe.v0 import request as describe_v0
from kio.schema.consumer_group_heartbeat.v0 import request as heartbeat_v0
from kio.schema.errors import ErrorCode
from kio.schema.update_features.v0 import request as update_v0
from kio.schema.update_features.v1 import request as update_v1
from kio.static.primitive import i8, i16, i32, i32Timedelta

from rafka.core.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from rafka.core.features import GROUP_VERSION, SAFE_DOWNGRADE
from rafka.protocol.connection import Connection
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.compat
TIMEOUT_S = 20
FAILED_FOR_ALL = "The update failed for all features since the following feature had an error: "


@pytest.fixture(params=[False, True], ids=["actor-nodes", "broker-edge"])
def node(tmp_path, request):
    with ProtocolNode(tmp_path, {"orders": 1}, edge=request.param) as node:
        yield node


def on_the_wire(node, request, *, port=None):
    async def ask():
        connection = await Connection.open("127.0.0.1", port or node.port)
        try:
            return await connection.request(request)
        finally:
            await connection.close()
    return asyncio.run(ask())


def admin_client(node):
    from kafka import KafkaAdminClient
    return KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)


def heartbeat(node):
    """A KIP-848 member's first heartbeat, at the coordinator's node (the edge
    routes it there itself)."""
    return on_the_wire(node, heartbeat_v0.ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="", member_epoch=i32(0), rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        subscribed_topic_names=("orders",), server_assignor=None, topic_partitions=()),
        port=None if node.with_edge else node.coordinator_port)


def test_kafka_python__describe_features__group_version_finalized_at_1_with_the_image_version_as_epoch(node):
    client = admin_client(node)
    try:
        described = client.describe_features()
    finally:
        client.close()
    assert described == {GROUP_VERSION: {"supported": (0, 1), "finalized": (1, 1),
                                         "finalized_epoch": node.image().version}}


def test_kafka_python__update_features__group_version_0_turns_kip848_off_and_1_back_on(node):
    from kafka.admin import UpdateFeatureType
    assert heartbeat(node).error_code == ErrorCode.none
    client = admin_client(node)
    try:
        assert client.update_features({GROUP_VERSION: (UpdateFeatureType.SAFE_DOWNGRADE, 0)}) == {GROUP_VERSION: "OK"}
        assert node.image().finalized_features == {}
        assert "finalized" not in client.describe_features()[GROUP_VERSION]
        refused = heartbeat(node)
        assert (refused.error_code, refused.error_message, refused.member_id) == (
            ErrorCode.unsupported_version, None, None)
        described = on_the_wire(node, describe_v0.ConsumerGroupDescribeRequest(
            group_ids=("g", "h"), include_authorized_operations=False),
            port=None if node.with_edge else node.coordinator_port)
        assert [(g.group_id, g.error_code) for g in described.groups] == [
            ("g", ErrorCode.unsupported_version), ("h", ErrorCode.unsupported_version)]
        assert client.update_features({GROUP_VERSION: 1}) == {GROUP_VERSION: "OK"}
    finally:
        client.close()
    assert node.image().finalized_features == {GROUP_VERSION: 1}
    assert heartbeat(node).error_code == ErrorCode.none


def test_kafka_python__update_features__invalid_updates_are_kafkas_errors_and_change_nothing(node):
    from kafka.errors import InvalidUpdateVersionError
    client = admin_client(node)
    version = node.image().version
    try:
        for updates, reason in [
                ({GROUP_VERSION: 0}, "Invalid update version 0 for feature group.version. Can't downgrade the "
                                     "version of this feature without setting the upgrade type to either safe or "
                                     "unsafe downgrade."),
                ({GROUP_VERSION: 2}, "Invalid update version 2 for feature group.version. Local controller 0 "
                                     "only supports versions 0-1"),
                ({"metadata.version": 27}, "Invalid update version 27 for feature metadata.version. Local "
                                           "controller 0 does not support this feature")]:
            with pytest.raises(InvalidUpdateVersionError) as raised:
                client.update_features(updates)
            assert FAILED_FOR_ALL + reason in str(raised.value)
        assert client.update_features({GROUP_VERSION: (SAFE_DOWNGRADE, 0)}, validate_only=True) == {
            GROUP_VERSION: "OK"}
    finally:
        client.close()
    assert node.image().finalized_features == {GROUP_VERSION: 1} and node.image().version == version


def test_update_features__v1_answers_a_result_per_update__v0_cannot_downgrade(node):
    answer = on_the_wire(node, update_v1.UpdateFeaturesRequest(feature_updates=(
        update_v1.FeatureUpdateKey(feature=GROUP_VERSION, max_version_level=i16(1), upgrade_type=i8(1)),),
        validate_only=False))
    assert (answer.error_code, answer.error_message) == (ErrorCode.none, None)
    assert [(r.feature, r.error_code, r.error_message) for r in answer.results] == [
        (GROUP_VERSION, ErrorCode.none, "NONE")]
    answer = on_the_wire(node, update_v0.UpdateFeaturesRequest(feature_updates=(
        update_v0.FeatureUpdateKey(feature=GROUP_VERSION, max_version_level=i16(0), allow_downgrade=True),)))
    assert answer.error_code == ErrorCode.invalid_update_version and answer.results == ()
    assert "without setting the upgrade type" in answer.error_message
    assert node.image().finalized_features == {GROUP_VERSION: 1}


def test_update_features__without_alter_on_the_cluster__cluster_authorization_failed(node):
    from kafka.errors import ClusterAuthorizationFailedError
    node.call(node.create_acls([AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:alice",
                                           "*", AclOperation.ALTER, AclPermissionType.ALLOW)]))
    client = admin_client(node)
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            client.update_features({GROUP_VERSION: (SAFE_DOWNGRADE, 0)})
    finally:
        client.close()
    assert node.image().finalized_features == {GROUP_VERSION: 1}


def test_api_versions__v3_leaves_out_features_whose_lowest_level_is_0__v4_lists_them(node):
    v3 = on_the_wire(node, api_versions_v3.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    v4 = on_the_wire(node, api_versions_v4.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    for answer in (v3, v4):
        assert [(f.name, f.min_version_level, f.max_version_level) for f in answer.finalized_features] == [
            (GROUP_VERSION, 1, 1)]
        assert answer.finalized_features_epoch == node.image().version and not answer.zk_migration_ready
    assert v3.supported_features == ()
    assert [(f.name, f.min_version, f.max_version) for f in v4.supported_features] == [(GROUP_VERSION, 0, 1)]
    assert (57, 0, 2) in [(k.api_key, k.min_version, k.max_version) for k in v4.api_keys]


def test_rafka_features_cli__describe_upgrade_downgrade_disable_as_kafka_features_sh(tmp_path):
    import argparse
    from rafka import cli_features
    from rafka.cluster_errors import UsageError
    with ProtocolNode(tmp_path, {"orders": 1}, edge=True) as node:
        admin = node.wire_admin(default_api_timeout_ms=TIMEOUT_S * 1000)

        def run(operation, *features, dry_run=False, unsafe=False):
            printed = []
            arguments = argparse.Namespace(operation=operation, feature=list(features), dry_run=dry_run,
                                           unsafe=unsafe)
            try:
                code = cli_features.cmd_features(admin, arguments, out=printed.append)
            except UsageError as error:
                return 1, printed, str(error)
            return code, printed, ""

        version = node.image().version
        assert run("describe") == (0, [f"Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
                                       f"FinalizedVersionLevel: 1\tEpoch: {version}"], "")
        assert run("disable", "group.version", dry_run=True) == (0, ["group.version can be disabled."], "")
        assert node.image().finalized_features == {GROUP_VERSION: 1}
        assert run("disable", "group.version") == (0, ["group.version was disabled."], "")
        assert node.image().finalized_features == {}
        assert run("describe")[1] == [f"Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
                                      f"FinalizedVersionLevel: 0\tEpoch: {node.image().version}"]
        assert run("upgrade", "group.version=1") == (0, ["group.version was upgraded to 1."], "")
        code, printed, error = run("upgrade", "group.version=2", "metadata.version=27")
        assert (code, error) == (1, "2 out of 2 operation(s) failed.")
        assert printed[0].startswith(f"Could not upgrade group.version to 2. {FAILED_FOR_ALL}Invalid update version ")
        assert printed[1].startswith(f"Could not upgrade metadata.version to 27. {FAILED_FOR_ALL}")
        code, printed, _ = run("downgrade", "group.version=0", dry_run=True, unsafe=True)
        assert (code, printed) == (0, ["group.version can be downgraded to 0."])
        assert run("upgrade", "group.version") == (
            1, [], "Can't parse feature=level string group.version: equals sign not found.")
        assert run("upgrade", "group.version=x") == (
            1, [], "Can't parse feature=level string group.version=x: unable to parse x as a short.")
        assert run("upgrade", "group.version=1", "group.version=1") == (
            1, [], "Feature group.version was specified more than once.")
        assert run("disable") == (1, [], "You must specify at least one feature to disable")
        assert node.image().finalized_features == {GROUP_VERSION: 1}
