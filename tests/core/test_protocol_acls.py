"""DescribeAcls, CreateAcls and DeleteAcls on the wire, over a stand-in controller
that decides with the real ClusterMetadata handlers; each request with the
principal and host of its connection's session."""

import asyncio

import pytest
from kio.schema.create_acls.v3 import request as create_v3
from kio.schema.delete_acls.v3 import request as delete_v3
from kio.schema.describe_acls.v1 import request as describe_v1
from kio.schema.describe_acls.v3 import request as describe_v3
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from rafka.core.acl import ANONYMOUS, AclOperation as Op, AclPermissionType as Perm, PatternType as Pat, \
    ResourceType as Type
from rafka.core.cluster_image import build_image
from rafka.core.errors import NotController
from rafka.core.metadata import ClusterMetadata
from rafka.protocol.dispatch import DispatchTable, Dispatcher, Session
from rafka.protocol.handlers import acls
from tests.core.test_protocol_dispatch import read_response, request_frame

pytestmark = pytest.mark.core
HOST = "10.0.0.1"


class StandInController:
    """The controller's ACL calls over real metadata; the image rebuilt after each."""

    def __init__(self, *, sasl_required=False):
        self.metadata = ClusterMetadata()
        self._apply(self.metadata.handle_start())
        if sasl_required:
            self._apply(self.metadata.handle_require_sasl())

    def _apply(self, records):
        for record in records:
            self.metadata.replay(record)
        self.image = build_image(self.metadata, version=len(records))

    async def create_acls(self, bindings):
        records, results = self.metadata.handle_create_acls(bindings)
        self._apply(records)
        return results

    async def delete_acls(self, filters):
        records, results = self.metadata.handle_delete_acls(filters)
        self._apply(records)
        return results


def ask(controller, api_key, version, request, *, principal=ANONYMOUS, host=HOST, admin=None):
    dispatcher = Dispatcher(DispatchTable(acls.routes(lambda: controller.image, admin or controller)))
    frame = asyncio.run(dispatcher.dispatch(request_frame(api_key, version, request),
                                            session=Session(principal, host)))
    return read_response(frame, api_key, version)[1]


def creation(name="orders", op=Op.READ, perm=Perm.ALLOW, *, principal="User:alice", host="*",
             resource_type=Type.TOPIC, pattern=Pat.LITERAL):
    return create_v3.AclCreation(resource_type=i8(resource_type), resource_name=name,
                                 resource_pattern_type=i8(pattern), principal=principal, host=host,
                                 operation=i8(op), permission_type=i8(perm))


def create(controller, *creations, **who):
    return ask(controller, 30, 3, create_v3.CreateAclsRequest(creations=creations), **who)


def describe(controller, version=3, *, resource_type=Type.ANY, name=None, pattern=Pat.ANY, principal_filter=None,
             **who):
    module = describe_v3 if version == 3 else describe_v1
    return ask(controller, 29, version, module.DescribeAclsRequest(
        resource_type_filter=i8(resource_type), resource_name_filter=name, pattern_type_filter=i8(pattern),
        principal_filter=principal_filter, host_filter=None, operation=i8(Op.ANY), permission_type=i8(Perm.ANY)),
        **who)


def delete_filter(*, resource_type=Type.ANY, name=None, pattern=Pat.ANY, principal=None, op=Op.ANY):
    return delete_v3.DeleteAclsFilter(resource_type_filter=i8(resource_type), resource_name_filter=name,
                                      pattern_type_filter=i8(pattern), principal_filter=principal, host_filter=None,
                                      operation=i8(op), permission_type=i8(Perm.ANY))


def delete(controller, *filters, **who):
    return ask(controller, 31, 3, delete_v3.DeleteAclsRequest(filters=filters), **who)


def described(answer):
    return [(r.resource_type, r.resource_name, r.pattern_type, [(a.principal, a.host, a.operation, a.permission_type)
                                                                for a in r.acls]) for r in answer.resources]


