"""The real openai SDK's `client.responses.create` (buffered and streamed) against `make run`
with the shipped config, in front of a fake upstream that speaks the Responses API."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.conftest import RunningGateway, base_env, free_port, start
from tests.fake_responses import (
    OVERFLOW,
    RATE,
    UNAVAILABLE,
    ResponsesFake,
    Stream,
    cut_stream,
    responses_stream,
)
from tests.fakeupstream import Reply
from tests.responses_convo import INSTRUCTIONS, agent_input, assert_valid_input

pytestmark = pytest.mark.e2e

MODEL = "gpt-5-codex"
ANSWER = "Hello from the fake Responses API."


@pytest.fixture(scope="module")
def rfake() -> Iterator[ResponsesFake]:
    with ResponsesFake.in_thread() as f:
        yield f


@pytest.fixture(scope="module")
def gateway(rfake: ResponsesFake, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    """`make run` exactly as README says (shipped config and retry defaults)."""
    port = free_port()
    env = base_env(GATEWAY_PORT=str(port), UPSTREAM_BASE_URL=rfake.url)
    gw = start(["make", "--no-print-directory", "run"], env, port,
               tmp_path_factory.mktemp("respgw") / "gateway.log")  # fmt: skip
    yield gw
    gw.stop()


@pytest.fixture
def up(rfake: ResponsesFake) -> ResponsesFake:
    rfake.steps.clear()
    rfake.requests.clear()
    rfake.times.clear()
    rfake.context_limit = None
    return rfake


@pytest.fixture
def client(gateway: RunningGateway) -> Iterator[openai.OpenAI]:
    c = openai.OpenAI(base_url=gateway.base + "/v1", api_key="sk-client-key")
    yield c
    c.close()


def calls(up: ResponsesFake) -> int:
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


def test_success_buffered(client: openai.OpenAI, up: ResponsesFake) -> None:
    raw = client.responses.with_raw_response.create(model=MODEL, input="Say hello", instructions=INSTRUCTIONS)
    r = raw.parse()
    assert r.output_text == ANSWER and r.status == "completed" and r.usage is not None
    assert raw.headers["x-llm-attempts"] == "1" and raw.headers["x-request-id"]
    sent = up.responses_requests()[-1]
    assert sent.headers["Authorization"] == "Bearer sk-client-key"
    assert sent.json() == {"model": MODEL, "input": "Say hello", "instructions": INSTRUCTIONS}


def test_success_streamed(client: openai.OpenAI, up: ResponsesFake) -> None:
    types, text = drain(client.responses.create(model=MODEL, input="Say hello", stream=True))
    assert text == ANSWER
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert types.count("response.completed") == 1 and "response.failed" not in types
    assert up.responses_requests()[-1].json()["stream"] is True and calls(up) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "streamed"])
def test_503_twice_then_success(client: openai.OpenAI, up: ResponsesFake, stream: bool) -> None:
    up.script(Reply(503, UNAVAILABLE), Reply(503, UNAVAILABLE))
    if stream:
        types, text = drain(client.responses.create(model=MODEL, input="Say hello", stream=True))
        assert text == ANSWER and types[-1] == "response.completed"
    else:
        raw = client.responses.with_raw_response.create(model=MODEL, input="Say hello")
        assert raw.parse().output_text == ANSWER and raw.headers["x-llm-attempts"] == "3"
    assert calls(up) == 3


def test_429_with_retry_after_1_then_success(client: openai.OpenAI, up: ResponsesFake) -> None:
    up.script(Reply(429, RATE, {"retry-after": "1"}))
    t0 = time.monotonic()
    raw = client.responses.with_raw_response.create(model=MODEL, input="Say hello")
    assert raw.parse().output_text == ANSWER
    assert raw.headers["x-llm-attempts"] == "2" and calls(up) == 2
    assert up.times[1] - up.times[0] >= 0.95 and time.monotonic() - t0 < 10


@pytest.mark.timeout(30)
def test_429_with_a_long_wait_fails_fast_once(client: openai.OpenAI, up: ResponsesFake) -> None:
    up.script(*[Reply(429, RATE, {"retry-after": "40"})] * 10)
    t0 = time.monotonic()
    with pytest.raises(openai.RateLimitError) as e:  # the SDK's default max_retries=2 is on
        client.responses.create(model=MODEL, input="Say hello")
    assert time.monotonic() - t0 < 5
    h = e.value.response.headers
    assert h["retry-after"] == "40" and h["x-llm-error-type"] == "rate_limit"
    assert h["x-should-retry"] == "false"
    assert abs(int(h["x-llm-error-reset-at"]) - (time.time() + 40) * 1000) < 5000
    assert e.value.body == RATE["error"] or e.value.body == RATE  # the upstream's body, untouched
    assert calls(up) == 1  # not the SDK's 3, not the gateway's 4


def test_stream_cut_after_text_never_looks_complete(client: openai.OpenAI, up: ResponsesFake) -> None:
    up.script(cut_stream(words=("Hel", "lo", " wor")))
    types: list[str] = []
    events: list[Any] = []
    text = ""
    try:
        for ev in client.responses.create(model=MODEL, input="Say hello", stream=True):
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
    assert failed.sequence_number == events[-2].sequence_number + 1
    assert calls(up) == 1  # nothing is retried once text reached the client


def test_overflowing_agent_conversation_is_rescued_with_a_valid_input(
    client: openai.OpenAI, up: ResponsesFake
) -> None:
    up.context_limit = 20000
    items = agent_input(rounds=40, output_bytes=2500)
    raw = client.responses.with_raw_response.create(
        model=MODEL, instructions=INSTRUCTIONS, input=items, max_output_tokens=2000)  # type: ignore[arg-type]
    assert raw.parse().output_text == ANSWER  # a plain success for the agent
    assert raw.headers["x-llm-compressed"] == "true" and raw.headers["x-llm-attempts"] == "2"
    first, second = (r.json() for r in up.responses_requests())
    assert first["input"] == items
    assert second["instructions"] == INSTRUCTIONS
    assert second["max_output_tokens"] == 2000 and second["model"] == MODEL
    rescued = second["input"]
    assert_valid_input(rescued)
    assert rescued[-1] == items[-1]  # the newest user message, untouched
    assert rescued[0] == items[0]  # developer messages are kept as they were
    assert len(json.dumps(rescued)) < len(json.dumps(items))


def test_overflow_that_cannot_be_rescued_is_returned_classified_once(
    client: openai.OpenAI, up: ResponsesFake
) -> None:
    up.script(*[Reply(400, OVERFLOW)] * 5)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input=agent_input(rounds=3))  # type: ignore[arg-type]
    h = e.value.response.headers
    assert h["x-llm-error-type"] == "context_overflow" and h["x-should-retry"] == "false"
    assert e.value.code == "context_length_exceeded"  # the upstream's body passes through
    assert calls(up) <= 2  # at most one compress-and-retry


def test_streamed_success_reaches_the_sdk_event_by_event(client: openai.OpenAI, up: ResponsesFake) -> None:
    up.script(Stream(responses_stream(words=("a", "b", "c", "d")), then="eof", delay_s=0.15))
    t0 = time.monotonic()
    first_delta_at = None
    with client.responses.create(model=MODEL, input="Say hello", stream=True) as s:
        for ev in s:
            if ev.type == "response.output_text.delta" and first_delta_at is None:
                first_delta_at = time.monotonic() - t0
    assert first_delta_at is not None and first_delta_at < 1.5  # the whole stream takes ≈ 2 s
