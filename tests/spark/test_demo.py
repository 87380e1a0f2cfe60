"""`rafka demo` (README's first command) passes end to end, and prints only its
own lines: Ray's and Spark's go to the log file its last line names."""

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark  # the demo ends with Spark

# Every line the demo prints is one of these: its title, a step's heading, an
# indented result or check, a blank line between steps, the verdict, the logs' place.
OWN_LINE = re.compile(r"^(rafka demo: .*|\d\. .*|  .*|demo passed in [\d.]+ s|logs: .*|)$")
DEMO_LINES = 52


def test_demo__every_check_passes_and_only_rafkas_lines_are_printed():
    done = subprocess.run([sys.executable, "-m", "rafka.cli", "demo"], capture_output=True, text=True,
                          timeout=900, env=dict(os.environ, PYTHONWARNINGS="default"))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "FAILED" not in done.stdout and "demo passed" in done.stdout
    assert done.stdout.count("[ok]") == 13
    assert done.stderr == ""
    assert [line for line in lines if not OWN_LINE.match(line)] == []
    assert len(lines) == DEMO_LINES, done.stdout
    logs = re.search(r"this process's Ray and Spark output: ([^;\s]+)", lines[-1]).group(1)
    assert os.path.getsize(logs) > 0   # what would have been printed went there
