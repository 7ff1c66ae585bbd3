"""The SDK-backed tracer driven hook by hook, as the pipeline calls it (tests/integration/
test_tracing.py runs it through the real pipeline): what each attempt span says."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from gateway.apis import GEMINI, OPENAI_CHAT
from gateway.apis.base import Dialect
from gateway.errors import Classification, ErrorType
from gateway.pipeline.attempt import Call, ReadMode
from gateway.pipeline.outcome import RequestState, Success, gateway_failure
from gateway.policy.retry import StopReason
from tests.spans import in_memory


def _call(upstream: str, url: str, method: str = "POST", dialect: Dialect = OPENAI_CHAT,
          mode: ReadMode = ReadMode.BUFFER) -> Call:  # fmt: skip
    up: Any = SimpleNamespace(cfg=SimpleNamespace(name=upstream))
    return Call(up, method, url, {}, mode, dialect)


def _state(path: str = "/v1/chat/completions", model: str | None = "gpt-4o", method: str = "POST") -> RequestState:
    state = RequestState("req", time.monotonic())
    state.method, state.path, state.model = method, path, model
    return state


def _one_attempt(tracing: Any, state: RequestState, call: Call) -> None:
    tracing.begin({}, state)
    state.attempts += 1
    tracing.attempt_started(state, call, b"{}")
    tracing.attempt_ended(state, call, Success(200, [], body=b"{}"))
    tracing.end(state, 200)


def _attempt_spans(exporter: Any) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.kind.name == "CLIENT"]


def test_attempts_name_their_own_upstream_when_upstreams_share_a_base_url() -> None:
    """A pool of keys on one provider: every deployment has the same base URL."""
    tracing, exporter = in_memory()
    url = "https://api.openai.com/v1/chat/completions"
    for name in ("acct-2", "acct-1", "acct-2"):
        _one_attempt(tracing, _state(), _call(name, url))
    assert [s.attributes["llm_gateway.upstream"] for s in _attempt_spans(exporter)] == ["acct-2", "acct-1", "acct-2"]


def test_the_operation_is_the_calls_own_path_not_its_dialects() -> None:
    """tracing.md: ``chat`` for the APIs, an attempt on another path its HTTP method, lowercase.
    A pass-through call carries the chat dialect; a Gemini countTokens call the Gemini one."""
    tracing, exporter = in_memory()
    base = "http://127.0.0.1:9/v1"
    cases = [
        (_state("/v1/embeddings", "text-embedding-3-small"), _call("u", base + "/embeddings", mode=ReadMode.RAW)),
        (_state("/v1/responses/compact"), _call("u", base + "/responses/compact", mode=ReadMode.RAW)),
        (_state("/v1/messages/count_tokens"), _call("u", base + "/messages/count_tokens", mode=ReadMode.RAW)),
        (_state("/v1/models", None, "GET"), _call("u", base + "/models", "GET", mode=ReadMode.RAW)),
        (_state(), _call("u", base + "/chat/completions?api-version=1")),
        (_state("/v1beta/models/gemini-2.0-flash:countTokens", "gemini-2.0-flash"),
         _call("u", base + "beta/models/gemini-2.0-flash:countTokens", dialect=GEMINI)),
        (_state("/v1beta/models/gemini-2.0-flash:streamGenerateContent", "gemini-2.0-flash"),
         _call("u", base + "beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse", dialect=GEMINI)),
    ]
    for state, call in cases:
        _one_attempt(tracing, state, call)
    got = [(s.name, s.attributes["gen_ai.operation.name"]) for s in _attempt_spans(exporter)]
    assert got == [
        ("post text-embedding-3-small", "post"),
        ("post gpt-4o", "post"),
        ("post gpt-4o", "post"),
        ("get", "get"),
        ("chat gpt-4o", "chat"),
        ("post gemini-2.0-flash", "post"),
        ("generate_content gemini-2.0-flash", "generate_content"),
    ]


def test_attempts_sent_at_once_end_by_their_own_outcomes_in_any_order() -> None:
    tracing, exporter = in_memory()
    state = _state("/v1/models", None, "GET")
    tracing.begin({}, state)
    calls = [_call(f"u{i}", f"http://127.0.0.1:{9000 + i}/v1/models", "GET") for i in range(3)]
    for call in calls:
        state.attempts += 1
        tracing.attempt_started(state, call, b"")
    down = gateway_failure(502, Classification.of(ErrorType.PROVIDER_UNAVAILABLE), "down", "down")
    tracing.attempt_ended(state, calls[1], down)
    tracing.attempt_ended(state, calls[2], Success(200, [], body=b"{}"))
    tracing.attempt_ended(state, calls[0], Success(200, [], body=b"{}"))
    tracing.end(state, 200)
    spans = {s.attributes["llm_gateway.upstream"]: s for s in _attempt_spans(exporter)}
    assert sorted(spans) == ["u0", "u1", "u2"]
    assert [spans[n].attributes["llm_gateway.attempt.number"] for n in ("u0", "u1", "u2")] == [1, 2, 3]
    assert all("llm_gateway.ended_by" not in s.attributes for s in spans.values())
    assert spans["u1"].attributes["error.type"] == "provider_unavailable"
    assert spans["u1"].status.status_code.name == "ERROR"
    assert spans["u0"].status.status_code.name == spans["u2"].status.status_code.name == "UNSET"
    assert all(s.attributes["http.response.status_code"] == 200 for n, s in spans.items() if n != "u1")


def _decisions(steps: list[tuple[StopReason | None, str | None]]) -> list[tuple[Any, Any]]:
    """One request: a failed attempt per step, settled with the step's stop reason, then the
    step's next attempt kind announced (None: nothing follows); the last attempt succeeds."""
    tracing, exporter = in_memory()
    state = _state()
    tracing.begin({}, state)
    call = _call("u", "http://127.0.0.1:9/v1/chat/completions")
    refused = gateway_failure(400, Classification.of(ErrorType.CONTEXT_OVERFLOW), "too long", "overflow")
    for stopped, follows in steps:
        state.attempts += 1
        tracing.attempt_started(state, call, b"{}")
        tracing.attempt_ended(state, call, refused)
        tracing.settled(state, stopped)
        if follows is not None:
            tracing.next_attempt(state, follows)
    if steps[-1][1] is not None:
        state.attempts += 1
        tracing.attempt_started(state, call, b"{}")
        tracing.attempt_ended(state, call, Success(200, [], body=b"{}"))
    tracing.end(state, 200)
    return [(s.attributes.get("llm_gateway.decision"), s.attributes.get("llm_gateway.stop_reason"))
            for s in _attempt_spans(exporter)]


def test_the_decision_on_a_failed_attempt_is_what_followed_it() -> None:
    """tracing.md: ``llm_gateway.decision`` is what followed the attempt's failure; the retry
    policy stopping (``stop_reason``) is not the end when a rescue or another deployment follows."""
    assert _decisions([(StopReason.NOT_RETRYABLE, "compress_retry")]) == [("retry", "not_retryable"), (None, None)]
    assert _decisions([(StopReason.NOT_RETRYABLE, "param_retry"), (StopReason.NOT_RETRYABLE, "output_retry")]) == [
        ("retry", "not_retryable"), ("retry", "not_retryable"), (None, None)]
    assert _decisions([(StopReason.MOVING_ON, "sibling")]) == [("sibling", "moving_on"), (None, None)]
    assert _decisions([(StopReason.EXHAUSTED, None)]) == [("stop", "exhausted")]
    assert _decisions([(None, None)]) == [("stop", None)]  # one try, nothing after (a model listing's)
