"""A group of protocol type "connect" run by a client nobody here wrote: a
kafka-python `BaseCoordinator` subclass, as Kafka Connect's WorkerCoordinator is
one (protocol type "connect", the worker's URL and config offset as its
metadata, ConnectProtocol v0's layout), against the in-process node (no Ray;
clients at a broker's edge). Three workers join; the coordinator relays the
leader's assignment of connectors and tasks, which every worker receives
exactly as the leader wrote it; a worker leaves and the two left get the
leader's new assignment; DescribeGroups names the protocol type and protocol."""

import struct
import threading
import time

import pytest

from rafka.client.admin import Admin
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.compat
GROUP = "connect-cluster"
CONNECTORS = {"jdbc-source": 4, "s3-sink": 3, "file-sink": 1}   # connector -> its task count


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _read_string(data: bytes, at: int) -> tuple[str, int]:
    (length,) = struct.unpack_from(">h", data, at)
    return data[at + 2:at + 2 + length].decode(), at + 2 + length


def worker_metadata(url: str, config_offset: int) -> bytes:
    """ConnectProtocol v0 WorkerState: version, url, config offset."""
    return struct.pack(">h", 0) + _string(url) + struct.pack(">q", config_offset)


def read_worker_metadata(data: bytes) -> tuple[str, int]:
    url, at = _read_string(data, 2)
    return url, struct.unpack_from(">q", data, at)[0]


def assignment_bytes(leader: str, leader_url: str, config_offset: int, work: dict[str, list[int]]) -> bytes:
    """ConnectProtocol v0 Assignment: version, error, leader, leader url, config
    offset, [(connector, [task])] (a connector's own instance is task -1 here)."""
    out = struct.pack(">hh", 0, 0) + _string(leader) + _string(leader_url) + struct.pack(">q", config_offset)
    out += struct.pack(">i", len(work))
    for connector, tasks in sorted(work.items()):
        out += _string(connector) + struct.pack(">i", len(tasks)) + b"".join(struct.pack(">i", t) for t in tasks)
    return out


def read_assignment(data: bytes) -> dict:
    _version, error = struct.unpack_from(">hh", data, 0)
    leader, at = _read_string(data, 4)
    leader_url, at = _read_string(data, at)
    (config_offset, count) = struct.unpack_from(">qi", data, at)
    at += 12
    work = {}
    for _ in range(count):
        connector, at = _read_string(data, at)
        (tasks,) = struct.unpack_from(">i", data, at)
        work[connector] = list(struct.unpack_from(f">{tasks}i", data, at + 4))
        at += 4 + 4 * tasks
    return {"error": error, "leader": leader, "leader_url": leader_url, "config_offset": config_offset,
            "work": work}


def make_worker_coordinator():
    from kafka.coordinator.base import BaseCoordinator

    class WorkerCoordinator(BaseCoordinator):
        """Kafka Connect's WorkerCoordinator, reduced to its group part: eager
        ("default") protocol, the leader spreads connectors and tasks round-robin
        over the workers by member id."""

        def __init__(self, client, url: str, **configs) -> None:
            super().__init__(client, **configs)
            self.url = url
            self.config_offset = 7
            self.assignments: list[dict] = []     # every assignment received, in order
            self.led: list[dict] = []             # what this worker assigned as leader: {member: bytes}

        def protocol_type(self):
            return "connect"

        def group_protocols(self):
            return [("default", worker_metadata(self.url, self.config_offset))]

        def _perform_assignment(self, leader_id, protocol, members):
            workers = sorted(m.member_id for m in members)
            urls = {m.member_id: read_worker_metadata(bytes(m.metadata))[0] for m in members}
            units = [(c, t) for c, tasks in sorted(CONNECTORS.items()) for t in [-1, *range(tasks)]]
            work: dict[str, dict[str, list[int]]] = {w: {} for w in workers}
            for i, (connector, task) in enumerate(units):
                work[workers[i % len(workers)]].setdefault(connector, []).append(task)
            written = {w: assignment_bytes(leader_id, urls[leader_id], self.config_offset, work[w])
                       for w in workers}
            self.led.append(written)
            return written

        async def _on_join_complete_async(self, generation, member_id, protocol, member_assignment_bytes):
            self.assignments.append({"generation": generation, "member_id": member_id, "protocol": protocol,
                                     "bytes": bytes(member_assignment_bytes),
                                     **read_assignment(bytes(member_assignment_bytes))})

    return WorkerCoordinator


