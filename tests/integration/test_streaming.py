"""Streams that never hang: clean replays before the first byte, one classified error
event (and no [DONE]) after it, and upstream cancellation when the client leaves."""

import asyncio
import contextlib
import json
import logging

import pytest

from tests.fakeupstream import Reply, Stream, chunk, data_events, stream_events
from tests.integration.conftest import eventually

STREAM_REQ = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "hi"}]}




def last_error(body: bytes) -> dict:
    last = json.loads(data_events(body)[-1])
    assert last["choices"] == [{"index": 0, "delta": {}, "finish_reason": "error"}]
    return last["error"]


async def test_a_clean_stream_ends_with_done(make_gateway) -> None:
    gw = await make_gateway()
    status, headers, body = await gw.chat(STREAM_REQ)
    events = data_events(body)
    assert status == 200 and events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1])
    assert text == "Hello from fake."


async def test_stream_dropped_after_two_chunks_ends_with_one_error_event(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}),
                           chunk({"content": "lo"})], then="drop"))
    status, _, body = await gw.chat(STREAM_REQ)
    assert status == 200 and "[DONE]" not in data_events(body)
    err = last_error(body)
    assert err["x_llm_error_type"] == "provider_unavailable" and err["retryable"] is True
    assert sum('"finish_reason":"error"' in e for e in data_events(body)) == 1
    assert len(gw.fake.chat_requests()) == 1  # never retried after bytes went out


@pytest.mark.stall_timeouts
async def test_stalled_stream_ends_after_idle_timeout(make_gateway) -> None:
    gw = await make_gateway()  # idle_s: 1
    gw.fake.script(Stream([chunk({"content": "a"})], then="stall"))
    status, _, body = await asyncio.wait_for(gw.chat(STREAM_REQ), 10)
    assert status == 200 and last_error(body)["code"] == "idle_timeout"


@pytest.mark.parametrize("then", ["drop", "stall"])
@pytest.mark.stall_timeouts
async def test_a_failure_after_the_finish_chunk_does_not_contradict_the_answer(make_gateway, caplog, then: str) -> None:
    """The upstream sent finish_reason, then broke or stalled before its usage chunk and
    [DONE]: the client has the whole answer, and no error chunk follows it."""
    caplog.set_level(logging.INFO, logger="gateway")
    gw = await make_gateway()  # idle_s: 1
    gw.fake.script(Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": "hello"}),
                           chunk({}, "stop")], then=then))  # fmt: skip
    status, _, body = await asyncio.wait_for(gw.chat(STREAM_REQ), 10)
    events = data_events(body)
    assert status == 200 and not any('"finish_reason":"error"' in e for e in events), events
    assert [json.loads(e)["choices"][0]["finish_reason"] for e in events if e != "[DONE]"][-1] == "stop"
    def lines() -> list[dict]:
        return [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]

    await eventually(lambda: bool(lines()), "the request's log line")
    (line,) = lines()
    assert "ended_by" not in line and line["after_end"] in (("stream_broken", "reset") if then == "drop" else ("idle_timeout",))


async def test_clean_eof_without_finish_is_not_mistaken_for_done(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([chunk({"content": "a"})], then="eof"))
    _, _, body = await gw.chat(STREAM_REQ)
    assert last_error(body)["x_llm_error_type"] == "provider_unavailable"


async def test_stream_broken_before_visible_output_is_replayed_silently(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([b": keep-alive\n\n", chunk({"role": "assistant", "content": ""})], then="drop"),
                   Stream(stream_events()))
    status, headers, body = await gw.chat(STREAM_REQ)
    assert status == 200 and headers["x-llm-attempts"] == "2"
    events = data_events(body)
    assert events[-1] == "[DONE]" and not any('"error"' in e for e in events)
    assert sum('"role"' in e for e in events) == 1  # the dead attempt's role chunk was held back


async def test_error_status_before_stream_is_retried(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Reply(503, "busy"), Stream(stream_events()))
    status, headers, body = await gw.chat(STREAM_REQ)
    assert status == 200 and headers["x-llm-attempts"] == "2" and data_events(body)[-1] == "[DONE]"


async def test_error_event_as_first_event_is_retried(make_gateway) -> None:
    gw = await make_gateway()
    overloaded = b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    gw.fake.script(Stream([overloaded], then="eof"), Stream(stream_events()))
    status, headers, body = await gw.chat(STREAM_REQ)
    assert status == 200 and headers["x-llm-attempts"] == "2" and data_events(body)[-1] == "[DONE]"


