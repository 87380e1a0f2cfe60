"""Shared fixtures. Tier markers (core, ray, cluster, chaos, spark) are set per
module with `pytestmark`; `pytest -m core` runs the fast tier alone."""

import os

import pytest
from hypothesis import settings

# CI runs each property on hypothesis's fixed example sequence, so a landing is never
# blocked by a new random case; runs on a developer's machine keep exploring (and a
# failure found there becomes an explicit @example).
# No deadline: a property asserts behaviour, not speed (on this 2-core machine a
# case timed out while other test runs shared the cores, a failure of nothing).
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", parent=settings.get_profile("dev"), derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(scope="module")
def cluster():
    """The module's own 3-broker local cluster (started only by modules that use it)."""
    from tests.harness import embedded_cluster
    with embedded_cluster() as embedded:
        yield embedded
