"""Typed errors of the wire layer. Every one means: close this connection, keep
serving the others (Kafka's SocketServer.Processor closes the channel on any
exception from a receive, processChannelException, and sends nothing back).

Callers: framing.FrameDecoder and dispatch.Dispatcher raise them; the actor's
asyncio server catches ProtocolError, closes the connection and logs. Nothing else
escapes for any input bytes (tests/core/test_protocol_fuzz.py holds this).

They are INVALID_REQUEST (Kafka's InvalidRequestException) in Kafka's terms; a
frame of a bad size is Kafka's InvalidReceiveException, which has no code of its
own and is reported under the same name here.
"""

from __future__ import annotations

from rafka.core.errors import InvalidRequest


class ProtocolError(InvalidRequest):
    """The bytes on this connection cannot be served; the server closes it."""


class InvalidFrameSize(ProtocolError):
    """A size prefix below 0 or above socket.request.max.bytes (Kafka's
    NetworkReceive.readFrom: InvalidReceiveException)."""


class MalformedRequestHeader(ProtocolError):
    """The request header is truncated or garbage (Kafka's RequestHeader.parse)."""


class UnknownApiKey(ProtocolError):
    """No handler for this API key (Kafka: ApiKeys.forId fails in RequestHeader.parse,
    or SocketServer.parseRequestHeader finds the API not enabled)."""


class UnsupportedApiVersion(ProtocolError):
    """A version outside the handler's range, for any API but ApiVersions (Kafka's
    SocketServer.parseRequestHeader: "... which is not enabled")."""


class MalformedRequestBody(ProtocolError):
    """The body does not parse under the schema of its key and version (Kafka's
    RequestContext.parseRequest wraps any parse failure in InvalidRequestException)."""


class ClosedAfterFailedAcksZeroProduce(ProtocolError):
    """A partition of an acks=0 produce failed: Kafka closes the connection, the
    only way to tell a producer that waits for no answer (KafkaApis
    .handleProduceRequest)."""
