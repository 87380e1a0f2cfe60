"""rafka: Kafka's log and offset model as Ray actors.

`import rafka` stays light: the Ray-backed entry points load on first use, so
`rafka.core` can be imported (and tested) without Ray.
"""

__version__ = "0.1.0"
