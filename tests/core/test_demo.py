import pytest

from rafka.demo import run_demo

pytestmark = pytest.mark.core


def test_demo__storage_scenario_passes(capsys):
    assert run_demo() == 0
    assert "demo passed" in capsys.readouterr().out
