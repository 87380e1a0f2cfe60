"""The authorizer against Kafka's rules, by table: each rule on its own, then
together; the filters of DescribeAcls / DeleteAcls; the validation of new
bindings; the controller's ACL records and the image every node decides from."""

import pickle

import pytest

from rafka.core.acl import (ANONYMOUS, CLUSTER, MAX_ACL_CHANGES_PER_REQUEST, AclBinding, AclBindingFilter,
                            AclOperation as Op, AclPermissionType as Perm, Acls, PatternType as Pat, Resource,
                            ResourceType as Type, authorize, authorize_by_resource_type, user_principal,
                            validate_new_binding)
from rafka.core.cluster_image import build_image
from rafka.core.errors import InvalidRequest, UnknownServerError
from rafka.core.metadata import ClusterMetadata

pytestmark = pytest.mark.core

ALICE, BOB = "User:alice", "User:bob"
HOST, OTHER_HOST = "10.0.0.1", "10.0.0.2"
ORDERS = Resource(Type.TOPIC, "orders")


def acl(name="orders", op=Op.READ, perm=Perm.ALLOW, *, principal=ALICE, host="*", pattern=Pat.LITERAL,
        resource_type=Type.TOPIC):
    return AclBinding(resource_type, name, pattern, principal, host, op, perm)


def may(bindings, op=Op.READ, resource=ORDERS, *, principal=ALICE, host=HOST, default=False, super_users=()):
    return authorize(Acls(bindings), principal, host, op, resource, super_users=frozenset(super_users),
                     allow_everyone_if_no_acl_found=default)


# --- each rule on its own ------------------------------------------------------------

@pytest.mark.parametrize("bindings, op, expected", [
    pytest.param([acl()], Op.READ, True, id="allow-read__read"),
    pytest.param([acl()], Op.WRITE, False, id="allow-read__write-refused"),
    pytest.param([acl(op=Op.ALL)], Op.ALTER_CONFIGS, True, id="allow-all__any-op"),
    pytest.param([acl(op=Op.ALL, perm=Perm.DENY), acl(op=Op.WRITE)], Op.WRITE, False, id="deny-all__beats-allow"),
    pytest.param([acl(perm=Perm.DENY)], Op.READ, False, id="deny-read__read-refused"),
    pytest.param([acl(perm=Perm.DENY), acl(op=Op.WRITE)], Op.WRITE, True, id="deny-read__write-allowed"),
])
def test_authorize__operation_and_permission(bindings, op, expected):
    assert may(bindings, op) is expected


@pytest.mark.parametrize("granted, asked, expected", [
    (Op.READ, Op.DESCRIBE, True), (Op.WRITE, Op.DESCRIBE, True), (Op.DELETE, Op.DESCRIBE, True),
    (Op.ALTER, Op.DESCRIBE, True), (Op.DESCRIBE, Op.DESCRIBE, True),
    (Op.CREATE, Op.DESCRIBE, False), (Op.ALTER_CONFIGS, Op.DESCRIBE, False),
    (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, True), (Op.DESCRIBE_CONFIGS, Op.DESCRIBE_CONFIGS, True),
    (Op.ALTER, Op.DESCRIBE_CONFIGS, False),
    (Op.DESCRIBE, Op.READ, False), (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, False),   # never the other way
    (Op.READ, Op.WRITE, False),
])
def test_authorize__implied_operations_by_an_allow(granted, asked, expected):
    assert may([acl(op=granted)], asked) is expected


@pytest.mark.parametrize("denied, asked", [
    (Op.READ, Op.DESCRIBE), (Op.WRITE, Op.DESCRIBE), (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS),
])
def test_authorize__a_deny_implies_nothing(denied, asked):
    """A DENY of READ does not deny DESCRIBE (Kafka's findResult: implication is for ALLOW only)."""
    assert may([acl(op=denied, perm=Perm.DENY), acl(op=asked)], asked) is True


