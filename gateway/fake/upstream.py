"""A scriptable OpenAI-compatible upstream on loopback, for tests and for trying the gateway.

Queue what the next chat-completion requests get with ``script(*steps)``; with nothing
queued, every request gets a normal success (streamed when the request asks), with
usage. Steps:

* ``Reply(status, body, headers)``: a buffered response.
* ``Stream(events, then=...)``: an SSE stream of the given events (dicts become
  ``data: {...}`` chunks, bytes are sent raw), then ``"done"`` (a clean end as the API ends
  it: chat's ``[DONE]``; none on Responses, whose stream ends after ``response.completed`` with
  no marker, OpenAI's streaming reference listing typed events only; ``done_marker=True`` adds
  it anyway, as some compatible servers do), ``"drop"`` (the connection is cut), ``"stall"``
  (silence until the client gives up) or ``"eof"`` (a clean end without ``[DONE]``).
* ``Drop()``: the connection is closed before any response.
* ``Hang(seconds)``: no response head for that long (then the connection is closed).
* a callable ``f(request_json) -> step``: decided from the request.

With ``context_limit`` set, requests whose estimated size exceeds it are answered with
OpenAI's real overflow error (the wording of the ``context_length_exceeded`` error as
the OpenAI API returns it), computed from the request. With ``output_limit`` set, a chat or
Messages request asking for a larger output budget gets the API's real refusal, and with
``refused_params`` one carrying such a parameter (output.py).

Several deployments: the fake tells them apart by the credential (``Authorization: Bearer``,
``x-api-key``, ``api-key``). A Responses answer is stored for the project of the key that got it
(``projects``, else the key's own) unless asked ``store: false``, and only that project's keys
may chain to it with ``previous_response_id`` (responses_rules.py). ``fake.keys`` (:class:`gateway.fake.limits.KeyLimits`) gives a
key rpm/tpm limits (then every answer to it carries the API's real rate-limit headers, and a
request past a limit gets the API's real 429), or a state: ``limited_until``, ``revoke``,
``exhaust``, ``counting_limited_until`` (Anthropic's token counting, limited apart from its
messages); ``calls_by_key()`` counts what reached each key. ``require_key`` and
``strict_headers`` refuse, as the real APIs do, a request with no credential and a Messages
request without ``anthropic-version`` or with an Anthropic credential in the place of the other
kind (an API key as a bearer token, an OAuth token in x-api-key): ``strict_headers`` is on by default (a gateway that
forgets the header must fail here as it would against Anthropic), ``require_key`` off (a
keyless local server takes requests without one); see gateway/fake/gate.py.

Gemini API paths (``/v1beta/models/{model}:generateContent``, ``:streamGenerateContent``,
``:countTokens``, and ``/v1/``) take the same steps: a scripted ``Stream`` of
GenerateContentResponse dicts goes out as the request asked (SSE with ``alt=sse``, else a
JSON array), a buffered error on a JSON-array request wrapped in an array. Before any step,
the body is held to what the real API refuses (gateway/fake/gemini_rules.py); the key is
``x-goog-api-key`` or ``?key=``, and an ``Authorization`` header is refused (gate.py).

Use it in-loop (``async with FakeUpstream() as fake``) or from sync code and
subprocess tests in a thread (``with FakeUpstream.in_thread() as fake``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from gateway.fake import (
    chat_rules,
    conversations,
    gate,
    gemini,
    gemini_rules,
    messages_rules,
    output,
    responses_rules,
    structured,
)
from gateway.fake.chat import chat_completion, estimate_tokens, overflow_error, stream_events, wants_usage
from gateway.fake.keyed import credential_of, dialect_of, key_places, not_json, wrong_method
from gateway.fake.limits import KeyLimits
from gateway.fake.messages import anthropic_message, anthropic_overflow, anthropic_stream
from gateway.fake.responses import response_object, responses_overflow, responses_stream
from gateway.fake.steps import Drop, Hang, Recorded, Reply, Step, Stream

# The endpoints whose body the real APIs read as a JSON object (Gemini's methods check their own).
_JSON_PATHS = ("/completions", "/messages", "/messages/count_tokens", "/responses", "/embeddings")


class FakeUpstream:
    def __init__(self) -> None:
        self.steps: collections.deque[Step] = collections.deque()
        self.always: Step | None = None  # answers every request once the queued steps are used up
        self.requests: list[Recorded] = []
        self.context_limit: int | None = None
        self.output_limit: int | None = None  # a larger output budget gets the API's 400 (output.py)
        self.refused_params: frozenset[str] = frozenset()  # top-level parameters answered with a 400
        self.refusal_style = "openai"  # whose words refuse them on chat: openai, groq, mistral (output.py)
        self.models_listing: dict[str, Any] | None = None  # what GET /models answers
        self.cancelled = 0  # handlers torn down because the gateway went away
        self.keys = KeyLimits()  # per-credential limits and states
        self.require_key = False  # True: a request with no credential gets the API's 401
        # A Messages request without anthropic-version gets a 400, one with an Anthropic
        # credential in the wrong place a 401, as the real API answers (gate.py).
        self.strict_headers = True
        self._key: str | None = None  # the credential of the request being answered, for logs
        self._key_in: tuple[str, ...] = ()  # where that request carried it (key_places), for logs
        # The ids of the function calls the fake answered Gemini requests with: replayed without
        # their thoughtSignature, Gemini 3 refuses them (gemini_rules.py).
        self.gemini_calls: set[str] = set()
        # The tool_use ids the fake answered Messages requests with beside a thinking block:
        # replayed without it while thinking is on, Anthropic refuses them (messages_rules.py).
        self.thought_calls: set[str] = set()
        # Those it answered to a request that asked no thinking, refused the same way; not one it
        # also answered to a request that asked for it (``asked_calls``: a script that numbers its
        # calls gives Claude Code's side requests, asked without thinking, the same ids).
        self.unthought_calls: set[str] = set()
        self.asked_calls: set[str] = set()
        # The prefix (system, tools, messages before it) each thinking block the fake answered
        # Messages requests with was produced under: replayed behind another on a model with
        # preserved thinking, Anthropic refuses it (messages_rules.py).
        self.bound_thinking: dict[str, set[str]] = {}
        # The organization of each key (``--org``): reasoning signed for one organization's key
        # is refused from another's, as the providers refuse it (messages_rules.py,
        # responses_rules.py). A key not named here is in none (the default: all one account).
        self.orgs: dict[str, str] = {}
        # The project of each key: a stored response is visible to the keys of the project that
        # made it, and a chained turn (``previous_response_id``) from another project's key is
        # refused (responses_rules.py). A key not named here is a project of its own, as an
        # OpenAI key belongs to one project; ``stored``: each response id issued -> its projects.
        self.projects: dict[str, str] = {}
        self.stored: dict[str, set[str | None]] = {}
        # Made by POST /v1/conversations, each visible to its maker's project (conversations.py).
        self.conversations = conversations.Conversations()
        self._issued = 0  # the default answers' ids: each response its own, as the API's are
        self._runner: web.AppRunner | None = None
        self.host, self.port = "127.0.0.1", 0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def script(self, *steps: Step) -> None:
        self.steps.extend(steps)

    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def responses_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/v1/responses")]

    def messages_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/v1/messages")]

    def calls_by_key(self) -> dict[str | None, int]:
        """Requests received per credential (None: none), refused ones included."""
        return dict(self.keys.calls)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> FakeUpstream:
        app = web.Application(client_max_size=512 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                                     shutdown_timeout=0.1)  # fmt: skip
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            raise
        self.host, self.port = host, self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> FakeUpstream:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @classmethod
    @contextlib.contextmanager
    def in_thread(cls) -> Iterator[FakeUpstream]:
        fake = cls()
        loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(fake.start())
            started.set()
            loop.run_forever()
            loop.run_until_complete(fake.close())
            loop.close()

        thread = threading.Thread(target=run, name="fake-upstream", daemon=True)
        thread.start()
        started.wait(10)
        try:
            yield fake
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(Recorded(request.method, request.path, CIMultiDict(request.headers), body,
                                      request.query_string))
        self.keys.calls[credential_of(request.headers, request.query)] += 1
        try:
            return await self._answer(request, body)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def _answer(self, request: web.Request, body: bytes) -> web.StreamResponse:
        path = request.path
        oversized = messages_rules.too_large(path, len(body))
        if oversized is not None:
            return await self._play(request, oversized)
        problem: str | None = None  # why the body is not JSON, if it is not
        try:
            payload = json.loads(body) if body else {}
        except ValueError as e:
            payload, problem = {}, str(e)
        screened = payload if isinstance(payload, dict) else {}  # an array is refused below, after the key
        refused = gate.screen(self.keys, path, request.headers, screened, require_key=self.require_key,
                              strict_headers=self.strict_headers, query=request.query)  # fmt: skip
        self._key = credential_of(request.headers, request.query)  # read by subclasses' logs before the next await
        self._key_in = key_places(request.headers, request.query)
        named = gemini.method_of(path)
        if refused is not None:
            self._refused(path, self._key, refused)
            return await self._play(request, gemini_framed(refused, named, request.query))
        if named is not None:
            return await self._gemini(request, payload, body, *named)
        method_refused = wrong_method(request.method, path)
        if method_refused is not None:
            return await self._play(request, method_refused)
        if request.method == "POST" and path.endswith(_JSON_PATHS) and (problem is not None or not isinstance(payload, dict)):
            # The real APIs parse the body before anything else: nothing further is answered.
            return await self._play(request, not_json(dialect_of(path), problem))
        if request.method == "GET" and gemini_listing(path, request.headers):
            return web.json_response(self._gemini_models(path))
        if path.endswith("/models") and request.method == "GET":
            return web.json_response(self.models_listing or {"object": "list", "data": [
                {"id": "gpt-4o-mini", "object": "model", "created": 0, "owned_by": "fake"}]})
        if path.endswith("/embeddings"):
            return web.json_response({"object": "list", "model": "text-embedding-3-small",
                                      "data": [{"object": "embedding", "index": 0,
                                                "embedding": [0.1, 0.2, 0.3]}],
                                      "usage": {"prompt_tokens": 3, "total_tokens": 3}})
        if path.endswith("/messages/count_tokens"):
            return web.json_response({"input_tokens": estimate_tokens(payload)})
        if "/conversations" in path:  # OpenAI's Conversations API, which no other provider has
            other = conversations.elsewhere(path, request.headers)
            if other is not None:
                return await self._play(request, other)
            if path == conversations.ROOT or path.startswith(conversations.ROOT + "/"):
                answer = self.conversations.answer(request.method, path, request.query, payload, self._project())
                return await self._play(request, answer)
        if not path.endswith(("/completions", "/messages", "/responses")):
            return web.json_response({"error": {"message": f"unknown path {path}",
                                                "type": "invalid_request_error", "code": None}},
                                     status=404)  # fmt: skip
        org = self.orgs.get(self._key or "")
        limited = (chat_rules.refusal(path, payload)
                   or messages_rules.refusal(path, payload, request.headers,
                                             self.thought_calls | (self.unthought_calls - self.asked_calls), org,
                                             self.bound_thinking)
                   or responses_rules.refusal(path, payload, org)
                   or (responses_rules.unknown_previous(payload, self.stored, self._project())
                       if path.endswith("/responses") else None)
                   or output.param_refusal(self.refused_params, path, payload, self.refusal_style)
                   or output.refusal(self.output_limit, path, payload))  # fmt: skip
        if limited is not None:
            self._refused(path, self._key, limited)
            return await self._play(request, limited)
        step: Any = self.steps.popleft() if self.steps else self.always
        while callable(step):
            step = step(payload)
        if step is None:
            step = (self._default_messages(payload) if path.endswith("/messages")
                    else self._default_responses(payload) if path.endswith("/responses")
                    else self._default(payload))
        if path.endswith("/messages"):
            self.thought_calls |= messages_rules.thought_calls(step)
            unthought = messages_rules.unthought_calls(step, payload)
            self.unthought_calls |= unthought
            if not unthought:  # asked with thinking: an id scripted for both is not judged
                self.asked_calls |= messages_rules.answered_calls(step)
            for mark, at in messages_rules.bound_thinking(step, payload).items():
                self.bound_thinking.setdefault(mark, set()).add(at)
        if path.endswith("/responses") and payload.get("store") is not False:
            issued = responses_rules.issued(step)
            if issued is not None:
                self.stored.setdefault(issued, set()).add(self._project())
        if path.endswith("/responses"):  # a turn run in a conversation adds its items to it
            named = payload.get("conversation")
            named = named.get("id") if isinstance(named, dict) else named
            self.conversations.append(named, conversations.turn_items(payload, step))
        return await self._play(request, gate.stamp(self.keys, path, request.headers, payload, step))

    def _project(self) -> str | None:
        """The project of the request's key (``projects``), else the key itself."""
        key = self._key
        return self.projects.get(key, key) if key is not None else None

    async def _gemini(self, request: web.Request, payload: dict[str, Any], body: bytes, version: str,
                      model: str, method: str) -> web.StreamResponse:  # fmt: skip
        """A Gemini API method: its body checked as Google checks it, then the script's step
        or the default answer, in the framing the request asked for."""
        named = (version, model, method)
        if not isinstance(payload, dict) or (body and not isinstance(_json_or_none(body), dict)):
            return await self._play(request, gemini_framed(gemini.error(400, "Invalid JSON payload received."),
                                                           named, request.query))  # fmt: skip
        if method == "countTokens":
            refused = gemini_rules.unknown_field(payload, gemini_rules.COUNT_FIELDS)
            inner = payload.get("generateContentRequest") or payload.get("generate_content_request")
            counted = inner if isinstance(inner, dict) else payload
            answer = refused or Reply(200, gemini.count(gemini.estimate_tokens(counted)))
            return await self._play(request, answer)
        refused = gemini_rules.refusal(payload, self.gemini_calls, model, self.orgs.get(self._key or ""))
        if refused is not None:
            self._refused(request.path, self._key, refused)
            return await self._play(request, gemini_framed(refused, named, request.query))
        call = GeminiCall(model, method == "streamGenerateContent",
                          "sse-crlf" if request.query.get("alt") == "sse" else "json-array", payload)  # fmt: skip
        step: Any = self.steps.popleft() if self.steps else self.always
        while callable(step):
            step = step(payload)
        if step is None:
            step = self._default_gemini(call)
        step = gate.stamp(self.keys, request.path, request.headers, payload, step, request.query)
        return await self._play(request, gemini_framed(step, named, request.query))

    def _default_gemini(self, call: GeminiCall) -> Step:
        if self.context_limit is not None:
            used = gemini.estimate_tokens(call.payload)
            if used > self.context_limit:
                return gemini.overflow(used, self.context_limit)
        text = gemini.json_answer(call.payload)
        if call.stream:
            words = (text,) if text is not None else ("Hello", " from", " fake.")
            return gemini.stream(gemini.stream_chunks(call.model, words), call.framing)
        return Reply(200, gemini.answer(call.model) if text is None else gemini.answer(call.model, text))

    def _gemini_models(self, path: str) -> dict[str, Any]:
        names = [m["id"] for m in (self.models_listing or {}).get("data", [])] or [gemini.MODEL]
        if path.endswith("/models"):
            return {"models": [gemini.model_entry(n) for n in names]}
        return gemini.model_entry(path.rsplit("/", 1)[-1])

    def gemini_requests(self) -> list[Recorded]:
        return [r for r in self.requests if gemini.method_of(r.path) is not None]

    def _refused(self, path: str, key: str | None, reply: Reply) -> None:
        """Told of each request refused for its credential or headers (ScenarioUpstream logs them)."""

    def _default(self, payload: dict[str, Any]) -> Step:
        model = payload.get("model") or "gpt-4o-mini"
        if self.context_limit is not None:
            used = estimate_tokens(payload)
            completion = payload.get("max_completion_tokens") or payload.get("max_tokens")
            if used + (completion or 0) > self.context_limit:
                return overflow_error(self.context_limit, used, completion)
        # A request for JSON gets JSON in its schema, in one piece (structured.py).
        text = structured.chat_json(payload)
        if payload.get("stream"):
            usage = wants_usage(payload)
            if text is not None:
                return Stream(stream_events(model, (text,), include_usage=usage))
            return Stream(stream_events(model, include_usage=usage))
        return Reply(200, chat_completion(model) if text is None else chat_completion(model, text))

    def _default_messages(self, payload: dict[str, Any]) -> Step:
        model = payload.get("model") or "claude-sonnet-4-5"
        if self.context_limit is not None:
            used = estimate_tokens(payload)
            if used + (payload.get("max_tokens") or 0) > self.context_limit:
                return anthropic_overflow(self.context_limit, used)
        text = structured.messages_json(payload)
        if payload.get("stream"):
            return Stream(anthropic_stream(model) if text is None else anthropic_stream(model, (text,)), then="eof")
        return Reply(200, anthropic_message(model) if text is None else anthropic_message(model, text))

    def _default_responses(self, payload: dict[str, Any]) -> Step:
        model = payload.get("model") or "gpt-5-codex"
        if self.context_limit is not None:
            items = payload.get("input")
            view = {"messages": items if isinstance(items, list) else [{"content": items}],
                    "system": payload.get("instructions")}
            if estimate_tokens(view) > self.context_limit:
                return responses_overflow()
        text = structured.responses_json(payload)
        self._issued += 1
        rid = f"resp_fake{self._issued:06d}"
        if payload.get("stream"):
            words = ("Hello", " from", " fake.") if text is None else (text,)
            return Stream(responses_stream(model, words, rid=rid), then="eof")
        return Reply(200, response_object(model, rid=rid) if text is None else response_object(model, text, rid=rid))

    async def _play(self, request: web.Request, step: Step) -> web.StreamResponse:
        if isinstance(step, Reply):
            if step.delay_s:
                await asyncio.sleep(step.delay_s)
            if step.until is not None:
                await step.until.wait()
            body = step.body
            if isinstance(body, (dict, list)):
                data, ctype = json.dumps(body).encode(), "application/json"
            else:
                data = body.encode() if isinstance(body, str) else (body or b"")
                ctype = step.headers.get("Content-Type", "application/json")
            headers = {"Content-Type": ctype, **step.headers}
            return web.Response(status=step.status, body=data, headers=headers)
        if isinstance(step, Drop):
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError  # aiohttp treats this as the handler going away
        if isinstance(step, Hang):
            await asyncio.sleep(step.seconds)
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError
        assert isinstance(step, Stream)
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream",
                                                       "Cache-Control": "no-cache", **step.headers})
        await resp.prepare(request)
        array = step.framing == "json-array"
        end = b"\r\n\r\n" if step.framing == "sse-crlf" else b"\n\n"
        for n, ev in enumerate(step.events):
            if step.delay_s:
                await asyncio.sleep(step.delay_s)
            if step.pause_s and n == step.pause_after:
                await asyncio.sleep(step.pause_s)
            if array:  # Google's separators: "[{…}" then ",\r\n{…}", each element written as it comes
                await resp.write((b"," if n else b"[") + json.dumps(ev, indent=2).encode() + b"\r\n")
            else:
                await resp.write(ev if isinstance(ev, bytes) else b"data: " + json.dumps(ev).encode() + end)
        if array and step.then in ("done", "eof"):
            await resp.write(b"]" if step.events else b"[]")
        elif step.then == "done" and _marked(step, request.path):
            await resp.write(b"data: [DONE]\n\n")
        elif step.then == "drop":
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError
        elif step.then == "stall":
            await asyncio.sleep(3600)
        await resp.write_eof()
        return resp


