"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them: the
credentials a broker keeps for a user, and both sides of one authentication.

A broker never keeps a password: a user's credential is (salt, iterations,
StoredKey, ServerKey) per mechanism, as Kafka's ScramFormatter derives it
(SaltedPassword = PBKDF2-HMAC(password, salt, iterations); ClientKey =
HMAC(SaltedPassword, "Client Key"); StoredKey = H(ClientKey); ServerKey =
HMAC(SaltedPassword, "Server Key")). Iterations are at least 4096 (Kafka's
minimum for both mechanisms).

The exchange, three messages, no channel binding (gs2 header "n,,"):
  client-first  n,,n=<user>,r=<client nonce>
  server-first  r=<client nonce + server nonce>,s=<salt, base64>,i=<iterations>
  client-final  c=biws,r=<nonce>,p=<ClientProof, base64>
  server-final  v=<ServerSignature, base64>
The server checks the proof against StoredKey; the client checks the server's
signature against ServerKey, so each proves it knows the password.

Invariants: a ScramServer answers at most the two messages of one exchange and
is authenticated only after a proof that matches; any malformed message, unknown
user or wrong proof raises SaslAuthenticationFailed, with the same message for
an unknown user and a wrong password (nothing tells an attacker which users
exist). Secrets are compared in constant time.

Pure: no I/O, randomness and the credential lookup injected. Callers:
protocol.sasl (a node's listener), client connections (their own login),
the controller's user records (rafka users) and its cluster credential.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import hmac
import secrets
from collections.abc import Callable

from rafka.core.errors import SaslAuthenticationFailed

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# the wire's int8 for each (Kafka's ScramMechanism.type; 0 is UNKNOWN)
MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384   # Kafka's controller refuses more (ScramControlManager.MAX_ITERATIONS)
DEFAULT_ITERATIONS = 4096
_GS2_HEADER = "n,,"
# rafka's own user: the cluster credential every actor and driver of the Ray
# cluster logs in with (the controller keeps its password; actors/controller.py).
# Names with the prefix are the cluster's own: `rafka users` neither adds nor lists them.
RESERVED_USER_PREFIX = "__"
CLUSTER_USER = "__rafka"
CLUSTER_MECHANISM = "SCRAM-SHA-512"
_FAILED = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"


@dataclasses.dataclass(frozen=True)
class ScramCredential:
    """What a broker keeps of one user's password, for one mechanism."""
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_dict(self) -> dict:
        return {"mechanism": self.mechanism, "salt": _b64(self.salt), "iterations": self.iterations,
                "stored_key": _b64(self.stored_key), "server_key": _b64(self.server_key)}

    @classmethod
    def from_dict(cls, values: dict) -> ScramCredential:
        return cls(values["mechanism"], base64.b64decode(values["salt"]), int(values["iterations"]),
                   base64.b64decode(values["stored_key"]), base64.b64decode(values["server_key"]))


def mechanism_name(number: int) -> str:
    """The mechanism a wire type names (an unknown one: a name no credential has)."""
    for name, known in MECHANISM_TYPES.items():
        if known == number:
            return name
    return f"UNKNOWN({int(number)})"


def check_mechanism(mechanism: str) -> str:
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}: one of {sorted(MECHANISMS)}")
    return MECHANISMS[mechanism]


@functools.lru_cache(maxsize=64)   # PBKDF2 is the login's cost (~5 ms); a client reconnecting pays it once
def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(check_mechanism(mechanism), password.encode(), salt, iterations)


def make_credential(mechanism: str, password: str, *, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """A new credential for `password` (a fresh random salt unless one is given)."""
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"iterations {iterations} is below the minimum {MIN_ITERATIONS} for {mechanism}")
    salt = new_salt() if salt is None else salt
    return credential_from_salted(mechanism, salt, iterations, salted_password(mechanism, password, salt, iterations))


def new_salt() -> bytes:
    return secrets.token_bytes(32)


def credential_from_salted(mechanism: str, salt: bytes, iterations: int, salted: bytes) -> ScramCredential:
    """What a broker keeps of a SaltedPassword: AlterUserScramCredentials carries the
    salted password, never the password (Kafka's ScramControlManager.finishUpsertion)."""
    digest = check_mechanism(mechanism)
    client_key = _hmac(digest, salted, b"Client Key")
    return ScramCredential(mechanism, salt, iterations, hashlib.new(digest, client_key).digest(),
                           _hmac(digest, salted, b"Server Key"))


def matches(credential: ScramCredential, password: str) -> bool:
    """Whether `credential` was made from `password`."""
    again = make_credential(credential.mechanism, password, iterations=credential.iterations, salt=credential.salt)
    return hmac.compare_digest(again.stored_key, credential.stored_key)


