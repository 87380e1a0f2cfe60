"""The controller's control-plane calls as plain blocking calls: what the Admin
(client.admin) is handed, as it never imports Ray (DESIGN section 1: whatever a
client needs from the cluster is handed to it).

Invariants: each call blocks until its answer (`ray.get`) and raises what the
call raised (Ray's task error, which is also the KafkaError behind it); calls
made together (`call_each`, `describe_replicas`) are all sent before the first
answer is awaited; `login` is the cluster credential (actors.cluster_credential),
which the Admin's network logs in with.

Callers: rafka.cluster (`Cluster.admin()`), tests.
"""

from __future__ import annotations

from typing import Any

import ray

from rafka.actors.cluster_credential import cluster_login
from rafka.actors.replica import UNASSIGNED
from rafka.core.actor_names import NAMESPACE


class ControllerCalls:
    """`controller`: the controller actor's handle."""

    login = staticmethod(cluster_login)

    def __init__(self, controller) -> None:
        self.controller = controller

    def call(self, method: str, *args) -> Any:
        """The controller's answer to `method(*args)`."""
        return ray.get(getattr(self.controller, method).remote(*args))

    def call_each(self, method: str, args_by_key: dict) -> dict:
        """{key: the answer to `method(*args)`}, every call sent at once."""
        refs = {key: getattr(self.controller, method).remote(*args) for key, args in args_by_key.items()}
        return {key: ray.get(ref) for key, ref in refs.items()}

    def describe_replicas(self, replicas: dict[tuple[str, int, int], str | None], *, timeout_s: float) -> dict:
        """{(topic, partition, replica id): the `describe()` of its actor (`replicas`
        names it, as the metadata snapshot's partitions do), or None where it has
        none, is not registered (being re-created), dead, restarting, holds no
        replica yet, or did not answer within `timeout_s`}: every replica asked at
        once, one wait for all."""
        asked = {}
        for key, actor in replicas.items():
            if actor is None:
                continue
            try:
                asked[key] = ray.get_actor(actor, namespace=NAMESPACE).describe.remote()
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
            if answers[key] is not None and answers[key]["role"] == UNASSIGNED:   # recreated, not told yet
                answers[key] = None
        return answers