@pytest.mark.parametrize("binding, resource, expected", [
    pytest.param(acl("orders"), ORDERS, True, id="literal__same-name"),
    pytest.param(acl("order"), ORDERS, False, id="literal__a-prefix-is-not-the-name"),
    pytest.param(acl("orders-eu"), ORDERS, False, id="literal__longer-name"),
    pytest.param(acl("*"), ORDERS, True, id="literal-wildcard__every-name"),
    pytest.param(acl("*", pattern=Pat.PREFIXED), ORDERS, False, id="prefixed-star__only-names-starting-with-star"),
    pytest.param(acl("ord", pattern=Pat.PREFIXED), ORDERS, True, id="prefixed__prefix"),
    pytest.param(acl("orders", pattern=Pat.PREFIXED), ORDERS, True, id="prefixed__whole-name"),
    pytest.param(acl("orders-", pattern=Pat.PREFIXED), ORDERS, False, id="prefixed__longer-than-name"),
    pytest.param(acl("pay", pattern=Pat.PREFIXED), ORDERS, False, id="prefixed__other-prefix"),
    pytest.param(acl("orders", resource_type=Type.GROUP), ORDERS, False, id="other-resource-type"),
    pytest.param(acl("orders", resource_type=Type.GROUP), Resource(Type.GROUP, "orders"), True, id="group"),
])
def test_authorize__resource_patterns(binding, resource, expected):
    assert may([binding], Op.READ, resource) is expected


@pytest.mark.parametrize("binding_principal, binding_host, principal, host, expected", [
    (ALICE, "*", ALICE, HOST, True),
    (ALICE, "*", BOB, HOST, False),
    ("User:*", "*", BOB, HOST, True),
    ("User:*", "*", ANONYMOUS, HOST, True),
    (ALICE, HOST, ALICE, HOST, True),
    (ALICE, HOST, ALICE, OTHER_HOST, False),
    ("User:*", OTHER_HOST, ALICE, HOST, False),
])
def test_authorize__principal_and_host(binding_principal, binding_host, principal, host, expected):
    binding = acl(principal=binding_principal, host=binding_host)
    assert may([binding], principal=principal, host=host) is expected


# --- deny over allow, wherever each comes from -----------------------------------------

@pytest.mark.parametrize("allow, deny", [
    pytest.param(acl(), acl(perm=Perm.DENY), id="literal-deny__literal-allow"),
    pytest.param(acl(), acl("*", perm=Perm.DENY), id="wildcard-deny__literal-allow"),
    pytest.param(acl(), acl("ord", perm=Perm.DENY, pattern=Pat.PREFIXED), id="prefixed-deny__literal-allow"),
    pytest.param(acl("ord", pattern=Pat.PREFIXED), acl(perm=Perm.DENY), id="literal-deny__prefixed-allow"),
    pytest.param(acl(principal="User:*"), acl(perm=Perm.DENY), id="own-deny__everyone-allow"),
    pytest.param(acl(), acl(perm=Perm.DENY, principal="User:*"), id="everyone-deny__own-allow"),
    pytest.param(acl(), acl(perm=Perm.DENY, host=HOST), id="host-deny__any-host-allow"),
    pytest.param(acl(op=Op.ALL), acl(perm=Perm.DENY), id="read-deny__all-allow"),
])
def test_authorize__deny_wins_over_allow(allow, deny):
    assert may([allow, deny]) is False
    assert may([allow]) is True


def test_authorize__a_deny_for_another_host_does_not_refuse():
    assert may([acl(), acl(perm=Perm.DENY, host=OTHER_HOST)]) is True


# --- the default, and super users --------------------------------------------------------

@pytest.mark.parametrize("bindings, default, expected", [
    pytest.param([], True, True, id="no-bindings__open-cluster__allowed"),
    pytest.param([], False, False, id="no-bindings__sasl-cluster__refused"),
    pytest.param([acl("payments")], True, True, id="bindings-elsewhere__open__allowed"),
    pytest.param([acl(principal=BOB)], True, False, id="binding-on-resource-for-another__refused-even-if-open"),
    pytest.param([acl(op=Op.WRITE)], True, False, id="binding-on-resource-other-op__refused-even-if-open"),
    pytest.param([acl("*", principal=BOB)], True, False, id="wildcard-binding-counts-as-the-resources"),
    pytest.param([acl("o", principal=BOB, pattern=Pat.PREFIXED)], True, False, id="prefixed-counts-too"),
])
def test_authorize__no_acl_found_default(bindings, default, expected):
    assert may(bindings, default=default) is expected


@pytest.mark.parametrize("bindings", [[], [acl(perm=Perm.DENY, principal="User:*", op=Op.ALL)]])
def test_authorize__super_user_always_allowed(bindings):
    assert may(bindings, Op.DELETE, principal="User:admin", super_users={"User:admin"}) is True
    assert may(bindings, Op.DELETE, principal=ALICE, super_users={"User:admin"}) is False


