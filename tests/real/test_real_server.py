"""The gateway in front of a real llama-cpp-python server (SmolLM2-135M, 1,024-token window),
driven by the real openai SDK. Nothing is mocked: every overflow, 500 and empty stream below
is the server's own; tests/real/NOTES.md records the bodies.

Each server behaviour the gateway relies on is pinned first by a request sent straight to the
server (``test_server_*``), so a server upgrade that changes it fails there, by name, rather
than as a puzzling gateway failure.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion

from tests.real.conftest import MODEL, N_CTX, Gateway, Proc

SAMPLING: dict[str, Any] = {"temperature": 0, "seed": 0}

TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }},
    {"type": "function", "function": {
        "name": "list_dir", "description": "List a directory of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }},
]  # fmt: skip


def _call(call_id: str, name: str, path: str) -> dict[str, Any]:
    # content "": llama-cpp-python refuses null (500 "validation errors") and a missing key
    # (500 "'dict object' has no attribute 'content'", from the chat template).
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps({"path": path})}}
    ]}  # fmt: skip


def _result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _log(n: int, what: str) -> str:
    return "\n".join(
        f"2026-03-{1 + i % 28:02d} 10:{i % 60:02d}:{(7 * i) % 60:02d} INFO {what} step {i}: "
        f"compiled module_{i}.py ({(37 * i) % 900} lines) in {(13 * i) % 97} ms"
        for i in range(n)
    )


def _source(i: int) -> str:
    return (
        f"# src/pkg/module_{i}.py\n"
        f"def handler_{i}(request):\n"
        f'    """Answer request kind {i} from the cache when it is fresh."""\n'
        f"    value = cache.get(request.key)\n"
        f"    if value is None or value.age > {10 + i}:\n"
        f"        value = backend.fetch(request.key, timeout={1 + i % 5})\n"
        f"    return value\n"
    )


def agent_conversation(tag: str, steps: int = 24) -> list[dict[str, Any]]:
    """A coding agent's turn: many small tool calls and their results, then the step it is
    on. With the default size it is ~3x the 1,024-token window."""
    messages: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": f"You are a coding agent ({tag}). Use the tools, then answer in one short sentence.",
        },
        {"role": "user", "content": "Which handler has the longest cache age?"},
        _call("call_ls", "list_dir", "src/pkg"),
        _result("call_ls", "\n".join(f"module_{i}.py" for i in range(steps))),
    ]
    for i in range(steps):
        messages += [
            _call(f"call_{i}", "read_file", f"src/pkg/module_{i}.py"),
            _result(f"call_{i}", _source(i)),
        ]
    return [
        *messages,
        {"role": "assistant", "content": f"module_{steps - 1}.py has the longest cache age."},
        {"role": "user", "content": "Read notes.txt and say in one sentence what to do next."},
        _call("call_notes", "read_file", "notes.txt"),
        _result("call_notes", "Run the linter before the build."),
    ]


def big_outputs_conversation(tag: str, log_lines: int = 40) -> list[dict[str, Any]]:
    """The same kind of turn, but each older tool output alone is about twice the window."""
    return [
        {
            "role": "system",
            "content": f"You are a coding agent ({tag}). Use the tools, then answer in one short sentence.",
        },
        {"role": "user", "content": "Why does the build fail?"},
        _call("call_1", "read_file", "build.log"),
        _result("call_1", _log(log_lines, "build")),
        {
            "role": "assistant",
            "content": "The build log shows every module compiled; the failure must be in the tests.",
        },
        {"role": "user", "content": "Then read the test log."},
        _call("call_2", "read_file", "test.log"),
        _result("call_2", _log(log_lines, "test")),
        {"role": "assistant", "content": "The test log is clean too."},
        {"role": "user", "content": "Read notes.txt and say in one sentence what to do next."},
        _call("call_3", "read_file", "notes.txt"),
        _result("call_3", "Run the linter before the build."),
    ]


def post(url: str, payload: dict[str, Any], timeout_s: float = 120) -> tuple[int, dict[str, str], bytes]:
    """One request straight to a server, whatever its status."""
    req = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def null_content_conversation(i: int) -> list[dict[str, Any]]:
    """What many agents send: an assistant tool call with ``content: null``. Valid OpenAI,
    refused by llama-cpp-python's request model with a 500."""
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
    }
    return [
        {"role": "user", "content": f"Read a.txt (request {i})."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": "hello"},
    ]


# -- the server itself, pinned ---------------------------------------------------------------


def test_server_overflow_is_400_context_length_exceeded(llama_server: Proc) -> None:
    status, _, body = post(llama_server.base + "/v1/chat/completions", {
        "model": MODEL, "messages": agent_conversation("pin-overflow"), "tools": TOOLS, "max_tokens": 32,
    })  # fmt: skip
    assert status == 400, body
    err = json.loads(body)["error"]
    assert err["code"] == "context_length_exceeded" and err["type"] == "invalid_request_error"
    assert err["message"].startswith(
        f"This model's maximum context length is {N_CTX} tokens. However, you requested "
    )


def test_server_null_assistant_content_is_500_validation_errors(llama_server: Proc) -> None:
    status, _, body = post(
        llama_server.base + "/v1/chat/completions",
        {"model": MODEL, "messages": null_content_conversation(0), "max_tokens": 8},
    )
    assert status == 500, body
    err = json.loads(body)["error"]
    assert err["type"] == "internal_server_error" and err["code"] is None
    assert "validation error" in err["message"], err["message"]


def test_server_overflowing_stream_is_an_empty_200(llama_server: Proc) -> None:
    status, headers, body = post(llama_server.base + "/v1/chat/completions", {
        "model": MODEL, "messages": agent_conversation("pin-stream"), "tools": TOOLS, "max_tokens": 32,
        "stream": True,
    })  # fmt: skip
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert b"data:" not in body, body[:2000]


def test_server_any_error_in_a_stream_is_an_empty_200(llama_server: Proc) -> None:
    """Not only an overflow: a small request that fails in the chat template (an assistant
    message without "content") is a 500 when not streamed and the same empty 200 when streamed.
    An empty stream alone therefore does not say "overflow"; only its size can."""
    messages = null_content_conversation(0)
    del messages[1]["content"]
    url = llama_server.base + "/v1/chat/completions"
    status, _, body = post(url, {"model": MODEL, "messages": messages, "max_tokens": 8})
    assert (
        status == 500 and json.loads(body)["error"]["message"] == "'dict object' has no attribute 'content'"
    )
    status, headers, body = post(url, {"model": MODEL, "messages": messages, "max_tokens": 8, "stream": True})
    assert status == 200 and headers["content-type"].startswith("text/event-stream") and body == b""


def test_server_does_not_count_the_tools_array(llama_server: Proc) -> None:
    """SmolLM2's chat template renders no tools: a tools array adds nothing to prompt_tokens,
    and the overflow error's "N in the messages" leaves it out."""
    url = llama_server.base + "/v1/chat/completions"
    msgs = [{"role": "user", "content": "Say hi."}]
    counts = []
    for extra in ({}, {"tools": TOOLS}):
        status, _, body = post(url, {"model": MODEL, "messages": msgs, "max_tokens": 1, **extra})
        assert status == 200, body
        counts.append(json.loads(body)["usage"]["prompt_tokens"])
    assert counts[0] == counts[1], counts


# -- through the gateway ---------------------------------------------------------------------


def test_completion(client: openai.OpenAI) -> None:
    r = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=16, **SAMPLING
    )
    done = r.parse()
    assert r.headers["x-llm-attempts"] == "1" and "x-llm-compressed" not in r.headers
    assert done.choices[0].message.content and done.choices[0].finish_reason in ("stop", "length")
    assert done.usage is not None and 0 < done.usage.prompt_tokens < N_CTX


