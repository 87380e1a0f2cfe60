"""Administration of users' SCRAM credentials as Kafka's tools do it
(kafka-configs.sh --entity-type users; AdminClient.alterUserScramCredentials and
describeUserScramCredentials): what an AlterUserScramCredentials changes and what
a DescribeUserScramCredentials answers, from the credentials the metadata holds.

Kafka's rules (ScramControlManager.alterCredentials, ScramImage.describe), kept here:
  * one alteration per user per request: a user named twice (two deletions, two
    upsertions, or one of each, whatever the mechanisms) is refused whole,
    DUPLICATE_RESOURCE, and none of its alterations is made;
  * an empty user name is UNACCEPTABLE_CREDENTIAL, an unknown mechanism
    UNSUPPORTED_SASL_MECHANISM, deleting a credential the user does not hold
    RESOURCE_NOT_FOUND, iterations outside [4096, 16384] UNACCEPTABLE_CREDENTIAL;
  * a user's result is its own: the others' alterations are made all the same,
    and every result names its user;
  * Describe of no users (null or empty) describes every user; a user named
    twice is DUPLICATE_RESOURCE, one without credentials RESOURCE_NOT_FOUND.
rafka bounds a request at MAX_ALTERATIONS_PER_REQUEST alterations (INVALID_REQUEST
for every user), as it bounds AlterClientQuotas; Kafka has no such bound.
rafka's own, beyond Kafka: user names beginning with "__" are the cluster's
(core.scram.CLUSTER_USER): an alteration of one is UNACCEPTABLE_CREDENTIAL, and
describing every user leaves them out (naming one describes it: mechanisms and
iterations only, never a secret).

Invariants: pure (no I/O); nothing here changes the credentials it is given: it
says what to change and the metadata commits it as records (core.metadata).
Callers: core.metadata (AlterUserScramCredentials), protocol.handlers.scram_credentials
(DescribeUserScramCredentials, from a node's image).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence

from rafka.core.errors import (DuplicateResource, InvalidRequest, KafkaError, ResourceNotFound,
                               UnacceptableCredential, UnsupportedSaslMechanism)
from rafka.core.scram import (MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, RESERVED_USER_PREFIX, ScramCredential,
                              credential_from_salted)

Held = Mapping[tuple[str, str], ScramCredential]   # by (user, mechanism)
# rafka's bound (Kafka has none): one request's records are one commit, and every image carries them
MAX_ALTERATIONS_PER_REQUEST = 10_000


@dataclasses.dataclass(frozen=True)
class Deletion:
    user: str
    mechanism: str   # a name of core.scram.MECHANISMS, or any other text for an unknown one


@dataclasses.dataclass(frozen=True)
class Upsertion:
    user: str
    mechanism: str
    iterations: int
    salt: bytes
    salted_password: bytes   # the client's PBKDF2 of the password: no password reaches a broker


@dataclasses.dataclass(frozen=True)
class Alteration:
    """What one request changes, and each named user's result (None: done), in the
    order the users are first named."""
    set_credentials: list[tuple[str, ScramCredential]]
    removed: list[tuple[str, str]]   # (user, mechanism)
    results: list[tuple[str, KafkaError | None]]


def alter(held: Held, deletions: Sequence[Deletion], upsertions: Sequence[Upsertion]) -> Alteration:
    """InvalidRequest for more than MAX_ALTERATIONS_PER_REQUEST alterations (the
    request as a whole: every user answers it)."""
    if len(deletions) + len(upsertions) > MAX_ALTERATIONS_PER_REQUEST:
        raise InvalidRequest(f"Cannot alter more than {MAX_ALTERATIONS_PER_REQUEST} SCRAM credentials in one request")
    named: dict[str, Deletion | Upsertion | KafkaError] = {}
    for alteration in [*deletions, *upsertions]:
        if isinstance(named.get(alteration.user), KafkaError):
            continue
        if alteration.user in named:
            named[alteration.user] = DuplicateResource("A user credential cannot be altered twice in the same request")
        else:
            named[alteration.user] = _refusal(held, alteration) or alteration
    out = Alteration([], [], [])
    for user, alteration in named.items():
        if isinstance(alteration, Deletion):
            out.removed.append((user, alteration.mechanism))
        elif isinstance(alteration, Upsertion):
            out.set_credentials.append((user, credential_from_salted(
                alteration.mechanism, alteration.salt, alteration.iterations, alteration.salted_password)))
        out.results.append((user, alteration if isinstance(alteration, KafkaError) else None))
    return out


def _refusal(held: Held, alteration: Deletion | Upsertion) -> KafkaError | None:
    if not alteration.user:
        return UnacceptableCredential("Username must not be empty")
    if alteration.user.startswith(RESERVED_USER_PREFIX):
        return UnacceptableCredential(f"user names beginning with {RESERVED_USER_PREFIX!r} are rafka's own")
    if isinstance(alteration, Upsertion):
        return upsertion_refusal(alteration.mechanism, alteration.iterations)
    if alteration.mechanism not in MECHANISMS:
        return UnsupportedSaslMechanism("Unknown SCRAM mechanism")
    if (alteration.user, alteration.mechanism) not in held:
        return ResourceNotFound("Attempt to delete a user credential that does not exist")
    return None


def upsertion_refusal(mechanism: str, iterations: int) -> KafkaError | None:
    """Why Kafka's controller refuses a credential of `mechanism` and `iterations`
    (None: it takes it); rafka's Admin asks before it sends anything."""
    if mechanism not in MECHANISMS:
        return UnsupportedSaslMechanism("Unknown SCRAM mechanism")
    if iterations < MIN_ITERATIONS:
        return UnacceptableCredential("Too few iterations")
    if iterations > MAX_ITERATIONS:
        return UnacceptableCredential("Too many iterations")
    return None


def describe(held: Held, users: Sequence[str] | None
             ) -> list[tuple[str, KafkaError | None, list[tuple[str, int]]]]:
    """Per user: (user, error or None, [(mechanism, iterations)] sorted by mechanism)."""
    by_user: dict[str, list[tuple[str, int]]] = {}
    for (user, mechanism), credential in sorted(held.items()):
        by_user.setdefault(user, []).append((mechanism, credential.iterations))
    if not users:
        return [(user, None, infos) for user, infos in by_user.items() if not user.startswith(RESERVED_USER_PREFIX)]
    out = []
    for user, times in collections.Counter(users).items():
        if times > 1:
            out.append((user, DuplicateResource(
                f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}"), []))
        elif user not in by_user:
            out.append((user, ResourceNotFound(f"Attempt to describe a user credential that does not exist: {user}"),
                        []))
        else:
            out.append((user, None, by_user[user]))
    return out
