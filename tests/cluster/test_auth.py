"""Authentication on every door of a cluster whose Ray runs with token auth and
whose listeners speak TLS: a Ray driver without the token is refused; every Kafka
listener requires a SASL/SCRAM login over TLS (SASL_SSL; Kafka's errors for no
credentials, a wrong password, a deleted user, and nothing written); users come
from `rafka users`; and rafka's own connections (followers' fetches, the
coordinator's offset writes, member actors, the driver's clients) log in with the
cluster credential over TLS, and no command prints it.

The module starts its own 2-broker cluster with RAY_AUTH_MODE=token and a token of
its own (Ray reads them when it starts a process; this process is made to read them
again) and puts them back afterwards, so later modules run as before."""

import os
import secrets
import stat
import subprocess
import sys

import pytest
import ray

from rafka.core.structs import TopicPartition
from tests.cli_session import CliSessions
from tests.tls_files import make_tls_files
from tests.harness import TEST_CLUSTER_OPTIONS, TEST_COORDINATOR_OPTIONS, handled_records, recording_handler, \
    wait_until

pytestmark = pytest.mark.cluster

TOKEN_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")
TLS_ENV = ("RAFKA_TLS_CERTFILE", "RAFKA_TLS_KEYFILE", "RAFKA_TLS_CAFILE")


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    return make_tls_files(tmp_path_factory.mktemp("tls"), extra_ips=(ray.util.get_node_ip_address(),))


@pytest.fixture(scope="module")
def secured(tls_files):
    import rafka
    before = {name: os.environ.get(name) for name in TOKEN_ENV + TLS_ENV}
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(24),
                      RAFKA_TLS_CERTFILE=tls_files["certfile"], RAFKA_TLS_KEYFILE=tls_files["keyfile"],
                      RAFKA_TLS_CAFILE=tls_files["cafile"])   # the nodes Ray starts inherit them
    reread_auth_settings()
    try:
        with rafka.local_cluster(nodes=2, coordinator_options=TEST_COORDINATOR_OPTIONS,
                                 **TEST_CLUSTER_OPTIONS) as cluster:
            yield cluster
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        reread_auth_settings()


def reread_auth_settings():
    """Ray caches its config and the token it loaded per process: read both again,
    so this process and the next cluster it starts agree on them."""
    from ray._raylet import AuthenticationTokenLoader, Config
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


_cli_sessions = CliSessions()


@pytest.fixture(scope="module", autouse=True)
def _close_cli_sessions(secured):   # before the cluster stops
    yield
    _cli_sessions.close()


def rafka_cli(cluster, *args, token=True, stdin=None):
    """`rafka <args>`, with the cluster's Ray token in a CLI session process
    (tests/cli_session.py: one Ray connection for all), without it as a process
    of its own."""
    address = cluster.ray_cluster.address
    if token:
        return _cli_sessions.run(address, *args, stdin=stdin)
    env = {k: v for k, v in dict(os.environ, RAY_ADDRESS=address).items() if k not in TOKEN_ENV}
    done = subprocess.run([sys.executable, "-m", "rafka.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120, input=stdin)
    return done.returncode, done.stdout, done.stderr


def log_end(cluster, topic):
    tp = TopicPartition(topic, 0)
    return cluster.admin().end_offsets([tp])[tp]


def confluent_produce(cluster, topic, extra, timeout_s=10.0):
    from confluent_kafka import Producer
    reported, delivered = [], []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "message.timeout.ms": int(timeout_s * 1000), "error_cb": reported.append, **extra})
    producer.produce(topic, b"v", partition=0, on_delivery=lambda error, message: delivered.append(error))
    producer.flush(timeout_s + 5)
    return (delivered[0] if delivered else "undelivered"), reported


def over_tls():
    return {"security.protocol": "SSL", "ssl.ca.location": os.environ["RAFKA_TLS_CAFILE"]}


