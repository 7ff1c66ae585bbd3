"""Gemini API clients on a chat-only upstream through the whole pipeline (app in-process, fake
upstream): Gemini CLI's and google-genai's real requests (tests/corpus/requests/) go out as
chat completions, the fake's chat answers come back as GenerateContentResponses and
``alt=sse`` streams; errors in Google's envelope; countTokens and the model list answered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakeupstream import Reply, Stream, chunk
from tests.integration.test_responses_chat import tool_call_stream

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "requests"
CHAT_ONLY = ", apis: [chat], model_map: {'gemini-*': qwen}"
FAST_429 = "retry: {rate_limit: {max_retries: 0}}\n"


def corpus(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text())["body"]
    return body


async def post(gw: Any, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
    hdrs = {"x-goog-api-key": "dummy", **(headers or {})}
    async with gw.session.post(gw.base + path, json=body, headers=hdrs) as r:
        return r.status, r.headers, await r.read()


def sse_docs(body: bytes) -> list[dict[str, Any]]:
    """Every event's data, as the google-genai SDK splits them (blank line, CRLF or LF)."""
    text = body.decode().replace("\r\n", "\n")
    docs = []
    for event in text.split("\n\n"):
        if event.strip():
            assert event.startswith("data: "), event
            docs.append(json.loads(event[len("data: ") :]))
    return docs


def texts(docs: list[dict[str, Any]]) -> str:
    return "".join(p.get("text", "") for d in docs for p in d["candidates"][0]["content"]["parts"])