def _marked(step: Stream, path: str) -> bool:
    """Whether a stream's clean end is ``data: [DONE]``: chat's end marker, which OpenAI's
    Responses API does not send (its streaming reference: typed events, the last
    ``response.completed``, ``response.incomplete`` or ``response.failed``; openai-python's
    Responses stream reads no marker), unless the script asks for it."""
    if step.done_marker is not None:
        return step.done_marker
    return not path.endswith("/responses")


@dataclass(frozen=True)
class GeminiCall:
    """A Gemini request as the answer is chosen for it: the path's model and method, and how a
    stream is framed ("sse-crlf" with ``alt=sse``, else "json-array")."""

    model: str
    stream: bool
    framing: str
    payload: dict[str, Any]


def gemini_framed(step: Step, named: tuple[str, str, str] | None, query: Mapping[str, str]) -> Step:
    """An error answered on a JSON-array stream request comes wrapped in an array, as Google
    answers one (the ``[{"error": …}]`` bodies quoted in google-gemini/gemini-cli#4504)."""
    if named is None:
        return step
    array = named[2] == "streamGenerateContent" and query.get("alt") != "sse"
    if isinstance(step, Stream) and step.framing == "sse":
        # A scripted stream of GenerateContentResponse dicts goes out as this request asked,
        # and never with a [DONE]: the Gemini API has no end marker.
        framing = "json-array" if array else "sse-crlf"
        headers = {"Content-Type": "application/json" if array else "text/event-stream", **step.headers}
        return dataclasses.replace(step, framing=framing, headers=headers,
                                   then="eof" if step.then == "done" else step.then)  # fmt: skip
    if array and isinstance(step, Reply) and step.status >= 400 and isinstance(step.body, dict):
        return dataclasses.replace(step, body=[step.body])
    return step


def gemini_listing(path: str, headers: Mapping[str, str]) -> bool:
    """``GET /v1beta/models[/{id}]``, or ``/v1/models[/{id}]`` from a caller with a Google key
    (the google-genai SDK: the same path is OpenAI's model list)."""
    if path.startswith("/v1beta/models"):
        return True
    return path.startswith("/v1/models") and "x-goog-api-key" in headers


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None