class Worker:
    """A worker's coordinator driven by its own thread, as Connect's herder thread
    drives its WorkerCoordinator (poll: join when needed, heartbeat)."""

    def __init__(self, node, name: str) -> None:
        from kafka.net.compat import KafkaNetClient
        self.name = name
        self.client = KafkaNetClient(bootstrap_servers=node.bootstrap, client_id=name)
        self.client._manager.bootstrap(30_000)
        self.coordinator = make_worker_coordinator()(
            self.client, f"http://{name}:8083/", group_id=GROUP, session_timeout_ms=10_000,
            heartbeat_interval_ms=300, max_poll_interval_ms=10_000, retry_backoff_ms=50,
            api_version=self.client._manager.broker_version)
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"worker-{name}")
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.coordinator.ensure_active_group(timeout_ms=200)
                self.coordinator.poll_heartbeat()
                self._stop.wait(0.05)
        except BaseException as error:   # the test reports it
            self.error = error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.coordinator.close(timeout_ms=5_000)   # LeaveGroup
        self.client.close()

    def latest(self) -> dict | None:
        return self.coordinator.assignments[-1] if self.coordinator.assignments else None


@pytest.fixture
def node(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 1}, edge=True) as node:
        yield node


def wait_for(condition, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} not met in {seconds}s")


def settled(workers) -> bool:
    """Every worker holds an assignment of one generation (the latest), from one leader."""
    latest = [w.latest() for w in workers]
    return all(latest) and len({(a["generation"], a["leader"]) for a in latest}) == 1 and \
        all(w.coordinator.generation_if_stable() is not None for w in workers)


def test_kafka_python_worker_coordinators__connect_group__the_leaders_assignment_reaches_every_worker(node):
    workers = [Worker(node, f"worker-{i}") for i in range(3)]
    try:
        wait_for(lambda: settled(workers) and len({w.latest()["member_id"] for w in workers}) == 3, 60,
                 "three workers joined one generation")
        assert all(w.error is None for w in workers), [w.error for w in workers]
        leader_id = workers[0].latest()["leader"]
        (leader,) = [w for w in workers if w.latest()["member_id"] == leader_id]
        written = leader.coordinator.led[-1]
        assert set(written) == {w.latest()["member_id"] for w in workers}
        for w in workers:   # every worker received exactly the bytes the leader wrote for it
            latest = w.latest()
            assert latest["bytes"] == written[latest["member_id"]]
            assert (latest["protocol"], latest["leader_url"], latest["config_offset"]) == (
                "default", leader.coordinator.url, 7)
        units = sorted((c, t) for w in workers for c, tasks in w.latest()["work"].items() for t in tasks)
        assert units == sorted((c, t) for c, n in CONNECTORS.items() for t in [-1, *range(n)])
        assert sorted(len([t for ts in w.latest()["work"].values() for t in ts]) for w in workers) == [3, 4, 4]

        admin = Admin(type("NoControlPlane", (), {"login": None})(), bootstrap_servers=node.bootstrap,
                      default_api_timeout_ms=30_000)
        described = admin.describe_consumer_group(GROUP)
        assert (described["state"], described["protocol_type"], described["assignor"]) == (
            "Stable", "connect", "default")
        assert set(described["members"]) == {w.latest()["member_id"] for w in workers}

        generation = workers[0].latest()["generation"]
        leaving = next(w for w in workers if w is not leader)
        leaving.stop()
        staying = [w for w in workers if w is not leaving]
        wait_for(lambda: settled(staying) and staying[0].latest()["generation"] > generation, 60,
                 "the two left rejoined a new generation")
        new_leader_id = staying[0].latest()["leader"]
        (new_leader,) = [w for w in staying if w.latest()["member_id"] == new_leader_id]
        for w in staying:
            assert w.latest()["bytes"] == new_leader.coordinator.led[-1][w.latest()["member_id"]]
        units = sorted((c, t) for w in staying for c, tasks in w.latest()["work"].items() for t in tasks)
        assert units == sorted((c, t) for c, n in CONNECTORS.items() for t in [-1, *range(n)])
        assert all(w.error is None for w in staying), [w.error for w in staying]
    finally:
        for w in workers:
            if not w._stop.is_set():
                w.stop()
