"""The request id the gateway makes when the client sent none (or none it accepts)."""

import random

import pytest

from gateway.pipeline import observe


class NoHeaders:
    def __init__(self) -> None:
        self.headers: dict[str, str] = {}


@pytest.mark.parametrize("bits", [0, 5, 2**127 + 12345, 2**128 - 1])
def test_a_made_id_is_128_bits_as_32_lowercase_hex_digits(monkeypatch: pytest.MonkeyPatch, bits: int) -> None:
    monkeypatch.setattr(random, "getrandbits", lambda n: bits)
    assert observe.request_id_of(NoHeaders()) == f"{bits:032x}"  # type: ignore[arg-type]


def test_the_duration_in_the_log_is_milliseconds_to_two_decimals() -> None:
    # The access line's duration_ms and ttfb_ms: round(s * 100_000) / 100, not round(s * 1000, 2)
    # (half the cost); the same numbers but on exact halves.
    r = random.Random(38)
    for _ in range(20_000):
        s = r.random() * r.choice([0.001, 0.1, 1.0, 60.0, 3600.0])
        assert round(s * 100_000) / 100 == round(s * 1000, 2)
