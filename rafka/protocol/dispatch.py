"""Dispatch: one frame in, one response frame (or none) out.

A DispatchTable maps an API key to its Route (a version range and one async
handler); it is built once, frozen, and is the single source of what this node
advertises in ApiVersions (issue 14: advertise exactly what is implemented).
The Dispatcher decodes the header and body with kio's schema for that key and
version, calls the handler with the body and a RequestContext, and encodes the
response with its response header (v1 for flexible versions, v0 otherwise and
always v0 for ApiVersions, KIP-511; kio's `__header_schema__` carries this rule).

What Kafka answers, and what this module does the same way:
  * ApiVersions at a version the table does not support: not parsed, answered with
    an ApiVersions v0 response, UNSUPPORTED_VERSION, listing only ApiVersions' own
    range, so the client retries within it (Kafka's RequestContext.parseRequest and
    apiVersion(), KafkaApis.handleApiVersionsRequest, ApiVersionsRequest
    .getErrorResponse; ApiKeys.isVersionEnabled accepts any ApiVersions version).
  * Any other API key the table lacks, or a version outside its range: no answer,
    the connection is closed (Kafka's RequestHeader.parse: "Unknown API key";
    SocketServer.parseRequestHeader: "... which is not enabled"; the Processor's
    processChannelException closes the channel). Raised here as UnknownApiKey /
    UnsupportedApiVersion.
  * A truncated or garbage header or body: connection closed (RequestContext
    .parseRequest wraps any failure in InvalidRequestException). Raised as
    MalformedRequestHeader / MalformedRequestBody. Trailing bytes after the body
    are ignored, as Kafka's parser ignores them.

Request metrics (Kafka's RequestMetrics): every parsed request is counted and timed
with the injected clock, from the start of `dispatch` until its response is
encoded (parked time included, as Kafka's TotalTimeMs), per request name and
version in core.metrics.RequestMetrics; Fetch is FetchConsumer or FetchFollower,
as Kafka names them. A request costs two clock reads, a dict lookup and one
Histogram.observe; the exporter reads the histograms every few seconds.

Who asks: each request's context carries its connection's Session, the
principal (`User:<name>` after a SASL login, `User:ANONYMOUS` without one) and
the client's host address, which the server gives with the frame, and the
node's image at its arrival; handlers authorize with them before they act
(protocol.authorization).

Invariants: for any bytes, `parse` and `dispatch` return or raise a ProtocolError
(handlers' own exceptions aside); the table is never mutated; work is bounded by
the frame's size (bounds.check_entity runs before kio allocates anything).

Callers: the actor's asyncio server, one `dispatch` per frame, in order per
connection (Kafka's per-connection ordering is the server's job).
"""

from __future__ import annotations

import dataclasses
import struct
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from rafka.protocol.entities import load_request_schema, load_response_schema, schema_known
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.static.primitive import i16

from rafka.core.acl import ANONYMOUS
from rafka.core.cluster_image import ClusterImage
from rafka.core.metrics import Histogram, RequestMetrics
from rafka.protocol.bounds import KIO_DECODE_ERRORS, DeclaredSizeTooLarge, check_entity
from rafka.protocol.errors import (MalformedRequestBody, UnknownApiKey,
                                   UnsupportedApiVersion)
from rafka.protocol.framing import (RequestHeader, decode_request_header, decode_response_header,
                                    encode_response_header, pack_request_header, peek_api_key_and_version)
from rafka.protocol.hot_writers import WrittenBody, body_pieces

API_VERSIONS_KEY = 18
PRODUCE_KEY = 0
FETCH_KEY = 1
_FETCH_FOLLOWER = -1   # Kafka's RequestMetrics tell a replica's Fetch from a consumer's
# ApiVersionsRequest.json: "flexibleVersions": "3+" (used only for versions kio
# does not know, to read the header of a request we will not parse).
API_VERSIONS_FIRST_FLEXIBLE_VERSION = 3
_SIZE = struct.Struct(">i")


@dataclasses.dataclass(frozen=True, slots=True)
class ApiVersionRange:
    api_key: int
    min_version: int
    max_version: int


@dataclasses.dataclass(frozen=True, slots=True)
class Session:
    """Who is on a connection (Kafka's RequestContext principal and clientAddress)."""
    principal: str = ANONYMOUS     # core.acl.user_principal of the SASL login
    client_host: str = ""          # the peer's address as ACL hosts name it ("10.0.0.7"); "" unknown


ANONYMOUS_SESSION = Session()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RequestContext:
    """What a handler may know about a request besides its body."""
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str                 # Kafka reads a null client id as "" (RequestHeader.parse)
    connection_id: str
    supported_api_versions: tuple[ApiVersionRange, ...]
    principal: str = ANONYMOUS
    client_host: str = ""
    # the node's image when the request arrived: every authorization reads it
    # (protocol.authorization); None only under a table built without one (tests)
    image: ClusterImage | None = None


