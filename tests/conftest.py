"""Shared fixtures. Tier markers (core, ray, cluster, chaos, spark) are set per
module with `pytestmark`; `pytest -m core` runs the fast tier alone."""

import pytest


@pytest.fixture(scope="module")
def cluster():
    """The module's own 3-broker local cluster (started only by modules that use it)."""
    from tests.harness import embedded_cluster
    with embedded_cluster() as embedded:
        yield embedded
