"""The beta Claude Opus 4.5's effort needs (``apis/messages/effort.py``): "Requires beta flag
`effort-2025-11-24` in API calls" (the claude-code Opus 4.5 migration skill's effort.md)."""

from __future__ import annotations

import pytest

from gateway.apis.messages.effort import betas

EFFORT = (("anthropic-beta", "effort-2025-11-24"),)


@pytest.mark.parametrize(("model", "needed"), [
    ("claude-opus-4-5-20251101", EFFORT), ("us.anthropic.claude-opus-4-5-20251101-v1:0", EFFORT),
    ("anthropic/claude-opus-4.5", EFFORT), ("claude-opus-4-6", ()), ("claude-opus-5", ()),
    ("claude-sonnet-4-5", ()), ("qwen3-coder", ()),
])  # fmt: skip
def test_opus_4_5s_effort_asks_for_its_beta_and_no_other_model_does(model: str, needed: tuple) -> None:
    body = {"model": model, "max_tokens": 1024, "messages": [], "output_config": {"effort": "low"}}
    assert betas(body) == needed
    assert betas({**body, "output_config": {"format": {"type": "json_schema", "schema": {}}}}) == ()
    assert betas({k: v for k, v in body.items() if k != "output_config"}) == ()
