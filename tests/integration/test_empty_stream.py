"""A server that answers a streaming request with an empty stream (llama-cpp-python does,
for a request that overflows its context): retried once, then probed once without
streaming; the probe's error goes through the pipeline (an overflow is rescued), its
answer reaches the client as a well-formed stream."""

import json

from tests.convo import agent_conversation
from tests.fakeupstream import (
    Reply as R,
)
from tests.fakeupstream import (
    Stream,
    anthropic_message,
    chat_completion,
    data_events,
    estimate_tokens,
    overflow_error,
    response_object,
)

EMPTY = Stream([], then="eof")




async def test_repeated_empty_stream_is_probed_and_the_answer_streamed(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(EMPTY, EMPTY, R(200, chat_completion(content="Probed answer.")))
    status, headers, body = await gw.chat({"model": "gpt-4o-mini", "stream": True,
                                           "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = data_events(body)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "Probed answer."
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    sent = gw.fake.chat_requests()
    assert len(sent) == 3 and sent[2].json()["stream"] is False and "stream_options" not in sent[2].json()
    assert headers["x-llm-attempts"] == "3"  # two empty streams, one probe: never six
    # The probe answered: nothing says what the empty streams were, so they stay as classified.
    assert counts(gw) == ({"provider_unavailable": 2, "success": 1}, {"provider_unavailable": 1})


async def test_an_overflowing_stream_that_comes_back_empty_is_rescued(make_gateway) -> None:
    gw = await make_gateway()
    limit = 6000

    def server(payload):
        # What llama-cpp-python does: an empty stream for a streaming overflow, a 400 otherwise.
        used = estimate_tokens(payload)
        if used > limit:
            return EMPTY if payload.get("stream") else overflow_error(limit, used, None)
        return None  # the fake's normal answer

    gw.fake.script(*[server] * 10)
    status, headers, body = await gw.chat({"model": "gpt-4o-mini", "stream": True,
                                           "messages": agent_conversation(30)})
    assert status == 200 and headers["x-llm-compressed"] == "true"
    assert data_events(body)[-1] == "[DONE]"
    kinds = [(r.json()["stream"], estimate_tokens(r.json()) > limit) for r in gw.fake.chat_requests()]
    assert kinds == [(True, True), (True, True), (False, True), (True, False)]
    # Counted as what they were, an overflow: not a provider failure, not a provider_unavailable
    # retry (the retry-ratio alert reads those).
    assert counts(gw) == ({"context_overflow": 3, "success": 1}, {"context_overflow": 1})


def counts(gw) -> tuple[dict[str, float], dict[str, float]]:
    """(upstream attempts by outcome, retries by error type) of the primary upstream, non-zero."""
    found: tuple[dict[str, float], dict[str, float]] = ({}, {})
    for family in gw.registry.collect():
        for sample in family.samples:
            if sample.labels.get("upstream") == "primary" and sample.value:
                if sample.name == "llm_gateway_upstream_attempts_total":
                    found[0][sample.labels["outcome"]] = sample.value
                elif sample.name == "llm_gateway_retries_total":
                    found[1][sample.labels["error_type"]] = sample.value
    return found


async def test_an_empty_stream_then_a_stream_is_an_ordinary_provider_failure(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(EMPTY)
    status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "stream": True,
                                        "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and headers["x-llm-attempts"] == "2"
    assert counts(gw) == ({"provider_unavailable": 1, "success": 1}, {"provider_unavailable": 1})


async def test_messages_and_responses_get_their_own_stream_grammar(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(EMPTY, EMPTY, R(200, anthropic_message(text="From the probe.")))
    status, _, body = await gw.messages({"model": "claude-x", "max_tokens": 10, "stream": True,
                                         "messages": [{"role": "user", "content": "hi"}]})
    names = [line[7:] for line in body.decode().split("\n") if line.startswith("event: ")]
    assert status == 200 and names[0] == "message_start" and names[-1] == "message_stop"
    assert b"From the probe." in body
    gw.fake.script(EMPTY, EMPTY, R(200, response_object(text="Responses probe.")))
    status, _, body = await gw.responses({"model": "gpt-5-codex", "input": "hi", "stream": True})
    names = [line[7:] for line in body.decode().split("\n") if line.startswith("event: ")]
    assert status == 200 and names[0] == "response.created" and names[-1] == "response.completed"
    seqs = [json.loads(e)["sequence_number"] for e in data_events(body)]
    assert seqs == list(range(len(seqs)))


async def test_the_real_sdks_read_the_replayed_streams(make_gateway) -> None:
    import anthropic
    import openai

    gw = await make_gateway()
    oa = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k", max_retries=0)
    gw.fake.script(EMPTY, EMPTY, R(200, chat_completion(content="Chat via probe.")))
    stream = await oa.chat.completions.create(model="gpt-4o-mini", stream=True,
                                              messages=[{"role": "user", "content": "a"}])
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "Chat via probe."
    gw.fake.script(EMPTY, EMPTY, R(200, response_object(text="Responses via probe.")))
    events = [e async for e in await oa.responses.create(model="gpt-5-codex", input="b", stream=True)]
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "Responses via probe."
    an = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k", max_retries=0)
    gw.fake.script(EMPTY, EMPTY, R(200, anthropic_message(text="Messages via probe.")))
    async with an.messages.stream(model="claude-x", max_tokens=10,
                                  messages=[{"role": "user", "content": "c"}]) as s:
        final = await s.get_final_message()
    assert final.content[0].text == "Messages via probe." and final.stop_reason == "end_turn"
    await oa.close()
    await an.close()


async def test_an_empty_stream_for_a_request_bigger_than_the_window_is_probed_at_once(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", context_window: 6000",
                            extra_yaml="circuit_breaker: {failure_threshold: 1, open_s: 60}\n")
    limit = 6000

    def server(payload):
        used = estimate_tokens(payload)
        return (EMPTY if payload.get("stream") else overflow_error(limit, used, None)) if used > limit else None

    gw.fake.script(*[server] * 10)
    status, headers, body = await gw.chat({"model": "gpt-4o-mini", "stream": True,
                                           "messages": agent_conversation(30)})
    # One empty stream (no retry: the request is bigger than the window), one probe that
    # says by how much, one compressed stream.
    assert status == 200 and headers["x-llm-compressed"] == "true" and headers["x-llm-attempts"] == "3"
    assert data_events(body)[-1] == "[DONE]"
    assert counts(gw) == ({"context_overflow": 2, "success": 1}, {})
    # Not the provider's fault: the circuit (threshold 1) stays closed.
    assert await gw.scraped("llm_gateway_circuit_open") == {
        (("model", "*"), ("upstream", "primary")): 0, (("model", "gpt-4o-mini"), ("upstream", "primary")): 0,
    }
    status, _, _ = await gw.chat()
    assert status == 200
