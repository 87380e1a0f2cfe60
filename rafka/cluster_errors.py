"""Errors of the entry points that are not Kafka protocol errors (no Ray import)."""


class NotRunning(Exception):
    """`rafka.connect` found a Ray cluster on which `rafka up` has not run."""


class UsageError(Exception):
    """A `rafka` command line that names no valid action or misses an argument."""
