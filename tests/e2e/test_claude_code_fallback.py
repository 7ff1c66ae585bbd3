"""A chain that crosses APIs, with Claude Code itself: its Anthropic upstream is down (529 on
every request), the gateway falls over to a chat-completions-only upstream serving another
model, and Claude Code prints that upstream's answer as if nothing happened. The
defaults otherwise (retries, fallback rules), stock Claude Code."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import RunningGateway, base_env, free_port, start
from tests.e2e.test_claude_code import claude_bin, run_claude, workdir  # noqa: F401 (fixtures)
from tests.fakeupstream import FakeUpstream, Reply, Stream, anthropic_error, chunk

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream.in_thread() as anthropic, FakeUpstream.in_thread() as local:
        yield anthropic, local


@pytest.fixture(scope="module")
def chain_gateway(pair: tuple[FakeUpstream, FakeUpstream],
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:  # fmt: skip
    anthropic, local = pair
    tmp = tmp_path_factory.mktemp("ccchain")
    port = free_port()
    config = tmp / "gateway.yaml"
    config.write_text(
        f"server: {{port: {port}, drain_s: 2}}\n"
        "upstreams:\n"
        f"  - {{name: anthropic, base_url: '{anthropic.url}', apis: [messages], models: ['claude-*'],"
        " fallbacks: [local]}\n"
        f"  - {{name: local, base_url: '{local.url}', apis: [chat], model_map: {{'*': qwen3-coder}}}}\n"
    )
    gw = start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp / "gateway.log")
    yield gw
    gw.stop()


def test_claude_code_prints_the_chat_fallbacks_answer_when_its_anthropic_upstream_is_down(
    claude_bin: Path, chain_gateway: RunningGateway, pair: tuple[FakeUpstream, FakeUpstream], workdir: Path,  # noqa: F811
) -> None:
    anthropic, local = pair
    anthropic.always = anthropic_error(529, "overloaded_error", "Overloaded")
    words = ["The ", "fallback ", "answered."]
    local.always = Stream([chunk({"role": "assistant", "content": ""}, model="qwen3-coder"),
                           *[chunk({"content": w}, model="qwen3-coder") for w in words],
                           chunk({}, "stop", model="qwen3-coder")])  # fmt: skip
    r = run_claude(claude_bin, chain_gateway, workdir, "say something", timeout=120)
    assert r.rc == 0, (r.out, r.err)
    assert "The fallback answered." in r.out
    sent = [req.json() for req in local.chat_requests()]
    assert sent and all(s["model"] == "qwen3-coder" for s in sent)  # the fallback's own model name
    assert not local.messages_requests()  # the chat upstream was only ever asked in chat
    # One first attempt and fallback.retries_per_upstream (1) retry on the primary per turn.
    turns = len(sent)
    assert len(anthropic.messages_requests()) == 2 * turns, (len(anthropic.messages_requests()), turns)
    print(f"\nClaude Code through a crossing chain: {turns} turn(s), "
          f"{len(anthropic.messages_requests())} calls to the dead Anthropic upstream, {len(sent)} to the chat one")


def test_the_chain_skips_an_open_circuit_and_goes_straight_to_the_chat_fallback(
    chain_gateway: RunningGateway, pair: tuple[FakeUpstream, FakeUpstream],
) -> None:
    """After enough failed turns the primary's circuit opens and later turns cost it nothing."""
    import urllib.request

    anthropic, local = pair
    anthropic.always = anthropic_error(529, "overloaded_error", "Overloaded")
    local.always = Reply(200, {"id": "c1", "object": "chat.completion", "created": 0, "model": "qwen3-coder",
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": "ok"}}],
                               "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})  # fmt: skip
    statuses = []
    for i in range(8):
        body = json.dumps({"model": "claude-opus-4-8", "max_tokens": 16,
                           "messages": [{"role": "user", "content": f"turn {i}"}]}).encode()
        req = urllib.request.Request(chain_gateway.base + "/v1/messages", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "anthropic-version": "2023-06-01"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            statuses.append((resp.status, resp.headers["x-llm-upstream"], json.loads(resp.read())["content"][0]["text"]))
    assert all(s == (200, "local", "ok") for s in statuses), statuses
    before = len(anthropic.messages_requests())
    body = json.dumps({"model": "claude-opus-4-8", "max_tokens": 16,
                       "messages": [{"role": "user", "content": "after the circuit opened"}]}).encode()
    req = urllib.request.Request(chain_gateway.base + "/v1/messages", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "anthropic-version": "2023-06-01"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200 and resp.headers["x-llm-upstream"] == "local"
    assert len(anthropic.messages_requests()) == before  # steered past the open circuit: no call