def test_stream(client: openai.OpenAI) -> None:
    r = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Count to five."}],
        max_tokens=16,
        stream=True,
        **SAMPLING,
    )
    assert r.headers["x-llm-attempts"] == "1" and r.headers["content-type"].startswith("text/event-stream")
    chunks = list(r.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    assert chunks[-1].choices and chunks[-1].choices[0].finish_reason in ("stop", "length")
    # The gateway asked for a usage chunk for its own accounting; this client did not.
    assert all(c.usage is None for c in chunks)


@dataclass
class Rescue:
    headers: Mapping[str, str]
    done: ChatCompletion
    applied: float  # llm_gateway_compressions_total{outcome="applied"} gained
    overflows: float  # llm_gateway_upstream_attempts_total{outcome="context_overflow"} gained


RESCUE_MAX_TOKENS = 32


@pytest.fixture(scope="module")
def rescue(client: openai.OpenAI, gateway: Gateway) -> Callable[[bool], Rescue]:
    """The agent conversation sent once per variant (with or without its tools array); each
    test reads what it needs from the same exchange (a rescue costs ~10-25 s of prompt eval)."""
    done: dict[bool, Rescue] = {}

    def get(with_tools: bool) -> Rescue:
        if with_tools not in done:
            compressions = ("llm_gateway_compressions_total", {"upstream": "llama", "outcome": "applied"})
            attempts = (
                "llm_gateway_upstream_attempts_total",
                {"upstream": "llama", "outcome": "context_overflow"},
            )
            before = [gateway.metric(n, **labels) for n, labels in (compressions, attempts)]
            extra: dict[str, Any] = {"tools": TOOLS} if with_tools else {}
            r = client.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=agent_conversation(f"rescue tools={with_tools}"),
                max_tokens=RESCUE_MAX_TOKENS,
                **extra,
                **SAMPLING,
            )
            after = [gateway.metric(n, **labels) for n, labels in (compressions, attempts)]
            done[with_tools] = Rescue(r.headers, r.parse(), after[0] - before[0], after[1] - before[1])
        return done[with_tools]

    return get


