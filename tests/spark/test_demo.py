"""`rafka demo` (README's first command) passes end to end."""

import pytest

pytestmark = pytest.mark.spark  # the demo ends with Spark


def test_demo__orders_billing_and_revenue_scenario_passes_every_check(capsys):
    from rafka.demo import main
    assert main() == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out and "demo passed" in out
    assert out.count("[ok]") == 13
