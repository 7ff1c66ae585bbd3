"""Stock clients' own retry loops through the gateway, against a provider that fails for good:
the calls one client turn costs the provider, held to the rule of docs/errors/loop-breaker.md:
the gateway's own attempts once per turn, one attempt for each other request of the turn, plus
at most one probe per window (the circuit's ``open_s``, 30 s, for an outage; the 60 s cap for a
long rate limit), whatever the client's backoff.

Nothing is shrunk: each client runs at its defaults (no retry settings or variables, its
default model; Claude Code also with ``--model claude-sonnet-4-5``, which retries a 529 for
about three minutes), the gateway with the shipped config/gateway.yaml (``first_byte_s``
shortened for the first-byte timeout case only). The harness is bench/retry_loops.py, which
also prints the direct-versus-gateway table in docs/errors/loop-breaker.md.

Most runs take minutes: they are marked ``slow`` and left out of ``make test``;
``scripts/retry-loops.sh`` runs them all. The fast, telling ones run in ``make test``.
Wall times are printed, not asserted (timing belongs to bench/).
"""

from __future__ import annotations

import pytest

from bench.retry_loops import CLIENTS, SHORT, Row, available, measure

pytestmark = pytest.mark.e2e

# The shipped config: provider_unavailable.max_retries 5; a 429 whose wait is over
# max_retry_after_s goes back at once; circuit_breaker.open_s 30; loop_breaker.max_window_s 60.
GATEWAY_ATTEMPTS = {"503": 6, "down": 6, "timeout": 6, "429": 1}
WINDOW_S = {"503": 30, "down": 30, "timeout": 30, "429": 60}
# Different requests one turn sends (measured): opencode asks for a title alongside the answer.
REQUESTS_PER_TURN = {"opencode": 2}


def readme_bound(short: str, failure: str, seconds: float) -> int:
    """The most calls docs/errors/loop-breaker.md allows for one turn that lasted ``seconds``: the gateway's own
    attempts once, one attempt for each other request of the turn, one probe per window."""
    others = REQUESTS_PER_TURN.get(short, 1) - 1
    return GATEWAY_ATTEMPTS[failure] + others + int(seconds // WINDOW_S[failure])


FAST = [  # each well under a minute through the gateway
    ("codex", "503"),
    ("claude", "503"),
    ("opencode", "503"),
    ("ai-sdk", "429"),
]
# Gemini CLI's turn is two requests of two models: its own bound, in test_gemini_cli_retries.py.
SLOW = [(c, f) for c in SHORT if c != "gemini" for f in ("503", "down", "429", "timeout") if (c, f) not in FAST]


def run(short: str, failure: str) -> Row:
    client = CLIENTS[SHORT[short]]
    if not available(client):
        pytest.skip(f"!!! {client.name} NOT TESTED: not installed (bash scripts/test-deps.sh) !!!")
    # A client that honours the provider's hour-long retry-after sleeps it out after one call
    # (Codex, opencode): 150 s of that show as much as the hour.
    row = measure(client, failure, "gateway", **({"cap_s": 150.0} if failure == "429" else {}))
    print(f"{row.client} | {failure} | through the gateway: {row.calls} calls, {row.seconds} s")
    return row


def check(row: Row, short: str, failure: str) -> None:
    # Sleeping out the hour-long retry-after it was told, after one call per request.
    waiting = failure == "429" and row.calls <= REQUESTS_PER_TURN.get(short, 1)
    assert not row.killed or waiting, f"{row.client} was still retrying after {row.seconds} s:\n{row.tail}"
    assert not row.ok, row.tail  # the provider never answered: the turn must end in an error
    bound = readme_bound(short, failure, row.seconds)
    assert GATEWAY_ATTEMPTS[failure] <= row.calls <= bound, (
        f"{row.client}, {failure}: {row.calls} upstream calls in {row.seconds} s (docs/errors/loop-breaker.md: at most {bound})\n{row.tail}"
    )


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("short", "failure"), FAST)
def test_one_turn_costs_the_gateways_attempts_once(short: str, failure: str) -> None:
    row = run(short, failure)
    check(row, short, failure)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("short", "failure"), SLOW)
def test_one_turn_costs_the_gateways_attempts_once_whatever_the_backoff(short: str, failure: str) -> None:
    row = run(short, failure)
    check(row, short, failure)
