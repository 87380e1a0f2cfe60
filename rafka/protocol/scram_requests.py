"""DescribeUserScramCredentials and AlterUserScramCredentials (v0) as rafka's Admin
sends them, and their answers read back (Kafka's AdminClient
describeUserScramCredentials / alterUserScramCredentials).

The client salts: an upsertion carries PBKDF2(password, salt, iterations), so the
password goes no further than the process that has it. A top-level error of
Describe raises it; a user's own error is returned in its place, as Kafka's
AdminClient completes each user's future on its own.
Callers: rafka.client.admin (`rafka users`), tests.
"""

from __future__ import annotations

from kio.schema.alter_user_scram_credentials.v0 import request as alter_v0
from kio.schema.describe_user_scram_credentials.v0 import request as describe_v0
from kio.static.primitive import i8, i32

from rafka.core.errors import KafkaError, error_or_none
from rafka.core.scram import MECHANISM_TYPES, mechanism_name, new_salt, salted_password


def describe_request(users: list[str] | None = None) -> describe_v0.DescribeUserScramCredentialsRequest:
    """`users`: None for every user."""
    return describe_v0.DescribeUserScramCredentialsRequest(
        users=None if users is None else tuple(describe_v0.UserName(name=u) for u in users))


def describe_answer(response) -> dict[str, KafkaError | list[tuple[str, int]]]:
    """Per user: its (mechanism, iterations), or its error."""
    error = error_or_none(response.error_code, response.error_message)
    if error is not None:
        raise error
    return {r.user: error_or_none(r.error_code, r.error_message)
            or [(mechanism_name(c.mechanism), int(c.iterations)) for c in r.credential_infos]
            for r in response.results}


def alter_request(*, deletions: list[tuple[str, str]] = (),
                  upsertions: list[tuple[str, str, str, int]] = ()) -> alter_v0.AlterUserScramCredentialsRequest:
    """`deletions`: (user, mechanism); `upsertions`: (user, mechanism, password,
    iterations), salted here with a fresh salt. A mechanism Kafka does not know
    goes as type 0 (UNKNOWN): the broker answers UNSUPPORTED_SASL_MECHANISM."""
    def salted(user, mechanism, password, iterations):
        salt = new_salt()
        return alter_v0.ScramCredentialUpsertion(name=user, mechanism=i8(MECHANISM_TYPES.get(mechanism, 0)),
                                                 iterations=i32(iterations), salt=salt,
                                                 salted_password=salted_password(mechanism, password, salt,
                                                                                 iterations)
                                                 if mechanism in MECHANISM_TYPES else b"")
    return alter_v0.AlterUserScramCredentialsRequest(
        deletions=tuple(alter_v0.ScramCredentialDeletion(name=u, mechanism=i8(MECHANISM_TYPES.get(m, 0)))
                        for u, m in deletions),
        upsertions=tuple(salted(*u) for u in upsertions))


def alter_answer(response) -> dict[str, KafkaError | None]:
    return {r.user: error_or_none(r.error_code, r.error_message) for r in response.results}
