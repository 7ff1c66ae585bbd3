"""Named failures, for watching the gateway work without a provider (python -m gateway.fake).

A request picks its scenario by its model name: the whole name or its last "-" part
(429, gpt-4o-mini-429, claude-sonnet-4-5-overflow, gemini-2.5-flash-503: on the Gemini
API the model is in the path); any other model gets the default scenario (--scenario, ok
unless given). Every scenario speaks the API the request came on (chat completions,
Messages, Responses, Gemini), with that API's own bodies and errors.

    ok        a normal answer (streamed when the request streams)
    tool      a call of a shell tool the request declares (Claude Code's Bash,
              Codex's exec_command, else its first function); once the request
              carries the tool's result, an answer quoting it
    429       a rate limit asking for a wait (retry-after: --wait-s, 2 s;
              Gemini: RetryInfo retryDelay), then a normal answer
    503       a 503 from an overloaded server, then a normal answer
    529       Anthropic's 529 overloaded_error (Gemini: its 503, it sends no
              529), then a normal answer
    down      a 503, every time (watch the circuit open and refuse)
    overflow  the API's own context-overflow error for a request over
              --context-window (estimated) tokens, a normal answer under it:
              the gateway compresses once
    cut       a stream cut after its first words (a request that does not
              stream: the connection closed before any answer), then a normal
              answer
    stall     a stream that goes silent after its first words (not streaming:
              no answer at all) until the client gives up, then a normal answer
    empty     an empty 200 stream, as llama-cpp-python answers a streamed
              overflow; a request that does not stream gets a normal answer
    error200  OpenRouter's error after a model started, in its own shape on
              every API: HTTP 200 whose body is {"error": {"code": 502,
              "message": "Provider returned error", "metadata": {...}}} (the
              same to a request that streams), then a normal answer
    nostream  a normal answer, buffered (JSON) even to a request that streams,
              as a server that ignores "stream" sends it
    alwaysstream  a normal answer, streamed even to a request that does not
              stream, as a server that always streams sends it

"Then a normal answer": a failing scenario alternates per model and API, so the
1st, 3rd, ... request of one model on one API fails and the next one succeeds.
The gateway's own retry is that next one, so a client sees the gateway recover
(x-llm-attempts: 2) where a bare client would see the error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

from gateway.fake import gemini, gemini_tool, tool_call
from gateway.fake.chat import chunk, estimate_tokens, overflow_error
from gateway.fake.keyed import _mask
from gateway.fake.messages import anthropic_error, anthropic_head, anthropic_overflow, text_delta
from gateway.fake.responses import Seq, responses_deltas, responses_error, responses_head, responses_overflow
from gateway.fake.steps import Drop, Hang, Reply, Step, Stream
from gateway.fake.upstream import FakeUpstream, GeminiCall

Api = Literal["chat", "messages", "responses", "gemini"]
SCENARIOS = ("ok", "tool", "429", "503", "529", "down", "overflow", "cut", "stall", "empty", "error200",
             "nostream", "alwaysstream")
_ALTERNATING = frozenset({"429", "503", "529", "cut", "stall", "error200"})
# OpenRouter, once a model has started on a request: "the returned HTTP response status will be
# 200 and any error occurred while the LLM is producing the output will be emitted in the
# response body", shaped {"error": {"code", "message", "metadata"?}}, the code 502 meaning "Your
# chosen model is down or we received an invalid response from it"
# (https://openrouter.ai/docs/api/reference/errors-and-debugging); the message and metadata as in
# a live one quoted in open-webui/computer#293 ({"error":{"message":"Provider returned
# error","code":429,"metadata":{…,"provider_name":"BaseTen",…}}}).
OPENROUTER_ERROR_200 = {"error": {"message": "Provider returned error", "code": 502,
                                  "metadata": {"provider_name": "BaseTen"}}}  # fmt: skip
_FIRST_WORDS = ("The answer", " starts")


def scenario_of(model: str, default: str) -> str:
    if model in SCENARIOS:
        return model
    last = model.rsplit("-", 1)[-1]
    return last if last in SCENARIOS else default


def _error(api: Api, status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> Reply:
    if api == "gemini":
        return gemini.unavailable() if status in (503, 529) else gemini.error(status, message)
    if api == "messages":
        reply = anthropic_error(status, kind, message)
    else:
        reply = responses_error(status, message, kind, None)
    reply.headers.update(headers or {})
    return reply


def _partial_stream(api: Api, model: str, then: str, framing: str = "sse-crlf") -> Stream:
    """A stream that shows its first words, then ``then`` (drop or stall)."""
    events: list[Any]
    if api == "gemini":
        return gemini.stream(gemini.stream_chunks(model or gemini.MODEL, _FIRST_WORDS, finish=False), framing, then)
    if api == "messages":
        events = [*anthropic_head(model or "claude-sonnet-4-5"), *(text_delta(w) for w in _FIRST_WORDS)]
    elif api == "responses":
        events = [*responses_head(model or "gpt-5-codex", Seq()), *responses_deltas(_FIRST_WORDS)]
    else:
        events = [chunk({"role": "assistant", "content": ""}, model=model or "gpt-4o-mini")]
        events += [chunk({"content": w}, model=model or "gpt-4o-mini") for w in _FIRST_WORDS]
    return Stream(events, then=then)


class ScenarioUpstream(FakeUpstream):
    """The fake upstream answering by scenario (see the module docstring); ``log`` gets one
    line per request saying which scenario answered and how."""

    def __init__(
        self, default: str = "ok", *, wait_s: float = 2.0, context_window: int = 2000,
        log: Callable[[str], None] = lambda _line: None,
    ) -> None:  # fmt: skip
        super().__init__()
        if default not in SCENARIOS:
            raise ValueError(f"unknown scenario {default!r}; known: {', '.join(SCENARIOS)}")
        self.default = default
        self.wait_s = wait_s
        self.window = context_window
        self.log = log
        self._seen: dict[tuple[str, str, Api], int] = {}

    def _default(self, payload: dict[str, Any]) -> Step:
        return self._pick("chat", payload) or super()._default(payload)

    def _default_messages(self, payload: dict[str, Any]) -> Step:
        return self._pick("messages", payload) or super()._default_messages(payload)

    def _default_responses(self, payload: dict[str, Any]) -> Step:
        return self._pick("responses", payload) or super()._default_responses(payload)

    def _default_gemini(self, call: GeminiCall) -> Step:
        return self._pick("gemini", call.payload, call) or super()._default_gemini(call)

    def _refused(self, path: str, key: str | None, reply: Reply) -> None:
        api = ("gemini" if gemini.method_of(path) else "messages" if "/messages" in path
               else "responses" if path.endswith("/responses") else "chat")  # fmt: skip
        body = reply.body[0] if isinstance(reply.body, list) and reply.body else reply.body
        error = body.get("error") if isinstance(body, dict) else None
        kind = f" {error.get('type') or error.get('status')}" if isinstance(error, dict) else ""
        self.log(f"{api} key={self._shown(key)} refused -> {_describe(reply)}{kind}")

    def _shown(self, key: str | None) -> str:
        """A credential as the log shows it: a key the fake was given by name as it is, any
        other (a real key a client sent by mistake) masked as OpenAI masks one."""
        if not key:
            return "-"
        return key if self.keys.named(key) else _mask(key)

    def _pick(self, api: Api, payload: dict[str, Any], call: GeminiCall | None = None) -> Step | None:
        model = call.model if call is not None else str(payload.get("model") or "")
        name = scenario_of(model, self.default)
        key = f" key={self._shown(self._key)}" if self._key else ""
        if name == "tool":
            if call is not None:
                step, said, made = gemini_tool.answer(call, call.stream)
                if made is not None:
                    self.gemini_calls.add(made)
            else:
                assert api != "gemini"
                step, said = tool_call.answer(api, payload, model)
            self.log(f"{api}{key} model={model or '-'} scenario={name} -> {said}{self._sent(call)}")
            return step
        # Per model and API: two clients trying one scenario each see it fail first.
        seen = (name, model, api)
        n = self._seen[seen] = self._seen.get(seen, 0) + 1
        fails = name not in _ALTERNATING or n % 2 == 1
        step = self._failure(api, name, model, payload, call) if fails else None
        self.log(f"{api}{key} model={model or '-'} scenario={name} -> {_describe(step)}{self._sent(call)}")
        return step

    def _sent(self, call: GeminiCall | None) -> str:
        """On the Gemini API, what came: the body's fields and where the key was (which the
        other APIs' lines need not say: their key has one place)."""
        if call is None:
            return ""
        return f" [sent: {gemini.sketch(call.payload)}; key in {', '.join(self._key_in) or 'none'}]"

    def _failure(self, api: Api, name: str, model: str, payload: dict[str, Any],
                 call: GeminiCall | None = None) -> Step | None:  # fmt: skip
        stream = call.stream if call is not None else bool(payload.get("stream"))
        framing = call.framing if call is not None else "sse"
        if name == "429" and api == "gemini":
            return gemini.rate_limited(model, self.wait_s)
        if name == "429":
            headers = {"retry-after": f"{self.wait_s:g}"}
            return _error(api, 429, "rate_limit_error" if api == "messages" else "rate_limit_exceeded",
                          f"Rate limit reached; retry in {self.wait_s:g}s.", headers)  # fmt: skip
        if name in ("503", "down"):
            return _error(api, 503, "api_error" if api == "messages" else "server_error",
                          "The server is overloaded or not ready yet.")  # fmt: skip
        if name == "529":
            return _error(api, 529, "overloaded_error", "Overloaded")
        if name == "overflow":
            return self._overflow(api, payload)
        if name == "cut":
            return _partial_stream(api, model, "drop", framing) if stream else Drop()
        if name == "stall":
            return _partial_stream(api, model, "stall", framing) if stream else Hang()
        if name == "empty" and stream:
            return Stream([], then="eof") if call is None else gemini.stream([], framing)
        if name == "error200":
            return Reply(200, OPENROUTER_ERROR_200)
        if name in ("nostream", "alwaysstream"):
            # What a server that ignores the request's ``stream`` sends: the answer of the other kind
            # (tinyhumansai/tinyagents#56 falls back for the first; sgl-project/mini-sglang#51
            # reports the second: "always returns SSE streaming responses regardless of the stream
            # parameter").
            return self._answer_as(api, payload, call, stream=name == "alwaysstream")
        return None

    def _answer_as(self, api: Api, payload: dict[str, Any], call: GeminiCall | None, *, stream: bool) -> Step:
        """The normal answer, streamed or not as ``stream`` says, whatever the request asked."""
        if call is not None:
            asked = dataclasses.replace(call, stream=stream, framing="sse-crlf" if stream else call.framing)
            return super()._default_gemini(asked)
        as_asked = {**payload, "stream": stream}
        if api == "messages":
            return super()._default_messages(as_asked)
        if api == "responses":
            return super()._default_responses(as_asked)
        return super()._default(as_asked)

    def _overflow(self, api: Api, payload: dict[str, Any]) -> Step | None:
        if api == "gemini":
            used = gemini.estimate_tokens(payload)
            return gemini.overflow(used, self.window) if used > self.window else None
        if api == "responses":
            items = payload.get("input")
            view = {"messages": items if isinstance(items, list) else [{"content": items}],
                    "system": payload.get("instructions")}  # fmt: skip
            return responses_overflow() if estimate_tokens(view) > self.window else None
        used = estimate_tokens(payload)
        if used <= self.window:
            return None
        if api == "messages":
            return anthropic_overflow(self.window, used)
        return overflow_error(self.window, used, payload.get("max_completion_tokens") or payload.get("max_tokens"))


def _describe(step: Step | None) -> str:
    if step is None:
        return "answer"
    if isinstance(step, Reply):
        wait = step.headers.get("retry-after")
        if wait:
            return f"{step.status} (retry-after: {wait})"
        delay = _retry_delay(step.body)
        return f"{step.status}" + (f" (retryDelay: {delay})" if delay else "")
    if isinstance(step, Stream):
        return "empty stream" if not step.events else f"stream, then {step.then}"
    if isinstance(step, Drop):
        return "connection closed"
    if isinstance(step, Hang):
        return "no answer"
    return "scripted"


def _retry_delay(body: Any) -> str | None:
    """A Google error's RetryInfo wait, for the log line."""
    error = body.get("error") if isinstance(body, dict) else None
    for detail in (error.get("details") or ()) if isinstance(error, dict) else ():
        if isinstance(detail, dict) and detail.get("@type") == gemini.RETRY:
            return str(detail.get("retryDelay"))
    return None
