"""rafka: Kafka's log and offset model as Ray actors.

`import rafka` stays light: `local_cluster` and `connect` import Ray on first use,
so `rafka.core` can be imported (and tested) without Ray.
"""

__version__ = "0.1.0"
__all__ = ["local_cluster", "connect", "ConsumerRebalanceListener", "ProducerRecord"]


def __getattr__(name: str):
    if name in ("local_cluster", "connect"):
        from rafka import cluster
        return getattr(cluster, name)
    if name == "ConsumerRebalanceListener":
        from rafka.client.consumer import ConsumerRebalanceListener
        return ConsumerRebalanceListener
    if name == "ProducerRecord":   # what a member actor's handler returns (run_consumer_group)
        from rafka.core.structs import ProducerRecord
        return ProducerRecord
    raise AttributeError(f"module 'rafka' has no attribute {name!r}")
