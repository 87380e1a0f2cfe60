"""Spark on the Ray cluster that hosts the log, through RayDP.

`init_spark` connects to the cluster's Ray (as `local_cluster` or `connect` did),
makes executors run this interpreter's Python (so their workers import rafka and
ray), and starts RayDP's Spark with one executor per bundle of a placement group:
STRICT_SPREAD while there are no more executors than broker nodes (each on its
own node), SPREAD beyond that.

Choices made for this stack (Ray 2.60, RayDP 1.6.5, PySpark 3.5.7, JDK 17):
  fault_tolerant_mode=False: the Spark driver JVM then needs no Ray connection of
  its own; rafka never uses `ray.data.from_spark` (it crashes RayDP's Java worker
  here); reads hand Spark Arrow IPC blocks from the object store, which the
  executors fetch themselves (spark_bridge/source.py)
  the session time zone is UTC, so Kafka timestamps (UTC ms) read back unchanged
  executor memory is passed as a string ("1g"): Spark reads a bare number as MiB
  RayDP's app master actor runs on the driver's node (a custom resource of that
  node, 0 CPUs): left to Ray it may land on a broker node, and losing that
  broker then ends the Spark application, which on the driver's node it cannot
  outlive anyway
"""

from __future__ import annotations

import os
import sys
import time

import ray

from rafka.core.broker_identity import BROKER_RESOURCE

_JDK17_OPENS = " ".join(f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in (
    "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio", "java.util",
    "java.util.concurrent", "java.util.concurrent.atomic", "sun.nio.ch", "sun.nio.cs", "sun.security.action",
    "sun.util.calendar"))


def init_spark(cluster, app_name: str = "rafka", num_executors: int = 2, executor_cores: int = 1,
               executor_memory: str = "1g", *, configs: dict | None = None, ready_timeout_s: float = 120.0):
    """A SparkSession whose executors are Ray actors on the cluster's broker nodes."""
    import raydp
    from ray.util.placement_group import placement_group, remove_placement_group

    if not ray.is_initialized():
        raise RuntimeError("init_spark needs a running rafka cluster (local_cluster or connect) first")
    if isinstance(executor_memory, int):
        raise ValueError('executor_memory must be a string with a unit, e.g. "1g" (Spark reads a number as MiB)')
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    brokers = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get(BROKER_RESOURCE)]
    strategy = "STRICT_SPREAD" if num_executors <= len(brokers) else "SPREAD"
    # Each bundle holds what RayDP's executor actor asks for: its cores and its
    # memory (in bytes, from executor_memory); without the memory it never fits.
    bundle = {"CPU": executor_cores, "memory": _memory_bytes(executor_memory), BROKER_RESOURCE: 0.001}
    group = placement_group([dict(bundle) for _ in range(num_executors)], strategy=strategy,
                            name=f"rafka:spark:{app_name}")
    ready, _ = ray.wait([group.ready()], timeout=ready_timeout_s)
    if not ready:
        remove_placement_group(group)
        raise TimeoutError(f"{num_executors} executor bundles of {bundle} could not be placed "
                           f"({strategy}) in {ready_timeout_s}s")
    settings = {"spark.sql.session.timeZone": "UTC",
                "spark.driver.extraJavaOptions": _JDK17_OPENS,
                "spark.executor.extraJavaOptions": _JDK17_OPENS,
                "spark.ray.raydp_app_master.extraJavaOptions": _JDK17_OPENS,
                "spark.sql.execution.arrow.pyspark.enabled": "true",
                **_app_master_on_this_node(),
                **(configs or {})}
    spark = raydp.init_spark(app_name, num_executors, executor_cores, executor_memory,
                             fault_tolerant_mode=False, placement_group=group,
                             placement_group_bundle_indexes=list(range(num_executors)), configs=settings)
    deadline = time.monotonic() + ready_timeout_s
    while _registered_executors(spark) < num_executors:   # fail loudly instead of a job that never starts
        if time.monotonic() > deadline:
            stop_spark()
            raise TimeoutError(f"only {_registered_executors(spark)} of {num_executors} Spark executors "
                               f"registered in {ready_timeout_s}s")
        time.sleep(0.2)
    return spark


def _app_master_on_this_node() -> dict[str, str]:
    """RayDP's settings that place its app master (a Python actor starting the
    Java one) on the driver's node: the head node's resource when the driver
    runs there, else the node's address resource (one per host)."""
    from ray._common.constants import HEAD_NODE_RESOURCE_NAME
    here = ray.get_runtime_context().get_node_id()
    (node,) = [n for n in ray.nodes() if n["NodeID"] == here]
    resource = (HEAD_NODE_RESOURCE_NAME if HEAD_NODE_RESOURCE_NAME in node["Resources"]
                else f"node:{node['NodeManagerAddress']}")
    prefix = "spark.ray.raydp_spark_master.actor.resource."
    return {prefix + "CPU": "0", prefix + resource: "0.001"}


def _registered_executors(spark) -> int:
    # the driver's block manager counts as one
    return spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1


def _memory_bytes(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    text = text.strip().lower().removesuffix("b")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text) << 20   # Spark's default unit for executor memory is MiB


def stop_spark() -> None:
    """Stops Spark and its executors, and removes their placement group."""
    import raydp
    from ray.util.placement_group import placement_group_table, remove_placement_group

    from rafka.spark_bridge.source import release_all

    raydp.stop_spark()
    release_all()
    for group in placement_group_table().values():
        if group.get("name", "").startswith("rafka:spark:") and group.get("state") != "REMOVED":
            remove_placement_group(ray.util.get_placement_group(group["name"]))


def session_nodes(spark) -> set[str]:
    """The Ray node ids whose loss takes the session's executors down: the nodes
    they run on, and the nodes of their owners, up the chain (RayDP's app master
    actor owns them; the Java driver process RayDP starts for it owns that). Ray
    destroys the actors a dead node's workers own. The app master actor and its
    Java driver run on the driver's node, but the Java driver attaches to the
    first live Ray node with its host's address in the GCS's order (Ray's C++
    GetNodeToConnectForDriver, which has no preference for the head node as
    Python drivers have): on a `local_cluster`, whose nodes share one address, that
    can be any broker's node, and removing that node ends the session. Tests and
    tools that remove a node while Spark runs pick one outside this set."""
    from ray._private.state import actors
    live = [info for info in actors().values() if info.get("State") == "ALIVE"]
    by_address = {(info["Address"]["IPAddress"], info["Address"]["Port"]): info for info in live}
    pending = [info for info in live if _is_executor(info)]
    nodes, seen = set(), set()
    while pending:
        info = pending.pop()
        owner = info["OwnerAddress"]
        nodes |= {info["Address"]["NodeID"], owner["NodeID"]}
        key = (owner["IPAddress"], owner["Port"])
        if key in by_address and key not in seen:   # an owner that is an actor: its owner too
            seen.add(key)
            pending.append(by_address[key])
    return nodes


def executor_nodes(spark) -> set[str]:
    """The Ray node ids the session's executors (RayDP's Java actors) run on. Read
    from the GCS actor table (`ray._private.state`): the public state API needs
    the dashboard, which rafka's embedded cluster does not start."""
    from ray._private.state import actors
    return {info["Address"]["NodeID"] for info in actors().values()
            if info.get("State") == "ALIVE" and _is_executor(info)}


def _is_executor(info: dict) -> bool:
    """Whether a GCS actor-table entry is one of RayDP's executors."""
    return (info.get("Name") or "").startswith("raydp-executor")
