"""SASL/SCRAM on a Kafka listener: what a connection may do before it has
authenticated, and the exchange that authenticates it (Kafka's
SaslServerAuthenticator, in front of the request handlers).

What Kafka does, and what a connection of a listener with SASL does the same way:
  * before authentication only ApiVersions, SaslHandshake (v1) and SaslAuthenticate
    are served; any other request closes the connection unanswered ("Unexpected
    Kafka request of type ... during SASL handshake");
  * SaslHandshake names the mechanism: one not enabled is answered
    UNSUPPORTED_SASL_MECHANISM with the enabled ones, and the connection closed;
  * SaslAuthenticate carries the SCRAM messages (core.scram); a refusal (unknown
    user, wrong password, malformed message) is answered
    SASL_AUTHENTICATION_FAILED with Kafka's message, and the connection closed;
  * once authenticated the connection serves every API, and SaslHandshake or
    SaslAuthenticate again is ILLEGAL_SASL_STATE (no re-authentication, KIP-368).
Nothing a connection sends before it has authenticated reaches a handler that
reads or writes data.

rafka's nodes run one listener whose SASL is required or optional by the
cluster's image (`sasl_required`: `rafka up --sasl`, or Ray's token auth). Where
it is optional, a connection that asks for anything but SaslHandshake (after
ApiVersions) is served without a login, as a PLAINTEXT listener serves it; one
that starts a SaslHandshake must finish the exchange like anywhere else. So
rafka's own clients log in with the cluster credential on every cluster, and
Kafka clients without SASL work on an open one. Kafka has no such mode (a
listener is PLAINTEXT or SASL_PLAINTEXT); it keeps one port for both.

Invariants: a SaslGate belongs to one connection and is touched from its loop
only; `authenticated` never goes back to False; whether SASL is required is read
once per connection, after the listener has settled (a node's first image, or a
bounded wait for it: without one a login is required); the user's credential is
looked up when the exchange starts, so a user deleted before a login cannot log in.

Callers: protocol.server (one gate per connection of a listener with SASL),
node_table (the routes that answer after authentication).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from rafka.core.errors import SaslAuthenticationFailed
from rafka.core.scram import MECHANISMS, ScramCredential, ScramServer
from rafka.protocol.dispatch import ANONYMOUS_SESSION, Dispatcher, Route, Session, encode_response
from rafka.protocol.entities import load_response_schema, make
from rafka.protocol.errors import ProtocolError
from rafka.protocol.framing import peek_api_key_and_version

API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 18, 17, 36
HANDSHAKE_VERSIONS = (1, 1)        # v0 sends raw tokens after it, which rafka does not serve
AUTHENTICATE_VERSIONS = (0, 2)


_NO_SESSION_LIFETIME = datetime.timedelta(0)   # no re-authentication asked for (KIP-368)


class UnexpectedRequestDuringSasl(ProtocolError):
    """A request other than ApiVersions or SASL's own before authentication."""


@dataclasses.dataclass(frozen=True)
class SaslListener:
    """A listener's SASL: its mechanisms and where a user's credentials are."""
    credential_for: Callable[[str, str], ScramCredential | None]     # (user, mechanism) -> credential
    mechanisms: tuple[str, ...] = tuple(MECHANISMS)
    required: Callable[[], bool] = lambda: True    # False: a login is optional (see above)
    # Waits until `credential_for` and `required` can be answered (a node's first
    # cluster image: a restarted actor serves before the controller pushed it).
    settled: Callable[[], Awaitable[None]] | None = None

    def __post_init__(self) -> None:
        unknown = set(self.mechanisms) - set(MECHANISMS)
        if unknown or not self.mechanisms:
            raise ValueError(f"SASL mechanisms must be some of {sorted(MECHANISMS)}, not {self.mechanisms}")