async def test_error_event_mid_stream_becomes_one_classified_error(make_gateway) -> None:
    gw = await make_gateway()
    err_event = {"error": {"message": "The server had an error while processing your request.", "type": "server_error", "code": None}}
    gw.fake.script(Stream([chunk({"content": "a"}), err_event, chunk({"content": "never"})], then="done"))
    _, _, body = await gw.chat(STREAM_REQ)
    events = data_events(body)
    assert "[DONE]" not in events and not any("never" in e for e in events)
    err = last_error(body)
    assert err["x_llm_error_type"] == "provider_unavailable"
    assert err["message"] == "The server had an error while processing your request."


async def test_client_disconnect_cancels_the_upstream(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([chunk({"content": "a"})] * 2, then="stall"))
    resp = await gw.session.post(gw.base + "/v1/chat/completions", json=STREAM_REQ)
    await resp.content.readline()
    assert gw.metric("llm_gateway_in_flight_requests") == 1
    resp.close()  # the agent goes away mid-stream
    for _ in range(50):
        await asyncio.sleep(0.02)
        if gw.metric("llm_gateway_in_flight_requests") == 0 and gw.fake.cancelled:
            break
    assert gw.metric("llm_gateway_in_flight_requests") == 0
    assert gw.fake.cancelled == 1


async def test_usage_is_counted_and_the_extra_chunk_stripped(make_gateway) -> None:
    gw = await make_gateway()
    _, _, body = await gw.chat(STREAM_REQ)
    sent = gw.fake.chat_requests()[-1].json()
    assert sent["stream_options"] == {"include_usage": True}
    assert not any('"usage"' in e and '"choices": []' in e for e in data_events(body))
    assert gw.metric("llm_gateway_tokens_total", upstream="primary", model="gpt-4o-mini", kind="completion") == 3


@pytest.mark.parametrize("served", ["gpt-4o-mini", "served-name"])  # sent as it is, or renamed
async def test_a_stream_asked_for_its_usage_keeps_what_only_json_reads_and_the_rest_of_the_request(
    make_gateway, served: str
) -> None:
    gw = await make_gateway(upstream_yaml="" if served == "gpt-4o-mini" else f", model_map: {{'gpt-4o-mini': {served}}}")
    body = (b'{"model": "gpt-4o-mini", "stream": true, "user": "\\ud800", "seed": 123456789012345678901234,'
            b' "messages": [{"role": "user", "content": "h\\u00e9llo \\ud83d\\ude00"}]}')
    status, _, _ = await gw.chat(data=body, headers={"Content-Type": "application/json"})
    assert status == 200
    raw = gw.fake.chat_requests()[-1].body
    assert b'"\\ufffd"' in raw  # a lone surrogate is read as U+FFFD (no UTF-8 writes one)
    sent = json.loads(raw)
    assert sent["stream_options"] == {"include_usage": True} and sent["model"] == served
    assert sent["seed"] == 123456789012345678901234 and sent["messages"][0]["content"] == "héllo 😀"


async def test_usage_chunk_kept_for_a_client_that_asked(make_gateway) -> None:
    gw = await make_gateway()
    _, _, body = await gw.chat({**STREAM_REQ, "stream_options": {"include_usage": True}})
    usage_events = [json.loads(e) for e in data_events(body) if e != "[DONE]" and '"usage"' in e]
    assert usage_events and usage_events[-1]["choices"] == []


async def test_a_broken_stream_on_a_passthrough_path_is_counted_as_an_error(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([chunk({"content": "a"}), chunk({"content": "b"})], then="drop"))
    async with gw.session.post(gw.base + "/v1/completions", json={"model": "gpt-4o-mini", "prompt": "x",
                                                                  "stream": True}) as r:
        assert r.status == 200
        try:
            await r.read()
        except Exception:
            pass  # the body is unterminated: the only honest signal on an unknown grammar
    await eventually(lambda: gw.metric("llm_gateway_in_flight_requests") == 0, "the request ended")
    assert gw.metric("llm_gateway_requests_total", upstream="primary", model="gpt-4o-mini", status="200",
                     error_type="provider_unavailable") == 1


async def test_a_malformed_chunk_ends_the_stream_with_a_typed_error_not_a_parser_crash(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}),
                           b"data: {not json\n\n", chunk({"content": "lo"})], then="done"))
    status, _, body = await gw.chat(STREAM_REQ)
    assert b"{not json" not in body and "[DONE]" not in data_events(body)
    assert last_error(body)["code"] == "malformed_event"


