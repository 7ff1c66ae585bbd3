"""/v1/messages gets the full pipeline in Anthropic's own shapes: retries by class,
silent replays, one typed `event: error` for a broken stream, rescue of an overflowing
agent conversation with its tool_use/tool_result structure intact."""

import asyncio
import json

import pytest
from yarl import URL

from tests.anthropic_convo import (
    CLAUDE_CODE_BETA,
    SYSTEM,
    TOOLS,
    assert_valid_messages,
    messages_conversation,
)
from tests.fakeupstream import (
    Drop,
    Stream,
    anthropic_error,
    anthropic_head,
    anthropic_stream,
    sse,
    text_delta,
)
from tests.fakeupstream import (
    named_events as events,
)

STREAM_REQ = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "stream": True,
              "messages": [{"role": "user", "content": "hi"}]}
OVERLOADED = anthropic_error(529, "overloaded_error", "Overloaded")




async def test_success_is_relayed_byte_for_byte_with_query_and_headers_forwarded(make_gateway) -> None:
    gw = await make_gateway()
    status, headers, body = await gw.messages(query="?beta=true", headers={
        "anthropic-beta": "interleaved-thinking-2025-05-14,context-management-2025-06-27",
        "x-claude-code-session-id": "s-1"})
    assert status == 200 and json.loads(body)["content"][0]["text"] == "Hello from the fake upstream."
    [sent] = gw.fake.messages_requests()
    assert sent.path == "/v1/messages" and sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["anthropic-beta"].startswith("interleaved-thinking")
    assert headers["x-llm-attempts"] == "1"
    assert gw.metric("llm_gateway_tokens_total", upstream="primary", model="claude-sonnet-4-5", kind="prompt") == 12


async def test_query_string_reaches_the_upstream(make_gateway) -> None:
    gw = await make_gateway()
    await gw.messages(query="?beta=true")
    [sent] = gw.fake.messages_requests()
    assert sent.method == "POST" and sent.path == "/v1/messages" and sent.query == "beta=true"


async def test_clean_stream_ends_with_message_stop_and_counts_usage(make_gateway) -> None:
    gw = await make_gateway()
    status, _, body = await gw.messages(STREAM_REQ)
    names = [n for n, _ in events(body)]
    assert status == 200 and names[0] == "message_start" and names[-1] == "message_stop"
    assert "error" not in names
    text = "".join(d["delta"]["text"] for n, d in events(body) if n == "content_block_delta")
    assert text == "Hello from fake."
    assert gw.metric("llm_gateway_tokens_total", upstream="primary", model="claude-sonnet-4-5", kind="prompt") == 25
    assert gw.metric("llm_gateway_tokens_total", upstream="primary", model="claude-sonnet-4-5",
                     kind="completion") == 15


