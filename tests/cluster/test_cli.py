"""The CLI on a Ray cluster started by hand, as an operator would after `ray up`:
`rafka up`, `status`, `topics --create/--list/--describe/--delete`, `down`."""

import os
import subprocess
import sys

import pytest

from rafka.placement.groups import BROKER_RESOURCE

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def ray_address(tmp_path_factory):
    from ray.cluster_utils import Cluster
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=1, resources={BROKER_RESOURCE: 1})
    cluster.wait_for_nodes()
    yield cluster.address
    cluster.shutdown()


def rafka(address, *args):
    env = dict(os.environ, RAY_ADDRESS=address)
    done = subprocess.run([sys.executable, "-m", "rafka.cli", *args], env=env, capture_output=True,
                          text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def test_cli__before_up__status_says_to_run_up(ray_address):
    code, _, err = rafka(ray_address, "status")
    assert code == 1 and "rafka is not up" in err and "run `rafka up`" in err


def test_cli__up_topics_status_down(ray_address, tmp_path):
    code, out, _ = rafka(ray_address, "up", "--data-dir", str(tmp_path))
    assert code == 0 and "2 broker node(s)" in out and "controller epoch 1" in out
    assert "group coordinators: 1" in out

    code, out, _ = rafka(ray_address, "topics", "--create", "--topic", "clicks", "--partitions", "2",
                         "--replication-factor", "2", "--config", "min.insync.replicas=2")
    assert (code, out) == (0, "Created topic clicks.\n")
    code, _, err = rafka(ray_address, "topics", "--create", "--topic", "clicks", "--partitions", "1",
                         "--replication-factor", "1")
    assert code == 1 and "TOPIC_ALREADY_EXISTS: Topic 'clicks' already exists." in err
    code, _, err = rafka(ray_address, "topics", "--create", "--topic", "wide", "--partitions", "1",
                         "--replication-factor", "3")
    assert code == 1 and "larger than available brokers: 2" in err

    assert rafka(ray_address, "topics", "--list")[1] == "__consumer_offsets\nclicks\n"
    assert rafka(ray_address, "topics", "--list", "--exclude-internal")[1] == "clicks\n"
    code, out, _ = rafka(ray_address, "topics", "--describe", "--topic", "clicks")
    lines = out.splitlines()
    assert lines[0].startswith("Topic: clicks\tTopicId: ") and "PartitionCount: 2\tReplicationFactor: 2" in lines[0]
    assert "Configs: min.insync.replicas=2" in lines[0]
    assert [line.split("\t")[2] for line in lines[1:]] == ["Partition: 0", "Partition: 1"]
    assert all("LeaderEpoch: 0\tHighWatermark: 0" in line for line in lines[1:])

    code, out, _ = rafka(ray_address, "status")
    assert code == 0 and "brokers:           2" in out and "topics:            2 (3 partitions" in out

    assert rafka(ray_address, "topics", "--delete", "--topic", "clicks")[0] == 0
    assert rafka(ray_address, "topics", "--list", "--exclude-internal")[1] == ""
    code, out, _ = rafka(ray_address, "down")
    # the controller, 2 replicas of __consumer_offsets, 1 coordinator
    assert code == 0 and "rafka is down: 4 actor(s) stopped" in out
    assert rafka(ray_address, "status")[0] == 1
