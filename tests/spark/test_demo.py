"""`rafka demo` (README's first command) passes end to end."""

import pytest

pytestmark = pytest.mark.cluster


def test_demo__orders_and_billing_scenario_passes_every_check(capsys):
    from rafka.demo import main
    assert main() == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out and "demo passed" in out
    assert out.count("[ok]") == 12
