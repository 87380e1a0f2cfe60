"""Broker identity on disk (meta.properties) and partition.metadata (KIP-516)."""

import random

import pytest

from rafka.core.broker_identity import (META_PROPERTIES, PARTITION_METADATA, broker_log_dir,
                                        claim_partition_directory, ensure_identity, identity_in_data_dir,
                                        read_identity)
from rafka.core.errors import InconsistentBrokerId, InconsistentClusterId, InvalidConfig

pytestmark = pytest.mark.core


def test_first_start__identity_written__later_starts_read_the_same(tmp_path):
    log_dir = broker_log_dir(tmp_path, 2)
    created = ensure_identity(log_dir, broker_id=2)
    assert (created.broker_id, created.cluster_id) == (2, None)
    assert ensure_identity(log_dir, broker_id=2, cluster_id="abc").cluster_id == "abc"   # taken once known
    again = read_identity(log_dir)
    assert (again.broker_id, again.cluster_id) == (2, "abc")
    assert "broker.id=2" in (log_dir / META_PROPERTIES).read_text()


@pytest.mark.parametrize("broker_id, cluster_id, error", [
    (3, "abc", InconsistentBrokerId),       # the disk of broker 2 mounted as broker 3
    (2, "other", InconsistentClusterId),    # the disk of another cluster
])
def test_log_dir_of_another_broker_or_cluster__typed_error_and_nothing_touched(tmp_path, broker_id, cluster_id, error):
    log_dir = broker_log_dir(tmp_path, 2)
    ensure_identity(log_dir, broker_id=2, cluster_id="abc")
    (log_dir / "orders-0").mkdir()
    before = {p.name: p.read_bytes() for p in log_dir.iterdir() if p.is_file()}
    with pytest.raises(error):
        ensure_identity(log_dir, broker_id=broker_id, cluster_id=cluster_id)
    assert {p.name: p.read_bytes() for p in log_dir.iterdir() if p.is_file()} == before
    assert sorted(p.name for p in log_dir.iterdir()) == [META_PROPERTIES, "orders-0"]


@pytest.mark.parametrize("broker_id", [-1, True, "1", 2 ** 31])
def test_broker_id_out_of_range__invalid_config(tmp_path, broker_id):
    with pytest.raises(InvalidConfig):
        ensure_identity(tmp_path / "x", broker_id=broker_id)
    assert not (tmp_path / "x").exists()


def test_broker_id_command__generated_above_reserved_range_and_stable(tmp_path):
    first = identity_in_data_dir(tmp_path, rng=random.Random(7))
    assert first.broker_id > 1000 and first.log_dir == broker_log_dir(tmp_path, first.broker_id)
    assert identity_in_data_dir(tmp_path).broker_id == first.broker_id
    assert identity_in_data_dir(tmp_path, broker_id=first.broker_id).broker_id == first.broker_id
    with pytest.raises(InconsistentBrokerId):
        identity_in_data_dir(tmp_path, broker_id=5)     # this host already is another broker
    assert [p.name for p in tmp_path.iterdir()] == [f"broker-{first.broker_id}"]


def test_partition_metadata__recreated_topic_never_reopens_the_old_log(tmp_path):
    directory = tmp_path / "orders-0"
    assert claim_partition_directory(directory, "id-1") is None
    (directory / "00000000000000000000.log").write_bytes(b"old records")
    assert claim_partition_directory(directory, "id-1") is None          # same topic: kept
    assert (directory / "00000000000000000000.log").exists()
    stray = claim_partition_directory(directory, "id-2")                 # deleted and re-created
    assert stray == tmp_path / "orders-0.id-1-stray"
    assert (stray / "00000000000000000000.log").read_bytes() == b"old records"
    assert sorted(p.name for p in directory.iterdir()) == [PARTITION_METADATA]
    assert "topic_id: id-2" in (directory / PARTITION_METADATA).read_text()
