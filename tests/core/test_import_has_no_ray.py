"""`rafka.core` imports nothing from Ray (STYLE.md, rule 1). Every module of the
package, found with pkgutil (so a new module is covered without editing this
file), is imported alone in a fresh interpreter: one module pulling Ray in cannot
hide behind another that was imported first. The interpreters run side by side."""

import pkgutil
import subprocess
import sys

import pytest

import rafka.core

pytestmark = pytest.mark.core

CORE_MODULES = ["rafka.core"] + sorted(
    m.name for m in pkgutil.walk_packages(rafka.core.__path__, prefix="rafka.core."))
CHECK = ("import importlib, sys; importlib.import_module(sys.argv[1]);"
         "bad = sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.'));"
         "print(bad[:5]); sys.exit(1 if bad else 0)")


def ray_importers(modules: list[str]) -> dict[str, str]:
    """{module: what it printed} for each module whose import alone loads Ray."""
    running = {m: subprocess.Popen([sys.executable, "-c", CHECK, m], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True) for m in modules}
    outputs = {m: p.communicate(timeout=120)[0] for m, p in running.items()}
    return {m: outputs[m] for m, p in running.items() if p.returncode != 0}


def test_import_each_rafka_core_module_alone__loads_no_ray_module():
    assert {"rafka.core.log", "rafka.core.records", "rafka.core.config"} <= set(CORE_MODULES)
    assert ray_importers(CORE_MODULES) == {}


def test_the_check__catches_a_module_that_imports_ray():
    assert set(ray_importers(["rafka.core.log", "rafka.client.admin"])) == {"rafka.client.admin"}
