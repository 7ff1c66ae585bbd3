"""Stream faults, side by side: what a client gets when a stream breaks, with and without
continuation, on chat completions and on Responses. Our own fake upstream, the gateway
in-process on loopback, the real openai SDK as the client.

    rescued  the client got one complete, correct answer (chat: finish and [DONE], full
             text; Responses: response.completed, the SDK's assembled text complete)
    safe     the stream ended with one typed error event (no [DONE] / response.failed with
             x_llm_error_type): honest, bounded
    FAIL     anything else: a stream that looks finished but is not, a hang, a crash

Then the fallback section (``bench/fallback.py``).

Run: ``python -m bench.faults`` (a few minutes).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import openai
from aiohttp import web
from prometheus_client import CollectorRegistry

from bench import fallback
from gateway.app import create_app
from gateway.config import parse_config
from gateway.server import make_runner
from tests.fakeupstream import (
    FakeUpstream,
    Reply,
    Stream,
    chunk,
    responses_continuation,
    responses_deltas,
    responses_error,
    responses_head,
    responses_stream,
    sse,
)

WORDS = ["The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog."]
ANSWER = "".join(WORDS)
ROLE = chunk({"role": "assistant", "content": ""})


def _head(n: int) -> list[Any]:
    return [ROLE, *(chunk({"content": w}) for w in WORDS[:n])]


def _continuation(payload: dict[str, Any]) -> Stream:
    shown = payload["messages"][-1]["content"]
    rest = ANSWER[len(shown):]
    return Stream([ROLE, chunk({"content": rest}), chunk({}, "stop")])


def _full() -> Stream:
    return Stream([*_head(len(WORDS)), chunk({}, "stop")])


PREFILL_REFUSED = Reply(400, {"error": {"message": "This model does not support assistant message prefill. "
                                                   "The conversation must end with a user message.",
                                        "type": "invalid_request_error", "code": None}})
TOOL = chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                              "function": {"name": "run", "arguments": '{"cm'}}]})

# name -> steps the fake plays (callables pick the continuation from the request)
SCENARIOS: dict[str, list[Any]] = {
    "cut before any content": [Stream([ROLE], then="drop"), _full()],
    "cut after 3 words": [Stream(_head(3), then="drop"), _continuation],
    "stall after 3 words": [Stream(_head(3), then="stall"), _continuation],
    "malformed chunk after 3 words": [Stream([*_head(3), b"data: {not json\n\n"], then="stall"), _continuation],
    "error event after 3 words": [Stream([*_head(3), {"error": {"message": "overloaded", "type": "server_error",
                                                                "code": 503}}], then="eof"), _continuation],
    "close without finish after 3 words": [Stream(_head(3), then="eof"), _continuation],
    "cut, then continuation refused": [Stream(_head(3), then="drop"), PREFILL_REFUSED],
    "cut during a tool call": [Stream([*_head(2), TOOL], then="drop"), _full()],
}



def _r_head(n: int) -> list[Any]:
    return [*responses_head(), *responses_deltas(tuple(WORDS[:n]))]


def _r_continuation(payload: dict[str, Any]) -> Stream:
    shown = payload["input"][-1]["content"]
    return Stream(responses_continuation(ANSWER[len(shown):]), then="eof")


def _r_full() -> Stream:
    return Stream(responses_stream(words=tuple(WORDS)), then="eof")


R_REFUSED = responses_error(400, "Invalid input: the last input item must not be an assistant message",
                            "invalid_request_error", None)  # what an upstream without the feature may say
R_ERROR = sse("error", {"type": "error", "sequence_number": 7, "code": "server_error",
                        "message": "The server had an error while processing your request.", "param": None})
R_TOOL = sse("response.output_item.added", {
    "type": "response.output_item.added", "sequence_number": 6, "output_index": 1,
    "item": {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "run", "arguments": ""}})
R_MALFORMED = b"event: response.output_text.delta\ndata: {not json\n\n"

R_SCENARIOS: dict[str, list[Any]] = {
    "cut before any content": [Stream(responses_head(), then="drop"), _r_full()],
    "cut after 3 words": [Stream(_r_head(3), then="drop"), _r_continuation],
    "stall after 3 words": [Stream(_r_head(3), then="stall"), _r_continuation],
    "malformed chunk after 3 words": [Stream([*_r_head(3), R_MALFORMED], then="stall"), _r_continuation],
    "error event after 3 words": [Stream([*_r_head(3), R_ERROR], then="eof"), _r_continuation],
    "close without finish after 3 words": [Stream(_r_head(3), then="eof"), _r_continuation],
    "cut, then continuation refused": [Stream(_r_head(3), then="drop"), R_REFUSED],
    "cut during a tool call": [Stream([*_r_head(2), R_TOOL], then="drop"), _r_full()],
}


async def _run(scenario: list[Any], continuation: str, verdict: Callable[[openai.AsyncOpenAI], Any]
               ) -> tuple[str, float]:  # fmt: skip
    fake = await FakeUpstream().start()
    fake.script(*scenario)
    cfg = parse_config(
        f"upstreams: [{{name: up, base_url: '{fake.url}', continuation: {continuation}}}]\n"
        "timeouts: {connect_s: 2, first_byte_s: 2, idle_s: 0.5}\n", env={})
    runner = make_runner(create_app(cfg, registry=CollectorRegistry()), shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{runner.addresses[0][1]}/v1", api_key="k",
                                max_retries=0)
    started = time.monotonic()
    try:
        outcome = await asyncio.wait_for(verdict(client), 20)
    except TimeoutError:
        outcome = "FAIL (hang)"
    finally:
        await client.close()
        await runner.cleanup()
        await fake.close()
    return outcome, time.monotonic() - started


async def _chat_verdict(client: openai.AsyncOpenAI) -> str:
    text, finish = "", None
    try:
        stream = await client.chat.completions.create(model="m", stream=True,
                                                      messages=[{"role": "user", "content": "go"}])
        async for c in stream:
            if c.choices:
                text += c.choices[0].delta.content or ""
                finish = c.choices[0].finish_reason or finish
    except openai.APIError as e:
        body = getattr(e, "body", None)
        typed = isinstance(body, dict) and "x_llm_error_type" in json.dumps(body)
        return "safe" if typed or "x_llm_error_type" in str(e) else f"FAIL ({type(e).__name__})"
    except Exception as e:  # the client itself broke on what it was sent
        return f"FAIL (client crashed: {type(e).__name__})"
    if finish in ("stop", "tool_calls") and (text == ANSWER or finish == "tool_calls"):
        return "rescued"
    return f"FAIL (looks finished: {finish!r}, {len(text)} chars)"


async def _responses_verdict(client: openai.AsyncOpenAI) -> str:
    text, kinds, last = "", [], None
    try:
        stream = await client.responses.create(model="m", stream=True, input="go")
        async for e in stream:
            kinds.append(e.type)
            last = e
            if e.type == "response.output_text.delta":
                text += e.delta
    except openai.APIError as e:
        return "safe" if "x_llm_error_type" in json.dumps(getattr(e, "body", None) or {}) else f"FAIL ({e!r})"
    except Exception as e:  # the client itself broke on what it was sent
        return f"FAIL (client crashed: {type(e).__name__})"
    if last is not None and last.type == "response.failed":
        error = last.to_dict()["response"].get("error") or {}
        return "safe" if "x_llm_error_type" in error and kinds.count("response.failed") == 1 else "FAIL (untyped)"
    if last is not None and last.type == "response.completed":
        final = last.response
        called = any(item.type == "function_call" for item in final.output)
        if (final.output_text == text == ANSWER) or called:
            return "rescued"
    return f"FAIL (looks finished: {kinds[-1:] }, {len(text)} chars)"


WIRES = (
    ("chat completions", SCENARIOS, "prefix", _chat_verdict),
    ("Responses", R_SCENARIOS, "continue_final_message", _responses_verdict),
)


def main(print_: Callable[[str], None] = print) -> None:
    for wire, scenarios, mode, verdict in WIRES:
        rows = []
        for name, steps in scenarios.items():
            off, t_off = asyncio.run(_run(list(steps), "none", verdict))
            on, t_on = asyncio.run(_run(list(steps), mode, verdict))
            rows.append((name, off, t_off, on, t_on))
        print_(f"\n{wire}\n")
        print_(f"| fault | without continuation | with `continuation: {mode}` |")
        print_("| --- | --- | --- |")
        for name, off, t_off, on, t_on in rows:
            print_(f"| {name} | {off} ({t_off:.2f} s) | {on} ({t_on:.2f} s) |")
        for label, col in (("without", 1), ("with", 3)):
            verdicts = [r[col] for r in rows]
            print_(f"{wire}, {label} continuation: {sum(v == 'rescued' for v in verdicts)} rescued, "
                   f"{sum(v == 'safe' for v in verdicts)} safe, {sum(v.startswith('FAIL') for v in verdicts)} failed")
    fallback.main(print_)  # the same faults and more on the primary of a two-upstream chain


if __name__ == "__main__":
    main()
