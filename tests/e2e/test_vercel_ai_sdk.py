"""The Vercel AI SDK (`ai` + `@ai-sdk/openai-compatible`, from npm, pinned in
scripts/test-deps.sh) calling `generateText` through the gateway with its defaults.

What the SDK does, measured here (ai 7.0.173 with @ai-sdk/openai-compatible 3.0.92, and
before it ai 6.0.326 with 2.0.92, alike):
`maxRetries` defaults to 2, so one `generateText` makes up to 3 HTTP attempts. It retries
every 408, 409, 429 and 5xx (``APICallError.isRetryable``) and ignores ``x-should-retry``.
It waits ``retry-after-ms`` / ``retry-after`` when the answer names one under 60 s, else
2 s and then 4 s after each answer (exponential, factor 2, no jitter), then throws
``AI_RetryError`` ("Failed after 3 attempts"). Measured against a permanent 503: attempts sent
at 31, 2690 and 6698 ms (ai 7: 137, 2770, 6777); the first was answered after 0.65 s (the gateway's own 6 attempts,
fast backoff), the 2nd and 3rd from memory in 4 and 10 ms; 6 upstream calls in all.

So against a provider that is down, the SDK would triple the gateway's own retries. The
gateway cannot make it stop, but it answers the SDK's 2nd and 3rd attempts (identical
requests) from the loop breaker's memory: the provider sees exactly the gateway's
``1 + provider_unavailable.max_retries`` attempts, not three times that.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import FAST_RETRIES, ROOT, RunningGateway, launch_cli
from tests.fakeupstream import FakeUpstream, Reply

pytestmark = pytest.mark.e2e

SDK_DIR = ROOT / ".cache" / "ai-sdk"
SCRIPT = Path(__file__).parent / "node" / "generate_text.cjs"


def _installed() -> bool:
    return all(
        (SDK_DIR / "node_modules" / p / "package.json").exists() for p in ("ai", "@ai-sdk/openai-compatible")
    )


@pytest.fixture(scope="session")
def node() -> str:
    """node with the SDK in .cache/ai-sdk; installed here (scripts/test-deps.sh) if missing."""
    if not _installed():
        r = subprocess.run(["bash", str(ROOT / "scripts" / "test-deps.sh")], capture_output=True, text=True,
                           timeout=300, check=False)  # fmt: skip
        if not _installed():
            pytest.skip(f"!!! VERCEL AI SDK NOT TESTED: npm install into .cache/ai-sdk failed: "
                        f"{(r.stderr or r.stdout)[-800:]} !!!")  # fmt: skip
    found = shutil.which("node")
    if found is None:
        pytest.skip(
            "!!! VERCEL AI SDK NOT TESTED: node is not installed (scripts/test-deps.sh installs npm) !!!"
        )
    return found


MAX_RETRIES = 5  # FAST_RETRIES' provider_unavailable.max_retries
DOWN = Reply(503, {"error": {"message": "The server is overloaded", "type": "server_error", "code": None}})


@pytest.fixture(scope="module")
def gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Any:
    # The loop breaker is on by default; it is what this test is about.
    gw = launch_cli(fake, tmp_path_factory.mktemp("vercelgw"), FAST_RETRIES)
    yield gw
    gw.stop()


def generate_text(node: str, gw: RunningGateway, prompt: str, model: str = "gpt-4o-mini") -> dict[str, Any]:
    done = subprocess.run([node, str(SCRIPT), str(SDK_DIR), gw.base + "/v1", model, prompt],
                          capture_output=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


def test_generate_text_through_the_gateway(
    node: str, gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    out = generate_text(node, gateway, "Say hello.")
    assert out["ok"] and out["text"] == "Hello from the fake upstream.", out
    assert [a["status"] for a in out["attempts"]] == [200]
    assert out["attempts"][0]["headers"]["x-llm-attempts"] == "1"
    sent = upstream.chat_requests()
    assert len(sent) == 1 and sent[0].json()["messages"][-1]["content"] == "Say hello."
    # The access log names the client readably (its product tokens are not mistaken for keys).
    agent = sent[0].headers["User-Agent"]
    assert agent.startswith("ai/") and "provider-utils/" in agent  # ai 7: ai-sdk-provider-utils/5.x
    lines = [json.loads(t) for t in gateway.logs_when(lambda t: '"event":"request"' in t).splitlines()
             if '"event":"request"' in t]
    assert lines[-1]["user_agent"] == agent and "[redacted]" not in agent


def test_a_permanent_503_costs_the_gateways_attempts_not_three_times_them(
    node: str, gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    upstream.script(*[DOWN] * (3 * (1 + MAX_RETRIES)))  # down for as long as anyone asks
    try:
        out = generate_text(node, gateway, "Is anyone there?")
    finally:
        upstream.steps.clear()  # the fake is shared by the session
    assert not out["ok"] and out["error"]["name"] == "AI_RetryError", out
    attempts = out["attempts"]
    # The SDK made its 3 attempts regardless of x-should-retry: false ...
    assert [a["status"] for a in attempts] == [503, 503, 503]
    assert all(a["headers"]["x-should-retry"] == "false" for a in attempts)
    first, *repeats = attempts
    assert first["headers"]["x-llm-attempts"] == str(1 + MAX_RETRIES)
    # ... the 2nd and 3rd were answered from memory, without reaching the provider.
    assert [a["headers"].get("x-llm-from-memory") for a in repeats] == ["1", "2"]
    assert all(a["headers"]["x-llm-attempts"] == "0" for a in repeats)
    assert len(upstream.chat_requests()) == 1 + MAX_RETRIES  # not 3 x (1 + MAX_RETRIES)
    # The SDK's own waits between an answer and its next attempt (a given-up outage carries
    # no retry-after): 2 s, then 4 s. The repeats are answered at once.
    waits = [b["at_ms"] - a["done_ms"] for a, b in itertools.pairwise(attempts)]
    print(
        f"vercel ai sdk on a permanent 503: attempts sent at {[a['at_ms'] for a in attempts]} ms, "
        f"answered at {[a['done_ms'] for a in attempts]} ms; upstream calls {len(upstream.chat_requests())}"
    )
    assert 1900 <= waits[0] < 2600 and 3900 <= waits[1] < 4600, waits
    assert all(a["done_ms"] - a["at_ms"] < 500 for a in repeats)
