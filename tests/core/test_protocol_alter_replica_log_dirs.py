"""AlterReplicaLogDirs' answers that the in-process node cannot show (its broker
hosts every partition, and its disk is readable): a partition of a known topic
not hosted here, an unreadable log dir, a partition named in two dirs, and
ALTER on the cluster refused, each as Kafka's ReplicaManager.alterReplicaLogDirs
and AlterReplicaLogDirsRequest.getErrorResponse answer. kafka-python's view of
the rest is in tests/compat/test_admin_apis_in_process.py."""

import asyncio

import pytest
from kio.schema.alter_replica_log_dirs.v2 import request as v2
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from rafka.core.log_dirs import LogDirDescription, PartitionDirSize
from rafka.protocol.dispatch import RequestContext
from rafka.protocol.handlers.alter_replica_log_dirs import alter_replica_log_dirs
from tests.core.helpers import orders_image

pytestmark = pytest.mark.core
HERE = "/data/broker-0"


def request(*dirs):
    return v2.AlterReplicaLogDirsRequest(dirs=tuple(
        v2.AlterReplicaLogDir(path=path, topics=tuple(v2.AlterReplicaLogDirTopic(
            name=topic, partitions=tuple(i32(p) for p in partitions)) for topic, partitions in topics))
        for path, topics in dirs))


def answered(log_dirs, body, image=None):
    context = RequestContext(api_key=34, api_version=2, correlation_id=1, client_id="admin", connection_id="c",
                             supported_api_versions=(), image=image)
    answer = asyncio.run(alter_replica_log_dirs(orders_image, log_dirs, body, context))
    return [(t.topic_name, [(int(p.partition_index), p.error_code) for p in t.partitions]) for t in answer.results]


def hosting(*partitions):
    description = LogDirDescription(HERE, tuple(PartitionDirSize("orders", p, 0) for p in partitions), 1, 1)
    return lambda: [(HERE, lambda: description)]


def test_a_known_partition_not_hosted_here__replica_not_available__a_hosted_one_none():
    assert answered(hosting(0), request((HERE, [("orders", [0, 1, 2])]))) == [
        ("orders", [(0, ErrorCode.none), (1, ErrorCode.replica_not_available),
                    (2, ErrorCode.unknown_topic_or_partition)])]


def test_an_unreadable_log_dir__kafka_storage_error():
    def unreadable():
        raise OSError("input/output error")
    assert answered(lambda: [(HERE, unreadable)], request((HERE, [("orders", [0])]))) == [
        ("orders", [(0, ErrorCode.kafka_storage_error)])]


def test_a_partition_named_in_two_dirs__answered_once_for_the_last():
    assert answered(hosting(0), request((HERE, [("orders", [0])]), ("/elsewhere", [("orders", [0, 1])]))) == [
        ("orders", [(0, ErrorCode.log_dir_not_found), (1, ErrorCode.log_dir_not_found)])]
    assert answered(hosting(0), request(("/elsewhere", [("orders", [0])]), (HERE, [("orders", [0])]))) == [
        ("orders", [(0, ErrorCode.none)])]


def test_no_alter_on_the_cluster__every_partition_named_cluster_authorization_failed():
    import dataclasses
    from rafka.core.acl import AclBinding, AclOperation, AclPermissionType, Acls, PatternType, ResourceType
    # a binding exists (so ACLs are on), and it does not grant ALTER on the cluster
    image = dataclasses.replace(orders_image(), acls=Acls([AclBinding(
        ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:ANONYMOUS", "*", AclOperation.DESCRIBE,
        AclPermissionType.ALLOW)]))
    assert answered(hosting(0), request((HERE, [("orders", [0])]), ("/elsewhere", [("orders", [0])])), image) == [
        ("orders", [(0, ErrorCode.cluster_authorization_failed)]),
        ("orders", [(0, ErrorCode.cluster_authorization_failed)])]
