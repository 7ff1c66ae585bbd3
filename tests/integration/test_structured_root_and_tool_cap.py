"""Two translated requests OpenAI refuses, through the whole app against the fake upstream, whose
chat and Responses APIs refuse them in OpenAI's words (gateway/fake/chat_rules.py,
responses_rules.py): a Gemini structured output whose root is a list (google-genai's
``response_schema=list[Recipe]``, tests/corpus/requests/), the same asked by the anthropic SDK's
``output_config.format``, and a Messages request with more than 128 tools, most of them deferred."""

from __future__ import annotations

import json
from typing import Any

from tests.integration.test_gemini_on_chat import CHAT_ONLY, corpus, post, sse_docs, texts
from tests.unit.translate.messages_helpers import events, sdk_request
from tests.unit.translate.test_messages_chat import HI, LIST_ASKED
from tests.unit.translate.test_tool_cap import body, with_mcp_tools

ON_RESPONSES = ", apis: [responses], model_map: {'gemini-*': gpt-4.1}"
BUFFERED = "/v1/models/gemini-2.5-flash:generateContent"
STREAMED = "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


async def test_a_list_schema_is_answered_with_the_list_buffered_and_streamed(make_gateway: Any) -> None:
    for upstream in (CHAT_ONLY, ON_RESPONSES):
        gw = await make_gateway(upstream_yaml=upstream)
        status, _, answer = await post(gw, BUFFERED, corpus("genai-3.6-list-schema"))
        assert status == 200, answer
        [part] = json.loads(answer)["candidates"][0]["content"]["parts"]
        assert json.loads(part["text"]) == []  # the fake's least value of the schema, out of its wrapper
        status, _, streamed = await post(gw, STREAMED, corpus("genai-3.6-list-schema"))
        assert status == 200, streamed
        docs = sse_docs(streamed)
        assert json.loads(texts(docs)) == [] and docs[-1]["candidates"][0]["finishReason"] == "STOP"


async def test_an_enum_schema_is_answered_with_the_bare_value(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    status, _, answer = await post(gw, BUFFERED, corpus("genai-3.6-enum-schema"))
    assert status == 200, answer
    assert json.loads(answer)["candidates"][0]["content"]["parts"] == [{"text": "Percussion"}]  # the enum's first


async def test_a_messages_list_schema_is_answered_with_the_list_buffered_and_streamed(make_gateway: Any) -> None:
    request = sdk_request(messages=HI, output_config=LIST_ASKED)
    least = [{"recipe_name": "fake", "ingredients": []}]  # the fake's least value of the schema
    for apis in ("chat", "responses"):
        gw = await make_gateway(upstream_yaml=f", apis: [{apis}], model_map: {{'claude-*': gpt-4.1}}")
        async with gw.session.post(gw.base + "/v1/messages", json=request, headers={"x-api-key": "dummy"}) as r:
            answer = await r.read()
            assert r.status == 200, answer
        [block] = json.loads(answer)["content"]
        assert json.loads(block["text"]) == least, block  # out of its wrapper
        async with gw.session.post(gw.base + "/v1/messages", json={**request, "stream": True},
                                   headers={"x-api-key": "dummy"}) as r:  # fmt: skip
            streamed = await r.read()
            assert r.status == 200, streamed
        text = "".join(d["delta"].get("text", "") for n, d in events(streamed) if n == "content_block_delta")
        assert json.loads(text) == least


async def test_deferred_tools_over_the_cap_stay_out_and_the_request_is_answered(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat], model_map: {'claude-*': gpt-4.1}")
    request = with_mcp_tools(body("claude-code-2.1.332-tool-reference"), 130, deferred=True)
    async with gw.session.post(gw.base + "/v1/messages", json=request, headers={"x-api-key": "dummy"}) as r:
        assert r.status == 200, await r.read()
    [sent] = gw.fake.chat_requests()
    assert len(sent.json()["tools"]) == 12
