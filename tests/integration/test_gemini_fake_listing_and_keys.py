"""The Gemini API's side endpoints and errors against the fake as a Gemini upstream
(``gateway/fake``, which answers and refuses as Google does): the model list read from
Google's ``{"models": [...]}`` for every caller, ``countTokens`` with a Gemini client's
``?key=`` on a pass-through, and a spent per-day quota in the status Google's body states."""

from __future__ import annotations

import json

import anthropic
import openai

from tests.integration.conftest import Gateway, MakeGateway

COUNT = "/v1beta/models/gemini-2.5-flash:countTokens"
GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
HELLO = {"contents": [{"role": "user", "parts": [{"text": "hello there"}]}]}


async def keyed(make_gateway: MakeGateway) -> Gateway:
    return await make_gateway(upstream_yaml=", apis: [gemini], api_key: AIza-upkey")


async def pass_through(make_gateway: MakeGateway) -> Gateway:
    """No api_key: the client's own key goes on; the fake refuses a request without one (403)."""
    gw = await make_gateway(upstream_yaml=", apis: [gemini]")
    gw.fake.require_key = True
    return gw


async def test_a_gemini_upstreams_models_are_listed_to_a_gemini_caller_as_google_lists_them(make_gateway) -> None:
    """Google's ListModelsResponse is ``{"models": [...], "nextPageToken"}``; read as if it had
    to be OpenAI's ``data``, the list came back empty (``{"models": []}``)."""
    gw = await keyed(make_gateway)
    async with gw.session.get(gw.base + "/v1beta/models?key=d") as r:
        assert r.status == 200
        listed = await r.json()
    [model] = listed["models"]
    assert model["name"] == "models/gemini-2.5-flash"
    assert model["inputTokenLimit"] == 1048576  # the upstream's own entry, as it came
    [asked] = [q for q in gw.fake.requests if q.path.endswith("/models")]
    # Google lists 50 a page unless asked for more (ListModelsRequest.page_size), and the key
    # the gateway holds goes in the header, never the URL.
    assert asked.query == "pageSize=1000"
    assert asked.headers["x-goog-api-key"] == "AIza-upkey"


async def test_a_gemini_upstreams_models_reach_openai_and_anthropic_sdks_in_their_shapes(make_gateway) -> None:
    gw = await keyed(make_gateway)
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client", max_retries=0)
    claude = anthropic.AsyncAnthropic(base_url=gw.base, api_key="sk-ant-client", max_retries=0)
    try:
        openai_ids = [m.id async for m in client.models.list()]
        anthropic_models = [m async for m in claude.models.list()]
    finally:
        await client.close()
        await claude.close()
    assert openai_ids == ["gemini-2.5-flash"]
    assert [(m.id, m.display_name) for m in anthropic_models] == [("gemini-2.5-flash", "gemini-2.5-flash")]
    asked = [q for q in gw.fake.requests if q.path.endswith("/models")]
    # Claude Code's ?limit=1000 is Anthropic's paging, which means nothing to Google.
    assert [q.query for q in asked] == ["pageSize=1000", "pageSize=1000"]


async def test_count_tokens_moves_a_query_key_to_the_header_on_a_pass_through(make_gateway) -> None:
    """docs/security.md: a Gemini client's ``?key=`` "has its key moved into the upstream's
    key_header". generateContent did; countTokens sent no key and got Google's 403."""
    gw = await pass_through(make_gateway)
    async with gw.session.post(gw.base + COUNT + "?key=okkey", json=HELLO) as r:
        body = await r.read()
        assert r.status == 200, body
    assert json.loads(body)["totalTokens"] > 0
    [asked] = gw.fake.requests
    assert asked.path == "/v1/models/gemini-2.5-flash:countTokens"
    assert asked.headers["x-goog-api-key"] == "okkey" and "okkey" not in asked.query


async def test_a_spent_daily_quota_reaches_a_gemini_client_as_the_429_googles_body_states(make_gateway) -> None:
    """Google's per-day RESOURCE_EXHAUSTED came as HTTP 402 under a body saying ``"code": 429``.
    Its own client reads the quota's kind in the body (Gemini CLI stops on a per-day
    QuotaFailure) and google-genai retries nothing by default; the class stays ``budget``."""
    gw = await pass_through(make_gateway)
    gw.fake.keys.exhaust("exh1")
    async with gw.session.post(gw.base + GENERATE, json=HELLO, headers={"x-goog-api-key": "exh1"}) as r:
        body = await r.read()
        status, headers = r.status, r.headers
    err = json.loads(body)["error"]
    assert (status, err["code"], err["status"]) == (429, 429, "RESOURCE_EXHAUSTED")
    assert "GenerateRequestsPerDayPerProjectPerModel-FreeTier" in body.decode()  # Google's body, untouched
    assert headers["x-llm-error-type"] == "budget" and headers["x-should-retry"] == "false"
    # A client of another API gets the gateway's budget answer in its own envelope: a 402.
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="exh1", max_retries=0)
    try:
        await client.chat.completions.create(model="gemini-2.5-flash", messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("the spent quota was answered")
    except openai.APIStatusError as e:
        assert e.status_code == 402
    finally:
        await client.close()
