"""Deploy tier: `ray up cluster.yaml` onto four hosts, as a user launches rafka.

The hosts are network namespaces on this machine (tests/deploy/hosts.py): a head
and three workers, each with its own address on a bridge, its own sshd and its own
disk. From this process (the driver, in the machine's own namespace) the scenario
runs the user's steps with the user's file: cluster.yaml, with only the addresses,
the ssh user and key, and the install line changed (render_cluster_yaml).

  1. `ray get-auth-token --generate` on the driver, then `ray up`: the head starts
     Ray with token auth and runs `rafka up`, which waits for the three workers the
     autoscaler starts meanwhile; each worker's broker id comes from its log dir.
  2. A driver without the token (or with a wrong one) is refused by the GCS; one on
     the head, which has the token, connects.
  3. Token auth on, SASL is required on the Kafka listeners: a user made with
     `rafka users --add` on the head produces (acks=all) and consumes, with a
     group, through the bootstrap address.
  4. `ray stop` on one worker, while a producer keeps sending; Ray started again
     there with cluster.yaml's worker commands: the same broker id from the same
     disk, and every partition's ISR whole again.
  5. `ray down`, then `ray up` again: every acked record is read back at its offset,
     and the group resumes from its committed offsets.

Every wait is on a condition with a deadline. The hosts, their processes, the
bridge and the directories are removed at the end whatever happened; the hosts'
Ray logs and the driver's command output are kept in pytest's temp dir.
Only one Ray cluster at a time on this machine: run it under the same lock as
every other tier (`flock /tmp/rafka-ray.lock pytest -m deploy`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

import rafka
from rafka.client.consumer import Consumer
from rafka.client.producer import Producer
from rafka.core.structs import TopicPartition
from tests.deploy.hosts import NamespaceHosts, collect_logs, run, wait_until


def why_no_namespaces() -> str | None:
    """Why this machine cannot make the hosts (then the tier is skipped), or None."""
    if os.geteuid() != 0:
        return "the deploy tier creates network namespaces, a bridge and sshds: it needs root"
    probe = subprocess.run(["unshare", "--net", "--mount", "--pid", "--fork", "true"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        return f"this machine refuses new namespaces (unshare: {probe.stderr.strip()})"
    return None


NO_NAMESPACES = why_no_namespaces()
pytestmark = [pytest.mark.deploy, pytest.mark.skipif(NO_NAMESPACES is not None, reason=str(NO_NAMESPACES))]

REPO = Path(__file__).resolve().parents[2]
WORKERS = 3
TOPIC = "deploy"
PARTITIONS = 3
GROUP = "deploy-readers"
# Ray's own CLI commands time out within seconds on an unanswered address (rafka.cli
# does the same), so a refused driver is told so at once rather than after retries.
FAST_RAY_CONNECT = {"RAY_NUM_REDIS_GET_RETRIES": "3", "RAY_py_gcs_connect_timeout_s": "3",
                    "RAY_gcs_rpc_server_connect_timeout_s": "3"}


# --- the driver's side: cluster.yaml, ray up / down, commands on the hosts -------------

def render_cluster_yaml(hosts: NamespaceHosts, *, ssh_key: Path) -> dict:
    """cluster.yaml as a user would edit it for these hosts: addresses, ssh user and
    key, and where rafka is installed from. The install line links the hosts' venv to
    this process's (the namespaces see this machine's files: like a shared install)
    with the rafka sources this process imports first on the path."""
    config = yaml.safe_load((REPO / "cluster.yaml").read_text())
    config["provider"]["head_ip"] = hosts.head.address
    config["provider"]["worker_ips"] = [w.address for w in hosts.workers]
    config["auth"] = {"ssh_user": "root", "ssh_private_key": str(ssh_key)}
    rafka_sources = Path(rafka.__file__).resolve().parents[1]
    install = (f"ln -sfn {shlex.quote(sys.prefix)} ~/rafka-venv && "
               f"echo 'export PYTHONPATH={rafka_sources}' >> ~/.bashrc")
    installs = [i for i, command in enumerate(config["setup_commands"]) if "pip install" in command]
    assert len(installs) == 1, "cluster.yaml should install rafka with one `pip install` setup command"
    config["setup_commands"][installs[0]] = install
    return config


@dataclasses.dataclass
class Deployment:
    hosts: NamespaceHosts
    config: dict
    config_path: Path
    env: dict            # the driver's environment for `ray ...`: its own HOME (token), RAY_TMPDIR
    logs: Path
    commands_run: int = 0
    # what every Kafka client of the test passes besides bootstrap_servers: the login
    # of a user made with `rafka users --add` (add_kafka_user)
    kafka_client_options: dict = dataclasses.field(default_factory=dict)

    @property
    def bootstrap_servers(self) -> str:
        """Every broker at its host's 9092 (the head runs the controller, no broker)."""
        return ",".join(f"{worker.address}:9092" for worker in self.hosts.workers)

    def ray(self, *args: str, timeout_s: float) -> str:
        """`ray <args>` on the driver; its output is kept in the driver's logs."""
        self.commands_run += 1
        log = self.logs / f"{self.commands_run:02d}-ray-{args[0]}.log"
        started_s = time.monotonic()
        with open(log, "w") as out:
            done = subprocess.run([str(Path(sys.executable).parent / "ray"), *args], env=self.env,
                                  stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s,
                                  stdin=subprocess.DEVNULL)
        output = log.read_text()
        assert done.returncode == 0, f"ray {' '.join(args)} exited {done.returncode}:\n{output[-4000:]}"
        print(f"ray {args[0]}: {time.monotonic() - started_s:.1f}s")
        return output

    def up(self) -> str:
        output = self.ray("up", "-y", "--no-config-cache", str(self.config_path), timeout_s=900)
        assert "rafka is up" in output, output[-4000:]
        servers = next(line for line in output.splitlines() if "bootstrap servers:" in line)
        assert sorted(servers.split(": ", 1)[1].strip().split(",")) == sorted(self.bootstrap_servers.split(",")), \
            servers   # every broker at its host's 9092
        # Ray's token auth is on: so is SASL on every Kafka listener
        assert "listeners require SASL/SCRAM" in output, output[-4000:]
        return output

    def add_kafka_user(self, user: str) -> None:
        """A SCRAM user made on the head as an operator makes one (the password on
        stdin), and the Kafka clients' login as that user."""
        password = secrets.token_urlsafe(16)
        self.on_head(f"printf '%s\\n' {password} | rafka users --add {user}")
        # SASL required: a user may do only what ACLs allow (Kafka's default deny), so the
        # operator grants this application's user its topics and groups
        self.on_head(f"rafka acls --add --allow-principal User:{user} --operation All --topic '*' --group '*'")
        self.kafka_client_options = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
                                     "sasl_plain_username": user, "sasl_plain_password": password}

    def down(self) -> None:
        self.ray("down", "-y", str(self.config_path), timeout_s=300)

    def on_head(self, command: str) -> str:
        return self.hosts.ssh_ok(self.hosts.head, command)

    def brokers(self) -> dict[str, int]:
        """{worker address: broker id} of the live brokers, from `rafka status`."""
        found = re.findall(r"^\s+(\d+)\s+(\S+)\s+node \w+$", self.on_head("rafka status"), re.MULTILINE)
        return {address: int(broker_id) for broker_id, address in found}

    def partitions(self) -> dict[int, dict]:
        """{partition: {leader, isr, brokers}} of the topic, from `rafka topics --describe`."""
        described = self.on_head(f"rafka topics --describe --topic {TOPIC}")
        found = {}
        for line in described.splitlines():
            if match := re.search(r"Partition: (\d+)\tLeader: (\S+)\t.*\tIsr: ([\d,]*)\t.*\tBrokers: ([\d,]*)", line):
                found[int(match[1])] = {"leader": match[2], "isr": [int(r) for r in match[3].split(",") if r],
                                        "brokers": [int(b) for b in match[4].split(",") if b]}
        return found

    def wait_until_every_isr_whole(self, *, timeout_s: float = 180) -> dict[int, dict]:
        def whole():
            partitions = self.partitions()
            return partitions if len(partitions) == PARTITIONS and all(
                p["leader"] != "none" and len(p["isr"]) == WORKERS for p in partitions.values()) else None
        return wait_until(whole, timeout_s=timeout_s, interval_s=1.0,
                          what=f"every partition of {TOPIC} led, with all {WORKERS} replicas in its ISR")

    def worker_start_ray(self, worker) -> None:
        """cluster.yaml's worker_start_ray_commands, run on `worker` as the autoscaler
        runs them (RAY_HEAD_IP set, one after the other)."""
        commands = " && ".join(self.config["worker_start_ray_commands"])
        self.hosts.ssh_ok(worker, f"export RAY_HEAD_IP={self.hosts.head.address}; {commands}")

    def log_dir_ids(self, worker) -> list[str]:
        """The broker log dirs on the worker's own disk (`ls /var/lib/rafka` there)."""
        return sorted(self.hosts.ssh_ok(worker, "ls /var/lib/rafka").split())


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """Four namespace hosts and `ray up` onto them; everything removed at the end."""
    run(["bash", str(REPO / "scripts" / "deploy-prereqs.sh")], timeout_s=900)
    # not under /tmp: each host has its own /tmp, and its sshd reads its config from here
    base = Path(tempfile.mkdtemp(prefix="rafka-deploy-", dir="/var/tmp"))
    driver = base / "driver"
    for sub in ("home", "tmp", "logs", "ssh"):
        (driver / sub).mkdir(parents=True, mode=0o700)
    ssh_key = driver / "ssh" / "id_ed25519"
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rafka-deploy", "-f", str(ssh_key)])
    shared = [REPO, Path(sys.prefix), Path(sys.base_prefix), Path(rafka.__file__).parents[1]]
    hosts = NamespaceHosts(base, workers=WORKERS, shared_paths=[p.resolve() for p in shared],
                           ssh_public_key=ssh_key.with_suffix(".pub").read_text(), ssh_private_key=ssh_key)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(driver / "home"), RAY_TMPDIR=str(driver / "tmp"), RAY_USAGE_STATS_ENABLED="0",
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    config = render_cluster_yaml(hosts, ssh_key=ssh_key)
    config_path = driver / "cluster.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    started_s = time.monotonic()
    try:
        hosts.start()
        deployed = Deployment(hosts, config, config_path, env, driver / "logs")
        # the user's one step before the first `ray up` (cluster.yaml): the cluster's token
        subprocess.run([str(Path(sys.executable).parent / "ray"), "get-auth-token", "--generate"], env=env,
                       check=True, capture_output=True, timeout=60)
        deployed.up()
        deployed.add_kafka_user("deploy-test")
        yield deployed
    finally:
        kept = tmp_path_factory.mktemp("deploy-logs")
        try:
            collect_logs(hosts, kept)
        finally:
            hosts.close()
        print(f"deploy tier: {time.monotonic() - started_s:.0f}s; the hosts' Ray logs and the driver's "
              f"output are in {kept}")


