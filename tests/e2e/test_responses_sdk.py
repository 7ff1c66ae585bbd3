"""The real openai SDK's `client.responses.create` (buffered and streamed) against `make run`
with the shipped config, in front of a fake upstream that speaks the Responses API."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.responses import ResponseFailedEvent

from tests.e2e.conftest import RunningGateway
from tests.fakeupstream import (
    FakeUpstream,
    Reply,
    Stream,
    responses_deltas,
    responses_head,
    responses_overflow,
    responses_stream,
)
from tests.responses_convo import INSTRUCTIONS, assert_valid_input, responses_conversation, size

pytestmark = pytest.mark.e2e

MODEL = "gpt-5-codex"  # every test sends its own input: the gateway remembers failed requests
ANSWER = "Hello from the fake upstream."  # the fake's buffered answer
STREAMED = "Hello from fake."  # the fake's streamed answer
RATE = {"error": {"message": "Rate limit reached for gpt-5-codex in organization org-fake on tokens per min (TPM). "
                             "Please try again in 1s.", "type": "tokens", "param": None,
                  "code": "rate_limit_exceeded"}}  # fmt: skip
UNAVAILABLE = {"error": {"message": "The server is overloaded or not ready yet.", "type": "server_error",
                         "param": None, "code": None}}  # fmt: skip


def cut_stream(words: tuple[str, ...] = ("Hel", "lo", " wor")) -> Stream:
    """Some visible text, then the connection drops."""
    return Stream([*responses_head(MODEL), *responses_deltas(words, start_seq=4)], then="drop")


@pytest.fixture
def up(upstream: FakeUpstream) -> FakeUpstream:
    return upstream


@pytest.fixture
def client(readme_gateway: RunningGateway) -> Iterator[openai.OpenAI]:
    """The SDK against `make run` exactly as README says (shipped config, retry defaults)."""
    c = openai.OpenAI(base_url=readme_gateway.base + "/v1", api_key="sk-client-key")
    yield c
    c.close()


def calls(up: FakeUpstream) -> int:
    return len(up.responses_requests())


def drain(stream: Any) -> tuple[list[str], str]:
    """Event types and the streamed text; exceptions propagate."""
    types: list[str] = []
    text = ""
    for ev in stream:
        types.append(ev.type)
        if ev.type == "response.output_text.delta":
            text += ev.delta
    return types, text


def test_success_buffered(client: openai.OpenAI, up: FakeUpstream) -> None:
    raw = client.responses.with_raw_response.create(model=MODEL, input="Say hello (success buffered)", instructions=INSTRUCTIONS)
    r = raw.parse()
    assert r.output_text == ANSWER and r.status == "completed" and r.usage is not None
    assert raw.headers["x-llm-attempts"] == "1" and raw.headers["x-request-id"]
    sent = up.responses_requests()[-1]
    assert sent.headers["Authorization"] == "Bearer sk-client-key"
    assert sent.json() == {"model": MODEL, "input": "Say hello (success buffered)", "instructions": INSTRUCTIONS}


def test_success_streamed(client: openai.OpenAI, up: FakeUpstream) -> None:
    types, text = drain(client.responses.create(model=MODEL, input="Say hello (success streamed)", stream=True))
    assert text == STREAMED
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert types.count("response.completed") == 1 and "response.failed" not in types
    assert up.responses_requests()[-1].json()["stream"] is True and calls(up) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "streamed"])
def test_503_twice_then_success(client: openai.OpenAI, up: FakeUpstream, stream: bool) -> None:
    up.script(Reply(503, UNAVAILABLE), Reply(503, UNAVAILABLE))
    if stream:
        types, text = drain(client.responses.create(model=MODEL, input="Say hello (503 twice streamed)", stream=True))
        assert text == STREAMED and types[-1] == "response.completed"
    else:
        raw = client.responses.with_raw_response.create(model=MODEL, input="Say hello (503 twice buffered)")
        assert raw.parse().output_text == ANSWER and raw.headers["x-llm-attempts"] == "3"
    assert calls(up) == 3


def test_429_with_retry_after_1_then_success(client: openai.OpenAI, up: FakeUpstream) -> None:
    up.script(Reply(429, RATE, {"retry-after": "1"}))
    t0 = time.monotonic()
    raw = client.responses.with_raw_response.create(model=MODEL, input="Say hello (429 once)")
    assert raw.parse().output_text == ANSWER
    assert raw.headers["x-llm-attempts"] == "2" and calls(up) == 2
    assert 0.95 <= time.monotonic() - t0 < 10


@pytest.mark.timeout(30)
def test_429_with_a_long_wait_fails_fast_once(readme_gateway_alone: RunningGateway, up: FakeUpstream) -> None:
    with openai.OpenAI(base_url=readme_gateway_alone.base + "/v1", api_key="sk-client-key") as client:
        up.script(*[Reply(429, RATE, {"retry-after": "40"})] * 10)
        with pytest.raises(openai.RateLimitError) as first:
            client.with_options(max_retries=0).responses.create(model=MODEL, input="Say hello (429 long, no SDK retries)")
        assert first.value.response.headers.get("x-should-retry") == "false", (
            "a 429 whose wait the gateway will not hold must tell the SDK not to wait it out either: "
            f"{dict(first.value.response.headers)}")
        up.requests.clear()
        t0 = time.monotonic()
        with pytest.raises(openai.RateLimitError) as e:  # the SDK's default max_retries=2 is on
            client.responses.create(model=MODEL, input="Say hello (429 long)")
        assert time.monotonic() - t0 < 5
        h = e.value.response.headers
        assert h["retry-after"] == "40" and h["x-llm-error-type"] == "rate_limit"
        assert h["x-should-retry"] == "false"
        assert abs(int(h["x-llm-error-reset-at"]) - (time.time() + 40) * 1000) < 5000
        assert e.value.body == RATE["error"] or e.value.body == RATE  # the upstream's body, untouched
        assert calls(up) == 1  # not the SDK's 3, not the gateway's 4


def test_stream_cut_after_text_never_looks_complete(client: openai.OpenAI, up: FakeUpstream) -> None:
    up.script(cut_stream(words=("Hel", "lo", " wor")))
    types: list[str] = []
    events: list[Any] = []
    text = ""
    try:
        for ev in client.responses.create(model=MODEL, input="Say hello (cut stream)", stream=True):
            types.append(ev.type)
            events.append(ev)
            if ev.type == "response.output_text.delta":
                text += ev.delta
    except openai.APIError:
        pass  # raising is an acceptable way to end a broken stream
    assert text == "Hello wor"
    assert "response.completed" not in types and "response.incomplete" not in types
    assert types[-1] == "response.failed", f"a broken stream must end with response.failed: {types}"
    assert types.count("response.failed") == 1
    failed = events[-1]
    assert failed.response.status == "failed" and failed.response.error is not None
    # The SDK builds stream events without validating them: a strict reader does (a code outside
    # ResponseError's set, the gateway's `stream_broken`, failed here).
    ResponseFailedEvent.model_validate(failed.to_dict())
    assert failed.sequence_number == events[-2].sequence_number + 1
    assert calls(up) == 1  # nothing is retried once text reached the client


def test_overflowing_agent_conversation_is_rescued_with_a_valid_input(
    fast_gateway: RunningGateway, up: FakeUpstream
) -> None:
    # The Responses overflow names no numbers: the gateway aims under the upstream's
    # context_window (8000 in launch_cli's config), which is also what the fake enforces.
    up.context_limit = 8000
    items = responses_conversation(rounds=40, output_bytes=2500)
    client = openai.OpenAI(base_url=fast_gateway.base + "/v1", api_key="sk-client-key")
    raw = client.responses.with_raw_response.create(
        model=MODEL, instructions=INSTRUCTIONS, input=items, max_output_tokens=2000)  # type: ignore[arg-type]
    assert raw.parse().output_text == ANSWER  # a plain success for the agent
    assert raw.headers["x-llm-compressed"] == "true" and raw.headers["x-llm-attempts"] == "2"
    first, second = (r.json() for r in up.responses_requests())
    assert first["input"] == items
    assert second["instructions"] == INSTRUCTIONS
    assert second["model"] == MODEL and 0 < second["max_output_tokens"] <= 2000
    rescued = second["input"]
    assert_valid_input(rescued)
    users = [i for i in items if i.get("role") == "user"]
    assert [i for i in rescued if i.get("role") == "user"][-1] == users[-1]  # the newest user message
    developer = [i for i in items if i.get("role") in ("developer", "system")]
    assert [i for i in rescued if i.get("role") in ("developer", "system")] == developer
    assert rescued[-3:] == items[-3:]  # the turn in progress (call and output after that message)
    assert size(rescued) < size(items)
    client.close()


def test_overflow_that_cannot_be_rescued_is_returned_classified_once(
    client: openai.OpenAI, up: FakeUpstream
) -> None:
    up.script(*[responses_overflow()] * 5)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input=responses_conversation(rounds=3))  # type: ignore[arg-type]
    h = e.value.response.headers
    assert h["x-llm-error-type"] == "context_overflow" and h["x-should-retry"] == "false"
    assert e.value.code == "context_length_exceeded"  # the upstream's body passes through
    assert calls(up) <= 2  # at most one compress-and-retry


def test_streamed_success_reaches_the_sdk_event_by_event(client: openai.OpenAI, up: FakeUpstream) -> None:
    up.script(Stream(responses_stream(words=("a", "b", "c", "d")), then="eof", delay_s=0.15))
    t0 = time.monotonic()
    first_delta_at = None
    with client.responses.create(model=MODEL, input="Say hello (event by event)", stream=True) as s:
        for ev in s:
            if ev.type == "response.output_text.delta" and first_delta_at is None:
                first_delta_at = time.monotonic() - t0
    assert first_delta_at is not None and first_delta_at < 1.5  # the whole stream takes ≈ 2 s
