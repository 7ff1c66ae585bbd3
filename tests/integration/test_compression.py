"""Compress-and-retry end to end through the app: once, reactive, valid, and switchable."""

import json

import anthropic

from gateway.fake.messages import sign
from gateway.fake.scenarios import ScenarioUpstream
from gateway.fake.steps import Reply
from tests.anthropic_convo import TOOLS
from tests.convo import agent_conversation, assert_valid_conversation
from tests.corpus_cases import IN_SAMPLE
from tests.fakeupstream import estimate_tokens


def overflowing(rounds: int = 40, **kw) -> dict:
    return {"model": "gpt-4o-mini", "messages": agent_conversation(rounds, **kw), "max_tokens": 1000}


async def test_long_agent_conversation_succeeds_after_one_compressed_retry(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.context_limit = 16000
    payload = overflowing()
    assert estimate_tokens(payload) > 16000
    status, headers, body = await gw.chat(payload)
    assert status == 200, body
    assert headers["x-llm-compressed"] == "true" and headers["x-llm-attempts"] == "2"
    first, second = (r.json() for r in gw.fake.chat_requests())
    assert first == payload  # never compressed before the provider said so
    sent = second["messages"]
    assert_valid_conversation(sent)
    assert sent[0] == payload["messages"][0] and sent[-1] == payload["messages"][-1]
    assert estimate_tokens(second) + second.get("max_tokens", 0) <= 16000
    assert "earlier" in json.dumps(sent).lower() or "truncated" in json.dumps(sent).lower()
    assert gw.metric("llm_gateway_compressions_total", upstream="primary", outcome="applied") == 1


async def test_streaming_requests_are_compressed_too(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.context_limit = 16000
    status, headers, body = await gw.chat({**overflowing(), "stream": True})
    assert status == 200 and headers["x-llm-compressed"] == "true"
    assert body.rstrip().endswith(b"data: [DONE]")


async def test_impossible_request_returns_the_overflow_after_at_most_two_calls(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.context_limit = 2000
    payload = {"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "Be brief."},
                                                    {"role": "user", "content": "word " * 20000}]}
    status, headers, body = await gw.chat(payload)
    assert status == 400 and headers["x-llm-error-type"] == "context_overflow"
    assert headers["x-llm-error-retryable"] == "false" and headers["x-should-retry"] == "false"
    assert json.loads(body)["error"]["code"] == "context_length_exceeded"
    assert len(gw.fake.chat_requests()) <= 2


async def test_second_overflow_is_returned_classified_and_never_compressed_twice(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.context_limit = 16000
    # The provider keeps saying "too long" whatever we send.
    from tests.fakeupstream import overflow_error
    gw.fake.script(overflow_error(16000, 40000, None), overflow_error(16000, 17000, None),
                   overflow_error(16000, 17000, None))
    status, headers, _ = await gw.chat(overflowing())
    assert status == 400 and headers["x-llm-error-type"] == "context_overflow"
    assert headers["x-llm-compressed"] == "true" and headers["x-llm-attempts"] == "2"
    assert len(gw.fake.chat_requests()) == 2
    assert gw.metric("llm_gateway_compressions_total", upstream="primary", outcome="still_overflow") == 1


async def test_compression_disabled_returns_the_first_overflow_untouched(make_gateway) -> None:
    gw = await make_gateway("compression: {enabled: false}\n")
    gw.fake.context_limit = 16000
    status, headers, body = await gw.chat(overflowing())
    assert status == 400 and headers["x-llm-error-type"] == "context_overflow"
    assert "x-llm-compressed" not in headers and len(gw.fake.chat_requests()) == 1
    assert "maximum context length is 16000 tokens" in json.loads(body)["error"]["message"]


async def test_claude_codes_system_entry_is_sent_where_anthropic_takes_it(make_gateway) -> None:
    """Claude Code puts a system entry right after the first prompt, which is large and goes
    first; left in place, the entry opened the retry and Anthropic refused it ("messages.0: use
    the top-level 'system' parameter ..."). The fake's overflow scenario, through the anthropic
    SDK: the one retry is taken."""
    fake = await ScenarioUpstream(context_window=6000).start()
    try:
        gw = await make_gateway(fake=fake)
        system = {"role": "system", "content": "# Environment\nAvailable agent types: general.",
                  "output_config": {"effort": "medium"}}
        messages: list[dict] = [{"role": "user", "content": [
            {"type": "text", "text": "Fix the build."},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "ctx " * 9000}}]},
            system]  # fmt: skip
        for i in range(12):
            messages += [
                {"role": "assistant", "content": [{"type": "text", "text": f"Reading {i}."},
                                                  {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash",
                                                   "input": {"command": f"cat m{i}.py"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}",
                                              "content": f"line {i}\n" * 200}]}]  # fmt: skip
        messages += [{"role": "assistant", "content": "Read them all."},
                     {"role": "user", "content": "Now write the fix."}]
        client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k", max_retries=0)
        try:
            raw = await client.messages.with_raw_response.create(
                model="claude-opus-5-5-overflow", max_tokens=1024, messages=messages, tools=TOOLS)  # type: ignore[arg-type]
        finally:
            await client.close()
        assert raw.http_response.headers["x-llm-compressed"] == "true"
        assert (await raw.parse()).content[0].type == "text"
        first, retry = (r.json()["messages"] for r in fake.messages_requests())
        assert first == messages
        assert [m["role"] for m in retry[:3]] == ["user", "system", "assistant"]
        assert retry[1] == system and "removed by llm-gateway" in json.dumps(retry[0])
    finally:
        await fake.close()


async def test_a_retry_sends_no_thinking_bound_to_the_turns_it_dropped(make_gateway) -> None:
    """Claude's thinking holds only behind the conversation it was written in (Claude Fable 5.1
    on): kept verbatim after the turns before it were dropped, the retry's blocks were refused
    ("... The block is bound to a different conversation ...") and the client got a 400. The
    turns are the fake's own answers, so the fake knows where each block was written."""
    gw = await make_gateway()
    model, thinking = "claude-fable-5-1", {"type": "adaptive"}
    messages: list[dict] = [{"role": "user", "content": [
        {"type": "text", "text": "Fix the build."},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "ctx " * 6000}}]}]
    for i in range(9):
        plan = f"Read module {i} next."
        said = ({"type": "text", "text": "All read."} if i == 6 else
                {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash", "input": {"command": f"cat m{i}"}})
        answer = {"id": f"msg_{i}", "type": "message", "role": "assistant", "model": model,
                  "content": [{"type": "thinking", "thinking": plan, "signature": sign(plan)}, said],
                  "stop_reason": "end_turn", "stop_sequence": None, "usage": {"input_tokens": 9, "output_tokens": 9}}
        gw.fake.script(Reply(200, answer))
        status, _, body = await gw.messages({"model": model, "max_tokens": 2048, "thinking": thinking,
                                             "tools": TOOLS, "messages": messages})
        assert status == 200, body
        messages.append({"role": "assistant", "content": json.loads(body)["content"]})
        messages.append({"role": "user", "content": "Now write the fix." if i == 6 else [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"line {i}\n" * 300}]})
    gw.fake.context_limit = 6000
    status, headers, body = await gw.messages({"model": model, "max_tokens": 2048, "thinking": thinking,
                                               "tools": TOOLS, "messages": messages})
    assert status == 200, body
    assert headers["x-llm-compressed"] == "true"
    retry = gw.fake.messages_requests()[-1].json()
    assert len(retry["messages"]) < len(messages)
    # The blocks go as they were (signed), and Anthropic is asked to drop those whose prefix the
    # compression changed, with the beta that field needs beside the client's own betas.
    assert [b for m in retry["messages"] if isinstance(m["content"], list) for b in m["content"]
            if b["type"] == "thinking"]
    assert retry["thinking"] == {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    beta = gw.fake.messages_requests()[-1].headers.get("anthropic-beta", "")
    assert "thinking-binding-controls-2026-08-01" in beta.split(",")


def _tpm_refusal() -> Reply:
    """OpenAI's real refusal of a request over its tokens per minute: "Request too large for
    gpt-4o ... on tokens per min (TPM): Limit 30000, Requested 36278" (tests/corpus/openai.json)."""
    case = next(c for c in IN_SAMPLE if c["name"] == "openai-429-request-bigger-than-tpm-is-overflow")
    return Reply(case["status"], case["body"], case["headers"])


def _facts(turns: int = 24) -> list[dict]:
    said = []
    for i in range(turns // 2):
        said += [{"role": "user", "content": f"fact {i}: " + "word " * 600}, {"role": "assistant", "content": "noted"}]
    return [*said, {"role": "user", "content": f"what was fact {turns // 2 - 1}?"}]


async def test_a_prompt_alone_over_the_tokens_per_minute_is_compressed_once_and_served(make_gateway) -> None:
    """A Messages client's 25-message conversation and max_tokens 6000 against OpenAI's 30,000
    TPM (36,278 requested): no max_tokens fits, so lowering it is no rescue. Since tonight's
    per-minute rescue it was one call and 400 "a smaller max_tokens may fit", which no agent
    compacts on, so every later turn failed too (review); before, and now again, the one
    compress-and-retry aims at the limit the refusal states, and the answer is served."""
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    gw.fake.script(_tpm_refusal())
    ask = {"model": "gpt-4o", "max_tokens": 6000, "stream": True, "messages": _facts()}
    status, headers, body = await gw.messages(ask)
    assert status == 200 and headers["x-llm-compressed"] == "true" and headers["x-llm-attempts"] == "2", body
    assert b"event: message_stop" in body
    first, second = (r.json() for r in gw.fake.chat_requests())
    assert len(first["messages"]) == 25 and first["max_tokens"] == 6000
    assert len(second["messages"]) < 25 and second["messages"][-1] == first["messages"][-1]
    assert gw.metric("llm_gateway_compressions_total", upstream="primary", outcome="applied") == 1


async def test_a_prompt_still_over_the_tokens_per_minute_is_told_as_a_prompt_too_long(make_gateway) -> None:
    """The one retry refused again: the client is told its API's overflow sentence with the
    refusal's numbers, on which Claude Code compacts, not that a smaller max_tokens may fit."""
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    gw.fake.script(_tpm_refusal(), _tpm_refusal())
    ask = {"model": "gpt-4o", "max_tokens": 6000, "messages": _facts()}
    status, headers, body = await gw.messages(ask)
    error = json.loads(body)["error"]
    assert status == 400 and headers["x-llm-error-type"] == "context_overflow", body
    assert error == {**error, "type": "invalid_request_error",
                     "message": "prompt is too long: 36278 tokens > 30000 maximum"}  # fmt: skip
    assert len(gw.fake.chat_requests()) == 2  # one rescue in all


def _case_reply(name: str) -> Reply:
    case = next(c for c in IN_SAMPLE if c["name"] == name)
    return Reply(case["status"], case["body"], case.get("headers") or {})


async def test_after_a_budget_capped_the_per_minute_rescue_lowers_the_budget_sent(make_gateway) -> None:
    """max_tokens 20480 refused by gpt-4o's cap ("at most 16384", tests/corpus/openai.json) and
    sent again as 16384, then over the TPM (Limit 30000, Requested 36278): the excess is off
    the 16384 the provider counted. The rescue read the first body's 20480 (review), sent 13902,
    still over, and told the client the value just refused."""
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    gw.fake.script(_case_reply("openai-400-max-tokens-above-the-models-output-limit"), _tpm_refusal())
    ask = {"model": "gpt-4o", "max_tokens": 20480, "messages": _facts()}
    status, headers, body = await gw.messages(ask)
    assert status == 200 and headers["x-llm-compressed"] == "true", body
    sent = [r.json() for r in gw.fake.chat_requests()]
    assert [r["max_tokens"] for r in sent] == [20480, 16384, 16384 - 6278 - 300]
    assert all(r["messages"] == sent[0]["messages"] for r in sent)  # no turn dropped


async def test_after_a_budget_capped_a_prompt_over_the_tokens_per_minute_is_compressed(make_gateway) -> None:
    """max_tokens 8192 capped to 4096 ("at most 4096", tests/corpus/openai.json), then 36,278
    requested of a 30,000 TPM: no budget fits the 4096 sent less 6578, so the prompt is what is
    over and the one rescue compresses it. Read from the first body's 8192, it sent 1614 with
    every turn, refused again, and the client was told "a max_tokens of at most 1614 may fit"."""
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    gw.fake.script(_case_reply("openai-400-max-tokens-above-the-output-limit-code-null"), _tpm_refusal())
    ask = {"model": "gpt-4o", "max_tokens": 8192, "messages": _facts()}
    status, headers, body = await gw.messages(ask)
    assert status == 200 and headers["x-llm-compressed"] == "true", body
    sent = [r.json() for r in gw.fake.chat_requests()]
    assert [r["max_tokens"] for r in sent[:2]] == [8192, 4096] and len(sent) == 3
    assert sent[2]["max_tokens"] == 4096  # no more than was sent: the cap holds for the retry
    assert len(sent[2]["messages"]) < 25 and sent[2]["messages"][-1] == sent[0]["messages"][-1]
    assert gw.metric("llm_gateway_compressions_total", upstream="primary", outcome="applied") == 1