async def test_overloaded_twice_then_success(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(OVERLOADED, OVERLOADED)
    status, headers, body = await gw.messages()
    assert status == 200 and headers["x-llm-attempts"] == "3"
    assert len(gw.fake.messages_requests()) == 3


async def test_permanent_overload_is_passed_through_unmodified_and_classified(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(*[OVERLOADED] * 6)
    status, headers, body = await gw.messages()
    assert status == 529 and json.loads(body) == {"type": "error", "request_id": "req_fake0001",
                                                  "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert headers["x-llm-error-type"] == "provider_unavailable" and headers["x-should-retry"] == "false"
    assert len(gw.fake.messages_requests()) == 6


async def test_billing_error_is_402_budget_never_retried(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(anthropic_error(400, "invalid_request_error",
                                   "Your credit balance is too low to access the Anthropic API. "
                                   "Please go to Plans & Billing to upgrade or purchase credits."))
    status, headers, body = await gw.messages()
    assert status == 402 and headers["x-llm-error-type"] == "budget" and headers["x-should-retry"] == "false"
    assert "credit balance" in json.loads(body)["error"]["message"]
    assert len(gw.fake.messages_requests()) == 1


async def test_rate_limit_waits_the_servers_retry_after(make_gateway) -> None:
    gw = await make_gateway()
    limited = anthropic_error(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")
    limited.headers = {"retry-after": "2"}
    gw.fake.script(limited)
    status, headers, _ = await gw.messages()
    assert status == 200 and gw.slept == [2.0]


async def test_gateway_made_errors_use_anthropics_envelope(make_gateway) -> None:
    gw = await make_gateway()
    status, headers, body = await gw.messages(data=b"{not json")
    doc = json.loads(body)
    assert status == 400 and doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"
    assert doc["request_id"] == headers["x-request-id"] and headers["x-llm-error-type"] == "unknown"
    status, _, body = await gw.messages({"model": "claude-x", "messages": "hi"})
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_messages"
    assert gw.fake.messages_requests() == []


async def test_unreachable_upstream_is_502_api_error(make_gateway) -> None:
    gw = await make_gateway(upstreams="  - {name: primary, base_url: 'http://127.0.0.1:9/v1'}\n"
                                      "retry: {provider_unavailable: {max_retries: 0, base_delay_s: 0.1, max_delay_s: 1}}\n")
    status, headers, body = await gw.messages()
    doc = json.loads(body)
    assert status == 502 and doc["error"]["type"] == "api_error" and doc["error"]["code"] == "upstream_unreachable"
    assert doc["error"]["x_llm_error_type"] == "provider_unavailable" and doc["error"]["retryable"] is True


async def test_open_circuit_answers_529_overloaded_error(make_gateway) -> None:
    gw = await make_gateway("circuit_breaker: {failure_threshold: 1, open_s: 30, probe_interval_s: 30}\n"
                            "retry: {provider_unavailable: {max_retries: 0, base_delay_s: 0.1, max_delay_s: 1}}\n")
    gw.fake.script(OVERLOADED)
    await gw.messages()
    status, headers, body = await gw.messages()
    doc = json.loads(body)
    assert status == 529 and doc["error"]["type"] == "overloaded_error" and doc["error"]["code"] == "circuit_open"
    assert int(headers["retry-after"]) >= 23 and headers["x-llm-attempts"] == "0"  # 30 s less the jitter
    assert len(gw.fake.messages_requests()) == 1


async def test_stream_cut_after_two_deltas_ends_with_one_error_event_and_no_message_stop(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([*anthropic_head(), text_delta("Hel"), text_delta("lo")], then="drop"))
    status, _, body = await gw.messages(STREAM_REQ)
    evs = events(body)
    names = [n for n, _ in evs]
    assert status == 200 and "message_stop" not in names and names.count("error") == 1 and names[-1] == "error"
    err = evs[-1][1]["error"]
    assert err["x_llm_error_type"] == "provider_unavailable" and err["retryable"] is True
    assert len(gw.fake.messages_requests()) == 1


async def test_clean_close_without_message_stop_is_broken(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([*anthropic_head(), text_delta("Hel")], then="eof"))
    _, _, body = await gw.messages(STREAM_REQ)
    assert [n for n, _ in events(body)][-1] == "error"


async def test_upstream_error_event_mid_stream_keeps_its_type(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([*anthropic_head(), text_delta("Hel"),
                           sse("error", {"type": "error", "error": {"type": "overloaded_error",
                                                                   "message": "Overloaded"}})], then="eof"))
    _, _, body = await gw.messages(STREAM_REQ)
    name, doc = events(body)[-1]
    assert name == "error" and doc["error"]["type"] == "overloaded_error"
    assert doc["error"]["x_llm_error_type"] == "provider_unavailable"


@pytest.mark.stall_timeouts
async def test_stalled_stream_ends_after_idle_timeout(make_gateway) -> None:
    gw = await make_gateway()  # idle_s: 1
    gw.fake.script(Stream([*anthropic_head(), text_delta("a")], then="stall"))
    _, _, body = await asyncio.wait_for(gw.messages(STREAM_REQ), 10)
    name, doc = events(body)[-1]
    assert name == "error" and doc["error"]["code"] == "idle_timeout"


async def test_stream_that_dies_before_any_content_is_replayed_silently(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream(anthropic_head(), then="drop"),
                   Stream([*anthropic_head(), sse("error", {"type": "error", "error": {
                       "type": "overloaded_error", "message": "Overloaded"}})], then="eof"),
                   Stream(anthropic_stream()))
    status, headers, body = await gw.messages(STREAM_REQ)
    names = [n for n, _ in events(body)]
    assert status == 200 and names.count("message_start") == 1 and names[-1] == "message_stop"
    assert headers["x-llm-attempts"] == "3"


async def test_stream_overloaded_before_content_is_answered_as_an_error_response(make_gateway) -> None:
    gw = await make_gateway("retry: {provider_unavailable: {max_retries: 1, base_delay_s: 0.1, max_delay_s: 1}}\n")
    dead = Stream([*anthropic_head(), sse("error", {"type": "error", "error": {
        "type": "overloaded_error", "message": "Overloaded"}})], then="eof")
    gw.fake.script(dead, dead)
    status, headers, body = await gw.messages(STREAM_REQ)
    assert status == 529 and json.loads(body)["error"]["type"] == "overloaded_error"
    assert headers["x-llm-error-type"] == "provider_unavailable"


async def test_dropped_connection_is_retried(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Drop())
    status, headers, _ = await gw.messages()
    assert status == 200 and headers["x-llm-attempts"] == "2"


async def test_long_agent_conversation_is_rescued_once_with_a_valid_structure(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.context_limit = 30000
    msgs = messages_conversation(rounds=40, output_bytes=4000)
    payload = {"model": "claude-sonnet-4-5", "max_tokens": 8000, "system": SYSTEM, "messages": msgs, "tools": TOOLS,
               "thinking": {"type": "enabled", "budget_tokens": 4000}, "stream": True}
    status, headers, body = await gw.messages(payload, headers=CLAUDE_CODE_BETA)
    assert status == 200 and headers["x-llm-compressed"] == "true"
    assert [n for n, _ in events(body)][-1] == "message_stop"
    first, second = gw.fake.messages_requests()
    sent = second.json()
    assert sent["system"] == SYSTEM and sent["thinking"] == payload["thinking"]
    assert_valid_messages(sent["messages"])
    assert sent["messages"][-5:] == msgs[-5:]  # the newest user turn and the current step
    assert gw.metric("llm_gateway_compressions_total", upstream="primary", outcome="applied") == 1


async def test_a_budget_lowered_to_fit_the_window_keeps_thinking_below_it(make_gateway) -> None:
    """Anthropic: "`max_tokens` must be greater than `thinking.budget_tokens`" (antigravity2api
    #149). The conversation fits; only the answer's budget does not, so it is lowered, and the
    thinking budget with it."""
    gw = await make_gateway()
    gw.fake.context_limit = 8000
    payload = {"model": "claude-sonnet-4-5", "max_tokens": 16000, "messages": [{"role": "user", "content": "hi"}],
               "thinking": {"type": "enabled", "budget_tokens": 12000}}  # fmt: skip
    status, headers, body = await gw.messages(payload)
    assert status == 200, body
    assert headers["x-llm-compressed"] == "true"
    first, second = (r.json() for r in gw.fake.messages_requests())
    assert first == payload
    assert 1024 <= second["thinking"]["budget_tokens"] < second["max_tokens"] < 8000


async def test_overflow_the_gateway_cannot_fix_reaches_the_client_unchanged(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.context_limit = 10
    status, headers, body = await gw.messages()
    assert status == 400 and "prompt is too long" in json.loads(body)["error"]["message"]
    assert headers["x-llm-error-type"] == "context_overflow"


async def test_claude_codes_startup_probe_is_answered_locally(make_gateway) -> None:
    """`HEAD /api/hello` (older Claude Code) and `HEAD /` (Claude Code 2.1.197 warms its
    connection with a HEAD on ANTHROPIC_BASE_URL itself, read from its bundle), never forwarded."""
    gw = await make_gateway()
    for path in ("/api/hello", "/"):
        async with gw.session.head(gw.base + path) as r:
            assert r.status == 200
    assert gw.fake.requests == []


async def test_count_tokens_and_models_pass_through(make_gateway) -> None:
    gw = await make_gateway()
    async with gw.session.post(gw.base + "/v1/messages/count_tokens", headers={"anthropic-version": "2023-06-01"},
                               json={"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]}) as r:
        assert r.status == 200 and "input_tokens" in await r.json()
    async with gw.session.get(URL(gw.base + "/v1/a/%2e%2e/b", encoded=True),
                              headers={"anthropic-version": "2023-06-01"}) as r:
        doc = await r.json()
        assert r.status == 400 and doc["type"] == "error" and doc["error"]["code"] == "invalid_path"


@pytest.mark.parametrize("apis", ["messages", "chat"])  # forwarded, and counted by the gateway
@pytest.mark.parametrize(("body", "code"), [
    ({"model": 5, "messages": {"x": 1}}, "invalid_messages"),
    ({"model": 5, "messages": [{"role": "user", "content": "hi"}]}, "invalid_model"),
    ({"messages": [{"role": "user", "content": "hi"}]}, "missing_model"),
    ({"model": "claude-x", "messages": ["hi"]}, "invalid_messages"),
    ({"model": "claude-x", "messages": [{"role": "user", "content": "hi"}], "metadata": "NEST"}, "invalid_json"),
])  # fmt: skip
async def test_count_tokens_is_refused_what_messages_refuses(make_gateway, apis: str, body: dict, code: str) -> None:
    # Counted by the gateway, {"model": 5, "messages": {"x": 1}} was {"input_tokens": 8}; forwarded,
    # a body 10,000 levels deep went upstream. No max_tokens: count_tokens takes none.
    gw = await make_gateway(upstream_yaml=f", apis: [{apis}]")
    data = json.dumps(body).replace('"NEST"', "[" * 10_000 + "]" * 10_000).encode()
    async with gw.session.post(gw.base + "/v1/messages/count_tokens", data=data,
                               headers={"anthropic-version": "2023-06-01", "Content-Type": "application/json"}) as r:
        doc = await r.json()
    assert r.status == 400 and doc["type"] == "error", doc
    assert doc["error"]["type"] == "invalid_request_error" and doc["error"]["code"] == code
    assert not gw.fake.requests


async def test_passthrough_errors_for_anthropic_clients_use_anthropics_envelope(make_gateway) -> None:
    gw = await make_gateway()
    async with gw.session.get(gw.base + "/nothing-here", headers={"anthropic-version": "2023-06-01"}) as r:
        doc = await r.json()
        assert r.status == 404 and doc["type"] == "error" and doc["error"]["type"] == "not_found_error"


async def test_claude_code_can_be_given_the_overflow_to_compact_itself(make_gateway) -> None:
    gw = await make_gateway("compression: {self_compacting_clients: pass_through}\n")
    gw.fake.context_limit = 30000
    payload = {"model": "claude-sonnet-4-5", "max_tokens": 8000, "messages": messages_conversation(40, 4000),
               "tools": TOOLS}
    status, headers, body = await gw.messages(payload, headers={"x-claude-code-session-id": "s-1", **CLAUDE_CODE_BETA,
                                                                "user-agent": "claude-cli/2.0.14 (external, sdk-cli)"})
    assert status == 400 and "prompt is too long" in json.loads(body)["error"]["message"]
    assert headers["x-llm-error-type"] == "context_overflow" and "x-llm-compressed" not in headers
    assert len(gw.fake.messages_requests()) == 1
    assert gw.metric("llm_gateway_compressions_total", upstream="primary", outcome="passed_to_client") == 1


async def test_self_compacting_clients_are_rescued_by_default(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.context_limit = 30000
    payload = {"model": "claude-sonnet-4-5", "max_tokens": 8000, "messages": messages_conversation(40, 4000),
               "tools": TOOLS}
    status, headers, _ = await gw.messages(payload, headers={"x-claude-code-session-id": "s-1", **CLAUDE_CODE_BETA})
    assert status == 200 and headers["x-llm-compressed"] == "true"