def test_agent_conversation_overflows_and_is_rescued_in_one_retry(rescue: Callable[[bool], Rescue]) -> None:
    r = rescue(True)
    assert r.headers["x-llm-compressed"] == "true" and r.headers["x-llm-attempts"] == "2"
    assert r.done.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert r.done.usage is not None
    assert r.done.usage.prompt_tokens + RESCUE_MAX_TOKENS <= N_CTX
    assert r.applied == 1 and r.overflows == 1


TOOLS_NOT_COUNTED = (
    "the gateway counts the tools array as prompt (~110 of its calibrated tokens here), but this "
    "server's SmolLM2 chat template does not render tools, so its count ('N in the messages') leaves "
    "them out: the calibration comes out low and the rescue keeps ~761 of 1,024 tokens (74 %); "
    "without the tools array the same conversation keeps ~852 (83 %). The compress merge lowered it "
    "(the earlier planner kept ~854 with the tools array)"
)


@pytest.mark.parametrize(
    "with_tools",
    [
        pytest.param(False, id="without-tools"),
        pytest.param(True, id="with-tools", marks=pytest.mark.xfail(strict=True, reason=TOOLS_NOT_COUNTED)),
    ],
)
def test_rescue_uses_at_least_80_percent_of_the_window(
    rescue: Callable[[bool], Rescue], with_tools: bool
) -> None:
    """No more thrown away than needed: the server's own prompt_tokens on the rescued answer."""
    r = rescue(with_tools)
    assert r.headers["x-llm-compressed"] == "true" and r.headers["x-llm-attempts"] == "2"
    assert r.done.usage is not None
    used = r.done.usage.prompt_tokens
    assert 0.8 * N_CTX <= used <= N_CTX - RESCUE_MAX_TOKENS, f"compressed prompt used {used} of {N_CTX}"


