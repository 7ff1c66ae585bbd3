"""Traces through the real pipeline with the SDK's in-memory exporter: one server span per
request, one client span per attempt, the client's traceparent as parent, the gateway's
context sent upstream, and nothing secret in any attribute. tests/trace/ runs the same
against a real trace backend (make test-trace)."""

import json
import logging

import pytest

from gateway.live import LIVE
from gateway.tracing import NO_TRACING
from tests.convo import agent_conversation
from tests.fakeupstream import FakeUpstream, Reply, Stream, chunk, estimate_tokens, overflow_error
from tests.integration.conftest import eventually
from tests.spans import PROMPT, SECRET_KEY, attempts, from_sdk, in_memory, render, roots, secrets_in

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT}-01"
UNAVAILABLE = Reply(503, {"error": {"message": "overloaded", "type": "server_error"}})


def traced(gw, capture_content: bool = False):
    tracing, exporter = in_memory(capture_content)
    gw.app[LIVE].services.tracing = tracing
    return exporter


def the_tree(exporter):
    nodes = from_sdk(exporter.get_finished_spans())
    (server,) = roots(nodes)
    return server, nodes


async def test_tracing_is_off_by_default_and_a_client_traceparent_passes_through(make_gateway) -> None:
    gw = await make_gateway()
    assert gw.app[LIVE].services.tracing is NO_TRACING
    status, _, _ = await gw.chat(headers={"traceparent": TRACEPARENT})
    assert status == 200
    assert gw.fake.chat_requests()[0].headers["traceparent"] == TRACEPARENT


