"""A Gemini API upstream (``apis: [gemini]``) through the whole app: Gemini clients passed
through (buffered, ``alt=sse`` streams), chat, Messages and Responses clients translated to it
with the real openai and anthropic SDKs (stock settings), Google's errors classified and
retried, an overflow compressed in Gemini's shape.

The upstream here is a small strict Gemini server: it takes the key only in
``x-goog-api-key``, the model and method only from the path, and refuses a body field it does
not know the way Google's API does (400 INVALID_ARGUMENT "Invalid JSON payload received.
Unknown name ..."); it answers with Google's own bodies (tests/corpus/answers/gemini-*.json).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from aiohttp import web

from tests.fakeupstream import FakeUpstream

ANSWERS = Path(__file__).resolve().parents[1] / "corpus" / "answers"
KEY = "AIza-upstream-key"
# GenerateContentRequest's fields (Gemini API reference), in both JSON spellings.
KNOWN = {"contents", "tools", "toolConfig", "safetySettings", "systemInstruction", "generationConfig",
         "cachedContent", "tool_config", "safety_settings", "system_instruction", "generation_config",
         "cached_content"}  # fmt: skip


def answer(name: str) -> Any:
    return json.loads((ANSWERS / f"{name}.json").read_text())


def google_error(status: int, state: str, message: str, details: list[Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "status": state, "details": details or []}}


Reply = Callable[[dict[str, Any]], web.StreamResponse | dict[str, Any] | bytes]


@dataclass
class Seen:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class StrictGemini:
    url: str = ""
    seen: list[Seen] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["rest"].partition(":")
        body = await request.json()
        self.seen.append(Seen(request.path, dict(request.query), dict(request.headers), body))
        if request.headers.get("x-goog-api-key") != KEY or "key" in request.query or "Authorization" in request.headers:
            error = google_error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")
            return web.json_response(error, status=400)
        unknown = sorted(set(body) - KNOWN)
        if unknown:
            message = f'Invalid JSON payload received. Unknown name "{unknown[0]}": Cannot find field.'
            return web.json_response(google_error(400, "INVALID_ARGUMENT", message), status=400)
        if method == "countTokens":
            # CountTokensResponse (Gemini API reference, models.countTokens): totalTokens.
            reply = self.replies.pop(0)(body) if self.replies else {"totalTokens": 31}
            return reply if isinstance(reply, web.StreamResponse) else web.json_response(reply)
        if method not in ("generateContent", "streamGenerateContent") or not model:
            return web.json_response(google_error(404, "NOT_FOUND", "not found"), status=404)
        reply = self.replies.pop(0)(body) if self.replies else answer("gemini-text-usage")["body"]
        if isinstance(reply, web.StreamResponse):
            return reply
        if method == "streamGenerateContent":
            assert request.query.get("alt") == "sse"
            raw = reply if isinstance(reply, bytes) else b"data: " + json.dumps(reply).encode() + b"\r\n\r\n"
            return web.Response(body=raw, content_type="text/event-stream")
        return web.json_response(reply)


@pytest.fixture
async def gemini() -> AsyncIterator[StrictGemini]:
    server = StrictGemini()
    app = web.Application()
    app.router.add_post("/v1beta/models/{rest}", server.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1beta"
    yield server
    await runner.cleanup()


def upstream(server: StrictGemini, extra: str = "",
             model_map: str = "{'gpt-*': gemini-2.5-flash, 'claude-*': gemini-2.5-flash}") -> str:
    return (f"  - {{name: google, base_url: '{server.url}', apis: [gemini], api_key: {KEY}, "
            f"model_map: {model_map}{extra}}}\n")  # fmt: skip


async def post_gemini(gw: Any, path: str, body: Any) -> tuple[int, Any, bytes]:
    headers = {"x-goog-api-key": "client-key"}
    async with gw.session.post(gw.base + path, json=body, headers=headers) as r:
        return r.status, r.headers, await r.read()


HELLO = {"contents": [{"role": "user", "parts": [{"text": "Write a cute story about cats."}]}]}


async def test_a_gemini_client_is_passed_through_with_the_key_in_the_header(make_gateway, gemini) -> None:
    gw = await make_gateway(upstreams=upstream(gemini))
    status, headers, body = await post_gemini(gw, "/v1beta/models/gemini-2.5-flash:generateContent?key=mine", HELLO)
    assert status == 200, body
    assert json.loads(body) == answer("gemini-text-usage")["body"]  # Google's body as it came
    assert "x-llm-translated" not in headers
    [seen] = gemini.seen
    assert seen.path == "/v1beta/models/gemini-2.5-flash:generateContent" and seen.query == {}
    assert seen.body == HELLO  # no model, no stream: Google would refuse them
    # Counted from Google's usageMetadata (a buffered answer was read for "usage" only: its
    # prompt went uncounted, its output estimated from the text).
    tokens = {kind: gw.metric("llm_gateway_tokens_total", upstream="google", model="gemini-2.5-flash", kind=kind)
              for kind in ("prompt", "completion")}  # fmt: skip
    assert tokens == {"prompt": 9, "completion": 87}


async def test_a_gemini_stream_is_passed_through_and_model_map_renames_the_path(make_gateway, gemini) -> None:
    gw = await make_gateway(upstreams=upstream(gemini, model_map="{'gemini-*': gemini-2.5-pro}"))
    raw = answer("gemini-pro-text.stream")["body"].encode()
    gemini.replies.append(lambda body: raw)
    status, headers, body = await post_gemini(gw, "/v1/models/gemini-flash-latest:streamGenerateContent?alt=sse",
                                              HELLO)  # fmt: skip
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    assert body == raw  # event by event, byte for byte
    [seen] = gemini.seen
    assert seen.path == "/v1beta/models/gemini-2.5-pro:streamGenerateContent" and seen.query == {"alt": "sse"}
    assert seen.body == HELLO


async def test_an_openai_chat_client_on_a_gemini_upstream(make_gateway, gemini) -> None:
    gw = await make_gateway(upstreams=upstream(gemini))
    gemini.replies.append(lambda body: answer("gemini-pro-function-call")["body"])
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client")
    try:
        done = await client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": "Which theaters in Mountain View show Barbie?"}],
            tools=[{"type": "function", "function": {"name": "find_theaters", "parameters": {"type": "object"}}}],
            temperature=0.3, max_tokens=500)  # fmt: skip
        completion = done.parse()
        assert done.headers["x-llm-translated"] == "chat->gemini"
        [call] = completion.choices[0].message.tool_calls or []
        assert completion.choices[0].finish_reason == "tool_calls" and call.function.name == "find_theaters"
        assert json.loads(call.function.arguments) == {"movie": "Barbie", "location": "Mountain View, CA"}
        [seen] = gemini.seen
        assert seen.path == "/v1beta/models/gemini-2.5-flash:generateContent"
        assert seen.body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
        assert seen.body["generationConfig"] == {"temperature": 0.3, "maxOutputTokens": 500}
        # The next turn answers the call: it goes back as a functionCall / functionResponse pair.
        await client.chat.completions.create(model="gpt-4o", messages=[
            {"role": "user", "content": "Which theaters?"},
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "Regal, AMC"}])  # fmt: skip
        model_turn, answers = gemini.seen[-1].body["contents"][1:]
        assert model_turn["parts"][0]["functionCall"]["name"] == "find_theaters"
        assert answers["parts"] == [{"functionResponse": {"name": "find_theaters", "id": call.id,
                                                          "response": {"output": "Regal, AMC"}}}]  # fmt: skip
    finally:
        await client.close()


async def test_an_openai_chat_stream_from_a_gemini_stream(make_gateway, gemini) -> None:
    gw = await make_gateway(upstreams=upstream(gemini))
    raw = answer("gemini-pro-text.stream")["body"].encode()
    gemini.replies.append(lambda body: raw)
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client")
    try:
        stream = await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Write a cute story about cats."}],
            stream=True, stream_options={"include_usage": True})  # fmt: skip
        text, finishes, usage = "", [], None
        async for chunk in stream:
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finishes.append(choice.finish_reason)
            usage = chunk.usage or usage
        assert text.startswith("In the quaint") and text.endswith("stronger than ever.")
        assert [f for f in finishes if f] == ["stop"] and usage is not None
        assert gemini.seen[0].path.endswith(":streamGenerateContent") and gemini.seen[0].query == {"alt": "sse"}
    finally:
        await client.close()


async def test_an_anthropic_messages_client_on_a_gemini_upstream(make_gateway, gemini) -> None:
    gw = await make_gateway(upstreams=upstream(gemini))
    gemini.replies.append(lambda body: answer("gemini-pro-function-call")["body"])
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="sk-ant-client")
    try:
        message = await client.messages.create(
            model="claude-sonnet-4-6", max_tokens=1024, system="Be brief.",
            messages=[{"role": "user", "content": "Which theaters in Mountain View show Barbie?"}],
            tools=[{"name": "find_theaters", "input_schema": {"type": "object"}}])  # fmt: skip
        [block] = message.content
        assert block.type == "tool_use" and block.name == "find_theaters"
        assert block.input == {"movie": "Barbie", "location": "Mountain View, CA"}
        assert message.stop_reason == "tool_use"
        body = gemini.seen[0].body
        assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
        assert body["tools"][0]["functionDeclarations"][0]["name"] == "find_theaters"
    finally:
        await client.close()


async def test_an_openai_responses_client_on_a_gemini_upstream(make_gateway, gemini) -> None:
    gw = await make_gateway(upstreams=upstream(gemini))
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client")
    try:
        response = await client.responses.create(model="gpt-5-codex", input="Sort a list in Python.")
        assert response.output_text.startswith("```python")
        assert response.usage is not None and response.usage.input_tokens == 9
    finally:
        await client.close()


async def test_a_per_minute_resource_exhausted_is_retried_after_its_retry_info(make_gateway, gemini) -> None:
    gw = await make_gateway(upstreams=upstream(gemini))
    retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3s"}
    error = google_error(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan "
                         "and billing details.", [retry])  # fmt: skip
    gemini.replies.append(lambda body: web.json_response(error, status=429))
    status, _, body = await post_gemini(gw, "/v1beta/models/gemini-2.5-flash:generateContent", HELLO)
    assert status == 200, body
    assert len(gemini.seen) == 2 and gw.slept and gw.slept[0] >= 3


async def test_an_overflow_is_compressed_once_in_geminis_shape(make_gateway, gemini) -> None:
    gw = await make_gateway(upstreams=upstream(gemini))
    overflow = google_error(400, "INVALID_ARGUMENT",
                            "The input token count (132478) exceeds the maximum number of tokens allowed (131072).")
    gemini.replies.append(lambda body: web.json_response(overflow, status=400))
    history: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "fix the bug"}]}]
    for i in range(8):
        history += [{"role": "model", "parts": [{"functionCall": {"name": "read", "args": {"n": i}, "id": f"c{i}"},
                                                 "thoughtSignature": f"s{i}"}]},
                    {"role": "user", "parts": [{"functionResponse": {"name": "read", "id": f"c{i}",
                                                                     "response": {"output": "y" * 60000}}}]}]
    history.append({"role": "user", "parts": [{"text": "and now?"}]})
    status, _, body = await post_gemini(gw, "/v1beta/models/gemini-2.5-flash:generateContent", {"contents": history})
    assert status == 200, body
    first, retried = gemini.seen
    assert first.body == {"contents": history} and len(json.dumps(retried.body)) < len(json.dumps(first.body))
    assert set(retried.body) == {"contents"}  # still nothing Google does not know
    kept = retried.body["contents"]
    assert kept[-1] == {"role": "user", "parts": [{"text": "and now?"}]}
    for i, content in enumerate(kept):  # every call kept has its answer right after it, signed as it was
        for part in content["parts"]:
            if "functionCall" in part:
                n = part["functionCall"]["args"]["n"]
                assert part["thoughtSignature"] == f"s{n}"
                assert kept[i + 1]["parts"][0]["functionResponse"]["id"] == f"c{n}"


async def test_a_chat_request_that_cannot_be_carried_is_refused_in_chats_envelope(make_gateway, gemini) -> None:
    gw = await make_gateway(upstreams=upstream(gemini))
    status, _, body = await gw.chat({"model": "gpt-4o", "n": 2, "messages": [{"role": "user", "content": "hi"}]})
    assert status == 400 and json.loads(body)["error"]["code"] == "untranslatable_request"
    assert gemini.seen == []


async def test_count_tokens_is_asked_of_a_gemini_upstream(make_gateway, gemini) -> None:
    gw = await make_gateway(upstreams=upstream(gemini, model_map="{'gemini-*': gemini-2.5-pro}"))
    status, headers, body = await post_gemini(gw, "/v1beta/models/gemini-flash-latest:countTokens", HELLO)
    assert status == 200 and json.loads(body) == {"totalTokens": 31}
    assert "x-llm-estimated" not in headers  # the provider's own count
    [seen] = gemini.seen
    assert seen.path == "/v1beta/models/gemini-2.5-pro:countTokens" and seen.body == HELLO


async def test_a_gemini_client_on_a_chat_upstream_is_compressed_in_geminis_shape_too(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat], model_map: {'gemini-*': qwen}")
    gw.fake.context_limit = 30000  # the fake answers OpenAI's own overflow above it
    history: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "fix the bug"}]}]
    for i in range(6):
        history += [{"role": "model", "parts": [{"functionCall": {"name": "read", "args": {"n": i}, "id": f"c{i}"}}]},
                    {"role": "user", "parts": [{"functionResponse": {"name": "read", "id": f"c{i}",
                                                                     "response": {"output": "z" * 40000}}}]}]
    history.append({"role": "user", "parts": [{"text": "and now?"}]})
    status, _, body = await post_gemini(gw, "/v1beta/models/gemini-2.5-flash:generateContent", {"contents": history})
    assert status == 200, body
    first, retried = gw.fake.chat_requests()
    assert len(retried.body) < len(first.body)
    messages = retried.json()["messages"]
    calls = {c["id"] for m in messages for c in m.get("tool_calls") or ()}
    assert calls == {m["tool_call_id"] for m in messages if m["role"] == "tool"}  # no orphan on either side


def forwarding(server: StrictGemini) -> str:
    """An upstream with no key of its own: each client's credential is forwarded."""
    return (f"  - {{name: google, base_url: '{server.url}', apis: [gemini], "
            f"model_map: {{'gpt-*': gemini-2.5-flash}}}}\n")  # fmt: skip


