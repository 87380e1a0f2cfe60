"""The spark tier's shared fixture: one Spark session (RayDP, 2 executors of 1
core on different broker nodes) per module, on the module's `cluster`."""

import pytest


@pytest.fixture(scope="module")
def spark(cluster):
    from rafka.spark_bridge import init_spark, stop_spark
    session = init_spark(cluster, "rafka-tests", num_executors=2, executor_cores=1, executor_memory="512m")
    yield session
    stop_spark()
