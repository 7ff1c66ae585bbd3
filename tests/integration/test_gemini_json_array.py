"""A Gemini ``:streamGenerateContent`` asked without ``?alt=sse``: the JSON-array stream Google
answers it with (gateway/apis/gemini/array.py). The same chunks as the SSE stream, framed as
one array; streamed element by element, not buffered; an error before the stream as
``[{"error": …}]``; a stream broken midway closed with an error element, still one valid
array. (No stock client asks for it, google-genai and Gemini CLI both send ``alt=sse``: the
client here is aiohttp, reading as the bytes come.)"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tests.fakeupstream import Reply, Stream, chunk
from tests.integration.test_gemini_on_chat import CHAT_ONLY, corpus, post, sse_docs

ARRAY = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"


def without_id(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "responseId"}


async def test_the_array_holds_the_same_chunks_as_the_sse_stream(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    _, _, sse = await post(gw, ARRAY + "?alt=sse", corpus("gemini-cli-0.61-first"))
    status, headers, body = await post(gw, ARRAY, corpus("gemini-cli-0.61-first"))
    assert status == 200 and headers["Content-Type"].startswith("application/json"), body
    assert body.startswith(b"[{") and b"}\n,\r\n{" in body and body.endswith(b"}\n]")
    docs = json.loads(body)
    assert [without_id(d) for d in docs] == [without_id(d) for d in sse_docs(sse)]  # the id is per answer
    assert docs[-1]["candidates"][0]["finishReason"] == "STOP" and "usageMetadata" in docs[-1]
    assert [r.json()["stream"] for r in gw.fake.chat_requests()] == [True, True]


async def test_elements_are_written_as_they_come_not_when_the_stream_ends(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    words = [chunk({"role": "assistant", "content": ""}), chunk({"content": "first"}),
             chunk({"content": " last"}), chunk({}, "stop")]  # fmt: skip
    gw.fake.script(Stream(words, pause_s=0.6, pause_after=2))  # silent after "first", as a slow model is
    started = time.monotonic()
    arrivals: list[tuple[float, bytes]] = []
    async with gw.session.post(gw.base + ARRAY, json=corpus("genai-3.6-stream-json-schema"),
                               headers={"x-goog-api-key": "dummy"}) as r:  # fmt: skip
        assert r.status == 200
        async for piece in r.content.iter_any():
            arrivals.append((time.monotonic() - started, piece))
    body = b"".join(p for _, p in arrivals)
    first_at = next(t for t, _ in arrivals if b'"first"' in b"".join(p for tt, p in arrivals if tt <= t))
    last_at = next(t for t, _ in arrivals if b'" last"' in b"".join(p for tt, p in arrivals if tt <= t))
    assert first_at < 0.5 <= last_at, arrivals  # "first" left before the upstream made " last"
    assert [d["candidates"][0]["content"]["parts"][0].get("text") for d in json.loads(body)][:2] == ["first", " last"]


async def test_an_error_before_the_stream_is_the_envelope_in_an_array(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY, extra_yaml="retry: {provider_unavailable: {max_retries: 0}}\n")
    gw.fake.script(Reply(503, {"error": {"message": "overloaded", "type": "server_error", "code": None}}))
    status, headers, body = await post(gw, ARRAY, corpus("gemini-cli-0.61-first"))
    assert status == 503 and headers["Content-Type"].startswith("application/json")
    [doc] = json.loads(body)
    assert doc["error"]["code"] == 503 and doc["error"]["status"] == "UNAVAILABLE"
    status, _, body = await post(gw, "/v1beta/models/gemini-2.5-flash:streamGenerateContent", {"contents": 3})
    [doc] = json.loads(body)
    assert status == 400 and doc["error"]["status"] == "INVALID_ARGUMENT"


async def test_a_stream_broken_midway_ends_with_an_error_element_in_a_valid_array(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    gw.fake.script(Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": "partial"})], then="drop"))
    status, _, body = await post(gw, ARRAY, corpus("gemini-cli-0.61-first"))
    docs = json.loads(body)
    assert status == 200 and docs[0]["candidates"][0]["content"]["parts"][0]["text"] == "partial"
    assert docs[-1]["error"]["code"] >= 500


async def test_the_sse_stream_is_unchanged_beside_it(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    results = await asyncio.gather(post(gw, ARRAY + "?alt=sse", corpus("gemini-cli-0.61-first")),
                                   post(gw, ARRAY, corpus("gemini-cli-0.61-first")))  # fmt: skip
    (_, sse_headers, sse), (_, array_headers, array) = results
    assert sse_headers["Content-Type"].startswith("text/event-stream") and sse.startswith(b"data: ")
    assert array_headers["Content-Type"].startswith("application/json") and array.startswith(b"[")
