"""Envelope v0 (KIP-590): a client's administration request as a broker relays it
to the controller's node, with the client's principal and address, so that the
controller runs it as that client (Kafka's ForwardingManager and ControllerApis).

  * Who may send one: a principal allowed CLUSTER_ACTION on the cluster (the
    brokers' own login, a super user, on every rafka cluster); anyone else gets
    CLUSTER_AUTHORIZATION_FAILED and nothing inside is run.
  * The inner request runs through this node's own dispatcher under the
    principal and address the envelope carries: its handlers authorize it and
    charge its quotas (controller_mutation_rate, KIP-599) as that client's;
    the answer goes back whole in response_data (correlation id first, no size
    prefix), the client's correlation id in it. The inner request is counted in
    the node's request metrics as its own API (the envelope too).
  * The principal is Kafka's DefaultPrincipalData behind its version (a short),
    as DefaultKafkaPrincipalBuilder serializes it; the address is the client's
    IP in 4 or 16 bytes (empty when unknown).
  * A principal or address that cannot be read, an inner request that cannot
    be parsed, or one of an API that is not forwarded (FORWARDED_APIS, the
    administration brokers relay: Kafka's forwardable APIs): INVALID_REQUEST,
    nothing run.
  * Only the controller's node routes Envelope (node_table's `envelopes`): a
    broker's clients are neither offered it nor answered.
Callers: protocol.node_table (the controller's node: `route`), protocol.edge
(`wrap` and `unwrap`, for every request it relays to the controller).
"""

from __future__ import annotations

import io
import ipaddress
import struct

from kio.schema.default_principal_data.v0.data import DefaultPrincipalData
from kio.schema.envelope.v0 import request as envelope_request
from kio.schema.envelope.v0 import response as envelope_response
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from rafka.core.acl import AclOperation, ResourceType
from rafka.protocol.authorization import check_of, gate
from rafka.protocol.dispatch import ParsedRequest, RequestContext, Route, Session, read_answer, request_frame

ENVELOPE_KEY = 58
# Create/DeleteTopics, CreatePartitions, (Incremental)AlterConfigs, Create/DeleteAcls,
# ElectLeaders, Alter/ListPartitionReassignments, AlterClientQuotas, AlterUserScramCredentials,
# DescribeQuorum (Kafka's brokers forward it too: KafkaApis.forwardToControllerOrFail), UpdateFeatures
FORWARDED_APIS = frozenset({19, 20, 37, 33, 44, 30, 31, 43, 45, 46, 49, 51, 55, 57})
# The controller's calls the handlers of FORWARDED_APIS make (node_table's
# topic_admin_host): the controller's node makes each, and every stand-in for the
# controller (a node that is not it, a broker that cannot reach it) answers each.
CONTROLLER_ADMIN_CALLS = ("create_topic", "delete_topic", "add_partitions", "alter_topic_config", "create_acls",
                          "delete_acls", "alter_client_quotas", "alter_user_scram_credentials", "elect_leaders",
                          "alter_partition_reassignments", "list_partition_reassignments", "update_features")


def answering_every_admin_call(method: str):
    """A class decorator: each of CONTROLLER_ADMIN_CALLS is the class's `method`."""
    def decorate(cls):
        for name in CONTROLLER_ADMIN_CALLS:
            setattr(cls, name, getattr(cls, method))
        return cls
    return decorate
_CLUSTER_ACTION = check_of(ENVELOPE_KEY, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
_VERSION = struct.Struct(">h")


class EnvelopeTarget:
    """The dispatcher an envelope's inner request runs through (set once the
    node's dispatcher is made from its table)."""
    dispatcher = None


def serialize_principal(principal: str) -> bytes:
    kind, _, name = principal.partition(":")
    buffer = io.BytesIO()
    buffer.write(_VERSION.pack(0))
    entity_writer(DefaultPrincipalData)(buffer, DefaultPrincipalData(type_=kind, name=name,
                                                                     token_authenticated=False))
    return buffer.getvalue()


def deserialize_principal(data: bytes) -> str:
    (version,) = _VERSION.unpack_from(data, 0)
    if version != 0:
        raise ValueError(f"DefaultPrincipalData version {version}")
    principal, _ = entity_reader(DefaultPrincipalData)(memoryview(data), _VERSION.size)
    return f"{principal.type_}:{principal.name}"


def _address_bytes(host: str) -> bytes:
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b""


def wrap(context: RequestContext, frame) -> bytes:
    """The Envelope request frame (no size prefix) carrying the client's request
    `frame` (no size prefix) with `context`'s principal and address."""
    body = envelope_request.EnvelopeRequest(request_data=bytes(frame),
                                            request_principal=serialize_principal(context.principal),
                                            client_host_address=_address_bytes(context.client_host))
    envelope_context = RequestContext(api_key=ENVELOPE_KEY, api_version=0, correlation_id=context.correlation_id,
                                      client_id=context.client_id, connection_id=context.connection_id,
                                      supported_api_versions=context.supported_api_versions)
    return request_frame(envelope_context, body)


def unwrap(answer) -> bytes | None:
    """The inner answer (no size prefix) of an Envelope answer frame (no size
    prefix), or None when the envelope itself failed."""
    envelope_context = RequestContext(api_key=ENVELOPE_KEY, api_version=0, correlation_id=0, client_id="",
                                      connection_id="", supported_api_versions=())
    response = read_answer(envelope_context, bytes(answer))
    if response.error_code != ErrorCode.none or response.response_data is None:
        return None
    return bytes(response.response_data)


def route(target: EnvelopeTarget) -> Route:
    async def envelope(request, context: RequestContext):
        def failed(code: ErrorCode):
            return envelope_response.EnvelopeResponse(response_data=None, error_code=code)
        if not gate(context).allows(_CLUSTER_ACTION):
            return failed(ErrorCode.cluster_authorization_failed)
        try:
            principal = deserialize_principal(bytes(request.request_principal or b""))
            address = bytes(request.client_host_address or b"")
            host = str(ipaddress.ip_address(address)) if address else ""
            parsed: ParsedRequest = target.dispatcher.parse(bytes(request.request_data), session=Session(
                principal=principal, client_host=host), connection_id=context.connection_id)
        except Exception:   # kio's decode errors, a bad address or principal, an unknown API
            return failed(ErrorCode.invalid_request)
        if parsed.context.api_key not in FORWARDED_APIS:   # nor an envelope in an envelope (Kafka's)
            return failed(ErrorCode.invalid_request)
        answer = await target.dispatcher.answer_counted(parsed)
        return envelope_response.EnvelopeResponse(response_data=None if answer is None else answer[4:],
                                                  error_code=ErrorCode.none)
    return Route(ENVELOPE_KEY, 0, 0, envelope)
