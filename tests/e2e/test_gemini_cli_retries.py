"""Gemini CLI's own retry loop against a provider that fails for good (a permanent 503): the
calls one ``gemini -p`` turn costs the provider, directly and through the gateway.

Gemini CLI 0.61 as a user runs it (bench/retry_loops.py ``run_gemini_cli``): its stock model
("auto") and retry settings, only the auth settings a base URL needs. What it does on a 503
(its bundle's ``retryWithBackoff``): up to 10 attempts of a request, 5 s doubling to 30 s
apart (±30 % jitter), a 5xx always retried. With "auto" a turn is two requests of two models:
a ``:generateContent`` routing call to a flash-lite model, then, once that has given up, the
answer's ``:streamGenerateContent`` on the model the CLI falls back to.

Directly, against the fake's Gemini API (``gemini.unavailable()``, Google's 503 UNAVAILABLE),
a turn cost 15 calls over 277 s (15 over 271 s in a second run). Through the gateway (shipped
config/gateway.yaml, ``provider_unavailable.max_retries: 5``, circuit ``open_s: 30``) to a
chat-completions fake answering 503: 14 calls over 320 s. Its log: the routing model's first
request spent the gateway's 6 attempts; its repeats were answered from memory, with a
one-attempt probe when a window ended; the answer's model, asked ~70 s later, had its first
failure made final by the noted outage (1 attempt), which the still-failing turn had kept
alive; then memory and one probe per window. Before the note was the upstream's and lasted
while the turn failed, the answer's model spent 6 again (17-21 calls). Since another model's
first failure gets one retry under the note (a model that only hiccupped is answered by it),
the answer's model spends 2: 14 calls over 295 s (2026-11-30).

Minutes long: marked ``slow``; scripts/retry-loops.sh runs it.
"""

from __future__ import annotations

import pytest

from bench.retry_loops import CLIENTS, available, measure

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GATEWAY_ATTEMPTS = 6  # 1 + provider_unavailable.max_retries in config/gateway.yaml
MODELS_PER_TURN = 2  # "auto": the flash-lite routing call, then the answer's model
WINDOW_S = 30  # circuit_breaker.open_s: at most one probe per window
CLI_ATTEMPTS = 10  # Gemini CLI's DEFAULT_MAX_ATTEMPTS for the answer's request


def gemini_cli() -> object:
    client = CLIENTS["gemini-cli"]
    if not available(client):
        pytest.skip(f"!!! {client.name} NOT TESTED: not installed (bash scripts/test-deps.sh) !!!")
    return client


@pytest.mark.timeout(900)
def test_directly_gemini_cli_retries_a_503_about_ten_times_per_request() -> None:
    row = measure(gemini_cli(), "503", "direct")  # type: ignore[arg-type]
    print(f"{row.client} | 503 | direct: {row.calls} calls, {row.seconds} s")
    assert not row.ok and not row.killed, row.tail
    assert CLI_ATTEMPTS <= row.calls <= CLI_ATTEMPTS * MODELS_PER_TURN, row.tail


@pytest.mark.timeout(900)
def test_through_the_gateway_a_turn_costs_its_attempts_once_plus_one_per_other_request_and_probe_window() -> None:
    row = measure(gemini_cli(), "503", "gateway")  # type: ignore[arg-type]
    print(f"{row.client} | 503 | through the gateway: {row.calls} calls, {row.seconds} s")
    assert not row.ok and not row.killed, row.tail
    bound = GATEWAY_ATTEMPTS + (MODELS_PER_TURN - 1) + int(row.seconds // WINDOW_S)
    assert GATEWAY_ATTEMPTS <= row.calls <= bound, f"{row.calls} calls in {row.seconds} s (at most {bound})\n{row.tail}"
