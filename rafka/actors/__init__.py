"""rafka.actors: see DESIGN.md section 1.

An actor process imports only what it serves (issue 27: every replica is a
process of its own, so every module it holds is paid once per replica). One
import is not ours to choose: kio (the wire schemas) imports hypothesis, a test
library of ~100 modules and ~8 MB, whenever it is installed, to register
strategies for its types. In a Ray worker, which runs no property tests, kio is
imported here with hypothesis hidden; a driver or a test process is left alone.
"""

import sys


def _import_kio_without_hypothesis() -> None:
    worker_module = sys.modules.get("ray._private.worker")
    if worker_module is None or "kio.static._phantom" in sys.modules or "hypothesis" in sys.modules:
        return
    if getattr(worker_module.global_worker, "mode", None) != worker_module.WORKER_MODE:
        return
    sys.modules["hypothesis"] = None   # `import hypothesis` raises ImportError: kio goes without
    try:
        import kio.static._phantom  # noqa: F401
    finally:
        del sys.modules["hypothesis"]


_import_kio_without_hypothesis()
