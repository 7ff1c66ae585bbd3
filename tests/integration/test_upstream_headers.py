"""What the provider's API requires of a request's headers, on every path the gateway writes a
request in that API itself: a chat or Responses client on a Messages-only upstream (Responses
goes Responses → chat → Messages), and ``GET /v1/models`` on such an upstream.

The upstream here is strict the way Anthropic's API is (FakeUpstream records headers but
answers whatever it gets): no ``anthropic-version`` is a 400
(https://docs.anthropic.com/en/api/versioning), a body not sent as ``application/json`` is a
400 and no ``x-api-key`` a 401 (https://docs.anthropic.com/en/api/getting-started).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from tests.fakeupstream import FakeUpstream, anthropic_message, anthropic_stream, named_events


def _anthropic_error(status: int, type_: str, message: str) -> web.Response:
    body = {"type": "error", "error": {"type": type_, "message": message}}
    return web.json_response(body, status=status)


class StrictMessages:
    """A Messages-only upstream that refuses what Anthropic refuses about headers."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, CIMultiDictProxy[str]]] = []
        self.refused: list[str] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> StrictMessages:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def headers(self, path: str) -> list[CIMultiDictProxy[str]]:
        return [h for p, h in self.seen if p == path]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append((request.path, CIMultiDictProxy(CIMultiDict(request.headers))))
        refusal = self._refusal(request, body)
        if refusal is not None:
            self.refused.append(refusal.text or "")
            return refusal
        if request.method == "GET" and request.path == "/v1/models":
            return web.json_response({"data": [{"type": "model", "id": "claude-sonnet-4-5"}], "has_more": False,
                                      "first_id": "claude-sonnet-4-5", "last_id": "claude-sonnet-4-5"})  # fmt: skip
        payload = json.loads(body)
        if not payload.get("stream"):
            return web.json_response(anthropic_message(payload["model"]))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in anthropic_stream(payload["model"]):
            await resp.write(event)
        await resp.write_eof()
        return resp

    @staticmethod
    def _refusal(request: web.Request, body: bytes) -> web.Response | None:
        h = request.headers
        if "x-api-key" not in h:
            return _anthropic_error(401, "authentication_error", "x-api-key header is required")
        if "anthropic-version" not in h:
            return _anthropic_error(400, "invalid_request_error", "anthropic-version: header is required")
        if body and h.get("Content-Type", "").split(";")[0].strip().lower() != "application/json":
            return _anthropic_error(400, "invalid_request_error", "content-type must be application/json")
        return None


@pytest.fixture
async def strict() -> AsyncIterator[StrictMessages]:
    up = await StrictMessages().start()
    yield up
    await up.close()


def _only_messages(strict: StrictMessages) -> str:
    return (f"  - {{name: anthropic, base_url: '{strict.url}', api_key: sk-ant, key_header: x-api-key, "
            "apis: [messages], model_map: {'*': claude-sonnet-4-5}}\n")  # fmt: skip


CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "gpt-5-codex", "input": "hi"}


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "stream"])
async def test_a_chat_client_on_a_messages_upstream_sends_the_anthropic_version(
    make_gateway, strict: StrictMessages, stream: bool
) -> None:
    gw = await make_gateway(upstreams=_only_messages(strict))
    status, headers, body = await gw.chat({**CHAT, "stream": stream})
    assert strict.refused == []
    assert status == 200, body
    assert headers["x-llm-translated"] == "chat->messages"
    [sent] = strict.headers("/v1/messages")
    assert sent["anthropic-version"] == "2023-06-01"
    assert sent["Content-Type"] == "application/json"


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "stream"])
async def test_a_responses_client_composed_through_chat_sends_the_anthropic_version(
    make_gateway, strict: StrictMessages, stream: bool
) -> None:
    gw = await make_gateway(upstreams=_only_messages(strict))
    status, headers, body = await gw.responses({**RESPONSES, "stream": stream})
    assert strict.refused == []
    assert status == 200, body
    assert headers["x-llm-translated"] == "responses->messages"
    if stream:
        assert named_events(body)[-1][0] == "response.completed"
    [sent] = strict.headers("/v1/messages")
    assert sent["anthropic-version"] == "2023-06-01"


async def test_the_clients_own_version_and_betas_are_sent_as_they_came(make_gateway, strict: StrictMessages) -> None:
    gw = await make_gateway(upstreams=_only_messages(strict))
    asked = {"anthropic-version": "2023-01-01", "anthropic-beta": "context-1m-2025-08-07"}
    status, _, body = await gw.chat(CHAT, headers=asked)
    assert status == 200, body
    [sent] = strict.headers("/v1/messages")
    assert sent.getall("anthropic-version") == ["2023-01-01"]
    assert sent["anthropic-beta"] == "context-1m-2025-08-07"


async def test_a_translated_body_is_sent_as_json_whatever_type_the_client_named(
    make_gateway, strict: StrictMessages
) -> None:
    # curl -d sends application/x-www-form-urlencoded; the gateway reads JSON whatever the type,
    # and the body it writes in another API is JSON.
    gw = await make_gateway(upstreams=_only_messages(strict))
    status, _, body = await gw.chat(data=json.dumps(CHAT).encode(),
                                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 200, body
    [sent] = strict.headers("/v1/messages")
    assert sent.getall("Content-Type") == ["application/json"]


async def test_what_belongs_to_another_api_stays_with_the_client(make_gateway, strict: StrictMessages) -> None:
    # An OpenAI organization or project id is nothing Anthropic should learn.
    gw = await make_gateway(upstreams=_only_messages(strict))
    status, _, _ = await gw.chat(CHAT, headers={"OpenAI-Organization": "org-1", "OpenAI-Project": "proj-1",
                                                "X-Custom": "kept"})  # fmt: skip
    assert status == 200
    [sent] = strict.headers("/v1/messages")
    assert "openai-organization" not in sent and "openai-project" not in sent
    assert sent["x-custom"] == "kept"


async def test_a_messages_client_on_a_chat_upstream_sends_no_anthropic_headers(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    status, _, _ = await gw.messages(headers={"anthropic-beta": "interleaved-thinking-2025-05-14"})
    assert status == 200
    [sent] = gw.fake.chat_requests()
    assert not [k for k in sent.headers if k.lower().startswith("anthropic-")]


@pytest.mark.parametrize("merged", [False, True], ids=["one-upstream", "merged"])
async def test_listing_models_on_a_messages_upstream_sends_the_anthropic_version(
    make_gateway, strict: StrictMessages, merged: bool
) -> None:
    # An OpenAI client listing models (Codex, the openai SDK) sends no anthropic-version.
    upstreams = _only_messages(strict)
    openai = await FakeUpstream().start()  # a second upstream, OpenAI's, for the merged list
    if merged:
        upstreams += f"  - {{name: openai, base_url: '{openai.url}'}}\n"
    gw = await make_gateway(upstreams=upstreams, fake=openai)
    async with gw.session.get(gw.base + "/v1/models", headers={"Authorization": "Bearer sk-client"}) as r:
        status, doc = r.status, await r.json()
    assert strict.refused == []
    assert status == 200
    assert "claude-sonnet-4-5" in [m["id"] for m in doc["data"]]
    [sent] = strict.headers("/v1/models")
    assert sent["anthropic-version"] == "2023-06-01"
    await openai.close()