async def test_a_retried_request_is_one_server_span_with_two_attempt_spans_under_the_client_trace(
    make_gateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    gw = await make_gateway(upstream_yaml=f", api_key: '{SECRET_KEY}'")
    exporter = traced(gw)
    gw.fake.script(UNAVAILABLE)
    payload = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": PROMPT}]}
    status, _, _ = await gw.chat(payload, headers={"traceparent": TRACEPARENT, "tracestate": "vendor=1"})
    assert status == 200
    server, nodes = the_tree(exporter)
    print(render(server))
    assert server.kind == "SERVER" and server.trace_id == TRACE_ID and server.parent_id == PARENT
    assert server.name == "POST /v1/chat/completions"
    a = server.attributes
    assert a["http.response.status_code"] == 200 and a["gen_ai.request.model"] == "gpt-4o-mini"
    assert a["llm_gateway.attempts"] == 2 and a["llm_gateway.retries"] == 1
    assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
    first, retry = server.children
    assert [first.kind, retry.kind] == ["CLIENT", "CLIENT"] and first.name == "chat gpt-4o-mini"
    assert first.attributes["llm_gateway.attempt.kind"] == "first"
    assert first.attributes["error.type"] == "provider_unavailable"
    assert first.attributes["llm_gateway.error.retryable"] is True
    assert first.attributes["http.response.status_code"] == 503
    assert first.attributes["llm_gateway.decision"] == "retry"
    assert first.attributes["llm_gateway.retry.wait_source"] == "backoff"
    assert first.attributes["llm_gateway.retry.wait_s"] == round(gw.slept[0], 3)
    assert "llm_gateway.first_byte" in first.events
    r = retry.attributes
    assert r["llm_gateway.attempt.kind"] == "retry" and "error.type" not in r
    assert r["gen_ai.provider.name"] == "openai" and r["server.address"] == "127.0.0.1"
    assert r["gen_ai.response.id"] == "chatcmpl-fake123" and list(r["gen_ai.response.finish_reasons"]) == ["stop"]
    # Each attempt sent its own span as the upstream's parent, in the client's trace.
    sent = [req.headers["traceparent"] for req in gw.fake.chat_requests()]
    assert sent == [f"00-{TRACE_ID}-{first.span_id}-01", f"00-{TRACE_ID}-{retry.span_id}-01"]
    assert gw.fake.chat_requests()[0].headers["tracestate"] == "vendor=1"
    assert secrets_in(nodes, SECRET_KEY, PROMPT, "hunter2") == []
    # The request's log line leads to its trace.
    (line,) = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert line["trace_id"] == TRACE_ID and line["span_id"] == server.span_id


@pytest.mark.parametrize("stream", [False, True])
async def test_the_attempt_that_answered_carries_the_usage_streamed_or_not(make_gateway, stream: bool) -> None:
    """docs/operations/tracing.md: gen_ai.usage.* on the request span and on the attempt that answered;
    an unstreamed answer's attempt ends before its body is counted, and had none."""
    gw = await make_gateway()
    exporter = traced(gw)
    gw.fake.script(UNAVAILABLE)
    payload = {"model": "gpt-4o-mini", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    status, _, _ = await gw.chat(payload)
    assert status == 200
    server, _ = the_tree(exporter)
    failed, answered = attempts(server)
    usage = {k: v for k, v in server.attributes.items() if k.startswith("gen_ai.usage.")}
    assert usage.keys() == {"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"}
    assert {k: answered.get(k) for k in usage} == usage
    assert not any(k.startswith("gen_ai.usage.") for k in failed)


async def test_a_fallback_is_a_span_per_upstream_with_the_decision_on_the_one_left(make_gateway) -> None:
    backup = await FakeUpstream().start()
    try:
        primary = await FakeUpstream().start()
        gw = await make_gateway(
            "fallback: {retries_per_upstream: 0}\n", fake=primary,
            upstreams=(f"  - {{name: primary, base_url: '{primary.url}', fallbacks: [backup]}}\n"
                       f"  - {{name: backup, base_url: '{backup.url}', models: ['never'], apis: [messages]}}\n"),
        )  # fmt: skip
        exporter = traced(gw)
        primary.script(UNAVAILABLE)
        status, _, _ = await gw.chat(headers={"traceparent": TRACEPARENT})
        assert status == 200
        server, _ = the_tree(exporter)
        print(render(server))
        first, fallback = attempts(server)
        assert first["llm_gateway.upstream"] == "primary" and first["llm_gateway.decision"] == "fallback"
        assert first["llm_gateway.fallback.to"] == "backup" and first["llm_gateway.stop_reason"] == "moving_on"
        assert fallback["llm_gateway.attempt.kind"] == "fallback" and fallback["llm_gateway.upstream"] == "backup"
        assert fallback["llm_gateway.translated"] == "chat->messages"
        assert fallback["gen_ai.provider.name"] == "anthropic" and fallback["llm_gateway.upstream_api"] == "messages"
        assert server.attributes["llm_gateway.fallbacks"] == 1
        assert server.attributes["llm_gateway.translated"] == "chat->messages"
        await primary.close()
    finally:
        await backup.close()


async def test_a_compress_and_retry_says_what_detected_it_how_much_and_how_it_ended(make_gateway) -> None:
    gw = await make_gateway()
    exporter = traced(gw)
    gw.fake.context_limit = 16000
    payload = {"model": "gpt-4o-mini", "messages": agent_conversation(40), "max_tokens": 1000}
    status, _, _ = await gw.chat(payload)
    assert status == 200
    server, nodes = the_tree(exporter)
    print(render(server))
    first, rescue = attempts(server)
    assert first["error.type"] == "context_overflow" and first["llm_gateway.error.evidence"]
    assert first["llm_gateway.decision"] == "retry"  # compressed and sent again
    assert rescue["llm_gateway.attempt.kind"] == "compress_retry"
    assert rescue["llm_gateway.compression.detector"] == first["llm_gateway.error.evidence"]
    s = server.attributes
    assert s["llm_gateway.compression.result"] == "success" and s["llm_gateway.compression.outcome"] == "applied"
    assert s["llm_gateway.compression.tokens_before"] > 16000 > s["llm_gateway.compression.tokens_after"]
    # The conversation never leaves the gateway in a span.
    texts = [m["content"] for m in payload["messages"] if isinstance(m.get("content"), str) and len(m["content"]) > 20]
    assert secrets_in(nodes, *texts[:5]) == []


async def test_a_continued_stream_has_the_broken_attempt_and_the_continuation(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: prefix")
    exporter = traced(gw)
    words = ["Once", " upon", " a"]
    gw.fake.script(
        Stream([chunk({"role": "assistant", "content": ""}), *(chunk({"content": w}) for w in words)], then="drop"),
        Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": " time."}), chunk({}, "stop")]),
    )
    req = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "Tell a story"}]}
    status, _, body = await gw.chat(req)
    assert status == 200 and b"error" not in body
    server, _ = the_tree(exporter)
    print(render(server))
    first, cont = server.children
    assert "llm_gateway.first_visible_token" in first.events and "llm_gateway.first_byte" in first.events
    assert first.attributes["llm_gateway.ended_by"] == "stream_broken"
    assert first.attributes["llm_gateway.decision"] == "continuation"
    assert first.attributes["gen_ai.response.id"] == "chatcmpl-fake123"
    assert cont.attributes["llm_gateway.attempt.kind"] == "continuation"
    assert cont.attributes["llm_gateway.continuation.mode"] == "prefix"
    s = server.attributes
    assert s["llm_gateway.continuation.outcome"] == "continued" and s["llm_gateway.continuation.after"] == "stream_broken"
    assert "llm_gateway.first_byte_to_client" in server.events


