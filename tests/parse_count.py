"""Counts the JSON parses the SSE module makes (tests of "one parse per event")."""

from __future__ import annotations

import pytest

from gateway import sse


def count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, every document ``gateway.sse`` parses is appended to the returned list."""
    parsed: list[str] = []
    real = sse.orjson.loads

    class Counting:
        JSONDecodeError = sse.orjson.JSONDecodeError

        @staticmethod
        def loads(data: str) -> object:
            parsed.append(data)
            return real(data)

    monkeypatch.setattr(sse, "orjson", Counting)
    return parsed
