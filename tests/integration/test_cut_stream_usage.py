"""The usage a broken stream is logged and metered with includes the text the client was
already shown: the provider generated it, though its count would have come at the end."""

import pytest

from gateway.policy.tokens import BYTES_PER_TOKEN
from tests.fakeupstream import (
    Stream,
    anthropic_head,
    anthropic_tail,
    chunk,
    responses_continuation,
    responses_deltas,
    responses_head,
    text_delta,
)

SHOWN = ["Once upon a time there was a gateway", " that counted every token it relayed"]
REST = [" to", " the end."]


def tokens(text: str) -> int:
    return round(len(text.encode()) / BYTES_PER_TOKEN)


def completion(gw, model: str) -> float:
    return gw.metric("llm_gateway_tokens_total", upstream="primary", model=model, kind="completion")


MESSAGES = {"model": "claude-x", "max_tokens": 100, "stream": True,
            "messages": [{"role": "user", "content": "Tell a story"}]}  # fmt: skip


async def test_a_messages_stream_cut_after_two_deltas_counts_what_was_shown(make_gateway) -> None:
    gw = await make_gateway()
    # message_start says output_tokens: 1; the real count would come in message_delta.
    gw.fake.script(Stream([*anthropic_head(), *(text_delta(t) for t in SHOWN)], then="drop"))
    status, _, body = await gw.messages(MESSAGES)
    assert status == 200 and b"event: error" in body
    assert completion(gw, "claude-x") == tokens("".join(SHOWN)) > 1


async def test_a_continued_messages_stream_counts_the_shown_part_and_the_rest(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: prefill")
    gw.fake.script(Stream([*anthropic_head(), *(text_delta(t) for t in SHOWN)], then="drop"),
                   Stream([*anthropic_head(), *(text_delta(t) for t in REST), *anthropic_tail(output_tokens=4)],
                          then="eof"))  # fmt: skip
    status, _, body = await gw.messages(MESSAGES)
    assert status == 200 and b"message_stop" in body
    assert completion(gw, "claude-x") == tokens("".join(SHOWN)) + 4


@pytest.mark.parametrize("then", ["drop", "stall"])
@pytest.mark.stall_timeouts
async def test_a_cut_chat_stream_counts_what_was_shown(make_gateway, then: str) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([chunk({"role": "assistant", "content": ""}), *(chunk({"content": t}) for t in SHOWN)],
                          then=then))  # fmt: skip
    status, _, body = await gw.chat({"model": "gpt-4o-mini", "stream": True,
                                     "messages": [{"role": "user", "content": "Tell a story"}]})  # fmt: skip
    assert status == 200 and b'"finish_reason": "error"' in body.replace(b'":"', b'": "')
    assert completion(gw, "gpt-4o-mini") == tokens("".join(SHOWN))


async def test_a_continued_responses_stream_counts_the_shown_part_and_the_rest(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: continue_final_message")
    gw.fake.script(Stream([*responses_head("qwen3"), *responses_deltas(tuple(SHOWN))], then="drop"),
                   Stream(responses_continuation("".join(REST), REST, model="qwen3"), then="eof"))
    status, _, body = await gw.responses({"model": "qwen3", "stream": True, "input": "Tell a story"})
    assert status == 200 and b"response.completed" in body
    rest = completion(gw, "qwen3") - tokens("".join(SHOWN))
    assert rest > 0  # the continuation's own count, on top of the shown part


async def test_a_complete_stream_is_counted_by_the_providers_numbers_alone(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([*anthropic_head(), *(text_delta(t) for t in SHOWN), *anthropic_tail(output_tokens=3)]))
    status, _, body = await gw.messages(MESSAGES)
    assert status == 200 and b"message_stop" in body
    assert completion(gw, "claude-x") == 3  # never an estimate when the provider counted


async def test_a_long_cut_stream_counts_its_text_from_a_bounded_sample(make_gateway) -> None:
    # 400 deltas (~60 KB of events): the relay keeps only the first few KB of them to count
    # from, the rest by their size; the count stays within a few percent of the text shown.
    from gateway.pipeline.relay import Shown

    gw = await make_gateway()
    words = [f" word{i % 10}" for i in range(400)]
    gw.fake.script(Stream([chunk({"role": "assistant", "content": ""}), *(chunk({"content": w}) for w in words)],
                          then="drop"))  # fmt: skip
    status, _, body = await gw.chat({"model": "gpt-4o-mini", "stream": True,
                                     "messages": [{"role": "user", "content": "Count"}]})  # fmt: skip
    assert status == 200 and all(w.encode() in body for w in words[-3:])
    shown = tokens("".join(words))
    assert len(b"".join(c for c in body.split(b"\n\n"))) > 10 * Shown.SAMPLE_BYTES  # the sample is a part
    assert abs(completion(gw, "gpt-4o-mini") - shown) <= 0.05 * shown


def test_the_sample_of_shown_events_stays_bounded() -> None:
    from gateway.pipeline.relay import Shown

    shown = Shown()
    event = b'data: {"choices":[{"delta":{"content":" word"}}]}\n\n'
    for _ in range(10_000):
        shown.append(event)
    assert len(shown._events) * len(event) < Shown.SAMPLE_BYTES + len(event)


async def test_a_chat_stream_cut_inside_a_tool_call_counts_its_name_and_arguments(make_gateway) -> None:
    # An agent's turn is often mostly a tool call (a file it writes): counting only visible text
    # let a cut turn cost nothing but its prompt.
    gw = await make_gateway()
    args = ['{"path": "notes.md", ', '"content": "a long file the model was writing']
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "write_file", "arguments": ""}}
    gw.fake.script(Stream([chunk({"role": "assistant", "content": None, "tool_calls": [call]}),
                           *(chunk({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}) for a in args)],
                          then="drop"))  # fmt: skip
    status, _, body = await gw.chat({"model": "gpt-4o-mini", "stream": True,
                                     "messages": [{"role": "user", "content": "Write notes"}]})  # fmt: skip
    assert status == 200 and b"write_file" in body
    assert completion(gw, "gpt-4o-mini") == tokens("write_file" + "".join(args)) > 10


async def test_a_continued_messages_stream_counts_both_legs_prompts_and_log_line(
    make_gateway, caplog: pytest.LogCaptureFixture
) -> None:
    # Each leg is a request the provider read and billed: the first leg's prompt (counted in its
    # message_start) and shown text are the request's as much as the continuation's are.
    import logging

    caplog.set_level(logging.INFO, logger="gateway")
    gw = await make_gateway(upstream_yaml=", continuation: prefill")
    gw.fake.script(Stream([*anthropic_head(input_tokens=25), *(text_delta(t) for t in SHOWN)], then="drop"),
                   Stream([*anthropic_head(input_tokens=50), *(text_delta(t) for t in REST),
                           *anthropic_tail(output_tokens=4)], then="eof"))  # fmt: skip
    status, _, body = await gw.messages(MESSAGES)
    assert status == 200 and b"message_stop" in body
    prompt = gw.metric("llm_gateway_tokens_total", upstream="primary", model="claude-x", kind="prompt")
    assert prompt == 25 + 50
    assert completion(gw, "claude-x") == tokens("".join(SHOWN)) + 4
    (line,) = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert line["usage"] == {"prompt": 75, "completion": tokens("".join(SHOWN)) + 4}
