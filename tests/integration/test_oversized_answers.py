"""An upstream answer too large to hold is a typed error, never a cut that passes for an answer:
a body past the bound (256 MiB) was cut there and served as a 200, and one stream event without
an end (400 MiB) was held whole, taking the gateway to 2 GB. Both now fail as ``unknown`` 502s,
never retried (the same request gets the same answer) nor counted as an outage. The bounds are
lowered here to keep the test small."""

from __future__ import annotations

import json

import pytest

from gateway import sse
from gateway.pipeline import attempt
from tests.fakeupstream import Reply, Stream, chat_completion, chunk, data_events

LIMIT = 1024 * 1024


@pytest.fixture
def small_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attempt, "SUCCESS_BODY_LIMIT", LIMIT)
    monkeypatch.setattr(sse, "MAX_EVENT_BYTES", LIMIT)


async def test_a_body_past_the_bound_is_a_typed_502_not_a_cut_200(make_gateway, small_bounds) -> None:
    gw = await make_gateway()
    gw.fake.script(Reply(200, chat_completion(content="x" * (2 * LIMIT))), Reply(200, chat_completion()))
    status, headers, body = await gw.chat()
    assert status == 502
    err = json.loads(body)["error"]
    assert err["code"] == "response_too_large" and err["x_llm_error_type"] == "unknown"
    assert headers["x-llm-error-retryable"] == "false" and headers["x-llm-attempts"] == "1"
    assert len(gw.fake.requests) == 1  # not retried: the same request would get the same answer
    assert gw.metric("llm_gateway_upstream_attempts_total", upstream="primary", outcome="provider_unavailable") == 0
    # One under the bound passes whole.
    whole = chat_completion(content="y" * (LIMIT // 2))
    gw.fake.steps.clear()
    gw.fake.script(Reply(200, whole))
    status, _, body = await gw.chat()
    assert status == 200 and json.loads(body) == whole


def _event(content: str) -> bytes:
    return b"data: " + json.dumps(chunk({"content": content})).encode() + b"\n\n"


async def test_a_first_event_past_the_bound_is_a_typed_502(make_gateway, small_bounds) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([_event("x" * (2 * LIMIT)), chunk({}, "stop")]))
    status, headers, body = await gw.chat({"model": "gpt-4o-mini", "stream": True,
                                           "messages": [{"role": "user", "content": "hi"}]})
    assert status == 502
    assert json.loads(body)["error"]["code"] == "event_too_large"
    assert headers["x-llm-error-type"] == "unknown" and len(gw.fake.requests) == 1


async def test_a_stream_whose_event_grows_past_the_bound_ends_with_the_typed_error_event(
        make_gateway, small_bounds) -> None:  # fmt: skip
    gw = await make_gateway()
    gw.fake.script(Stream([chunk({"role": "assistant", "content": "Hel"}), chunk({"content": "lo"}),
                           _event("x" * (2 * LIMIT)), chunk({}, "stop")]))
    status, _, body = await gw.chat({"model": "gpt-4o-mini", "stream": True,
                                     "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200
    events = data_events(body)
    assert "[DONE]" not in events
    shown = [json.loads(e)["choices"][0]["delta"].get("content") for e in events[:-1]]
    assert shown == ["Hel", "lo"]  # what came before it, then the error: never the giant event
    last = json.loads(events[-1])
    assert last["choices"][0]["finish_reason"] == "error"
    assert last["error"]["code"] == "event_too_large" and last["error"]["x_llm_error_type"] == "unknown"
    series = {"upstream": "primary", "model": "gpt-4o-mini", "status": "200"}
    assert gw.metric("llm_gateway_requests_total", **series, error_type="unknown") == 1
