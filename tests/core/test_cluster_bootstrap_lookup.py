"""cluster_bootstrap_servers, the bootstrap callable the cluster's own clients
hold, out of the cluster: a client left open after Ray shut down asks it again
(its metadata refresh), and it must fail as a lost node does, not start Ray."""

import pytest
import ray

from rafka.actors.controller import cluster_bootstrap_servers
from rafka.client.metadata import MetadataCache
from rafka.core.errors import NetworkException, RequestTimedOut
from rafka.protocol.network import ClientNetwork

pytestmark = pytest.mark.core


def test_out_of_the_cluster__network_exception__and_no_ray_instance_started():
    assert not ray.is_initialized()
    with pytest.raises(NetworkException, match="not connected"):
        cluster_bootstrap_servers()
    assert not ray.is_initialized()


def test_a_client_holding_it_after_shutdown__its_lookup_times_out_and_no_ray_instance_started():
    network = ClientNetwork(client_id="left-open")
    try:
        cache = MetadataCache(cluster_bootstrap_servers, network, max_wait_ms=300, retry_backoff_ms=50)
        with pytest.raises(RequestTimedOut, match="not connected"):
            cache.partition_count("orders")
        assert not ray.is_initialized()
    finally:
        network.close()