class ScramServer:
    """The broker's side of one exchange. `credential_for(user)` gives the user's
    credential for this mechanism, or None."""

    def __init__(self, mechanism: str, credential_for: Callable[[str], ScramCredential | None], *,
                 nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24)) -> None:
        self.mechanism = mechanism
        self._digest = check_mechanism(mechanism)
        self._credential_for = credential_for
        self._nonce = nonce
        self._state = "first"
        self._credential: ScramCredential | None = None
        self._client_first_bare = self._server_first = self._combined_nonce = ""
        self.user: str | None = None      # set once authenticated

    @property
    def authenticated(self) -> bool:
        return self._state == "done"

    def respond(self, message: bytes) -> bytes:
        """The answer to the client's next message; SaslAuthenticationFailed ends the exchange."""
        try:
            if self._state == "first":
                return self._first(message.decode())
            if self._state == "final":
                return self._final(message.decode())
        except SaslAuthenticationFailed:
            self._state = "failed"
            raise
        except (UnicodeDecodeError, ValueError, KeyError, IndexError):
            self._state = "failed"
            raise SaslAuthenticationFailed(_FAILED.format(self.mechanism)) from None
        raise SaslAuthenticationFailed(f"no more SCRAM messages are expected (state {self._state})")

    def _first(self, message: str) -> bytes:
        if not message.startswith(_GS2_HEADER):   # channel binding and authzid are not served
            raise SaslAuthenticationFailed(f"{self.mechanism}: the client-first message must start with "
                                           f"{_GS2_HEADER!r}")
        bare = message[len(_GS2_HEADER):]
        fields = _fields(bare)
        user, client_nonce = _unescape(fields["n"]), fields["r"]
        credential = self._credential_for(user)
        if credential is None or credential.mechanism != self.mechanism or not client_nonce:
            raise SaslAuthenticationFailed(_FAILED.format(self.mechanism))
        self._credential, self.user = credential, user
        self._client_first_bare = bare
        self._combined_nonce = client_nonce + self._nonce()
        self._server_first = f"r={self._combined_nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = "final"
        return self._server_first.encode()

    def _final(self, message: str) -> bytes:
        without_proof, _, proof_field = message.rpartition(",p=")
        fields = _fields(without_proof)
        if fields["c"] != _b64(_GS2_HEADER.encode()) or fields["r"] != self._combined_nonce:
            raise SaslAuthenticationFailed(_FAILED.format(self.mechanism))
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self._credential
        proof = base64.b64decode(proof_field, validate=True)
        client_signature = _hmac(self._digest, credential.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if len(proof) != len(client_signature) or not hmac.compare_digest(
                hashlib.new(self._digest, client_key).digest(), credential.stored_key):
            raise SaslAuthenticationFailed(_FAILED.format(self.mechanism))
        self._state = "done"
        return f"v={_b64(_hmac(self._digest, credential.server_key, auth_message))}".encode()


class ScramClient:
    """A client's side of one exchange (rafka's own connections, tests)."""

    def __init__(self, mechanism: str, user: str, password: str, *,
                 nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24)) -> None:
        self.mechanism = mechanism
        self._digest = check_mechanism(mechanism)
        self._password = password
        self._client_first_bare = f"n={_escape(user)},r={nonce()}"
        self._expected_server_signature = b""

    def first_message(self) -> bytes:
        return (_GS2_HEADER + self._client_first_bare).encode()

    def final_message(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        fields = _fields(text)
        combined_nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
        if not combined_nonce.startswith(_fields(self._client_first_bare)["r"]):
            raise SaslAuthenticationFailed("the server's nonce does not extend ours")
        if iterations < MIN_ITERATIONS:
            raise SaslAuthenticationFailed(f"the server asked for {iterations} iterations, "
                                           f"below the minimum {MIN_ITERATIONS}")
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        client_key = _hmac(self._digest, salted, b"Client Key")
        stored_key = hashlib.new(self._digest, client_key).digest()
        without_proof = f"c={_b64(_GS2_HEADER.encode())},r={combined_nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, _hmac(self._digest, stored_key, auth_message)))
        self._expected_server_signature = _hmac(self._digest, _hmac(self._digest, salted, b"Server Key"),
                                                auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()

    def check_server_final(self, server_final: bytes) -> None:
        fields = _fields(server_final.decode())
        if "e" in fields:
            raise SaslAuthenticationFailed(f"the server refused: {fields['e']}")
        if not hmac.compare_digest(base64.b64decode(fields["v"]), self._expected_server_signature):
            raise SaslAuthenticationFailed("the server's signature does not match: it does not know our password")


def _fields(message: str) -> dict[str, str]:
    """'a=1,b=2' -> {'a': '1', 'b': '2'}; a value may hold '=' (base64)."""
    out = {}
    for part in message.split(","):
        name, equals, value = part.partition("=")
        if not equals or len(name) != 1:
            raise ValueError(f"malformed SCRAM attribute {part!r}")
        out[name] = value
    return out


def _escape(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


def _unescape(user: str) -> str:
    return user.replace("=2C", ",").replace("=3D", "=")


def _hmac(digest: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, digest).digest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