def test_authorize__prefixes_of_every_length_and_many_bindings():
    """The index tries each prefix length once: bindings for 2000 other topics and
    prefixes of several lengths, and only the ones for this name apply."""
    bindings = [acl(f"topic-{i}", principal=BOB) for i in range(2000)]
    bindings += [acl("o", op=Op.WRITE, pattern=Pat.PREFIXED), acl("orde", op=Op.READ, pattern=Pat.PREFIXED),
                 acl("orders-e", op=Op.DELETE, pattern=Pat.PREFIXED, perm=Perm.DENY)]
    acls = Acls(bindings)
    assert {b.resource_name for b in acls.applying_to(ORDERS)} == {"o", "orde"}
    assert {b.resource_name for b in acls.applying_to(Resource(Type.TOPIC, "orders-eu"))} == {"o", "orde", "orders-e"}
    assert may(bindings, Op.WRITE) and may(bindings, Op.READ)
    assert not may(bindings, Op.DELETE, Resource(Type.TOPIC, "orders-eu"))
    assert not may(bindings, Op.READ, Resource(Type.TOPIC, "topic-7"), default=True)


def test_authorize__cluster_resource():
    bindings = [acl("kafka-cluster", Op.ALTER, resource_type=Type.CLUSTER)]
    assert may(bindings, Op.ALTER, CLUSTER) and may(bindings, Op.DESCRIBE, CLUSTER)
    assert not may(bindings, Op.CLUSTER_ACTION, CLUSTER, default=True)


# --- by resource type (InitProducerId without a transactional id) ----------------------------

@pytest.mark.parametrize("bindings, default, expected", [
    pytest.param([], True, True, id="no-bindings__open"),
    pytest.param([], False, False, id="no-bindings__closed"),
    pytest.param([acl("orders", Op.WRITE)], False, True, id="write-on-one-topic"),
    pytest.param([acl("orders", Op.ALL)], False, True, id="all-on-one-topic"),
    pytest.param([acl("orders", Op.READ)], False, False, id="read-only"),
    pytest.param([acl("orders", Op.WRITE, principal=BOB)], False, False, id="anothers-write"),
    pytest.param([acl("orders", Op.WRITE), acl("orders", Op.WRITE, Perm.DENY)], False, False, id="literal-denied"),
    pytest.param([acl("orders", Op.WRITE), acl("or", Op.WRITE, Perm.DENY, pattern=Pat.PREFIXED)], False, False,
                 id="prefix-denied"),
    pytest.param([acl("orders", Op.WRITE), acl("pay", Op.WRITE), acl("orders", Op.WRITE, Perm.DENY)], False, True,
                 id="one-of-two-denied"),
    pytest.param([acl("*", Op.WRITE)], False, True, id="wildcard-allow"),
    pytest.param([acl("orders", Op.WRITE), acl("*", Op.WRITE, Perm.DENY)], False, False, id="wildcard-deny"),
])
def test_authorize_by_resource_type(bindings, default, expected):
    assert authorize_by_resource_type(Acls(bindings), ALICE, HOST, Op.WRITE, Type.TOPIC,
                                      allow_everyone_if_no_acl_found=default) is expected


# --- filters ------------------------------------------------------------------------------

LITERAL_ORDERS = acl("orders")
WILDCARD_TOPIC = acl("*", principal=BOB, op=Op.WRITE)
PREFIXED_ORD = acl("ord", pattern=Pat.PREFIXED, perm=Perm.DENY)
GROUP_BILLING = acl("billing", resource_type=Type.GROUP, host=HOST)
EVERY = [LITERAL_ORDERS, WILDCARD_TOPIC, PREFIXED_ORD, GROUP_BILLING]