Handler = Callable[[Any, RequestContext], Awaitable[Any | None]]


@dataclasses.dataclass(frozen=True, slots=True)
class Route:
    """API key, inclusive version range, handler. The handler gets the kio request
    body of the request's version and returns the kio response body of the same
    version (or a hot_writers.WrittenBody standing for one), or None when Kafka
    sends no response (Produce with acks=0)."""
    api_key: int
    min_version: int
    max_version: int
    handler: Handler

    def __post_init__(self) -> None:
        if not 0 <= self.min_version <= self.max_version:
            raise ValueError(f"bad version range {self.min_version}..{self.max_version} "
                             f"for API key {self.api_key}")
        for version in self.versions:   # fail at startup, not on the first request
            if not schema_known(self.api_key, version):
                raise ValueError(f"no schema for API key {self.api_key} version {version}")

    @property
    def versions(self) -> range:
        return range(self.min_version, self.max_version + 1)


class DispatchTable:
    """Frozen at construction: the routes by API key, and the ranges advertised;
    `image`: the node's newest cluster image, read once per request into its
    context (every node's table has one: protocol.node_table); `envelope_target`:
    given when the table routes Envelope (handlers.envelope), told the
    dispatcher made from the table, through which an envelope's request runs."""

    def __init__(self, routes: Iterable[Route], *, image: Callable[[], ClusterImage] | None = None,
                 envelope_target=None) -> None:
        self.image = image
        self.envelope_target = envelope_target
        routes_by_api_key: dict[int, Route] = {}
        for route in routes:
            if route.api_key in routes_by_api_key:
                raise ValueError(f"two routes for API key {route.api_key}")
            routes_by_api_key[route.api_key] = route
        self.routes_by_api_key: Mapping[int, Route] = MappingProxyType(routes_by_api_key)
        self.supported_api_versions: tuple[ApiVersionRange, ...] = tuple(
            ApiVersionRange(r.api_key, r.min_version, r.max_version)
            for r in sorted(routes_by_api_key.values(), key=lambda r: r.api_key))


@dataclasses.dataclass(frozen=True, slots=True)
class ParsedRequest:
    context: RequestContext
    route: Route
    body: Any | None               # None: an ApiVersions request at an unsupported version
    header_bytes: int

    @property
    def is_unsupported_api_versions(self) -> bool:
        return self.body is None


