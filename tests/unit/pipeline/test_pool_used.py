"""An answer's usage in its pool deployment's count (pipeline/relay.py ``pool_used``): what the
provider's window counted, Azure's output budget read back from the body as sent."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.apis.chat.wire import chat_usage
from gateway.apis.messages.wire import anthropic_usage
from gateway.config import parse_config
from gateway.pipeline.relay import pool_used
from gateway.state.pools import PoolSent, PoolState
from tests.unit.state.test_state_pools import MODEL, Clock, CountingStore

ANSWER = Path(__file__).parents[2] / "corpus" / "answers" / "chat-openai-gpt-4.1-text.json"


def _deployment(base_url: str) -> Any:
    cfg = parse_config(f"upstreams:\n  - {{name: a, base_url: '{base_url}', api_key: k, "
                       "limits: {tokens_per_minute: 10000}}\npools: [{name: p, deployments: [a]}]\n", env={})  # fmt: skip
    return cfg.upstreams[0]


@pytest.mark.parametrize(("base_url", "left"), [
    ("https://res.openai.azure.com/openai/v1", 10000 - 19 - 4096),  # the budget sent, as Azure counts it
    ("https://api.openai.com/v1", 10000 - 219),  # the usage
])  # fmt: skip
def test_an_answers_usage_counts_what_the_providers_window_counted(base_url: str, left: int) -> None:
    clock = Clock()
    ps = PoolState(CountingStore(clock), clock, clock)
    up = _deployment(base_url)
    doc = json.loads(ANSWER.read_text())
    body = json.dumps({**doc["request"], "max_tokens": 4096}).encode()
    mark = ps.sent(up, MODEL, 15)
    state = SimpleNamespace(pool_sent=PoolSent(up, MODEL, mark, 15, "chat", body))
    pool_used(SimpleNamespace(pool_state=ps), state, chat_usage(doc["body"]["usage"]))  # type: ignore[arg-type]
    assert state.pool_sent is None  # once
    assert ps.view(0, up, MODEL, clock.now * 1000).tokens_left == pytest.approx(left / 10000)


@pytest.mark.parametrize(("base_url", "left"), [
    # Its cache reads do not count towards ITPM, and its output is OTPM's: counted with both,
    # one Claude Code turn read from the cache took the input window of many.
    ("https://api.anthropic.com", 10000 - 2095 - 2051),
    # Another Messages server has no such split: its prompt (cache reads too) and its output.
    ("https://api.deepseek.com/anthropic", 10000 - 2095 - 2051 - 2051 - 503),
])  # fmt: skip
def test_a_messages_answer_counts_its_uncached_input_alone_on_anthropic_only(base_url: str, left: int) -> None:
    clock = Clock()
    ps = PoolState(CountingStore(clock), clock, clock)
    up = _deployment(base_url)
    doc = json.loads((ANSWER.parent / "messages-api-reference-example.json").read_text())
    mark = ps.sent(up, MODEL, 6000)
    state = SimpleNamespace(pool_sent=PoolSent(up, MODEL, mark, 6000, "messages", b"{}"))
    pool_used(SimpleNamespace(pool_state=ps), state, anthropic_usage(doc["body"]["usage"]))  # type: ignore[arg-type]
    assert ps.view(0, up, MODEL, clock.now * 1000).tokens_left == pytest.approx(left / 10000)