@pytest.mark.xfail(
    strict=True,
    reason=(
        "one calibration factor for the whole request: the provider counted 1.7x our estimate, "
        "driven by the number-heavy logs, so after those are cut the rest (prose) is over-counted "
        "and the rescue keeps ~517 of 1,024 tokens (50 %; 12 % before the cut floor scaled with "
        "the window). Needs a calibration per kind of content"
    ),
)
def test_big_tool_outputs_are_cut_to_fit_not_dropped(client: openai.OpenAI) -> None:
    r = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=big_outputs_conversation("big"), tools=TOOLS, max_tokens=32, **SAMPLING
    )
    done = r.parse()
    assert r.headers["x-llm-compressed"] == "true" and r.headers["x-llm-attempts"] == "2"
    assert done.usage is not None
    used = done.usage.prompt_tokens
    assert used >= 0.8 * N_CTX, f"compressed prompt used {used} of {N_CTX}"


def test_validation_500_is_unknown_not_retried_and_never_opens_the_circuit(
    client: openai.OpenAI, gateway: Gateway
) -> None:
    unknown = gateway.metric("llm_gateway_upstream_attempts_total", upstream="llama", outcome="unknown")
    for i in range(10):  # each one different, so the loop breaker does not answer from memory
        with pytest.raises(openai.InternalServerError) as e:
            client.chat.completions.create(
                model=MODEL, messages=null_content_conversation(i), max_tokens=8, **SAMPLING
            )
        h = e.value.response.headers
        assert e.value.status_code == 500
        assert h["x-llm-error-type"] == "unknown" and h["x-llm-attempts"] == "1", dict(h)
        assert h["x-llm-error-retryable"] == "false" and h["x-should-retry"] == "false"
        assert "validation error" in json.loads(e.value.response.content)["error"]["message"]
    assert (
        gateway.metric("llm_gateway_upstream_attempts_total", upstream="llama", outcome="unknown")
        == unknown + 10
    )
    # The breaker's threshold is 3 here: ten 500s counted as failures would have opened it.
    assert gateway.metric("llm_gateway_circuit_open", upstream="llama", model="*") == 0
    assert gateway.metric("llm_gateway_circuit_open", upstream="llama", model=MODEL) == 0
    r = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, **SAMPLING
    )
    assert r.parse().choices[0].message.content and r.headers["x-llm-attempts"] == "1"


def test_empty_overflowing_stream_is_rescued_or_classified_within_four_attempts(
    client: openai.OpenAI, gateway: Gateway
) -> None:
    """Contract: a streaming request that overflows is rescued, or answered with a classified
    context_overflow, within at most 4 upstream attempts (the failed stream, which this server
    cuts before its head; one non-streaming probe that learns the limit, plus one reconnect
    when the server has dropped the pooled connection it would reuse; the compressed stream),
    and it does not count against the circuit breaker."""
    try:
        r = client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=agent_conversation("empty-stream"),
            tools=TOOLS,
            max_tokens=32,
            stream=True,
            **SAMPLING,
        )
    except openai.APIStatusError as e:
        h = e.response.headers
        assert h["x-llm-error-type"] == "context_overflow", (e.status_code, dict(h), e.response.text)
        assert int(h["x-llm-attempts"]) <= 4
    else:
        assert int(r.headers["x-llm-attempts"]) <= 4, dict(r.headers)
        assert r.headers.get("x-llm-compressed") == "true"
        chunks = list(r.parse())
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip() or any(
            c.choices and c.choices[0].delta.tool_calls for c in chunks
        )
        assert chunks[-1].choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert gateway.metric("llm_gateway_circuit_open", upstream="llama", model="*") == 0
    assert gateway.metric("llm_gateway_circuit_open", upstream="llama", model=MODEL) == 0
