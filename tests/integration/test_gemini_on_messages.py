"""Gemini API clients on an Anthropic-only upstream through the whole app (Gemini → chat →
Messages): Gemini CLI's requests reach the fake's Messages endpoint, which refuses what
Anthropic refuses (gateway/fake/messages_rules.py), and its answers come back in Gemini's shape."""

from __future__ import annotations

import json

from tests.integration.test_gemini_on_chat import corpus, post

ON_CLAUDE = ", apis: [messages], model_map: {'gemini-*': claude-sonnet-4-5}"


async def test_gemini_cli_routing_call_reaches_claude_with_json_schemas_type_names(make_gateway) -> None:
    """Every prompt on the stock model ("auto") starts with this call; with Google's OBJECT /
    STRING / INTEGER Anthropic refused it, so each prompt cost a failed call and never routed."""
    gw = await make_gateway(upstream_yaml=ON_CLAUDE)
    status, headers, body = await post(gw, "/v1beta/models/gemini-3.5-flash-lite:generateContent",
                                       corpus("gemini-cli-0.61-route"))  # fmt: skip
    assert status == 200, body
    assert headers["x-llm-translated"] == "gemini->messages"
    assert json.loads(body)["candidates"][0]["finishReason"] == "STOP"
    [sent] = gw.fake.messages_requests()
    schema = sent.json()["output_config"]["format"]["schema"]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert {p["type"] for p in schema["properties"].values()} == {"string", "integer"}
