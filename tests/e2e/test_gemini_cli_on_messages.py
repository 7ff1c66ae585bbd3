"""Gemini CLI itself (``gemini -p``, headless) on an Anthropic-only upstream (Gemini → chat →
Messages) whose fake refuses what Anthropic refuses: Claude's thinking stays on through the
CLI's tool loop. Set up as tests/e2e/test_gemini_cli.py is.

The CLI asks ``thinkingConfig`` on every request; the continuation after a tool call went to
Claude with thinking off (``temperature: 1.0, top_k: 64``, the tool_use alone in its turn), as
the gateway could not give Anthropic the turn's signed thinking block back (audit). The block
now rides sealed in the call's ``thoughtSignature``, which the CLI returns as it came.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.fake.messages import anthropic_stream, sign
from tests.e2e.conftest import RunningGateway, launch_cli
from tests.e2e.test_codex_chat import messages_call, thinking_call
from tests.e2e.test_gemini_cli import gemini, run_gemini  # noqa: F401 (fixture)
from tests.fakeupstream import FakeUpstream, Stream

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def claude_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch_cli(fake, tmp_path_factory.mktemp("geminiclaude"), "",
                    upstream_yaml=", apis: [messages], model_map: {'gemini-*': claude-sonnet-4-5}")  # fmt: skip
    yield gw
    gw.stop()


def test_gemini_cli_keeps_claude_thinking_on_through_its_tool_loop(
    gemini: Path, claude_gateway: RunningGateway, upstream: FakeUpstream, tmp_path: Path  # noqa: F811
) -> None:
    thought = "The user wants notes.txt read: call read_file."
    upstream.script(thinking_call(thought, "toolu_01G", "read_file", json.dumps({"file_path": "notes.txt"})),
                    Stream(anthropic_stream(words=("It", " says", " hello."))))  # fmt: skip
    done = run_gemini(gemini, claude_gateway, tmp_path, "Read notes.txt and say what it says",
                      model="gemini-3-pro-preview")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "It says hello." in done.stdout
    first, second = [r.json() for r in upstream.requests]
    assert first["thinking"]["type"] == "enabled" and second["thinking"] == first["thinking"]
    assert "top_k" not in second and second.get("temperature", 1) == 1
    [turn] = [m for m in second["messages"] if m["role"] == "assistant"]
    assert turn["content"][0] == {"type": "thinking", "thinking": thought, "signature": sign(thought)}
    assert turn["content"][-1]["type"] == "tool_use" and turn["content"][-1]["id"] == "toolu_01G"


def test_gemini_clis_web_search_on_a_messages_upstream_is_refused_as_a_tool_error_and_the_turn_goes_on(
    gemini: Path, claude_gateway: RunningGateway, upstream: FakeUpstream, tmp_path: Path  # noqa: F811
) -> None:
    """``google_web_search`` asks gemini-3-flash-preview with ``googleSearch``, which only Google's
    API runs: the gateway refuses it (400 INVALID_ARGUMENT, class ``unknown``: a request error,
    not retried), nothing is sent upstream, and the CLI gives the model the refusal as the tool's
    error (docs/agents/gemini-cli.md: route gemini-3-flash-preview to a Gemini upstream)."""
    upstream.script(messages_call("toolu_01W", "google_web_search", json.dumps({"query": "gateway news"})),
                    Stream(anthropic_stream(words=("Search", " is", " unavailable."))))  # fmt: skip
    done = run_gemini(gemini, claude_gateway, tmp_path, "Search the web for gateway news",
                      model="gemini-3-pro-preview")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Search is unavailable." in done.stdout
    first, second = [r.json() for r in upstream.requests]  # the search itself never went upstream
    [result] = [b for m in second["messages"] if m["role"] == "user" and isinstance(m["content"], list)
                for b in m["content"] if b.get("type") == "tool_result"]  # fmt: skip
    said = json.dumps(result["content"])
    assert result["tool_use_id"] == "toolu_01W"
    assert "googleSearch runs inside Google's API" in said and "Gemini API upstream" in said
