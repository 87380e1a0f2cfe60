"""Micro-batch streaming as a consumer group: the process running the stream is
killed between writing a batch's output and committing it; the restarted stream
re-runs that batch under the same id, so the Parquet output holds every record
exactly once. The stream's processes start their own Spark; this one does not."""

import os
import subprocess
import sys

import pytest
import pyarrow.dataset

from rafka.core.structs import TopicPartition

pytestmark = [pytest.mark.spark, pytest.mark.shares_cluster]


def run_stream(cluster, output, *, crash: bool):
    env = dict(os.environ, RAY_ADDRESS=cluster.ray_cluster.address, CRASH_AFTER_WRITE="1" if crash else "0")
    return subprocess.run([sys.executable, "-m", "tests.spark.stream_job", "events", "sessionizer", str(output),
                           "40"], env=env, capture_output=True, text=True, timeout=600)


def test_stream__killed_between_write_and_commit__parquet_holds_every_record_exactly_once(cluster, tmp_path):
    admin = cluster.admin()
    admin.create_topic("events", partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})
    with cluster.producer(acks="all") as producer:
        for i in range(100):
            producer.send("events", value=b"event-%03d" % i, partition=i % 2)
        producer.flush()
    output = tmp_path / "out"
    crashed = run_stream(cluster, output, crash=True)
    assert crashed.returncode == 17, crashed.stderr[-3000:]
    assert crashed.stdout.count("wrote batch") == 1
    # the batch's output is there, its offsets are not committed: the plan is
    assert sum(admin.list_consumer_group_offsets("sessionizer").values()) == 0
    with cluster.producer(acks="all") as producer:   # the HW moves on before the restart
        for i in range(100, 130):
            producer.send("events", value=b"event-%03d" % i, partition=i % 2)
        producer.flush()
    finished = run_stream(cluster, output, crash=False)
    assert finished.returncode == 0, finished.stderr[-3000:]
    first_batch = crashed.stdout.split()[2]
    assert f"wrote batch {first_batch}" in finished.stdout   # re-run under the same id
    table = pyarrow.dataset.dataset(str(output), format="parquet", partitioning="hive").to_table()
    values = sorted(table.column("value").to_pylist())
    assert values == [b"event-%03d" % i for i in range(130)]   # each once
    lag = {(r["topic"], r["partition"]): r["lag"] for r in admin.consumer_group_lag("sessionizer")}
    assert lag == {("events", 0): 0, ("events", 1): 0}
    assert admin.list_consumer_group_offsets("sessionizer") == {TopicPartition("events", 0): 65,
                                                                TopicPartition("events", 1): 65}