@pytest.mark.parametrize("acl_filter, expected", [
    pytest.param(AclBindingFilter(), EVERY, id="any"),
    pytest.param(AclBindingFilter(resource_type=Type.GROUP), [GROUP_BILLING], id="resource-type"),
    pytest.param(AclBindingFilter(resource_name="orders"), [LITERAL_ORDERS], id="name-any-pattern__exact-name-only"),
    pytest.param(AclBindingFilter(resource_name="ord"), [PREFIXED_ORD], id="name-any-pattern__prefixed-by-name"),
    pytest.param(AclBindingFilter(resource_name="orders", pattern_type=Pat.MATCH),
                 [LITERAL_ORDERS, WILDCARD_TOPIC, PREFIXED_ORD], id="match__everything-that-applies"),
    pytest.param(AclBindingFilter(resource_name="orders", pattern_type=Pat.PREFIXED), [], id="prefixed__exact"),
    pytest.param(AclBindingFilter(pattern_type=Pat.PREFIXED), [PREFIXED_ORD], id="pattern-type"),
    pytest.param(AclBindingFilter(pattern_type=Pat.LITERAL, resource_type=Type.TOPIC),
                 [LITERAL_ORDERS, WILDCARD_TOPIC], id="literal-topics"),
    pytest.param(AclBindingFilter(principal=BOB), [WILDCARD_TOPIC], id="principal"),
    pytest.param(AclBindingFilter(host=HOST), [GROUP_BILLING], id="host"),
    pytest.param(AclBindingFilter(operation=Op.WRITE), [WILDCARD_TOPIC], id="operation-exact-no-implication"),
    pytest.param(AclBindingFilter(operation=Op.DESCRIBE), [], id="operation-describe-is-not-implied"),
    pytest.param(AclBindingFilter(permission_type=Perm.DENY), [PREFIXED_ORD], id="permission"),
])
def test_filter__matches(acl_filter, expected):
    assert set(Acls(EVERY).matching(acl_filter)) == set(expected)


def test_filter__unknown_fields_are_named():
    assert AclBindingFilter().unknown_field() is None
    assert AclBindingFilter.of(9, None, 1, None, None, 1, 1).unknown_field() == "Unknown resource type in the filter."
    assert AclBindingFilter.of(1, None, 0, None, None, 1, 1).unknown_field() == "Unknown pattern type in the filter."


# --- new bindings ---------------------------------------------------------------------------