# --- the scenarios --------------------------------------------------------------------

def try_driver(env_changes: dict, *, address: str) -> subprocess.CompletedProcess:
    """A Ray driver on this machine, with no token of its own (an empty HOME) unless
    `env_changes` gives one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    code = f"import ray; ray.init(address={address!r}); print('connected', ray.cluster_resources()['rafka_broker'])"
    with tempfile.TemporaryDirectory(prefix="rafka-no-token-") as empty_home:
        env.update(HOME=empty_home, RAY_USAGE_STATS_ENABLED="0", **FAST_RAY_CONNECT, **env_changes)
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_ray_up__token_auth_on__a_driver_without_the_token_is_refused(deployment):
    address = f"{deployment.hosts.head.address}:6379"
    for label, env_changes in [("no token", {}),
                               ("a wrong token", {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 32})]:
        refused = try_driver(env_changes, address=address)
        assert refused.returncode != 0 and "connected" not in refused.stdout, f"{label}: {refused.stdout}"
        assert "InvalidAuthToken: Authentication token is missing or incorrect" in refused.stderr, \
            f"{label}: refused, but not for its token:\n{refused.stderr[-3000:]}"
    # on the head, the same driver without the token is refused; with it (~/.ray, from
    # file_mounts) it connects and sees the three brokers
    refused_on_head = deployment.hosts.ssh(
        deployment.hosts.head, f"mkdir -p /tmp/no-token && HOME=/tmp/no-token "
                               f"{' '.join(f'{k}={v}' for k, v in FAST_RAY_CONNECT.items())} python -c "
                               f"\"import ray; ray.init(address='{address}'); print('connected')\"")
    assert refused_on_head.returncode != 0 and "InvalidAuthToken" in refused_on_head.stderr, \
        refused_on_head.stderr[-3000:]
    connected = deployment.on_head("python -c \"import ray; ray.init(address='auto'); "
                                   "print('connected', ray.cluster_resources()['rafka_broker'])\"")
    assert f"connected {float(WORKERS)}" in connected


def test_ray_up__worker_restarted__ray_down_and_up__every_acked_record_is_still_there(deployment):
    hosts = deployment.hosts
    # brokers take their ids from their log dirs: one broker-<id> dir on each worker's disk
    brokers = deployment.brokers()
    assert sorted(brokers) == sorted(w.address for w in hosts.workers), brokers
    for worker in hosts.workers:
        assert deployment.log_dir_ids(worker) == [f"broker-{brokers[worker.address]}"]
        assert hosts.ssh_ok(worker, "rafka broker-id --data-dir=/var/lib/rafka").strip() == \
            str(brokers[worker.address])

    deployment.on_head(f"rafka topics --create --topic {TOPIC} --partitions {PARTITIONS} --replication-factor "
                       f"{WORKERS} --config min.insync.replicas=2")
    acked = produce(deployment, "before", 300)
    with group_consumer(deployment) as consumer:
        assert sorted(read_until(consumer, len(acked))) == sorted(acked)
        consumer.commit_sync()

    # Ray stopped on one worker while a producer sends; started again on the same disk
    worker = hosts.workers[1]
    during = BackgroundProducer(deployment, "during")
    try:
        hosts.ssh_ok(worker, "ray stop")
        wait_until(lambda: worker.address not in deployment.brokers(), timeout_s=60, interval_s=1.0,
                   what=f"broker {brokers[worker.address]} leaving the cluster")
        # soon, before the autoscaler's own recovery of a worker it lost (30 s): one restart
        deployment.worker_start_ray(worker)
    finally:
        acked += during.stop()
    assert deployment.log_dir_ids(worker) == [f"broker-{brokers[worker.address]}"]
    wait_until(lambda: deployment.brokers() == brokers, timeout_s=120, interval_s=1.0,
               what=f"the same brokers as before ({brokers}) back")
    deployment.wait_until_every_isr_whole()
    acked += produce(deployment, "after-restart", 100)

    deployment.down()
    deployment.up()
    assert deployment.brokers() == brokers
    deployment.wait_until_every_isr_whole()
    assert read_everything(deployment) == sorted(acked)
    with group_consumer(deployment) as consumer:   # resumes after what it committed before the restarts
        committed_before = 300
        assert sorted(read_until(consumer, len(acked) - committed_before)) == sorted(acked[committed_before:])


# --- producing and reading through the bootstrap address -------------------------------

Record = tuple  # (partition, offset, value)


def produce(deployment: Deployment, phase: str, count: int) -> list[Record]:
    producer = Producer(deployment.bootstrap_servers, acks="all", **deployment.kafka_client_options)
    try:
        futures = [(b"%s-%05d" % (phase.encode(), i),
                    producer.send(TOPIC, value=b"%s-%05d" % (phase.encode(), i), key=b"key-%d" % i))
                   for i in range(count)]
        return [(meta.partition, meta.offset, value)
                for value, meta in ((value, future.result(timeout=120)) for value, future in futures)]
    finally:
        producer.close()


class BackgroundProducer:
    """Sends acks=all records one after another from a thread until stopped (every
    send waits for its ack: none outstanding when stopped); returns what was acked."""

    def __init__(self, deployment: Deployment, phase: str) -> None:
        self.producer = Producer(deployment.bootstrap_servers, acks="all", **deployment.kafka_client_options)
        self.phase = phase.encode()
        self.acked: list[Record] = []
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.thread.start()

    def _send(self) -> None:
        try:
            i = 0
            while not self.stopping.is_set():
                value = b"%s-%05d" % (self.phase, i)
                meta = self.producer.send(TOPIC, value=value, key=b"key-%d" % i).result(timeout=120)
                self.acked.append((meta.partition, meta.offset, value))
                i += 1
                time.sleep(0.02)
        except BaseException as error:   # noqa: BLE001 (reported by stop())
            self.error = error

    def stop(self) -> list[Record]:
        self.stopping.set()
        self.thread.join(180)
        self.producer.close()
        assert not self.thread.is_alive(), "a send was not acked (or failed) within 120 s"
        assert self.error is None, f"the producer failed: {self.error!r}"
        assert self.acked, "nothing was acked while the worker was stopped and started"
        return self.acked


def group_consumer(deployment: Deployment) -> Consumer:
    consumer = Consumer(deployment.bootstrap_servers, group_id=GROUP, auto_offset_reset="earliest",
                        enable_auto_commit=False, **deployment.kafka_client_options)
    consumer.subscribe([TOPIC])
    return consumer


def read_until(consumer: Consumer, count: int, *, timeout_s: float = 120) -> list[Record]:
    records: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        records += [(r.partition, r.offset, r.value) for r in consumer.poll(timeout=1.0)]
    assert len(records) == count, f"read {len(records)} records, expected {count}"
    return records


def read_everything(deployment: Deployment) -> list[Record]:
    """Every record of the topic, from each partition's start to its high watermark."""
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    with Consumer(deployment.bootstrap_servers, auto_offset_reset="earliest",
                  **deployment.kafka_client_options) as consumer:
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        records: list[Record] = []
        wait_until(lambda: records.extend((r.partition, r.offset, r.value) for r in consumer.poll(timeout=0.5))
                   or all(consumer.position(tp) >= ends[tp] for tp in partitions),
                   timeout_s=120, interval_s=0, what=f"reading {TOPIC} to its high watermarks {ends}")
    return sorted(records)