class Dispatcher:
    def __init__(self, table: DispatchTable, *, request_metrics: RequestMetrics | None = None,
                 clock_s: Callable[[], float] = time.perf_counter) -> None:
        """`request_metrics`: where requests are counted and timed (the node's
        exporter reads it); `clock_s`: seconds, monotonic."""
        self.table = table
        if table.envelope_target is not None:
            table.envelope_target.dispatcher = self
        self.request_metrics = request_metrics if request_metrics is not None else RequestMetrics()
        self._clock_s = clock_s
        self._latency_by_key: dict[tuple[int, int], Histogram] = {}   # (API key, version)
        # connection id -> the event loop time until which the server starts none of
        # its requests (a throttled client's, protocol.throttling); read by the server
        self.channel_mutes: dict[str, float] = {}

    def parse(self, frame: bytes, *, connection_id: str = "", session: Session = ANONYMOUS_SESSION) -> ParsedRequest:
        """Header and body of one request frame (without its size prefix)."""
        api_key, api_version = peek_api_key_and_version(frame)
        route = self.table.routes_by_api_key.get(api_key)
        if route is None:
            raise UnknownApiKey(f"Unknown API key {api_key}")
        supported = route.min_version <= api_version <= route.max_version
        if not supported and api_key != API_VERSIONS_KEY:
            raise UnsupportedApiVersion(f"Received request api key {api_key} with version "
                                        f"{api_version} which is not enabled")
        request_type = load_request_schema(api_key, api_version) if supported else None
        header_version = (request_type.__header_schema__.__version__ if request_type else
                          2 if api_version >= API_VERSIONS_FIRST_FLEXIBLE_VERSION else 1)
        header, body_offset = decode_request_header(frame, header_version=header_version)
        context = self._context(header, connection_id, session)
        if request_type is None:
            return ParsedRequest(context, route, None, body_offset)
        try:
            check_entity(request_type, frame, body_offset, len(frame))
            body, _ = entity_reader(request_type)(frame, body_offset)
        except (DeclaredSizeTooLarge, *KIO_DECODE_ERRORS) as error:
            raise MalformedRequestBody(
                f"Error getting request for apiKey: {api_key}, apiVersion: {api_version}, "
                f"connectionId: {connection_id}: {type(error).__name__}: {error}") from None
        return ParsedRequest(context, route, body, body_offset)

    async def dispatch(self, frame: bytes, *, connection_id: str = "",
                       session: Session = ANONYMOUS_SESSION) -> bytes | None:
        """The size-prefixed response frame, or None when no response is due."""
        started_s = self._clock_s()
        return await self.answer_counted(self.parse(frame, connection_id=connection_id, session=session), started_s)

    async def answer_counted(self, parsed: ParsedRequest, started_s: float | None = None) -> bytes | None:
        """`answer`, counted and timed in this node's request metrics from
        `started_s` (now if not given): a request read here, or one an envelope
        carried (handlers.envelope)."""
        started_s = self._clock_s() if started_s is None else started_s
        try:
            return await self.answer(parsed)
        finally:
            self._observe(parsed, started_s)

    async def answer(self, parsed: ParsedRequest) -> bytes | None:
        """The size-prefixed answer of this node's handler to a parsed request (None:
        no answer is due)."""
        if parsed.is_unsupported_api_versions:
            response = self.unsupported_api_versions_response(parsed.route)
        else:
            response = await parsed.route.handler(parsed.body, parsed.context)
            if response is None:
                return None
            expected = load_response_schema(parsed.context.api_key, parsed.context.api_version)
            answered = response.entity_type if type(response) is WrittenBody else type(response)
            if answered is not expected:   # a handler bug, not the client's
                raise TypeError(f"handler for API key {parsed.context.api_key} v"
                                f"{parsed.context.api_version} returned {answered.__qualname__}"
                                f" from {answered.__module__}, not {expected.__module__}")
        return encode_response(parsed.context.correlation_id, response)

    def _observe(self, parsed: ParsedRequest, started_s: float) -> None:
        """Count and time a request from `started_s` to now."""
        context = parsed.context
        key = (_FETCH_FOLLOWER if context.api_key == FETCH_KEY and parsed.body is not None
               and parsed.body.replica_id >= 0 else context.api_key, context.api_version)
        latency = self._latency_by_key.get(key) or self._latency_histogram(key)
        latency.observe((self._clock_s() - started_s) * 1000.0)

    async def connection_closed(self, connection_id: str) -> None:
        """A connection closed (the server calls this); a dispatcher that holds
        state per connection lets it go (protocol.edge)."""

    def _latency_histogram(self, key: tuple[int, int]) -> Histogram:
        api_key, version = key
        if api_key == _FETCH_FOLLOWER:
            name = "FetchFollower"
        elif api_key == FETCH_KEY:
            name = "FetchConsumer"
        else:   # Kafka's ApiKeys names: the kio request type's name without "Request"
            supported = self.table.routes_by_api_key[api_key]
            name = load_request_schema(api_key, min(max(version, supported.min_version),
                                                    supported.max_version)).__name__.removesuffix("Request")
        histogram = self._latency_by_key[key] = self.request_metrics.histogram(name, version)
        return histogram

    @staticmethod
    def unsupported_api_versions_response(route: Route) -> ApiVersionsResponseV0:
        return ApiVersionsResponseV0(
            error_code=ErrorCode.unsupported_version,
            api_keys=(ApiVersionV0(api_key=i16(route.api_key), min_version=i16(route.min_version),
                                   max_version=i16(route.max_version)),))

    def _context(self, header: RequestHeader, connection_id: str, session: Session) -> RequestContext:
        return RequestContext(api_key=header.request_api_key,
                              api_version=header.request_api_version,
                              correlation_id=header.correlation_id,
                              client_id=header.client_id or "",
                              connection_id=connection_id,
                              supported_api_versions=self.table.supported_api_versions,
                              principal=session.principal, client_host=session.client_host,
                              image=self.table.image() if self.table.image is not None else None)


def request_frame(context: RequestContext, body: Any) -> bytes:
    """The request `body` under `context`'s header, as a frame without its size
    prefix: what the edge relays to an actor for a request it split or changed."""
    header = pack_request_header(header_version=body.__header_schema__.__version__, api_key=context.api_key,
                                 api_version=context.api_version, correlation_id=context.correlation_id,
                                 client_id=context.client_id)
    return b"".join((header, *body_pieces(body)))


def read_answer(context: RequestContext, answer: bytes) -> Any:
    """The response entity of an answer frame (without its size prefix) to a
    request under `context`."""
    response_type = load_response_schema(context.api_key, context.api_version)
    _, offset = decode_response_header(answer, header_version=response_type.__header_schema__.__version__)
    return entity_reader(response_type)(answer, offset)[0]


def encode_response(correlation_id: int, response: Any) -> bytes:
    """Size prefix, the response header kio assigns to this response type (v0 or v1;
    v0 for every ApiVersions version), the body."""
    header = encode_response_header(header_version=response.__header_schema__.__version__,
                                    correlation_id=correlation_id)
    pieces = body_pieces(response)
    return b"".join((_SIZE.pack(len(header) + sum(map(len, pieces))), header, *pieces))