def login(user, password, mechanism="SCRAM-SHA-256"):
    return {**over_tls(), "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}


def test_a_ray_driver_without_the_token_is_refused_and_one_with_it_joins(secured, tmp_path):
    script = "import ray; ray.init(address=%r); print('joined')" % secured.ray_cluster.address
    without = {k: v for k, v in os.environ.items() if k not in TOKEN_ENV}
    refused = subprocess.run([sys.executable, "-c", script], env=dict(without, HOME=str(tmp_path)),
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "joined" not in refused.stdout
    assert "token" in refused.stderr.lower()
    joined = subprocess.run([sys.executable, "-c", script], env=dict(os.environ), capture_output=True, text=True,
                            timeout=120)
    assert joined.returncode == 0 and "joined" in joined.stdout, joined.stderr[-2000:]
    code, _, _ = rafka_cli(secured, "users", "--list", token=False)
    assert code != 0


def test_listeners_require_sasl__kafka_clients_without_a_login_are_refused_and_nothing_written(secured):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError
    admin = secured.admin()
    admin.create_topic("guarded", partitions=1, replication_factor=2, config={"min.insync.replicas": "2"})
    assert ray.get(secured.controller.sasl_required.remote())
    for without_login in ({}, over_tls()):   # plaintext to a TLS listener; TLS without SASL
        error, _ = confluent_produce(secured, "guarded", without_login, timeout_s=3)
        assert error is not None
    with pytest.raises(KafkaError):
        producer = KafkaProducer(bootstrap_servers=secured.bootstrap_servers, acks="all", request_timeout_ms=3_000,
                                 max_block_ms=3_000, security_protocol="SSL",
                                 ssl_cafile=os.environ["RAFKA_TLS_CAFILE"])
        producer.send("guarded", b"kp", partition=0).get(timeout=5)
    assert log_end(secured, "guarded") == 0


def test_users_from_the_cli__confluent_kafka_with_scram_produces_to_r2_and_commits_and_refusals_write_nothing(
        secured):
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as ConfluentTopicPartition
    code, out, err = rafka_cli(secured, "users", "--add", "alice", "--password", "alice-secret")
    assert code == 0, err
    code, out, _ = rafka_cli(secured, "users", "--list")
    assert out.split() == ["alice", "SCRAM-SHA-256,SCRAM-SHA-512"]   # the cluster's own user is not listed
    # SASL required: a resource no binding names is closed (Kafka's default); alice is
    # granted what she does here with `rafka acls`, over the wire
    code, out, err = rafka_cli(secured, "acls", "--add", "--allow-principal", "User:alice", "--operation", "Write",
                               "--operation", "Read", "--topic", "guarded")
    assert code == 0, err
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in out
    code, _, err = rafka_cli(secured, "acls", "--add", "--allow-principal", "User:alice", "--operation", "Read",
                             "--group", "audit")
    assert code == 0, err
    admin = secured.admin()
    if "guarded" not in admin.list_topics():
        admin.create_topic("guarded", partitions=1, replication_factor=2, config={"min.insync.replicas": "2"})
    before = log_end(secured, "guarded")
    # acks=all with min.insync.replicas=2: acked only once the follower fetched it, so
    # the follower's fetcher logged in with the cluster credential
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        error, reported = confluent_produce(secured, "guarded", login("alice", "alice-secret", mechanism))
        assert error is None, reported
    assert log_end(secured, "guarded") == before + 2
    consumer = Consumer({"bootstrap.servers": secured.bootstrap_servers, "group.id": "audit",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         **login("alice", "alice-secret")})
    consumer.assign([ConfluentTopicPartition("guarded", 0, 0)])
    message = wait_until(lambda: consumer.poll(1), what="a record polled with SCRAM")
    assert message.error() is None and message.value() == b"v"
    committed = consumer.commit(asynchronous=False)   # the coordinator's write logs in too
    consumer.close()
    assert committed[0].offset == message.offset() + 1
    group = secured.admin().list_consumer_group_offsets("audit")
    assert group[TopicPartition("guarded", 0)] == message.offset() + 1

    wrong, reported = confluent_produce(secured, "guarded", login("alice", "guess"), timeout_s=3)
    assert wrong is not None and any("Authentication failed" in str(e) for e in reported), reported
    code, _, err = rafka_cli(secured, "users", "--delete", "alice")
    assert code == 0, err
    deleted, reported = confluent_produce(secured, "guarded", login("alice", "alice-secret"), timeout_s=3)
    assert deleted is not None and any("Authentication failed" in str(e) for e in reported), reported
    assert log_end(secured, "guarded") == before + 2
    code, _, err = rafka_cli(secured, "users", "--add", "__rafka", "--password", "x")
    assert code != 0 and "rafka's own" in err


def test_rafka_own_clients_log_in_with_the_cluster_credential_which_stays_in_the_cluster(secured, tmp_path):
    admin = secured.admin()
    admin.create_topic("inside", partitions=1, replication_factor=2)
    with secured.producer(acks="all") as producer:
        for i in range(20):
            producer.send("inside", value=b"%d" % i, partition=0)
        producer.flush()
    group = secured.run_consumer_group("inside-group", ["inside"], recording_handler(str(tmp_path)), members=1)
    wait_until(lambda: len(handled_records(str(tmp_path))) >= 20, timeout_s=120, what="a member actor consumed all")
    group.stop()
    secret = os.path.join(secured.data_dir, "controller", "cluster.secret")
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    password = open(secret).read().strip()
    outputs = [rafka_cli(secured, *args) for args in (("users", "--list"), ("status",),
                                                       ("topics", "--describe", "--topic", "inside"))]
    assert all(code == 0 for code, _, _ in outputs), outputs
    assert not any(password in out or password in err for _, out, err in outputs)
    log = open(os.path.join(secured.data_dir, "controller", "metadata.log")).read()
    assert password not in log and "__rafka" in log