def test_create_then_describe_then_delete__on_an_open_cluster():
    controller = StandInController()
    answer = create(controller, creation(), creation(op=Op.WRITE), creation("ord", pattern=Pat.PREFIXED),
                    creation("billing", resource_type=Type.GROUP))
    assert [r.error_code for r in answer.results] == [ErrorCode.none] * 4
    assert described(describe(controller, resource_type=Type.TOPIC)) == [
        (Type.TOPIC, "ord", Pat.PREFIXED, [("User:alice", "*", Op.READ, Perm.ALLOW)]),
        (Type.TOPIC, "orders", Pat.LITERAL, [("User:alice", "*", Op.READ, Perm.ALLOW),
                                             ("User:alice", "*", Op.WRITE, Perm.ALLOW)])]
    assert [r.resource_name for r in describe(controller, name="orders", pattern=Pat.MATCH).resources] == \
        ["ord", "orders"]
    assert described(describe(controller, principal_filter="User:bob")) == []
    answer = delete(controller, delete_filter(resource_type=Type.TOPIC, name="orders", op=Op.WRITE),
                    delete_filter(principal="User:nobody"))
    first, second = answer.filter_results
    assert first.error_code == ErrorCode.none and second.error_code == ErrorCode.none
    assert [(m.resource_name, m.operation, m.pattern_type) for m in first.matching_acls] == \
        [("orders", Op.WRITE, Pat.LITERAL)]
    assert second.matching_acls == ()
    assert len(controller.metadata.acl_bindings) == 3


def test_create__each_creation_its_own_error():
    controller = StandInController()
    answer = create(controller, creation(), creation("my-cluster", Op.ALTER, resource_type=Type.CLUSTER),
                    creation(principal="alice"), creation(pattern=Pat.MATCH), creation())
    codes = [(r.error_code, r.error_message) for r in answer.results]
    assert codes == [(ErrorCode.none, None),
                     (ErrorCode.invalid_request, "The only valid name for the CLUSTER resource is kafka-cluster"),
                     (ErrorCode.invalid_request,
                      "expected a string in format principalType:principalName but got alice"),
                     (ErrorCode.invalid_request, "Invalid patternType MATCH"),
                     (ErrorCode.none, None)]
    assert len(controller.metadata.acl_bindings) == 1


def test_describe__unknown_code_in_the_filter__invalid_request():
    answer = describe(StandInController(), resource_type=0)
    assert answer.error_code == ErrorCode.invalid_request and answer.resources == ()


def test_describe__v1_answers_the_same_bindings():
    controller = StandInController()
    create(controller, creation())
    assert described(describe(controller, version=1)) == described(describe(controller, version=3))


def test_delete__unknown_code__that_filter_only():
    controller = StandInController()
    create(controller, creation())
    answer = delete(controller, delete_filter(pattern=0), delete_filter())
    assert [r.error_code for r in answer.filter_results] == [ErrorCode.invalid_request, ErrorCode.none]
    assert controller.metadata.acl_bindings == set()


# --- who may ---------------------------------------------------------------------------

ALTER_CLUSTER = creation("kafka-cluster", Op.ALTER, resource_type=Type.CLUSTER, principal="User:admin")


def test_acl_apis__once_the_cluster_has_bindings__only_those_allowed_on_it():
    """Open cluster: anyone may, until a binding names the cluster; then ALTER on it
    (which implies DESCRIBE) is needed, and a refusal changes nothing."""
    controller = StandInController()
    assert create(controller, ALTER_CLUSTER).results[0].error_code == ErrorCode.none
    refused = create(controller, creation(), creation(op=Op.WRITE), principal="User:alice")
    assert [(r.error_code, r.error_message) for r in refused.results] == [
        (ErrorCode.cluster_authorization_failed, "Request User:alice CreateAcls is not authorized.")] * 2
    assert describe(controller, principal="User:alice").error_code == \
        ErrorCode.cluster_authorization_failed
    refused = delete(controller, delete_filter(), principal="User:alice")
    assert refused.filter_results[0].error_code == ErrorCode.cluster_authorization_failed
    assert len(controller.metadata.acl_bindings) == 1
    assert create(controller, creation(), principal="User:admin").results[0].error_code == ErrorCode.none
    assert len(describe(controller, principal="User:admin").resources) == 2


