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
def cluster(request):
    """A 3-broker local cluster (started only by modules that use it): the module's
    own, or, for a module marked `shares_cluster`, the one such modules share. A
    shared cluster is started by the first of them and stopped after the last
    (the collection puts them together); each module leaves it without topics of
    its own, so the next starts as on a new cluster but for its groups, quotas,
    ACLs and users (a sharing module leaves none of those that could change
    another's answers). Starting and stopping a cluster costs about 17 s on the
    2-core machine: the suite's 40-minute budget is why they share."""
    if request.node.get_closest_marker("shares_cluster") is None:
        from tests.harness import embedded_cluster
        with embedded_cluster() as embedded:
            yield embedded
        return
    embedded = _shared_cluster.open()
    yield embedded
    _shared_cluster.clear_topics()


class _SharedCluster:
    def __init__(self) -> None:
        self._context = None
        self.cluster = None

    def open(self):
        if self.cluster is None:
            from tests.harness import embedded_cluster
            self._context = embedded_cluster()
            self.cluster = self._context.__enter__()
        return self.cluster

    def clear_topics(self) -> None:
        """Every topic but the internal ones deleted (their replica actors stopped);
        nothing if the cluster is already stopped (an interrupted run)."""
        if self.cluster is None:
            return
        admin = self.cluster.admin()
        for topic in admin.list_topics():
            if not topic.startswith("__"):
                admin.delete_topic(topic)

    def close(self) -> None:
        if self.cluster is not None:
            context, self._context, self.cluster = self._context, None, None
            context.__exit__(None, None, None)


_shared_cluster = _SharedCluster()


def pytest_collection_modifyitems(config, items):
    """The modules sharing a cluster run one after another, where the first of them
    would have run; the others keep their order."""
    sharing = [item for item in items if item.get_closest_marker("shares_cluster")]
    if sharing:
        first = items.index(sharing[0])
        others = [item for item in items if not item.get_closest_marker("shares_cluster")]
        items[:] = others[:first] + sharing + others[first:]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """The shared cluster stops after the last module sharing it (its module
    fixtures torn down first): the next module may start a Ray cluster of its own."""
    yield
    if nextitem is None or nextitem.get_closest_marker("shares_cluster") is None:
        _shared_cluster.close()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    """An interrupted run's shared cluster: stopped after the modules' own teardowns."""
    _shared_cluster.close()


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