async def test_a_forwarded_client_key_reaches_google_in_its_header_whatever_the_client_sent(
    make_gateway, gemini
) -> None:
    """An OpenAI client's key arrives as Authorization: Bearer and a Gemini client's may arrive as
    ?key=: Google takes neither from the gateway (the strict server refuses both), so the
    credential goes in x-goog-api-key."""
    gw = await make_gateway(upstreams=forwarding(gemini))
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key=KEY)
    try:
        completion = await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        assert completion.choices[0].message.content
    finally:
        await client.close()
    async with gw.session.post(gw.base + f"/v1beta/models/gemini-2.5-flash:generateContent?key={KEY}",
                               json=HELLO) as r:  # fmt: skip
        assert r.status == 200, await r.text()
    for seen in gemini.seen:
        assert seen.headers["x-goog-api-key"] == KEY and "Authorization" not in seen.headers
        assert "key" not in seen.query


async def test_traces_name_the_gemini_operation_and_provider(make_gateway, gemini) -> None:
    """OpenTelemetry's GenAI conventions: the Gemini API's operation is generate_content and its
    provider gcp.gemini, on the request span of a Gemini client and on an attempt sent to a
    Gemini upstream (a translated chat client's)."""
    from gateway.live import LIVE
    from tests.spans import attempts, from_sdk, in_memory, roots

    gw = await make_gateway(upstreams=upstream(gemini))
    tracing, exporter = in_memory()
    gw.app[LIVE].services.tracing = tracing
    status, _, body = await post_gemini(gw, "/v1beta/models/gemini-2.5-flash:generateContent", HELLO)
    assert status == 200, body
    async with gw.session.post(gw.base + "/v1/chat/completions", headers={"Authorization": "Bearer sk"},
                               json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}) as r:
        assert r.status == 200, await r.text()
    native, translated = roots(from_sdk(exporter.get_finished_spans()))
    assert native.attributes["gen_ai.operation.name"] == "generate_content"
    assert translated.attributes["gen_ai.operation.name"] == "chat"  # the client's operation
    for server in (native, translated):
        [attempt] = attempts(server)
        assert attempt["gen_ai.operation.name"] == "generate_content"
        assert attempt["gen_ai.provider.name"] == "gcp.gemini"


@pytest.mark.parametrize("apis", ["gemini", "chat", "messages"])
async def test_a_model_whose_name_holds_a_colon_reaches_every_upstream_under_that_name(make_gateway, apis: str) -> None:
    # ollama's names do ("qwen2.5:7b"): translated, the request was served; on the Gemini
    # upstream the fake took the path for an unknown one, where Google reads the method after
    # the last colon.
    async with FakeUpstream() as fake:
        base = fake.url.removesuffix("/v1") + "/v1beta" if apis == "gemini" else fake.url
        gw = await make_gateway(fake=fake, upstreams=f"  - {{name: up, base_url: '{base}', apis: [{apis}], api_key: k}}\n")
        status, _, raw = await post_gemini(gw, "/v1beta/models/qwen2.5:7b:generateContent",
                                           {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
        assert status == 200, raw
        sent = fake.requests[-1]
        assert sent.path == "/v1beta/models/qwen2.5:7b:generateContent" if apis == "gemini" else \
            json.loads(sent.body)["model"] == "qwen2.5:7b"