def test_acl_apis__sasl_required__no_binding_means_no_access_but_the_cluster_user():
    controller = StandInController(sasl_required=True)
    assert create(controller, creation(), principal="User:alice").results[0].error_code == \
        ErrorCode.cluster_authorization_failed
    assert create(controller, ALTER_CLUSTER, principal="User:__rafka").results[0].error_code == ErrorCode.none
    assert create(controller, creation(), principal="User:admin").results[0].error_code == ErrorCode.none


def test_acl_apis__host_of_the_connection_counts():
    controller = StandInController()
    create(controller, creation("kafka-cluster", Op.ALTER, resource_type=Type.CLUSTER, principal="User:admin",
                                host="10.0.0.9"))
    assert create(controller, creation(), principal="User:admin").results[0].error_code == \
        ErrorCode.cluster_authorization_failed
    assert create(controller, creation(), principal="User:admin", host="10.0.0.9").results[0].error_code == \
        ErrorCode.none


def test_create__not_the_controller__every_creation_says_so():
    class Elsewhere:
        async def create_acls(self, bindings):
            raise NotController("send it to the controller")
    answer = create(StandInController(), creation(), creation(), admin=Elsewhere())
    assert [r.error_code for r in answer.results] == [ErrorCode.not_controller] * 2


# --- the session of a real connection ------------------------------------------------------

def test_server__each_request_carries_the_connections_host(tmp_path):
    """A binding for the connection's own address lets it alter ACLs; one for
    another address does not (the server gives every request its peer's host)."""
    from rafka.core.acl import CLUSTER_NAME, AclBinding
    from rafka.protocol.connection import Connection
    from tests.core.protocol_node import ProtocolNode

    def cluster_alter(host):
        return AclBinding(Type.CLUSTER, CLUSTER_NAME, Pat.LITERAL, ANONYMOUS, host, Op.ALTER, Perm.ALLOW)

    async def create_over_the_wire(port):
        connection = await Connection.open("127.0.0.1", port)
        try:
            return await connection.request(create_v3.CreateAclsRequest(creations=(creation(),)))
        finally:
            await connection.close()
    with ProtocolNode(tmp_path, {"orders": 1}) as node:
        node.call(node.create_acls([cluster_alter("10.9.9.9")]))
        refused = asyncio.run(create_over_the_wire(node.port))
        assert [r.error_code for r in refused.results] == [ErrorCode.cluster_authorization_failed]
        node.call(node.create_acls([cluster_alter("127.0.0.1")]))
        allowed = asyncio.run(create_over_the_wire(node.port))
        assert [r.error_code for r in allowed.results] == [ErrorCode.none]
        assert len(node.metadata.acl_bindings) == 3


def test_node_serving__before_its_first_image__asks_for_a_login():
    """A node that has not had the controller's image (EMPTY_IMAGE, version -1)
    does not know whether SASL is required: its listener asks for a login (fail
    closed), and follows the image once one came. (It compared the version with 0,
    which the empty image never has: such a node served unauthenticated clients.)"""
    import dataclasses

    from rafka.actors.serving import NodeServing

    async def no_producer_ids():
        raise AssertionError("not asked")
    serving = NodeServing("replica:t:0:0", allocate_producer_id=no_producer_ids)
    assert serving._sasl_required()
    serving.offer_image(dataclasses.replace(serving.image, version=3))
    assert not serving._sasl_required()
