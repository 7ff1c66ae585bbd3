"""/v1/responses gets the full pipeline: retries by class, silent replays, one
`response.failed` for a broken stream, rescue of an overflowing agent conversation with
its function_call/function_call_output pairs intact."""

import asyncio
import json

import pytest
from openai.types.responses import ResponseFailedEvent

from tests.corpus_cases import IN_SAMPLE
from tests.fakeupstream import (
    Reply,
    Stream,
    responses_deltas,
    responses_error,
    responses_head,
    responses_stream,
    sse,
)
from tests.fakeupstream import (
    named_events as events,
)
from tests.responses_convo import INSTRUCTIONS, assert_valid_input, responses_conversation

STREAM_REQ = {"model": "gpt-5-codex", "stream": True, "input": "hi"}
UNAVAILABLE = responses_error(503, "The server is overloaded or not ready yet.", "server_error", None)




async def test_success_and_usage(make_gateway) -> None:
    gw = await make_gateway()
    status, headers, body = await gw.responses()
    assert status == 200 and json.loads(body)["output"][0]["content"][0]["text"] == "Hello from the fake upstream."
    assert gw.metric("llm_gateway_tokens_total", upstream="primary", model="gpt-5-codex", kind="prompt") == 30


async def test_clean_stream_ends_with_response_completed(make_gateway) -> None:
    gw = await make_gateway()
    status, _, body = await gw.responses(STREAM_REQ)
    names = [n for n, _ in events(body)]
    assert status == 200 and names[0] == "response.created" and names[-1] == "response.completed"
    assert gw.metric("llm_gateway_tokens_total", upstream="primary", model="gpt-5-codex", kind="completion") == 9


