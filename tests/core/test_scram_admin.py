"""core.scram_admin: Kafka's rules for AlterUserScramCredentials and
DescribeUserScramCredentials (ScramControlManager, ScramImage.describe)."""

import pytest

from rafka.core.errors import DuplicateResource, ResourceNotFound, UnacceptableCredential, UnsupportedSaslMechanism
from rafka.core.scram import ScramClient, ScramServer, make_credential, new_salt, salted_password
from rafka.core.scram_admin import Deletion, Upsertion, alter, describe

pytestmark = pytest.mark.core


def upsertion(user, mechanism="SCRAM-SHA-256", password="pw", iterations=4096):
    salt = new_salt()
    return Upsertion(user, mechanism, iterations, salt, salted_password(mechanism, password, salt, iterations))


def held(*pairs):
    return {(user, mechanism): make_credential(mechanism, "old") for user, mechanism in pairs}


def outcome(alteration):
    return [(user, None if error is None else (type(error), error.message)) for user, error in alteration.results]


def test_alter__an_upserted_salted_password_logs_in_and_the_broker_never_sees_the_password():
    alteration = alter({}, [], [upsertion("alice", "SCRAM-SHA-512", password="s3cret", iterations=8192)])
    assert outcome(alteration) == [("alice", None)] and alteration.removed == []
    (user, credential), = alteration.set_credentials
    assert (user, credential.mechanism, credential.iterations) == ("alice", "SCRAM-SHA-512", 8192)
    server = ScramServer("SCRAM-SHA-512", lambda name: credential if name == "alice" else None)
    client = ScramClient("SCRAM-SHA-512", "alice", "s3cret")
    client.check_server_final(server.respond(client.final_message(server.respond(client.first_message()))))
    assert server.authenticated


def test_alter__a_user_named_twice_is_refused_whole_and_the_others_are_made():
    alteration = alter(held(("alice", "SCRAM-SHA-256"), ("carol", "SCRAM-SHA-256")),
                       [Deletion("alice", "SCRAM-SHA-256"), Deletion("carol", "SCRAM-SHA-256")],
                       [upsertion("alice", "SCRAM-SHA-512"), upsertion("bob"), upsertion("bob", "SCRAM-SHA-512")])
    twice = (DuplicateResource, "A user credential cannot be altered twice in the same request")
    assert outcome(alteration) == [("alice", twice), ("carol", None), ("bob", twice)]
    assert alteration.removed == [("carol", "SCRAM-SHA-256")] and alteration.set_credentials == []


@pytest.mark.parametrize("deletion, refusal", [
    (Deletion("", "SCRAM-SHA-256"), (UnacceptableCredential, "Username must not be empty")),
    (Deletion("alice", "SCRAM-SHA-1"), (UnsupportedSaslMechanism, "Unknown SCRAM mechanism")),
    (Deletion("alice", "SCRAM-SHA-512"),
     (ResourceNotFound, "Attempt to delete a user credential that does not exist")),
    (Deletion("__rafka", "SCRAM-SHA-512"), (UnacceptableCredential, "user names beginning with '__' are rafka's own")),
])
def test_alter__a_deletion_kafka_refuses_changes_nothing(deletion, refusal):
    alteration = alter(held(("alice", "SCRAM-SHA-256"), ("__rafka", "SCRAM-SHA-512")), [deletion], [])
    assert outcome(alteration) == [(deletion.user, refusal)]
    assert (alteration.removed, alteration.set_credentials) == ([], [])


@pytest.mark.parametrize("iterations, refusal", [
    (4095, (UnacceptableCredential, "Too few iterations")),
    (16385, (UnacceptableCredential, "Too many iterations")),
    (4096, None), (16384, None),
])
def test_alter__iterations_kafka_accepts_are_4096_to_16384(iterations, refusal):
    alteration = alter({}, [], [upsertion("alice", iterations=iterations)])
    assert outcome(alteration) == [("alice", refusal)]
    assert len(alteration.set_credentials) == (refusal is None)


def test_alter__an_unknown_mechanism_in_an_upsertion_is_refused_before_its_iterations():
    alteration = alter({}, [], [Upsertion("alice", "type 7", 1, b"salt", b"salted")])
    assert outcome(alteration) == [("alice", (UnsupportedSaslMechanism, "Unknown SCRAM mechanism"))]


def test_describe__every_user_its_mechanisms_and_iterations_rafkas_own_unlisted_unless_named():
    credentials = held(("bob", "SCRAM-SHA-512"), ("alice", "SCRAM-SHA-512"), ("alice", "SCRAM-SHA-256"),
                       ("__rafka", "SCRAM-SHA-512"))
    every = [("alice", None, [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 4096)]),
             ("bob", None, [("SCRAM-SHA-512", 4096)])]
    assert describe(credentials, None) == every and describe(credentials, []) == every
    assert describe(credentials, ["__rafka"]) == [("__rafka", None, [("SCRAM-SHA-512", 4096)])]


def test_describe__a_user_named_twice_or_without_credentials_answers_its_own_error():
    answered = describe(held(("alice", "SCRAM-SHA-256")), ["alice", "nobody", "alice"])
    assert [(user, type(error), error.message if error else None, infos) for user, error, infos in answered] == [
        ("alice", DuplicateResource,
         "Cannot describe SCRAM credentials for the same user twice in a single request: alice", []),
        ("nobody", ResourceNotFound, "Attempt to describe a user credential that does not exist: nobody", [])]