class SaslGate:
    def __init__(self, listener: SaslListener, dispatcher: Dispatcher) -> None:
        self.listener = listener
        self.dispatcher = dispatcher
        self.required: bool | None = None   # read once, when a request first needs it
        self.authenticated = False
        self.user: str | None = None   # None once authenticated: served without a login
        self.close_after_answer = False     # the answer is the connection's last
        self._scram: ScramServer | None = None

    async def waives(self, frame) -> bool:
        """True when SASL is optional here and `frame` is the connection's first
        request, past ApiVersions, of a client that does not log in: it, and every
        request after it, is served as on a PLAINTEXT listener."""
        if self._scram is not None:
            return False
        api_key, _ = peek_api_key_and_version(frame)
        if api_key in (API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
            return False    # answered by the gate either way
        if await self._required():
            return False    # the gate refuses it
        self.authenticated = True
        return True

    async def _required(self) -> bool:
        if self.required is None:
            if self.listener.settled is not None:
                await self.listener.settled()
            self.required = self.listener.required()
        return self.required

    async def answer(self, frame, connection_id: str, session: Session = ANONYMOUS_SESSION) -> bytes | None:
        """The answer to a request before authentication (or ProtocolError: close).
        Once it has authenticated, `user` names who (the server makes the
        connection's principal of it, core.acl.user_principal)."""
        api_key, _ = peek_api_key_and_version(frame)
        if api_key == API_VERSIONS_KEY:
            return await self.dispatcher.dispatch(frame, connection_id=connection_id, session=session)
        if api_key not in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
            raise UnexpectedRequestDuringSasl(f"Unexpected Kafka request of type {api_key} during SASL handshake")
        parsed = self.dispatcher.parse(frame, connection_id=connection_id)
        context = parsed.context
        response_type = load_response_schema(context.api_key, context.api_version)
        if api_key == SASL_HANDSHAKE_KEY:
            if self._scram is not None:
                raise UnexpectedRequestDuringSasl("a second SaslHandshake during SASL authentication")
            mechanism = parsed.body.mechanism
            await self._required()   # the credentials are there too
            if mechanism not in self.listener.mechanisms:
                self.close_after_answer = True
                response = make(response_type, error_code=ErrorCode.unsupported_sasl_mechanism,
                                mechanisms=self.listener.mechanisms)
            else:
                self._scram = ScramServer(mechanism, lambda user: self.listener.credential_for(user, mechanism))
                response = make(response_type, error_code=ErrorCode.none, mechanisms=self.listener.mechanisms)
            return encode_response(context.correlation_id, response)
        if self._scram is None:
            raise UnexpectedRequestDuringSasl("SaslAuthenticate before SaslHandshake")
        try:
            auth_bytes = self._scram.respond(bytes(parsed.body.auth_bytes))
        except SaslAuthenticationFailed as error:
            self.close_after_answer = True
            return encode_response(context.correlation_id, make(
                response_type, error_code=ErrorCode.sasl_authentication_failed, error_message=error.message,
                auth_bytes=b"", session_lifetime=_NO_SESSION_LIFETIME))
        if self._scram.authenticated:
            self.authenticated, self.user = True, self._scram.user
        # error_message: "" with no error, the field's default (SaslServerAuthenticator
        # sets none); a refusal carries the exception's message as it is.
        return encode_response(context.correlation_id, make(
            response_type, error_code=ErrorCode.none, error_message="", auth_bytes=auth_bytes,
            session_lifetime=_NO_SESSION_LIFETIME))


def routes() -> list[Route]:
    """SaslHandshake and SaslAuthenticate as the dispatch table serves them: reached
    only on a listener without SASL, or after authentication, where Kafka answers
    ILLEGAL_SASL_STATE."""
    async def handshake(request, context):
        return make(load_response_schema(SASL_HANDSHAKE_KEY, context.api_version),
                    error_code=ErrorCode.illegal_sasl_state, mechanisms=())

    async def authenticate(request, context):
        return make(load_response_schema(SASL_AUTHENTICATE_KEY, context.api_version),
                    error_code=ErrorCode.illegal_sasl_state,
                    error_message="this connection is not in a SASL exchange",
                    auth_bytes=b"", session_lifetime=_NO_SESSION_LIFETIME)
    return [Route(SASL_HANDSHAKE_KEY, *HANDSHAKE_VERSIONS, handshake),
            Route(SASL_AUTHENTICATE_KEY, *AUTHENTICATE_VERSIONS, authenticate)]
