import subprocess
import sys

import pytest

pytestmark = pytest.mark.core


def test_import_rafka_core__loads_no_ray_module():
    code = ("import sys, rafka.core, rafka.core.log, rafka.core.records, rafka.core.config;"
            "bad = sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.'));"
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
