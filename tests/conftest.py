"""Shared fixtures. Tier markers (core, ray, cluster, chaos, spark) are set per
module with `pytestmark`; `pytest -m core` runs the fast tier alone."""

import collections
import os
import time

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


# Wall time per module (its tests with their setup and teardown, module fixtures
# included), printed after the run: the suite has a 40-minute budget on a 2-core
# machine, and this says where it goes.
_module_seconds: collections.Counter = collections.Counter()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    started_s = time.monotonic()
    yield
    _module_seconds[item.nodeid.split("::", 1)[0]] += time.monotonic() - started_s


def pytest_terminal_summary(terminalreporter):
    if not _module_seconds:
        return
    terminalreporter.section("wall time per module (s), slowest first")
    for module, seconds in _module_seconds.most_common(40):
        terminalreporter.write_line(f"{seconds:8.1f}  {module}")