async def test_a_client_that_leaves_mid_stream_is_its_200_ended_by_client_gone_never_a_500(
    make_gateway, caplog: pytest.LogCaptureFixture
) -> None:
    # It got a 200 head: the status is what the client got (499 is for one gone before any).
    caplog.set_level(logging.INFO, logger="gateway")
    gw = await make_gateway()
    long_answer = [chunk({"role": "assistant", "content": ""}), *(chunk({"content": f"w{i} "}) for i in range(50))]
    gw.fake.script(*[Stream(long_answer, delay_s=0.02) for _ in range(5)])
    host, port = gw.base.removeprefix("http://").split(":")
    body = json.dumps(STREAM_REQ).encode()
    for _ in range(5):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        await asyncio.wait_for(reader.readuntil(b"w1 "), 10)  # the answer has started
        writer.transport.abort()  # gone, without a goodbye
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    await eventually(lambda: gw.metric("llm_gateway_in_flight_requests") == 0, "the five requests ended")
    labels = {"upstream": "primary", "model": "gpt-4o-mini", "error_type": "none"}
    assert gw.metric("llm_gateway_requests_total", status="500", **labels) == 0
    assert gw.metric("llm_gateway_requests_total", status="499", **labels) == 0
    assert gw.metric("llm_gateway_requests_total", status="200", **labels) == 5
    lines = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert [(r["status"], r["ended_by"]) for r in lines] == [(200, "client_gone")] * 5
    assert gw.metric("llm_gateway_in_flight_requests") == 0


@pytest.mark.parametrize("then", ["drop", "eof"])
async def test_a_gateway_fault_mid_stream_cuts_the_stream_at_once(
    make_gateway, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, then: str
) -> None:
    # A bug that raises once a stream's head left (here: counting its usage) was answered with a
    # 500 written after the head: garbage inside the stream, or, after an upstream drop,
    # nothing at all while the client waited for the stream's end until its own timeout.
    import aiohttp

    from gateway.pipeline import relay

    def fault(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a fault in the gateway")

    monkeypatch.setattr(relay, "_count_usage", fault)
    caplog.set_level("INFO", logger="gateway")
    gw = await make_gateway()
    events = [chunk({"role": "assistant", "content": ""}), chunk({"content": "Hi"})]
    gw.fake.script(Stream(events if then == "drop" else [*events, chunk({}, "stop")], then=then))
    payload = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(aiohttp.ClientPayloadError):  # a broken answer, at once: never a hang
        async with gw.session.post(gw.base + "/v1/chat/completions", json=payload,
                                   timeout=aiohttp.ClientTimeout(total=5)) as r:  # fmt: skip
            assert r.status == 200
            await r.read()
    monkeypatch.undo()
    assert (await gw.chat())[0] == 200  # the gateway is healthy
    lines = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert lines[0]["status"] == 500 and lines[0]["ended_by"] == "internal_error"
    assert not any("a fault in the gateway" in str(r.msg) for r in caplog.records)  # never the text


QUOTED_DONE = [  # what a chat stream's bytes hold before a cut, none of it its end (audit)
    [chunk({"role": "assistant", "content": ""}), chunk({"content": "if line == 'data: [DONE]': break"})],
    [chunk({"role": "assistant", "content": None}),
     chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                            "function": {"name": "get_weather", "arguments": ""}}]}),
     chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "[DONE] P'}}]})],
    # "finish_reason": "" on every chunk, as ollama (ollama/ollama#4357) and sglang 0.4.3
    # (sgl-project/sglang#3912) were reported to send.
    [chunk({"role": "assistant", "content": ""}, ""), chunk({"content": "Hello"}, "")],
]


@pytest.mark.parametrize("events", QUOTED_DONE, ids=["text", "tool-arguments", "empty-finish-reason"])
async def test_a_cut_after_bytes_that_only_look_like_an_end_is_a_broken_stream(make_gateway, events) -> None:
    """The chat reader took any event holding `[DONE]` or `"finish_reason": "` for the end: the
    cut after it was relayed as a finished answer, a truncated tool call as complete, on every
    client API (audit, with Claude Code and Codex taking the truncated call). One typed error
    now, as for any other cut."""
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    gw.fake.script(Stream(events, then="drop"))
    status, _, body = await gw.chat(STREAM_REQ)
    assert status == 200 and last_error(body)["x_llm_error_type"] == "provider_unavailable"
    # A Messages client on the same upstream: an error event, no message_stop.
    gw.fake.script(Stream(events, then="drop"))
    status, _, body = await gw.messages({"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": True,
                                         "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert status == 200 and b"event: error" in body and b"message_stop" not in body, body