async def test_google_genai_buffered_request_goes_out_as_chat_and_comes_back_as_gemini(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    status, headers, body = await post(gw, "/v1/models/gemini-2.5-flash:generateContent",
                                       corpus("genai-3.6-knobs-image"))  # fmt: skip
    doc = json.loads(body)
    assert status == 200, body
    assert headers["x-llm-translated"] == "gemini->chat"
    [candidate] = doc["candidates"]
    assert candidate["content"]["role"] == "model" and candidate["finishReason"] == "STOP"
    assert candidate["content"]["parts"] == [{"text": "Hello from the fake upstream."}]
    assert doc["modelVersion"] == "gemini-2.5-flash"
    usage = doc["usageMetadata"]
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    [sent] = gw.fake.chat_requests()
    chat = sent.json()
    assert chat["model"] == "qwen" and "stream" not in chat
    assert chat["messages"][0] == {"role": "system", "content": "You are terse."}
    assert chat["tools"][0]["function"]["parameters"]["type"] == "object"
    assert sent.query == ""  # the client's query belongs to its own API


async def test_gemini_cli_stream_is_gemini_sse_with_finish_and_usage_last(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    status, headers, body = await post(gw, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                                       corpus("gemini-cli-0.61-first"))  # fmt: skip
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream"), body
    docs = sse_docs(body)
    assert texts(docs) == "Hello from fake."
    assert all(d["candidates"][0]["content"]["role"] == "model" for d in docs)
    assert [d["candidates"][0].get("finishReason") for d in docs][-1] == "STOP"
    assert all("finishReason" not in d["candidates"][0] for d in docs[:-1])
    assert "usageMetadata" in docs[-1]
    [sent] = gw.fake.chat_requests()
    chat = sent.json()
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert chat["reasoning_effort"] == "medium" and "top_k" not in chat


async def test_a_function_call_round_trip_keeps_the_call_id(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    gw.fake.script(Stream(tool_call_stream("call_9", "list_directory", '{"dir_path": "/tmp"}')))
    status, _, body = await post(gw, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                                 corpus("gemini-cli-0.61-first"))  # fmt: skip
    docs = sse_docs(body)
    assert status == 200
    last = docs[-1]["candidates"][0]
    assert last["finishReason"] == "STOP"
    assert last["content"]["parts"] == [
        {"functionCall": {"id": "call_9", "name": "list_directory", "args": {"dir_path": "/tmp"}}}
    ]
    assert docs[-1]["usageMetadata"] == {"promptTokenCount": 900, "candidatesTokenCount": 12,
                                         "totalTokenCount": 912, "cachedContentTokenCount": 512}  # fmt: skip
    # The CLI's next request answers the call with its functionResponse (captured with the id
    # the CLI made up, since the captured answer had none): the same id reaches chat.
    await post(gw, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
               corpus("gemini-cli-0.61-tool-result"))  # fmt: skip
    chat = gw.fake.chat_requests()[-1].json()
    assistant, tool = chat["messages"][-2:]
    assert assistant["tool_calls"][0]["id"] == tool["tool_call_id"] == "list_directory_1795829156636_0"
    assert tool["content"].startswith("Directory listing for")


async def test_gemini_cli_routing_call_asks_for_its_schema_in_json_schemas_type_names(make_gateway) -> None:
    """llama-cpp-python answered the schema as Gemini CLI spells it (OBJECT, STRING) with a 500:
    its grammar builder knows only JSON Schema's names."""
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    status, _, body = await post(gw, "/v1beta/models/gemini-3.5-flash-lite:generateContent",
                                 corpus("gemini-cli-0.61-route"))  # fmt: skip
    assert status == 200, body
    [sent] = gw.fake.chat_requests()
    schema = sent.json()["response_format"]["json_schema"]["schema"]
    assert schema["type"] == "object"
    assert {p["type"] for p in schema["properties"].values()} == {"string", "integer"}


async def test_a_heic_photo_goes_to_a_chat_server_as_a_note(make_gateway) -> None:
    """OpenAI refuses a HEIC image ("You uploaded an unsupported image"), as the self-hosted
    servers' decoders fail on one; Gemini CLI sends it after reading a phone's photo."""
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    body = corpus("gemini-cli-0.61-tool-result")
    last = body["contents"][-1]
    heic = {"inlineData": {"mimeType": "image/heic", "data": "AAAAGGZ0eXBoZWljAAAAAG1pZjFoZWlj"}}
    body["contents"][-1] = {**last, "parts": [*last["parts"], heic]}
    status, _, raw = await post(gw, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", body)
    assert status == 200, raw
    [sent] = gw.fake.chat_requests()
    assert sent.json()["messages"][-1] == {"role": "user",
                                           "content": "[image (image/heic) left out: this model cannot read it]"}


async def test_an_upstream_429_is_answered_in_googles_envelope_with_retry_info(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY, extra_yaml=FAST_429)
    error = {"error": {"message": "Rate limit reached, try again in 20s", "type": "requests",
                       "code": "rate_limit_exceeded"}}  # fmt: skip
    gw.fake.script(Reply(429, error, headers={"retry-after": "20"}))
    status, _, body = await post(gw, "/v1beta/models/gemini-2.5-flash:generateContent", corpus("gemini-cli-0.61-first"))
    err = json.loads(body)["error"]
    assert status == 429 and err["code"] == 429 and err["status"] == "RESOURCE_EXHAUSTED"
    assert err["message"]
    retry = [d for d in err["details"] if d["@type"] == "type.googleapis.com/google.rpc.RetryInfo"]
    assert retry == [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "20s"}]
    assert err["x_llm_upstream"]["api"] == "chat" and err["x_llm_upstream"]["status"] == 429


async def test_count_tokens_is_answered_from_the_gateways_estimate(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    status, headers, body = await post(gw, "/v1/models/gemini-2.5-flash:countTokens", corpus("genai-3.6-count-tokens"))
    assert status == 200 and headers["x-llm-estimated"] == "true"
    assert json.loads(body)["totalTokens"] > 0
    big = {"generateContentRequest": corpus("gemini-cli-0.61-first")}
    _, _, body2 = await post(gw, "/v1beta/models/gemini-2.5-flash:countTokens", big)
    assert json.loads(body2)["totalTokens"] > 5000  # Gemini CLI's system prompt and tools count
    assert gw.fake.chat_requests() == []


async def test_a_gateway_key_in_the_query_is_accepted_and_never_sent_upstream(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY, extra_yaml="server: {client_keys: [gw-secret-key]}\n")
    path = "/v1beta/models/gemini-2.5-flash:generateContent"
    async with gw.session.post(gw.base + path + "?key=gw-secret-key", json=corpus("genai-3.6-count-tokens")) as r:
        assert r.status == 200, await r.read()
    async with gw.session.post(gw.base + path + "?key=wrong", json=corpus("genai-3.6-count-tokens")) as r:
        err = (await r.json())["error"]
        assert r.status == 401 and err["status"] == "UNAUTHENTICATED"
    [sent] = gw.fake.chat_requests()
    assert "gw-secret-key" not in sent.query + sent.path + json.dumps(dict(sent.headers))


async def test_model_list_and_model_in_googles_shape(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat], models: ['gemini-2.5-flash', 'gemini-*']")
    async with gw.session.get(gw.base + "/v1beta/models/gemini-2.5-flash", headers={"x-goog-api-key": "k"}) as r:
        assert r.status == 200 and (await r.json())["name"] == "models/gemini-2.5-flash"
    async with gw.session.get(gw.base + "/v1/models", headers={"x-goog-api-key": "k"}) as r:
        listed = await r.json()
    assert r.status == 200 and "models" in listed
    async with gw.session.get(gw.base + "/v1beta/models/claude-x", headers={"x-goog-api-key": "k"}) as r:
        assert r.status == 404 and (await r.json())["error"]["status"] == "NOT_FOUND"
    # A method's path asked with GET is no model (it was described as "gemini-2.5-flash:generateContent").
    async with gw.session.get(gw.base + "/v1beta/models/gemini-2.5-flash:generateContent",
                              headers={"x-goog-api-key": "k"}) as r:  # fmt: skip
        err = (await r.json())["error"]
        assert r.status == 404 and err["status"] == "NOT_FOUND" and "no such endpoint" in err["message"]
    assert [r.path for r in gw.fake.requests] == ["/v1/models"]  # the listing's, and no other


async def test_an_unknown_path_under_v1beta_gets_googles_envelope(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    status, _, body = await post(gw, "/v1beta/models/gemini-2.5-flash:embedContent", {})
    assert status == 404 and json.loads(body)["error"]["status"] == "NOT_FOUND"


@pytest.mark.parametrize("path", ["/v1/models/a/b:generateContent",  # google-genai, model="a/b"
                                  "/v1/models/gemini-2.5-flash:fooBar"])
@pytest.mark.parametrize("apis", ["chat", "messages"])
async def test_a_gemini_call_under_v1_that_no_route_takes_is_refused_in_googles_envelope(
    make_gateway, path: str, apis: str
) -> None:
    # It was forwarded to the upstream as a pass-through and came back as its OpenAI-shaped
    # 404, which google-genai cannot read; under /v1beta/ the gateway answers it itself.
    gw = await make_gateway(upstream_yaml=f", apis: [{apis}]")
    async with gw.session.post(gw.base + path, json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
                               headers={"x-goog-api-key": "k"}) as r:
        err = (await r.json())["error"]
        assert r.status == 404 and err["code"] == 404 and err["status"] == "NOT_FOUND", err
    assert "not gemini" in err["message"] and not gw.fake.requests


async def test_an_openai_fine_tune_under_v1_models_is_still_forwarded(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")  # its id holds colons; DELETE, not POST
    async with gw.session.delete(gw.base + "/v1/models/ft:gpt-4o-mini-2024-07-18:org:suffix:abc123") as r:
        await r.read()
    assert [(q.method, q.path) for q in gw.fake.requests] == [
        ("DELETE", "/v1/models/ft:gpt-4o-mini-2024-07-18:org:suffix:abc123")]


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/v1/cachedContents"),  # google-genai's caches.create, as it sends it
    ("GET", "/v1/cachedContents/abc123"), ("DELETE", "/v1/cachedContents/abc123"),
    ("GET", "/v1/files"), ("GET", "/v1/files/abc123"), ("POST", "/v1/batches/b1:cancel"),
    ("POST", "/v1/tunedModels"), ("GET", "/v1/fileSearchStores")])  # fmt: skip
@pytest.mark.parametrize("apis", ["chat", "messages"])
async def test_a_gemini_resource_under_v1_is_refused_in_googles_envelope_without_a_call(
    make_gateway, method: str, path: str, apis: str
) -> None:
    # It went to the upstream with the operator's key, and google-genai raised its
    # OpenAI-shaped 404 as ``APIError 404 None`` ("unknown path /v1/cachedContents").
    gw = await make_gateway(upstream_yaml=f", apis: [{apis}]")
    body = {"model": "models/gemini-2.5-flash", "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    async with gw.session.request(method, gw.base + path, json=body, headers={"x-goog-api-key": "k"}) as r:
        err = (await r.json())["error"]
        assert r.status == 404 and err["code"] == 404 and err["status"] == "NOT_FOUND", err
    assert f"speaks {apis}, not gemini" in err["message"] and not gw.fake.requests


async def test_a_gemini_resource_goes_to_the_upstream_that_speaks_gemini_behind_a_chat_one(make_gateway) -> None:
    # ``caches.list`` names no model: it went to the first upstream, the chat one.
    from tests.fakeupstream import FakeUpstream

    google = await FakeUpstream().start()
    try:
        gw = await make_gateway(upstreams="  - {name: chat, base_url: 'http://127.0.0.1:9/v1', apis: [chat]}\n"
                                          f"  - {{name: google, base_url: '{google.url}', apis: [gemini]}}\n")  # fmt: skip
        async with gw.session.get(gw.base + "/v1/cachedContents", headers={"x-goog-api-key": "k"}) as r:
            await r.read()
        assert [q.path for q in google.requests] == ["/v1/cachedContents"]
    finally:
        await google.close()


async def test_a_cache_of_a_model_named_as_googles_resource_goes_to_the_route_of_that_model(make_gateway) -> None:
    # google-genai's caches.create names ``models/gemini-2.5-flash``: read whole, it matched no
    # route's ``gemini-*`` and was answered 404 "no upstream is configured for model".
    from tests.fakeupstream import FakeUpstream

    google = await FakeUpstream().start()
    try:
        gw = await make_gateway(upstreams="  - {name: chat, base_url: 'http://127.0.0.1:9/v1', apis: [chat], "
                                          "models: ['gpt-*']}\n"
                                          f"  - {{name: google, base_url: '{google.url}', apis: [gemini], "
                                          "models: ['gemini-*']}\n")  # fmt: skip
        body = {"model": "models/gemini-2.5-flash", "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        async with gw.session.post(gw.base + "/v1/cachedContents", json=body, headers={"x-goog-api-key": "k"}) as r:
            await r.read()
        [sent] = google.requests
        assert sent.path == "/v1/cachedContents" and sent.json() == body  # the name as the client wrote it
    finally:
        await google.close()


async def test_openais_files_and_batches_are_still_forwarded_for_an_openai_caller(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    for path in ("/v1/files", "/v1/batches"):
        async with gw.session.get(gw.base + path, headers={"Authorization": "Bearer sk"}) as r:
            await r.read()
    assert [q.path for q in gw.fake.requests] == ["/v1/files", "/v1/batches"]


async def test_a_chat_delta_stream_becomes_one_event_per_delta(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    gw.fake.script(Stream([chunk({"role": "assistant", "reasoning_content": "Think."}),
                           chunk({"content": "A"}), chunk({"content": "B"}), chunk({}, "length")]))  # fmt: skip
    body = {**corpus("genai-3.6-knobs-image")}
    status, _, raw = await post(gw, "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse", body)
    docs = sse_docs(raw)
    parts = [d["candidates"][0]["content"]["parts"] for d in docs]
    assert status == 200 and parts[:3] == [[{"text": "Think.", "thought": True}], [{"text": "A"}], [{"text": "B"}]]
    assert docs[-1]["candidates"][0]["finishReason"] == "MAX_TOKENS"


async def test_a_gemini_callers_key_reaches_a_chat_upstream_where_it_takes_one_on_a_listing(make_gateway) -> None:
    """docs/security.md: a Gemini caller's key (x-goog-api-key, ?key=) is moved into the
    upstream's key_header. generateContent did; the model listing sent x-goog-api-key to an
    OpenAI-style server, and ?key= not at all."""
    gw = await make_gateway(upstream_yaml=", apis: [chat], models: ['gemini-*']")
    async with gw.session.get(gw.base + "/v1beta/models", headers={"x-goog-api-key": "GKEY"}) as r:
        assert r.status == 200
    async with gw.session.get(gw.base + "/v1beta/models?key=QKEY&pageSize=5") as r:
        assert r.status == 200
    first, second = gw.fake.requests
    assert first.headers.get("Authorization") == "Bearer GKEY" and "x-goog-api-key" not in first.headers
    assert second.headers.get("Authorization") == "Bearer QKEY" and "QKEY" not in second.query


async def test_a_field_of_the_wrong_json_type_is_a_400_in_googles_envelope_never_sent(make_gateway) -> None:
    """`functionDeclarations: 5` was a 500 internal_error (a crash reading the tools' names)."""
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "tools": [{"functionDeclarations": 5}]}
    status, _, answer = await post(gw, "/v1beta/models/gemini-2.5-flash:generateContent", body)
    err = json.loads(answer)["error"]
    assert status == 400 and err["code"] == 400 and err["status"] == "INVALID_ARGUMENT"
    assert err["message"] == "Invalid value at 'tools[0].functionDeclarations': expected an array, got an integer"
    # countTokens estimates a request it cannot translate from its bytes instead
    status, _, counted = await post(gw, "/v1beta/models/gemini-2.5-flash:countTokens", body)
    assert status == 200 and json.loads(counted)["totalTokens"] > 0
    assert gw.fake.requests == []