async def test_unavailable_twice_then_success(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(UNAVAILABLE, UNAVAILABLE)
    status, headers, _ = await gw.responses()
    assert status == 200 and headers["x-llm-attempts"] == "3" and len(gw.fake.responses_requests()) == 3


async def test_long_rate_limit_is_handed_back_at_once(make_gateway) -> None:
    gw = await make_gateway()
    limited = responses_error(429, "Rate limit reached for gpt-5-codex. Please try again in 45s.", "requests",
                              "rate_limit_exceeded")
    limited.headers = {"retry-after": "45"}
    gw.fake.script(limited)
    status, headers, _ = await gw.responses()
    assert status == 429 and headers["retry-after"] == "45" and headers["x-llm-error-type"] == "rate_limit"
    assert len(gw.fake.responses_requests()) == 1 and gw.slept == []


async def test_stream_cut_after_text_ends_with_one_response_failed(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([*responses_head(), *responses_deltas(("Hel", "lo"))], then="drop"))
    status, _, body = await gw.responses(STREAM_REQ)
    evs = events(body)
    names = [n for n, _ in evs]
    assert status == 200 and names[-1] == "response.failed" and names.count("response.failed") == 1
    assert "response.completed" not in names
    failed = evs[-1][1]
    assert failed["sequence_number"] == evs[-2][1]["sequence_number"] + 1
    assert failed["response"]["error"]["x_llm_error_type"] == "provider_unavailable"
    # A code typed clients accept (it was `stream_broken`), the gateway's own beside it.
    assert failed["response"]["error"]["code"] == "server_error"
    assert failed["response"]["error"]["x_llm_code"] == "stream_broken"
    ResponseFailedEvent.model_validate(failed)
    assert len(gw.fake.responses_requests()) == 1


@pytest.mark.stall_timeouts
async def test_stalled_stream_and_missing_end_marker_are_broken(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([*responses_head(), *responses_deltas(("a",))], then="stall"),
                   Stream([*responses_head(), *responses_deltas(("a",))], then="eof"))
    _, _, body = await asyncio.wait_for(gw.responses(STREAM_REQ), 10)
    assert events(body)[-1][1]["response"]["error"]["x_llm_code"] == "idle_timeout"
    _, _, body = await gw.responses(STREAM_REQ)
    assert events(body)[-1][0] == "response.failed"


async def test_a_malformed_event_mid_stream_never_reaches_the_client(make_gateway) -> None:
    """Found by bench/faults.py: the openai SDK's parser raised JSONDecodeError on it."""
    gw = await make_gateway()
    gw.fake.script(Stream([*responses_head(), *responses_deltas(("a", "b")),
                           b"event: response.output_text.delta\ndata: {not json\n\n"], then="stall"))
    _, _, body = await asyncio.wait_for(gw.responses(STREAM_REQ), 10)
    assert b"{not json" not in body
    name, doc = events(body)[-1]
    assert name == "response.failed" and doc["response"]["error"]["x_llm_code"] == "malformed_event"


async def test_upstream_failure_before_content_is_replayed_silently(make_gateway) -> None:
    gw = await make_gateway()
    failed = sse("response.failed", {"type": "response.failed", "sequence_number": 4, "response": {
        "id": "resp_x", "status": "failed", "error": {"code": "server_error", "message": "An error occurred."}}})
    gw.fake.script(Stream(responses_head(), then="drop"), Stream([*responses_head(), failed], then="eof"),
                   Stream(responses_stream(), then="eof"))
    status, headers, body = await gw.responses(STREAM_REQ)
    names = [n for n, _ in events(body)]
    assert status == 200 and names.count("response.created") == 1 and names[-1] == "response.completed"
    assert headers["x-llm-attempts"] == "3"


async def test_upstream_failure_mid_stream_keeps_the_providers_code(make_gateway) -> None:
    gw = await make_gateway()
    failed = sse("response.failed", {"type": "response.failed", "sequence_number": 6, "response": {
        "id": "resp_x", "status": "failed", "error": {"code": "server_error", "message": "An error occurred."}}})
    gw.fake.script(Stream([*responses_head(), *responses_deltas(("a", "b")), failed], then="eof"))
    _, _, body = await gw.responses(STREAM_REQ)
    evs = events(body)
    name, doc = evs[-1]
    assert name == "response.failed" and doc["response"]["error"]["code"] == "server_error"
    assert doc["response"]["error"]["x_llm_error_type"] == "provider_unavailable"
    # The gateway's response.failed stands in for the upstream's, number 6: no gap.
    assert [d["sequence_number"] for _, d in evs] == list(range(7))


async def test_an_overflow_mid_stream_keeps_the_code_codex_reads(make_gateway) -> None:
    """context_length_exceeded is not in the SDK's ResponseError set, but Codex reads it in a
    response.failed (it says the thread ran out of room and does not retry): it stays."""
    gw = await make_gateway()
    case = next(c for c in IN_SAMPLE if c["name"] == "openai-responses-stream-failed-context-length-exceeded")
    failed = case["body"].replace('"sequence_number":2', '"sequence_number":6').encode()
    gw.fake.script(Stream([*responses_head(), *responses_deltas(("a", "b")), failed], then="eof"))
    _, _, body = await gw.responses(STREAM_REQ)
    name, doc = events(body)[-1]
    assert name == "response.failed" and doc["response"]["error"]["code"] == "context_length_exceeded"
    assert doc["response"]["error"]["x_llm_error_type"] == "context_overflow"


async def test_gateway_errors_use_the_responses_envelope(make_gateway) -> None:
    gw = await make_gateway()
    status, headers, body = await gw.responses(data=b"[1, 2")
    err = json.loads(body)["error"]
    assert status == 400 and set(err) >= {"message", "type", "param", "code"} and err["code"] == "invalid_json"
    status, _, body = await gw.responses({"model": "m", "input": 42})
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_input"
    assert gw.fake.responses_requests() == []


async def test_overflowing_agent_conversation_is_rescued_once_with_valid_input(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", context_window: 24000")
    gw.fake.context_limit = 24000
    items = responses_conversation(rounds=40, output_bytes=4000)
    payload = {"model": "gpt-5-codex", "instructions": INSTRUCTIONS, "input": items, "stream": True}
    status, headers, body = await gw.responses(payload)
    assert status == 200 and headers["x-llm-compressed"] == "true"
    assert events(body)[-1][0] == "response.completed"
    first, second = gw.fake.responses_requests()
    sent = second.json()
    assert sent["instructions"] == INSTRUCTIONS
    assert_valid_input(sent["input"])
    assert sent["input"][-5:] == items[-5:]


async def test_previous_response_id_overflow_retries_with_api_truncation(make_gateway) -> None:
    gw = await make_gateway()
    _, _, body = await gw.responses({"model": "m", "input": "first"})  # a response the fake stores
    gw.fake.script(Reply(400, {"error": {"message": "Your input exceeds the context window of this model. "
                                                    "Please adjust your input and try again.",
                                         "type": "invalid_request_error", "param": "input",
                                         "code": "context_length_exceeded"}}))
    chained = {"model": "m", "previous_response_id": json.loads(body)["id"], "input": "more"}
    status, headers, _ = await gw.responses(chained)
    assert status == 200 and headers["x-llm-compressed"] == "true"
    assert gw.fake.responses_requests()[2].json()["truncation"] == "auto"


async def test_stored_response_paths_pass_through(make_gateway) -> None:
    gw = await make_gateway()
    async with gw.session.get(gw.base + "/v1/responses/resp_123/input_items") as r:
        assert r.status == 404  # the fake knows no such path; the point is that it was forwarded
    assert gw.fake.requests[-1].path == "/v1/responses/resp_123/input_items"


async def test_the_gateways_gemini_call_ids_are_written_as_openai_takes_them(make_gateway) -> None:  # type: ignore[no-untyped-def]
    """A Codex conversation that began on a Gemini upstream carries the gateway's call ids with
    Gemini's thought signature in them, longer than the 64 characters OpenAI takes; on an
    OpenAI Responses upstream (a fallback) they go as digests, the call and its output alike."""
    gw = await make_gateway()
    long_id = "fc_0926a1b2__gsig_" + "Q2lRQmp6MXJYNUJHdHVoMQ" * 8
    conversation = [
        {"role": "user", "content": "list files"},
        {"type": "function_call", "call_id": long_id, "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": long_id, "output": "a.txt"},
        {"type": "function_call", "call_id": "call_short", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_short", "output": "b.txt"},
    ]
    status, headers, body = await gw.responses({"model": "gpt-5-codex", "input": conversation})
    assert status == 200, body
    [sent] = gw.fake.responses_requests()
    ids = [i.get("call_id") for i in sent.json()["input"]]
    assert ids[1] == ids[2] and len(ids[1]) <= 64 and ids[1] != long_id
    assert ids[3:] == ["call_short", "call_short"]
