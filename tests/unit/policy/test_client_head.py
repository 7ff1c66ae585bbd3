"""Which clients stop waiting for a response head before the gateway's timeouts, read from the
captured requests' own headers (tests/corpus/requests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from multidict import CIMultiDict

from gateway.policy.clients import client_head_s

REQUESTS = Path(__file__).parents[2] / "corpus" / "requests"


def headers_of(name: str) -> CIMultiDict[str]:
    return CIMultiDict(json.loads((REQUESTS / name).read_text())["headers"])


@pytest.mark.parametrize("name", ["gemini-cli-0.61-first.json", "gemini-cli-0.61-route.json"])
def test_gemini_cli_is_answered_within_its_60_s_less_a_margin(name: str) -> None:
    assert client_head_s(headers_of(name)) == 57.0


@pytest.mark.parametrize("name", [
    "claude-code-2.1.332-bash-result.json", "codex-0.171-lite-exec-result.json",
    "genai-3.6-count-tokens.json", "agents-sdk-0.24-first.json",
])  # fmt: skip
def test_clients_that_wait_as_long_as_the_gateway_set_no_bound(name: str) -> None:
    assert client_head_s(headers_of(name)) is None
