"""Admin: topics, as kafka-topics.sh offers them (driver side)."""

from __future__ import annotations

import ray

from rafka.actors.replica import NAMESPACE, replica_actor_name


class Admin:
    def __init__(self, controller) -> None:
        self._controller = controller

    def create_topic(self, name: str, *, partitions: int = 1, replication_factor: int = 1,
                     config: dict | None = None) -> dict:
        return ray.get(self._controller.create_topic.remote(name, partitions, replication_factor, config))

    def delete_topic(self, name: str) -> None:
        ray.get(self._controller.delete_topic.remote(name))

    def list_topics(self) -> list[str]:
        return ray.get(self._controller.list_topics.remote())

    def describe_topics(self, names: list[str] | None = None, *, timeout_s: float = 5.0) -> dict[str, dict]:
        """Per partition: leader (replica index and node), leader epoch, replicas, ISR,
        log start offset, HW, and each live replica's LEO (None when unreachable)."""
        snapshot = ray.get(self._controller.metadata_snapshot.remote())["topics"]
        if names is not None:
            from rafka.core.errors import UnknownTopicOrPartition
            missing = [n for n in names if n not in snapshot]
            if missing:
                raise UnknownTopicOrPartition(f"Topic '{missing[0]}' does not exist.")
            snapshot = {n: snapshot[n] for n in names}
        # Ask every replica at once (one wait for all, not a ray.get per replica).
        asked = {}
        for name, topic in snapshot.items():
            for p in topic["partitions"]:
                for replica_id in p["replicas"]:
                    try:
                        handle = ray.get_actor(replica_actor_name(name, p["partition"], replica_id),
                                               namespace=NAMESPACE)
                        asked[(name, p["partition"], replica_id)] = handle.describe.remote()
                    except ValueError:  # not registered (being re-created)
                        pass
        ready, _ = ray.wait(list(asked.values()), num_returns=len(asked), timeout=timeout_s)
        ready = set(ready)
        answers = {}
        for key, ref in asked.items():
            try:
                answers[key] = ray.get(ref) if ref in ready else None
            except Exception:  # dead or restarting: reported as unknown
                answers[key] = None
        for name, topic in snapshot.items():
            for p in topic["partitions"]:
                states = {r: answers.get((name, p["partition"], r)) for r in p["replicas"]}
                leader_state = states.get(p["leader"])
                p["leader_node"] = leader_state["node_id"] if leader_state else None
                p["log_start_offset"] = leader_state["log_start_offset"] if leader_state else None
                p["high_watermark"] = leader_state["high_watermark"] if leader_state else None
                p["log_end_offsets"] = {r: (s["log_end_offset"] if s else None) for r, s in states.items()}
                p["replica_nodes"] = {r: (s["node_id"] if s else None) for r, s in states.items()}
        return snapshot
