"""A Gemini ``alt=sse`` stream broken mid-answer, as each Gemini client reads its end.

The gateway ends it with the ``data: {"error": …}`` event (SSE parsers, python-genai) and then,
in an HTTP chunk of its own written ``APART_S`` later, the same error as the bare JSON object:
@google/genai, the JS SDK bundled in Gemini CLI, raises only on a network read that is that
object whole, and dropped the event as an empty answer (Gemini CLI 0.61.0 then retried for a
missing finishReason and exited 0 with the partial text repeated). The bytes are read here
chunk by chunk, as the JS reader gets them; tests/e2e/test_gemini_cli.py runs the CLI itself.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.fake.gemini import stream_chunks
from gateway.pipeline.relay import APART_S
from gateway.sse import EventSplitter, parse_event
from tests.fakeupstream import Stream, chunk
from tests.integration.test_gemini_on_chat import CHAT_ONLY, corpus
from tests.integration.test_gemini_upstream import StrictGemini, gemini, upstream

__all__ = ["gemini"]  # the Gemini upstream's fixture, used by name

SSE = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


async def http_chunks(gw: Any, path: str, body: dict[str, Any]) -> list[bytes]:
    """The body as the HTTP chunks the gateway wrote (aiohttp keeps their boundaries)."""
    pieces: list[bytes] = []
    async with gw.session.post(gw.base + path, json=body, headers={"x-goog-api-key": "dummy"}) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        current = b""
        async for data, end_of_chunk in r.content.iter_chunks():
            current += data
            if end_of_chunk and current:
                pieces.append(current)
                current = b""
        if current:
            pieces.append(current)
    return pieces


def sse_data(body: bytes) -> list[Any]:
    """Every event's data, as an SSE parser reads them (the gateway's own, standard grammar)."""
    splitter = EventSplitter()
    events = splitter.feed(body) + ([splitter.pending] if splitter.pending.strip() else [])
    return [json.loads(e.data) for e in map(parse_event, events) if e.data is not None]


def check_ending(pieces: list[bytes], text: str) -> dict[str, Any]:
    """The checks every broken Gemini stream passes; the error it ends with."""
    *stream, bare = pieces
    docs = sse_data(b"".join(pieces))  # the bare object is no event: SSE parsers skip its line
    assert docs[0]["candidates"][0]["content"]["parts"][0]["text"] == text
    framed = docs[-1]
    assert list(framed) == ["error"] and framed["error"]["status"] == "UNAVAILABLE"
    assert b"".join(stream).endswith(b"\r\n\r\n")  # the event is whole before the bare form
    # What @google/genai's JSON.parse of that read gets: the same error, one line, and a read of
    # nothing else (it came in an HTTP chunk of its own).
    assert not bare.startswith(b"data:") and bare.count(b"\n") == 2
    assert json.loads(bare) == framed
    return framed


async def test_a_translated_stream_cut_mid_answer_ends_with_the_event_then_the_bare_error_apart(
    make_gateway: Any,
) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    gw.fake.script(Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": "The answer"})],
                          then="drop"))  # fmt: skip
    pieces = await http_chunks(gw, SSE, corpus("gemini-cli-0.61-first"))
    err = check_ending(pieces, "The answer")["error"]
    assert err["code"] == 503 and err["retryable"] is True
    assert gw.slept == [APART_S]  # asked of the injected sleep, between the two writes


async def test_a_gemini_upstreams_stream_that_stops_short_ends_the_same_way(
    make_gateway: Any, gemini: StrictGemini
) -> None:
    """The fake's Gemini events (gateway/fake/gemini.py), and then the body ends with no
    finishReason."""
    first = stream_chunks(words=("Once", " upon"), finish=False)
    gemini.replies.append(lambda body: b"".join(b"data: " + json.dumps(d).encode() + b"\r\n\r\n" for d in first))
    gw = await make_gateway(upstreams=upstream(gemini, model_map="{'gemini-*': gemini-2.5-pro}"))
    pieces = await http_chunks(gw, SSE, {"contents": [{"role": "user", "parts": [{"text": "Tell a story."}]}]})
    check_ending(pieces, "Once")
    assert gw.slept == [APART_S]


async def test_a_json_array_stream_has_its_error_as_an_element_and_no_bare_copy(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    gw.fake.script(Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": "partial"})], then="drop"))
    async with gw.session.post(gw.base + SSE.removesuffix("?alt=sse"), json=corpus("gemini-cli-0.61-first"),
                               headers={"x-goog-api-key": "dummy"}) as r:  # fmt: skip
        docs = json.loads(await r.read())
    assert [list(d) for d in docs][-1] == ["error"] and len(docs) == 2
    assert gw.slept == []  # nothing to wait for: the array's readers take the element


async def test_drain_running_out_in_the_pause_keeps_the_streams_own_error(make_gateway: Any) -> None:
    """drain_s runs out while the ending waits APART_S: the event already written stays the only
    one, and its bare form follows at once; a second ending (gateway_shutdown) after it gave
    @google/genai the wrong error (review)."""
    import asyncio

    from gateway.live import LIVE
    from gateway.server import drain

    gw = await make_gateway(upstream_yaml=CHAT_ONLY, real_sleep=True)
    gw.fake.script(Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": "The answer"})],
                          then="drop"))  # fmt: skip
    life = gw.app[LIVE].life
    reading = asyncio.create_task(http_chunks(gw, SSE, corpus("gemini-cli-0.61-first")))
    for _ in range(200):  # until the ending is in its pause: the stream is cut as soon as it starts
        if gw.fake.requests and life.in_flight == 1:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(APART_S / 2)
    await drain(life, drain_s=0.0)
    pieces = await reading
    errors = [d for d in sse_data(b"".join(pieces)) if "error" in d]
    assert len(errors) == 1 and "stream_broken" in json.dumps(errors[0]), errors
    assert json.loads(pieces[-1]) == errors[0]


async def test_an_error_google_writes_bare_mid_stream_is_classified_not_taken_for_a_break(
    make_gateway: Any, gemini: StrictGemini
) -> None:
    """Google writes a mid-stream error as bare, pretty-printed JSON without ``data:``
    (googleapis/python-genai#1162). Taken for a comment, a 429's stream ended as a broken
    connection: retried six times and answered 503 "the upstream connection broke", Google's
    words lost (audit). Read as the error it is: a rate limit, with Google's message."""
    bare = json.dumps({"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                                 "status": "RESOURCE_EXHAUSTED"}}, indent=2).encode() + b"\r\n\r\n"  # fmt: skip
    gemini.replies.extend([lambda body: bare] * 10)
    gw = await make_gateway(upstreams=upstream(gemini, model_map="{'gemini-*': gemini-2.5-pro}"))
    async with gw.session.post(gw.base + SSE, json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
                               headers={"x-goog-api-key": "dummy"}) as r:  # fmt: skip
        body = await r.read()
        assert r.headers["x-llm-error-type"] == "rate_limit", (r.status, body)
        assert r.status == 429
    assert b"Resource has been exhausted" in body
    assert len(gemini.seen) == 4  # a rate limit's attempts (1 + 3), not a broken connection's 6
