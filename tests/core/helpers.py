"""Builders shared by the core tests."""

from __future__ import annotations

from rafka.core.records import RecordInput, encode_batch


def batch(*values: bytes, key: bytes | None = b"k", timestamp_ms: int = 1_000) -> bytes:
    return encode_batch([RecordInput(v, key, timestamp_ms) for v in values])


def keyed_batch(pairs, timestamp_ms: int = 1_000) -> bytes:
    return encode_batch([RecordInput(v, k, timestamp_ms) for k, v in pairs])


def assign_shells(metadata, topic: str) -> list[dict]:
    """Records giving each replica of `topic` that has no actor a shell of its
    broker (`replica:b<broker>:1-<n>`, as a controller of epoch 1 names them),
    replayed into `metadata`, as the controller commits them with the topic."""
    from rafka.core.actor_names import replica_shell_name
    found = metadata.topic(topic)
    made = len(metadata.actor_replicas)
    actors = {}
    for p, state in enumerate(found.partitions):
        for r in state.replicas:
            if metadata.replica_actor(topic, p, r) is None:
                made += 1
                actors[p, r] = replica_shell_name(state.broker_of(r), 1, made)
    records = metadata.handle_assign_replica_actors(found, actors)
    for record in records:
        metadata.replay(record)
    return records


def orders_image():
    """The image of a one-broker cluster holding `orders` (2 partitions, RF 1),
    for fake hosts that answer `image()`."""
    import random
    from rafka.core.cluster_image import build_image
    from rafka.core.metadata import ClusterMetadata
    state = ClusterMetadata()
    for record in state.handle_start() + state.handle_create_topic("orders", 2, 1, None, [0],
                                                                  rng=random.Random(0))[0]:
        state.replay(record)
    return build_image(state, version=1)
