"""How a budget's dollars read in a refusal: cents, and the digits below a cent that show a
small agent budget (it read "spent $0.00 of its $0.00 daily budget")."""

from __future__ import annotations

import pytest

from gateway.keys.ledger import usd


@pytest.mark.parametrize(("amount", "shown"), [
    (0, "$0.00"), (0.01, "$0.01"), (0.0101, "$0.01"), (1234.5, "$1,234.50"), (30, "$30.00"),
    (0.00001, "$0.00001"), (0.0049, "$0.0049"), (0.005, "$0.005"), (0.0000001, "$0.00"),
])  # fmt: skip
def test_dollars_as_shown(amount: float, shown: str) -> None:
    assert usd(amount) == shown
