"""Every corpus body through a running gateway, on its own wire API, streamed where it was.

The fake upstream answers every attempt with the case's status, headers and body (or its SSE
stream after a 200 head); the client asks on the case's API (chat completions, Messages or
Responses) and streams when the body was a stream. What the gateway stamps in
``x-llm-error-type`` must be the class the corpus expects for the in-sample bodies, and for
every body (held-out ones included, whose expected class is not compared here: see
test_heldout.py) the class the classifier gives when called directly: the pipeline adds no
rule of its own, for HTTP errors and stream error events alike.
"""

from __future__ import annotations

from typing import Any

from tests.corpus_cases import HELD_OUT, IN_SAMPLE, api_of, body_bytes, classify_case
from tests.fakeupstream import Reply

CONFIG = (
    "retry:\n"
    "  rate_limit: {max_retries: 1, base_delay_s: 0.01, max_delay_s: 0.01}\n"
    "  provider_unavailable: {max_retries: 1, base_delay_s: 0.01, max_delay_s: 0.01}\n"
    "circuit_breaker: {failure_threshold: 100000}\n"
)


def _reply(case: dict[str, Any]) -> Reply:
    if case.get("stream"):
        return Reply(200, body_bytes(case["body"]), {"Content-Type": "text/event-stream"})
    headers = {("Content-Type" if k.lower() == "content-type" else k): v for k, v in case["headers"].items()}
    body = case["body"] if isinstance(case["body"], (dict, list)) else body_bytes(case["body"])
    return Reply(case["status"], body, headers)


async def _send(gw: Any, case: dict[str, Any]) -> tuple[int, Any]:
    stream = bool(case.get("stream"))
    api = api_of(case)
    if api == "messages":
        status, headers, _ = await gw.messages({"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": stream,
                                                "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    elif api == "responses":
        status, headers, _ = await gw.responses({"model": "gpt-5-codex", "input": "hi", "stream": stream})
    else:
        status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "stream": stream,
                                            "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    return status, headers


async def test_every_corpus_body_through_the_gateway(make_gateway) -> None:
    gw = await make_gateway(CONFIG)
    wrong: list[str] = []
    for case in IN_SAMPLE + HELD_OUT:
        gw.fake.always = _reply(case)
        status, headers = await _send(gw, case)
        stamped = headers.get("x-llm-error-type")
        # The fake upstream is not the host a case names (test_classify pins what a host changes).
        as_sent = {k: v for k, v in case.items() if k != "host"}
        direct = classify_case(as_sent).type.value
        if status < 400 or stamped != direct:
            wrong.append(f"{case['name']}: HTTP {status}, stamped {stamped}, classify() gives {direct}")
        elif case in IN_SAMPLE and "host" not in case and stamped != case["expected"]["type"]:
            wrong.append(f"{case['name']}: stamped {stamped}, expected {case['expected']['type']}")
    assert not wrong, "\n".join(wrong)
    streamed = [c for c in IN_SAMPLE + HELD_OUT if c.get("stream")]
    apis = {api_of(c) for c in IN_SAMPLE + HELD_OUT}
    assert streamed and apis == {"chat", "messages", "responses"}
