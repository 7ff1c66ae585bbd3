"""The opt-in proactive cap: a single oversized tool output is cut to head + tail before
the first send, on every dialect; nothing else in the request changes."""

import json

from tests.anthropic_convo import CLAUDE_CODE_BETA, TOOLS, messages_conversation
from tests.convo import agent_conversation
from tests.responses_convo import responses_conversation

CAP = "compression: {max_tool_output_tokens: 500}\n"
BIG = 20_000  # bytes of one tool output, far above 500 tokens


async def test_chat_tool_outputs_are_capped_before_the_first_send(make_gateway) -> None:
    gw = await make_gateway(CAP)
    msgs = agent_conversation(rounds=3, output_bytes=BIG)
    status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "messages": msgs})
    assert status == 200 and headers["x-llm-tool-outputs-capped"] == "3" and "x-llm-compressed" not in headers
    [sent] = gw.fake.chat_requests()
    out = sent.json()["messages"]
    tools = [m for m in out if m["role"] == "tool"]
    assert all("truncated by llm-gateway" in m["content"] and len(m["content"]) < 2500 for m in tools)
    assert [m for m in out if m["role"] != "tool"] == [m for m in msgs if m["role"] != "tool"]


async def test_messages_tool_results_are_capped_one_by_one(make_gateway) -> None:
    gw = await make_gateway(CAP)
    msgs = messages_conversation(rounds=4, output_bytes=BIG)
    status, headers, _ = await gw.messages({"model": "claude-x", "max_tokens": 100, "messages": msgs, "tools": TOOLS},
                                           headers=CLAUDE_CODE_BETA)
    assert status == 200 and headers["x-llm-tool-outputs-capped"] == "4"  # one per round
    sent = gw.fake.messages_requests()[0].json()["messages"]
    results = [b for m in sent if m["role"] == "user" and isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result"]
    texts = [b["content"] if isinstance(b["content"], str) else b["content"][0]["text"] for b in results]
    assert all(len(t) < 2500 for t in texts)
    assert sent[-1] == msgs[-1]  # the current step's small result is untouched


async def test_responses_outputs_are_capped(make_gateway) -> None:
    gw = await make_gateway(CAP)
    items = responses_conversation(rounds=3, output_bytes=BIG)
    status, headers, _ = await gw.responses({"model": "gpt-5-codex", "input": items})
    assert status == 200 and headers["x-llm-tool-outputs-capped"] == "3"
    sent = gw.fake.responses_requests()[0].json()["input"]
    outputs = [i for i in sent if i["type"].endswith("_output")]
    assert all(len(i["output"]) < 2500 for i in outputs if len(i["output"]) > 100)
    assert [i for i in sent if not i["type"].endswith("_output")] == [
        i for i in items if not i["type"].endswith("_output")]


async def test_small_outputs_and_the_default_config_change_nothing(make_gateway) -> None:
    gw = await make_gateway()
    msgs = agent_conversation(rounds=2, output_bytes=BIG)
    body = json.dumps({"model": "gpt-4o-mini", "messages": msgs}).encode()
    status, headers, _ = await gw.chat(data=body, headers={"Content-Type": "application/json"})
    assert status == 200 and "x-llm-tool-outputs-capped" not in headers
    assert gw.fake.chat_requests()[0].body == body  # byte for byte