@pytest.mark.parametrize("binding, message", [
    (AclBinding.of(1, "t", 3, ALICE, "*", 3, 3), "Invalid resourceType ANY"),
    (AclBinding.of(42, "t", 3, ALICE, "*", 3, 3), "Invalid resourceType UNKNOWN"),
    (AclBinding.of(2, "t", 2, ALICE, "*", 3, 3), "Invalid patternType MATCH"),
    (AclBinding.of(2, "t", 1, ALICE, "*", 3, 3), "Invalid patternType ANY"),
    (AclBinding.of(2, "t", 3, ALICE, "*", 1, 3), "Invalid operation ANY"),
    (AclBinding.of(2, "t", 3, ALICE, "*", 3, 1), "Invalid permissionType ANY"),
    (AclBinding.of(4, "my-cluster", 3, ALICE, "*", 7, 3),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (AclBinding.of(2, "", 3, ALICE, "*", 3, 3), "Invalid empty resource name"),
    (AclBinding.of(2, "t", 3, "alice", "*", 3, 3),
     "expected a string in format principalType:principalName but got alice"),
])
def test_validate_new_binding__refusals_with_kafkas_messages(binding, message):
    with pytest.raises(InvalidRequest) as refused:
        validate_new_binding(binding)
    assert refused.value.message == message


def test_binding__record_round_trip_and_hashable():
    binding = acl("ord", Op.ALL, Perm.DENY, pattern=Pat.PREFIXED, host=HOST)
    assert AclBinding.from_record(binding.to_record()) == binding
    assert binding.to_record() == {"resource_type": 2, "resource_name": "ord", "pattern_type": 4,
                                   "principal": ALICE, "host": HOST, "operation": 2, "permission_type": 2}
    assert len({binding, acl("ord", Op.ALL, Perm.DENY, pattern=Pat.PREFIXED, host=HOST)}) == 1
    assert user_principal(None) == ANONYMOUS and user_principal("alice") == ALICE


def test_acls__pickled_as_bindings_and_indexed_again():
    acls = Acls(EVERY, version=4)
    copy = pickle.loads(pickle.dumps(acls))
    assert copy == acls and copy.version == 4 and hash(copy) == hash(acls)
    assert copy.applying_to(ORDERS) and authorize(copy, BOB, HOST, Op.WRITE, ORDERS)


# --- the controller's records, and the image ----------------------------------------------------

def apply(metadata, records):
    for record in records:
        metadata.replay(record)
    return records


def test_metadata__create_acls__records_once_per_new_binding_with_per_binding_errors():
    metadata = ClusterMetadata()
    bad = AclBinding.of(4, "nope", 3, ALICE, "*", 7, 3)
    records, results = metadata.handle_create_acls([LITERAL_ORDERS, bad, LITERAL_ORDERS, PREFIXED_ORD])
    assert [r["type"] for r in records] == ["acl", "acl"]
    assert results[0] is None and results[2] is None and results[3] is None
    assert isinstance(results[1], InvalidRequest)
    assert metadata.acl_bindings == set()   # the handler changes nothing
    apply(metadata, records)
    assert metadata.acl_bindings == {LITERAL_ORDERS, PREFIXED_ORD} and metadata.acl_version == 2
    again, results = metadata.handle_create_acls([LITERAL_ORDERS])
    assert again == [] and results == [None]   # there already: created, nothing to record


def test_metadata__delete_acls__each_binding_removed_once_filters_answer_what_they_matched():
    metadata = ClusterMetadata()
    apply(metadata, metadata.handle_create_acls(EVERY)[0])
    records, results = metadata.handle_delete_acls([
        AclBindingFilter(resource_type=Type.TOPIC), AclBindingFilter(principal=ALICE),
        AclBindingFilter.of(0, None, 1, None, None, 1, 1), AclBindingFilter(resource_name="nothing")])
    assert set(results[0]) == {LITERAL_ORDERS, WILDCARD_TOPIC, PREFIXED_ORD}
    assert set(results[1]) == {LITERAL_ORDERS, PREFIXED_ORD, GROUP_BILLING}
    assert isinstance(results[2], InvalidRequest) and results[3] == ()
    assert len(records) == 4 and {r["type"] for r in records} == {"remove_acl"}
    apply(metadata, records)
    assert metadata.acl_bindings == set() and metadata.acl_version == 8


def test_metadata__acl_changes_bounded_per_request():
    metadata = ClusterMetadata()
    many = [acl(f"t{i}") for i in range(MAX_ACL_CHANGES_PER_REQUEST + 2)]
    records, results = metadata.handle_create_acls(many)
    assert len(records) == MAX_ACL_CHANGES_PER_REQUEST
    assert results[:-2] == [None] * MAX_ACL_CHANGES_PER_REQUEST
    assert all(isinstance(r, UnknownServerError) for r in results[-2:])
    apply(metadata, records)
    apply(metadata, metadata.handle_create_acls([acl("extra-1"), acl("extra-2")])[0])
    records, results = metadata.handle_delete_acls([AclBindingFilter()])
    assert records == [] and isinstance(results[0], UnknownServerError)


def test_metadata__replay_is_the_state__a_replayed_log_has_the_same_acls():
    metadata = ClusterMetadata()
    log = apply(metadata, metadata.handle_create_acls(EVERY)[0])
    log += apply(metadata, metadata.handle_delete_acls([AclBindingFilter(resource_type=Type.GROUP)])[0])
    replayed = ClusterMetadata()
    apply(replayed, log)
    assert replayed.acls() == metadata.acls() and replayed.acl_version == 5
    with pytest.raises(ValueError, match="removes an ACL that is not there"):
        replayed.replay({"type": "remove_acl", **GROUP_BILLING.to_record()})


def test_image__carries_the_acls_and_decides_with_the_clusters_policy():
    metadata = ClusterMetadata()
    apply(metadata, metadata.handle_start())
    image = build_image(metadata, version=3)
    assert len(image.acls) == 0
    assert image.authorize(ANONYMOUS, HOST, Op.DELETE, ORDERS)   # open cluster, no binding: open to all
    apply(metadata, metadata.handle_create_acls([LITERAL_ORDERS])[0])
    image = build_image(metadata, version=4)
    assert image.acls.version == 1 and image.acls is metadata.acls()   # one index per change, shared
    assert image.authorize(ALICE, HOST, Op.READ, ORDERS) and not image.authorize(BOB, HOST, Op.READ, ORDERS)
    assert image.authorize(BOB, HOST, Op.READ, Resource(Type.TOPIC, "payments"))
    assert image.authorize("User:__rafka", HOST, Op.DELETE, ORDERS)   # rafka's own user: a super user
    apply(metadata, metadata.handle_require_sasl())
    image = build_image(metadata, version=5)
    assert not image.authorize(BOB, HOST, Op.READ, Resource(Type.TOPIC, "payments"))   # SASL: closed by default
    assert image.authorize(ALICE, HOST, Op.READ, ORDERS)
    assert image.authorize_by_resource_type(ALICE, HOST, Op.READ, Type.TOPIC)
    assert not image.authorize_by_resource_type(BOB, HOST, Op.WRITE, Type.TOPIC)
