"""Pure logic of rafka: records, the partition log, config, errors, clocks.

Nothing under rafka.core imports ray: it runs and is tested without a cluster,
and the Ray actors are thin shells around it.
"""