async def test_content_is_captured_only_when_asked_and_keys_are_masked_even_then(make_gateway) -> None:
    gw = await make_gateway()
    exporter = traced(gw, capture_content=True)
    said = f"{PROMPT} and my key is {SECRET_KEY}"
    status, _, _ = await gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": said}]})
    assert status == 200
    server, nodes = the_tree(exporter)
    (attempt,) = attempts(server)
    # The GenAI conventions' message schemas (gen-ai-input-messages.json, -output-messages.json)
    assert json.loads(attempt["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": f"{PROMPT} and my key is [redacted]"}]}]
    (out,) = json.loads(attempt["gen_ai.output.messages"])
    assert out["role"] == "assistant" and out["finish_reason"] == "stop"
    assert [p["type"] for p in out["parts"]] == ["text"]
    assert secrets_in(nodes, SECRET_KEY) == []


async def test_captured_content_of_a_translated_request_is_what_went_upstream_in_the_schema(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    exporter = traced(gw, capture_content=True)
    status, _, body = await gw.messages({
        "model": "claude-sonnet-4-5", "max_tokens": 256, "system": f"You are terse. {SECRET_KEY}",
        "tools": [{"name": "vault", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": PROMPT},
                     {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "vault",
                                                        "input": {"door": 1}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                   "content": "opened"}]}],
    })  # fmt: skip
    assert status == 200, body
    server, nodes = the_tree(exporter)
    (attempt,) = attempts(server)
    assert attempt["llm_gateway.translated"] == "messages->chat"
    # Sent upstream as chat completions: the system prompt is a message of the history there.
    sent = json.loads(attempt["gen_ai.input.messages"])
    assert [(m["role"], [p["type"] for p in m["parts"]]) for m in sent] == [
        ("system", ["text"]), ("user", ["text"]), ("assistant", ["tool_call"]), ("tool", ["tool_call_response"])]
    assert sent[0]["parts"][0]["content"] == "You are terse. [redacted]"
    call, result = sent[2]["parts"][0], sent[3]["parts"][0]
    assert call["name"] == "vault" and call["arguments"] == {"door": 1} and result["response"] == "opened"
    assert call["id"] == result["id"]
    assert "gen_ai.system_instructions" not in attempt
    (out,) = json.loads(attempt["gen_ai.output.messages"])
    assert out["finish_reason"] == "stop"
    assert secrets_in(nodes, SECRET_KEY) == []


async def test_captured_content_of_a_messages_upstream_has_its_system_instructions_apart(make_gateway) -> None:
    fake = await FakeUpstream().start()
    try:
        gw = await make_gateway(fake=fake, upstreams=f"  - {{name: claude, base_url: '{fake.url}', apis: [messages]}}\n")
        exporter = traced(gw, capture_content=True)
        status, _, _ = await gw.messages({"model": "claude-sonnet-4-5", "max_tokens": 64, "system": "Be terse.",
                                          "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
        assert status == 200
        server, _ = the_tree(exporter)
        (attempt,) = attempts(server)
        assert json.loads(attempt["gen_ai.system_instructions"]) == [{"type": "text", "content": "Be terse."}]
        assert json.loads(attempt["gen_ai.input.messages"]) == [
            {"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
        (out,) = json.loads(attempt["gen_ai.output.messages"])
        assert out["role"] == "assistant" and out["finish_reason"] == "stop"
    finally:
        await fake.close()


async def test_an_open_circuit_is_an_event_on_the_request_not_an_attempt(make_gateway) -> None:
    gw = await make_gateway("circuit_breaker: {failure_threshold: 1, open_s: 60}\n"
                            "retry: {provider_unavailable: {max_retries: 0}}\n")
    exporter = traced(gw)
    gw.fake.script(UNAVAILABLE)
    await gw.chat()
    exporter.clear()
    status, _, _ = await gw.chat()
    assert status == 503
    server, _ = the_tree(exporter)
    assert server.children == [] and "llm_gateway.circuit_refused" in server.events
    assert server.attributes["error.type"] == "provider_unavailable"


async def test_an_overflow_behind_empty_streams_is_probed_then_compressed(make_gateway) -> None:
    gw = await make_gateway()
    exporter = traced(gw)
    limit = 6000

    def server(payload):
        # llama-cpp-python's way: an empty stream for a streaming overflow, a 400 otherwise.
        used = estimate_tokens(payload)
        if used > limit:
            return Stream([], then="eof") if payload.get("stream") else overflow_error(limit, used, None)
        return None

    gw.fake.script(*[server] * 10)
    status, _, _ = await gw.chat({"model": "gpt-4o-mini", "stream": True, "messages": agent_conversation(30)})
    assert status == 200
    server_span, _ = the_tree(exporter)
    print(render(server_span))
    kinds = [a["llm_gateway.attempt.kind"] for a in attempts(server_span)]
    assert kinds[0] == "first" and "probe" in kinds and kinds[-1] == "compress_retry"
    probe = next(a for a in attempts(server_span) if a["llm_gateway.attempt.kind"] == "probe")
    assert probe["error.type"] == "context_overflow"
    assert server_span.attributes["llm_gateway.compression.result"] == "success"


async def test_an_answer_from_the_loop_breaker_is_a_request_span_without_attempts(make_gateway) -> None:
    gw = await make_gateway("loop_breaker: {enabled: true}\n")
    exporter = traced(gw)
    gw.fake.script(Reply(401, {"error": {"message": "bad key", "type": "invalid_request_error", "code": "invalid_api_key"}}))
    assert (await gw.chat())[0] == 401
    exporter.clear()
    assert (await gw.chat())[0] == 401
    server, _ = the_tree(exporter)
    assert server.children == [] and server.attributes["llm_gateway.loop_breaker.recalled"] >= 1
    assert server.attributes["error.type"] == "auth"


async def test_a_pool_attempt_says_which_deployment_and_why_and_a_move_is_a_sibling_attempt(make_gateway) -> None:
    a, b = await FakeUpstream().start(), await FakeUpstream().start()
    try:
        gw = await make_gateway(
            "pools: [{name: p, deployments: [a, b], affinity: {enabled: false}}]\n", fake=a,
            upstreams=(f"  - {{name: a, base_url: '{a.url}', api_key: ka, weight: 1000000}}\n"
                       f"  - {{name: b, base_url: '{b.url}', api_key: kb}}\n"),
        )  # fmt: skip
        exporter = traced(gw)
        a.script(Reply(429, {"error": {"message": "Rate limit reached for gpt-4o-mini on requests per min (RPM)",
                                       "type": "requests", "code": "rate_limit_exceeded"}}, {"retry-after": "20"}))
        status, _, _ = await gw.chat(headers={"traceparent": TRACEPARENT})
        assert status == 200
        server, _ = the_tree(exporter)
        first, moved = attempts(server)
        assert first["llm_gateway.upstream"] == "a" and first["llm_gateway.pool"] == "p"
        assert first["llm_gateway.pool.pick"] == "weighted"
        assert moved["llm_gateway.upstream"] == "b" and moved["llm_gateway.pool.pick"] == "moved"
        assert moved["llm_gateway.attempt.kind"] == "sibling"
        assert first["llm_gateway.decision"] == "sibling" and first["llm_gateway.stop_reason"] == "moving_on"
    finally:
        await a.close()
        await b.close()


async def test_a_pass_through_post_is_named_by_its_method_not_as_a_chat(make_gateway) -> None:
    """tracing.md: an attempt on another /v1 path is its HTTP method, lowercase (the pass-through
    call carries the chat dialect)."""
    gw = await make_gateway()
    exporter = traced(gw)
    async with gw.session.post(gw.base + "/v1/embeddings", json={"model": "text-embedding-3-small", "input": "x"}) as r:
        await r.read()
    server, _ = the_tree(exporter)
    (attempt,) = server.children
    assert attempt.name == "post text-embedding-3-small"
    assert attempt.attributes["gen_ai.operation.name"] == "post"
    assert "gen_ai.operation.name" not in server.attributes


async def test_attempts_made_at_once_each_have_their_own_span(make_gateway) -> None:
    """GET /v1/models asks every upstream at once: each attempt is a span of its own, ended by
    its own outcome (not by the next one starting), with its own first byte."""
    fakes = [await FakeUpstream().start() for _ in range(4)]
    try:
        ups = "".join(f"  - {{name: u{i}, base_url: '{f.url}', models: ['m{i}']}}\n" for i, f in enumerate(fakes))
        ups += "  - {name: down, base_url: 'http://127.0.0.1:9/v1', models: ['never']}\n"
        gw = await make_gateway(fake=fakes[0], upstreams=ups)
        exporter = traced(gw)
        async with gw.session.get(gw.base + "/v1/models") as r:
            assert r.status == 200
        server, _ = the_tree(exporter)
        print(render(server))
        spans = {c.attributes["llm_gateway.upstream"]: c for c in server.children}
        assert sorted(spans) == ["down", "u0", "u1", "u2", "u3"] and len(server.children) == 5
        for name, span in spans.items():
            assert "llm_gateway.ended_by" not in span.attributes, name
            if name == "down":
                assert span.attributes["error.type"] == "provider_unavailable" and span.events == []
            else:
                assert span.attributes["http.response.status_code"] == 200 and "error.type" not in span.attributes
                assert span.events == ["llm_gateway.first_byte"], name
    finally:
        for f in fakes:
            await f.close()


async def test_a_client_that_leaves_mid_stream_got_its_200_and_the_request_ended_by_client_gone(
    make_gateway, caplog: pytest.LogCaptureFixture
) -> None:
    # docs/operations/tracing.md: http.response.status_code is the status the client got; a
    # client that left after the head got 200, and ended_by says why the answer stopped.
    import openai

    caplog.set_level(logging.INFO, logger="gateway")
    gw = await make_gateway(timeouts="{connect_s: 2, first_byte_s: 5, idle_s: 5}")
    exporter = traced(gw)
    words = [chunk({"role": "assistant", "content": ""}), *(chunk({"content": f"w{i} "}) for i in range(200))]
    gw.fake.script(Stream(words, delay_s=0.02))
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="x", max_retries=0)
    async with client.chat.completions.with_streaming_response.create(
        model="gpt-4o-mini", stream=True, messages=[{"role": "user", "content": "hi"}]
    ) as r:
        assert r.status_code == 200
        got = 0
        async for _ in await r.parse():
            got += 1
            if got == 2:
                break
    await client.close()
    await eventually(lambda: gw.metric("llm_gateway_in_flight_requests") == 0, "the request ended")
    labels = {"upstream": "primary", "model": "gpt-4o-mini", "error_type": "none"}
    assert gw.metric("llm_gateway_requests_total", status="200", **labels) == 1
    assert gw.metric("llm_gateway_requests_total", status="499", **labels) == 0
    (line,) = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert line["status"] == 200 and line["ended_by"] == "client_gone"
    await eventually(lambda: len(roots(from_sdk(exporter.get_finished_spans()))) == 1, "the span ended")
    server, _ = the_tree(exporter)
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["llm_gateway.ended_by"] == "client_gone"
